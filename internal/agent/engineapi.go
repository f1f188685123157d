package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpufleet/gpufleet/internal/api"
)

// The engine API: the Docker Engine API over the engine's unix socket
// (docker's daemon at /var/run/docker.sock; podman serves the same API
// with `podman system service`, /run/podman/podman.sock). The agent uses
// it when --engine-socket is set, as on Kubernetes, where its image has
// no engine CLI and the node's socket is mounted into its pod. Version
// 1.41 is docker 20.10's and every podman 4's.
const engineAPIVersion = "/v1.41"

// engineAPI is a client of the Docker Engine API on a unix socket.
type engineAPI struct {
	socket string
	hc     *http.Client
}

func newEngineAPI(socket string) *engineAPI {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &engineAPI{socket: socket, hc: &http.Client{Transport: tr}}
}

// do sends a request and returns the response, or an error with the
// engine's message for a status of 400 and up.
func (e *engineAPI) do(ctx context.Context, method, path string, q url.Values, body any, hdr http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://engine" + engineAPIVersion + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("engine socket %s: %w", e.socket, err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		var m struct {
			Message string `json:"message"`
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(data, &m) != nil || m.Message == "" {
			m.Message = strings.TrimSpace(string(data))
		}
		return nil, &engineError{status: resp.StatusCode, msg: m.Message}
	}
	return resp, nil
}

type engineError struct {
	status int
	msg    string
}

func (e *engineError) Error() string { return fmt.Sprintf("engine: %d %s", e.status, e.msg) }

func isNotFound(err error) bool {
	var ee *engineError
	return errors.As(err, &ee) && ee.status == http.StatusNotFound
}

// call does a request and discards its body.
func (e *engineAPI) call(ctx context.Context, method, path string, q url.Values, body any) error {
	resp, err := e.do(ctx, method, path, q, body, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// Version is the engine's version.
func (e *engineAPI) Version(ctx context.Context) (string, error) {
	resp, err := e.do(ctx, http.MethodGet, "/version", nil, nil, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct{ Version string }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", err
	}
	return v.Version, nil
}

// ImageExists reports whether the engine has the image.
func (e *engineAPI) ImageExists(ctx context.Context, ref string) (bool, error) {
	err := e.call(ctx, http.MethodGet, "/images/"+url.PathEscape(ref)+"/json", nil, nil)
	if isNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// Pull pulls ref, calling progress with each status line the engine
// streams, and fails with the engine's error for the image.
func (e *engineAPI) Pull(ctx context.Context, ref string, auth *api.RegistryAuth, progress func(string)) error {
	name, tag := ref, ""
	if i := strings.LastIndexAny(ref, ":@"); i > strings.LastIndex(ref, "/") {
		name, tag = ref[:i], strings.TrimPrefix(strings.TrimPrefix(ref[i:], ":"), "@")
		if ref[i] == '@' {
			name, tag = ref, ""
		}
	}
	q := url.Values{"fromImage": {name}}
	if tag != "" {
		q.Set("tag", tag)
	}
	hdr := http.Header{}
	if auth != nil {
		b, _ := json.Marshal(map[string]string{"username": auth.Username, "password": auth.Password, "serveraddress": auth.Registry})
		hdr.Set("X-Registry-Auth", base64.URLEncoding.EncodeToString(b))
	}
	resp, err := e.do(ctx, http.MethodPost, "/images/create", q, nil, hdr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m struct {
			Status, Progress, ID, Error string
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
		progress(strings.TrimSpace(strings.Join([]string{m.ID, m.Status, m.Progress}, " ")))
	}
}

// createBody is the Docker Engine API's container create request, the
// part gpufleet sets.
type createBody struct {
	Image      string            `json:"Image"`
	Entrypoint []string          `json:"Entrypoint"`
	Cmd        []string          `json:"Cmd"`
	Env        []string          `json:"Env,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels"`
	HostConfig hostConfig        `json:"HostConfig"`
}

type hostConfig struct {
	Init           bool            `json:"Init"`
	Devices        []deviceMapping `json:"Devices,omitempty"`
	DeviceRequests []deviceRequest `json:"DeviceRequests,omitempty"`
	Mounts         []apiMount      `json:"Mounts,omitempty"`
	ShmSize        int64           `json:"ShmSize,omitempty"`
	NetworkMode    string          `json:"NetworkMode,omitempty"`
	Ulimits        []apiUlimit     `json:"Ulimits,omitempty"`
	NanoCPUs       int64           `json:"NanoCpus,omitempty"`
	Memory         int64           `json:"Memory,omitempty"`
	SecurityOpt    []string        `json:"SecurityOpt"`
}

type deviceMapping struct {
	PathOnHost, PathInContainer, CgroupPermissions string
}

type deviceRequest struct {
	Driver    string   `json:"Driver"`
	DeviceIDs []string `json:"DeviceIDs"`
}

type apiMount struct {
	Type     string `json:"Type"`
	Source   string `json:"Source"`
	Target   string `json:"Target"`
	ReadOnly bool   `json:"ReadOnly"`
}

type apiUlimit struct {
	Name       string
	Soft, Hard int64
}

// containerCreate is the create request of a container attempt, the same
// container containerCommand runs through the CLI: CDI names become a
// CDI device request (docker 25 and later), host:container paths device
// mappings.
func containerCreate(as api.Assignment, o containerOpts) createBody {
	b := createBody{Image: as.Image, Entrypoint: as.Command[:1], Cmd: append([]string{}, as.Command[1:]...), Env: o.Env, WorkingDir: as.Workdir,
		Labels:     map[string]string{"gpufleet.attempt": as.AttemptID, "gpufleet.job": as.JobID, "gpufleet.team": as.Team, agentLabel: o.Agent},
		HostConfig: hostConfig{Init: true, ShmSize: int64(as.ShmSize), Memory: o.Memory, SecurityOpt: []string{"no-new-privileges"}}}
	var cdi []string
	for _, d := range o.Devices {
		host, ctr, ok := strings.Cut(d, ":")
		if !ok || !strings.HasPrefix(d, "/") {
			cdi = append(cdi, d)
			continue
		}
		b.HostConfig.Devices = append(b.HostConfig.Devices, deviceMapping{PathOnHost: host, PathInContainer: ctr, CgroupPermissions: "rwm"})
	}
	if len(cdi) > 0 {
		b.HostConfig.DeviceRequests = []deviceRequest{{Driver: "cdi", DeviceIDs: cdi}}
	}
	for _, m := range as.Mounts {
		b.HostConfig.Mounts = append(b.HostConfig.Mounts, apiMount{Type: "bind", Source: m.Source, Target: m.Target, ReadOnly: !m.ReadWrite})
	}
	if as.HostNetwork || as.NNodes > 1 {
		b.HostConfig.NetworkMode = "host"
	}
	for _, u := range o.Ulimits {
		name, v, _ := strings.Cut(u, "=")
		soft, hard, _ := strings.Cut(v, ":")
		s, err1 := strconv.ParseInt(soft, 10, 64)
		h, err2 := strconv.ParseInt(hard, 10, 64)
		if err1 == nil && err2 == nil {
			b.HostConfig.Ulimits = append(b.HostConfig.Ulimits, apiUlimit{Name: name, Soft: s, Hard: h})
		}
	}
	if o.CPUMax != "" {
		var quota, period float64
		if _, err := fmt.Sscanf(o.CPUMax, "%g %g", &quota, &period); err == nil && period > 0 {
			b.HostConfig.NanoCPUs = int64(quota / period * 1e9)
		}
	}
	return b
}

// AttemptAttach is `gpufleet agent attach --dir DIR`, what the supervisor
// runs for a container attempt on an engine socket, in the place of the
// engine CLI's `run`: it creates and starts the container, copies its
// output to its own (the attempt's log), passes the stop signals it
// receives on to the container (the engine's init delivers them), waits
// for it to end, removes it, and exits with its exit code.
func AttemptAttach(dir string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "gpufleet: %v\n", err)
		return 125
	}
	var spec superviseSpec
	if err := readJSON(filepath.Join(dir, specFile), &spec); err != nil {
		return fail(err)
	}
	cs := spec.Container
	if cs == nil || cs.Socket == "" || cs.Create == nil {
		return fail(errors.New("no container on an engine socket in the spec"))
	}
	eng := newEngineAPI(cs.Socket)
	ctx := context.Background()
	name := containerName(spec.AttemptID)
	resp, err := eng.do(ctx, http.MethodPost, "/containers/create", url.Values{"name": {name}}, cs.Create, nil)
	if err != nil {
		return fail(fmt.Errorf("create container %s: %w", name, err))
	}
	var created struct{ ID string }
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if err != nil || created.ID == "" {
		return fail(fmt.Errorf("create container %s: %v", name, err))
	}
	defer func() {
		_ = eng.call(context.Background(), http.MethodDelete, "/containers/"+created.ID, url.Values{"force": {"1"}}, nil)
	}()
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
		syscall.SIGXCPU, syscall.SIGWINCH, syscall.SIGPWR)
	go func() {
		for s := range sigs {
			_ = eng.call(ctx, http.MethodPost, "/containers/"+created.ID+"/kill", url.Values{"signal": {signalName(s.(syscall.Signal))}}, nil)
		}
	}()
	// Attach before the start, as `docker run` does, so that no output
	// is lost: logs followed after the start missed the first lines of a
	// container that wrote them at once. An engine that refuses the
	// attach gets its logs followed instead.
	attached, attachErr := eng.do(ctx, http.MethodPost, "/containers/"+created.ID+"/attach",
		url.Values{"stream": {"1"}, "stdout": {"1"}, "stderr": {"1"}}, nil, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"tcp"}})
	if err := eng.call(ctx, http.MethodPost, "/containers/"+created.ID+"/start", nil, nil); err != nil {
		return fail(fmt.Errorf("start container %s: %w", name, err))
	}
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		out := attached
		if attachErr != nil {
			var err error
			if out, err = eng.do(ctx, http.MethodGet, "/containers/"+created.ID+"/logs", url.Values{"follow": {"1"}, "stdout": {"1"}, "stderr": {"1"}}, nil, nil); err != nil {
				fmt.Fprintf(os.Stderr, "gpufleet: container logs: %v (attach: %v)\n", err, attachErr)
				return
			}
		}
		defer out.Body.Close()
		_ = demux(out.Body, os.Stdout, os.Stderr)
	}()
	resp, err = eng.do(ctx, http.MethodPost, "/containers/"+created.ID+"/wait", nil, nil, nil)
	if err != nil {
		return fail(fmt.Errorf("wait for container %s: %w", name, err))
	}
	var w struct{ StatusCode int }
	err = json.NewDecoder(resp.Body).Decode(&w)
	resp.Body.Close()
	if err != nil {
		return fail(fmt.Errorf("wait for container %s: %w", name, err))
	}
	select {
	case <-logsDone:
	case <-time.After(5 * time.Second):
	}
	return w.StatusCode
}

// signalName is a signal's name without "SIG", as the engine API takes it.
func signalName(s syscall.Signal) string { return strings.TrimPrefix(sigName(s), "SIG") }

// sigName is a signal's name as kill(1) and the stop_signal field write
// it ("SIGKILL"), or its number for one without a name. (Go's
// Signal.String gives a description, "killed", not a name.)
func sigName(s syscall.Signal) string {
	if name := unix.SignalName(s); name != "" {
		return name
	}
	return strconv.Itoa(int(s))
}

// demux copies the engine's multiplexed log stream (a container without a
// TTY: 8-byte frame headers, stream 1 stdout, 2 stderr) to stdout and
// stderr; a stream without frame headers is copied as it is.
func demux(r io.Reader, stdout, stderr io.Writer) error {
	br := bufio.NewReader(r)
	hdr, err := br.Peek(8)
	if err != nil && len(hdr) == 0 {
		return nil
	}
	if len(hdr) < 8 || hdr[0] > 2 || hdr[1] != 0 || hdr[2] != 0 || hdr[3] != 0 {
		_, err := io.Copy(stdout, br)
		return err
	}
	var h [8]byte
	for {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		w := stdout
		if h[0] == 2 {
			w = stderr
		}
		if _, err := io.CopyN(w, br, int64(binary.BigEndian.Uint32(h[4:]))); err != nil {
			return err
		}
	}
}

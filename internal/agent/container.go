package agent

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// Runtime is how the agent runs attempts: bare processes, or containers
// through podman or docker.
type Runtime string

// Runtimes.
const (
	RuntimeProcess Runtime = "process"
	RuntimePodman  Runtime = "podman"
	RuntimeDocker  Runtime = "docker"
)

// ParseRuntime reads --runtime: process, podman or docker.
func ParseRuntime(s string) (Runtime, error) {
	switch r := Runtime(strings.ToLower(strings.TrimSpace(s))); r {
	case RuntimeProcess, RuntimePodman, RuntimeDocker:
		return r, nil
	}
	return "", fmt.Errorf("--runtime %q: expected process, podman or docker", s)
}

// Containers reports whether r runs images.
func (r Runtime) Containers() bool { return r == RuntimePodman || r == RuntimeDocker }

// Engine is a container engine the agent found: its binary and version,
// and the OCI runtime podman uses.
type Engine struct {
	Runtime Runtime `json:"runtime"`
	Path    string  `json:"path"`
	Version string  `json:"version"`
	// OCIRuntime is podman's --runtime (runc: crun refuses hosts with the
	// hybrid cgroup layout); empty for docker, whose daemon chooses.
	OCIRuntime string `json:"oci_runtime,omitempty"`
	// Socket, when set, is the engine's API socket, which the agent talks
	// to instead of running its CLI (engineapi.go).
	Socket string `json:"socket,omitempty"`
}

// DetectEngine finds r's binary on PATH and asks it for its version
// (docker: the daemon's, so a client without a daemon is refused).
// ociRuntime is podman's --runtime ("" picks runc when it is installed).
func DetectEngine(ctx context.Context, r Runtime, ociRuntime, socket string) (Engine, error) {
	if socket != "" {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		v, err := newEngineAPI(socket).Version(ctx)
		if err != nil {
			return Engine{}, fmt.Errorf("runtime %s: --engine-socket %s: %w", r, socket, err)
		}
		return Engine{Runtime: r, Socket: socket, Version: v}, nil
	}
	path, err := exec.LookPath(string(r))
	if err != nil {
		return Engine{}, fmt.Errorf("runtime %s: %w (install it: apt-get install %s)", r, err, map[Runtime]string{RuntimePodman: "podman runc", RuntimeDocker: "docker.io"}[r])
	}
	e := Engine{Runtime: r, Path: path}
	if r == RuntimePodman {
		e.OCIRuntime = ociRuntime
		if e.OCIRuntime == "" {
			if p, err := exec.LookPath("runc"); err == nil {
				e.OCIRuntime = p
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	format := "{{.Server.Version}}"
	if r == RuntimePodman {
		format = "{{.Client.Version}}"
	}
	out, err := exec.CommandContext(ctx, path, append(e.global(), "version", "--format", format)...).CombinedOutput()
	if err != nil {
		return Engine{}, fmt.Errorf("runtime %s: %s version: %w: %s", r, path, err, strings.TrimSpace(string(out)))
	}
	e.Version = strings.TrimSpace(string(out))
	return e, nil
}

// global is the engine's options before its command.
func (e Engine) global() []string {
	if e.Runtime == RuntimePodman && e.OCIRuntime != "" {
		return []string{"--runtime", e.OCIRuntime}
	}
	return nil
}

// containerName is an attempt's container name.
func containerName(attempt string) string { return "gpufleet-" + attempt }

// containerSpec is what the supervisor runs for a container attempt: the
// pull, the run and the cleanup, each a full argv.
type containerSpec struct {
	Image  string              `json:"image"`
	Policy gpufleet.PullPolicy `json:"pull_policy"`
	// Exists, Pull, Run and Remove are engine command lines: does the
	// node have the image, pull it, run the attempt, remove its container.
	Exists []string `json:"exists"`
	Pull   []string `json:"pull"`
	Run    []string `json:"run"`
	Remove []string `json:"remove"`
	// Socket and Create, on an engine socket: the API to use and the
	// container to create (Run is then `gpufleet agent attach`).
	Socket string      `json:"socket,omitempty"`
	Create *createBody `json:"create,omitempty"`
}

// containerOpts is what the runner knows beyond the assignment.
type containerOpts struct {
	Env      []string // the attempt's environment, KEY=VALUE
	Devices  []string // --device values: CDI names or HOST:CONTAINER paths
	Ulimits  []string // --ulimit values
	CPUMax   string   // "QUOTA PERIOD" or ""
	Memory   int64    // bytes, 0: none
	AuthFile string   // registry credentials for the pull, or ""
	Agent    string   // the agent's data directory (agentLabel)
}

// containerCommand builds the engine command lines of a container attempt.
// The job's command replaces the image's entrypoint and command, as a
// Kubernetes container's command does; the engine's init (--init) is PID 1,
// so that a program that handles only SIGTERM still ends on it, and the
// attached CLI passes the agent's signals on to it (--sig-proxy).
func containerCommand(e Engine, as api.Assignment, o containerOpts) containerSpec {
	g := e.global()
	cs := containerSpec{Image: as.Image, Policy: as.ImagePullPolicy.Or()}
	name := containerName(as.AttemptID)
	if e.Runtime == RuntimePodman {
		cs.Exists = append(append([]string{e.Path}, g...), "image", "exists", as.Image)
		cs.Remove = append(append([]string{e.Path}, g...), "rm", "--force", "--time", "0", "--ignore", name)
	} else {
		cs.Exists = []string{e.Path, "image", "inspect", "--format", "{{.Id}}", as.Image}
		cs.Remove = []string{e.Path, "rm", "--force", name}
	}
	cs.Pull = append([]string{e.Path}, g...)
	switch {
	case o.AuthFile != "" && e.Runtime == RuntimePodman:
		cs.Pull = append(cs.Pull, "pull", "--authfile", o.AuthFile)
	case o.AuthFile != "":
		cs.Pull = append(cs.Pull, "--config", filepath.Dir(o.AuthFile), "pull") // docker reads DIR/config.json
	default:
		cs.Pull = append(cs.Pull, "pull")
	}
	cs.Pull = append(cs.Pull, as.Image)
	run := append(append([]string{e.Path}, g...), "run", "--name", name, "--rm", "--init", "--sig-proxy=true", "--pull", "never",
		"--label", "gpufleet.attempt="+as.AttemptID, "--label", "gpufleet.job="+as.JobID, "--label", "gpufleet.team="+as.Team,
		"--label", agentLabel+"="+o.Agent,
		"--security-opt", "no-new-privileges")
	for _, kv := range o.Env {
		run = append(run, "--env", kv)
	}
	if as.Workdir != "" {
		run = append(run, "--workdir", as.Workdir)
	}
	for _, d := range o.Devices {
		run = append(run, "--device", d)
	}
	for _, m := range as.Mounts {
		v := "type=bind,source=" + m.Source + ",target=" + m.Target
		if !m.ReadWrite {
			v += ",readonly"
		}
		run = append(run, "--mount", v)
	}
	if as.ShmSize > 0 {
		run = append(run, "--shm-size", strconv.FormatInt(int64(as.ShmSize), 10)+"b")
	}
	if as.HostNetwork || as.NNodes > 1 {
		run = append(run, "--network", "host")
	}
	for _, u := range o.Ulimits {
		run = append(run, "--ulimit", u)
	}
	if o.CPUMax != "" {
		var quota, period float64
		if _, err := fmt.Sscanf(o.CPUMax, "%g %g", &quota, &period); err == nil && period > 0 {
			run = append(run, "--cpus", strconv.FormatFloat(quota/period, 'f', -1, 64))
		}
	}
	if o.Memory > 0 {
		run = append(run, "--memory", strconv.FormatInt(o.Memory, 10)+"b")
	}
	run = append(run, "--entrypoint", as.Command[0], as.Image)
	cs.Run = append(run, as.Command[1:]...)
	return cs
}

// containerEnv is what a container attempt's environment holds: the job's
// variables and what gpufleet sets, without the host's PATH, HOME and
// user (the image has its own).
func containerEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "HOME", "USER", "LOGNAME", "PWD", "LANG":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// DefaultUlimits are the container limits the agent asks for: locked
// memory as high as the agent's own hard limit (NCCL and RDMA pin
// buffers; "unlimited" on a GPU node set up for them), and open files
// and processes at the agent's hard limits. The engine would otherwise
// ask for more than a process without CAP_SYS_RESOURCE may set (podman as
// root asks for 1048576 files), and the container would not start.
func DefaultUlimits() []string {
	var out []string
	for _, l := range []struct {
		name string
		res  int
		cap  uint64
	}{{"memlock", 8 /* RLIMIT_MEMLOCK */, 0}, {"nofile", syscall.RLIMIT_NOFILE, 0}, {"nproc", 6 /* RLIMIT_NPROC */, 32768}} {
		var rl syscall.Rlimit
		if err := syscall.Getrlimit(l.res, &rl); err != nil {
			continue
		}
		v := "-1"
		if rl.Max != ^uint64(0) {
			v = strconv.FormatUint(rl.Max, 10)
		}
		if l.cap > 0 && (v == "-1" || rl.Max > l.cap) {
			// podman runs its OCI runtime with at most this many processes
			// as root (its own default), and no container may have more.
			v = strconv.FormatUint(l.cap, 10)
		}
		out = append(out, l.name+"="+v+":"+v)
	}
	return out
}

// pullRecord is an image pull as the supervisor reports it in pull.json.
type pullRecord struct {
	Image      string     `json:"image"`
	State      string     `json:"state"` // pulling, pulled, present, failed
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Progress is the last line of the engine's output.
	Progress string `json:"progress,omitempty"`
	Layers   int    `json:"layers,omitempty"`
	Error    string `json:"error,omitempty"`
}

const pullFileName = "pull.json"

// ensureImage makes the image present per the pull policy, writing its
// progress to pull.json and the attempt's log. It returns an error naming
// the image when the image cannot be had, or ctx's error when the attempt
// was stopped during the pull.
func ensureImage(ctx context.Context, dir string, cs *containerSpec, log io.Writer) error {
	path := filepath.Join(dir, pullFileName)
	var eng *engineAPI
	present := false
	if cs.Socket != "" {
		eng = newEngineAPI(cs.Socket)
		ok, err := eng.ImageExists(ctx, cs.Image)
		if err != nil {
			return fmt.Errorf("image %s: %w", cs.Image, err)
		}
		present = ok
	} else {
		present = exec.CommandContext(ctx, cs.Exists[0], cs.Exists[1:]...).Run() == nil
	}
	rec := pullRecord{Image: cs.Image, StartedAt: time.Now().UTC()}
	switch {
	case cs.Policy == gpufleet.PullNever && !present:
		now := time.Now().UTC()
		rec.State, rec.FinishedAt, rec.Error = "failed", &now, fmt.Sprintf("image %s is not on the node and its pull policy is never", cs.Image)
		_ = writeJSONAtomic(path, rec, 0o644)
		return errors.New(rec.Error)
	case present && cs.Policy != gpufleet.PullAlways:
		rec.State, rec.FinishedAt = "present", &rec.StartedAt
		return writeJSONAtomic(path, rec, 0o644)
	}
	rec.State = "pulling"
	_ = writeJSONAtomic(path, rec, 0o644)
	fmt.Fprintf(log, "gpufleet: pulling image %s\n", cs.Image)
	if eng != nil {
		last := time.Time{}
		err := eng.Pull(ctx, cs.Image, readRegistryAuth(dir), func(line string) {
			fmt.Fprintf(log, "gpufleet: pull: %s\n", line)
			if strings.Contains(line, "Pull complete") || strings.HasPrefix(line, "Copying blob") {
				rec.Layers++
			}
			rec.Progress = line
			if time.Since(last) > time.Second {
				_ = writeJSONAtomic(path, rec, 0o644)
				last = time.Now()
			}
		})
		now := time.Now().UTC()
		rec.FinishedAt = &now
		if err != nil {
			rec.State, rec.Error = "failed", fmt.Sprintf("pull image %s: %v", cs.Image, err)
			_ = writeJSONAtomic(path, rec, 0o644)
			return errors.New(rec.Error)
		}
		rec.State = "pulled"
		return writeJSONAtomic(path, rec, 0o644)
	}
	cmd := exec.CommandContext(ctx, cs.Pull[0], cs.Pull[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pull image %s: %w", cs.Image, err)
	}
	sc := bufio.NewScanner(out)
	last := time.Time{}
	var tail []string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		fmt.Fprintf(log, "gpufleet: pull: %s\n", line)
		if strings.HasPrefix(line, "Copying blob") || strings.Contains(line, "Pull complete") {
			rec.Layers++
		}
		rec.Progress = line
		tail = append(tail, line)
		if len(tail) > 3 {
			tail = tail[1:]
		}
		if time.Since(last) > time.Second {
			_ = writeJSONAtomic(path, rec, 0o644)
			last = time.Now()
		}
	}
	werr := cmd.Wait()
	now := time.Now().UTC()
	rec.FinishedAt = &now
	if werr != nil {
		// The engine's own error line says why; its retry warnings before it
		// are in the attempt's log.
		why := strings.Join(tail, "; ")
		for _, l := range tail {
			if strings.HasPrefix(l, "Error") {
				why = l
			}
		}
		rec.State, rec.Error = "failed", fmt.Sprintf("pull image %s: %v: %s", cs.Image, werr, why)
		_ = writeJSONAtomic(path, rec, 0o644)
		return errors.New(rec.Error)
	}
	rec.State = "pulled"
	return writeJSONAtomic(path, rec, 0o644)
}

// The registry login of an attempt: DIR/auth/config.json, the format
// podman's --authfile and docker's --config DIR both read.
const (
	authDir  = "auth"
	authFile = "config.json"
)

// writeRegistryAuth writes an attempt's registry login, 0600 in a 0700
// directory, as {"auths": {REGISTRY: {"auth": base64(USER:PASSWORD)}}}.
func writeRegistryAuth(dir string, a api.RegistryAuth) error {
	d := filepath.Join(dir, authDir)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	cfg := map[string]map[string]map[string]string{"auths": {a.Registry: {"auth": base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Password))}}}
	return writeJSONAtomic(filepath.Join(d, authFile), cfg, 0o600)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// readRegistryAuth reads back the login writeRegistryAuth wrote, for a
// pull through the engine API; nil when there is none.
func readRegistryAuth(dir string) *api.RegistryAuth {
	var cfg struct {
		Auths map[string]struct {
			Auth string `json:"auth"`
		} `json:"auths"`
	}
	if err := readJSON(filepath.Join(dir, authDir, authFile), &cfg); err != nil {
		return nil
	}
	for reg, a := range cfg.Auths {
		b, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil {
			return nil
		}
		user, pass, _ := strings.Cut(string(b), ":")
		return &api.RegistryAuth{Registry: reg, Username: user, Password: pass}
	}
	return nil
}

// agentLabel marks a container with the data directory of the agent that
// made it, so that an agent reaps only its own (two agents may share an
// engine: gpufleet dev's nodes do).
const agentLabel = "gpufleet.agent"

// listAttempts lists the names of the containers of this engine that the
// agent with data directory dataDir made.
func (e Engine) listAttempts(ctx context.Context, dataDir string) ([]string, error) {
	filter := agentLabel + "=" + dataDir
	if e.Socket != "" {
		f, _ := json.Marshal(map[string][]string{"label": {filter}})
		resp, err := newEngineAPI(e.Socket).do(ctx, http.MethodGet, "/containers/json", url.Values{"all": {"1"}, "filters": {string(f)}}, nil, nil)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var cs []struct{ Names []string }
		if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
			return nil, err
		}
		var out []string
		for _, c := range cs {
			for _, n := range c.Names {
				out = append(out, strings.TrimPrefix(n, "/"))
			}
		}
		return out, nil
	}
	out, err := exec.CommandContext(ctx, e.Path, append(e.global(), "ps", "-a", "--filter", "label="+filter, "--format", "{{.Names}}")...).Output()
	if err != nil {
		return nil, fmt.Errorf("%s ps: %w", e.Path, err)
	}
	return strings.Fields(string(out)), nil
}

// remove removes a container by name, running or not; one that is not
// there is no error.
func (e Engine) remove(ctx context.Context, name string) error {
	if e.Socket != "" {
		err := newEngineAPI(e.Socket).call(ctx, http.MethodDelete, "/containers/"+name, url.Values{"force": {"1"}}, nil)
		if isNotFound(err) {
			return nil
		}
		return err
	}
	args := append(e.global(), "rm", "--force", name)
	if e.Runtime == RuntimePodman {
		args = append(e.global(), "rm", "--force", "--time", "0", "--ignore", name)
	}
	out, err := exec.CommandContext(ctx, e.Path, args...).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "No such container") {
		return fmt.Errorf("%s rm %s: %w: %s", e.Path, name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

const adminToken = "e2e-admin-token-0123456789abcdef"

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds the gpufleet binary once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpufleet-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "gpufleet")
		out, err := exec.Command("go", "build", "-o", binPath, "../../cmd/gpufleet").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// serverProc is a gpufleet server running as its own process.
type serverProc struct {
	t       *testing.T
	dir     string
	url     string
	cmd     *exec.Cmd
	exited  chan struct{}
	env     []string
	args    []string
	logPath string
}

// startServer runs `gpufleet server` on a free port with its data in dir.
func startServer(t *testing.T, dir string, env []string, extra ...string) *serverProc {
	t.Helper()
	p := &serverProc{t: t, dir: dir, env: env, args: extra, logPath: filepath.Join(dir, "server.log")}
	p.start()
	return p
}

func (p *serverProc) start() {
	t := p.t
	t.Helper()
	os.Remove(filepath.Join(p.dir, "server.url"))
	args := append([]string{"server", "--listen", "127.0.0.1:0", "--data-dir", p.dir, "--admin-token", adminToken,
		"--tick", "100ms", "--heartbeat", "200ms", "--heartbeat-grace", "2s", "--fence-after", "2s", "--lease-ttl", "1500ms"}, p.args...)
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), p.env...)
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				lines <- u
			}
		}
	}()
	go func() { cmd.Wait(); logf.Close(); close(p.exited) }()
	select {
	case p.url = <-lines:
	case <-p.exited:
		log, _ := os.ReadFile(p.logPath)
		t.Fatalf("server exited before listening:\n%s", log)
	case <-time.After(20 * time.Second):
		t.Fatal("server did not start within 20s")
	}
	t.Cleanup(func() { p.kill() })
}

// kill sends SIGKILL and waits.
func (p *serverProc) kill() {
	if p.cmd.Process != nil {
		p.cmd.Process.Kill()
	}
	<-p.exited
}

func (p *serverProc) client(t *testing.T, token string) *api.Client {
	t.Helper()
	c, err := api.NewClient([]string{p.url}, token, api.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fleet sets up teams and member tokens on a server.
type fleet struct {
	admin   *api.Client
	members map[string]*api.Client
	tokens  map[string]string
}

func setupTeams(t *testing.T, p *serverProc, teams ...string) fleet {
	t.Helper()
	ctx := t.Context()
	f := fleet{admin: p.client(t, adminToken), members: map[string]*api.Client{}, tokens: map[string]string{}}
	for _, name := range teams {
		if _, err := f.admin.PutTeam(ctx, api.TeamRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
		tok, err := f.admin.CreateToken(ctx, api.TokenRequest{Team: name, Role: gpufleet.RoleMember})
		if err != nil {
			t.Fatal(err)
		}
		f.members[name], f.tokens[name] = p.client(t, tok.Token), tok.Token
	}
	return f
}

// fakeAgent speaks the agent protocol over HTTP the way a node would, so
// the control plane can be tested without GPUs; it reports what it is told
// to run as running.
type fakeAgent struct {
	name string
	c    *api.Client
	mu   sync.Mutex
	runs map[string]gpufleet.AttemptState
	jobs map[string]string
	gpus map[string][]string
}

func registerAgent(t *testing.T, p *serverProc, admin *api.Client, name, model string, gpus int) *fakeAgent {
	t.Helper()
	ctx := t.Context()
	jt, err := admin.CreateJoinToken(ctx, api.JoinTokenRequest{Node: name})
	if err != nil {
		t.Fatal(err)
	}
	var inv []gpufleet.NodeGPU
	for i := range gpus {
		inv = append(inv, gpufleet.NodeGPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: model, MemoryBytes: 80 << 30,
			NVLinkDomain: name + "-nvl", State: gpufleet.NodeReady, Health: gpufleet.Healthy})
	}
	c := p.client(t, "")
	resp, err := c.Register(ctx, jt.Token, api.RegisterRequest{ProtocolVersion: api.ProtocolVersion, Node: name, GPUs: inv})
	if err != nil {
		t.Fatal(err)
	}
	return &fakeAgent{name: name, c: c.WithToken(resp.Credential), runs: map[string]gpufleet.AttemptState{}, jobs: map[string]string{}, gpus: map[string][]string{}}
}

// beat sends one heartbeat and applies the answer.
func (a *fakeAgent) beat(ctx context.Context) (api.HeartbeatResponse, error) {
	a.mu.Lock()
	var reps []api.AttemptReport
	for id, st := range a.runs {
		reps = append(reps, api.AttemptReport{AttemptID: id, JobID: a.jobs[id], State: st, GPUSeconds: float64(len(a.gpus[id]))})
	}
	a.mu.Unlock()
	resp, err := a.c.Heartbeat(ctx, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: a.name, Attempts: reps})
	if err != nil {
		return resp, err
	}
	a.mu.Lock()
	for _, s := range resp.Start {
		if _, ok := a.runs[s.AttemptID]; !ok {
			a.runs[s.AttemptID], a.jobs[s.AttemptID], a.gpus[s.AttemptID] = gpufleet.AttemptRunning, s.JobID, s.GPUs
		}
	}
	for _, s := range resp.Stop {
		if _, ok := a.runs[s.AttemptID]; ok {
			a.runs[s.AttemptID] = gpufleet.AttemptStopped
		}
	}
	for id, st := range a.runs {
		if st.Terminal() {
			defer delete(a.runs, id) // reported once more next beat, then forgotten
		}
	}
	a.mu.Unlock()
	return resp, nil
}

// finish marks a running attempt succeeded.
func (a *fakeAgent) finish(attempt string) {
	a.mu.Lock()
	a.runs[attempt] = gpufleet.AttemptSucceeded
	a.mu.Unlock()
}

// eventually retries check until it passes or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

func bearer(req *http.Request, token string) *http.Request {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

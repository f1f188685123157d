package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/gpu"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// failingBackend is a GPU backend whose samples fail.
type failingBackend struct{ gpu.Backend }

func (failingBackend) Sample(context.Context) ([]gpu.Sample, error) {
	return nil, errors.New("nvml: GPU is lost")
}

// readyAgent is an agent on a simulated GPU and a fake control plane, on
// clock, discovered but not registered.
func readyAgent(t *testing.T, clock *fakeClock, engine *Engine, failing bool) *Agent {
	t.Helper()
	sim, err := simgpu.New([]simgpu.Spec{{Model: "l4", Count: 1}}, simgpu.WithNodeName("n1"), simgpu.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	var be gpu.Backend = sim
	if failing {
		be = failingBackend{sim}
	}
	a, err := New(Config{Name: "n1", DataDir: t.TempDir(), Backend: "sim", JoinToken: "j", Runner: RunnerConfig{Engine: engine}},
		be, &fakePlane{}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	a.now = clock.Now
	if err := a.discover(t.Context()); err != nil {
		t.Fatal(err)
	}
	return a
}

// failing is the details of the checks that failed.
func failing(checks []Check) []string {
	var out []string
	for _, c := range checks {
		if !c.OK {
			out = append(out, c.Detail)
		}
	}
	return out
}

// TestReady checks Ready's verdicts on a fake clock: the fake control
// plane sets a heartbeat of 1s, so an answer counts as stale after 15s
// (the floor), as does a sample.
func TestReady(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failing bool                                       // the backend's samples fail
		setup   func(t *testing.T, a *Agent, c *fakeClock) // after discovery
		want    []string                                   // failing checks' details
	}{
		{name: "not registered", setup: func(t *testing.T, a *Agent, c *fakeClock) {
			a.sampleOnce(t.Context())
		}, want: []string{"not registered", "no heartbeat answered yet"}},
		{name: "registered, fresh heartbeat", setup: func(t *testing.T, a *Agent, c *fakeClock) {
			mustRegister(t, a)
			a.sampleOnce(t.Context())
			c.Add(14 * time.Second)
			a.sampleOnce(t.Context())
		}},
		{name: "answered heartbeat after a failed registration", setup: func(t *testing.T, a *Agent, c *fakeClock) {
			a.cred = credential{Node: "n1", Credential: "stored"}
			if err := a.beat(t.Context()); err != nil {
				t.Fatal(err)
			}
			a.sampleOnce(t.Context())
		}},
		{name: "stale heartbeat", setup: func(t *testing.T, a *Agent, c *fakeClock) {
			mustRegister(t, a)
			c.Add(42 * time.Second)
			a.sampleOnce(t.Context())
		}, want: []string{"no heartbeat answered for 42s"}},
		{name: "longer heartbeat interval", setup: func(t *testing.T, a *Agent, c *fakeClock) {
			mustRegister(t, a)
			a.mu.Lock()
			a.heartbeat = 10 * time.Second // stale after 30s
			a.mu.Unlock()
			c.Add(29 * time.Second)
			a.sampleOnce(t.Context())
		}},
		{name: "no sample yet", setup: func(t *testing.T, a *Agent, c *fakeClock) {
			mustRegister(t, a)
		}, want: []string{"gpu backend: the last sample failed or none was taken yet (the agent's log says why); the last good one is 0s old"}},
		{name: "stale sample", setup: func(t *testing.T, a *Agent, c *fakeClock) {
			a.sampleOnce(t.Context())
			c.Add(20 * time.Second)
			mustRegister(t, a)
		}, want: []string{"gpu backend: no sample answered for 20s"}},
		{name: "failed sample", failing: true, setup: func(t *testing.T, a *Agent, c *fakeClock) {
			mustRegister(t, a)
			a.sampleOnce(t.Context())
		}, want: []string{"gpu backend: the last sample failed or none was taken yet (the agent's log says why)"}},
		{name: "failed sample after good ones", setup: func(t *testing.T, a *Agent, c *fakeClock) {
			mustRegister(t, a)
			a.sampleOnce(t.Context())
			c.Add(3 * time.Second)
			a.be = failingBackend{a.be}
			a.sampleOnce(t.Context())
		}, want: []string{"gpu backend: the last sample failed or none was taken yet (the agent's log says why); the last good one is 3s old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{t: time.Unix(1000, 0)}
			a := readyAgent(t, clock, nil, tc.failing)
			tc.setup(t, a, clock)
			checks := a.Ready(clock.Now())
			if diff := cmp.Diff(tc.want, failing(checks)); diff != "" {
				t.Errorf("failing checks (-want +got):\n%s", diff)
			}
			var names []string
			for _, c := range checks {
				names = append(names, c.Name)
			}
			if diff := cmp.Diff([]string{CheckRegistered, CheckHeartbeat, CheckGPUBackend}, names); diff != "" {
				t.Errorf("checks (-want +got):\n%s", diff)
			}
		})
	}
}

func mustRegister(t *testing.T, a *Agent) {
	t.Helper()
	if err := a.register(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// fakeEngine writes an engine binary that appends its arguments to a file
// and then runs script.
func fakeEngine(t *testing.T, script string) (e Engine, calls func() []string) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	path := filepath.Join(dir, "podman")
	body := "#!/bin/sh\necho \"$*\" >>" + log + "\n" + script + "\n"
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return Engine{Runtime: RuntimePodman, Path: path}, func() []string {
		b, _ := os.ReadFile(log)
		return strings.Fields(strings.ReplaceAll(string(b), "\n", " "))
	}
}

// TestReadyEngine checks the container engine check: it runs
// `ENGINE version` in the background, reports "not checked yet" until the
// first run ends, then its result, and runs again only 30s later.
func TestReadyEngine(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		wantOK       bool
		wantDetail   string // after the first run
	}{
		{name: "answers", script: "echo 'Version: 5.0'", wantOK: true, wantDetail: "container engine podman: answered"},
		{name: "fails", script: "echo 'Error: cannot connect'; echo ' to the service' >&2; exit 125", wantDetail: "container engine podman: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{t: time.Unix(1000, 0)}
			e, calls := fakeEngine(t, tc.script)
			a := readyAgent(t, clock, &e, false)
			mustRegister(t, a)
			a.sampleOnce(t.Context())
			engine := func() Check {
				t.Helper()
				checks := a.Ready(clock.Now())
				if len(checks) != 4 || checks[3].Name != CheckEngine {
					t.Fatalf("checks %+v: want the engine's last", checks)
				}
				return checks[3]
			}
			first := engine()
			if first.OK || first.Detail != "container engine podman: not checked yet" {
				t.Errorf("before the first run: %+v", first)
			}
			probeFor(a).wait()
			got := engine()
			if got.OK != tc.wantOK || !strings.HasPrefix(got.Detail, tc.wantDetail) {
				t.Errorf("after the first run: %+v, want ok %v, detail %q...", got, tc.wantOK, tc.wantDetail)
			}
			if !tc.wantOK {
				want := "container engine podman: " + e.Path + " version: exit status 125: Error: cannot connect to the service"
				if got.Detail != want {
					t.Errorf("detail %q, want %q", got.Detail, want)
				}
			}
			clock.Add(29 * time.Second)
			engine()
			probeFor(a).wait()
			if got := calls(); len(got) != 1 || got[0] != "version" {
				t.Errorf("engine runs within 30s: %q, want one `version`", got)
			}
			clock.Add(time.Second)
			engine()
			probeFor(a).wait()
			if got := calls(); len(got) != 2 {
				t.Errorf("engine runs after 30s: %q, want two", got)
			}
		})
	}
}

// TestEngineProbeTimesOut: an engine that does not answer in time fails
// the check, and the check waits for nothing meanwhile.
func TestEngineProbeTimesOut(t *testing.T) {
	e, _ := fakeEngine(t, "exec sleep 30")
	p := &engineProbe{timeout: 100 * time.Millisecond}
	start := time.Now()
	if c := p.check(time.Unix(1000, 0), e); c.OK || c.Detail != "container engine podman: not checked yet" {
		t.Errorf("while the run hangs: %+v", c)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("the check waited %s for the engine", d)
	}
	p.wait()
	want := "container engine podman: " + e.Path + " version: no answer in 100ms"
	if c := p.check(time.Unix(1001, 0), e); c.OK || c.Detail != want {
		t.Errorf("after the timeout: %+v, want detail %q", c, want)
	}
}

// TestHealthHandler serves both routes over HTTP.
func TestHealthHandler(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	a := readyAgent(t, clock, nil, false)
	srv := httptest.NewServer(a.HealthHandler())
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
			t.Errorf("GET %s: Content-Type %q", path, ct)
		}
		return resp.StatusCode, string(b)
	}
	type want struct {
		path string
		code int
		body string
	}
	check := func(stage string, ws ...want) {
		t.Helper()
		for _, w := range ws {
			code, body := get(w.path)
			if code != w.code || body != w.body {
				t.Errorf("%s: GET %s: %d %q, want %d %q", stage, w.path, code, body, w.code, w.body)
			}
		}
	}

	a.sampleOnce(t.Context())
	check("not registered",
		want{"/healthz", 200, "ok"},
		want{"/healthz?verbose", 200, "[+]ping ok\nhealthz check passed\n"},
		want{"/readyz", 503, "not registered\nno heartbeat answered yet\n"},
		want{"/readyz?verbose", 503, "[-]registered failed: not registered\n[-]heartbeat failed: no heartbeat answered yet\n" +
			"[+]gpu-backend ok\nreadyz check failed\n"})

	mustRegister(t, a)
	check("registered",
		want{"/healthz", 200, "ok"},
		want{"/readyz", 200, "ok"},
		want{"/readyz?verbose", 200, "[+]registered ok\n[+]heartbeat ok\n[+]gpu-backend ok\nreadyz check passed\n"})

	clock.Add(42 * time.Second)
	a.sampleOnce(t.Context())
	check("stale heartbeat",
		want{"/healthz", 200, "ok"},
		want{"/readyz", 503, "no heartbeat answered for 42s\n"},
		want{"/readyz?verbose", 503, "[+]registered ok\n[-]heartbeat failed: no heartbeat answered for 42s\n[+]gpu-backend ok\nreadyz check failed\n"})

	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{http.MethodPost, "/readyz", http.StatusMethodNotAllowed},
		{http.MethodGet, "/other", http.StatusNotFound},
		{http.MethodHead, "/healthz", http.StatusOK},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.code)
		}
	}
}

package server

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/store"
)

var update = flag.Bool("update", false, "rewrite golden files")

const testAdmin = "admin-token-for-tests-0123456789"

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type fixture struct {
	t      testing.TB
	srv    *Server
	st     store.Store
	dbPath string // the SQLite file
	clk    *clock
	admin  api.Principal
	creds  map[string]string // node: the credential of its last registration
}

func newFixture(t *testing.T) *fixture { return newFixtureB(t) }

func newFixtureB(t testing.TB) *fixture { return newFixtureWith(t, nil) }

// newFixtureWith is newFixture with the server's configuration changed by
// set (nil: none).
func newFixtureWith(t testing.TB, set func(*Config)) *fixture {
	t.Helper()
	ctx := t.Context()
	clk := &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	dbPath := filepath.Join(t.TempDir(), "gpufleet.db")
	st, err := store.Open(ctx, dbPath, store.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := Default()
	cfg.Now = clk.Now
	cfg.Heartbeat, cfg.HeartbeatGrace, cfg.FenceAfter, cfg.LostMargin = time.Second, 3*time.Second, 5*time.Second, time.Second
	cfg.LeaseTTL = 2 * time.Second // a fence of 5s survives a leader's death (MinFence)
	if set != nil {
		set(&cfg)
	}
	srv, err := New(ctx, cfg, st, catalog.Default(), testAdmin, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := srv.Authenticate(ctx, testAdmin)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, srv: srv, st: st, dbPath: dbPath, clk: clk, admin: admin}
}

// team creates a team and returns a member principal for it.
func (f *fixture) team(name string, quota map[string]int) api.Principal {
	f.t.Helper()
	ctx := f.t.Context()
	if _, err := f.srv.PutTeam(ctx, f.admin, api.TeamRequest{Name: name, Quota: quota}); err != nil {
		f.t.Fatal(err)
	}
	tok, err := f.srv.CreateToken(ctx, f.admin, api.TokenRequest{Team: name, Role: gpufleet.RoleMember})
	if err != nil {
		f.t.Fatal(err)
	}
	p, err := f.srv.Authenticate(ctx, tok.Token)
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// node registers a node with n GPUs of model and returns its principal.
func (f *fixture) node(name, model string, n int) api.Principal {
	f.t.Helper()
	p, err := f.srv.Authenticate(f.t.Context(), f.register(name, model, n))
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// nodeCred registers an 8-GPU H100 node and returns its credential.
func (f *fixture) nodeCred(name string) string { return f.register(name, "h100-sxm-80gb", 8) }

func (f *fixture) register(name, model string, n int) string {
	f.t.Helper()
	return f.registerLabelled(name, model, n, map[string]string{"rack": "r1"})
}

// registerLabelled registers a node of n GPUs with the labels given.
func (f *fixture) registerLabelled(name, model string, n int, labels map[string]string) string {
	f.t.Helper()
	ctx := f.t.Context()
	jt, err := f.srv.CreateJoinToken(ctx, f.admin, api.JoinTokenRequest{})
	if err != nil {
		f.t.Fatal(err)
	}
	var gpus []gpufleet.NodeGPU
	for i := range n {
		gpus = append(gpus, gpufleet.NodeGPU{Index: i, UUID: "GPU-" + name + "-" + string(rune('a'+i)), Model: model,
			MemoryBytes: 80 << 30, NVLinkDomain: name + "-nvl", State: gpufleet.NodeReady, Health: gpufleet.Healthy})
	}
	resp, err := f.srv.Register(ctx, jt.Token, api.RegisterRequest{ProtocolVersion: 1, Node: name, GPUs: gpus,
		Labels: labels, Versions: map[string]string{"driver": "580.65"}})
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.Credential
}

func (f *fixture) cycle() {
	f.t.Helper()
	if err := f.srv.Cycle(f.t.Context()); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) submit(p api.Principal, r api.SubmitRequest) gpufleet.Job {
	f.t.Helper()
	if len(r.Command) == 0 {
		r.Command = []string{"python", "train.py"}
	}
	resp, err := f.srv.SubmitJob(f.t.Context(), p, r)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.Job
}

func (f *fixture) job(id string) gpufleet.Job {
	f.t.Helper()
	j, err := f.srv.Job(f.t.Context(), f.admin, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return j
}

func TestJobRunsThroughItsLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 8)
	j := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4}, Priority: "training", Estimate: gpufleet.Duration(time.Hour)})
	if j.State != gpufleet.JobQueued || j.Team != "team-a" {
		t.Fatalf("submitted job: %+v", j)
	}
	f.cycle()
	hb, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(hb.Start) != 1 || hb.Start[0].JobID != j.ID || len(hb.Start[0].GPUs) != 4 {
		t.Fatalf("heartbeat should assign the job on 4 GPUs: %+v", hb)
	}
	as := hb.Start[0]
	if _, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1", Attempts: []api.AttemptReport{{AttemptID: as.AttemptID, JobID: j.ID, State: gpufleet.AttemptRunning}}}); err != nil {
		t.Fatal(err)
	}
	if got := f.job(j.ID); got.State != gpufleet.JobRunning || got.StartedAt == nil {
		t.Fatalf("job after running report: state %s", got.State)
	}
	f.clk.Advance(10 * time.Second)
	zero := 0
	if _, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1", Attempts: []api.AttemptReport{{AttemptID: as.AttemptID, JobID: j.ID,
		State: gpufleet.AttemptSucceeded, ExitCode: &zero, GPUSeconds: 40, EffectiveGPUSeconds: 30, EnergyJoules: 20000}}}); err != nil {
		t.Fatal(err)
	}
	got := f.job(j.ID)
	if got.State != gpufleet.JobSucceeded || len(got.Attempts) != 1 || got.Attempts[0].ExitCode == nil || *got.Attempts[0].ExitCode != 0 {
		t.Fatalf("job after success: %+v", got)
	}
	rep, err := f.srv.Usage(ctx, a, api.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Teams) != 1 || rep.Teams[0].EnergyJoules != 20000 || rep.Teams[0].GPUHours <= 0 {
		t.Fatalf("usage: %+v", rep)
	}
	// Energy: the GPUs' 20 kJ, times the default PUE, at the default grid
	// intensity; the same by team, by job and by GPU model.
	gpuKWh := 20000 / 3.6e6
	for by, want := range map[string]api.EnergyRow{
		api.EnergyByTeam:  {Team: "team-a"},
		api.EnergyByJob:   {Team: "team-a", Job: j.ID},
		api.EnergyByModel: {Model: "h100-sxm-80gb"},
	} {
		rep, err := f.srv.Usage(ctx, a, api.UsageQuery{By: by, Period: "day"})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Energy) != 1 || rep.PUE != power.DefaultPUE || rep.GridIntensity != power.DefaultIntensity {
			t.Fatalf("by %s: %+v", by, rep)
		}
		e := rep.Energy[0]
		if e.Team != want.Team || e.Job != want.Job || e.Model != want.Model || e.PeriodStart == nil ||
			math.Abs(e.GPUEnergyKWh-gpuKWh) > 1e-12 || math.Abs(e.FacilityEnergyKWh-gpuKWh*power.DefaultPUE) > 1e-12 ||
			math.Abs(e.CO2eKg-gpuKWh*power.DefaultPUE*power.DefaultIntensity/1000) > 1e-12 || e.AvgGPUWatts != 500 {
			t.Errorf("by %s: %+v", by, e)
		}
	}
}

func TestMembersNeverSeeOtherTeams(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a, b := f.team("team-a", nil), f.team("team-b", nil)
	f.node("n1", "h100-sxm-80gb", 8)
	jb := f.submit(b, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}})
	if _, err := f.srv.Job(ctx, a, jb.ID); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("team-a reading team-b's job: %v, want not found", err)
	}
	if _, err := f.srv.CancelJob(ctx, a, jb.ID); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("team-a cancelling team-b's job: %v, want not found", err)
	}
	list, err := f.srv.Jobs(ctx, a, api.JobQuery{All: true})
	if err != nil || len(list.Jobs) != 0 {
		t.Errorf("team-a lists %d jobs (%v), want none", len(list.Jobs), err)
	}
	f.cycle()
	q, _ := f.srv.Queue(ctx, a)
	for _, e := range q {
		if e.Team != "team-a" {
			t.Errorf("team-a sees queue entry of %s", e.Team)
		}
	}
	if _, err := f.srv.SubmitJob(ctx, a, api.SubmitRequest{Team: "team-b", Command: []string{"x"}, Resources: gpufleet.Resources{GPUs: 1}}); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("team-a submitting as team-b: %v, want not found", err)
	}
	if _, err := f.srv.CreateToken(ctx, a, api.TokenRequest{Team: "team-a", Role: gpufleet.RoleAdmin}); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("member creating tokens: %v, want forbidden", err)
	}
}

// TestMonitorToken: a monitor token is fleet-wide and names no team; it
// authenticates, lists every agent's scrape target, and a member may not.
func TestMonitorToken(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	f.node("n1", "h100-sxm-80gb", 8)
	if _, err := f.srv.CreateToken(ctx, f.admin, api.TokenRequest{Team: "team-a", Role: gpufleet.RoleMonitor}); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("monitor token for a team: %v, want invalid", err)
	}
	if _, err := f.srv.CreateToken(ctx, f.admin, api.TokenRequest{Role: "root"}); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("role root: %v, want invalid", err)
	}
	tok, err := f.srv.CreateToken(ctx, f.admin, api.TokenRequest{Role: gpufleet.RoleMonitor})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.srv.Authenticate(ctx, tok.Token)
	if err != nil || !p.IsMonitor() || p.IsAdmin() {
		t.Fatalf("monitor token authenticates as %+v, %v", p, err)
	}
	if _, err := f.srv.ScrapeTargets(ctx, p); err != nil {
		t.Errorf("monitor scrape targets: %v", err)
	}
	if _, err := f.srv.ScrapeTargets(ctx, a); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("member scrape targets: %v, want forbidden", err)
	}
}

func TestRequestIDMakesSubmitIdempotent(t *testing.T) {
	f := newFixture(t)
	a := f.team("team-a", nil)
	f.node("n1", "h100-sxm-80gb", 8)
	j1 := f.submit(a, api.SubmitRequest{RequestID: "r-1", Resources: gpufleet.Resources{GPUs: 1}})
	j2 := f.submit(a, api.SubmitRequest{RequestID: "r-1", Resources: gpufleet.Resources{GPUs: 1}})
	if j1.ID != j2.ID {
		t.Fatalf("same request id gave two jobs: %s and %s", j1.ID, j2.ID)
	}
}

func TestBadSubmissionsNameTheField(t *testing.T) {
	f := newFixture(t)
	a := f.team("team-a", nil)
	tests := map[string]struct {
		req  api.SubmitRequest
		want string
	}{
		"no command":        {req: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}}, want: "command: required"},
		"zero gpus":         {req: api.SubmitRequest{Command: []string{"x"}}, want: "resources.gpus 0"},
		"bad priority":      {req: api.SubmitRequest{Command: []string{"x"}, Priority: "urgent", Resources: gpufleet.Resources{GPUs: 1}}, want: `priority "urgent"`},
		"bad sharing":       {req: api.SubmitRequest{Command: []string{"x"}, Resources: gpufleet.Resources{GPUs: 1, Sharing: gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: 2}}}, want: "resources.sharing"},
		"long time limit":   {req: api.SubmitRequest{Command: []string{"x"}, TimeLimit: gpufleet.Duration(400 * 24 * time.Hour), Resources: gpufleet.Resources{GPUs: 1}}, want: "time_limit 9600h0m0s"},
		"reserved env":      {req: api.SubmitRequest{Command: []string{"x"}, Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0"}, Resources: gpufleet.Resources{GPUs: 1}}, want: "CUDA_VISIBLE_DEVICES"},
		"relative workdir":  {req: api.SubmitRequest{Command: []string{"x"}, Workdir: "../etc", Resources: gpufleet.Resources{GPUs: 1}}, want: "workdir"},
		"nodes not divisor": {req: api.SubmitRequest{Command: []string{"x"}, Resources: gpufleet.Resources{GPUs: 3, Nodes: 2}}, want: "resources.nodes 2"},
		"negative cpus":     {req: api.SubmitRequest{Command: []string{"x"}, Resources: gpufleet.Resources{GPUs: 1, CPUs: -1}}, want: "resources.cpus -1"},
		"tiny memory":       {req: api.SubmitRequest{Command: []string{"x"}, Resources: gpufleet.Resources{GPUs: 1, MemoryBytes: 100}}, want: "resources.memory_bytes 100"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := f.srv.SubmitJob(t.Context(), a, tc.req)
			if !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
	if list, _ := f.srv.Jobs(t.Context(), a, api.JobQuery{All: true}); len(list.Jobs) != 0 {
		t.Errorf("rejected submissions left %d jobs behind", len(list.Jobs))
	}
}

func TestSilentNodeLosesAttemptsOnlyAfterFence(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 8)
	j := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8}, Retries: 1})
	f.cycle()
	hb, _ := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1"})
	as := hb.Start[0]
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1", Attempts: []api.AttemptReport{{AttemptID: as.AttemptID, JobID: j.ID, State: gpufleet.AttemptRunning}}})

	// Silent past the heartbeat grace: down, but the attempt is not lost
	// yet: the agent may still be running it until it fences itself.
	f.clk.Advance(5 * time.Second)
	f.cycle()
	if n, _ := f.srv.Node(ctx, f.admin, "n1"); n.State != gpufleet.NodeDown {
		t.Errorf("node after 5s of silence: %s, want down", n.State)
	}
	if got := f.job(j.ID); got.State != gpufleet.JobRunning {
		t.Fatalf("job before grace+fence+margin: %s, want still running", got.State)
	}
	f.clk.Advance(5 * time.Second) // 10s > 3s grace + 5s fence + 1s margin
	f.cycle()
	got := f.job(j.ID)
	if got.Attempts[0].State != gpufleet.AttemptLost {
		t.Fatalf("attempt after fence: %s, want lost", got.Attempts[0].State)
	}
	if got.State != gpufleet.JobQueued || got.Retries.Used != 0 || got.Interruptions != 1 {
		t.Fatalf("job after loss: state %s, retries used %d, interruptions %d; want queued, 0, 1", got.State, got.Retries.Used, got.Interruptions)
	}
}

func TestCancelStopsARunningAttempt(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 8)
	j := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}})
	f.cycle()
	hb, _ := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1"})
	as := hb.Start[0]
	run := []api.AttemptReport{{AttemptID: as.AttemptID, JobID: j.ID, State: gpufleet.AttemptRunning}}
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1", Attempts: run})
	if _, err := f.srv.CancelJob(ctx, a, j.ID); err != nil {
		t.Fatal(err)
	}
	f.cycle()
	hb, _ = f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1", Attempts: run})
	if len(hb.Stop) != 1 || hb.Stop[0].AttemptID != as.AttemptID {
		t.Fatalf("heartbeat after cancel should stop the attempt: %+v", hb)
	}
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1", Attempts: []api.AttemptReport{{AttemptID: as.AttemptID, JobID: j.ID, State: gpufleet.AttemptStopped, Reason: "cancelled"}}})
	if got := f.job(j.ID); got.State != gpufleet.JobCancelled {
		t.Fatalf("job after its attempt stopped: %s, want cancelled", got.State)
	}
}

func TestAdmissionRejectsWhatCannotFit(t *testing.T) {
	f := newFixture(t)
	a := f.team("team-a", nil)
	f.node("n1", "l4", 4)
	_, err := f.srv.SubmitJob(t.Context(), a, api.SubmitRequest{Command: []string{"serve"},
		Model: &api.ModelRequest{Name: "llama-3.1-405b", Mode: "inference"}})
	if !errors.Is(err, gpufleet.ErrInvalid) {
		t.Fatalf("submitting 405B to an L4 fleet: %v, want rejected", err)
	}
	golden(t, "admission-reject-405b-on-l4.txt", err.Error()+"\n")
}

func TestAdmissionFillsInAndWarns(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	f.node("n1", "h100-sxm-80gb", 8)
	resp, err := f.srv.SubmitJob(ctx, a, api.SubmitRequest{Command: []string{"serve"}, Model: &api.ModelRequest{Name: "llama-3.1-70b", Precision: "bf16"}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Job.Resources
	if r.GPUs != 2 || r.Interconnect != "nvlink" || r.Precision != "bf16" || r.GPUMemoryMinBytes < 70<<30 {
		t.Errorf("filled-in resources: %+v; want 2 GPUs over NVLink, bf16, ~80 GiB each", r)
	}
	if resp.Job.Plan == nil {
		t.Error("the job should show the plan it was admitted with")
	}
	small := api.SubmitRequest{Command: []string{"serve"}, Resources: gpufleet.Resources{GPUs: 1}, Model: &api.ModelRequest{Name: "llama-3.1-70b", Precision: "bf16"}}
	resp, err = f.srv.SubmitJob(ctx, a, small)
	if err != nil || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "resources.gpus 1 is below the plan's 2") {
		t.Errorf("smaller request: err %v, warnings %q", err, resp.Warnings)
	}
	small.Strict = true
	if _, err := f.srv.SubmitJob(ctx, a, small); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "strict") {
		t.Errorf("smaller request with strict: %v, want rejected", err)
	}
}

// golden compares got with testdata/NAME, rewriting it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s changed:\nwant %s\ngot  %s", name, want, got)
	}
}

var _ = context.Background

func TestAgentsCannotTouchOtherNodesAttempts(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 8)
	n2 := f.node("n2", "h100-sxm-80gb", 8)
	j := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8}})
	f.cycle()
	var as api.Assignment
	for _, n := range []api.Principal{n1, n2} {
		hb, _ := f.srv.Heartbeat(ctx, n, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
		if len(hb.Start) == 1 {
			as = hb.Start[0]
		}
	}
	other := n1
	if got := f.job(j.ID); got.Attempts[0].Node == "n1" {
		other = n2
	}
	zero := 0
	f.srv.Heartbeat(ctx, other, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: []api.AttemptReport{{AttemptID: as.AttemptID, JobID: j.ID, State: gpufleet.AttemptSucceeded, ExitCode: &zero}}})
	if got := f.job(j.ID); got.State != gpufleet.JobScheduled {
		t.Fatalf("another node's report changed the job to %s", got.State)
	}
	if _, err := f.srv.Heartbeat(ctx, other, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n9"}); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("heartbeat for another node: %v, want forbidden", err)
	}
}

func TestDrainStopsAndRequeuesWithoutUsingRetries(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 8)
	j := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8}, Retries: 0})
	f.cycle()
	hb, _ := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	as := hb.Start[0]
	run := []api.AttemptReport{{AttemptID: as.AttemptID, JobID: j.ID, State: gpufleet.AttemptRunning}}
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run})
	if n, err := f.srv.NodeActionBecause(ctx, f.admin, "n1", api.Drain, "rack r1 maintenance"); err != nil {
		t.Fatal(err)
	} else if !strings.HasSuffix(n.StateReason, ": rack r1 maintenance") {
		t.Errorf("drained node's state reason %q lacks the admin's reason", n.StateReason)
	}
	if _, err := f.srv.NodeActionBecause(ctx, f.admin, "n1", api.Repaired, "fixed"); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("repaired with a reason: %v", err)
	}
	f.cycle()
	hb, _ = f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run})
	if len(hb.Stop) != 1 || hb.Stop[0].ReasonCode != "drain" {
		t.Fatalf("heartbeat after drain should stop the attempt: %+v", hb)
	}
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: []api.AttemptReport{{AttemptID: as.AttemptID, JobID: j.ID, State: gpufleet.AttemptStopped, Reason: "drained"}}})
	got := f.job(j.ID)
	if got.State != gpufleet.JobQueued || got.Retries.Used != 0 || got.Interruptions != 1 {
		t.Fatalf("job after drain: %s, retries used %d, interruptions %d; want queued, 0, 1", got.State, got.Retries.Used, got.Interruptions)
	}
	f.cycle()
	if hb, _ := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion}); len(hb.Start) != 0 {
		t.Errorf("a draining node got new work: %+v", hb.Start)
	}
}

// TestFenceMustSurviveALeaderDeath: a fence shorter than the lease plus
// two ticks and a heartbeat would have agents stop every attempt whenever
// a leader dies; the server refuses it, naming both flags.
func TestFenceMustSurviveALeaderDeath(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		lease, tick, beat, fence time.Duration
		ok                       bool
	}{
		{"defaults", 8 * time.Second, time.Second, 5 * time.Second, 60 * time.Second, true},
		{"dev", 3 * time.Second, 500 * time.Millisecond, time.Second, 5 * time.Second, true},
		{"the report's dev", 8 * time.Second, 500 * time.Millisecond, time.Second, 5 * time.Second, false},
		{"exactly enough", 2 * time.Second, time.Second, time.Second, 5 * time.Second, true},
		{"a millisecond short", 2 * time.Second, time.Second, time.Second, 5*time.Second - time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.LeaseTTL, c.Tick, c.Heartbeat, c.HeartbeatGrace, c.FenceAfter = tc.lease, tc.tick, tc.beat, 3*tc.beat, tc.fence
			err := c.Validate()
			if tc.ok != (err == nil) {
				t.Fatalf("Validate: %v, want ok %v", err, tc.ok)
			}
			if err != nil && (!errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "fence-after") || !strings.Contains(err.Error(), "--lease-ttl")) {
				t.Errorf("error %q: want invalid, naming fence-after and --lease-ttl", err)
			}
		})
	}
}

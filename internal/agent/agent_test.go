package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// TestMain doubles as the supervisor: the runner under test starts this
// binary with GPUFLEET_TEST_SUPERVISE=1, as the agent starts
// `gpufleet agent supervise`.
func TestMain(m *testing.M) {
	// The test binary is the attempt init too, as `gpufleet agent init
	// --dir DIR -- COMMAND...` (its environment is the attempt's).
	if len(os.Args) > 5 && os.Args[1] == "agent" && os.Args[2] == "init" && os.Args[3] == "--dir" && os.Args[5] == "--" {
		os.Exit(AttemptInit(os.Args[4], os.Args[6:]))
	}
	if len(os.Args) == 5 && os.Args[1] == "agent" && os.Args[2] == "attach" && os.Args[3] == "--dir" {
		os.Exit(AttemptAttach(os.Args[4]))
	}
	if os.Getenv("GPUFLEET_TEST_SUPERVISE") == "1" {
		for i, a := range os.Args {
			if a == "--dir" && i+1 < len(os.Args) {
				os.Exit(Supervise(os.Args[i+1]))
			}
		}
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// sharedDir is a directory attempts (nobody, when tests run as root) can
// write to.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpufleet-agent-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func testRunner(t *testing.T, dataDir string, now func() time.Time) *Runner {
	t.Helper()
	t.Setenv("GPUFLEET_TEST_SUPERVISE", "1")
	r := NewRunner(RunnerConfig{DataDir: dataDir, Supervisor: []string{os.Args[0]}, Environ: os.Environ(), KillAfter: 300 * time.Millisecond,
		BusyTimeout: time.Minute}, testLogger(t), now, nil)
	r.SetDevices(testDevices)
	t.Cleanup(func() { killAll(r) })
	return r
}

// killAll kills what a test left running: the attempts' process groups
// and their supervisors, which would otherwise still write into the
// test's directories while they are removed.
func killAll(r *Runner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var pids []int
	for _, a := range r.attempts {
		if a.State.Terminal() {
			continue // its processes are gone, and their pids may be another's now
		}
		if a.PGID > 0 {
			syscall.Kill(-a.PGID, syscall.SIGKILL)
			pids = append(pids, a.PGID)
		}
		if a.Supervisor > 0 {
			syscall.Kill(a.Supervisor, syscall.SIGKILL)
			pids = append(pids, a.Supervisor)
		}
	}
	poll(5*time.Second, func() bool { return !slices.ContainsFunc(pids, func(p int) bool { return !gone(p) }) })
}

var testDevices = []gpu.Device{
	{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"},
	{Index: 2, UUID: "GPU-2", MIGMode: true, MIG: []gpu.MIGInstance{{UUID: "MIG-2a", Profile: "1g.18gb"}, {UUID: "MIG-2b", Profile: "3g.71gb"}}},
}

// waitState polls the runner until the attempt reaches a state.
func waitState(t *testing.T, r *Runner, id string, want ...gpufleet.AttemptState) api.AttemptReport {
	t.Helper()
	var got api.AttemptReport
	reached := poll(15*time.Second, func() bool {
		r.Poll()
		r.mu.Lock()
		a := r.attempts[id]
		var st gpufleet.AttemptState
		if a != nil {
			st = a.State
			if st.Terminal() {
				a.LogDone = true
			}
		}
		r.mu.Unlock()
		if !slices.Contains(want, st) {
			return false
		}
		for _, rep := range r.Reports() {
			if rep.AttemptID == id {
				got = rep
				return true
			}
		}
		return false
	})
	if !reached {
		t.Fatalf("attempt %s did not reach %v", id, want)
	}
	return got
}

func TestAttemptEnvHasExactlyTheAssignedGPUs(t *testing.T) {
	as := api.Assignment{AttemptID: "a-1", JobID: "j-1", Team: "team-a", GPUs: []string{"MIG-x", "GPU-y"},
		Env:      map[string]string{"CUDA_VISIBLE_DEVICES": "all", "FOO": "bar", "GPUFLEET_JOB_ID": "forged"},
		NodeRank: 1, NNodes: 2, GPUsPerNode: 2, MasterAddr: "n0", MasterPort: 29501}
	env, err := attemptEnv(as, "nobody", "/w", "/w")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	want := map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-x,GPU-y", "NVIDIA_VISIBLE_DEVICES": "MIG-x,GPU-y", "FOO": "bar",
		"GPUFLEET_JOB_ID": "j-1", "GPUFLEET_ATTEMPT_ID": "a-1", "GPUFLEET_NODE_RANK": "1", "GPUFLEET_NNODES": "2",
		"GPUFLEET_GPUS_PER_NODE": "2", "MASTER_ADDR": "n0", "MASTER_PORT": "29501", "USER": "nobody", "PATH": basePath}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	if _, err := attemptEnv(api.Assignment{Env: map[string]string{"BAD=NAME": "x"}}, "u", "/", "/"); err == nil {
		t.Error("an env name with '=' was accepted")
	}
}

func TestValidateWorkdir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	cases := map[string]struct {
		dir     string
		wantErr bool
	}{
		"empty means the default":  {"", false},
		"existing absolute dir":    {dir, false},
		"relative":                 {"work", true},
		"traversal":                {dir + "/../x", true},
		"unclean trailing slash":   {dir + "/", true},
		"double slash":             {"/tmp//x", true},
		"missing":                  {dir + "/missing", true},
		"a file, not a directory":  {file, true},
		"control character inside": {dir + "/a\nb", true},
	}
	for name, tc := range cases {
		err := validateWorkdir(tc.dir)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: %q: err %v, want error %v", name, tc.dir, err, tc.wantErr)
		}
	}
}

func TestStopEscalation(t *testing.T) {
	at := time.Unix(1000, 0)
	kill := 5 * time.Second
	type step struct {
		after time.Duration
		want  syscall.Signal
	}
	cases := map[string]struct {
		first syscall.Signal
		grace time.Duration
		steps []step
	}{
		// SIGTERM now, SIGKILL at the end of the grace: a program that
		// handles only SIGTERM gets all of its grace.
		"default: SIGTERM, grace, SIGKILL": {syscall.SIGTERM, 10 * time.Second, []step{{0, syscall.SIGTERM}, {time.Second, 0},
			{9 * time.Second, 0}, {10 * time.Second, syscall.SIGKILL}, {12 * time.Second, 0}, {15 * time.Second, syscall.SIGKILL}}},
		"grace under KillAfter: SIGTERM still gets KillAfter": {syscall.SIGTERM, time.Second, []step{{0, syscall.SIGTERM},
			{time.Second, 0}, {4 * time.Second, 0}, {5 * time.Second, syscall.SIGKILL}}},
		"a checkpoint signal first, SIGTERM after the grace": {syscall.SIGUSR1, 10 * time.Second, []step{{0, syscall.SIGUSR1},
			{time.Second, 0}, {9 * time.Second, 0}, {10 * time.Second, syscall.SIGTERM}, {12 * time.Second, 0},
			{15 * time.Second, syscall.SIGKILL}, {16 * time.Second, 0}, {20 * time.Second, syscall.SIGKILL}}},
		"a checkpoint signal, grace 0": {syscall.SIGINT, 0, []step{{0, syscall.SIGINT}, {0, syscall.SIGTERM}, {kill, syscall.SIGKILL}}},
	}
	for name, tc := range cases {
		stage, last := 0, time.Time{}
		for _, s := range tc.steps {
			now := at.Add(s.after)
			sig, next := stopStep(now, at, tc.first, tc.grace, kill, stage, last)
			if sig != s.want {
				t.Fatalf("%s: at +%s: signal %v, want %v", name, s.after, sig, s.want)
			}
			if sig != 0 {
				last = now
			}
			stage = next
		}
	}
}

func TestSignalOf(t *testing.T) {
	for in, want := range map[gpufleet.Signal]syscall.Signal{"": syscall.SIGTERM, "SIGTERM": syscall.SIGTERM, "SIGUSR1": syscall.SIGUSR1,
		"SIGINT": syscall.SIGINT, "SIGUSR2": syscall.SIGUSR2, "SIGHUP": syscall.SIGHUP, "SIGQUIT": syscall.SIGQUIT,
		"SIGXCPU": syscall.SIGXCPU, "SIGWINCH": syscall.SIGWINCH, "SIGPWR": syscall.SIGPWR, "SIGBOGUS": syscall.SIGTERM} {
		if got := signalOf(in); got != want {
			t.Errorf("signalOf(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestFenceTimer(t *testing.T) {
	last := time.Unix(1000, 0)
	cases := map[string]struct {
		since time.Duration
		after time.Duration
		want  bool
	}{
		"just heard from the server": {time.Second, 5 * time.Second, false},
		"exactly the fence timeout":  {5 * time.Second, 5 * time.Second, false},
		"past the fence timeout":     {5*time.Second + 1, 5 * time.Second, true},
		"fencing off (0)":            {time.Hour, 0, false},
	}
	for name, tc := range cases {
		if got := fenceDue(last.Add(tc.since), last, tc.after); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	if g := fenceGrace(30*time.Second, 10*time.Second); g != 10*time.Second {
		t.Errorf("fence grace %s", g)
	}
}

func ptr[T any](v T) *T { return &v }

func TestAccounting(t *testing.T) {
	now := time.Unix(1000, 0)
	prev := map[string]gpu.Sample{
		"G0": {EnergyMillijoules: ptr(uint64(1_000_000))},
		"G1": {EnergyMillijoules: ptr(uint64(500_000))},
		"G2": {EnergyMillijoules: ptr(uint64(900))},
	}
	cur := map[string]gpu.Sample{
		"G0": {SMActivity: ptr(0.9), Utilization: ptr(1.0), EnergyMillijoules: ptr(uint64(1_700_000))}, // 700 J, GPM
		"G1": {Utilization: ptr(0.5), EnergyMillijoules: ptr(uint64(800_000))},                         // 300 J, no GPM
		"G2": {EnergyMillijoules: ptr(uint64(100))},                                                    // counter reset, no activity
	}
	holds := []hold{
		{Attempt: "whole", GPU: "G0", Share: 1},
		{Attempt: "slice-a", GPU: "G1", Share: 0.5},
		{Attempt: "slice-b", GPU: "G1", Share: 0.5, Since: now.Add(-500 * time.Millisecond)}, // started mid-interval
		{Attempt: "blind", GPU: "G2", Share: 1},
	}
	got := account(now, 1, prev, cur, holds)
	want := map[string]Usage{
		"whole":   {GPUSeconds: 1, EffectiveGPUSeconds: 0.9, EnergyJoules: 700},
		"slice-a": {GPUSeconds: 0.5, EffectiveGPUSeconds: 0.5 * 0.5, EnergyJoules: 150},
		"slice-b": {GPUSeconds: 0.25, EffectiveGPUSeconds: 0.25 * 0.5, EnergyJoules: 75},
		"blind":   {GPUSeconds: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("accounting (-want +got):\n%s", diff)
	}
	if s := migShare("3g.71gb"); s != 3.0/7 {
		t.Errorf("mig share %v", s)
	}
}

// TestAKilledJobNamesTheSignal: a job that dies of a signal reads "killed
// by SIGKILL" (exit 137), not Go's description of it ("killed by killed").
func TestAKilledJobNamesTheSignal(t *testing.T) {
	r := testRunner(t, t.TempDir(), time.Now)
	r.Start(api.Assignment{AttemptID: "a-1", JobID: "j-1", Team: "team-a", GPUs: []string{"GPU-1"},
		Command: []string{"sh", "-c", "kill -KILL $$"}})
	rep := waitState(t, r, "a-1", gpufleet.AttemptFailed)
	if rep.ExitCode == nil || *rep.ExitCode != 137 || rep.Reason != "killed by SIGKILL" {
		t.Errorf("report %+v, want exit 137 killed by SIGKILL", rep)
	}
	for sig, want := range map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGSEGV: "SIGSEGV", syscall.Signal(99): "99"} {
		if got := sigName(sig); got != want {
			t.Errorf("sigName(%d) = %q, want %q", sig, got, want)
		}
	}
}

func TestRunnerRunsOnAssignedGPUsAndRecordsExit(t *testing.T) {
	data, out := t.TempDir(), sharedDir(t)
	r := testRunner(t, data, time.Now)
	r.Start(api.Assignment{AttemptID: "a-1", JobID: "j-1", Team: "team-a", GPUs: []string{"GPU-1", "MIG-2a"},
		Command: []string{"sh", "-c", "echo $CUDA_VISIBLE_DEVICES > " + out + "/cvd; id -un > " + out + "/user; echo hi; exit 7"}})
	rep := waitState(t, r, "a-1", gpufleet.AttemptFailed)
	if rep.ExitCode == nil || *rep.ExitCode != 7 || rep.ReasonCode != ReasonExit {
		t.Errorf("report %+v", rep)
	}
	var ex exitRecord
	if err := readJSON(filepath.Join(data, "attempts", "a-1", statusFileName), &ex); err != nil || ex.ExitCode != 7 {
		t.Errorf("status.json: %+v %v", ex, err)
	}
	cvd, _ := os.ReadFile(filepath.Join(out, "cvd"))
	if got := strings.TrimSpace(string(cvd)); got != "GPU-1,MIG-2a" {
		t.Errorf("CUDA_VISIBLE_DEVICES %q", got)
	}
	if os.Geteuid() == 0 {
		user, _ := os.ReadFile(filepath.Join(out, "user"))
		if strings.TrimSpace(string(user)) != "nobody" {
			t.Errorf("ran as %q, want nobody", user)
		}
	}
	log, _ := os.ReadFile(filepath.Join(data, "attempts", "a-1", logFileName))
	if !strings.Contains(string(log), "hi") {
		t.Errorf("log %q", log)
	}
	// Invalid specs fail without running.
	r.Start(api.Assignment{AttemptID: "a-2", GPUs: []string{"GPU-9"}, Command: []string{"true"}})
	r.Start(api.Assignment{AttemptID: "a-3", GPUs: []string{"GPU-0"}, Command: []string{"true"}, Workdir: "/tmp/../etc"})
	for _, id := range []string{"a-2", "a-3"} {
		if rep := waitState(t, r, id, gpufleet.AttemptFailed); rep.ReasonCode != ReasonInvalid {
			t.Errorf("%s: %+v", id, rep)
		}
	}
}

func TestRunnerStopEscalatesToKill(t *testing.T) {
	data := t.TempDir()
	r := testRunner(t, data, time.Now)
	// The command asks for SIGUSR1 first and ignores it and SIGTERM.
	r.Start(api.Assignment{AttemptID: "a-1", GPUs: []string{"GPU-0"}, Launch: gpufleet.Launch{StopSignal: "SIGUSR1"},
		Command: []string{"sh", "-c", `trap "echo usr1" USR1; trap "echo term" TERM; echo ready; while :; do sleep 0.05; done`}})
	waitState(t, r, "a-1", gpufleet.AttemptRunning)
	logPath := filepath.Join(data, "attempts", "a-1", logFileName)
	poll(2*time.Second, func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "ready") // its traps are set
	})
	start := time.Now()
	r.Stop("a-1", "preempted", "preempted", 300*time.Millisecond)
	rep := waitState(t, r, "a-1", gpufleet.AttemptStopped)
	if rep.ExitCode == nil || *rep.ExitCode != 128+int(syscall.SIGKILL) || rep.ReasonCode != "preempted" {
		t.Errorf("report %+v", rep)
	}
	if d := time.Since(start); d < 600*time.Millisecond {
		t.Errorf("killed after %s, before grace + kill-after", d)
	}
	b, _ := os.ReadFile(logPath)
	if !strings.Contains(string(b), "usr1") || !strings.Contains(string(b), "term") {
		t.Errorf("log %q: want the checkpoint signal and SIGTERM before the kill", b)
	}
}

func TestRunnerReadoptsAfterRestart(t *testing.T) {
	data, out := t.TempDir(), sharedDir(t)
	flag := filepath.Join(out, "go")
	r1 := testRunner(t, data, time.Now)
	r1.Start(api.Assignment{AttemptID: "a-1", JobID: "j-1", GPUs: []string{"GPU-0"},
		Command: []string{"sh", "-c", "while [ ! -e " + flag + " ]; do sleep 0.05; done; exit 0"}})
	waitState(t, r1, "a-1", gpufleet.AttemptRunning)
	// A new runner over the same data dir: the agent restarted.
	r2 := testRunner(t, data, time.Now)
	if err := r2.Load(); err != nil {
		t.Fatal(err)
	}
	r2.Start(api.Assignment{AttemptID: "a-2", GPUs: []string{"GPU-0"}, Command: []string{"true"}})
	r2.Poll()
	if reps := r2.Reports(); len(reps) != 2 || reps[0].State != gpufleet.AttemptRunning || reps[1].State != gpufleet.AttemptStarting ||
		!strings.Contains(reps[1].Reason, "held by attempt a-1") {
		t.Errorf("after re-adoption: %+v (a-2 must wait for a-1's GPU)", reps)
	}
	os.WriteFile(flag, nil, 0o644)
	if rep := waitState(t, r2, "a-1", gpufleet.AttemptSucceeded); rep.ExitCode == nil || *rep.ExitCode != 0 {
		t.Errorf("re-adopted attempt: %+v", rep)
	}
	waitState(t, r2, "a-2", gpufleet.AttemptSucceeded)
	// Delivered terminal attempts leave the state file.
	r2.Delivered(r2.Reports())
	var st stateFile
	if err := readJSON(filepath.Join(data, "state.json"), &st); err != nil || len(st.Attempts) != 0 {
		t.Errorf("state after delivery: %+v %v", st, err)
	}
}

func TestRunnerTimeSlicesShareAndBusyGPUFails(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	r := testRunner(t, t.TempDir(), clock.Now)
	r.Start(api.Assignment{AttemptID: "s-1", GPUs: []string{"GPU-1"}, Fraction: 0.5, Command: []string{"sleep", "5"}})
	r.Start(api.Assignment{AttemptID: "s-2", GPUs: []string{"GPU-1"}, Fraction: 0.5, Command: []string{"sleep", "5"}})
	waitState(t, r, "s-1", gpufleet.AttemptRunning)
	waitState(t, r, "s-2", gpufleet.AttemptRunning)
	r.Start(api.Assignment{AttemptID: "x-1", GPUs: []string{"GPU-1"}, Command: []string{"true"}})
	r.Poll()
	clock.Add(2 * time.Minute)
	if rep := waitState(t, r, "x-1", gpufleet.AttemptFailed); rep.ReasonCode != ReasonGPUBusy {
		t.Errorf("exclusive attempt on a shared GPU: %+v", rep)
	}
	for _, id := range []string{"s-1", "s-2"} {
		r.Stop(id, "", "", 0)
		waitState(t, r, id, gpufleet.AttemptStopped)
	}
}

// fakePlane is a control plane that can be switched off.
type fakePlane struct {
	mu        sync.Mutex
	down      bool
	tries     []time.Time // when each heartbeat came, answered or not
	beats     []api.HeartbeatRequest
	resp      api.HeartbeatResponse
	expires   time.Time // of the credentials it hands out; zero: far away
	registers int
	renewed   []string // the credentials renewed
	refuseLog error    // ShipLog's answer when set
}

func (f *fakePlane) credential(c string) api.RegisterResponse {
	exp := f.expires
	if exp.IsZero() {
		exp = time.Unix(1e10, 0)
	}
	return api.RegisterResponse{Node: "n1", Credential: c, ExpiresAt: exp, HeartbeatS: 1, FenceAfterS: 5}
}

func (f *fakePlane) Register(context.Context, string, api.RegisterRequest) (api.RegisterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registers++
	return f.credential("cred"), nil
}

func (f *fakePlane) RenewCredential(_ context.Context, cred string) (api.RegisterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return api.RegisterResponse{}, fmt.Errorf("%w: server away", api.ErrUnavailable)
	}
	f.renewed = append(f.renewed, cred)
	return f.credential(fmt.Sprintf("cred-%d", len(f.renewed))), nil
}

func (f *fakePlane) Heartbeat(_ context.Context, _ string, r api.HeartbeatRequest) (api.HeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries = append(f.tries, time.Now())
	if f.down {
		return api.HeartbeatResponse{}, fmt.Errorf("%w: server away", api.ErrUnavailable)
	}
	f.beats = append(f.beats, r)
	resp := f.resp
	f.resp = api.HeartbeatResponse{}
	return resp, nil
}

func (f *fakePlane) ShipLog(_ context.Context, _, _ string, off int64, data []byte) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return 0, fmt.Errorf("%w: server away", api.ErrUnavailable)
	}
	if f.refuseLog != nil {
		return 0, f.refuseLog
	}
	return off + int64(len(data)), nil
}

// TestAgentRenewsItsCredentialWithoutTheJoinToken checks that the agent
// swaps its credential at two thirds of its life through the renewal call,
// not by registering again, stores the new one, and keeps the old one
// while the server is away.
func TestAgentRenewsItsCredentialWithoutTheJoinToken(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	be, err := simgpu.New([]simgpu.Spec{{Model: "l4", Count: 1}}, simgpu.WithNodeName("n1"), simgpu.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	cp := &fakePlane{expires: clock.Now().Add(30 * time.Second)}
	dir := t.TempDir()
	a, err := New(Config{Name: "n1", DataDir: dir, Backend: "sim", JoinToken: "j"}, be, cp, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	a.now = clock.Now
	ctx := t.Context()
	if err := a.discover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.register(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Add(15 * time.Second)
	a.maybeRenew(ctx)
	if len(cp.renewed) != 0 {
		t.Fatalf("renewed at half its life: %v", cp.renewed)
	}
	clock.Add(6 * time.Second) // past two thirds
	cp.down = true
	a.maybeRenew(ctx)
	if a.cred.Credential != "cred" {
		t.Fatalf("credential changed while the server was away: %q", a.cred.Credential)
	}
	cp.down = false
	clock.Add(61 * time.Second) // past the retry backoff
	cp.expires = clock.Now().Add(30 * time.Second)
	a.maybeRenew(ctx)
	if !slices.Equal(cp.renewed, []string{"cred"}) || cp.registers != 1 || a.cred.Credential != "cred-1" {
		t.Fatalf("renewed %v, registers %d, credential %q", cp.renewed, cp.registers, a.cred.Credential)
	}
	b, err := os.ReadFile(filepath.Join(dir, "credential.json"))
	if err != nil || !strings.Contains(string(b), `"cred-1"`) {
		t.Errorf("stored credential: %s %v", b, err)
	}
}

func TestAgentFencesWithoutServerAndReportsOnReconnect(t *testing.T) {
	t.Setenv("GPUFLEET_TEST_SUPERVISE", "1")
	clock := &fakeClock{t: time.Unix(1000, 0)}
	be, err := simgpu.New([]simgpu.Spec{{Model: "h100-sxm-80gb", Count: 2}}, simgpu.WithNodeName("n1"), simgpu.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	cp := &fakePlane{}
	a, err := New(Config{Name: "n1", DataDir: t.TempDir(), Backend: "sim", JoinToken: "j", FenceGrace: time.Second,
		Runner: RunnerConfig{Supervisor: []string{os.Args[0]}, Environ: os.Environ(), KillAfter: 200 * time.Millisecond}}, be, cp, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	a.now = clock.Now
	t.Cleanup(func() { killAll(a.runner) })
	ctx := t.Context()
	if err := a.discover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.register(ctx); err != nil {
		t.Fatal(err)
	}
	uuid := a.inventory[0].UUID
	cp.resp = api.HeartbeatResponse{Start: []api.Assignment{{AttemptID: "a-1", JobID: "j-1", Team: "team-a", Priority: gpufleet.Training, GPUs: []string{uuid},
		GraceS: 30, SimLoad: "compute", Command: []string{"sleep", "60"}}}}
	if err := a.beat(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(t, a.runner, "a-1", gpufleet.AttemptRunning)
	a.sampleOnce(ctx)
	clock.Add(2 * time.Second)
	a.sampleOnce(ctx)
	if v := a.view(); v.holders[uuid] != (Holder{Team: "team-a", Job: "j-1", Priority: "training"}) || v.allocated[uuid] != 1 {
		t.Errorf("metrics view: holders %v allocated %v", v.holders, v.allocated)
	}
	if s := a.latest[uuid]; s.SMActivity == nil || *s.SMActivity < 0.5 {
		t.Errorf("simulated compute load not applied: %+v", s.SMActivity)
	}

	if err := a.beat(ctx); err != nil {
		t.Fatal(err)
	}
	cp.mu.Lock()
	cp.down = true
	cp.mu.Unlock()
	clock.Add(4 * time.Second)
	a.checkFence()
	if a.Fenced() {
		t.Fatal("fenced before fence-after")
	}
	clock.Add(2 * time.Second)
	a.checkFence()
	if !a.Fenced() {
		t.Fatal("not fenced after fence-after without a heartbeat")
	}
	a.runner.Poll()
	// The fenced grace is capped at 1s: SIGTERM after it, then SIGKILL.
	clock.Add(2 * time.Second)
	poll(4*time.Second, func() bool {
		a.runner.Poll()
		return a.runner.Counts()[gpufleet.AttemptStopped] == 1
	})
	if c := a.runner.Counts(); c[gpufleet.AttemptStopped] != 1 {
		t.Fatalf("attempt not stopped by fencing: %v", c)
	}
	if err := a.beat(ctx); err == nil {
		t.Fatal("heartbeat succeeded while the server is down")
	}
	cp.mu.Lock()
	cp.down = false
	cp.mu.Unlock()
	a.shipLogs(ctx)
	if err := a.beat(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Fenced() {
		t.Error("still fenced after a successful heartbeat")
	}
	last := cp.beats[len(cp.beats)-1]
	if len(last.Attempts) != 1 || last.Attempts[0].State != gpufleet.AttemptStopped || last.Attempts[0].ReasonCode != ReasonFenced ||
		last.Attempts[0].GPUSeconds < 2 || last.Attempts[0].EnergyJoules <= 0 {
		t.Errorf("report after reconnecting: %+v", last.Attempts)
	}
	if len(a.runner.Reports()) != 0 {
		t.Errorf("delivered attempt still reported: %+v", a.runner.Reports())
	}
}

// TestSupervisorFencesWhenTheAgentGoesSilent checks at-most-once when the
// agent itself dies: the supervisor sees the alive file go stale past the
// fence and stops its attempt (checkpoint signal first), which then reads
// as stopped, fenced.
func TestSupervisorFencesWhenTheAgentGoesSilent(t *testing.T) {
	r, data, alive := fencedRunner(t, 600*time.Millisecond, 200*time.Millisecond)
	r.Start(api.Assignment{AttemptID: "a-1", GPUs: []string{"GPU-0"}, GraceS: 30, Launch: gpufleet.Launch{StopSignal: "SIGUSR1"},
		Command: []string{"sh", "-c", `trap "echo checkpoint" USR1; while :; do sleep 0.05; done`}})
	waitState(t, r, "a-1", gpufleet.AttemptRunning)
	// While the agent keeps touching the file, nothing happens. The
	// supervisor is another process reading the wall clock: this waits in
	// real time, on a fence of 600ms.
	for range 10 {
		now := time.Now()
		os.Chtimes(alive, now, now)
		time.Sleep(100 * time.Millisecond)
		r.Poll()
	}
	if reps := r.Reports(); reps[0].State != gpufleet.AttemptRunning {
		t.Fatalf("fenced while the agent was alive: %+v", reps)
	}
	start := time.Now()
	rep := waitState(t, r, "a-1", gpufleet.AttemptStopped)
	if rep.ReasonCode != ReasonFenced || !strings.Contains(rep.Reason, "no word from the agent") {
		t.Errorf("report %+v, want fenced", rep)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("fenced after %s", d)
	}
	b, _ := os.ReadFile(filepath.Join(data, "attempts", "a-1", logFileName))
	if !strings.Contains(string(b), "checkpoint") {
		t.Errorf("log %q: the checkpoint signal comes first", b)
	}
}

// TestSupervisorFencesWhenTheAliveFileIsGone: an agent whose data directory
// was removed says nothing more; its attempts must not run on forever.
func TestSupervisorFencesWhenTheAliveFileIsGone(t *testing.T) {
	r, _, alive := fencedRunner(t, 500*time.Millisecond, 100*time.Millisecond)
	r.Start(api.Assignment{AttemptID: "a-1", GPUs: []string{"GPU-0"}, Command: []string{"sleep", "60"}})
	waitState(t, r, "a-1", gpufleet.AttemptRunning)
	os.Remove(alive)
	if rep := waitState(t, r, "a-1", gpufleet.AttemptStopped); rep.ReasonCode != ReasonFenced {
		t.Errorf("report %+v, want fenced", rep)
	}
}

// fencedRunner is a runner whose supervisors watch DATA/alive (written now)
// with the given fence and fence grace.
func fencedRunner(t *testing.T, fence, grace time.Duration) (r *Runner, data, alive string) {
	t.Helper()
	data = t.TempDir()
	t.Setenv("GPUFLEET_TEST_SUPERVISE", "1")
	alive = filepath.Join(data, "alive")
	r = NewRunner(RunnerConfig{DataDir: data, Supervisor: []string{os.Args[0]}, Environ: os.Environ(), KillAfter: 300 * time.Millisecond, AliveFile: alive},
		testLogger(t), time.Now, nil)
	r.SetDevices(testDevices)
	t.Cleanup(func() { killAll(r) })
	r.SetFence(fence, grace)
	if err := os.WriteFile(alive, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return r, data, alive
}

// TestAgentStartsNothingWithoutAFence: an agent that does not know its
// fence timeout (no stored setting, and a server that says none) starts no
// attempt; the first answer that says it lets the next start through, and
// the credential file keeps it for the next start of the agent.
func TestAgentStartsNothingWithoutAFence(t *testing.T) {
	t.Setenv("GPUFLEET_TEST_SUPERVISE", "1")
	be, err := simgpu.New([]simgpu.Spec{{Model: "l4", Count: 1}}, simgpu.WithNodeName("n1"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := New(Config{Name: "n1", DataDir: dir, Backend: "sim", FenceGrace: time.Second,
		Runner: RunnerConfig{Supervisor: []string{os.Args[0]}, Environ: os.Environ(), KillAfter: 200 * time.Millisecond}}, be, &fakePlane{}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killAll(a.runner) })
	ctx := t.Context()
	if err := a.discover(ctx); err != nil {
		t.Fatal(err)
	}
	a.cred = credential{Node: "n1", Credential: "cred"} // stored by an older agent: no timing
	start := api.HeartbeatResponse{Start: []api.Assignment{{AttemptID: "a-1", JobID: "j-1", Team: "t", GPUs: []string{a.inventory[0].UUID},
		GraceS: 1, Command: []string{"sleep", "60"}}}}
	a.apply(ctx, start)
	if a.runner.Known("a-1") {
		t.Fatal("an attempt started while the fence was unknown")
	}
	a.mu.Lock()
	changed := a.setTimingLocked(1, 5)
	a.storeCredentialLocked()
	a.mu.Unlock()
	if !changed || a.fenceAfter != 5*time.Second || a.interval() != time.Second {
		t.Fatalf("timing from the answer: changed %v, fence %s, heartbeat %s", changed, a.fenceAfter, a.interval())
	}
	a.apply(ctx, start)
	if !a.runner.Known("a-1") {
		t.Fatal("the attempt did not start once the fence was known")
	}
	var stored credential
	if err := readJSON(filepath.Join(dir, "credential.json"), &stored); err != nil || stored.FenceAfterS != 5 || stored.HeartbeatS != 1 {
		t.Fatalf("credential.json keeps %+v, %v; want the fence and heartbeat", stored, err)
	}
	if got := aliveFence(filepath.Join(dir, "alive")); got != 5*time.Second {
		t.Errorf("the alive file tells supervisors a fence of %s, want 5s", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, "alive")); err != nil || fi.ModTime().Unix() != 0 {
		t.Errorf("writing the fence moved the alive file's time (only the server's word may): %v %v", fi.ModTime(), err)
	}
}

// TestHeartbeatBacksOffWhileTheServerIsAway runs the heartbeat loop on a
// fake clock (testing/synctest): while the server is away the pause after
// n failures is the heartbeat interval doubled n-1 times, capped at
// MaxBackoff, with a jitter of 0.5 to 1.5; once it answers, heartbeats
// come every interval again.
func TestHeartbeatBacksOffWhileTheServerIsAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		be, err := simgpu.New([]simgpu.Spec{{Model: "l4", Count: 1}}, simgpu.WithNodeName("n1"))
		if err != nil {
			t.Fatal(err)
		}
		cp := &fakePlane{down: true} // registration works, heartbeats fail
		a, err := New(Config{Name: "n1", DataDir: t.TempDir(), Backend: "sim", JoinToken: "j", MaxBackoff: 8 * time.Second}, be, cp, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.discover(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { a.heartbeatLoop(ctx); close(done) }()
		time.Sleep(2 * time.Minute)
		cp.mu.Lock()
		cp.down = false
		away := len(cp.tries)
		cp.mu.Unlock()
		time.Sleep(30 * time.Second)
		cancel()
		<-done

		cp.mu.Lock()
		defer cp.mu.Unlock()
		if away < 6 || cp.registers != 1 {
			t.Fatalf("%d heartbeats while away, %d registrations; want several, and one", away, cp.registers)
		}
		for n := 1; n < away; n++ {
			gap := cp.tries[n].Sub(cp.tries[n-1])
			base := min(time.Second<<(n-1), 8*time.Second) // interval 1s from the registration
			if gap < base/2 || gap >= base*3/2 {
				t.Errorf("pause after %d failures: %s, want %s x [0.5, 1.5)", n, gap, base)
			}
		}
		// Back: the first answered heartbeat came at most one backoff after
		// the server returned; the rest every second.
		for n := away + 1; n < len(cp.tries); n++ {
			if gap := cp.tries[n].Sub(cp.tries[n-1]); gap != time.Second {
				t.Errorf("answered heartbeats %d and %d: %s apart, want 1s", n-1, n, gap)
			}
		}
		if len(cp.beats) < 20 {
			t.Errorf("%d heartbeats answered in the 30s after the server came back", len(cp.beats))
		}
	})
}

// TestClipKeepsDetailsValid: a bench detail cut to the API's bound stays
// valid UTF-8, so the heartbeat that carries it is never refused.
func TestClipKeepsDetailsValid(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 10, "abc"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"}, // é is two bytes: never half of it
		{"a\xffb", 10, "a?b"},
	} {
		if got := clip(tc.in, tc.n); got != tc.want || !utf8.ValidString(got) {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestHoldersNameTheMIGInstance(t *testing.T) {
	r := testRunner(t, t.TempDir(), time.Now)
	r.Start(api.Assignment{AttemptID: "a-1", JobID: "j-1", Team: "team-a", Priority: gpufleet.Production, GPUs: []string{"MIG-2a"},
		Command: []string{"sleep", "1"}})
	waitState(t, r, "a-1", gpufleet.AttemptRunning)
	want := Holder{Team: "team-a", Job: "j-1", Priority: string(gpufleet.Production)}
	got := r.Holders()
	if got["GPU-2"] != want || got["MIG-2a"] != want {
		t.Errorf("holders %+v, want %+v on GPU-2 and on its instance MIG-2a", got, want)
	}
	if _, ok := got["MIG-2b"]; ok {
		t.Errorf("the other instance has a holder: %+v", got)
	}
	waitState(t, r, "a-1", gpufleet.AttemptSucceeded)
}

// TestFenceOutranksUnknownStop: an attempt its supervisor fenced while the
// agent was frozen ends fenced, even when the server's "unknown attempt"
// reached the agent first; a drain asked before stays a drain.
func TestFenceOutranksUnknownStop(t *testing.T) {
	r := testRunner(t, t.TempDir(), time.Now)
	fence := exitRecord{ExitCode: 143, Signal: "terminated", Fenced: "no word from the agent for 2s (fence 2s)", FinishedAt: time.Now()}
	for _, tc := range []struct {
		stop *stopRequest
		want string
	}{
		{nil, ReasonFenced},
		{&stopRequest{Reason: "the server does not expect this attempt on this node", Code: ReasonUnknown}, ReasonFenced},
		{&stopRequest{Reason: "drain", Code: "drained"}, "drained"},
	} {
		a := &attempt{As: api.Assignment{AttemptID: "a-1"}, State: gpufleet.AttemptRunning, Stop: tc.stop}
		r.mu.Lock()
		r.ended(a, fence)
		r.mu.Unlock()
		if a.State != gpufleet.AttemptStopped || a.ReasonCode != tc.want {
			t.Errorf("stop %+v: ended %s/%s, want stopped/%s", tc.stop, a.State, a.ReasonCode, tc.want)
		}
	}
}

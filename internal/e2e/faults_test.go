package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// Fault tests with real processes: a server, agents with simulated GPUs as
// separate processes, jobs whose processes leave beats (history_test.go).
// Timeouts are short: heartbeat 200ms, grace 2s, fence 2s; the server's
// lost margin is its fixed 10s. docs/RELIABILITY.md records the matrix and
// the times measured here.

// faultServerArgs are the server flags of the fault tests: every fault may
// quarantine (the circuit breaker is tested in internal/health), and
// throttling counts after 1s.
var faultServerArgs = []string{"--quarantine-max-fraction", "1", "--throttle-sustain", "1s"}

// lostAfter is how long a silent node's attempts live on the server:
// heartbeat grace 2s + fence 2s + the fixed margin (server.Default's
// LostMargin, 10s; there is no flag for it).
const lostAfter = 2*time.Second + 2*time.Second + 10*time.Second

// startFleetAgent starts an agent that gives fenced attempts 1s of grace,
// and kills whatever attempts it leaves behind when the test ends.
func startFleetAgent(t *testing.T, p *serverProc, admin *api.Client, name, simGPUs string) *agentProc {
	t.Helper()
	a := startAgent(t, p, admin, name, simGPUs, "--fence-grace", "1s")
	reapAttempts(t, a)
	return a
}

// reapAttempts kills, when the test ends, the agent and then every attempt
// process group and supervisor it started that still runs (supervisors
// live in their own sessions and outlive the agent).
func reapAttempts(t *testing.T, a *agentProc) {
	t.Cleanup(func() {
		syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
		a.stop(syscall.SIGKILL)
		dirs, _ := filepath.Glob(filepath.Join(a.dataDir, "attempts", "*"))
		for _, dir := range dirs {
			var pr struct {
				SupervisorPID int `json:"supervisor_pid"`
				PGID          int `json:"pgid"`
			}
			data, err := os.ReadFile(filepath.Join(dir, "pid.json"))
			if err != nil || json.Unmarshal(data, &pr) != nil {
				continue
			}
			// Only a supervisor that is still this attempt's (pids are reused).
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pr.SupervisorPID) + "/cmdline")
			if err != nil || !strings.Contains(string(cmdline), filepath.Base(dir)) {
				continue
			}
			if pr.PGID > 0 {
				syscall.Kill(-pr.PGID, syscall.SIGKILL)
			}
			syscall.Kill(pr.SupervisorPID, syscall.SIGKILL)
		}
	})
}

// waitNode waits until node name passes ok.
func waitNode(t *testing.T, c *api.Client, name string, d time.Duration, what string, ok func(gpufleet.Node) error) gpufleet.Node {
	t.Helper()
	var n gpufleet.Node
	eventually(t, d, name+": "+what, func() error {
		var err error
		if n, err = c.Node(t.Context(), name); err != nil {
			return err
		}
		return ok(n)
	})
	return n
}

// readyAndHealthy is a waitNode check: the node and every GPU ready and
// healthy.
func readyAndHealthy(n gpufleet.Node) error {
	if n.State != gpufleet.NodeReady || n.Health != gpufleet.Healthy {
		return fmt.Errorf("node %s (%s), %s (%s)", n.State, n.StateReason, n.Health, n.HealthReason)
	}
	for _, g := range n.GPUs {
		if (g.State != "" && g.State != gpufleet.NodeReady) || g.Health != gpufleet.Healthy {
			return fmt.Errorf("gpu %d %s (%s), %s (%s)", g.Index, g.State, g.StateReason, g.Health, g.Reason)
		}
	}
	return nil
}

// gpuOfNode returns the GPU (or the GPU of the MIG instance) with uuid.
func gpuOfNode(n gpufleet.Node, uuid string) (gpufleet.NodeGPU, bool) {
	i := slices.IndexFunc(n.GPUs, func(g gpufleet.NodeGPU) bool {
		return g.UUID == uuid || slices.ContainsFunc(g.MIGInstances, func(m gpufleet.MIGInstance) bool { return m.UUID == uuid })
	})
	if i < 0 {
		return gpufleet.NodeGPU{}, false
	}
	return n.GPUs[i], true
}

// waitRunningAttempt waits until job id has a running attempt that is not
// one of skip and has beaten at least once (when beats is set).
func waitRunningAttempt(t *testing.T, c *api.Client, id, beats string, d time.Duration, skip ...string) (gpufleet.Job, gpufleet.Attempt) {
	t.Helper()
	var (
		j gpufleet.Job
		a gpufleet.Attempt
	)
	eventually(t, d, "job "+id+" has a new running attempt", func() error {
		var err error
		if j, err = c.Job(t.Context(), id); err != nil {
			return err
		}
		for _, x := range j.Attempts {
			if x.State == gpufleet.AttemptRunning && !slices.Contains(skip, x.ID) {
				if beats != "" {
					if b, err := readBeats(beats, id); err != nil || b[x.ID].N == 0 {
						return fmt.Errorf("attempt %s runs but has not beaten yet", x.ID)
					}
				}
				a = x
				return nil
			}
		}
		return fmt.Errorf("job %s, attempts %s", j.State, attemptStates(j))
	})
	return j, a
}

func attemptStates(j gpufleet.Job) string {
	var s []string
	for _, a := range j.Attempts {
		s = append(s, fmt.Sprintf("%s:%s@%s(%s %s)", a.ID, a.State, a.Node, a.ReasonCode, a.Reason))
	}
	return "[" + strings.Join(s, " ") + "]"
}

func attemptByID(j gpufleet.Job, id string) gpufleet.Attempt {
	for _, a := range j.Attempts {
		if a.ID == id {
			return a
		}
	}
	return gpufleet.Attempt{}
}

// cancelQuietly cancels a job when a test ends early (t.Context is done
// by then).
func cancelQuietly(c *api.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.CancelJob(ctx, id)
}

// cancelAndWait cancels a job and waits until it is cancelled.
func cancelAndWait(t *testing.T, c *api.Client, id string) {
	t.Helper()
	if _, err := c.CancelJob(t.Context(), id); err != nil {
		t.Fatalf("cancel %s: %v", id, err)
	}
	waitJob(t, c, id, 20*time.Second, gpufleet.JobCancelled)
}

// faultCase is one row of the fault matrix.
type faultCase struct {
	name  string
	fault api.FaultRequest // GPU filled in with the job's GPU
	// nodeScope: the node drains (XID 79); else the GPU does.
	nodeScope bool
	health    gpufleet.Health
	reason    []string // one of these in the GPU's health reason
	// stillFailing, when set, is what the failed validation's reason says
	// while the fault is still in place (the check is run only then).
	stillFailing string
}

var faultMatrix = []faultCase{
	{name: "xid-79", fault: api.FaultRequest{XID: 79}, nodeScope: true, health: gpufleet.Unhealthy,
		reason: []string{"XID 79", "missing"}, stillFailing: "missing from discovery"},
	{name: "xid-48", fault: api.FaultRequest{XID: 48}, health: gpufleet.Unhealthy, reason: []string{"XID 48"}},
	{name: "xid-94", fault: api.FaultRequest{XID: 94}, health: gpufleet.Degraded, reason: []string{"XID 94"}},
	{name: "xid-95", fault: api.FaultRequest{XID: 95}, health: gpufleet.Unhealthy, reason: []string{"XID 95"}},
	{name: "row-remap-pending", fault: api.FaultRequest{Kind: "row-remap-pending"}, health: gpufleet.Degraded,
		reason: []string{"row remap pending"}, stillFailing: "injected faults: row-remap-pending"},
	{name: "nvlink-down", fault: api.FaultRequest{Kind: "nvlink-down"}, health: gpufleet.Unhealthy,
		reason: []string{"NVLink", "XID 74"}, stillFailing: "injected faults: nvlink-down"},
}

// faultTiming is what one fault run measured.
type faultTiming struct {
	fault, path string
	// detected: injection to the health finding; moved: injection to the
	// job's new attempt beating elsewhere; back: `repaired` (fault cleared)
	// to ready and healthy.
	detected, moved, back time.Duration
}

// TestFaultMatrix injects each simulated hardware fault under a running
// job and checks the health finding, the state path of the node or GPU,
// that the job moved (drain: stopped with reason_code drain, requeued
// without using a retry, running elsewhere) or, for thermal throttling,
// kept running on a degraded GPU; and the return to service: `repaired`
// while the fault is still there fails validation, after `fault clear` it
// passes and the node or GPU is ready and healthy again. The history
// checker verifies the whole run.
func TestFaultMatrix(t *testing.T) {
	p := startServer(t, t.TempDir(), nil, faultServerArgs...)
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	admin, member := f.admin, f.members["team-a"]
	beats := outDir(t)
	var agents []*agentProc
	for _, name := range []string{"fm-1", "fm-2", "fm-3"} {
		agents = append(agents, startFleetAgent(t, p, admin, name, "h100-sxm-80gb:2"))
	}
	// Thermal throttling takes ~45s of simulated heating: it runs on a node
	// of its own, alongside the drain faults.
	agents = append(agents, startFleetAgent(t, p, admin, "fm-thermal", "l4:1"))
	defer func() {
		if t.Failed() {
			for _, a := range agents {
				a.dumpLog(t)
			}
		}
	}()
	for _, a := range agents {
		waitNode(t, admin, a.name, 20*time.Second, "ready and healthy", readyAndHealthy)
	}
	var (
		mu       sync.Mutex
		timings  []faultTiming
		accepted []string
	)
	record := func(ft faultTiming) {
		mu.Lock()
		timings = append(timings, ft)
		mu.Unlock()
	}
	submit := func(t *testing.T, model, load string) string {
		t.Helper()
		r, err := member.SubmitJob(ctx, api.SubmitRequest{Name: "fault-" + model, Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{model}},
			Command: beatCommand(beats), SimLoad: gpufleet.SimLoad(load), Grace: gpufleet.Duration(time.Second), Estimate: gpufleet.Duration(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		accepted = append(accepted, r.ID)
		mu.Unlock()
		return r.ID
	}

	t.Run("faults", func(t *testing.T) {
		t.Run("thermal", func(t *testing.T) {
			t.Parallel()
			id := submit(t, "l4", "compute")
			t.Cleanup(func() { cancelQuietly(member, id) })
			_, a := waitRunningAttempt(t, member, id, beats, 30*time.Second)
			injected := time.Now()
			if _, err := admin.InjectFault(ctx, a.Node, api.FaultRequest{GPU: ptrTo(0), Kind: "thermal"}); err != nil {
				t.Fatal(err)
			}
			n := waitNode(t, admin, a.Node, 120*time.Second, "gpu 0 degraded by sustained thermal throttling", func(n gpufleet.Node) error {
				g := n.GPUs[0]
				if g.Health != gpufleet.Degraded || !strings.Contains(g.Reason, "throttl") {
					return fmt.Errorf("gpu 0 %s (%s)", g.Health, g.Reason)
				}
				return nil
			})
			detected := time.Since(injected)
			if g := n.GPUs[0]; (g.State != "" && g.State != gpufleet.NodeReady) || n.State != gpufleet.NodeReady || n.Health != gpufleet.Degraded {
				t.Errorf("degrade must not take the GPU out of service: node %s %s (%s), gpu %s (%s)", n.State, n.Health, n.HealthReason, g.State, g.StateReason)
			}
			j, err := member.Job(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(j.Attempts) != 1 || j.Attempts[0].ID != a.ID || j.Attempts[0].State != gpufleet.AttemptRunning {
				t.Errorf("the job must keep running on the throttled GPU: %s", attemptStates(j))
			}
			before := lastBeat(t, beats, id, a.ID)
			time.Sleep(5 * beatEvery)
			if !lastBeat(t, beats, id, a.ID).After(before) {
				t.Error("the job's process stopped beating on the throttled GPU")
			}
			// Cooling back: clear the fault, stop the load; the reading
			// rule lets go by itself.
			if _, err := admin.ClearFaults(ctx, a.Node, 0); err != nil {
				t.Fatal(err)
			}
			cancelAndWait(t, member, id)
			cleared := time.Now()
			waitNode(t, admin, a.Node, 60*time.Second, "healthy after cooling", readyAndHealthy)
			record(faultTiming{fault: "thermal", path: "ready (degraded) -> ready (healthy)", detected: detected, back: time.Since(cleared)})
		})

		t.Run("drain", func(t *testing.T) {
			t.Parallel()
			for _, fc := range faultMatrix {
				t.Run(fc.name, func(t *testing.T) {
					record(runDrainFault(t, admin, member, beats, submit(t, "h100-sxm-80gb", "compute"), fc))
				})
			}
		})
	})

	if rep := checkHistory(t, admin, beats, accepted...); len(rep.Beats) != len(faultMatrix)+1 {
		t.Errorf("beats of %d jobs, want %d (one per fault)", len(rep.Beats), len(faultMatrix)+1)
	}
	mu.Lock()
	defer mu.Unlock()
	var tab strings.Builder
	fmt.Fprintf(&tab, "%-18s %-10s %-10s %-10s %s\n", "fault", "detected", "moved", "back", "path")
	dur := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return d.Round(10 * time.Millisecond).String()
	}
	for _, ft := range timings {
		fmt.Fprintf(&tab, "%-18s %-10s %-10s %-10s %s\n", ft.fault, dur(ft.detected), dur(ft.moved), dur(ft.back), ft.path)
	}
	t.Logf("fault matrix timings:\n%s", tab.String())
}

// runDrainFault runs one drain fault under job id (already submitted) and
// returns the node or GPU to service.
func runDrainFault(t *testing.T, admin, member *api.Client, beats, id string, fc faultCase) faultTiming {
	ctx := t.Context()
	t.Cleanup(func() { cancelQuietly(member, id) })
	_, a := waitRunningAttempt(t, member, id, beats, 30*time.Second)
	node, uuid := a.Node, a.GPUs[0]
	n0, err := admin.Node(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	g0, _ := gpuOfNode(n0, uuid)
	req := fc.fault
	req.GPU = ptrTo(g0.Index)
	injected := time.Now()
	if _, err := admin.InjectFault(ctx, node, req); err != nil {
		t.Fatal(err)
	}
	timing := faultTiming{fault: fc.name}

	// The finding and the state it leads to.
	state := func(n gpufleet.Node) (gpufleet.NodeState, string, gpufleet.StateCause) {
		if fc.nodeScope {
			return n.State, n.StateReason, n.StateCause
		}
		g, _ := gpuOfNode(n, uuid)
		return g.State, g.StateReason, g.StateCause
	}
	n := waitNode(t, admin, node, 20*time.Second, "health finding and drain", func(n gpufleet.Node) error {
		g, _ := gpuOfNode(n, uuid)
		if g.Health != fc.health || !slices.ContainsFunc(fc.reason, func(r string) bool { return strings.Contains(g.Reason, r) }) {
			return fmt.Errorf("gpu %d health %s (%s), want %s with one of %q", g.Index, g.Health, g.Reason, fc.health, fc.reason)
		}
		if st, _, cause := state(n); (st != gpufleet.NodeDraining && st != gpufleet.NodeRepairing) || cause != gpufleet.CauseHealth {
			return fmt.Errorf("state %s (cause %q), want draining by the health rules", st, cause)
		}
		return nil
	})
	timing.detected = time.Since(injected)
	if fc.nodeScope {
		if n.Health != gpufleet.Unhealthy || !strings.Contains(n.HealthReason, fmt.Sprintf("gpu %d", g0.Index)) {
			t.Errorf("node health %s (%s), want unhealthy naming gpu %d", n.Health, n.HealthReason, g0.Index)
		}
	} else if n.State != gpufleet.NodeReady {
		t.Errorf("a GPU-scope fault took node %s out: %s (%s)", node, n.State, n.StateReason)
	}

	// The job moves: the first attempt stops with reason_code drain, the
	// job requeues without using a retry and runs elsewhere.
	j, b := waitRunningAttempt(t, member, id, beats, 30*time.Second, a.ID)
	if slices.Contains(b.GPUs, uuid) || (fc.nodeScope && b.Node == node) {
		t.Errorf("the job moved to %s %v, which is out of service", b.Node, b.GPUs)
	}
	if first := attemptByID(j, a.ID); first.State != gpufleet.AttemptStopped || first.ReasonCode != "drain" {
		t.Errorf("first attempt %s: %s (%s: %s), want stopped with reason_code drain", a.ID, first.State, first.ReasonCode, first.Reason)
	}
	if j.Retries.Used != 0 || j.Interruptions < 1 {
		t.Errorf("retries used %d, interruptions %d: a drain must not use the job's retries", j.Retries.Used, j.Interruptions)
	}
	bs, _ := readBeats(beats, id)
	timing.moved = bs[b.ID].First.Sub(injected)
	t.Logf("%s: detected after %s, job beating on %s %v after %s", fc.name, timing.detected.Round(time.Millisecond), b.Node, b.GPUs,
		timing.moved.Round(time.Millisecond))

	// Drained: repairing.
	waitNode(t, admin, node, 20*time.Second, "repairing", func(n gpufleet.Node) error {
		if st, why, _ := state(n); st != gpufleet.NodeRepairing {
			return fmt.Errorf("state %s (%s)", st, why)
		}
		return nil
	})
	scope := "gpu"
	if fc.nodeScope {
		scope = "node"
	}
	timing.path = scope + ": ready -> draining -> repairing"

	// Return to service. With the fault still in place validation fails.
	if fc.stillFailing != "" {
		if _, err := admin.NodeAction(ctx, node, api.Repaired); err != nil {
			t.Fatal(err)
		}
		n := waitNode(t, admin, node, 20*time.Second, "validation fails while the fault is in place", func(n gpufleet.Node) error {
			if st, why, _ := state(n); st != gpufleet.NodeRepairing || !strings.HasPrefix(why, "validation failed: ") {
				return fmt.Errorf("state %s (%s)", st, why)
			}
			return nil
		})
		if _, why, _ := state(n); !strings.Contains(why, fc.stillFailing) {
			t.Errorf("failed validation says %q, want it to name the fault (%q)", why, fc.stillFailing)
		}
		timing.path += " -> validating -> repairing (fault in place)"
	}
	if _, err := admin.ClearFaults(ctx, node, g0.Index); err != nil {
		t.Fatal(err)
	}
	repaired := time.Now()
	if _, err := admin.NodeAction(ctx, node, api.Repaired); err != nil {
		t.Fatal(err)
	}
	waitNode(t, admin, node, 20*time.Second, "ready and healthy after the repair", func(n gpufleet.Node) error {
		g, _ := gpuOfNode(n, uuid)
		if st, why, _ := state(n); st != gpufleet.NodeReady || g.Health != gpufleet.Healthy {
			return fmt.Errorf("state %s (%s), gpu %d health %s (%s)", st, why, g.Index, g.Health, g.Reason)
		}
		return nil
	})
	timing.back = time.Since(repaired)
	timing.path += " -> validating -> ready"
	// The node says so too, and stays so: the finding does not come back
	// from old evidence.
	if err := within(3*time.Second, func() error {
		n, err := admin.Node(ctx, node)
		if err != nil {
			return err
		}
		return readyAndHealthy(n)
	}); err != nil {
		t.Errorf("%s after its GPU passed validation: %v", node, err)
	}
	time.Sleep(time.Second)
	if n, err := admin.Node(ctx, node); err != nil {
		t.Error(err)
	} else if err := readyAndHealthy(n); err != nil {
		t.Errorf("%s a second after the repair: %v", node, err)
	}
	cancelAndWait(t, member, id)
	return timing
}

// within retries check until it passes or d has passed, and returns its
// last error (nil once it passed).
func within(d time.Duration, check func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ptrTo[T any](v T) *T { return &v }

// agentLogHas reports whether one line of the agent's log holds every part.
func agentLogHas(a *agentProc, parts ...string) bool {
	log, _ := os.ReadFile(a.logPath)
	for _, line := range strings.Split(string(log), "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			return true
		}
	}
	return false
}

// supervisorFenced waits until the supervisor of attempt (on agent a's
// node) has recorded that it fenced the command itself.
func supervisorFenced(t *testing.T, a *agentProc, attempt string, d time.Duration) {
	t.Helper()
	path := filepath.Join(a.dataDir, "attempts", attempt, "status.json")
	eventually(t, d, "the supervisor of "+attempt+" fences it", func() error {
		var st struct {
			Fenced string `json:"fenced"`
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, &st); err != nil {
			return err
		}
		if st.Fenced == "" {
			return fmt.Errorf("status.json without fenced: %s", data)
		}
		return nil
	})
}

// TestAgentKillAndStopFence takes the agent of a node running a job away
// while the attempt's processes live on: SIGKILL (the agent is gone) and
// SIGSTOP for longer than the fence, then SIGCONT (the agent is frozen and
// comes back). In both the attempt's supervisor fences the command once
// the agent has been silent for the fence timeout, the server declares
// the attempt lost only after heartbeat grace + fence + margin and runs
// the job on the other node, and when the agent returns it reports the
// attempt fenced and never revives it. The beats prove that the old
// attempt's process had stopped before the new one started.
func TestAgentKillAndStopFence(t *testing.T) {
	p := startServer(t, t.TempDir(), nil, faultServerArgs...)
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	admin, member := f.admin, f.members["team-a"]
	beats := outDir(t)
	const fence = 2 * time.Second
	cases := []struct {
		name, model string
		sig         syscall.Signal
	}{
		{"sigkill", "h100-sxm-80gb", syscall.SIGKILL},
		{"sigstop", "a100-sxm-80gb", syscall.SIGSTOP},
	}
	// The two run side by side on GPU models of their own.
	accepted := make([]string, len(cases))
	t.Run("agents", func(t *testing.T) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				// The job starts while the victim is the only node of its model.
				victim := startFleetAgent(t, p, admin, tc.name+"-1", tc.model+":1")
				waitNode(t, admin, victim.name, 20*time.Second, "ready", readyAndHealthy)
				r, err := member.SubmitJob(ctx, api.SubmitRequest{Name: tc.name, Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{tc.model}},
					Command: beatCommand(beats), SimLoad: "compute", Grace: gpufleet.Duration(time.Second), Estimate: gpufleet.Duration(time.Hour)})
				if err != nil {
					t.Fatal(err)
				}
				accepted[i] = r.ID
				t.Cleanup(func() { cancelQuietly(member, r.ID) })
				_, a := waitRunningAttempt(t, member, r.ID, beats, 30*time.Second)
				spare := startFleetAgent(t, p, admin, tc.name+"-2", tc.model+":1")
				defer func() {
					if t.Failed() {
						victim.dumpLog(t)
						spare.dumpLog(t)
					}
				}()
				waitNode(t, admin, spare.name, 20*time.Second, "ready", readyAndHealthy)

				hit := time.Now()
				if tc.sig == syscall.SIGKILL {
					victim.stop(syscall.SIGKILL)
				} else if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				supervisorFenced(t, victim, a.ID, fence+5*time.Second)
				fenced := time.Since(hit)
				if last := lastBeat(t, beats, r.ID, a.ID); last.Sub(hit) > fence+2500*time.Millisecond {
					t.Errorf("attempt %s beat %s after its agent went silent; the fence is %s", a.ID, last.Sub(hit), fence)
				}

				j, b := waitRunningAttempt(t, member, r.ID, beats, lostAfter+20*time.Second, a.ID)
				old := attemptByID(j, a.ID)
				if old.State != gpufleet.AttemptLost || old.ReasonCode != "node_lost" {
					t.Errorf("attempt %s: %s (%s: %s), want lost with reason_code node_lost", a.ID, old.State, old.ReasonCode, old.Reason)
				}
				if b.Node != spare.name {
					t.Errorf("the job moved to %s, want %s", b.Node, spare.name)
				}
				if b.StartedAt == nil || b.StartedAt.Sub(hit) < lostAfter-time.Second {
					t.Errorf("the job was placed again %v after its node went silent, before grace + fence + margin (%s)", b.StartedAt, lostAfter)
				}
				if j.Retries.Used != 0 {
					t.Errorf("retries used %d: losing a node must not use the job's retries", j.Retries.Used)
				}
				bs, _ := readBeats(beats, r.ID)
				moved := bs[b.ID].First.Sub(hit)
				if !bs[a.ID].Last.Before(bs[b.ID].First) {
					t.Errorf("attempt %s beat until %s, attempt %s from %s", a.ID, stamp(bs[a.ID].Last), b.ID, stamp(bs[b.ID].First))
				}

				// The agent comes back: it reports the old attempt fenced, the
				// server keeps it lost, nothing of it runs again.
				back := time.Now()
				if tc.sig == syscall.SIGKILL {
					victim.start()
				} else if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				waitNode(t, admin, victim.name, 60*time.Second, "back and ready", func(n gpufleet.Node) error {
					if n.State != gpufleet.NodeReady || n.HeartbeatAgeS == nil || *n.HeartbeatAgeS > 1 {
						return fmt.Errorf("state %s (%s), heartbeat age %v", n.State, n.StateReason, n.HeartbeatAgeS)
					}
					return nil
				})
				eventually(t, 10*time.Second, "the agent reports "+a.ID+" fenced", func() error {
					if !agentLogHas(victim, `msg="attempt ended"`, "attempt="+a.ID, "state=stopped", "reason_code=fenced") {
						return fmt.Errorf("no \"attempt ended ... reason_code=fenced\" for %s in the agent's log", a.ID)
					}
					return nil
				})
				time.Sleep(time.Second)
				j, err = member.Job(ctx, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if old := attemptByID(j, a.ID); old.State != gpufleet.AttemptLost {
					t.Errorf("after the agent came back attempt %s is %s, want it to stay lost", a.ID, old.State)
				}
				if cur := attemptByID(j, b.ID); cur.State != gpufleet.AttemptRunning || len(j.Attempts) != 2 {
					t.Errorf("after the agent came back: %s, want %s still running and no other attempt", attemptStates(j), b.ID)
				}
				if last := lastBeat(t, beats, r.ID, a.ID); last.After(back) {
					t.Errorf("attempt %s beat again at %s after its agent came back", a.ID, stamp(last))
				}
				cancelAndWait(t, member, r.ID)
				t.Logf("%s: supervisor fenced after %s, job beating on %s after %s (lost after grace+fence+margin %s)",
					tc.name, fenced.Round(10*time.Millisecond), b.Node, moved.Round(10*time.Millisecond), lostAfter)
			})
		}
	})
	if rep := checkHistory(t, admin, beats, accepted...); len(rep.Beats) != len(cases) {
		t.Errorf("beats of %d jobs, want %d", len(rep.Beats), len(cases))
	}
}

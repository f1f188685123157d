package server

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu"
	"github.com/gpufleet/gpufleet/internal/store"
)

// TestFellOffTheBusDrainsRepairsAndValidates walks the repair path of a
// node whose GPU falls off the bus (XID 79, then missing): the node drains,
// its attempt is stopped and requeued without using a retry and starts on
// another node, the node goes to repairing; marked repaired it validates,
// a failed check keeps it out, a passing one returns it to ready and
// healthy. Every step leaves an event.
func TestFellOffTheBusDrainsRepairsAndValidates(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 8)
	n2 := f.node("n2", "h100-sxm-80gb", 8)
	j := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8}, Priority: "production", Estimate: gpufleet.Duration(time.Hour)})
	f.cycle()
	var node api.Principal
	var as api.Assignment
	for _, p := range []api.Principal{n1, n2} {
		if hb, _ := f.srv.Heartbeat(ctx, p, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion}); len(hb.Start) == 1 {
			node, as = p, hb.Start[0]
		}
	}
	other := n2
	if node.Node == "n2" {
		other = n1
	}
	run := []api.AttemptReport{{AttemptID: as.AttemptID, JobID: j.ID, State: gpufleet.AttemptRunning}}
	f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run})

	lost := "GPU-" + node.Node + "-d"
	if _, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run, MissingGPUs: []string{lost},
		Samples: []api.GPUSample{{UUID: lost, XIDs: []int{79}}}}); err != nil {
		t.Fatal(err)
	}
	n, _ := f.srv.Node(ctx, f.admin, node.Node)
	if n.State != gpufleet.NodeDraining || n.Health != gpufleet.Unhealthy || !strings.Contains(n.HealthReason, "gpu 3") ||
		n.StateCause != gpufleet.CauseHealth {
		t.Fatalf("after XID 79: state %s (%s, cause %q), health %s (%s)", n.State, n.StateReason, n.StateCause, n.Health, n.HealthReason)
	}
	f.cycle()
	hb, _ := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run, MissingGPUs: []string{lost}})
	if len(hb.Stop) != 1 || hb.Stop[0].ReasonCode != "drain" {
		t.Fatalf("the drained node's attempt is not stopped: %+v", hb)
	}
	f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, MissingGPUs: []string{lost},
		Attempts: []api.AttemptReport{{AttemptID: as.AttemptID, JobID: j.ID, State: gpufleet.AttemptStopped, Reason: "drained"}}})
	f.cycle()
	if got := f.job(j.ID); got.Retries.Used != 0 || got.Interruptions != 1 {
		t.Errorf("job after the drain: retries used %d, interruptions %d", got.Retries.Used, got.Interruptions)
	}
	if hb, _ := f.srv.Heartbeat(ctx, other, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion}); len(hb.Start) != 1 {
		t.Errorf("the job did not move to %s: %+v", other.Node, hb)
	}
	f.cycle()
	if n, _ := f.srv.Node(ctx, f.admin, node.Node); n.State != gpufleet.NodeRepairing {
		t.Fatalf("drained node with no attempts: %s, want repairing", n.State)
	}
	if _, err := f.srv.NodeAction(ctx, f.admin, node.Node, api.Uncordon); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("uncordon of a node in repair: %v, want invalid", err)
	}

	// Repaired, validation fails while the GPU is still missing.
	if _, err := f.srv.NodeAction(ctx, f.admin, node.Node, api.Repaired); err != nil {
		t.Fatal(err)
	}
	f.cycle()
	hb, _ = f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, MissingGPUs: []string{lost}})
	if len(hb.Validate) != 1 || len(hb.Validate[0].GPUs) != 0 {
		t.Fatalf("validating node got no whole-node check: %+v", hb.Validate)
	}
	order := hb.Validate[0]
	f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, MissingGPUs: []string{lost},
		Validations: []api.ValidationResult{{ID: order.ID, Passed: false, Detail: "gpu 3 is missing from discovery"}}})
	n, _ = f.srv.Node(ctx, f.admin, node.Node)
	if n.State != gpufleet.NodeRepairing || !strings.Contains(n.StateReason, "validation failed") {
		t.Fatalf("after a failed validation: %s (%s)", n.State, n.StateReason)
	}

	// Repaired again; the GPU is back and the check passes.
	f.srv.NodeAction(ctx, f.admin, node.Node, api.Repaired)
	f.cycle()
	hb, _ = f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if len(hb.Validate) != 1 || hb.Validate[0].ID == order.ID {
		t.Fatalf("second validation order: %+v (first %s)", hb.Validate, order.ID)
	}
	f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Validations: []api.ValidationResult{{ID: hb.Validate[0].ID, Passed: true, Detail: "8 gpus ok"}}})
	f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	n, _ = f.srv.Node(ctx, f.admin, node.Node)
	if n.State != gpufleet.NodeReady || n.Health != gpufleet.Healthy || slices.ContainsFunc(n.GPUs, func(g gpufleet.NodeGPU) bool { return g.Health != gpufleet.Healthy }) {
		t.Fatalf("after validation passed: %s %s %+v", n.State, n.Health, n.GPUs)
	}
	evs, err := f.st.Events(ctx, store.EventFilter{Object: node.Node})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	for _, k := range []string{"node.unhealthy", "node.draining", "node.repairing", "node.validating", "node.validation_failed", "node.validation_passed", "node.ready", "node.healthy"} {
		if !slices.Contains(kinds, k) {
			t.Errorf("no %s event; have %v", k, kinds)
		}
	}
}

// TestGPUDrainStopsOnlyThatGPUsWork checks a GPU-scope action: a pending
// row remap drains that GPU alone, stops the attempt holding it, and the
// node keeps running the rest.
func TestGPUDrainStopsOnlyThatGPUsWork(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 2)
	j1 := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Estimate: gpufleet.Duration(time.Hour)})
	j2 := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Estimate: gpufleet.Duration(time.Hour)})
	f.cycle()
	hb, _ := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if len(hb.Start) != 2 {
		t.Fatalf("starts: %+v", hb.Start)
	}
	var run []api.AttemptReport
	for _, s := range hb.Start {
		run = append(run, api.AttemptReport{AttemptID: s.AttemptID, JobID: s.JobID, State: gpufleet.AttemptRunning})
	}
	bad := hb.Start[0]
	yes := true
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run, Samples: []api.GPUSample{
		{UUID: bad.GPUs[0], Evidence: &api.GPUEvidence{Counters: gpu.Counters{RowRemapPending: &yes}}}}})
	f.cycle()
	hb, _ = f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run})
	if len(hb.Stop) != 1 || hb.Stop[0].AttemptID != bad.AttemptID || !strings.Contains(hb.Stop[0].Reason, "draining") {
		t.Fatalf("stops: %+v, want only %s", hb.Stop, bad.AttemptID)
	}
	n, _ := f.srv.Node(ctx, f.admin, "n1")
	if n.State != gpufleet.NodeReady {
		t.Errorf("node state %s, want ready (a GPU-scope action)", n.State)
	}
	_ = j1
	_ = j2
}

// TestCircuitBreakerStopsMassQuarantine drains the first node for an XID
// 79 and refuses the second when that would take more than 10% of the
// fleet out: the condition is reported, an event says why nothing moved.
func TestCircuitBreakerStopsMassQuarantine(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	var nodes []api.Principal
	for _, name := range []string{"n1", "n2", "n3"} {
		nodes = append(nodes, f.node(name, "h100-sxm-80gb", 8))
	}
	f.cycle() // lead
	for _, p := range nodes[:2] {
		lost := "GPU-" + p.Node + "-a"
		f.srv.Heartbeat(ctx, p, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, MissingGPUs: []string{lost}, Samples: []api.GPUSample{{UUID: lost, XIDs: []int{79}}}})
	}
	n1, _ := f.srv.Node(ctx, f.admin, "n1")
	n2, _ := f.srv.Node(ctx, f.admin, "n2")
	if n1.State != gpufleet.NodeDraining || n2.State != gpufleet.NodeReady || n2.Health != gpufleet.Unhealthy {
		t.Fatalf("n1 %s, n2 %s/%s: want the first drained and the second only reported", n1.State, n2.State, n2.Health)
	}
	evs, _ := f.st.Events(ctx, store.EventFilter{Object: "n2"})
	if !slices.ContainsFunc(evs, func(e gpufleet.Event) bool {
		return e.Kind == "health.quarantine_refused" && strings.Contains(e.Detail, "10%")
	}) {
		t.Errorf("no refusal event for n2: %+v", evs)
	}
}

// TestGPURepairReturnsTheNodeToHealthy repairs one GPU of a node that
// stays ready: when its validation passes, the GPU and the node are healthy
// again (nothing else on the node is wrong).
func TestGPURepairReturnsTheNodeToHealthy(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	n1 := f.node("n1", "h100-sxm-80gb", 2)
	f.cycle()
	yes := true
	bad := "GPU-n1-a"
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Samples: []api.GPUSample{{UUID: bad, Evidence: &api.GPUEvidence{Counters: gpu.Counters{RowRemapPending: &yes}}}}})
	f.cycle() // draining with nothing on it: repairing
	n, _ := f.srv.Node(ctx, f.admin, "n1")
	if n.GPUs[0].State != gpufleet.NodeRepairing || n.Health == gpufleet.Healthy {
		t.Fatalf("after the remap: gpu %s, node %s", n.GPUs[0].State, n.Health)
	}
	no := false
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Samples: []api.GPUSample{{UUID: bad, Evidence: &api.GPUEvidence{Counters: gpu.Counters{RowRemapPending: &no}}}}})
	if _, err := f.srv.NodeAction(ctx, f.admin, "n1", api.Repaired); err != nil {
		t.Fatal(err)
	}
	f.cycle()
	hb, _ := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if len(hb.Validate) != 1 || !slices.Equal(hb.Validate[0].GPUs, []string{bad}) {
		t.Fatalf("validation order: %+v", hb.Validate)
	}
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Validations: []api.ValidationResult{{ID: hb.Validate[0].ID, Passed: true, Detail: "ok"}}})
	n, _ = f.srv.Node(ctx, f.admin, "n1")
	if n.State != gpufleet.NodeReady || n.Health != gpufleet.Healthy || n.HealthReason != "" ||
		n.GPUs[0].State != gpufleet.NodeReady || n.GPUs[0].Health != gpufleet.Healthy {
		t.Fatalf("after validation: node %s/%s %q, gpu %s/%s", n.State, n.Health, n.HealthReason, n.GPUs[0].State, n.GPUs[0].Health)
	}
}

// TestSilentNodeIsReportedUnhealthyUntilItBeatsAgain checks the heartbeat
// rule: past the grace a silent node shows unhealthy with the silence as
// its reason (once, not rewritten every cycle), and its next heartbeat
// makes it healthy again.
func TestSilentNodeIsReportedUnhealthyUntilItBeatsAgain(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	n1 := f.node("n1", "l4", 1)
	f.cycle()
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	f.clk.Advance(f.srv.cfg.HeartbeatGrace + time.Second)
	f.cycle()
	f.clk.Advance(time.Second)
	f.cycle()
	n, _ := f.srv.Node(ctx, f.admin, "n1")
	if n.Health != gpufleet.Unhealthy || !strings.Contains(n.HealthReason, "no heartbeat") || n.State != gpufleet.NodeDown {
		t.Fatalf("silent node: %s %s (%s)", n.State, n.Health, n.HealthReason)
	}
	evs, _ := f.st.Events(ctx, store.EventFilter{Object: "n1"})
	if c := countKind(evs, "node.unhealthy"); c != 1 {
		t.Errorf("%d node.unhealthy events, want 1", c)
	}
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	n, _ = f.srv.Node(ctx, f.admin, "n1")
	if n.Health != gpufleet.Healthy || n.State != gpufleet.NodeReady {
		t.Fatalf("after a heartbeat: %s %s (%s)", n.State, n.Health, n.HealthReason)
	}
}

func countKind(evs []gpufleet.Event, kind string) int {
	n := 0
	for _, e := range evs {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// TestSpareKeepsCapacityForProduction checks that the server hands its
// --spare to the scheduler: a training job may not take the spare GPU, a
// production job may.
func TestSpareKeepsCapacityForProduction(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	f.srv.cfg.Spare = map[string]int{"h100-sxm-80gb": 1}
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 2)
	tr := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 2}, Priority: "training", Estimate: gpufleet.Duration(time.Hour)})
	f.cycle()
	if hb, _ := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion}); len(hb.Start) != 0 {
		t.Fatalf("training took the spare: %+v", hb.Start)
	}
	if q := f.job(tr.ID).Queue; q == nil || !strings.Contains(q.Reason, "held free for production failover") {
		t.Errorf("training job's reason: %+v", q)
	}
	f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 2}, Priority: "production", Estimate: gpufleet.Duration(time.Hour)})
	f.cycle()
	if hb, _ := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion}); len(hb.Start) != 1 {
		t.Fatalf("production did not start on the spare: %+v", hb.Start)
	}
}

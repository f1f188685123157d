package scheduler_test

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// TestLASRecheck: under las a running job that has received less than the
// first threshold is in the queued job's queue and no victim; the cycle's
// Recheck is when it crosses the threshold (3250 GPU-seconds over 8 GPUs:
// 406.25 s after its start), and then the queued job preempts it.
func TestLASRecheck(t *testing.T) {
	cfg, err := scheduler.PolicyConfig("las")
	if err != nil {
		t.Fatal(err)
	}
	node := schedtest.MakeNode("n1", "h100-sxm-80gb", 8).Obj()
	var gpus []string
	for _, g := range node.GPUs {
		gpus = append(gpus, g.ID)
	}
	running := schedtest.MakeJob("r", "a", 8).Preemptible(0).
		Running(0, scheduler.Placement{Node: "n1", GPUs: gpus, Fraction: 1}).Obj()
	queued := schedtest.MakeJob("q", "b", 8).Submitted(100 * time.Second).Obj()
	in := scheduler.Input{Now: schedtest.T0.Add(100 * time.Second), Models: schedtest.Models(), Nodes: []scheduler.Node{node},
		Jobs: []scheduler.Job{running, queued}, Config: cfg}
	out := scheduler.Schedule(in)
	want := schedtest.T0.Add(406250 * time.Millisecond)
	if len(out.Stops) != 0 || !out.Recheck.Equal(want) {
		t.Fatalf("stops %+v recheck %s, want none and %s", out.Stops, out.Recheck, want)
	}
	in.Now = out.Recheck
	out = scheduler.Schedule(in)
	if len(out.Stops) != 1 || out.Stops[0].Job != "r" || out.Stops[0].For != "q" {
		t.Fatalf("at the recheck: stops %+v, want r preempted for q", out.Stops)
	}
}

package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// TestETAFarHorizon: a queue that takes centuries to drain on one GPU (300
// jobs of the longest estimate allowed) ends its ETA simulation: the
// re-sorting horizon saturates rather than overflow, and the ETAs beyond
// ten years are capped.
func TestETAFarHorizon(t *testing.T) {
	in := scheduler.Input{Now: schedtest.T0, Models: schedtest.Models()}
	in.Nodes = append(in.Nodes, schedtest.MakeNode("n1", "h100-sxm-80gb", 1).Obj())
	for i := range 300 {
		j := schedtest.MakeJob(fmt.Sprintf("j%03d", i), "a", 1).Estimate(366 * 24 * time.Hour).Obj()
		j.Submitted = schedtest.T0
		in.Jobs = append(in.Jobs, j)
		in.Arrivals = append(in.Arrivals, j)
	}
	in.Config, _ = scheduler.PolicyConfig("gpufleet")
	done := make(chan scheduler.Output, 1)
	go func() { done <- scheduler.Schedule(in) }()
	select {
	case out := <-done:
		if len(out.Pending) != 299 || out.Pending[298].EstimatedStart == nil {
			t.Fatalf("%d pending, last %+v; want 299 with an ETA", len(out.Pending), out.Pending[len(out.Pending)-1])
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the ETA simulation did not end")
	}
}

package scheduler_test

import (
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// One 8-GPU H100 node with 4 GPUs busy for another hour; a queued 8-GPU
// job must wait, and a short 2-GPU job backfills ahead of it.
func ExampleSchedule() {
	h100, _ := catalog.Default().Lookup("h100-sxm-80gb")
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	node := scheduler.Node{Name: "n1", State: scheduler.Ready}
	for i := range 8 {
		node.GPUs = append(node.GPUs, scheduler.GPU{ID: fmt.Sprintf("gpu-%d", i), Index: i,
			Model: h100.ID, State: scheduler.Ready, NVLinkDomain: "n1"})
	}
	exclusive := gpufleet.Sharing{Kind: gpufleet.Exclusive}
	cfg, _ := scheduler.PolicyConfig("backfill")
	out := scheduler.Schedule(scheduler.Input{
		Now:    now,
		Nodes:  []scheduler.Node{node},
		Models: map[string]catalog.GPU{h100.ID: h100},
		Config: cfg,
		Jobs: []scheduler.Job{
			{ID: "running", Team: "a", Priority: gpufleet.Training, Estimate: 2 * time.Hour,
				Resources: gpufleet.Resources{GPUs: 4, Sharing: exclusive}, Started: now.Add(-time.Hour),
				Placement: []scheduler.Placement{{Node: "n1", GPUs: []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, Fraction: 1}}},
			{ID: "big", Team: "a", Priority: gpufleet.Training, Estimate: 4 * time.Hour, Submitted: now.Add(-time.Minute),
				Resources: gpufleet.Resources{GPUs: 8, Sharing: exclusive}},
			{ID: "small", Team: "b", Priority: gpufleet.Training, Estimate: 30 * time.Minute, Submitted: now,
				Resources: gpufleet.Resources{GPUs: 2, Sharing: exclusive}},
		},
	})
	for _, s := range out.Starts {
		fmt.Printf("start %s on %s %v (backfilled %v)\n", s.Job, s.Placement[0].Node, s.Placement[0].GPUs, s.Backfilled)
	}
	for _, p := range out.Pending {
		fmt.Printf("#%d %s: %s; starts in %s\n", p.Position, p.Job, p.Reason, p.EstimatedStart.Sub(now))
	}
	// Output:
	// start small on n1 [gpu-4 gpu-5] (backfilled true)
	// #1 big: needs 8 GPUs on one node; the most free on a matching node is 4; starts in 1h0m0s
}

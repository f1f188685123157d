package scheduler_test

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// TestExplainSharedFleet checks that concurrent Explain calls on one
// FleetCache, which read the cached fleet itself rather than a copy (as
// the server's submission check does), answer as a call that builds its
// own fleet, and change nothing another call reads (run with -race).
func TestExplainSharedFleet(t *testing.T) {
	in := schedtest.Large(schedtest.LargeSpec{Nodes: 200, Pending: 1, Teams: 4, Seed: 3})
	in.Jobs = nil
	in.Config = must(scheduler.PolicyConfig("gpufleet"))
	job := func(r gpufleet.Resources) scheduler.Job {
		return scheduler.Job{ID: "j", Team: "team00", Priority: gpufleet.Batch, Submitted: in.Now, Resources: r}
	}
	jobs := []scheduler.Job{
		job(gpufleet.Resources{GPUs: 1}),
		job(gpufleet.Resources{GPUs: 8}),
		job(gpufleet.Resources{GPUs: 16, Nodes: 2}),
		job(gpufleet.Resources{GPUs: 9}),     // more than a node: spreads
		job(gpufleet.Resources{GPUs: 20000}), // more than the fleet: never
		job(gpufleet.Resources{GPUs: 1, GPUModels: []string{"h200-sxm-141gb"}}),
		job(gpufleet.Resources{GPUs: 1, Sharing: gpufleet.Sharing{Kind: gpufleet.MIG, Profile: "1g.10gb"}}),
		job(gpufleet.Resources{GPUs: 1, NodeSelector: map[string]string{"zone": "nowhere"}}),
	}
	type answer struct {
		E      *gpufleet.Explanation
		Reason string
	}
	want := make([]answer, len(jobs))
	for i, j := range jobs {
		e, r := scheduler.Explain(in, j)
		want[i] = answer{e, r}
	}
	shared := in
	shared.Cache, shared.FleetVersion = &scheduler.FleetCache{}, 1
	var wg sync.WaitGroup
	got := make([][]answer, 4)
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				got[g] = got[g][:0]
				for _, j := range jobs {
					e, r := scheduler.Explain(shared, j)
					got[g] = append(got[g], answer{e, r})
				}
			}
		}()
	}
	wg.Wait()
	for g := range got {
		if diff := cmp.Diff(want, got[g]); diff != "" {
			t.Fatalf("goroutine %d: shared fleet answers differ (-own fleet +shared):\n%s", g, diff)
		}
	}
}

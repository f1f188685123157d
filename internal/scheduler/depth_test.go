package scheduler_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// TestReasonDepth: Config.ReasonDepth changes no decision and no reason
// code; the reasons of the jobs within the depth, in the pending list or
// in their team's, are the ones written with no depth; the others are
// shorter or the same, and share one explanation per reason.
func TestReasonDepth(t *testing.T) {
	in := schedtest.Large(schedtest.LargeSpec{Nodes: 300, Pending: 3000, Teams: 6, Seed: 5})
	cfg, err := scheduler.PolicyConfig("gpufleet")
	if err != nil {
		t.Fatal(err)
	}
	const depth = 40
	cfg.ReasonDepth = 0
	in.Config = cfg
	full := scheduler.Schedule(in)
	in.Config.ReasonDepth = depth
	got := scheduler.Schedule(in)
	if diff := cmp.Diff(full.Starts, got.Starts); diff != "" {
		t.Errorf("starts differ (-full +depth):\n%s", diff)
	}
	if diff := cmp.Diff(full.Stops, got.Stops); diff != "" {
		t.Errorf("stops differ (-full +depth):\n%s", diff)
	}
	if len(full.Pending) != len(got.Pending) {
		t.Fatalf("pending: %d with no depth, %d with depth %d", len(full.Pending), len(got.Pending), depth)
	}
	shorter := 0
	for i, want := range full.Pending {
		p := got.Pending[i]
		if p.Job != want.Job || p.ReasonCode != want.ReasonCode || p.Position != want.Position || p.TeamPosition != want.TeamPosition {
			t.Fatalf("pending %d: got %+v, want %+v", i, p, want)
		}
		if !cmp.Equal(p.EstimatedStart, want.EstimatedStart) {
			t.Errorf("job %s: estimated start %v, want %v", p.Job, p.EstimatedStart, want.EstimatedStart)
		}
		switch {
		case p.Position <= depth || p.TeamPosition <= depth:
			if p.Reason != want.Reason {
				t.Errorf("job %s (position %d, team position %d) is within the depth: reason %q, want %q", p.Job, p.Position, p.TeamPosition, p.Reason, want.Reason)
			}
		case p.Reason != want.Reason:
			shorter++
			if len(p.Reason) >= len(want.Reason) {
				t.Errorf("job %s past the depth: reason %q is not shorter than %q", p.Job, p.Reason, want.Reason)
			}
		}
	}
	if shorter == 0 {
		t.Errorf("no reason past the depth is shorter: the test proves little")
	}
	// Past the depth the jobs of one reason share its explanation: the
	// scheduler makes and renders one per reason, not one per job.
	past, shared := 0, map[*gpufleet.Explanation]bool{}
	for _, p := range got.Pending {
		if p.Position > depth && p.TeamPosition > depth {
			past++
			shared[p.Explanation] = true
		}
	}
	if past == 0 || len(shared)*10 > past {
		t.Errorf("%d jobs past the depth have %d distinct explanations: want them shared", past, len(shared))
	}
	t.Logf("%d jobs past the depth share %d explanations", past, len(shared))
	t.Logf("%d pending, %d with a shorter reason past depth %d", len(got.Pending), shorter, depth)
}

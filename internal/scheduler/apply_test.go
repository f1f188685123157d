package scheduler_test

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// TestDecidedStopsAtTheDecision: Decided carries a decision out at in.Now
// and moves no time (a stop whose grace has ended still holds its GPUs:
// only the agent's report ends the run), and Apply is Decided with time
// moved.
func TestDecidedStopsAtTheDecision(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	pl := []scheduler.Placement{{Node: "n1", GPUs: []string{"g0"}}}
	in := scheduler.Input{Now: t0, Jobs: []scheduler.Job{
		{ID: "queued", Team: "a", Priority: gpufleet.Batch},
		{ID: "running", Team: "a", Priority: gpufleet.Batch, Started: t0.Add(-time.Hour), Placement: pl},
		{ID: "grace-over", Team: "a", Priority: gpufleet.Batch, Started: t0.Add(-time.Hour), Placement: pl,
			StopAt: t0.Add(-time.Minute), StopCode: gpufleet.StopPreemptedPriority},
		{ID: "bad", Team: "a", Priority: gpufleet.Batch, Invalid: "no"},
	}}
	out := scheduler.Output{
		Starts: []scheduler.Start{{Job: "queued", Placement: pl}},
		Stops:  []scheduler.Stop{{Job: "running", Code: gpufleet.StopDrain, Grace: 30 * time.Second}},
		Fails:  []scheduler.Fail{{Job: "bad", Code: scheduler.FailInvalid}},
	}
	byID := func(in scheduler.Input) map[string]scheduler.Job {
		m := map[string]scheduler.Job{}
		for _, j := range in.Jobs {
			m[j.ID] = j
		}
		return m
	}
	d := byID(scheduler.Decided(in, out))
	if _, ok := d["bad"]; ok {
		t.Error("a failed job is still in the fleet")
	}
	if j := d["queued"]; !j.Running() || !j.Started.Equal(t0) {
		t.Errorf("started job: running %v since %v, want since %v", j.Running(), j.Started, t0)
	}
	if j := d["running"]; !j.StopAt.Equal(t0.Add(30*time.Second)) || j.StopCode != gpufleet.StopDrain {
		t.Errorf("stopped job: stop at %v code %q", j.StopAt, j.StopCode)
	}
	if j := d["grace-over"]; !j.Running() {
		t.Error("Decided ended a run whose grace is over: only its agent's report does")
	}
	if len(in.Jobs[0].Placement) != 0 || !in.Jobs[1].StopAt.IsZero() {
		t.Error("Decided changed its input")
	}
	a := byID(scheduler.Apply(in, out, t0))
	if j, ok := a["grace-over"]; !ok || j.Running() || !j.Requeued {
		t.Errorf("Apply: a preempted run whose grace is over should requeue: %+v", j)
	}
	if j := a["running"]; !j.Running() {
		t.Error("Apply at in.Now ended a run whose grace has not ended")
	}
}

package server

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// TestETAHistoryObserve: the leader remembers the simulated wait of a
// queued job from the first cycle it saw it, and when the job starts it
// becomes a WaitSample (predicted against actual, both from submission);
// jobs that leave the queue otherwise are forgotten.
func TestETAHistoryObserve(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := func(id string, gpus int) scheduler.Job {
		return scheduler.Job{ID: id, Resources: gpufleet.Resources{GPUs: gpus}, Submitted: t0, Estimate: time.Hour}
	}
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	// The sample keeps the run time the job was planned on (the scheduler's
	// Pending.Estimate), not the request's, which may be none.
	hour := gpufleet.RunEstimate{Seconds: 3600, From: gpufleet.EstimateSize, Runs: 5}
	in := scheduler.Input{Now: t0.Add(time.Second), Jobs: []scheduler.Job{job("a", 1), job("b", 8), job("c", 2)}}
	var h etaHistory
	h.observe(in, scheduler.Output{Pending: []scheduler.Pending{{Job: "a", Simulated: at(3 * time.Hour), Estimate: hour},
		{Job: "b", Simulated: at(0), Estimate: hour}, {Job: "c"}}}, in.Now)
	// Later cycles predict other starts; the first prediction stands.
	h.observe(in, scheduler.Output{Pending: []scheduler.Pending{{Job: "a", Simulated: at(9 * time.Hour)}, {Job: "b", Simulated: at(time.Hour)}}}, t0.Add(time.Minute))
	h.observe(in, scheduler.Output{Starts: []scheduler.Start{{Job: "a"}, {Job: "b"}, {Job: "c"}}}, t0.Add(2*time.Hour))
	want := []scheduler.WaitSample{
		{GPUs: 1, Estimate: time.Hour, Predicted: 3 * time.Hour, Actual: 2 * time.Hour},
		{GPUs: 8, Estimate: time.Hour, Predicted: 0, Actual: 2 * time.Hour},
	}
	if diff := cmp.Diff(want, h.waits); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
	if len(h.predicted) != 0 {
		t.Errorf("predictions of jobs no longer queued are kept: %v", h.predicted)
	}

	// A job still queued is a censored sample: its wait so far.
	h.observe(in, scheduler.Output{Pending: []scheduler.Pending{{Job: "c", Simulated: at(4 * time.Hour), Estimate: hour}}}, in.Now)
	later := in
	later.Now = t0.Add(5 * time.Hour)
	got := h.history(later)
	if n := len(got); n != 3 || !cmp.Equal(got[2], scheduler.WaitSample{GPUs: 2, Estimate: time.Hour, Predicted: 4 * time.Hour,
		Actual: 5 * time.Hour, Censored: true}) {
		t.Errorf("history %+v, want the two waits and c censored at 5h", got)
	}
}

// TestETAHistoryArrived: the leader keeps each job it sees once, by submit
// time, while it was submitted within the arrival window, running or not.
func TestETAHistoryArrived(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := func(id string, submitted time.Duration, running bool) scheduler.Job {
		j := scheduler.Job{ID: id, Resources: gpufleet.Resources{GPUs: 1}, Submitted: t0.Add(submitted)}
		if running {
			j.Placement = []scheduler.Placement{{Node: "n1", GPUs: []string{"g0"}}}
		}
		return j
	}
	cfg := scheduler.Config{ArrivalWindow: 24 * time.Hour}
	ids := func(js []scheduler.Job) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	var h etaHistory
	got := h.arrived(scheduler.Input{Now: t0.Add(30 * time.Hour), Config: cfg,
		Jobs: []scheduler.Job{job("b", 20*time.Hour, true), job("old", time.Hour, false), job("a", 10*time.Hour, false)}})
	if diff := cmp.Diff([]string{"a", "b"}, ids(got)); diff != "" {
		t.Errorf("first cycle (-want +got):\n%s", diff)
	}
	if got[1].Placement != nil {
		t.Errorf("an arrival keeps its placement: %v", got[1].Placement)
	}
	// Seen again: not twice; a day later a has left the window.
	got = h.arrived(scheduler.Input{Now: t0.Add(35 * time.Hour), Config: cfg,
		Jobs: []scheduler.Job{job("a", 10*time.Hour, false), job("c", 34*time.Hour, false)}})
	if diff := cmp.Diff([]string{"b", "c"}, ids(got)); diff != "" {
		t.Errorf("second cycle (-want +got):\n%s", diff)
	}
	if _, ok := h.seen["a"]; ok {
		t.Errorf("a job out of the window is still remembered")
	}
}

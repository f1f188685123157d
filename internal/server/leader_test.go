package server

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/store"
)

// TestToSchedJobQueuedSince: a job back in the queue after a stopped
// attempt is queued since that attempt ended (the slower-model wait counts
// from there); a fresh job, and a running one, carry no Queued time.
func TestToSchedJobQueuedSince(t *testing.T) {
	submitted := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	started, stopped := submitted.Add(time.Hour), submitted.Add(3*time.Hour)
	for _, tc := range []struct {
		name         string
		job          gpufleet.Job
		wantQueued   time.Time
		wantRequeued bool
	}{
		{"fresh", gpufleet.Job{ID: "a", State: gpufleet.JobQueued, SubmittedAt: submitted}, time.Time{}, false},
		{"requeued after a preemption", gpufleet.Job{ID: "b", State: gpufleet.JobQueued, SubmittedAt: submitted, Interruptions: 1,
			Attempts: []gpufleet.Attempt{{ID: "b-1", State: gpufleet.AttemptStopped, StartedAt: &started, FinishedAt: &stopped}}}, stopped, true},
		{"running", gpufleet.Job{ID: "c", State: gpufleet.JobRunning, SubmittedAt: submitted,
			Attempts: []gpufleet.Attempt{{ID: "c-1", State: gpufleet.AttemptRunning, StartedAt: &started, Fraction: 1,
				Nodes: []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"g0"}}}}}}, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sj, ok := toSchedJob(tc.job)
			if !ok {
				t.Fatal("job left out")
			}
			if !sj.Queued.Equal(tc.wantQueued) || sj.Requeued != tc.wantRequeued {
				t.Errorf("Queued %v Requeued %v, want %v %v", sj.Queued, sj.Requeued, tc.wantQueued, tc.wantRequeued)
			}
		})
	}
}

// TestToSchedJobHistory: the scheduler gets a job's attained GPU-time (its
// ended attempts' gpu_seconds, for LAS) and its preemption history (the
// ended attempts stopped with a preempted_* code, for the preemption
// bounds); a drain or a failure is not a preemption, and the running
// attempt's own time is the scheduler's to add.
func TestToSchedJobHistory(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	at := func(h int) *time.Time { x := t0.Add(time.Duration(h) * time.Hour); return &x }
	ended := func(id, code string, h int, gpuS float64) gpufleet.Attempt {
		return gpufleet.Attempt{ID: id, State: gpufleet.AttemptStopped, StartedAt: at(h - 1), FinishedAt: at(h), ReasonCode: code, GPUSeconds: gpuS}
	}
	tests := map[string]struct {
		attempts        []gpufleet.Attempt
		wantAttained    time.Duration
		wantPreemptions int
		wantRecent      []time.Time
	}{
		"fresh": {},
		"two preemptions and a drain": {
			attempts:     []gpufleet.Attempt{ended("a1", "preempted_priority", 1, 3600), ended("a2", "drain", 3, 7200), ended("a3", "preempted_starvation", 5, 1800)},
			wantAttained: 12600 * time.Second, wantPreemptions: 2, wantRecent: []time.Time{*at(1), *at(5)},
		},
		"the running attempt counts nothing yet": {
			attempts: []gpufleet.Attempt{ended("a1", "preempted_reclaim", 1, 100),
				{ID: "a2", State: gpufleet.AttemptRunning, StartedAt: at(2), GPUSeconds: 500, Nodes: []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"g0"}}}}},
			wantAttained: 100 * time.Second, wantPreemptions: 1, wantRecent: []time.Time{*at(1)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			state := gpufleet.JobQueued
			if len(tc.attempts) > 0 && !tc.attempts[len(tc.attempts)-1].State.Terminal() {
				state = gpufleet.JobRunning
			}
			sj, ok := toSchedJob(gpufleet.Job{ID: "j", State: state, SubmittedAt: t0, Attempts: tc.attempts})
			if !ok {
				t.Fatal("job left out")
			}
			if sj.Attained != tc.wantAttained || sj.Preemptions != tc.wantPreemptions || !slices.Equal(sj.RecentPreemptions, tc.wantRecent) {
				t.Errorf("attained %s preemptions %d recent %v, want %s %d %v", sj.Attained, sj.Preemptions, sj.RecentPreemptions,
					tc.wantAttained, tc.wantPreemptions, tc.wantRecent)
			}
		})
	}
}

// TestPreemptionBoundEvent: a batch job stopped twice in a day by
// production work reaches the per-day preemption bound, and its events
// say so (job.preemption_bound) with the stop that reached it.
func TestPreemptionBoundEvent(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 8)
	beat := func(reports ...api.AttemptReport) api.HeartbeatResponse {
		hb, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1", Attempts: reports})
		if err != nil {
			t.Fatal(err)
		}
		return hb
	}
	batch := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8}, Priority: gpufleet.Batch, Preemptible: true})
	for round := 1; round <= 2; round++ {
		f.cycle()
		hb := beat()
		if len(hb.Start) != 1 || hb.Start[0].JobID != batch.ID {
			t.Fatalf("round %d: starts %+v, want the batch job", round, hb.Start)
		}
		run := api.AttemptReport{AttemptID: hb.Start[0].AttemptID, JobID: batch.ID, State: gpufleet.AttemptRunning}
		beat(run)
		prod := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8}, Priority: gpufleet.Production})
		f.clk.Advance(time.Second)
		f.cycle()
		hb = beat(run)
		if len(hb.Stop) != 1 || hb.Stop[0].ReasonCode != "preempted_priority" {
			t.Fatalf("round %d: stops %+v, want the batch job preempted", round, hb.Stop)
		}
		beat(api.AttemptReport{AttemptID: run.AttemptID, JobID: batch.ID, State: gpufleet.AttemptStopped, ReasonCode: hb.Stop[0].ReasonCode})
		f.clk.Advance(time.Second)
		f.cycle()
		hb = beat()
		if len(hb.Start) != 1 || hb.Start[0].JobID != prod.ID {
			t.Fatalf("round %d: starts %+v, want the production job", round, hb.Start)
		}
		beat(api.AttemptReport{AttemptID: hb.Start[0].AttemptID, JobID: prod.ID, State: gpufleet.AttemptSucceeded})
		f.clk.Advance(time.Second)
	}
	evs, err := f.st.Events(ctx, store.EventFilter{Object: batch.ID})
	if err != nil {
		t.Fatal(err)
	}
	var bound []string
	for _, e := range evs {
		if e.Kind == "job.preemption_bound" {
			bound = append(bound, e.Detail)
		}
	}
	if len(bound) != 1 || !strings.Contains(bound[0], "preemption 2 in 24h") {
		t.Errorf("job.preemption_bound events %q, want one for its second preemption of the day", bound)
	}
}

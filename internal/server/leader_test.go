package server

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
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

package server

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// TestEstimatesFromHistory: a job submitted without an estimate is
// planned on the runs of its namesakes that finished before it, not on a
// fixed default: after two one-minute runs of "smoke", the next smoke job
// queued behind another is told it starts in about a minute, and its
// queue entry says the estimate came from two runs of its workload.
func TestEstimatesFromHistory(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 1)
	smoke := api.SubmitRequest{Name: "smoke", Resources: gpufleet.Resources{GPUs: 1}, Command: []string{"sleep", "60"}}
	hb := func(reports ...api.AttemptReport) api.HeartbeatResponse {
		t.Helper()
		r, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1", Attempts: reports})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	zero := 0
	start := func(id string) api.Assignment {
		t.Helper()
		f.cycle()
		r := hb()
		if len(r.Start) != 1 || r.Start[0].JobID != id {
			t.Fatalf("heartbeat should start %s: %+v", id, r.Start)
		}
		hb(api.AttemptReport{AttemptID: r.Start[0].AttemptID, JobID: id, State: gpufleet.AttemptRunning})
		return r.Start[0]
	}
	for range 2 {
		j := f.submit(a, smoke)
		if j.EstimateS != nil {
			t.Fatalf("a job without an estimate stored estimate_s %g", *j.EstimateS)
		}
		as := start(j.ID)
		f.clk.Advance(time.Minute)
		hb(api.AttemptReport{AttemptID: as.AttemptID, JobID: j.ID, State: gpufleet.AttemptSucceeded, ExitCode: &zero})
	}
	first := f.submit(a, smoke)
	start(first.ID)
	next := f.submit(a, smoke)
	f.cycle()
	q, err := f.srv.Queue(ctx, a)
	if err != nil || len(q) != 1 {
		t.Fatalf("queue %+v, %v", q, err)
	}
	e := q[0]
	if e.Estimate == nil || e.Estimate.From != gpufleet.EstimateWorkload || e.Estimate.Runs != 2 ||
		e.Estimate.Seconds < 55 || e.Estimate.Seconds > 65 {
		t.Errorf("queue entry's estimate %+v: want about a minute from 2 runs of its workload", e.Estimate)
	}
	if e.EstimatedStart == nil || e.EstimatedStart.Sub(f.clk.Now()) > 5*time.Minute {
		t.Errorf("job %s behind a one-minute job is told it starts at %v (now %v)", next.ID, e.EstimatedStart, f.clk.Now())
	}
	if j := f.job(next.ID); j.Queue == nil || j.Queue.Estimate == nil || *j.Queue.Estimate != *e.Estimate {
		t.Errorf("the job's queue entry %+v: want the queue's estimate", j.Queue)
	}
}

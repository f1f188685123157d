package server

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

// poison stores a job straight into the store, past the API's validation,
// as a hand-edited database or a bug would.
func (f *fixture) poison(team string, res gpufleet.Resources) string {
	f.t.Helper()
	est := 60.0
	out, err := f.st.SubmitJobs(f.t.Context(), []gpufleet.Job{{Team: team, State: gpufleet.JobQueued, Priority: gpufleet.Batch,
		Resources: res, Command: []string{"true"}, EstimateS: &est, SubmittedAt: f.clk.Now()}}, "test")
	if err != nil || out[0].Err != nil {
		f.t.Fatalf("store the poison row: %v %v", err, out)
	}
	return out[0].Job.ID
}

// wantFailed checks that job id failed with reason code invalid_request,
// reason naming want, and an audit event.
func (f *fixture) wantFailed(id, want string) {
	f.t.Helper()
	j := f.job(id)
	if j.State != gpufleet.JobFailed || j.ReasonCode != ReasonInvalidRequest || !strings.Contains(j.Reason, want) {
		f.t.Errorf("poison job %s: %s %s %q, want failed invalid_request naming %q", id, j.State, j.ReasonCode, j.Reason, want)
	}
	evs, err := f.st.Events(f.t.Context(), store.EventFilter{Object: id})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == "job.failed" && strings.HasPrefix(e.Detail, ReasonInvalidRequest+": ") {
			return
		}
	}
	f.t.Errorf("no job.failed invalid_request event for %s: %+v", id, evs)
}

func TestPoisonRowsFailAndTheRestIsPlaced(t *testing.T) {
	f := newFixture(t)
	a := f.team("team-a", nil)
	f.node("n1", "h100-sxm-80gb", 8)
	bad := map[string]string{
		f.poison("team-a", gpufleet.Resources{GPUs: 1 << 31}):                       "resources.gpus 2147483648",
		f.poison("team-a", gpufleet.Resources{GPUs: 1 << 32}):                       "resources.gpus 4294967296",
		f.poison("team-a", gpufleet.Resources{GPUs: 2, Nodes: -3}):                  "resources.nodes -3",
		f.poison("team-a", gpufleet.Resources{GPUs: 1, CPUs: 1e9}):                  "resources.cpus",
		f.poison("team-a", gpufleet.Resources{GPUs: 1, GPUMemoryMinBytes: 1 << 62}): "resources.gpu_memory_min_bytes",
	}
	good := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 2}})
	f.cycle()
	for id, want := range bad {
		f.wantFailed(id, want)
	}
	if j := f.job(good.ID); j.State != gpufleet.JobScheduled {
		t.Errorf("the valid job is %s, want scheduled", j.State)
	}
}

// TestUndecodableRowFails: a spec this version cannot read at all (a
// sharing word it does not know) fails its job instead of every read of
// the queue.
func TestUndecodableRowFails(t *testing.T) {
	f := newFixture(t)
	a := f.team("team-a", nil)
	f.node("n1", "h100-sxm-80gb", 8)
	id := f.poison("team-a", gpufleet.Resources{GPUs: 1})
	db, err := sql.Open("sqlite", f.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE jobs SET spec = '{"resources":{"gpus":1,"sharing":"vgpu:a100"},"command":["true"]}' WHERE id = ?`, id); err != nil {
		t.Fatal(err)
	}
	good := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}})
	f.cycle()
	f.wantFailed(id, "spec does not decode")
	if j := f.job(good.ID); j.State != gpufleet.JobScheduled {
		t.Errorf("the valid job is %s, want scheduled", j.State)
	}
}

// TestSchedulerPanicFailsTheCulpritOnly: a job that makes the scheduler
// panic is found by bisection, failed with invalid_request, and the rest
// of the queue is placed in the same cycle; the leader goes on.
func TestSchedulerPanicFailsTheCulpritOnly(t *testing.T) {
	f := newFixture(t)
	a := f.team("team-a", nil)
	f.node("n1", "h100-sxm-80gb", 8)
	var ids []string
	for i := range 9 {
		ids = append(ids, f.submit(a, api.SubmitRequest{Name: fmt.Sprintf("j%d", i), Resources: gpufleet.Resources{GPUs: 1}}).ID)
	}
	poisoned := ids[5]
	calls := 0
	f.srv.decide = func(in scheduler.Input) scheduler.Output {
		calls++
		for _, j := range in.Jobs {
			if j.ID == poisoned {
				var idx []int
				_ = idx[j.Resources.GPUs] // index out of range, as the int32 wrap did
			}
		}
		return scheduler.Schedule(in)
	}
	f.cycle()
	f.wantFailed(poisoned, "the scheduler panicked on this job")
	for _, id := range ids {
		if j := f.job(id); id != poisoned && j.State != gpufleet.JobScheduled {
			t.Errorf("job %s is %s, want scheduled", id, j.State)
		}
	}
	if calls > 8 {
		t.Errorf("%d scheduler calls to find one culprit among 9 jobs; bisection needs about log2(9)+3", calls)
	}
	// The next cycles run as usual.
	f.srv.decide = scheduler.Schedule
	f.cycle()
	if !f.srv.Leader() {
		t.Error("the server is no longer leader after a panic")
	}
}

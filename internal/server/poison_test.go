package server

import (
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
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

// TestSchedulerEndsTheCulpritItPanicsOn: a job whose request makes the
// scheduler panic is handed back to it as invalid, and the scheduler ends
// it: a running one is stopped with its own grace (code invalid_request),
// found in one cycle, remembered in the next (no second panic).
func TestSchedulerEndsTheCulpritItPanicsOn(t *testing.T) {
	f := newFixture(t)
	a := f.team("team-a", nil)
	f.node("n1", "h100-sxm-80gb", 8)
	grace := gpufleet.Duration(45 * time.Second)
	bad := f.submit(a, api.SubmitRequest{Name: "bad", Resources: gpufleet.Resources{GPUs: 2}, Grace: grace}).ID
	f.cycle() // it runs
	other := f.submit(a, api.SubmitRequest{Name: "other", Resources: gpufleet.Resources{GPUs: 1}}).ID
	panics := 0
	f.srv.decide = func(in scheduler.Input) scheduler.Output {
		for _, j := range in.Jobs {
			if j.ID == bad && j.Invalid == "" {
				panics++
				panic("a bug that reads the request of " + j.ID)
			}
		}
		return scheduler.Schedule(in)
	}
	f.cycle()
	j := f.job(bad)
	a0 := j.Attempts[len(j.Attempts)-1]
	if !a0.StopRequested || a0.ReasonCode != string(scheduler.StopInvalid) || a0.StopGraceS == nil || *a0.StopGraceS != 45 ||
		!strings.Contains(a0.Reason, "the scheduler panicked on this job") {
		t.Errorf("culprit's attempt: stop %v code %q grace %v reason %q; want a stop invalid_request with its 45s grace",
			a0.StopRequested, a0.ReasonCode, a0.StopGraceS, a0.Reason)
	}
	if o := f.job(other); o.State != gpufleet.JobScheduled {
		t.Errorf("the other job is %s, want scheduled", o.State)
	}
	before := panics
	f.cycle()
	if panics != before {
		t.Errorf("the scheduler panicked again on a known culprit (%d panics, then %d)", before, panics)
	}
}

func TestUnsatisfiableRequestsAreRefusedAtSubmit(t *testing.T) {
	f := newFixture(t)
	a := f.team("team-a", nil)
	capped := f.team("capped", map[string]int{"l4": 2})
	limit := 0
	if _, err := f.srv.PutTeam(t.Context(), f.admin, api.TeamRequest{Name: "capped", BorrowingLimit: &limit}); err != nil {
		t.Fatal(err)
	}
	f.node("h1", "h100-sxm-80gb", 8)
	f.node("l1", "l4", 4)
	tests := map[string]struct {
		who  api.Principal
		res  gpufleet.Resources
		want string
	}{
		"model typo":           {a, gpufleet.Resources{GPUs: 1, GPUModels: []string{"h1000"}}, `resources.gpu_models[0]: unknown GPU "h1000" (did you mean h100`},
		"model not in fleet":   {a, gpufleet.Resources{GPUs: 1, GPUModels: []string{"b200-hgx"}}, "no GPU model in the fleet matches gpu_models [b200-hgx]"},
		"more than the fleet":  {a, gpufleet.Resources{GPUs: 64}, "matching nodes hold 12"},
		"memory above all":     {a, gpufleet.Resources{GPUs: 1, GPUMemoryMinBytes: 200 << 30}, "gpu_memory_min_bytes"},
		"rack nobody is in":    {a, gpufleet.Resources{GPUs: 1, NodeSelector: map[string]string{"rack": "r12"}}, "node_selector rack=r12"},
		"more nodes":           {a, gpufleet.Resources{GPUs: 3, Nodes: 3}, "needs 3 nodes"},
		"more than one node":   {a, gpufleet.Resources{GPUs: 9, Nodes: 1}, "needs 9 GPUs on one node"},
		"class not the team's": {capped, gpufleet.Resources{GPUs: 4, GPUModels: []string{"l4"}}, "quota_exceeded"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := f.srv.SubmitJob(t.Context(), tc.who, api.SubmitRequest{Resources: tc.res, Command: []string{"x"}})
			if !errors.Is(err, gpufleet.ErrUnsatisfiable) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--queue-anyway") {
				t.Fatalf("error %v, want ErrUnsatisfiable naming %q and --queue-anyway", err, tc.want)
			}
			r, err := f.srv.SubmitJob(t.Context(), tc.who, api.SubmitRequest{Resources: tc.res, Command: []string{"x"}, AllowUnsatisfiable: true})
			if err != nil {
				t.Fatalf("with allow_unsatisfiable: %v", err)
			}
			f.cycle()
			q := f.job(r.ID).Queue
			if q == nil || q.EstimatedStart != nil || (q.ReasonCode != scheduler.ReasonUnplaceable && q.ReasonCode != scheduler.ReasonQuotaExceeded) {
				t.Fatalf("queued anyway: %+v, want unplaceable or quota_exceeded without an ETA", q)
			}
		})
	}
	// Names the catalog knows in another spelling become catalog ids.
	r, err := f.srv.SubmitJob(t.Context(), a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"NVIDIA H100 80GB HBM3"}}, Command: []string{"x"}})
	if err != nil || !slices.Equal(r.Resources.GPUModels, []string{"h100-sxm-80gb"}) {
		t.Errorf("gpu_models %v, %v; want the catalog id", r.Resources.GPUModels, err)
	}
}

// TestNoJoinTokenTakesAnExistingNode: the report of a node-name takeover
// (an unbound join token registered as the quiet node n3 claiming 8 GPUs
// instead of 1, and the real n3 was refused when it came back). A join
// token, bound to the name or not, registers only a new name; an existing
// node, live or quiet, is taken again only by its own agent showing its
// credential, with the hardware it had, or after an admin's nodes replace.
func TestNoJoinTokenTakesAnExistingNode(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	f.cycle() // lead
	cred := f.nodeCred("n1")
	n1, err := f.st.Node(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	had := n1.GPUs // 8 x h100
	more := make([]gpufleet.NodeGPU, 16)
	for i := range more {
		more[i] = gpufleet.NodeGPU{Index: i, UUID: fmt.Sprintf("GPU-evil-%d", i), Model: "h100-sxm-80gb", MemoryBytes: 80 << 30}
	}
	reg := func(tok, credential string, gpus []gpufleet.NodeGPU) error {
		_, err := f.srv.Register(ctx, tok, api.RegisterRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1", Credential: credential, GPUs: gpus})
		return err
	}
	token := func(node string) string {
		jt, err := f.srv.CreateJoinToken(ctx, f.admin, api.JoinTokenRequest{Node: node})
		if err != nil {
			t.Fatal(err)
		}
		return jt.Token
	}
	unbound := token("")
	for _, quiet := range []bool{false, true} {
		if quiet {
			f.clk.Advance(f.srv.cfg.HeartbeatGrace + f.srv.cfg.FenceAfter + time.Minute) // n1 has gone quiet
		}
		if err := reg(unbound, "", more); !errors.Is(err, api.ErrForbidden) || !strings.Contains(err.Error(), "gpufleet nodes replace n1") ||
			!strings.Contains(err.Error(), `node "n1" exists`) {
			t.Fatalf("quiet %v: an unbound token took the node: %v", quiet, err)
		}
		if err := reg(token("n1"), "", had); !errors.Is(err, api.ErrForbidden) {
			t.Fatalf("quiet %v: a token bound to the name took the existing node: %v", quiet, err)
		}
		if err := reg(unbound, "gpn_wrong", had); !errors.Is(err, api.ErrForbidden) {
			t.Fatalf("quiet %v: a wrong credential proved the node: %v", quiet, err)
		}
	}
	if err := reg(unbound, cred, more); !errors.Is(err, api.ErrForbidden) || !strings.Contains(err.Error(), "16 x h100-sxm-80gb where it had 8 x h100-sxm-80gb") {
		t.Fatalf("the node's credential with other hardware: %v", err)
	}
	if err := reg(unbound, cred, had); err != nil {
		t.Fatalf("the real node returning with its credential and its hardware: %v", err)
	}
	if n, _ := f.st.Node(ctx, "n1"); len(n.GPUs) != len(had) {
		t.Errorf("n1 has %d GPUs after the refused claims, want %d", len(n.GPUs), len(had))
	}

	// nodes replace: the credential is revoked, the old agent's join token
	// bound to the name expires, a bound token is issued, an event says
	// who.
	live := f.register("n2", "l4", 1)
	oldBound, err := f.srv.CreateJoinToken(ctx, f.admin, api.JoinTokenRequest{Node: "n2"}) // reusable, as gpufleet dev's
	if err != nil {
		t.Fatal(err)
	}
	jt, err := f.srv.ReplaceNode(ctx, f.admin, "n2")
	if err != nil || jt.Node != "n2" {
		t.Fatalf("replace: %+v %v", jt, err)
	}
	if _, err := f.srv.Authenticate(ctx, live); !errors.Is(err, api.ErrUnauthorized) {
		t.Errorf("the replaced node's credential still works: %v", err)
	}
	if _, err := f.srv.Register(ctx, oldBound.Token, api.RegisterRequest{ProtocolVersion: api.ProtocolVersion, Node: "n2"}); err == nil {
		t.Errorf("the replaced agent registered again with its bound join token")
	}
	if _, err := f.srv.Register(ctx, jt.Token, api.RegisterRequest{ProtocolVersion: api.ProtocolVersion, Node: "n2",
		GPUs: []gpufleet.NodeGPU{{Index: 0, UUID: "GPU-new-0", Model: "h100-sxm-80gb", MemoryBytes: 80 << 30}}}); err != nil {
		t.Errorf("the replacement registers with the issued token, other hardware and all: %v", err)
	}
	if _, err := f.srv.Register(ctx, jt.Token, api.RegisterRequest{ProtocolVersion: api.ProtocolVersion, Node: "n2"}); err == nil {
		t.Errorf("the replace token worked twice")
	}
	evs, _ := f.st.Events(ctx, store.EventFilter{Object: "n2"})
	if !slices.ContainsFunc(evs, func(e gpufleet.Event) bool { return e.Kind == "node.replace" && e.Actor != "" }) ||
		!slices.ContainsFunc(evs, func(e gpufleet.Event) bool { return e.Kind == "node.replaced" }) {
		t.Errorf("no node.replace event: %+v", evs)
	}
	if _, err := f.srv.ReplaceNode(ctx, f.team("team-a", nil), "n2"); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("a member replaced a node: %v", err)
	}
}

// TestPoisonedRunningJobIsStoppedThenEnds: a running job whose stored row
// a new leader finds invalid is the scheduler's to stop, with the default
// grace (nothing of the bad row is trusted) and code invalid_request; once
// the attempt has stopped, the job fails with that code and no retry.
func TestPoisonedRunningJobIsStoppedThenEnds(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 8)
	j := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 2}, Grace: gpufleet.Duration(time.Hour), Retries: 3})
	f.cycle()
	hb, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if err != nil || len(hb.Start) != 1 {
		t.Fatalf("starts: %+v %v", hb.Start, err)
	}
	run := []api.AttemptReport{{AttemptID: hb.Start[0].AttemptID, JobID: j.ID, State: gpufleet.AttemptRunning}}
	if _, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", f.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE jobs SET spec = '{"resources":{"gpus":2,"cpus":1e9},"command":["true"],"grace_s":1e12}' WHERE id = ?`, j.ID); err != nil {
		t.Fatal(err)
	}
	// A new leader reads the row.
	cfg := f.srv.cfg
	srv, err := New(ctx, cfg, f.st, catalog.Default(), testAdmin, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	f.cycle()
	hb, err = f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run})
	if err != nil || len(hb.Stop) != 1 || hb.Stop[0].ReasonCode != ReasonInvalidRequest || hb.Stop[0].GraceS != scheduler.DefaultGrace.Seconds() ||
		!strings.Contains(hb.Stop[0].Reason, "resources.cpus") {
		t.Fatalf("stop orders %+v, %v; want one, invalid_request, the default grace, naming resources.cpus", hb.Stop, err)
	}
	run[0].State = gpufleet.AttemptStopped
	if _, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run}); err != nil {
		t.Fatal(err)
	}
	f.wantFailed(j.ID, "resources.cpus")
	if got := f.job(j.ID); got.Retries.Used != 0 || len(got.Attempts) != 1 {
		t.Errorf("retries used %d, attempts %d; want no retry", got.Retries.Used, len(got.Attempts))
	}
}

// TestSchedulerPanicOnExpectedArrivals: the ETA's expected arrivals are
// copies of jobs the leader saw earlier; if the scheduler panics on one,
// the cycle runs again without them, every queued job is placed, the
// leader forgets the arrivals it kept, and no job is failed for it.
func TestSchedulerPanicOnExpectedArrivals(t *testing.T) {
	f := newFixture(t)
	a := f.team("team-a", nil)
	f.node("n1", "h100-sxm-80gb", 8)
	seen := f.submit(a, api.SubmitRequest{Name: "seen", Resources: gpufleet.Resources{GPUs: 1}}).ID
	f.cycle() // the leader records it as an arrival
	later := f.submit(a, api.SubmitRequest{Name: "later", Resources: gpufleet.Resources{GPUs: 1}}).ID
	f.srv.decide = func(in scheduler.Input) scheduler.Output {
		for _, j := range in.Arrivals {
			if j.ID == seen {
				panic("an expected arrival the scheduler cannot read")
			}
		}
		return scheduler.Schedule(in)
	}
	f.cycle()
	for _, id := range []string{seen, later} {
		if j := f.job(id); j.State != gpufleet.JobScheduled && j.State != gpufleet.JobRunning {
			t.Errorf("job %s is %s, want scheduled", id, j.State)
		}
	}
	f.srv.lead.mu.Lock()
	kept := len(f.srv.lead.eta.arrivals)
	f.srv.lead.mu.Unlock()
	if kept != 0 {
		t.Errorf("the leader still keeps %d arrivals after they made the scheduler panic", kept)
	}
	f.cycle()
	if !f.srv.Leader() {
		t.Error("the server is no longer leader")
	}
}

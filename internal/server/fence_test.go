package server

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/store"
)

// takeover is a store through which another replica takes the lease the
// first time the leader reads its jobs, in the middle of its cycle: the
// leader read its epoch, and it is stale from then on.
type takeover struct {
	store.Store
	once sync.Once
	take func()
}

func (t *takeover) ActiveJobs(ctx context.Context) ([]gpufleet.Job, error) {
	t.once.Do(t.take)
	return t.Store.ActiveJobs(ctx)
}

// TestDeposedLeaderWritesNothing: a leader whose lease another replica
// takes during its cycle writes nothing more: not the node's move along the
// repair path, not its decision. Its writes are refused by the lease's
// epoch (store.Fenced), and it stops leading.
func TestDeposedLeaderWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fixture)
		check func(t *testing.T, f *fixture)
	}{
		{"node lifecycle", func(f *fixture) {
			f.register("n1", "h100-sxm-80gb", 8)
			if err := f.st.SetNodeState(f.t.Context(), "n1", gpufleet.NodeDraining, gpufleet.CauseHealth, "XID 79", "health", f.clk.Now()); err != nil {
				f.t.Fatal(err)
			}
		}, func(t *testing.T, f *fixture) {
			if n, _ := f.st.Node(t.Context(), "n1"); n.State != gpufleet.NodeDraining {
				t.Errorf("node n1 is %s: the deposed leader moved it", n.State)
			}
		}},
		{"decision", func(f *fixture) {
			f.register("n1", "h100-sxm-80gb", 8)
			f.submit(f.team("team-a", nil), api.SubmitRequest{Team: "team-a", Resources: gpufleet.Resources{GPUs: 8}})
		}, func(t *testing.T, f *fixture) {
			jobs, _ := f.st.ActiveJobs(t.Context())
			if len(jobs) != 1 || jobs[0].State != gpufleet.JobQueued || len(jobs[0].Attempts) != 0 {
				t.Errorf("the deposed leader started the job: %+v", jobs)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := t.Context()
			tc.setup(f)
			var took store.Lease
			st := &takeover{Store: f.st, take: func() {
				f.clk.Advance(f.srv.cfg.LeaseTTL + 1) // the leader's lease expires in the store's clock
				var held bool
				var err error
				if took, held, err = f.st.TryLease(ctx, "other", f.srv.cfg.LeaseTTL); err != nil || !held {
					t.Errorf("the other replica did not take the lease: %v %v", held, err)
				}
			}}
			cfg := f.srv.cfg
			cfg.ID = "deposed"
			a, err := New(ctx, cfg, st, catalog.Default(), testAdmin, slog.New(slog.NewTextHandler(t.Output(), nil)))
			if err != nil {
				t.Fatal(err)
			}
			before, _ := f.st.LastEventID(ctx)
			if err := a.Cycle(ctx); err != nil {
				t.Fatalf("cycle: %v (a fenced cycle ends quietly)", err)
			}
			if a.Leader() {
				t.Error("the deposed replica still says it leads")
			}
			if l, _ := f.st.Lease(ctx); l.Holder != "other" || l.Epoch != took.Epoch {
				t.Errorf("lease %+v, want other's epoch %d", l, took.Epoch)
			}
			events, err := f.st.Events(ctx, store.EventFilter{AfterID: before})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range events {
				if e.Actor != "other" && e.Kind != "lease.acquired" {
					t.Errorf("the deposed leader wrote event %s %s: %s", e.Actor, e.Kind, e.Detail)
				}
			}
			tc.check(t, f)
		})
	}
}

package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/store/pgtest"
)

// TestMain shares one throwaway PostgreSQL among the package's tests.
func TestMain(m *testing.M) { pgtest.Main(m) }

// openPG opens a store on a fresh PostgreSQL database.
func openPG(t *testing.T, dsn string, opts ...Option) *SQL {
	t.Helper()
	s, err := Open(t.Context(), dsn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPostgresConcurrentMigrations opens several stores on one empty
// database at once: the migration lock makes them take turns.
func TestPostgresConcurrentMigrations(t *testing.T) {
	dsn := pgtest.Database(t)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			s, err := Open(t.Context(), dsn)
			if err == nil {
				var v int
				v, err = s.SchemaVersion(t.Context())
				if err == nil && v < 1 {
					err = errors.New("schema not migrated")
				}
				s.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestPostgresFencing: two stores on one database, as two replicas. The
// lease follows the database clock; a deposed leader's decision is fenced.
func TestPostgresFencing(t *testing.T) {
	dsn := pgtest.Database(t)
	a, b := openPG(t, dsn), openPG(t, dsn)
	ctx := t.Context()
	la, held, err := a.TryLease(ctx, "a", time.Second)
	if err != nil || !held {
		t.Fatalf("a: %v %v", held, err)
	}
	if _, held, err := b.TryLease(ctx, "b", time.Second); err != nil || held {
		t.Fatalf("b took a live lease: %v %v", held, err)
	}
	time.Sleep(1100 * time.Millisecond)
	lb, held, err := b.TryLease(ctx, "b", 5*time.Second)
	if err != nil || !held || lb.Epoch != la.Epoch+1 {
		t.Fatalf("b after expiry: %+v %v %v", lb, held, err)
	}
	res, err := a.SubmitJobs(ctx, []gpufleet.Job{{Team: "t", Name: "j"}}, "x")
	if err != nil {
		t.Fatal(err)
	}
	d := Decision{Starts: []Start{{JobID: res[0].Job.ID, Nodes: []gpufleet.AttemptNode{{Name: "n"}}}}}
	if err := a.ApplySchedule(ctx, la.Epoch, d); !errors.Is(err, ErrFenced) {
		t.Fatalf("deposed leader: %v, want ErrFenced", err)
	}
	if err := b.ApplySchedule(ctx, lb.Epoch, d); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresFrozenInsideTransaction: a leader stalls inside its
// scheduling transaction, after the fencing read, past its lease. The
// database ends its session (idle_in_transaction_session_timeout), the
// other replica takes over, and the stalled decision never commits.
func TestPostgresFrozenInsideTransaction(t *testing.T) {
	dsn := pgtest.Database(t)
	stall := make(chan struct{})
	var once sync.Once
	a := openPG(t, dsn, WithFailpoint(func(name string) {
		if name == "schedule.before-commit" {
			once.Do(func() { <-stall })
		}
	}))
	b := openPG(t, dsn)
	ctx := t.Context()
	la, _, err := a.TryLease(ctx, "a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.SubmitJobs(ctx, []gpufleet.Job{{Team: "t", Name: "j"}}, "x")
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan error, 1)
	go func() {
		applied <- a.ApplySchedule(context.Background(), la.Epoch,
			Decision{Starts: []Start{{JobID: res[0].Job.ID, AttemptID: "a-stalled", Nodes: []gpufleet.AttemptNode{{Name: "n"}}}}})
	}()
	began := time.Now()
	var lb Lease
	for {
		l, held, err := b.TryLease(ctx, "b", 5*time.Second)
		if err == nil && held {
			lb = l
			break
		}
		if time.Since(began) > 10*time.Second {
			t.Fatalf("b never took over: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("takeover after %s (lease 1s, idle-in-transaction timeout %s)", time.Since(began).Round(time.Millisecond), pgIdleInTxTimeout)
	close(stall)
	if err := <-applied; err == nil {
		t.Fatal("the stalled decision committed after the takeover")
	}
	if lb.Epoch != la.Epoch+1 {
		t.Errorf("epoch %d, want %d", lb.Epoch, la.Epoch+1)
	}
	if _, err := b.Attempt(ctx, "a-stalled"); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("stalled attempt: %v, want not found", err)
	}
	j, err := b.Job(ctx, res[0].Job.ID)
	if err != nil || j.State != gpufleet.JobQueued {
		t.Errorf("job %v %v, want queued", j.State, err)
	}
}

// TestPostgresStartsRaceCancels: one replica schedules while another
// cancels the same jobs. Every job ends either cancelled without an
// attempt or scheduled with exactly one attempt and a cancel request.
func TestPostgresStartsRaceCancels(t *testing.T) {
	dsn := pgtest.Database(t)
	a, b := openPG(t, dsn), openPG(t, dsn)
	ctx := t.Context()
	l, _, err := a.TryLease(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []gpufleet.Job
	for range 100 {
		jobs = append(jobs, gpufleet.Job{Team: "t", Name: "j"})
	}
	res, err := a.SubmitJobs(ctx, jobs, "x")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, r := range res {
			err := a.ApplySchedule(ctx, l.Epoch, Decision{Starts: []Start{{JobID: r.Job.ID, Nodes: []gpufleet.AttemptNode{{Name: "n"}}}}})
			if err != nil && !errors.Is(err, ErrStale) {
				t.Error(err)
			}
		}
	})
	wg.Go(func() {
		for i := len(res) - 1; i >= 0; i-- {
			if _, err := b.RequestCancel(ctx, res[i].Job.ID, "y", time.Time{}); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	for _, r := range res {
		j, err := b.Job(ctx, r.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case j.State == gpufleet.JobCancelled && len(j.Attempts) == 0:
		case j.State == gpufleet.JobScheduled && len(j.Attempts) == 1 && j.CancelRequested: // the leader stops it next cycle
		default:
			t.Errorf("job %s: %s, %d attempts, cancel %v", j.ID, j.State, len(j.Attempts), j.CancelRequested)
		}
	}
}

package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
)

// openTemp opens a store in a fresh file under t.TempDir().
func openTemp(t testing.TB, opts ...Option) *SQL {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "gpufleet.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOpenDSNs(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		dsn  string
		want error
	}{
		"plain path":     {dsn: filepath.Join(dir, "a.db")},
		"sqlite: prefix": {dsn: "sqlite:" + filepath.Join(dir, "b.db")},
		"file: uri":      {dsn: "file:" + filepath.Join(dir, "c.db")},
		"memory":         {dsn: ":memory:"},
		"postgres":       {dsn: "postgres://gpufleet:secret@127.0.0.1:1/gpufleet?connect_timeout=2", want: errUnreachable},
		"postgresql":     {dsn: "postgresql://127.0.0.1:1/gpufleet?connect_timeout=2", want: errUnreachable},
		"empty":          {dsn: "", want: gpufleet.ErrInvalid},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(t.Context(), tc.dsn)
			if tc.want != nil {
				if tc.want == errUnreachable {
					// Nothing listens on port 1: the dialect is built, the
					// connection fails, and the error hides the password.
					if err == nil || contains(err.Error(), "secret") {
						t.Fatalf("open %q: %v, want a connection error without the password", tc.dsn, err)
					}
					return
				}
				if !errors.Is(err, tc.want) {
					t.Fatalf("open %q: %v, want %v", tc.dsn, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, _, err := s.TryLease(t.Context(), "x", time.Minute); err != nil {
				t.Fatal(err)
			}
		})
	}
}

var errUnreachable = errors.New("unreachable")

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestPragmas(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	for name, want := range map[string]string{"journal_mode": "wal", "synchronous": "1", "foreign_keys": "1"} {
		var got string
		if err := s.wr.QueryRowContext(ctx, "PRAGMA "+name).Scan(&got); err != nil || got != want {
			t.Errorf("writer %s = %q (%v), want %q", name, got, err, want)
		}
	}
	var qo string
	if err := s.rd.QueryRowContext(ctx, "PRAGMA query_only").Scan(&qo); err != nil || qo != "1" {
		t.Errorf("reader query_only = %q (%v), want 1", qo, err)
	}
	if _, err := s.rd.ExecContext(ctx, "DELETE FROM jobs"); err == nil {
		t.Errorf("a reader connection could write")
	}
	if n := s.wr.Stats().MaxOpenConnections; n != 1 {
		t.Errorf("writer pool of %d connections, want 1", n)
	}
}

func TestMigrationsApplyOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpufleet.db")
	ms, err := loadMigrations(migrationFiles, &sqliteDialect)
	if err != nil || len(ms) == 0 {
		t.Fatalf("migrations: %v %v", ms, err)
	}
	for range 3 {
		s, err := Open(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		var n, v int
		if err := s.wr.QueryRow(`SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &v); err != nil {
			t.Fatal(err)
		}
		if n != len(ms) || v != ms[len(ms)-1].version {
			t.Errorf("%d migrations recorded, newest %d; want %d, %d", n, v, len(ms), ms[len(ms)-1].version)
		}
		if got, _ := s.SchemaVersion(t.Context()); got != v {
			t.Errorf("SchemaVersion %d, want %d", got, v)
		}
		s.Close()
	}
}

func TestNewerSchemaIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpufleet.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.wr.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'from_the_future', 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = Open(t.Context(), path)
	if err == nil || !contains(err.Error(), "newer than this binary") {
		t.Fatalf("open of a newer schema: %v, want an error", err)
	}
}

func TestLoadMigrationsRejectsBadNames(t *testing.T) {
	for name, files := range map[string]fstest.MapFS{
		"no number":    {"migrations/init.sql": file("SELECT 1")},
		"twice":        {"migrations/0001_a.sql": file("SELECT 1"), "migrations/0001_b.sql": file("SELECT 1")},
		"bad template": {"migrations/0001_a.sql": file("{{.Nope}}")},
		"zero version": {"migrations/0000_a.sql": file("SELECT 1")},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := loadMigrations(files, &sqliteDialect); err == nil {
				t.Errorf("loadMigrations accepted %v", files)
			}
		})
	}
}

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func TestRebind(t *testing.T) {
	if got := postgresDialect.rebind("SELECT a FROM t WHERE b = ? AND c IN (?, ?)"); got != "SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)" {
		t.Errorf("postgres rebind: %s", got)
	}
	if got := sqliteDialect.rebind("x = ?"); got != "x = ?" {
		t.Errorf("sqlite rebind: %s", got)
	}
}

func TestIDs(t *testing.T) {
	g := idGen{prefix: "j-"}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 1000 {
		// The clock stands still, then steps back.
		at := now
		if i > 500 {
			at = now.Add(-time.Hour)
		}
		ids = append(ids, g.next(at))
	}
	ids = append(ids, g.next(now.Add(time.Second)))
	if !slices.IsSorted(ids) {
		t.Errorf("ids are not increasing")
	}
	for _, id := range ids {
		if len(id) != 18 {
			t.Fatalf("id %q has length %d", id, len(id))
		}
	}
	ms, _, ok := parseID("j-", ids[len(ids)-1])
	if !ok || ms != uint64(now.Add(time.Second).UnixMilli()) {
		t.Errorf("parse %s: %d %v", ids[len(ids)-1], ms, ok)
	}
	h := idGen{prefix: "j-"}
	h.observe(ids[999])
	if next := h.next(now.Add(-24 * time.Hour)); next <= ids[999] {
		t.Errorf("after observing %s the generator made %s", ids[999], next)
	}
	// Overflow of the random part carries into the time part.
	o := idGen{prefix: "a-", ms: 5, rnd: 1<<idRandBits - 1}
	if ms, rnd, _ := parseID("a-", o.next(time.UnixMilli(5))); ms != 6 || rnd != 0 {
		t.Errorf("carry: %d %d", ms, rnd)
	}
}

func TestIDsSurviveRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpufleet.db")
	future := time.Now().Add(24 * time.Hour)
	s, err := Open(t.Context(), path, WithClock(func() time.Time { return future }))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.SubmitJobs(t.Context(), []gpufleet.Job{{Team: "a"}}, "t")
	if err != nil {
		t.Fatal(err)
	}
	first := res[0].Job.ID
	s.Close()
	s, err = Open(t.Context(), path) // the clock is back at today
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err = s.SubmitJobs(t.Context(), []gpufleet.Job{{Team: "a"}}, "t")
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Job.ID <= first {
		t.Errorf("id %s after a restart is not after %s", res[0].Job.ID, first)
	}
}

func TestLeaseWithClock(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := openTemp(t, WithClock(clock))
	ctx := t.Context()
	l, held, _ := s.TryLease(ctx, "a", 10*time.Second)
	if !held || !l.ExpiresAt.Equal(clock().Add(10*time.Second)) {
		t.Fatalf("lease %+v held %v", l, held)
	}
	advance(9 * time.Second)
	if _, held, _ := s.TryLease(ctx, "b", 10*time.Second); held {
		t.Fatalf("b took a live lease")
	}
	advance(time.Second) // exactly at expiry
	l, held, _ = s.TryLease(ctx, "b", 10*time.Second)
	if !held || l.Epoch != 2 {
		t.Fatalf("b at expiry: %+v held %v", l, held)
	}
	// a, deposed, can no longer schedule.
	if err := s.ApplySchedule(ctx, 1, Decision{}); !errors.Is(err, ErrFenced) {
		t.Errorf("old leader's decision: %v, want ErrFenced", err)
	}
	// b's lease lapses, nobody takes it, and b renews with its epoch.
	advance(time.Minute)
	if l, held, _ := s.TryLease(ctx, "b", 10*time.Second); !held || l.Epoch != 2 {
		t.Errorf("late renewal %+v held %v, want epoch 2", l, held)
	}
	evs, _ := s.Events(ctx, EventFilter{Object: "b"})
	if len(evs) != 1 || evs[0].Kind != "lease.acquired" {
		t.Errorf("lease events %+v, want one lease.acquired", evs)
	}
}

func TestFailpoints(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	s := openTemp(t, WithFailpoint(func(name string) { mu.Lock(); seen = append(seen, name); mu.Unlock() }))
	ctx := t.Context()
	res, err := s.SubmitJobs(ctx, []gpufleet.Job{{Team: "a"}}, "t")
	if err != nil {
		t.Fatal(err)
	}
	l, _, _ := s.TryLease(ctx, "x", time.Hour)
	if err := s.ApplySchedule(ctx, l.Epoch, Decision{Starts: []Start{{JobID: res[0].Job.ID, AttemptID: "a-1", Nodes: []gpufleet.AttemptNode{{Name: "n"}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateAttempt(ctx, AttemptUpdate{AttemptID: "a-1", State: gpufleet.AttemptRunning}); err != nil {
		t.Fatal(err)
	}
	want := []string{"submit.before-commit", "schedule.before-commit", "attempt.before-commit"}
	if !slices.Equal(seen, want) {
		t.Errorf("failpoints %v, want %v", seen, want)
	}
}

// TestCrashAtFailpoint kills a child process at each failpoint and checks
// that the reopened store holds everything acknowledged before and nothing
// of the transaction cut short.
func TestCrashAtFailpoint(t *testing.T) {
	if os.Getenv("GPUFLEET_STORE_CRASH_DB") != "" {
		crashChild(os.Getenv("GPUFLEET_STORE_CRASH_DB"), os.Getenv("GPUFLEET_STORE_CRASH_AT"))
		return
	}
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, point := range []string{"submit.before-commit", "schedule.before-commit", "attempt.before-commit"} {
		t.Run(point, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gpufleet.db")
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashAtFailpoint$", "-test.count=1")
			cmd.Env = append(os.Environ(), "GPUFLEET_STORE_CRASH_DB="+path, "GPUFLEET_STORE_CRASH_AT="+point)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child did not die by SIGKILL: %v\n%s", err, out)
			}
			s, err := Open(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			jobs, _, err := s.ListJobs(t.Context(), JobFilter{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, j := range jobs {
				names = append(names, fmt.Sprintf("%s:%s:%d", j.Name, j.State, len(j.Attempts)))
			}
			want := map[string][]string{
				// The first job was acknowledged; the second died before commit.
				"submit.before-commit": {"acked:queued:0"},
				// Scheduling died: the job is queued, without an attempt.
				"schedule.before-commit": {"acked:queued:0", "second:queued:0"},
				// The attempt's start to running died: still starting.
				"attempt.before-commit": {"acked:scheduled:1", "second:queued:0"},
			}[point]
			if !slices.Equal(names, want) {
				t.Errorf("after a crash at %s: %v, want %v", point, names, want)
			}
		})
	}
}

// crashChild runs the steps up to the failpoint at, where it SIGKILLs
// itself.
func crashChild(path, at string) {
	armed := false
	kill := func(name string) {
		if armed && name == at {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	ctx := context.Background()
	s, err := Open(ctx, path, WithFailpoint(kill))
	if err != nil {
		panic(err)
	}
	res, err := s.SubmitJobs(ctx, []gpufleet.Job{{Team: "a", Name: "acked"}}, "t")
	if err != nil {
		panic(err)
	}
	if at == "submit.before-commit" {
		armed = true
	}
	if _, err := s.SubmitJobs(ctx, []gpufleet.Job{{Team: "a", Name: "second"}}, "t"); err != nil {
		panic(err)
	}
	l, _, _ := s.TryLease(ctx, "x", time.Hour)
	if at == "schedule.before-commit" {
		armed = true
	}
	if err := s.ApplySchedule(ctx, l.Epoch, Decision{Starts: []Start{{JobID: res[0].Job.ID, AttemptID: "a-1", Nodes: []gpufleet.AttemptNode{{Name: "n"}}}}}); err != nil {
		panic(err)
	}
	armed = true
	if _, err := s.UpdateAttempt(ctx, AttemptUpdate{AttemptID: "a-1", State: gpufleet.AttemptRunning}); err != nil {
		panic(err)
	}
	panic("no failpoint fired")
}

func TestCloseFailsLaterSubmits(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubmitJobs(t.Context(), []gpufleet.Job{{Team: "a"}}, "t"); !errors.Is(err, ErrClosed) {
		t.Errorf("submit after close: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestGroupCommitCoalesces(t *testing.T) {
	var (
		mu      sync.Mutex
		commits int
	)
	s := openTemp(t, WithGroupCommit(20*time.Millisecond, 64), WithFailpoint(func(string) { mu.Lock(); commits++; mu.Unlock() }))
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			if _, err := s.SubmitJobs(t.Context(), []gpufleet.Job{{Team: "a", RequestID: fmt.Sprint(i)}}, "t"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if commits >= 32 {
		t.Errorf("%d commits for 32 concurrent submissions, want fewer", commits)
	}
	t.Logf("32 submissions in %d commits", commits)
}

// TestFleetSizeLimit: a new node beyond gpufleet.MaxFleetNodes is refused
// (ErrUnsatisfiable, the API's 422), a known one still updates.
func TestFleetSizeLimit(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	if err := s.PutNode(ctx, gpufleet.Node{Name: "n-first"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.wr.ExecContext(ctx, `WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
	INSERT INTO nodes (name, state, health, state_reason, health_reason, metrics_url, labels, versions, gpus, registered_at, updated_at)
	SELECT 'n-' || i, 'ready', 'healthy', '', '', '', '{}', '{}', '[]', 0, 0 FROM seq`, gpufleet.MaxFleetNodes-1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutNode(ctx, gpufleet.Node{Name: "one-too-many"}); !errors.Is(err, gpufleet.ErrUnsatisfiable) {
		t.Errorf("node %d: %v, want ErrUnsatisfiable", gpufleet.MaxFleetNodes+1, err)
	}
	if err := s.PutNode(ctx, gpufleet.Node{Name: "n-first", Labels: map[string]string{"rack": "r1"}}); err != nil {
		t.Errorf("a known node at the limit: %v", err)
	}
}

// TestActiveJobsSpecMemo: ActiveJobs read through the spec memo returns
// what a fresh decode does, keeps only the specs of jobs still active, and
// leaves the stored queue to Queue.
func TestActiveJobsSpecMemo(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	var jobs []gpufleet.Job
	for i := range 3 {
		jobs = append(jobs, gpufleet.Job{Team: "a", RequestID: fmt.Sprint(i), Command: []string{"train", fmt.Sprint(i)},
			Env: map[string]string{"SEED": fmt.Sprint(i)}, Resources: gpufleet.Resources{GPUs: 1}})
	}
	res, err := s.SubmitJobs(ctx, jobs, "t")
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.ActiveJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.ActiveJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(first, second) || len(second) != 3 {
		t.Fatalf("second read differs from the first:\n%s", cmp.Diff(first, second))
	}
	for i, j := range second {
		if j.Command[1] != fmt.Sprint(i) || j.Env["SEED"] != fmt.Sprint(i) || j.Queue != nil {
			t.Errorf("job %d: command %v env %v queue %v", i, j.Command, j.Env, j.Queue)
		}
	}
	if _, err := s.RequestCancel(ctx, res[0].Job.ID, "t", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ActiveJobs(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(s.specs.last); n != 2 {
		t.Errorf("the memo keeps %d specs after one job ended, want 2", n)
	}
}

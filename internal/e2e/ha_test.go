package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/store/pgtest"
)

// TestMain shares one throwaway PostgreSQL (and pgbouncer) among the
// package's tests; each HA test gets a database of its own. The client
// config file the processes read and gpufleet dev writes is the test
// binary's own, never the user's.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpufleet-e2e-config-")
	if err == nil {
		os.Setenv("GPUFLEET_CONFIG", filepath.Join(dir, "config.yaml"))
		pgtest.AtExit(func() { os.RemoveAll(dir) })
	}
	pgtest.Main(m)
}

// haLeaseTTL keeps the HA tests short (the default is 8s), and haFence
// survives a leader's death with it (server.MinFence: 3s + 2 x 100ms +
// 200ms).
const (
	haLeaseTTL = "3s"
	haFence    = "4s"
)

// ha is several `gpufleet server --db postgres://...` replicas on one
// database.
type ha struct {
	t     *testing.T
	dsn   string // what the replicas connect to (maybe through pgbouncer)
	check *sql.DB
	reps  []*serverProc
	admin *api.Client
	team  *api.Client
}

// startHA starts n replicas on dsn, each with env and, when pause is set,
// GPUFLEET_TEST_PAUSE_AT=schedule.before-commit=<its own trigger file>.
func startHA(t *testing.T, dsn string, n int, pause bool) *ha {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	h := &ha{t: t, dsn: dsn, check: db}
	var urls []string
	for range n {
		dir := t.TempDir()
		var env []string
		if pause {
			env = append(env, "GPUFLEET_TEST_PAUSE_AT=schedule.before-commit="+filepath.Join(dir, "pause"))
		}
		p := startServer(t, dir, env, "--db", dsn, "--lease-ttl", haLeaseTTL, "--fence-after", haFence)
		h.reps = append(h.reps, p)
		urls = append(urls, p.url)
	}
	h.admin = h.client(urls, adminToken)
	ctx := t.Context()
	if _, err := h.admin.PutTeam(ctx, api.TeamRequest{Name: "team-a"}); err != nil {
		t.Fatal(err)
	}
	tok, err := h.admin.CreateToken(ctx, api.TokenRequest{Team: "team-a", Role: gpufleet.RoleMember})
	if err != nil {
		t.Fatal(err)
	}
	h.team = h.client(urls, tok.Token)
	h.leader() // waits for one
	return h
}

func (h *ha) client(urls []string, token string) *api.Client {
	c, err := api.NewClient(urls, token, api.WithTimeout(2*time.Second), api.WithBackoff(100*time.Millisecond, time.Second), api.WithRetries(8))
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// lease reads the lease row.
func (h *ha) lease() (holder string, epoch int64, err error) {
	err = h.check.QueryRow(`SELECT holder, epoch FROM leader_lease WHERE id = 1`).Scan(&holder, &epoch)
	return holder, epoch, err
}

// leader waits for a replica of h to hold the lease and returns it.
func (h *ha) leader() (*serverProc, int64) {
	h.t.Helper()
	var (
		p     *serverProc
		epoch int64
	)
	eventually(h.t, 20*time.Second, "a leader", func() error {
		holder, e, err := h.lease()
		if err != nil {
			return err
		}
		for _, r := range h.reps {
			if strings.HasSuffix(holder, fmt.Sprintf("-%d", r.cmd.Process.Pid)) {
				p, epoch = r, e
				return nil
			}
		}
		return fmt.Errorf("lease held by %q, not a replica", holder)
	})
	return p, epoch
}

// waitLeaderOtherThan waits for a replica other than old to lead and
// returns it and how long that took.
func (h *ha) waitLeaderOtherThan(old *serverProc, limit time.Duration) (*serverProc, int64, time.Duration) {
	h.t.Helper()
	began := time.Now()
	for {
		holder, epoch, err := h.lease()
		if err == nil && !strings.HasSuffix(holder, fmt.Sprintf("-%d", old.cmd.Process.Pid)) {
			for _, r := range h.reps {
				if r != old && strings.HasSuffix(holder, fmt.Sprintf("-%d", r.cmd.Process.Pid)) {
					return r, epoch, time.Since(began)
				}
			}
		}
		if time.Since(began) > limit {
			h.t.Fatalf("no new leader within %s (lease %q, %v)", limit, holder, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// agents registers n fake agents with gpus GPUs each. Their client lists
// first (the leader: in-memory liveness and orders live there) and then
// the other replicas, and fails over between them; they finish attempts
// after runFor.
func (h *ha) agents(ctx context.Context, first *serverProc, n, gpus int, runFor time.Duration) []*crashAgent {
	h.t.Helper()
	urls := []string{first.url}
	for _, r := range h.reps {
		if r != first {
			urls = append(urls, r.url)
		}
	}
	var out []*crashAgent
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		jt, err := h.admin.CreateJoinToken(ctx, api.JoinTokenRequest{Node: name})
		if err != nil {
			h.t.Fatal(err)
		}
		var inv []gpufleet.NodeGPU
		for g := range gpus {
			inv = append(inv, gpufleet.NodeGPU{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "h100-sxm-80gb", MemoryBytes: 80 << 30,
				NVLinkDomain: name + "-nvl", State: gpufleet.NodeReady, Health: gpufleet.Healthy})
		}
		c := h.client(urls, "")
		resp, err := c.Register(ctx, jt.Token, api.RegisterRequest{ProtocolVersion: api.ProtocolVersion, Node: name, GPUs: inv})
		if err != nil {
			h.t.Fatal(err)
		}
		a := &crashAgent{fakeAgent: &fakeAgent{name: name, c: c.WithToken(resp.Credential), runs: map[string]gpufleet.AttemptState{},
			jobs: map[string]string{}, gpus: map[string][]string{}}, started: map[string]time.Time{}, holder: map[string]string{}}
		go a.loop(ctx, runFor)
		out = append(out, a)
	}
	return out
}

// submit submits n one-GPU jobs through c, retrying with the request id.
func (h *ha) submit(ctx context.Context, c *api.Client, prefix string, n int) []string {
	h.t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// Queued anyway: some tests build the queue before any GPU joins.
			req := api.SubmitRequest{RequestID: fmt.Sprintf("%s-%d", prefix, i), Command: []string{"sleep", "1"},
				Resources: gpufleet.Resources{GPUs: 1}, Estimate: gpufleet.Duration(time.Second), AllowUnsatisfiable: true}
			for try := 0; ; try++ {
				resp, err := c.SubmitJob(ctx, req)
				if err == nil {
					ids[i] = resp.ID
					return
				}
				var apiErr *api.Error
				if (errors.As(err, &apiErr) && apiErr.Status < 500) || try > 100 || ctx.Err() != nil {
					h.t.Errorf("submit %s-%d: %v", prefix, i, err)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return ids
}

// waitDone waits for every job to succeed and checks each ran exactly
// once: one attempt, succeeded.
func (h *ha) waitDone(ctx context.Context, ids []string, limit time.Duration) {
	h.t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var list []gpufleet.Job
	eventually(h.t, limit, "all jobs succeeded", func() error {
		var err error
		list, err = h.admin.AllJobs(ctx, api.JobQuery{All: true})
		if err != nil {
			return err
		}
		open := 0
		for _, j := range list {
			if want[j.ID] && j.State != gpufleet.JobSucceeded {
				open++
			}
		}
		if open > 0 {
			return fmt.Errorf("%d of %d jobs not succeeded", open, len(ids))
		}
		return nil
	})
	for _, j := range list {
		if want[j.ID] && len(j.Attempts) != 1 {
			h.t.Errorf("job %s has %d attempts, want 1", j.ID, len(j.Attempts))
		}
	}
}

// checkAgents fails on any GPU an agent was given twice at once.
func checkAgents(t *testing.T, agents []*crashAgent) {
	for _, a := range agents {
		a.mu.Lock()
		for _, e := range a.errs {
			t.Error(e)
		}
		a.mu.Unlock()
	}
}

// leaseEventID is the id of the lease.acquired event of epoch.
func (h *ha) leaseEventID(epoch int64) int64 {
	var id int64
	if err := h.check.QueryRow(`SELECT id FROM events WHERE kind = 'lease.acquired' AND detail = $1`, fmt.Sprintf("epoch %d", epoch)).Scan(&id); err != nil {
		h.t.Fatalf("lease.acquired event of epoch %d: %v", epoch, err)
	}
	return id
}

// schedulerEventsBefore returns the ids of the scheduler's events with an
// id below id: decisions taken before that lease was acquired. Event ids
// come from a sequence when the row is written, so a stalled decision's
// events, were they ever to commit, would appear here late.
func (h *ha) schedulerEventsBefore(id int64) map[int64]bool {
	rows, err := h.check.Query(`SELECT id FROM events WHERE actor = 'scheduler' AND id < $1`, id)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var x int64
		rows.Scan(&x)
		out[x] = true
	}
	return out
}

// procState is the state letter of /proc/PID/stat (T: stopped).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndex(s, ")")
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// failover SIGKILLs the leader while jobs run: a new leader within 15s,
// and scheduling resumes.
func failover(t *testing.T, dsn string) {
	h := startHA(t, dsn, 2, false)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	old, _ := h.leader()
	agents := h.agents(ctx, old, 2, 4, 200*time.Millisecond)
	h.waitDone(ctx, h.submit(ctx, h.team, "before", 16), 30*time.Second)

	more := h.submit(ctx, h.team, "during", 16)
	old.kill()
	leader, epoch, took := h.waitLeaderOtherThan(old, 15*time.Second)
	t.Logf("new leader (epoch %d) %s after SIGKILL", epoch, took.Round(time.Millisecond))
	h.waitDone(ctx, append(more, h.submit(ctx, h.team, "after", 16)...), 40*time.Second)
	_ = leader
	checkAgents(t, agents)
}

// TestHAFailover kills the leader of two replicas.
func TestHAFailover(t *testing.T) {
	failover(t, pgtest.Database(t))
}

// TestHAFailoverThroughPgbouncer runs the same through pgbouncer in
// transaction mode.
func TestHAFailoverThroughPgbouncer(t *testing.T) {
	srv := pgtest.Shared(t)
	failover(t, srv.Bouncer(t, srv.NewDatabase(t)))
}

// TestHAPausedLeader stops the leader (SIGSTOP) past its lease, once
// between transactions and once inside its scheduling transaction, lets
// the other replica take over and schedule, then resumes it (SIGCONT):
// it must never commit a decision afterwards. Its decisions would carry
// event ids from before the new lease's lease.acquired event; none may
// appear after the resume.
func TestHAPausedLeader(t *testing.T) {
	for _, inside := range []bool{false, true} {
		name := "between transactions"
		if inside {
			name = "inside a transaction"
		}
		t.Run(name, func(t *testing.T) {
			h := startHA(t, pgtest.Database(t), 2, true)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			old, _ := h.leader()
			agents := h.agents(ctx, old, 2, 4, 200*time.Millisecond)
			h.waitDone(ctx, h.submit(ctx, h.team, "warm", 8), 30*time.Second)

			pid := old.cmd.Process.Pid
			if inside {
				if err := os.WriteFile(filepath.Join(old.dir, "pause"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				syscall.Kill(pid, syscall.SIGSTOP)
			}
			ids := h.submit(ctx, h.team, "paused", 8)
			eventually(t, 10*time.Second, "leader stopped", func() error {
				if st := procState(pid); st != "T" {
					return fmt.Errorf("state %q", st)
				}
				return nil
			})
			defer syscall.Kill(pid, syscall.SIGCONT)
			_, epoch, took := h.waitLeaderOtherThan(old, 15*time.Second)
			t.Logf("new leader (epoch %d) %s after the stop", epoch, took.Round(time.Millisecond))
			h.waitDone(ctx, ids, 30*time.Second)
			mark := h.leaseEventID(epoch)
			before := h.schedulerEventsBefore(mark)

			syscall.Kill(pid, syscall.SIGCONT)
			time.Sleep(3 * time.Second) // the old leader runs again: cycles, commits, gives up
			for id := range h.schedulerEventsBefore(mark) {
				if !before[id] {
					t.Errorf("scheduler event %d from before epoch %d committed after the old leader resumed", id, epoch)
				}
			}
			if _, e, _ := h.lease(); e != epoch {
				t.Errorf("epoch %d after the resume, want %d", e, epoch)
			}
			h.waitDone(ctx, append(ids, h.submit(ctx, h.team, "after", 8)...), 30*time.Second)
			checkAgents(t, agents)
		})
	}
}

// TestHADatabaseRestart restarts PostgreSQL under two replicas: they
// reconnect and carry on.
func TestHADatabaseRestart(t *testing.T) {
	srv := pgtest.Shared(t)
	if srv.External() {
		t.Skip("GPUFLEET_TEST_POSTGRES: cannot restart an external server")
	}
	h := startHA(t, srv.NewDatabase(t), 2, false)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	leader, _ := h.leader()
	agents := h.agents(ctx, leader, 2, 4, 200*time.Millisecond)
	h.waitDone(ctx, h.submit(ctx, h.team, "before", 8), 30*time.Second)
	if err := srv.Restart(time.Second); err != nil {
		t.Fatal(err)
	}
	h.waitDone(ctx, h.submit(ctx, h.team, "after", 16), 40*time.Second)
	for _, r := range h.reps {
		select {
		case <-r.exited:
			t.Errorf("replica %s exited", r.url)
		default:
		}
	}
	checkAgents(t, agents)
}

// TestHAThousandJobs submits 1,000 jobs across two replicas: each is
// placed exactly once, and the follower serves the queue the leader
// persisted.
func TestHAThousandJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 jobs through real processes")
	}
	h := startHA(t, pgtest.Database(t), 2, false)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	leader, _ := h.leader()
	follower := h.follower(leader)
	viaLeader := h.team
	tok := h.team
	_ = tok
	var tokenOf string
	{
		t2, err := h.admin.CreateToken(ctx, api.TokenRequest{Team: "team-a", Role: gpufleet.RoleMember})
		if err != nil {
			t.Fatal(err)
		}
		tokenOf = t2.Token
	}
	viaFollower := h.client([]string{follower.url, leader.url}, tokenOf)
	viaLeader = h.client([]string{leader.url, follower.url}, tokenOf)

	// The queue builds up before any GPU exists: the follower must show
	// the positions the leader stored.
	first := h.submit(ctx, viaFollower, "q", 20)
	fq := h.client([]string{follower.url}, tokenOf)
	eventually(t, 15*time.Second, "the follower's queue shows the leader's positions", func() error {
		q, err := fq.Queue(ctx)
		if err != nil {
			return err
		}
		if len(q) != len(first) {
			return fmt.Errorf("%d entries, want %d", len(q), len(first))
		}
		for i, e := range q {
			if e.Position != i+1 || e.ReasonCode == "pending" {
				return fmt.Errorf("entry %d: position %d, reason %q", i, e.Position, e.ReasonCode)
			}
		}
		return nil
	})

	agents := h.agents(ctx, leader, 8, 8, 100*time.Millisecond)
	var (
		wg   sync.WaitGroup
		a, b []string
	)
	began := time.Now()
	wg.Go(func() { a = h.submit(ctx, viaLeader, "l", 490) })
	wg.Go(func() { b = h.submit(ctx, viaFollower, "f", 490) })
	wg.Wait()
	t.Logf("980 submissions across both replicas in %s", time.Since(began).Round(time.Millisecond))
	all := append(append(first, a...), b...)
	h.waitDone(ctx, all, 90*time.Second)
	t.Logf("1,000 jobs done in %s", time.Since(began).Round(time.Millisecond))
	var attempts, jobs int
	if err := h.check.QueryRow(`SELECT (SELECT count(*) FROM attempts), (SELECT count(*) FROM jobs)`).Scan(&attempts, &jobs); err != nil {
		t.Fatal(err)
	}
	if attempts != 1000 || jobs != 1000 {
		t.Errorf("%d jobs, %d attempts; want 1,000 of each", jobs, attempts)
	}
	checkAgents(t, agents)
}

// TestHAHandover stops the leader of two replicas with SIGTERM while jobs
// run: it gives its lease up and the other replica leads within 2s (its
// lease was 3s; before leases were given up, handovers took the whole
// lease), and every job runs exactly once.
func TestHAHandover(t *testing.T) {
	h := startHA(t, pgtest.Database(t), 2, false)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	old, oldEpoch := h.leader()
	agents := h.agents(ctx, old, 2, 4, time.Second)
	h.waitDone(ctx, h.submit(ctx, h.team, "before", 8), 30*time.Second)
	during := h.submit(ctx, h.team, "during", 8)
	old.stop(syscall.SIGTERM)
	_, epoch, took := h.waitLeaderOtherThan(old, 15*time.Second)
	t.Logf("new leader (epoch %d after %d) %s after SIGTERM", epoch, oldEpoch, took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("handover took %s, want within 2s", took.Round(time.Millisecond))
	}
	if log := readLog(t, old); !strings.Contains(log, "gave the lease up") {
		t.Log(log[max(0, len(log)-3000):])
		t.Error("the stopped leader's log does not say it gave the lease up")
	}
	h.waitDone(ctx, append(during, h.submit(ctx, h.team, "after", 8)...), 40*time.Second)
	checkAgents(t, agents)
}

// follower is a replica of h other than leader.
func (h *ha) follower(leader *serverProc) *serverProc {
	for _, r := range h.reps {
		if r != leader {
			return r
		}
	}
	h.t.Fatal("no follower")
	return nil
}

// readLog is a server's log so far.
func readLog(t *testing.T, p *serverProc) string {
	t.Helper()
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHAFollowerTellsTheTruth reads nodes and the queue through the
// follower of two replicas: it forwards them to the leader, so it shows the
// nodes alive (it has heard no heartbeat itself) and the queue the leader
// decided, and its answers name the leader.
func TestHAFollowerTellsTheTruth(t *testing.T) {
	h := startHA(t, pgtest.Database(t), 2, false)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	leader, _ := h.leader()
	follower := h.follower(leader)
	h.agents(ctx, leader, 2, 2, time.Hour)  // the jobs hold their GPUs
	ids := h.submit(ctx, h.team, "hold", 6) // 4 run, 2 queue
	_ = ids
	viaLeader, viaFollower := h.client([]string{leader.url}, adminToken), h.client([]string{follower.url}, adminToken)
	eventually(t, 20*time.Second, "two jobs queued behind four running, both decided", func() error {
		q, err := viaLeader.Queue(ctx)
		if err != nil {
			return err
		}
		if len(q) != 2 {
			return fmt.Errorf("%d queued", len(q))
		}
		for _, e := range q {
			if e.ReasonCode == "pending" {
				return fmt.Errorf("%s not yet decided", e.ID) // a cycle after its submit will place it in the queue
			}
		}
		return nil
	})
	ln, err := viaLeader.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := viaFollower.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(fn) != 2 || len(ln) != 2 {
		t.Fatalf("nodes: %d through the follower, %d through the leader", len(fn), len(ln))
	}
	for i := range fn {
		if fn[i].Name != ln[i].Name || fn[i].State != ln[i].State || fn[i].State != gpufleet.NodeReady {
			t.Errorf("node %s: %s through the follower, %s through the leader; want ready in both", fn[i].Name, fn[i].State, ln[i].State)
		}
	}
	lq, err := viaLeader.Queue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fq, err := viaFollower.Queue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(fq) != len(lq) {
		t.Fatalf("queue: %d entries through the follower, %d through the leader", len(fq), len(lq))
	}
	for i := range fq {
		if fq[i].ID != lq[i].ID || fq[i].Position != lq[i].Position || fq[i].ReasonCode != lq[i].ReasonCode {
			t.Errorf("queue entry %d: %+v through the follower, %+v through the leader", i, fq[i], lq[i])
		}
	}
	if got := viaFollower.Leader(); got != leader.url {
		t.Errorf("the follower's answers name the leader %q, want %q", got, leader.url)
	}
}

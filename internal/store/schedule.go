package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// fenceKey carries a leadership epoch in a context (Fenced).
type fenceKey struct{}

// Fenced returns a context whose every write to the store is fenced by
// the leadership epoch: the write's transaction first reads the lease's
// epoch (PostgreSQL: FOR SHARE, so that a concurrent takeover waits for
// it) and writes nothing, failing with an error wrapping ErrFenced,
// unless it equals epoch. The leader runs its cycle under it: a deposed
// leader's writes of any kind (decisions, node states and health,
// rollouts, events) are refused.
func Fenced(ctx context.Context, epoch int64) context.Context {
	return context.WithValue(ctx, fenceKey{}, epoch)
}

// fenceOf is the epoch ctx is fenced by, if any.
func fenceOf(ctx context.Context) (int64, bool) {
	e, ok := ctx.Value(fenceKey{}).(int64)
	return e, ok
}

// checkFence fails with ErrFenced unless the lease's epoch is epoch.
func (s *SQL) checkFence(ctx context.Context, tx *sql.Tx, epoch int64) error {
	var cur int64
	err := tx.QueryRowContext(ctx, `SELECT epoch FROM leader_lease WHERE id = 1`+s.d.forShare).Scan(&cur)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: epoch %d, and nobody holds the lease", ErrFenced, epoch)
	}
	if err != nil {
		return fmt.Errorf("read lease: %w", err)
	}
	if cur != epoch {
		return fmt.Errorf("%w: epoch %d, current %d", ErrFenced, epoch, cur)
	}
	return nil
}

// dbNow is the clock leases are measured by: the database's where the
// dialect has one (replicas on several hosts), the store's otherwise.
func (s *SQL) dbNow(ctx context.Context, tx *sql.Tx) (time.Time, error) {
	if s.d.nowSQL == "" {
		return s.now(), nil
	}
	var n int64
	if err := tx.QueryRowContext(ctx, s.d.nowSQL).Scan(&n); err != nil {
		return time.Time{}, fmt.Errorf("read database clock: %w", err)
	}
	return fromNanos(n), nil
}

// TryLease takes or renews the leadership lease in one transaction: it
// succeeds when there is no lease, when holder already holds it (renewal
// keeps the epoch, even after expiry, since nobody else has held it since),
// or when the lease has expired by the store's clock (epoch+1). Otherwise
// it returns the current lease and false.
func (s *SQL) TryLease(ctx context.Context, holder string, ttl time.Duration) (Lease, bool, error) {
	if holder == "" {
		return Lease{}, false, invalid("lease holder is empty")
	}
	if ttl <= 0 {
		return Lease{}, false, invalid("lease ttl %s is not positive", ttl)
	}
	var (
		out  Lease
		held bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		// Lock the lease row first (PostgreSQL; waits at most lock_timeout
		// for a scheduling transaction holding it FOR SHARE), then read the
		// clock, so that a wait does not make the new lease end too late.
		cur, found, err := s.leaseTx(ctx, tx, s.d.forUpdate)
		if err != nil {
			return err
		}
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		exp := now.Add(ttl)
		switch {
		case !found:
			out = Lease{Holder: holder, Epoch: 1, ExpiresAt: exp}
			var res sql.Result
			res, err = tx.ExecContext(ctx, s.q(`INSERT INTO leader_lease (id, holder, epoch, expires_at) VALUES (1, ?, ?, ?)
	ON CONFLICT DO NOTHING`), holder, out.Epoch, nanos(exp))
			if err == nil {
				if n, _ := res.RowsAffected(); n == 0 {
					return errRetryTx // another replica took the first lease meanwhile
				}
			}
		case cur.Holder == holder:
			out = Lease{Holder: holder, Epoch: cur.Epoch, ExpiresAt: exp}
			_, err = tx.ExecContext(ctx, s.q(`UPDATE leader_lease SET expires_at = ? WHERE id = 1`), nanos(exp))
			held = true
			if err != nil {
				return fmt.Errorf("renew lease: %w", err)
			}
			return nil
		case !now.Before(cur.ExpiresAt) || sameReplica(cur.Holder, holder):
			out = Lease{Holder: holder, Epoch: cur.Epoch + 1, ExpiresAt: exp}
			_, err = tx.ExecContext(ctx, s.q(`UPDATE leader_lease SET holder = ?, epoch = ?, expires_at = ? WHERE id = 1`),
				holder, out.Epoch, nanos(exp))
		default:
			out = cur
			return nil
		}
		if err != nil {
			return fmt.Errorf("take lease: %w", err)
		}
		held = true
		detail := fmt.Sprintf("epoch %d", out.Epoch)
		if found && now.Before(cur.ExpiresAt) {
			detail += fmt.Sprintf(", from %s, an earlier process of this replica", cur.Holder)
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: holder, Kind: "lease.acquired", Object: holder,
			Detail: detail})
	})
	if err != nil {
		return Lease{}, false, err
	}
	return out, held, nil
}

// ReleaseLease implements Store.
func (s *SQL) ReleaseLease(ctx context.Context, holder string) (bool, error) {
	released := false
	err := s.write(ctx, func(tx *sql.Tx) error {
		cur, found, err := s.leaseTx(ctx, tx, s.d.forUpdate)
		if err != nil || !found || cur.Holder != holder {
			return err
		}
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		if !now.Before(cur.ExpiresAt) {
			return nil // expired already: nothing to give up
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE leader_lease SET expires_at = ? WHERE id = 1`), nanos(now)); err != nil {
			return fmt.Errorf("release lease: %w", err)
		}
		released = true
		return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: holder, Kind: "lease.released", Object: holder,
			Detail: fmt.Sprintf("epoch %d", cur.Epoch)})
	})
	if err != nil {
		return false, err
	}
	return released, nil
}

// leaseTx reads the lease row.
func (s *SQL) leaseTx(ctx context.Context, q queryer, lock string) (Lease, bool, error) {
	var (
		l   Lease
		exp int64
	)
	err := q.QueryRowContext(ctx, `SELECT holder, epoch, expires_at FROM leader_lease WHERE id = 1`+lock).Scan(&l.Holder, &l.Epoch, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("read lease: %w", err)
	}
	l.ExpiresAt = fromNanos(exp)
	return l, true, nil
}

// Lease reads the current lease, with its holder's URL; before anyone
// has taken it, an error wrapping gpufleet.ErrNotFound.
func (s *SQL) Lease(ctx context.Context) (Lease, error) {
	l, found, err := s.leaseTx(ctx, s.rd, "")
	if err != nil {
		return Lease{}, err
	}
	if !found {
		return Lease{}, notFound("lease", "leader")
	}
	err = s.rd.QueryRowContext(ctx, s.q(`SELECT url FROM replicas WHERE holder = ?`), l.Holder).Scan(&l.URL)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return Lease{}, fmt.Errorf("read the leader's url: %w", err)
	}
	return l, nil
}

// PutReplica implements Store.
func (s *SQL) PutReplica(ctx context.Context, holder, url string, at time.Time) error {
	replica, _, ok := strings.Cut(holder, "/")
	if !ok || replica == "" {
		return invalid("replica holder %q: expected REPLICA/INSTANCE", holder)
	}
	if url == "" || len(url) > 2048 || !utf8.ValidString(url) {
		return invalid("replica %s: url %q", holder, url)
	}
	at = s.orNow(at)
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM replicas WHERE replica = ? OR holder = ?`), replica, holder); err != nil {
			return fmt.Errorf("put replica: %w", err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO replicas (holder, replica, url, started_at) VALUES (?, ?, ?, ?)`),
			holder, replica, url, nanos(at)); err != nil {
			return fmt.Errorf("put replica: %w", err)
		}
		return nil
	})
}

// ApplySchedule writes one scheduling decision in one transaction.
//
// Fencing: the transaction first reads the lease's epoch (PostgreSQL: FOR
// SHARE, so a concurrent takeover waits) and writes nothing, returning an
// error wrapping ErrFenced, unless it equals epoch.
//
// Starts: each creates attempt seq n+1 of its job (state starting,
// started_at d.At) and turns the job scheduled. A start naming a job that
// is no longer queued (cancelled, or started already, since the leader's
// snapshot) fails the whole decision with an error wrapping ErrStale:
// the decision's placements were computed together, so the leader should
// decide again from a fresh snapshot rather than have part of it applied.
// A start naming an unknown job wraps gpufleet.ErrNotFound.
//
// Stops: each marks its attempt stop_requested with the reason; the agent
// stops it and reports stopped. A stop naming an attempt that has already
// ended is skipped: the stop has happened.
//
// Fails: each turns its job failed with the reason, if it is still
// queued (a job that moved on is skipped).
//
// Queue: the entries replace the queue information of every job; entries
// for jobs no longer queued are ignored.
func (s *SQL) ApplySchedule(ctx context.Context, epoch int64, d Decision) error {
	at := s.orNow(d.At)
	for _, sp := range d.Stops {
		if !sp.ReasonCode.Known() {
			return invalid("stop %s: reason code %q is not a stop code (%v)", sp.AttemptID, sp.ReasonCode, gpufleet.StopCodes())
		}
	}
	return s.write(Fenced(ctx, epoch), func(tx *sql.Tx) error {
		for _, st := range d.Starts {
			if err := s.start(ctx, tx, st, at); err != nil {
				return err
			}
		}
		for _, sp := range d.Stops {
			if sp.Lost {
				// Nobody is left to ask: the attempt is over. One that
				// ended meanwhile (its agent's report came first) stays
				// as it ended.
				_, err := s.updateAttempt(ctx, tx, AttemptUpdate{AttemptID: sp.AttemptID, State: gpufleet.AttemptLost, At: at,
					Reason: sp.Reason, ReasonCode: string(sp.ReasonCode)}, at, "scheduler")
				if err != nil && !errors.Is(err, gpufleet.ErrInvalid) {
					return fmt.Errorf("lose %s: %w", sp.AttemptID, err)
				}
				continue
			}
			var team string
			err := tx.QueryRowContext(ctx, s.q(`SELECT j.team FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.id = ?`), sp.AttemptID).Scan(&team)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("stop: %w", notFound("attempt", sp.AttemptID))
			}
			if err != nil {
				return fmt.Errorf("stop %s: %w", sp.AttemptID, err)
			}
			if err := s.requestStop(ctx, tx, sp.AttemptID, team, sp.Reason, string(sp.ReasonCode), sp.Grace, "scheduler", at); err != nil {
				return err
			}
		}
		for _, f := range d.Fails {
			if err := s.failJob(ctx, tx, f, at); err != nil {
				return err
			}
		}
		if err := s.writeQueue(ctx, tx, d.Queue, at); err != nil {
			return err
		}
		for _, e := range d.Events {
			if e.At.IsZero() {
				e.At = at
			}
			if err := s.insertEvent(ctx, tx, e); err != nil {
				return err
			}
		}
		s.failpoint("schedule.before-commit")
		return nil
	})
}

// failJob applies one Fail inside ApplySchedule's transaction.
func (s *SQL) failJob(ctx context.Context, tx *sql.Tx, f Fail, at time.Time) error {
	var state, team string
	err := tx.QueryRowContext(ctx, s.q(`SELECT state, team FROM jobs WHERE id = ?`+s.d.forUpdate), f.JobID).Scan(&state, &team)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("fail: %w", notFound("job", f.JobID))
	}
	if err != nil {
		return fmt.Errorf("fail %s: %w", f.JobID, err)
	}
	if gpufleet.JobState(state) != gpufleet.JobQueued {
		return nil
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE jobs SET state = 'failed', finished_at = ?, end_reason = ?, end_reason_code = ?,
	queue_position = NULL, queue_team_position = NULL, queue_reason = NULL, queue_reason_code = NULL, queue_estimated_start = NULL, queue_estimated_start_p90 = NULL, queue_eta_confidence = NULL,
	updated_at = ? WHERE id = ?`), nanos(at), f.Reason, f.ReasonCode, nanos(at), f.JobID); err != nil {
		return fmt.Errorf("fail %s: %w", f.JobID, err)
	}
	return s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: "scheduler", Kind: "job.failed", Object: f.JobID, Team: team,
		Detail: f.ReasonCode + ": " + f.Reason})
}

// start applies one Start inside ApplySchedule's transaction.
func (s *SQL) start(ctx context.Context, tx *sql.Tx, st Start, at time.Time) error {
	if len(st.Nodes) == 0 {
		return invalid("start %s: no nodes", st.JobID)
	}
	if st.Fraction < 0 || st.Fraction > 1 {
		return invalid("start %s: fraction %v is outside (0, 1]", st.JobID, st.Fraction)
	}
	fraction := st.Fraction
	if fraction == 0 {
		fraction = 1
	}
	var (
		state string
		team  string
		seq   int64
	)
	// The job's row lock (PostgreSQL) makes a concurrent cancel or a
	// second start wait, and the state is read after it.
	err := tx.QueryRowContext(ctx, s.q(`SELECT state, team FROM jobs WHERE id = ?`+s.d.forUpdate), st.JobID).Scan(&state, &team)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("start: %w", notFound("job", st.JobID))
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", st.JobID, err)
	}
	if gpufleet.JobState(state) != gpufleet.JobQueued {
		return fmt.Errorf("%w: start %s: job is %s, not queued", ErrStale, st.JobID, state)
	}
	if err := tx.QueryRowContext(ctx, s.q(`SELECT COALESCE(MAX(seq), 0) FROM attempts WHERE job_id = ?`), st.JobID).Scan(&seq); err != nil {
		return fmt.Errorf("start %s: %w", st.JobID, err)
	}
	id := st.AttemptID
	if id == "" {
		id = s.attemptIDs.next(at)
	} else {
		s.attemptIDs.observe(id)
	}
	nodes, err := json.Marshal(st.Nodes)
	if err != nil {
		return invalid("start %s: nodes: %v", st.JobID, err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO attempts (id, job_id, seq, state, node, nodes, fraction, started_at, finished_at, exit_code,
	reason, reason_code, gpu_seconds, effective_gpu_seconds, energy_joules, stop_requested, stop_reason, stop_reason_code, updated_at)
	VALUES (?, ?, ?, 'starting', ?, ?, ?, ?, NULL, NULL, '', '', 0, 0, 0, FALSE, '', '', ?)`),
		id, st.JobID, seq+1, st.Nodes[0].Name, string(nodes), fraction, nanos(at), nanos(at)); err != nil {
		return fmt.Errorf("start %s: insert attempt %s: %w", st.JobID, id, err)
	}
	seen := map[string]bool{}
	names := make([]string, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		if seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		names = append(names, n.Name+"["+strings.Join(n.GPUs, ",")+"]")
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO attempt_nodes (node, attempt_id) VALUES (?, ?)`), n.Name, id); err != nil {
			return fmt.Errorf("start %s: %w", st.JobID, err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE jobs SET state = 'scheduled', queue_position = NULL, queue_team_position = NULL,
	queue_reason = NULL, queue_reason_code = NULL, queue_estimated_start = NULL, queue_estimated_start_p90 = NULL, queue_eta_confidence = NULL,
	updated_at = ? WHERE id = ?`), nanos(at), st.JobID); err != nil {
		return fmt.Errorf("start %s: %w", st.JobID, err)
	}
	if err := s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: "scheduler", Kind: "attempt.started", Object: id, Team: team,
		Detail: fmt.Sprintf("job %s on %s", st.JobID, strings.Join(names, " "))}); err != nil {
		return err
	}
	return s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: "scheduler", Kind: "job.scheduled", Object: st.JobID, Team: team,
		Detail: "attempt " + id})
}

// writeQueue replaces the stored queue information. It writes only the
// rows that change: with a full cluster and a long queue most cycles
// change nothing, and a cycle's transaction holds the single writer.
func (s *SQL) writeQueue(ctx context.Context, tx *sql.Tx, q []gpufleet.QueueEntry, at time.Time) error {
	type info struct {
		pos, team int64
		reason    string
		code      string
		ex        string // the explanation's JSON
		run       string // the run estimate's JSON
		est, p90  sql.NullInt64
		conf      sql.NullFloat64
	}
	old := map[string]info{}
	rows, err := tx.QueryContext(ctx, `SELECT id, queue_position, queue_team_position, queue_reason, queue_reason_code, queue_estimated_start,
	queue_estimated_start_p90, queue_eta_confidence, queue_explanation, queue_estimate FROM jobs WHERE queue_position IS NOT NULL`)
	if err != nil {
		return fmt.Errorf("read queue: %w", err)
	}
	for rows.Next() {
		var (
			id         string
			in         info
			team       sql.NullInt64
			reason, cd sql.NullString
			ex, run    sql.NullString
		)
		if err := rows.Scan(&id, &in.pos, &team, &reason, &cd, &in.est, &in.p90, &in.conf, &ex, &run); err != nil {
			rows.Close()
			return fmt.Errorf("read queue: %w", err)
		}
		in.team, in.reason, in.code, in.ex, in.run = team.Int64, reason.String, cd.String, ex.String, run.String
		old[id] = in
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read queue: %w", err)
	}
	var set stmt
	// The scheduler shares one explanation between the jobs past its
	// reason depth that wait for the same reason: marshal each once.
	marshalled := map[*gpufleet.Explanation]string{}
	for _, e := range q {
		opt := func(t *time.Time) sql.NullInt64 {
			if t == nil {
				return sql.NullInt64{}
			}
			return sql.NullInt64{Int64: nanos(*t), Valid: true}
		}
		in := info{pos: int64(e.Position), team: int64(e.TeamPosition), reason: e.Reason, code: e.ReasonCode,
			est: opt(e.EstimatedStart), p90: opt(e.EstimatedStartP90)}
		if e.ETAConfidence != nil {
			in.conf = sql.NullFloat64{Float64: *e.ETAConfidence, Valid: true}
		}
		if e.Explanation != nil {
			ex, ok := marshalled[e.Explanation]
			if !ok {
				b, err := json.Marshal(e.Explanation)
				if err != nil {
					return fmt.Errorf("write queue entry %s: %w", e.ID, err)
				}
				ex = string(b)
				marshalled[e.Explanation] = ex
			}
			in.ex = ex
		}
		if e.Estimate != nil {
			b, err := json.Marshal(e.Estimate)
			if err != nil {
				return fmt.Errorf("write queue entry %s: %w", e.ID, err)
			}
			in.run = string(b)
		}
		prev, had := old[e.ID]
		delete(old, e.ID)
		if had && prev == in {
			continue
		}
		if set == nil {
			set, err = s.prepare(ctx, tx, s.q(`UPDATE jobs SET queue_position = ?, queue_team_position = ?, queue_reason = ?,
	queue_reason_code = ?, queue_estimated_start = ?, queue_estimated_start_p90 = ?, queue_eta_confidence = ?,
	queue_explanation = ?, queue_estimate = ? WHERE id = ? AND state = 'queued'`))
			if err != nil {
				return fmt.Errorf("write queue: %w", err)
			}
			defer set.Close()
		}
		if _, err := set.ExecContext(ctx, in.pos, in.team, in.reason, in.code, nullNanos(e.EstimatedStart), nullNanos(e.EstimatedStartP90),
			in.conf, sql.NullString{String: in.ex, Valid: in.ex != ""}, sql.NullString{String: in.run, Valid: in.run != ""}, e.ID); err != nil {
			return fmt.Errorf("write queue entry %s: %w", e.ID, err)
		}
	}
	if len(old) == 0 {
		return nil
	}
	clear, err := s.prepare(ctx, tx, s.q(`UPDATE jobs SET queue_position = NULL, queue_team_position = NULL, queue_reason = NULL,
	queue_reason_code = NULL, queue_estimated_start = NULL, queue_estimated_start_p90 = NULL, queue_eta_confidence = NULL,
	queue_explanation = NULL, queue_estimate = NULL WHERE id = ?`))
	if err != nil {
		return fmt.Errorf("clear queue: %w", err)
	}
	defer clear.Close()
	for id := range old {
		if _, err := clear.ExecContext(ctx, id); err != nil {
			return fmt.Errorf("clear queue entry %s: %w", id, err)
		}
	}
	return nil
}

// validAttemptStates are the states an AttemptUpdate may carry.
var validAttemptStates = map[gpufleet.AttemptState]bool{
	gpufleet.AttemptStarting: true, gpufleet.AttemptRunning: true, gpufleet.AttemptSucceeded: true,
	gpufleet.AttemptFailed: true, gpufleet.AttemptStopped: true, gpufleet.AttemptLost: true,
}

// UpdateAttempt applies an attempt's transition and its effect on the job
// in one transaction, with an audit event for each object that changes
// state (actor u.Actor, "system" when empty), and returns the job.
//
// Transitions: starting -> running -> one terminal state (succeeded,
// failed, stopped, lost); starting may also end directly. A report of the
// state the attempt is already in updates its accounting only (heartbeats
// carry running totals). Accounting values are totals and never decrease:
// a report with smaller numbers (the server marking an attempt lost, say)
// keeps the larger stored ones.
//
// Terminal attempts are immutable. Repeating the terminal state an attempt
// already has is an idempotent no-op (agents resend reports they are not
// sure arrived; the first one wins, including its exit code); any other
// change is an error wrapping gpufleet.ErrInvalid, as is running ->
// starting. An unknown attempt wraps gpufleet.ErrNotFound.
//
// A multi-node attempt is one run of all its ranks: a success reported by
// one node (u.Node set) records that node's rank as done and keeps the
// attempt running, with an attempt.rank_succeeded event, until every
// node's rank has succeeded; any other end from any node ends it at once
// (the other ranks are then stopped). Each node reports its own totals;
// the attempt's accounting is their sum.
//
// Effect on the job, while it is scheduled or running and this was its
// last attempt not yet ended: running turns the job running (started_at
// is set the first time); a terminal state gives the job the state the
// core decides (scheduler.AfterRun: success, cancel, retry or failure,
// requeue as an interruption), written with its counters (retries.used,
// interruptions) and a job event.
func (s *SQL) UpdateAttempt(ctx context.Context, u AttemptUpdate) (gpufleet.Job, error) {
	if !validAttemptStates[u.State] {
		return gpufleet.Job{}, invalid("attempt %s: state %q", u.AttemptID, u.State)
	}
	at := s.orNow(u.At)
	actor := u.Actor
	if actor == "" {
		actor = "system"
	}
	var out gpufleet.Job
	err := s.write(ctx, func(tx *sql.Tx) error {
		jobID, err := s.updateAttempt(ctx, tx, u, at, actor)
		if err != nil {
			return err
		}
		s.failpoint("attempt.before-commit")
		out, err = s.jobTx(ctx, tx, jobID)
		return err
	})
	return out, err
}

// updateAttempt applies u inside tx and returns the attempt's job.
func (s *SQL) updateAttempt(ctx context.Context, tx *sql.Tx, u AttemptUpdate, at time.Time, actor string) (string, error) {
	as, err := s.attempts(ctx, tx, `a.id = ?`, u.AttemptID)
	if err != nil {
		return "", err
	}
	if len(as) == 0 {
		return "", notFound("attempt", u.AttemptID)
	}
	if s.d.forUpdate != "" {
		// Lock the job, then read the attempt again: every writer of
		// an attempt's state holds its job's lock.
		if err := s.lockJob(ctx, tx, as[0].JobID); err != nil {
			return "", err
		}
		if as, err = s.attempts(ctx, tx, `a.id = ?`, u.AttemptID); err != nil {
			return "", err
		}
	}
	cur := as[0]
	if cur.State.Terminal() {
		if u.State != cur.State {
			return "", invalid("attempt %s is %s and cannot become %s", cur.ID, cur.State, u.State)
		}
		return cur.JobID, nil
	}
	if u.State == gpufleet.AttemptStarting && cur.State == gpufleet.AttemptRunning {
		return "", invalid("attempt %s is running and cannot go back to starting", cur.ID)
	}
	if u.Node != "" && len(cur.Nodes) > 1 {
		// Each node reports its own totals: the attempt's are their sum,
		// and its work the largest count any node's output showed.
		if u.GPUSeconds, u.EffectiveGPUSeconds, u.EnergyJoules, u.Work, err = s.rankTotals(ctx, tx, cur.ID, u); err != nil {
			return "", err
		}
	}
	if u.Work != nil {
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE attempts SET work = ? WHERE id = ?`), *u.Work, cur.ID); err != nil {
			return "", fmt.Errorf("update attempt %s: work: %w", cur.ID, err)
		}
	}
	gs := max(cur.GPUSeconds, u.GPUSeconds)
	egs := max(cur.EffectiveGPUSeconds, u.EffectiveGPUSeconds)
	ej := max(cur.EnergyJoules, u.EnergyJoules)
	if u.State == gpufleet.AttemptSucceeded && u.Node != "" && len(cur.Nodes) > 1 {
		left, err := s.rankSucceeded(ctx, tx, cur, u, at, actor)
		if err != nil {
			return "", err
		}
		if left > 0 {
			u.State = cur.State // other ranks still run: accounting only
		}
	}
	if u.State == cur.State {
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE attempts SET gpu_seconds = ?, effective_gpu_seconds = ?, energy_joules = ?, updated_at = ? WHERE id = ?`),
			gs, egs, ej, nanos(at), cur.ID); err != nil {
			return "", fmt.Errorf("update attempt %s: %w", cur.ID, err)
		}
		return cur.JobID, nil
	}
	return cur.JobID, s.transition(ctx, tx, cur, u, at, actor, gs, egs, ej)
}

// rankTotals records u.Node's totals of a multi-node attempt (never
// lowering them) and its work count, and returns the sums over its nodes
// and the largest work count.
func (s *SQL) rankTotals(ctx context.Context, tx *sql.Tx, id string, u AttemptUpdate) (gs, egs, ej float64, work *float64, err error) {
	var w any
	if u.Work != nil {
		w = *u.Work
	}
	if _, err = tx.ExecContext(ctx, s.q(`UPDATE attempt_nodes SET
	gpu_seconds = CASE WHEN gpu_seconds > ? THEN gpu_seconds ELSE ? END,
	effective_gpu_seconds = CASE WHEN effective_gpu_seconds > ? THEN effective_gpu_seconds ELSE ? END,
	energy_joules = CASE WHEN energy_joules > ? THEN energy_joules ELSE ? END,
	work = COALESCE(?, work)
	WHERE attempt_id = ? AND node = ?`),
		u.GPUSeconds, u.GPUSeconds, u.EffectiveGPUSeconds, u.EffectiveGPUSeconds, u.EnergyJoules, u.EnergyJoules, w, id, u.Node); err != nil {
		return 0, 0, 0, nil, fmt.Errorf("attempt %s: totals of %s: %w", id, u.Node, err)
	}
	var mw sql.NullFloat64
	err = tx.QueryRowContext(ctx, s.q(`SELECT COALESCE(SUM(gpu_seconds), 0), COALESCE(SUM(effective_gpu_seconds), 0), COALESCE(SUM(energy_joules), 0), MAX(work)
	FROM attempt_nodes WHERE attempt_id = ?`), id).Scan(&gs, &egs, &ej, &mw)
	if err != nil {
		return 0, 0, 0, nil, fmt.Errorf("attempt %s: totals: %w", id, err)
	}
	return gs, egs, ej, ptrFloat(mw), nil
}

// rankSucceeded records that u.Node's rank of a multi-node attempt exited
// 0 and returns how many nodes' ranks have not yet.
func (s *SQL) rankSucceeded(ctx context.Context, tx *sql.Tx, cur AttemptRecord, u AttemptUpdate, at time.Time, actor string) (int, error) {
	res, err := tx.ExecContext(ctx, s.q(`UPDATE attempt_nodes SET succeeded_at = ? WHERE attempt_id = ? AND node = ? AND succeeded_at IS NULL`),
		nanos(at), cur.ID, u.Node)
	if err != nil {
		return 0, fmt.Errorf("attempt %s: rank on %s: %w", cur.ID, u.Node, err)
	}
	if n, err := res.RowsAffected(); err == nil && n > 0 {
		if err := s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: actor, Kind: "attempt.rank_succeeded", Object: cur.ID, Team: cur.Team,
			Detail: "job " + cur.JobID + ": the rank on " + u.Node + " exited 0"}); err != nil {
			return 0, err
		}
	}
	var left int
	if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM attempt_nodes WHERE attempt_id = ? AND succeeded_at IS NULL`), cur.ID).Scan(&left); err != nil {
		return 0, fmt.Errorf("attempt %s: ranks left: %w", cur.ID, err)
	}
	return left, nil
}

// transition changes an attempt's state and applies the effect on its job.
func (s *SQL) transition(ctx context.Context, tx *sql.Tx, cur AttemptRecord, u AttemptUpdate, at time.Time, actor string, gs, egs, ej float64) error {
	terminal := u.State.Terminal()
	var finished, exit any
	if terminal {
		finished = nanos(at)
		if u.ExitCode != nil {
			exit = int64(*u.ExitCode)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE attempts SET state = ?, finished_at = ?, exit_code = ?, reason = ?, reason_code = ?,
	gpu_seconds = ?, effective_gpu_seconds = ?, energy_joules = ?, updated_at = ? WHERE id = ?`),
		string(u.State), finished, exit, u.Reason, u.ReasonCode, gs, egs, ej, nanos(at), cur.ID); err != nil {
		return fmt.Errorf("update attempt %s: %w", cur.ID, err)
	}
	detail := "job " + cur.JobID
	if u.ExitCode != nil && terminal {
		detail += fmt.Sprintf(" exit %d", *u.ExitCode)
	}
	if u.ReasonCode != "" || u.Reason != "" {
		detail += ": " + strings.TrimPrefix(u.ReasonCode+" "+u.Reason, " ")
	}
	if err := s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: actor, Kind: "attempt." + string(u.State), Object: cur.ID, Team: cur.Team, Detail: detail}); err != nil {
		return err
	}

	var (
		state              string
		cancel             bool
		retriesMax, used   int64
		attemptsStillGoing int64
	)
	if err := tx.QueryRowContext(ctx, s.q(`SELECT state, cancel_requested, retries_max, retries_used,
	(SELECT COUNT(*) FROM attempts WHERE job_id = jobs.id AND state IN ('starting', 'running'))
	FROM jobs WHERE id = ?`), cur.JobID).Scan(&state, &cancel, &retriesMax, &used, &attemptsStillGoing); err != nil {
		return fmt.Errorf("read job %s: %w", cur.JobID, err)
	}
	js := gpufleet.JobState(state)
	if js != gpufleet.JobScheduled && js != gpufleet.JobRunning {
		return nil // the job has moved on; the attempt's record is all that changes
	}
	job := func(kind, set, detail string, args ...any) error {
		args = append(args, nanos(at), cur.JobID)
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE jobs SET `+set+`, updated_at = ? WHERE id = ?`), args...); err != nil {
			return fmt.Errorf("update job %s: %w", cur.JobID, err)
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: actor, Kind: kind, Object: cur.JobID, Team: cur.Team, Detail: detail})
	}
	if !terminal {
		if u.State == gpufleet.AttemptRunning && js == gpufleet.JobScheduled {
			return job("job.running", `state = 'running', started_at = COALESCE(started_at, ?)`, "attempt "+cur.ID, nanos(at))
		}
		return nil
	}
	if attemptsStillGoing > 0 {
		return nil // another attempt of the job has not ended yet
	}
	startedAt := nanos(at)
	if cur.StartedAt != nil {
		startedAt = nanos(*cur.StartedAt)
	}
	// The core decides; the store writes what it decided.
	end := scheduler.RunEnd{State: u.State, ExitCode: u.ExitCode, Stop: gpufleet.StopCode(cur.StopReasonCode)}
	next := scheduler.AfterRun(gpufleet.Retries{Max: int(retriesMax), Used: int(used)}, cancel, end)
	what := next.Describe(cur.ID, end)
	switch next.State {
	case gpufleet.JobSucceeded:
		return job("job.succeeded", `state = 'succeeded', finished_at = ?, started_at = COALESCE(started_at, ?)`, what, nanos(at), startedAt)
	case gpufleet.JobCancelled:
		return job("job.cancelled", `state = 'cancelled', finished_at = ?`, what, nanos(at))
	case gpufleet.JobQueued:
		return job("job.requeued", `state = 'queued', retries_used = ?, interruptions = interruptions + ?`, what,
			next.Retries.Used, boolInt(next.Interrupted))
	case gpufleet.JobFailed:
		if next.Stop != "" {
			return job("job.failed", `state = 'failed', retries_used = ?, finished_at = ?, end_reason = ?, end_reason_code = ?`,
				fmt.Sprintf("%s: %s (attempt %s)", next.Stop, cur.StopReason, cur.ID), next.Retries.Used, nanos(at), cur.StopReason, string(next.Stop))
		}
		return job("job.failed", `state = 'failed', retries_used = ?, finished_at = ?`, what, next.Retries.Used, nanos(at))
	}
	return fmt.Errorf("job %s: the core's next state %q after attempt %s is not one the store writes", cur.JobID, next.State, cur.ID)
}

// boolInt is 1 for true.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

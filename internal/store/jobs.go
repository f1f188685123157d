package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// jobSpec is the part of a job fixed at submission, stored as one JSON
// document in jobs.spec. What changes (state, retries, times, queue
// information) has columns of its own.
type jobSpec struct {
	Labels    map[string]string  `json:"labels,omitempty"` // job_labels indexes them
	Resources gpufleet.Resources `json:"resources"`
	Command   []string           `json:"command"`
	Env       map[string]string  `json:"env,omitempty"`
	Workdir   string             `json:"workdir,omitempty"`
	gpufleet.Launch
	TimeLimitS  *float64              `json:"time_limit_s,omitempty"`
	EstimateS   *float64              `json:"estimate_s,omitempty"`
	Preemptible bool                  `json:"preemptible,omitempty"`
	GraceS      *float64              `json:"grace_s,omitempty"`
	SimLoad     gpufleet.SimLoad      `json:"sim_load,omitempty"`
	Work        *gpufleet.WorkCounter `json:"work,omitempty"`
	Plan        json.RawMessage       `json:"plan,omitempty"`
}

// specOf is the part of j that jobs.spec holds (its plan apart).
func specOf(j gpufleet.Job) jobSpec {
	return jobSpec{
		Labels: j.Labels, Resources: j.Resources, Command: j.Command, Env: j.Env, Workdir: j.Workdir, Launch: j.Launch,
		TimeLimitS: j.TimeLimitS, EstimateS: j.EstimateS, Preemptible: j.Preemptible,
		GraceS: j.GraceS, SimLoad: j.SimLoad, Work: j.Work,
	}
}

// jobCols is the column list scanJob reads, in order.
const jobCols = `id, team, name, state, cancel_requested, priority, request_id, spec,
	retries_max, retries_used, interruptions, submitted_at, started_at, finished_at,
	queue_position, queue_team_position, queue_reason, queue_reason_code, queue_estimated_start,
	queue_estimated_start_p90, queue_eta_confidence, end_reason, end_reason_code, queue_explanation, queue_estimate`

// activeCols is jobCols without the stored queue entry (NULL in its
// place): ActiveJobs is the scheduler's snapshot, and the leader decides
// the queue anew each cycle, so it does not read back 50k explanations.
const activeCols = `id, team, name, state, cancel_requested, priority, request_id, spec,
	retries_max, retries_used, interruptions, submitted_at, started_at, finished_at,
	NULL, NULL, NULL, NULL, NULL, NULL, NULL, end_reason, end_reason_code, NULL, NULL`

// activeStates are the job states ActiveJobs returns, as SQL.
const activeStates = `('queued', 'scheduled', 'running')`

type scanner interface{ Scan(dest ...any) error }

// scanJob reads one row of jobCols. Attempts is empty, never nil. ex
// keeps the explanations decoded so far (nil: none kept): most queued
// jobs share a few (the same reason past the scheduler's reason depth),
// and a list of 50,000 decodes each once, sharing it.
func scanJob(r scanner, ex explanations, specs *specRead) (gpufleet.Job, error) {
	var (
		j                           gpufleet.Job
		spec                        string
		started, finished           sql.NullInt64
		submitted                   int64
		qpos, qteam, qest, qest90   sql.NullInt64
		qconf                       sql.NullFloat64
		qreason, qcode, qex, qrun   sql.NullString
		state                       string
		retriesMax, used, interrupt int64
	)
	var priority string
	if err := r.Scan(&j.ID, &j.Team, &j.Name, &state, &j.CancelRequested, &priority, &j.RequestID, &spec,
		&retriesMax, &used, &interrupt, &submitted, &started, &finished,
		&qpos, &qteam, &qreason, &qcode, &qest, &qest90, &qconf, &j.Reason, &j.ReasonCode, &qex, &qrun); err != nil {
		return j, err
	}
	j.Priority = gpufleet.Priority(priority)
	sp, ok := specs.get(spec)
	if !ok {
		if err := json.Unmarshal([]byte(spec), &sp); err != nil {
			// A row this version cannot read stops nothing: the job is
			// returned with its defect, and the leader fails it.
			j.Defect = "spec does not decode: " + gpufleet.Quote(err.Error())
			sp = jobSpec{}
		} else {
			specs.put(spec, sp)
		}
	}
	j.State = gpufleet.JobState(state)
	j.Labels, j.Resources, j.Command, j.Env, j.Workdir, j.Launch = sp.Labels, sp.Resources, sp.Command, sp.Env, sp.Workdir, sp.Launch
	j.TimeLimitS, j.EstimateS, j.Preemptible, j.GraceS, j.SimLoad, j.Work = sp.TimeLimitS, sp.EstimateS, sp.Preemptible, sp.GraceS, sp.SimLoad, sp.Work
	if len(sp.Plan) > 0 {
		j.Plan = sp.Plan
	}
	j.Retries = gpufleet.Retries{Max: int(retriesMax), Used: int(used)}
	j.Interruptions = int(interrupt)
	j.SubmittedAt = fromNanos(submitted)
	j.StartedAt, j.FinishedAt = ptrTime(started), ptrTime(finished)
	j.Attempts = []gpufleet.Attempt{}
	if j.State == gpufleet.JobQueued && qpos.Valid {
		j.Queue = &gpufleet.QueueEntry{
			ID: j.ID, Team: j.Team, Priority: j.Priority,
			Position: int(qpos.Int64), TeamPosition: int(qteam.Int64),
			Reason: qreason.String, ReasonCode: qcode.String,
			EstimatedStart: ptrTime(qest), EstimatedStartP90: ptrTime(qest90), ETAConfidence: ptrFloat(qconf),
			Explanation: ex.of(qex), Estimate: runEstimateOf(qrun),
		}
	}
	return j, nil
}

// attemptCols is the column list scanAttempt reads, in order; queries
// select it FROM attempts a JOIN jobs j ON j.id = a.job_id.
const attemptCols = `a.id, a.job_id, a.state, a.nodes, a.fraction, a.started_at, a.finished_at, a.exit_code,
	a.reason, a.reason_code, a.gpu_seconds, a.effective_gpu_seconds, a.energy_joules, a.work,
	a.stop_requested, a.stop_reason, a.stop_reason_code, a.stop_requested_at, a.stop_grace_s, j.team`

// scanAttempt reads one row of attemptCols.
func scanAttempt(r scanner) (AttemptRecord, error) {
	var (
		a                 AttemptRecord
		state, nodes      string
		started, finished sql.NullInt64
		exit, stopAt      sql.NullInt64
		stopGrace, work   sql.NullFloat64
	)
	if err := r.Scan(&a.ID, &a.JobID, &state, &nodes, &a.Fraction, &started, &finished, &exit,
		&a.Reason, &a.ReasonCode, &a.GPUSeconds, &a.EffectiveGPUSeconds, &a.EnergyJoules, &work,
		&a.StopRequested, &a.StopReason, &a.StopReasonCode, &stopAt, &stopGrace, &a.Team); err != nil {
		return a, err
	}
	a.StopRequestedAt = ptrTime(stopAt)
	a.Work = ptrFloat(work)
	if stopGrace.Valid {
		a.StopGraceS = &stopGrace.Float64
	}
	a.State = gpufleet.AttemptState(state)
	if err := json.Unmarshal([]byte(nodes), &a.Nodes); err != nil {
		return a, fmt.Errorf("attempt %s: decode nodes: %w", a.ID, err)
	}
	if len(a.Nodes) > 0 {
		a.Node, a.GPUs = a.Nodes[0].Name, a.Nodes[0].GPUs
	}
	a.StartedAt, a.FinishedAt = ptrTime(started), ptrTime(finished)
	if exit.Valid {
		c := int(exit.Int64)
		a.ExitCode = &c
	}
	if a.StopRequested && !a.State.Terminal() && a.Reason == "" {
		// Being stopped: the API (and the stop order) say why.
		a.Reason, a.ReasonCode = a.StopReason, a.StopReasonCode
	}
	return a, nil
}

// SubmitJobs stores new jobs, state queued, each with a fresh id unless it
// carries one. The jobs of one call, and those of concurrent calls, commit
// in one transaction (see WithGroupCommit); when SubmitJobs returns without
// error every job it reports Created is durable. A job whose (team,
// request id) matches a stored one is not stored again: its result holds
// the stored job with Created false. A job the store cannot take (no team,
// a negative retry budget, an id in use) has Err set, wrapping
// gpufleet.ErrInvalid; the others are stored regardless.
//
// When ctx ends first SubmitJobs returns its error, but the jobs may still
// be committed: retry with the same request ids.
func (s *SQL) SubmitJobs(ctx context.Context, jobs []gpufleet.Job, actor string) ([]SubmitResult, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	r := &submitReq{ctx: ctx, jobs: jobs, actor: actor, done: make(chan struct{})}
	select {
	case s.commits <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.quit:
		return nil, ErrClosed
	}
	select {
	case <-r.done:
		return r.res, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		select {
		case <-r.done:
			return r.res, r.err
		default:
			return nil, ErrClosed
		}
	}
}

// submitReq is one SubmitJobs call waiting for the committer.
type submitReq struct {
	ctx   context.Context
	jobs  []gpufleet.Job
	actor string
	res   []SubmitResult
	err   error
	done  chan struct{}
}

// committer gathers waiting submissions and commits each group in one
// transaction: one WAL append and one lock hand-over for many jobs.
func (s *SQL) committer() {
	defer close(s.done)
	for {
		select {
		case <-s.quit:
			s.drainClosed()
			return
		case r := <-s.commits:
			s.commitGroup(s.gather(r))
		}
	}
}

// gather collects the submissions waiting behind first, and those that
// arrive within the window, up to maxJobs jobs.
func (s *SQL) gather(first *submitReq) []*submitReq {
	group := []*submitReq{first}
	n := len(first.jobs)
	var deadline <-chan time.Time
	if s.window > 0 {
		t := time.NewTimer(s.window)
		defer t.Stop()
		deadline = t.C
	}
	for n < s.maxJobs {
		select {
		case r := <-s.commits:
			group = append(group, r)
			n += len(r.jobs)
			continue
		default:
		}
		if deadline == nil {
			break
		}
		select {
		case r := <-s.commits:
			group = append(group, r)
			n += len(r.jobs)
			continue
		case <-deadline:
		case <-s.quit:
		}
		break
	}
	return group
}

// drainClosed fails the submissions still waiting when the store closes.
func (s *SQL) drainClosed() {
	for {
		select {
		case r := <-s.commits:
			r.err = ErrClosed
			close(r.done)
		default:
			return
		}
	}
}

// commitGroup writes a group of submissions in one transaction and answers
// each caller. When the group's transaction fails, each submission is
// retried in a transaction of its own, so one bad request cannot fail its
// neighbours.
func (s *SQL) commitGroup(group []*submitReq) {
	live := group[:0]
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	err := s.submitTx(live)
	if err != nil && len(live) > 1 {
		for _, r := range live {
			r.res = nil
			r.err = s.submitTx([]*submitReq{r})
			close(r.done)
		}
		return
	}
	for _, r := range live {
		if err != nil {
			r.res = nil
		}
		r.err = err
		close(r.done)
	}
}

// submitTx inserts the jobs of reqs in one transaction, filling each
// request's results.
func (s *SQL) submitTx(reqs []*submitReq) error {
	ctx := context.Background() // the group outlives any one caller
	return s.write(ctx, func(tx *sql.Tx) error {
		ins, err := s.prepare(ctx, tx, s.q(`INSERT INTO jobs (`+jobCols+`, updated_at)
	VALUES (?, ?, ?, 'queued', FALSE, ?, ?, ?, ?, 0, 0, ?, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '', '', NULL, NULL, ?)
	ON CONFLICT DO NOTHING`))
		if err != nil {
			return fmt.Errorf("prepare submit: %w", err)
		}
		defer ins.Close()
		ev, err := s.prepare(ctx, tx, s.q(`INSERT INTO events (at, actor, kind, object, team, detail) VALUES (?, ?, 'job.submitted', ?, ?, ?)`))
		if err != nil {
			return fmt.Errorf("prepare submit: %w", err)
		}
		defer ev.Close()
		for _, r := range reqs {
			r.res = make([]SubmitResult, len(r.jobs))
			for i, j := range r.jobs {
				res, err := s.insertJob(ctx, tx, ins, ev, j, r.actor)
				if err != nil {
					return err
				}
				r.res[i] = res
			}
		}
		s.failpoint("submit.before-commit")
		return nil
	})
}

// insertJob stores one job inside a submission transaction. Problems with
// the job itself go into the result; database errors are returned.
func (s *SQL) insertJob(ctx context.Context, tx *sql.Tx, ins, ev stmt, j gpufleet.Job, actor string) (SubmitResult, error) {
	switch {
	case j.Team == "":
		return SubmitResult{Err: invalid("job %q: team is required", j.Name)}, nil
	case j.Retries.Max < 0:
		return SubmitResult{Err: invalid("job %q: retries.max %d is negative", j.Name, j.Retries.Max)}, nil
	}
	now := s.now()
	if j.ID == "" {
		j.ID = s.jobIDs.next(now)
	} else {
		s.jobIDs.observe(j.ID)
	}
	sp := specOf(j)
	if j.Plan != nil {
		raw, err := json.Marshal(j.Plan)
		if err != nil {
			return SubmitResult{Err: invalid("job %q: plan: %v", j.Name, err)}, nil
		}
		sp.Plan = raw
	}
	spec, err := json.Marshal(sp)
	if err != nil {
		return SubmitResult{Err: invalid("job %q: %v", j.Name, err)}, nil
	}
	j.SubmittedAt = s.orNow(j.SubmittedAt)
	res, err := ins.ExecContext(ctx, j.ID, j.Team, j.Name, j.Priority, j.RequestID, string(spec),
		j.Retries.Max, nanos(j.SubmittedAt), nanos(now))
	if err != nil {
		return SubmitResult{}, fmt.Errorf("insert job: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return SubmitResult{}, err
	} else if n == 0 {
		if j.RequestID != "" {
			old, err := s.jobByRequest(ctx, tx, j.Team, j.RequestID)
			if err == nil {
				return SubmitResult{Job: old}, nil
			}
			if !errors.Is(err, gpufleet.ErrNotFound) {
				return SubmitResult{}, err
			}
		}
		return SubmitResult{Err: invalid("job id %q is in use", j.ID)}, nil
	}
	if err := s.insertLabels(ctx, tx, j.ID, j.Labels); err != nil {
		return SubmitResult{}, err
	}
	detail := fmt.Sprintf("%s gpus=%d priority=%s", j.Name, j.Resources.GPUs, j.Priority)
	if _, err := ev.ExecContext(ctx, nanos(now), actor, j.ID, j.Team, detail); err != nil {
		return SubmitResult{}, fmt.Errorf("append event: %w", err)
	}
	j.State = gpufleet.JobQueued
	j.CancelRequested = false
	j.Retries.Used = 0
	j.Interruptions = 0
	j.StartedAt, j.FinishedAt, j.Queue = nil, nil, nil
	j.Attempts = []gpufleet.Attempt{}
	if sp.Plan != nil {
		j.Plan = sp.Plan
	}
	return SubmitResult{Job: j, Created: true}, nil
}

// insertLabels writes a new job's rows of job_labels, the index label
// selectors query (its spec holds the labels it is read with).
func (s *SQL) insertLabels(ctx context.Context, tx *sql.Tx, id string, labels map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO job_labels (job_id, label, value) VALUES (?, ?, ?)`), id, k, labels[k]); err != nil {
			return fmt.Errorf("insert job label: %w", err)
		}
	}
	return nil
}

// selectorSQL is a label selector as conditions on jobs, one per
// requirement, over job_labels: a requirement on a label the job lacks
// holds for !=, notin and ! (as in Kubernetes).
func selectorSQL(sel gpufleet.LabelSelector) (where []string, args []any) {
	for _, r := range sel {
		cond, neg := `l.label = ?`, false
		args = append(args, r.Key)
		switch r.Op {
		case gpufleet.OpEquals, gpufleet.OpNotEquals:
			cond += ` AND l.value = ?`
			args = append(args, r.Values[0])
			neg = r.Op == gpufleet.OpNotEquals
		case gpufleet.OpIn, gpufleet.OpNotIn:
			cond += ` AND l.value IN (` + placeholders(len(r.Values)) + `)`
			for _, v := range r.Values {
				args = append(args, v)
			}
			neg = r.Op == gpufleet.OpNotIn
		case gpufleet.OpNotExists:
			neg = true
		}
		exists := `EXISTS (SELECT 1 FROM job_labels l WHERE l.job_id = jobs.id AND ` + cond + `)`
		if neg {
			exists = `NOT ` + exists
		}
		where = append(where, exists)
	}
	return where, args
}

// jobByRequest reads the job with a team's request id, inside tx.
func (s *SQL) jobByRequest(ctx context.Context, tx *sql.Tx, team, requestID string) (gpufleet.Job, error) {
	var id string
	err := tx.QueryRowContext(ctx, s.q(`SELECT id FROM jobs WHERE team = ? AND request_id = ?`), team, requestID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return gpufleet.Job{}, notFound("request id", requestID)
	}
	if err != nil {
		return gpufleet.Job{}, err
	}
	return s.jobTx(ctx, tx, id)
}

// jobTx reads one job with its attempts through q (a transaction).
func (s *SQL) jobTx(ctx context.Context, q queryer, id string) (gpufleet.Job, error) {
	j, err := scanJob(q.QueryRowContext(ctx, s.q(`SELECT `+jobCols+` FROM jobs WHERE id = ?`), id), nil, nil)
	if errors.Is(err, sql.ErrNoRows) {
		return j, notFound("job", id)
	}
	if err != nil {
		return j, fmt.Errorf("read job %s: %w", id, err)
	}
	as, err := s.attempts(ctx, q, `a.job_id = ?`, id)
	if err != nil {
		return j, err
	}
	for _, a := range as {
		j.Attempts = append(j.Attempts, a.Attempt)
	}
	return j, nil
}

// attempts reads the attempts matching where, ordered by job and sequence.
func (s *SQL) attempts(ctx context.Context, q queryer, where string, args ...any) ([]AttemptRecord, error) {
	rows, err := q.QueryContext(ctx, s.q(`SELECT `+attemptCols+` FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE `+where+` ORDER BY a.job_id, a.seq`), args...)
	if err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}
	defer rows.Close()
	var out []AttemptRecord
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, fmt.Errorf("read attempts: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}
	return out, nil
}

// WorkHistory implements Store. The unit is in the job's spec: the
// newest attempts with work are read and those of another unit skipped.
func (s *SQL) WorkHistory(ctx context.Context, team, name, unit string, limit int) ([]gpufleet.Attempt, error) {
	limit = pageLimit(limit)
	var out []gpufleet.Attempt
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.q(`SELECT `+attemptCols+`, j.spec FROM attempts a JOIN jobs j ON j.id = a.job_id
	WHERE j.team = ? AND j.name = ? AND a.work > 0 AND a.finished_at IS NOT NULL
	ORDER BY a.finished_at DESC, a.id LIMIT `+strconv.Itoa(4*limit)), team, name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() && len(out) < limit {
			var (
				spec string
				sp   jobSpec
			)
			a, err := scanAttempt(extraScan{rows, []any{&spec}})
			if err != nil {
				return err
			}
			if json.Unmarshal([]byte(spec), &sp) == nil && sp.Work != nil && sp.Work.UnitName() == unit {
				out = append(out, a.Attempt)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read work history: %w", err)
	}
	return out, nil
}

// runEstimateOf decodes a queue_estimate column; NULL or a value this
// version cannot read is none.
func runEstimateOf(v sql.NullString) *gpufleet.RunEstimate {
	if !v.Valid {
		return nil
	}
	var e gpufleet.RunEstimate
	if json.Unmarshal([]byte(v.String), &e) != nil {
		return nil
	}
	return &e
}

// FinishedRun is a job that succeeded, as the estimates read it: its
// team, name, command and GPUs, when it finished, and how long its runs
// held GPUs in all, each from its placement to its end (the attempts that
// succeeded or were stopped, not the failed ones a retry replaced).
type FinishedRun struct {
	Job      string
	Team     string
	Name     string
	Command  []string
	GPUs     int
	Finished time.Time
	Ran      time.Duration
}

// Runs implements Store.
func (s *SQL) Runs(ctx context.Context, since time.Time, limit int) ([]FinishedRun, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []FinishedRun
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.q(`SELECT j.id, j.team, j.name, j.spec, j.finished_at,
	(SELECT CAST(SUM(a.finished_at - a.started_at) AS BIGINT) FROM attempts a WHERE a.job_id = j.id AND a.state IN ('succeeded', 'stopped')
	 AND a.started_at IS NOT NULL AND a.finished_at IS NOT NULL)
	FROM jobs j WHERE j.state = 'succeeded' AND j.finished_at >= ? ORDER BY j.finished_at DESC, j.id LIMIT `+strconv.Itoa(limit)), nanos(since))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				r        FinishedRun
				spec     string
				finished int64
				ran      sql.NullInt64
				sp       jobSpec
			)
			if err := rows.Scan(&r.Job, &r.Team, &r.Name, &spec, &finished, &ran); err != nil {
				return err
			}
			if json.Unmarshal([]byte(spec), &sp) != nil || !ran.Valid || ran.Int64 <= 0 {
				continue
			}
			r.Command, r.GPUs, r.Finished, r.Ran = sp.Command, sp.Resources.GPUs, fromNanos(finished), time.Duration(ran.Int64)
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read finished runs: %w", err)
	}
	return out, nil
}

// extraScan scans a row of attemptCols (or jobCols) followed by more
// columns into extra.
type extraScan struct {
	r     scanner
	extra []any
}

func (e extraScan) Scan(dest ...any) error { return e.r.Scan(append(dest, e.extra...)...) }

// Job reads one job with its attempts (in order) and queue information.
func (s *SQL) Job(ctx context.Context, id string) (gpufleet.Job, error) {
	var j gpufleet.Job
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		j, err = s.jobTx(ctx, tx, id)
		return err
	})
	return j, err
}

// jobs reads the jobs a query selects, in its order, and their attempts
// selected by attemptWhere; specs, when set, decodes their specs through
// the memo.
func (s *SQL) jobs(ctx context.Context, tx *sql.Tx, query string, args []any, attemptWhere string, attemptArgs []any, specs *specRead) ([]gpufleet.Job, error) {
	rows, err := tx.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	// The memo's size is the last read's: the active set barely changes
	// between cycles, and a Job is large to grow into.
	out := make([]gpufleet.Job, 0, specs.size())
	index := make(map[string]int, specs.size())
	ex := explanations{}
	for rows.Next() {
		j, err := scanJob(rows, ex, specs)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		index[j.ID] = len(out)
		out = append(out, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	if len(out) == 0 {
		return out, nil
	}
	if attemptWhere == "" {
		ids := make([]any, len(out))
		for i, j := range out {
			ids[i] = j.ID
		}
		attemptWhere, attemptArgs = `a.job_id IN (`+placeholders(len(ids))+`)`, ids
	}
	as, err := s.attempts(ctx, tx, attemptWhere, attemptArgs...)
	if err != nil {
		return nil, err
	}
	for _, a := range as {
		if i, ok := index[a.JobID]; ok {
			out[i].Attempts = append(out[i].Attempts, a.Attempt)
		}
	}
	return out, nil
}

// placeholders returns "?, ?, ..." with n marks.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// Page sizes for ListJobs and Events.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

func pageLimit(n int) int {
	switch {
	case n <= 0:
		return defaultLimit
	case n > maxLimit:
		return maxLimit
	}
	return n
}

// validJobStates are the states a JobFilter may name.
var validJobStates = map[gpufleet.JobState]bool{
	gpufleet.JobQueued: true, gpufleet.JobScheduled: true, gpufleet.JobRunning: true,
	gpufleet.JobSucceeded: true, gpufleet.JobFailed: true, gpufleet.JobCancelled: true,
}

// validSelectorOps are the operators a JobFilter's selector may use.
var validSelectorOps = map[gpufleet.SelectorOp]bool{
	gpufleet.OpEquals: true, gpufleet.OpNotEquals: true, gpufleet.OpIn: true, gpufleet.OpNotIn: true,
	gpufleet.OpExists: true, gpufleet.OpNotExists: true,
}

// ListJobs returns up to f.Limit jobs (default 100, at most 1000) in id
// order, which is submission order, after the cursor f.After, with their
// attempts. The second result is the cursor for the next page, empty when
// there is none. f.Selector is applied in the query, so pages hold only
// matching jobs. An unknown state in f.States, or a selector requirement
// ParseLabelSelector would not return, wraps gpufleet.ErrInvalid.
func (s *SQL) ListJobs(ctx context.Context, f JobFilter) ([]gpufleet.Job, string, error) {
	var (
		where []string
		args  []any
	)
	if f.Team != "" {
		where, args = append(where, "team = ?"), append(args, f.Team)
	}
	if len(f.States) > 0 {
		for _, st := range f.States {
			if !validJobStates[st] {
				return nil, "", invalid("job state %q", st)
			}
			args = append(args, string(st))
		}
		where = append(where, "state IN ("+placeholders(len(f.States))+")")
	}
	if f.After != "" {
		where, args = append(where, "id > ?"), append(args, f.After)
	}
	for _, r := range f.Selector {
		if !validSelectorOps[r.Op] || (r.Op != gpufleet.OpExists && r.Op != gpufleet.OpNotExists && len(r.Values) == 0) {
			return nil, "", invalid("label selector requirement %q", r.String())
		}
	}
	sw, sargs := selectorSQL(f.Selector)
	where, args = append(where, sw...), append(args, sargs...)
	limit := pageLimit(f.Limit)
	query := `SELECT ` + jobCols + ` FROM jobs`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += fmt.Sprintf(` ORDER BY id LIMIT %d`, limit+1)
	var out []gpufleet.Job
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.jobs(ctx, tx, query, args, "", nil, nil)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}

// ActiveJobs returns every queued, scheduled or running job with its
// attempts, in submission order, read from one snapshot.
func (s *SQL) ActiveJobs(ctx context.Context) ([]gpufleet.Job, error) {
	var out []gpufleet.Job
	specs := s.specs.read()
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.jobs(ctx, tx, `SELECT `+activeCols+` FROM jobs WHERE state IN `+activeStates+` ORDER BY id`, nil,
			`j.state IN `+activeStates, nil, specs)
		return err
	})
	if err == nil {
		s.specs.keep(specs)
	}
	return out, err
}

// specMemo keeps the job specs ActiveJobs decoded, by their text, from one
// call to the next: a job's spec never changes once submitted, and the
// leader reads every active job each cycle, where decoding 55k specs was
// an eighth of a cycle at 5k nodes. A call keeps what it read, so that
// jobs gone from the active set leave the memo. The specs returned share
// their maps and slices with the memo and each other: callers only read
// them, as they do the explanations.
type specMemo struct {
	mu   sync.Mutex
	last map[string]jobSpec
}

// specRead is one read through a specMemo: the specs of the last call,
// and those of this one so far.
type specRead struct {
	last, seen map[string]jobSpec
}

func (m *specMemo) read() *specRead {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &specRead{last: m.last, seen: make(map[string]jobSpec, len(m.last))}
}

// keep makes r's specs the memo's.
func (m *specMemo) keep(r *specRead) {
	m.mu.Lock()
	m.last = r.seen
	m.mu.Unlock()
}

// get is the decoded spec of text, when a read decoded it before.
func (r *specRead) get(text string) (jobSpec, bool) {
	if r == nil {
		return jobSpec{}, false
	}
	sp, ok := r.seen[text]
	if !ok {
		if sp, ok = r.last[text]; ok {
			r.seen[text] = sp
		}
	}
	return sp, ok
}

// size is how many specs the last read kept.
func (r *specRead) size() int {
	if r == nil {
		return 0
	}
	return len(r.last)
}

// put keeps text's decoded spec.
func (r *specRead) put(text string, sp jobSpec) {
	if r != nil {
		r.seen[text] = sp
	}
}

// Queue returns the stored queue information of the jobs still queued,
// ordered by position.
func (s *SQL) Queue(ctx context.Context) ([]gpufleet.QueueEntry, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT id, team, priority, queue_position, queue_team_position,
	queue_reason, queue_reason_code, queue_estimated_start, queue_estimated_start_p90, queue_eta_confidence, queue_explanation,
	queue_estimate FROM jobs WHERE state = 'queued' AND queue_position IS NOT NULL ORDER BY queue_position, id`)
	if err != nil {
		return nil, fmt.Errorf("read queue: %w", err)
	}
	defer rows.Close()
	out := []gpufleet.QueueEntry{}
	exs := explanations{}
	for rows.Next() {
		var (
			e    gpufleet.QueueEntry
			pos  int64
			tpos sql.NullInt64
			r, c sql.NullString
			ex   sql.NullString
			run  sql.NullString
			est  sql.NullInt64
			p90  sql.NullInt64
			conf sql.NullFloat64
		)
		if err := rows.Scan(&e.ID, &e.Team, &e.Priority, &pos, &tpos, &r, &c, &est, &p90, &conf, &ex, &run); err != nil {
			return nil, fmt.Errorf("read queue: %w", err)
		}
		e.Position, e.TeamPosition = int(pos), int(tpos.Int64)
		e.Reason, e.ReasonCode, e.EstimatedStart = r.String, c.String, ptrTime(est)
		e.EstimatedStartP90, e.ETAConfidence = ptrTime(p90), ptrFloat(conf)
		e.Explanation, e.Estimate = exs.of(ex), runEstimateOf(run)
		out = append(out, e)
	}
	return out, rows.Err()
}

// Attempt reads one attempt.
func (s *SQL) Attempt(ctx context.Context, id string) (AttemptRecord, error) {
	as, err := s.attempts(ctx, s.rd, `a.id = ?`, id)
	if err != nil {
		return AttemptRecord{}, err
	}
	if len(as) == 0 {
		return AttemptRecord{}, notFound("attempt", id)
	}
	return as[0], nil
}

// NodeAttempts returns the attempts that are not terminal and use node
// (all nodes when node is empty), in id order.
func (s *SQL) NodeAttempts(ctx context.Context, node string) ([]AttemptRecord, error) {
	where, args := `a.state IN ('starting', 'running')`, []any(nil)
	if node != "" {
		where += ` AND a.id IN (SELECT attempt_id FROM attempt_nodes WHERE node = ?)`
		args = append(args, node)
	}
	rows, err := s.rd.QueryContext(ctx, s.q(`SELECT `+attemptCols+` FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE `+where+` ORDER BY a.id`), args...)
	if err != nil {
		return nil, fmt.Errorf("read node attempts: %w", err)
	}
	defer rows.Close()
	out := []AttemptRecord{}
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, fmt.Errorf("read node attempts: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// RequestCancel cancels a job: a queued job turns cancelled at once; a
// scheduled or running job gets cancel_requested and its attempts that
// are not terminal get stop_requested, and it turns cancelled when the
// last of them ends (see UpdateAttempt). Cancelling a job that has ended,
// or again, changes nothing and returns the job as it is.
func (s *SQL) RequestCancel(ctx context.Context, id, actor string, at time.Time) (gpufleet.Job, error) {
	at = s.orNow(at)
	var out gpufleet.Job
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := s.lockJob(ctx, tx, id); err != nil {
			return err
		}
		j, err := s.jobTx(ctx, tx, id)
		if err != nil {
			return err
		}
		switch scheduler.Cancel(j.State, j.CancelRequested) {
		case scheduler.CancelNothing:
			out = j
			return nil
		case scheduler.CancelNow:
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE jobs SET state = 'cancelled', cancel_requested = TRUE, finished_at = ?,
	queue_position = NULL, updated_at = ? WHERE id = ?`), nanos(at), nanos(at), id); err != nil {
				return fmt.Errorf("cancel job %s: %w", id, err)
			}
			if err := s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: actor, Kind: "job.cancelled", Object: id, Team: j.Team, Detail: "cancelled while queued"}); err != nil {
				return err
			}
		default:
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE jobs SET cancel_requested = TRUE, updated_at = ? WHERE id = ?`), nanos(at), id); err != nil {
				return fmt.Errorf("cancel job %s: %w", id, err)
			}
			// The leader's next cycle stops its attempt (the scheduler
			// decides the stop and its grace).
			if err := s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: actor, Kind: "job.cancel_requested", Object: id, Team: j.Team}); err != nil {
				return err
			}
		}
		out, err = s.jobTx(ctx, tx, id)
		return err
	})
	return out, err
}

// requestStop marks an attempt stop_requested (once) with an event.
func (s *SQL) requestStop(ctx context.Context, tx *sql.Tx, attemptID, team, reason, code string, grace time.Duration, actor string, at time.Time) error {
	res, err := tx.ExecContext(ctx, s.q(`UPDATE attempts SET stop_requested = TRUE, stop_reason = ?, stop_reason_code = ?,
	stop_requested_at = ?, stop_grace_s = ?, updated_at = ?
	WHERE id = ? AND stop_requested = FALSE AND state IN ('starting', 'running')`), reason, code, nanos(at), grace.Seconds(), nanos(at), attemptID)
	if err != nil {
		return fmt.Errorf("stop attempt %s: %w", attemptID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	detail := reason
	if code != "" {
		detail = code + ": " + reason
	}
	return s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: actor, Kind: "attempt.stop_requested", Object: attemptID, Team: team, Detail: detail})
}

// explanations are stored queue explanations decoded, by their JSON; a
// nil one keeps none.
type explanations map[string]*gpufleet.Explanation

// of decodes a stored queue_explanation; nil when there is none (a row
// written before it was kept) or it does not decode, which leaves the
// reason and its code to say why the job waits. The result may be shared
// with other rows of the same JSON: callers only read it.
func (ex explanations) of(v sql.NullString) *gpufleet.Explanation {
	if !v.Valid || v.String == "" {
		return nil
	}
	if e, ok := ex[v.String]; ok {
		return e
	}
	var e gpufleet.Explanation
	if err := json.Unmarshal([]byte(v.String), &e); err != nil {
		return nil
	}
	if ex != nil {
		ex[v.String] = &e
	}
	return &e
}

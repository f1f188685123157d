package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
)

// maxImport bounds one ImportHistory call.
const maxImport = 100_000

// ImportHistory stores jobs that already ran, with their attempts as they
// ran (times, nodes, accounting): a fleet's history brought from
// elsewhere, or the synthetic weeks gpufleet dev --seed-history writes.
// Every job must have ended, every attempt too, and each needs its
// submission time; ids are assigned. All of them are stored or none, with
// one history.imported event.
func (s *SQL) ImportHistory(ctx context.Context, jobs []gpufleet.Job, actor string) error {
	if len(jobs) > maxImport {
		return invalid("import: %d jobs, at most %d at once", len(jobs), maxImport)
	}
	for i, j := range jobs {
		switch {
		case j.Team == "" || !j.Priority.Valid():
			return invalid("import: job %d: a team and a priority class are required", i)
		case !j.State.Terminal() || j.FinishedAt == nil || j.SubmittedAt.IsZero():
			return invalid("import: job %d: only jobs that ended, with submission and finish times", i)
		case j.FinishedAt.Before(j.SubmittedAt):
			return invalid("import: job %d: finished before it was submitted", i)
		}
		for k, a := range j.Attempts {
			if !a.State.Terminal() || a.StartedAt == nil || a.FinishedAt == nil || a.Node == "" || len(a.Nodes) == 0 ||
				a.FinishedAt.Before(*a.StartedAt) || !(a.GPUSeconds >= 0 && a.GPUSeconds < 1e15) || !(a.Fraction > 0 && a.Fraction <= 1) {
				return invalid("import: job %d: attempt %d: an ended attempt with its nodes, start and finish, GPU-seconds and share", i, k)
			}
		}
	}
	now := s.now()
	return s.write(ctx, func(tx *sql.Tx) error {
		var usage usageSplit
		models := map[string]string{} // node -> its GPU model, "" unknown
		for _, j := range jobs {
			id := s.jobIDs.next(j.SubmittedAt)
			spec, err := json.Marshal(specOf(j))
			if err != nil {
				return invalid("import: %v", err)
			}
			var started *int64
			if j.StartedAt != nil {
				v := nanos(*j.StartedAt)
				started = &v
			}
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO jobs (id, team, name, state, cancel_requested, priority, request_id, spec,
	retries_max, retries_used, interruptions, submitted_at, started_at, finished_at, end_reason, end_reason_code, updated_at)
	VALUES (?, ?, ?, ?, FALSE, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
				id, j.Team, j.Name, string(j.State), string(j.Priority), string(spec), j.Retries.Max, j.Retries.Used, j.Interruptions,
				nanos(j.SubmittedAt), started, nanos(*j.FinishedAt), j.Reason, j.ReasonCode, nanos(now)); err != nil {
				return fmt.Errorf("import job: %w", err)
			}
			if err := s.insertLabels(ctx, tx, id, j.Labels); err != nil {
				return err
			}
			for k, a := range j.Attempts {
				aid := s.attemptIDs.next(*a.StartedAt)
				nodes, err := json.Marshal(a.Nodes)
				if err != nil {
					return invalid("import: %v", err)
				}
				if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO attempts (id, job_id, seq, state, node, nodes, fraction, started_at, finished_at, exit_code,
	reason, reason_code, gpu_seconds, effective_gpu_seconds, energy_joules, stop_requested, stop_reason, stop_reason_code, updated_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, FALSE, '', '', ?)`),
					aid, id, k+1, string(a.State), a.Node, string(nodes), a.Fraction, nanos(*a.StartedAt), nanos(*a.FinishedAt), a.ExitCode,
					a.Reason, a.ReasonCode, a.GPUSeconds, a.EffectiveGPUSeconds, a.EnergyJoules, nanos(now)); err != nil {
					return fmt.Errorf("import attempt: %w", err)
				}
				// Each node's own accounting, an equal share of the
				// attempt's (a multi-node attempt's is their sum).
				var succeeded *int64
				if a.State == gpufleet.AttemptSucceeded {
					v := nanos(*a.FinishedAt)
					succeeded = &v
				}
				share := 1 / float64(len(a.Nodes))
				model, err := s.importModel(ctx, tx, j, a, models)
				if err != nil {
					return err
				}
				if model != "" {
					usage.add(j.Team, model, *a.StartedAt, *a.FinishedAt, a)
				}
				for _, n := range a.Nodes {
					if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO attempt_nodes (node, attempt_id, succeeded_at, gpu_seconds, effective_gpu_seconds, energy_joules)
	VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`), n.Name, aid, succeeded, a.GPUSeconds*share, a.EffectiveGPUSeconds*share, a.EnergyJoules*share); err != nil {
						return fmt.Errorf("import attempt: %w", err)
					}
				}
			}
		}
		// The usage the imported runs held, as live accounting counts it,
		// so that usage and chargeback agree with what capacity reads.
		if err := s.addUsageTx(ctx, tx, usage.rows()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO events (at, actor, kind, object, team, detail) VALUES (?, ?, 'history.imported', '', '', ?)`),
			nanos(now), actor, fmt.Sprintf("%d jobs that already ran", len(jobs)))
		return err
	})
}

// importModel is the GPU model an imported attempt's usage counts under:
// its first node's, where the node is known, else the one model its job
// was limited to; "" when neither says (its usage is then not counted).
func (s *SQL) importModel(ctx context.Context, tx *sql.Tx, j gpufleet.Job, a gpufleet.Attempt, models map[string]string) (string, error) {
	m, ok := models[a.Node]
	if !ok {
		row, err := s.nodeTx(ctx, tx, a.Node, "")
		switch {
		case errors.Is(err, gpufleet.ErrNotFound):
		case err != nil:
			return "", err
		case len(row.n.GPUs) > 0:
			m = row.n.GPUs[0].Model
		}
		models[a.Node] = m
	}
	if m == "" && len(j.Resources.GPUModels) == 1 {
		m = j.Resources.GPUModels[0]
	}
	return m, nil
}

// usageSplit sums imported attempts' accounting into usage rows by team,
// GPU model and UTC day, each attempt's spread over the days it ran in
// proportion to its time in each.
type usageSplit map[[2]string]map[time.Time]*UsageRow

func (u *usageSplit) add(team, model string, start, end time.Time, a gpufleet.Attempt) {
	if *u == nil {
		*u = usageSplit{}
	}
	k := [2]string{team, model}
	if (*u)[k] == nil {
		(*u)[k] = map[time.Time]*UsageRow{}
	}
	total := end.Sub(start)
	for d := day(start); ; d = d.AddDate(0, 0, 1) {
		share, next := 1.0, d.AddDate(0, 0, 1)
		if total > 0 {
			from, to := start, end
			if d.After(from) {
				from = d
			}
			if next.Before(to) {
				to = next
			}
			share = float64(to.Sub(from)) / float64(total)
		}
		r := (*u)[k][d]
		if r == nil {
			r = &UsageRow{Team: team, Model: model, Day: d}
			(*u)[k][d] = r
		}
		r.GPUSeconds += a.GPUSeconds * share
		r.EffectiveGPUSeconds += a.EffectiveGPUSeconds * share
		r.EnergyJoules += a.EnergyJoules * share
		if !next.Before(end) {
			return
		}
	}
}

// rows are the sums in a fixed order.
func (u usageSplit) rows() []UsageRow {
	var out []UsageRow
	for _, k := range slices.SortedFunc(maps.Keys(u), func(a, b [2]string) int { return cmp.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) }) {
		for _, d := range slices.SortedFunc(maps.Keys(u[k]), time.Time.Compare) {
			out = append(out, *u[k][d])
		}
	}
	return out
}

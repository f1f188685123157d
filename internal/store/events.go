package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// AppendEvent appends an audit event the store did not write itself
// (a login, a fault injection). A zero At is the store's clock; the id is
// assigned.
func (s *SQL) AppendEvent(ctx context.Context, e gpufleet.Event) error {
	if e.Kind == "" {
		return invalid("event kind is empty")
	}
	return s.write(ctx, func(tx *sql.Tx) error { return s.insertEvent(ctx, tx, e) })
}

// Events returns audit events in id order (the order they were written),
// after f.AfterID, up to f.Limit (default 100, at most 1000), for one team
// and/or one object when set. Page by passing the last id as AfterID.
func (s *SQL) Events(ctx context.Context, f EventFilter) ([]gpufleet.Event, error) {
	where, args := []string{"id > ?"}, []any{f.AfterID}
	if f.Team != "" {
		where, args = append(where, "team = ?"), append(args, f.Team)
	}
	if f.Object != "" {
		where, args = append(where, "object = ?"), append(args, f.Object)
	}
	query := `SELECT id, at, actor, kind, object, team, detail FROM events WHERE ` + strings.Join(where, " AND ") +
		fmt.Sprintf(` ORDER BY id LIMIT %d`, pageLimit(f.Limit))
	out, err := list(ctx, s.rd, s.q(query), args, func(r scanner) (gpufleet.Event, error) {
		var (
			e  gpufleet.Event
			at int64
		)
		err := r.Scan(&e.ID, &at, &e.Actor, &e.Kind, &e.Object, &e.Team, &e.Detail)
		e.At = fromNanos(at)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}

// day is the UTC midnight starting t's day.
func day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// AddUsage adds rows to the usage totals, keyed by (team, GPU model, UTC
// day of Day), in one transaction.
func (s *SQL) AddUsage(ctx context.Context, rows []UsageRow) error {
	for _, r := range rows {
		if r.Team == "" || r.Model == "" || r.Day.IsZero() {
			return invalid("usage row needs a team, a gpu model and a day")
		}
	}
	if len(rows) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error { return s.addUsageTx(ctx, tx, rows) })
}

// addUsageTx adds rows to the usage totals within tx.
func (s *SQL) addUsageTx(ctx context.Context, tx *sql.Tx, rows []UsageRow) error {
	// A day counted before facility energy was kept stays NULL: the
	// sum would cover only part of its energy.
	stmt, err := s.prepare(ctx, tx, s.q(`INSERT INTO usage_daily (team, model, day, gpu_seconds, effective_gpu_seconds, energy_joules, facility_joules)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (team, model, day) DO UPDATE SET
gpu_seconds = usage_daily.gpu_seconds + excluded.gpu_seconds,
effective_gpu_seconds = usage_daily.effective_gpu_seconds + excluded.effective_gpu_seconds,
energy_joules = usage_daily.energy_joules + excluded.energy_joules,
facility_joules = usage_daily.facility_joules + excluded.facility_joules`))
	if err != nil {
		return fmt.Errorf("add usage: %w", err)
	}
	defer stmt.Close()
	for _, r := range rows {
		facility := r.EnergyJoules // at a PUE of 1 when the caller gives none
		if r.FacilityJoules != nil {
			facility = *r.FacilityJoules
		}
		if _, err := stmt.ExecContext(ctx, r.Team, r.Model, nanos(day(r.Day)), r.GPUSeconds, r.EffectiveGPUSeconds, r.EnergyJoules, facility); err != nil {
			return fmt.Errorf("add usage: %w", err)
		}
	}
	return nil
}

// Usage returns the usage rows of team (every team when empty) for the
// days that overlap [from, to), ordered by day, team and model. A zero
// from or to leaves that end open.
func (s *SQL) Usage(ctx context.Context, team string, from, to time.Time) ([]UsageRow, error) {
	var (
		where []string
		args  []any
	)
	if team != "" {
		where, args = append(where, "team = ?"), append(args, team)
	}
	if !from.IsZero() {
		where, args = append(where, "day >= ?"), append(args, nanos(day(from)))
	}
	if !to.IsZero() {
		where, args = append(where, "day < ?"), append(args, nanos(to))
	}
	query := `SELECT team, model, day, gpu_seconds, effective_gpu_seconds, energy_joules, facility_joules FROM usage_daily`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY day, team, model`
	out, err := list(ctx, s.rd, s.q(query), args, func(r scanner) (UsageRow, error) {
		var (
			u UsageRow
			d int64
			f sql.NullFloat64
		)
		err := r.Scan(&u.Team, &u.Model, &d, &u.GPUSeconds, &u.EffectiveGPUSeconds, &u.EnergyJoules, &f)
		u.Day, u.FacilityJoules = fromNanos(d), ptrFloat(f)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("read usage: %w", err)
	}
	return out, nil
}

// LastEventID returns the id of the newest audit event, 0 when there is
// none. Every state change writes an event, so an unchanged id means an
// unchanged state: the leader uses it to skip idle cycles.
func (s *SQL) LastEventID(ctx context.Context) (int64, error) {
	var id sql.NullInt64
	if err := s.rd.QueryRowContext(ctx, `SELECT max(id) FROM events`).Scan(&id); err != nil {
		return 0, fmt.Errorf("read last event id: %w", err)
	}
	return id.Int64, nil
}

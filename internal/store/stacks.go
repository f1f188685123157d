package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// CreateStack records a new stack, a candidate, with an event. A stack's
// versions never change once recorded (its validations are evidence about
// exactly them): creating a name again with the same versions returns the
// stack as it is; with other versions it is invalid.
func (s *SQL) CreateStack(ctx context.Context, st gpufleet.Stack, actor string) (gpufleet.Stack, error) {
	if err := st.Validate(); err != nil {
		return st, err
	}
	now := s.now()
	var out gpufleet.Stack
	err := s.write(ctx, func(tx *sql.Tx) error {
		old, err := scanStack(tx.QueryRowContext(ctx, s.q(stackSelect+` WHERE name = ?`), st.Name))
		switch {
		case err == nil && maps.Equal(old.Versions, st.Versions):
			out = old
			return nil
		case err == nil:
			return fmt.Errorf("%w: stack %s exists with other versions: a stack's versions never change (its validations are about them); create it under a new name", gpufleet.ErrInvalid, st.Name)
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		out = gpufleet.Stack{Name: st.Name, Versions: st.Versions, Notes: st.Notes, State: gpufleet.StackCandidate,
			Validated: []gpufleet.StackValidation{}, CreatedBy: actor, CreatedAt: now}
		vj, _ := json.Marshal(out.Versions)
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO stacks (name, versions, notes, state, validated, created_by, created_at)
	VALUES (?, ?, ?, ?, '[]', ?, ?)`), out.Name, string(vj), out.Notes, out.State, actor, nanos(now)); err != nil {
			return fmt.Errorf("create stack %s: %w", st.Name, err)
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: actor, Kind: "stack.created", Object: st.Name, Detail: gpufleet.VersionsText(st.Versions)})
	})
	return out, err
}

// Stacks lists the stacks by name, retired ones too.
func (s *SQL) Stacks(ctx context.Context) ([]gpufleet.Stack, error) {
	return list(ctx, s.rd, stackSelect+` ORDER BY name`, nil, func(r scanner) (gpufleet.Stack, error) { return scanStack(r) })
}

// ValidateStack records evidence that a stack works on a GPU model (the
// caller gathered and checked it), replacing earlier evidence for that
// model, and makes a candidate validated; a retired stack cannot be. An
// unknown stack wraps gpufleet.ErrNotFound.
func (s *SQL) ValidateStack(ctx context.Context, name string, v gpufleet.StackValidation) (gpufleet.Stack, error) {
	var out gpufleet.Stack
	err := s.write(ctx, func(tx *sql.Tx) error {
		st, err := scanStack(tx.QueryRowContext(ctx, s.q(stackSelect+` WHERE name = ?`), name))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("stack", name)
		}
		if err != nil {
			return err
		}
		if st.State == gpufleet.StackRetired {
			return fmt.Errorf("%w: stack %s is retired", gpufleet.ErrInvalid, name)
		}
		kept := st.Validated[:0]
		for _, x := range st.Validated {
			if x.GPUModel != v.GPUModel {
				kept = append(kept, x)
			}
		}
		st.Validated, st.State = append(kept, v), gpufleet.StackValidated
		vj, _ := json.Marshal(st.Validated)
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE stacks SET state = ?, validated = ? WHERE name = ?`), st.State, string(vj), name); err != nil {
			return fmt.Errorf("validate stack %s: %w", name, err)
		}
		out = st
		return s.insertEvent(ctx, tx, gpufleet.Event{At: v.At, Actor: v.ApprovedBy, Kind: "stack.validated", Object: name,
			Detail: fmt.Sprintf("%s on %s: %s", v.GPUModel, strings.Join(v.Nodes, ", "), v.Evidence)})
	})
	return out, err
}

// RetireStack retires a stack: it stays on record and matches no job. An
// unknown stack wraps gpufleet.ErrNotFound.
func (s *SQL) RetireStack(ctx context.Context, name, actor string) error {
	now := s.now()
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE stacks SET state = ?, retired_at = ? WHERE name = ? AND state <> ?`),
			gpufleet.StackRetired, nanos(now), name, gpufleet.StackRetired)
		if err != nil {
			return fmt.Errorf("retire stack %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var one int
			if err := tx.QueryRowContext(ctx, s.q(`SELECT 1 FROM stacks WHERE name = ?`), name).Scan(&one); errors.Is(err, sql.ErrNoRows) {
				return notFound("stack", name)
			}
			return nil // already retired
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: actor, Kind: "stack.retired", Object: name})
	})
}

const stackSelect = `SELECT name, versions, notes, state, validated, created_by, created_at, retired_at FROM stacks`

func scanStack(r scanner) (gpufleet.Stack, error) {
	var (
		st                  gpufleet.Stack
		versions, validated string
		created             int64
		retired             sql.NullInt64
	)
	if err := r.Scan(&st.Name, &versions, &st.Notes, &st.State, &validated, &st.CreatedBy, &created, &retired); err != nil {
		return st, err
	}
	st.CreatedAt, st.RetiredAt = fromNanos(created), ptrTime(retired)
	if err := json.Unmarshal([]byte(versions), &st.Versions); err != nil {
		return st, fmt.Errorf("stack %s: versions: %w", st.Name, err)
	}
	if err := json.Unmarshal([]byte(validated), &st.Validated); err != nil {
		return st, fmt.Errorf("stack %s: validated: %w", st.Name, err)
	}
	if st.Validated == nil {
		st.Validated = []gpufleet.StackValidation{}
	}
	return st, nil
}

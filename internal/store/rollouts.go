package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/rollout"
)

// PutRollout writes a rollout's whole state (created or stepped), with an
// event saying what it is now. The leader writes after each step, so a
// new leader resumes from the last one written.
func (s *SQL) PutRollout(ctx context.Context, r rollout.Rollout, actor, detail string) error {
	if r.ID == "" {
		return invalid("rollout: no id")
	}
	body, err := json.Marshal(r)
	if err != nil {
		return invalid("rollout %s: %v", r.ID, err)
	}
	now := s.now()
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO rollouts (id, state, body, created_at, updated_at) VALUES (?, ?, ?, ?, ?)
	ON CONFLICT (id) DO UPDATE SET state = excluded.state, body = excluded.body, updated_at = excluded.updated_at`),
			r.ID, string(r.State), string(body), nanos(r.CreatedAt), nanos(now)); err != nil {
			return fmt.Errorf("put rollout %s: %w", r.ID, err)
		}
		if detail == "" {
			return nil
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: actor, Kind: "rollout." + string(r.State), Object: r.ID, Detail: detail})
	})
}

// Rollouts lists every rollout, newest first.
func (s *SQL) Rollouts(ctx context.Context) ([]rollout.Rollout, error) {
	return list(ctx, s.rd, `SELECT id, body FROM rollouts ORDER BY created_at DESC, id`, nil, scanRollout)
}

// Rollout reads one rollout; an unknown id wraps gpufleet.ErrNotFound.
func (s *SQL) Rollout(ctx context.Context, id string) (rollout.Rollout, error) {
	r, err := scanRollout(s.rd.QueryRowContext(ctx, s.q(`SELECT id, body FROM rollouts WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return r, notFound("rollout", id)
	}
	return r, err
}

// scanRollout reads one rollout row. A body that no longer parses (a
// hand-edited row, a downgrade) reads as a halted rollout saying so,
// rather than an error: one bad row must not stop the leader stepping
// the others, and a halted rollout touches no node.
func scanRollout(r scanner) (rollout.Rollout, error) {
	var (
		out      rollout.Rollout
		id, body string
	)
	if err := r.Scan(&id, &body); err != nil {
		return out, err
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || out.ID != id {
		reason := fmt.Sprintf("stored state unreadable: id %q in body", out.ID)
		if err != nil {
			reason = "stored state unreadable: " + err.Error()
		}
		return rollout.Rollout{ID: id, State: rollout.Halted, Reason: reason}, nil
	}
	return out, nil
}

// SetNodeVersions records the versions a node reports after an update,
// with a node.versions event saying what changed (nothing when nothing
// did). An unknown node wraps gpufleet.ErrNotFound.
func (s *SQL) SetNodeVersions(ctx context.Context, name string, versions map[string]string, at time.Time) error {
	at = s.orNow(at)
	return s.write(ctx, func(tx *sql.Tx) error {
		old, err := s.nodeTx(ctx, tx, name, s.d.forUpdate)
		if err != nil {
			return err
		}
		changed := versionChanges(old.n.Versions, versions)
		if changed == "" {
			return nil
		}
		vj, _ := json.Marshal(versions)
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE nodes SET versions = ?, updated_at = ? WHERE name = ?`), string(vj), nanos(at), name); err != nil {
			return fmt.Errorf("set node %s versions: %w", name, err)
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: "agent:" + name, Kind: "node.versions", Object: name, Detail: changed})
	})
}

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/bench"
)

// BenchFilter selects benchmark results: by node, by GPU model, only each
// GPU's newest figure of each name; empty fields select everything. Limit
// (0: none) keeps the newest.
type BenchFilter struct {
	Node   string
	Model  string
	Latest bool
	Limit  int
}

// AddBenchResults stores figures, in one transaction.
func (s *SQL) AddBenchResults(ctx context.Context, rs []bench.Result) error {
	if len(rs) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		stmt, err := s.prepare(ctx, tx, s.q(`INSERT INTO bench_results (node, gpu_uuid, model, name, peer, at, body) VALUES (?, ?, ?, ?, ?, ?, ?)`))
		if err != nil {
			return err
		}
		for _, r := range rs {
			body, err := json.Marshal(r)
			if err != nil {
				return invalid("bench result: %v", err)
			}
			peer := -1
			if r.Peer != nil {
				peer = *r.Peer
			}
			if _, err := stmt.ExecContext(ctx, r.Node, r.UUID, r.Model, r.Name, peer, nanos(r.At), string(body)); err != nil {
				return fmt.Errorf("add bench result: %w", err)
			}
		}
		return nil
	})
}

// BenchResults lists the results f selects, oldest first.
func (s *SQL) BenchResults(ctx context.Context, f BenchFilter) ([]bench.Result, error) {
	var (
		where []string
		args  []any
	)
	if f.Node != "" {
		where, args = append(where, "node = ?"), append(args, f.Node)
	}
	if f.Model != "" {
		where, args = append(where, "model = ?"), append(args, f.Model)
	}
	if f.Latest {
		where = append(where, "id IN (SELECT MAX(id) FROM bench_results GROUP BY gpu_uuid, name, peer)")
	}
	q := `SELECT body FROM bench_results`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY id DESC`
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	out, err := list(ctx, s.rd, s.q(q), args, func(r scanner) (bench.Result, error) {
		var body string
		var res bench.Result
		if err := r.Scan(&body); err != nil {
			return res, err
		}
		if err := json.Unmarshal([]byte(body), &res); err != nil {
			return res, fmt.Errorf("bench result: %w", err)
		}
		return res, nil
	})
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, err
}

// PruneBenchResults deletes figures measured before before, except each
// GPU's newest of each figure (the fleet rule judges those), and says how
// many it deleted.
func (s *SQL) PruneBenchResults(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM bench_results WHERE at < ?
	AND id NOT IN (SELECT MAX(id) FROM bench_results GROUP BY gpu_uuid, name, peer)`), nanos(before))
		if err != nil {
			return fmt.Errorf("prune bench results: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// PutWorkloadBench creates or replaces a workload bench.
func (s *SQL) PutWorkloadBench(ctx context.Context, w bench.Workload) error {
	if w.ID == "" || w.Team == "" {
		return invalid("workload bench: no id or team")
	}
	body, err := json.Marshal(w)
	if err != nil {
		return invalid("workload bench %s: %v", w.ID, err)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO bench_workloads (id, team, created_at, body) VALUES (?, ?, ?, ?)
	ON CONFLICT (id) DO UPDATE SET body = excluded.body`), w.ID, w.Team, nanos(w.CreatedAt), string(body))
		if err != nil {
			return fmt.Errorf("put workload bench %s: %w", w.ID, err)
		}
		return nil
	})
}

// WorkloadBench reads one workload bench; an unknown id wraps
// gpufleet.ErrNotFound.
func (s *SQL) WorkloadBench(ctx context.Context, id string) (bench.Workload, error) {
	w, err := scanWorkload(s.rd.QueryRowContext(ctx, s.q(`SELECT body FROM bench_workloads WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return w, notFound("workload bench", id)
	}
	return w, err
}

// WorkloadBenches lists a team's workload benches (every team's when team
// is empty), newest first.
func (s *SQL) WorkloadBenches(ctx context.Context, team string) ([]bench.Workload, error) {
	q, args := `SELECT body FROM bench_workloads ORDER BY created_at DESC, id`, []any(nil)
	if team != "" {
		q, args = `SELECT body FROM bench_workloads WHERE team = ? ORDER BY created_at DESC, id`, []any{team}
	}
	return list(ctx, s.rd, s.q(q), args, scanWorkload)
}

func scanWorkload(r scanner) (bench.Workload, error) {
	var body string
	var w bench.Workload
	if err := r.Scan(&body); err != nil {
		return w, err
	}
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		return w, fmt.Errorf("workload bench: %w", err)
	}
	return w, nil
}

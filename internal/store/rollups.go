package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// rollupCols lists gpu_rollups' columns in the order rollupArgs and
// scanRollup use.
const rollupCols = `gpu, minute, node, model, team, samples, util_sum, util_n, sm_sum, sm_n, dram_sum, dram_n,
	tensor_sum, tensor_n, eff_sum, eff_n, power_sum, power_n, energy_j, mem_used_max, temp_max, allocated_s, idle_allocated_s`

// AddRollups adds rows to the per-GPU minute rollups in one transaction.
func (s *SQL) AddRollups(ctx context.Context, rows []RollupRow) error {
	for _, r := range rows {
		if r.GPU == "" || r.Node == "" || r.Minute.IsZero() {
			return invalid("rollup row needs a gpu, a node and a minute")
		}
	}
	if len(rows) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		stmt, err := s.prepare(ctx, tx, s.q(`INSERT INTO gpu_rollups (`+rollupCols+`)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (gpu, minute) DO UPDATE SET
	node = excluded.node, model = excluded.model,
	team = CASE WHEN excluded.team <> '' THEN excluded.team ELSE gpu_rollups.team END,
	samples = gpu_rollups.samples + excluded.samples,
	util_sum = gpu_rollups.util_sum + excluded.util_sum, util_n = gpu_rollups.util_n + excluded.util_n,
	sm_sum = gpu_rollups.sm_sum + excluded.sm_sum, sm_n = gpu_rollups.sm_n + excluded.sm_n,
	dram_sum = gpu_rollups.dram_sum + excluded.dram_sum, dram_n = gpu_rollups.dram_n + excluded.dram_n,
	tensor_sum = gpu_rollups.tensor_sum + excluded.tensor_sum, tensor_n = gpu_rollups.tensor_n + excluded.tensor_n,
	eff_sum = gpu_rollups.eff_sum + excluded.eff_sum, eff_n = gpu_rollups.eff_n + excluded.eff_n,
	power_sum = gpu_rollups.power_sum + excluded.power_sum, power_n = gpu_rollups.power_n + excluded.power_n,
	energy_j = gpu_rollups.energy_j + excluded.energy_j,
	allocated_s = gpu_rollups.allocated_s + excluded.allocated_s,
	idle_allocated_s = gpu_rollups.idle_allocated_s + excluded.idle_allocated_s,
	mem_used_max = CASE WHEN gpu_rollups.mem_used_max IS NULL OR excluded.mem_used_max > gpu_rollups.mem_used_max
		THEN excluded.mem_used_max ELSE gpu_rollups.mem_used_max END,
	temp_max = CASE WHEN gpu_rollups.temp_max IS NULL OR excluded.temp_max > gpu_rollups.temp_max
		THEN excluded.temp_max ELSE gpu_rollups.temp_max END`))
		if err != nil {
			return fmt.Errorf("add rollups: %w", err)
		}
		defer stmt.Close()
		for _, r := range rows {
			var mem, temp any
			if r.MemoryUsedBytesMax != nil {
				mem = *r.MemoryUsedBytesMax
			}
			if r.TemperatureCMax != nil {
				temp = *r.TemperatureCMax
			}
			_, err := stmt.ExecContext(ctx, r.GPU, nanos(r.Minute.UTC().Truncate(time.Minute)), r.Node, r.Model, r.Team, r.Samples,
				r.Utilization.Sum, r.Utilization.N, r.SMActivity.Sum, r.SMActivity.N, r.DRAMActivity.Sum, r.DRAMActivity.N,
				r.TensorActivity.Sum, r.TensorActivity.N, r.Effective.Sum, r.Effective.N, r.PowerWatts.Sum, r.PowerWatts.N,
				r.EnergyJoules, mem, temp, r.AllocatedS, r.IdleAllocatedS)
			if err != nil {
				return fmt.Errorf("add rollups: %w", err)
			}
		}
		return nil
	})
}

// Rollups returns the rollups f selects, ordered by minute then GPU.
func (s *SQL) Rollups(ctx context.Context, f RollupFilter) ([]RollupRow, error) {
	var (
		where []string
		args  []any
	)
	if f.Node != "" {
		where, args = append(where, "node = ?"), append(args, f.Node)
	}
	if len(f.GPUs) > 0 {
		where = append(where, "gpu IN (?"+strings.Repeat(", ?", len(f.GPUs)-1)+")")
		for _, g := range f.GPUs {
			args = append(args, g)
		}
	}
	if !f.From.IsZero() {
		where, args = append(where, "minute >= ?"), append(args, nanos(f.From.UTC().Truncate(time.Minute)))
	}
	if !f.To.IsZero() {
		where, args = append(where, "minute < ?"), append(args, nanos(f.To))
	}
	query := `SELECT ` + rollupCols + ` FROM gpu_rollups`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY minute, gpu`
	out, err := list(ctx, s.rd, s.q(query), args, func(r scanner) (RollupRow, error) {
		var (
			x      RollupRow
			minute int64
			mem    sql.NullInt64
			temp   sql.NullFloat64
		)
		err := r.Scan(&x.GPU, &minute, &x.Node, &x.Model, &x.Team, &x.Samples,
			&x.Utilization.Sum, &x.Utilization.N, &x.SMActivity.Sum, &x.SMActivity.N, &x.DRAMActivity.Sum, &x.DRAMActivity.N,
			&x.TensorActivity.Sum, &x.TensorActivity.N, &x.Effective.Sum, &x.Effective.N, &x.PowerWatts.Sum, &x.PowerWatts.N,
			&x.EnergyJoules, &mem, &temp, &x.AllocatedS, &x.IdleAllocatedS)
		x.Minute = fromNanos(minute)
		if mem.Valid {
			x.MemoryUsedBytesMax = &mem.Int64
		}
		if temp.Valid {
			x.TemperatureCMax = &temp.Float64
		}
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read rollups: %w", err)
	}
	return out, nil
}

// IdleAllocated sums the seconds team's GPUs (every team's when empty)
// idled while held, per team and model, over the minutes in [from, to).
func (s *SQL) IdleAllocated(ctx context.Context, team string, from, to time.Time) ([]IdleAllocated, error) {
	where := []string{"team <> ''", "idle_allocated_s > 0"}
	var args []any
	if team != "" {
		where, args = append(where, "team = ?"), append(args, team)
	}
	if !from.IsZero() {
		where, args = append(where, "minute >= ?"), append(args, nanos(from.UTC().Truncate(time.Minute)))
	}
	if !to.IsZero() {
		where, args = append(where, "minute < ?"), append(args, nanos(to))
	}
	query := `SELECT team, model, sum(idle_allocated_s) FROM gpu_rollups WHERE ` + strings.Join(where, " AND ") +
		` GROUP BY team, model ORDER BY team, model`
	out, err := list(ctx, s.rd, s.q(query), args, func(r scanner) (IdleAllocated, error) {
		var m IdleAllocated
		return m, r.Scan(&m.Team, &m.Model, &m.Seconds)
	})
	if err != nil {
		return nil, fmt.Errorf("read idle allocated time: %w", err)
	}
	return out, nil
}

// PruneRollups deletes the rollups of minutes before before.
func (s *SQL) PruneRollups(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM gpu_rollups WHERE minute < ?`), nanos(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune rollups: %w", err)
	}
	return n, nil
}

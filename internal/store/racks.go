package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/gpufleet/gpufleet"
)

// PutRack creates or replaces a rack (its budget, reserve, cooling, PUE
// and listed nodes), with an event.
func (s *SQL) PutRack(ctx context.Context, r gpufleet.Rack, actor string) error {
	if err := r.Validate(); err != nil {
		return err
	}
	nodes := r.Nodes
	if nodes == nil {
		nodes = []string{}
	}
	nj, _ := json.Marshal(nodes)
	now := s.now()
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO racks (name, power_budget_watts, production_reserve_watts, cooling_watts, pue, nodes, updated_at)
	VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET power_budget_watts = excluded.power_budget_watts,
	production_reserve_watts = excluded.production_reserve_watts, cooling_watts = excluded.cooling_watts, pue = excluded.pue,
	nodes = excluded.nodes, updated_at = excluded.updated_at`),
			r.Name, float64(r.PowerBudgetWatts), float64(r.ProductionReserveWatts), nullFloat(r.CoolingWatts), nullFloat(r.PUE), string(nj), nanos(now)); err != nil {
			return fmt.Errorf("put rack %s: %w", r.Name, err)
		}
		detail := fmt.Sprintf("budget %s, production reserve %s, %d nodes listed", r.PowerBudgetWatts, r.ProductionReserveWatts, len(nodes))
		return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: actor, Kind: "rack.put", Object: r.Name, Detail: detail})
	})
}

// Racks lists the racks by name.
func (s *SQL) Racks(ctx context.Context) ([]gpufleet.Rack, error) {
	return list(ctx, s.rd, `SELECT name, power_budget_watts, production_reserve_watts, cooling_watts, pue, nodes FROM racks ORDER BY name`, nil,
		func(r scanner) (gpufleet.Rack, error) {
			var (
				k               gpufleet.Rack
				budget, reserve float64
				cooling, pue    sql.NullFloat64
				nodes           string
			)
			if err := r.Scan(&k.Name, &budget, &reserve, &cooling, &pue, &nodes); err != nil {
				return k, err
			}
			k.PowerBudgetWatts, k.ProductionReserveWatts = gpufleet.Watts(budget), gpufleet.Watts(reserve)
			k.PUE = ptrFloat(pue)
			if c := ptrFloat(cooling); c != nil {
				k.CoolingWatts = new(gpufleet.Watts(*c))
			}
			if err := json.Unmarshal([]byte(nodes), &k.Nodes); err != nil {
				return k, fmt.Errorf("rack %s: nodes: %w", k.Name, err)
			}
			return k, nil
		})
}

// DeleteRack removes a rack, with an event; a rack that does not exist
// wraps gpufleet.ErrNotFound.
func (s *SQL) DeleteRack(ctx context.Context, name, actor string) error {
	now := s.now()
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM racks WHERE name = ?`), name)
		if err != nil {
			return fmt.Errorf("delete rack %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("rack", name)
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: actor, Kind: "rack.deleted", Object: name})
	})
}

func nullFloat[F ~float64](v *F) any {
	if v == nil {
		return nil
	}
	return float64(*v)
}

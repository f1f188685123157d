package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// PutRack creates or replaces a rack (its budget, reserve, cooling, PUE
// and listed nodes), with an event. A node is listed by one rack at most:
// the nodes r lists leave any other rack's list in the same transaction,
// and the event names them.
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
		lists, err := s.rackListsTx(ctx, tx)
		if err != nil {
			return err
		}
		var moved []string
		for _, l := range lists {
			if l.name == r.Name {
				continue
			}
			kept := slices.DeleteFunc(slices.Clone(l.nodes), func(n string) bool { return slices.Contains(nodes, n) })
			if len(kept) == len(l.nodes) {
				continue
			}
			for _, n := range l.nodes {
				if !slices.Contains(kept, n) {
					moved = append(moved, fmt.Sprintf("%s from %s", n, l.name))
				}
			}
			if err := s.setRackNodesTx(ctx, tx, l.name, kept, now); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO racks (name, power_budget_watts, production_reserve_watts, cooling_watts, pue, nodes, updated_at)
	VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET power_budget_watts = excluded.power_budget_watts,
	production_reserve_watts = excluded.production_reserve_watts, cooling_watts = excluded.cooling_watts, pue = excluded.pue,
	nodes = excluded.nodes, updated_at = excluded.updated_at`),
			r.Name, float64(r.PowerBudgetWatts), float64(r.ProductionReserveWatts), nullFloat(r.CoolingWatts), nullFloat(r.PUE), string(nj), nanos(now)); err != nil {
			return fmt.Errorf("put rack %s: %w", r.Name, err)
		}
		detail := fmt.Sprintf("budget %s, production reserve %s, %d nodes listed", r.PowerBudgetWatts, r.ProductionReserveWatts, len(nodes))
		if len(moved) > 0 {
			detail += "; moved " + strings.Join(moved, ", ")
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: actor, Kind: "rack.put", Object: r.Name, Detail: detail})
	})
}

// AssignRack lists node in rack, with a rack.assigned event, unless a
// rack lists it already. It returns the rack that lists the node after
// the call: rack, another rack, or "" when rack does not exist and no rack
// lists the node.
func (s *SQL) AssignRack(ctx context.Context, node, rack, actor string) (string, error) {
	var in string
	now := s.now()
	err := s.write(ctx, func(tx *sql.Tx) error {
		in = ""
		lists, err := s.rackListsTx(ctx, tx)
		if err != nil {
			return err
		}
		var target *rackList
		for i, l := range lists {
			if slices.Contains(l.nodes, node) {
				in = l.name
				return nil
			}
			if l.name == rack {
				target = &lists[i]
			}
		}
		if target == nil {
			return nil
		}
		if err := s.setRackNodesTx(ctx, tx, rack, append(target.nodes, node), now); err != nil {
			return err
		}
		in = rack
		return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: actor, Kind: "rack.assigned", Object: rack,
			Detail: fmt.Sprintf("node %s listed: its rack label names the rack and no rack listed it", node)})
	})
	return in, err
}

// rackList is one rack's listed nodes.
type rackList struct {
	name  string
	nodes []string
}

// rackListsTx reads every rack's listed nodes, by name, for a write.
func (s *SQL) rackListsTx(ctx context.Context, tx *sql.Tx) ([]rackList, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name, nodes FROM racks ORDER BY name`+s.d.forUpdate)
	if err != nil {
		return nil, fmt.Errorf("read racks: %w", err)
	}
	defer rows.Close()
	var out []rackList
	for rows.Next() {
		var (
			l     rackList
			nodes string
		)
		if err := rows.Scan(&l.name, &nodes); err != nil {
			return nil, fmt.Errorf("read racks: %w", err)
		}
		if err := json.Unmarshal([]byte(nodes), &l.nodes); err != nil {
			return nil, fmt.Errorf("rack %s: nodes: %w", l.name, err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// setRackNodesTx replaces a rack's listed nodes.
func (s *SQL) setRackNodesTx(ctx context.Context, tx *sql.Tx, rack string, nodes []string, now time.Time) error {
	if nodes == nil {
		nodes = []string{}
	}
	nj, _ := json.Marshal(nodes)
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE racks SET nodes = ?, updated_at = ? WHERE name = ?`), string(nj), nanos(now), rack); err != nil {
		return fmt.Errorf("rack %s: list nodes: %w", rack, err)
	}
	return nil
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

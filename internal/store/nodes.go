package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// nodeRow is a node as stored: the state and health reasons are kept
// apart, so that a health finding does not erase why an admin cordoned
// the node, and the reverse.
type nodeRow struct {
	n            gpufleet.Node
	stateReason  string
	healthReason string
}

// node assembles the API's view. Reason is the health reason while the
// node is not healthy, else the state reason.
func (r nodeRow) node() gpufleet.Node {
	n := r.n
	n.StateReason, n.HealthReason = r.stateReason, r.healthReason
	n.Reason = r.stateReason
	if n.Health != gpufleet.Healthy && r.healthReason != "" {
		n.Reason = r.healthReason
	}
	return n
}

const nodeCols = `name, state, health, state_reason, state_cause, health_reason, metrics_url, labels, versions, gpus`

func scanNode(r scanner) (nodeRow, error) {
	var (
		row                    nodeRow
		state, health, cause   string
		labels, versions, gpus string
	)
	if err := r.Scan(&row.n.Name, &state, &health, &row.stateReason, &cause, &row.healthReason, &row.n.MetricsURL, &labels, &versions, &gpus); err != nil {
		return row, err
	}
	row.n.State, row.n.Health, row.n.StateCause = gpufleet.NodeState(state), gpufleet.Health(health), gpufleet.StateCause(cause)
	for _, x := range []struct {
		src string
		dst any
	}{{labels, &row.n.Labels}, {versions, &row.n.Versions}, {gpus, &row.n.GPUs}} {
		if err := json.Unmarshal([]byte(x.src), x.dst); err != nil {
			return row, fmt.Errorf("node %s: %w", row.n.Name, err)
		}
	}
	normalizeNode(&row.n)
	return row, nil
}

// normalizeNode makes empty collections non-nil, so that JSON shows {} and
// [] rather than null.
func normalizeNode(n *gpufleet.Node) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Versions == nil {
		n.Versions = map[string]string{}
	}
	if n.GPUs == nil {
		n.GPUs = []gpufleet.NodeGPU{}
	}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.MIGInstances == nil {
			g.MIGInstances = []gpufleet.MIGInstance{}
		}
		if g.StateCause == "" && g.State != gpufleet.NodeReady && strings.HasPrefix(g.StateReason, "health:") {
			// Written before causes were kept (migration 0018 says the
			// same of nodes): the health rules' drains began so.
			g.StateCause = gpufleet.CauseHealth
		}
	}
}

// nodeTx reads a node through q; lock is appended to the query (the
// dialect's forUpdate inside write transactions).
func (s *SQL) nodeTx(ctx context.Context, q queryer, name, lock string) (nodeRow, error) {
	row, err := scanNode(q.QueryRowContext(ctx, s.q(`SELECT `+nodeCols+` FROM nodes WHERE name = ?`+lock), name))
	if errors.Is(err, sql.ErrNoRows) {
		return row, notFound("node", name)
	}
	if err != nil {
		return row, fmt.Errorf("read node %s: %w", name, err)
	}
	return row, nil
}

// PutNode records a node's inventory at registration: metrics URL,
// labels, versions and GPUs. A new node starts ready and healthy (its GPUs
// too, unless the inventory says otherwise). A known node keeps its state,
// health and reasons, and each GPU whose UUID it already had keeps its
// state, health and reason. HeartbeatAgeS is not stored.
func (s *SQL) PutNode(ctx context.Context, n gpufleet.Node) error {
	if n.Name == "" {
		return invalid("node name is empty")
	}
	now := s.now()
	return s.write(ctx, func(tx *sql.Tx) error {
		old, err := s.nodeTx(ctx, tx, n.Name, s.d.forUpdate)
		known := err == nil
		if err != nil && !errors.Is(err, gpufleet.ErrNotFound) {
			return err
		}
		if !known {
			var count int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM nodes`).Scan(&count); err != nil {
				return fmt.Errorf("count nodes: %w", err)
			}
			if count >= gpufleet.MaxFleetNodes {
				return fmt.Errorf("%w: node %s: the fleet has %d nodes, the most one server supports", gpufleet.ErrUnsatisfiable, gpufleet.Quote(n.Name), count)
			}
		}
		oldGPUs := map[string]gpufleet.NodeGPU{}
		if known {
			for _, g := range old.n.GPUs {
				if g.UUID != "" {
					oldGPUs[g.UUID] = g
				}
			}
		}
		gpus := make([]gpufleet.NodeGPU, len(n.GPUs))
		for i, g := range n.GPUs {
			if o, ok := oldGPUs[g.UUID]; ok && g.UUID != "" {
				g.State, g.StateReason, g.StateCause, g.Health, g.Reason = o.State, o.StateReason, o.StateCause, o.Health, o.Reason
			}
			if g.State == "" {
				g.State = gpufleet.NodeReady
			}
			if g.Health == "" {
				g.Health = gpufleet.Healthy
			}
			gpus[i] = g
		}
		n.GPUs = gpus
		normalizeNode(&n)
		labels, _ := json.Marshal(n.Labels)
		versions, _ := json.Marshal(n.Versions)
		gj, err := json.Marshal(n.GPUs)
		if err != nil {
			return invalid("node %s: gpus: %v", n.Name, err)
		}
		detail := fmt.Sprintf("new, %d gpus", len(n.GPUs))
		if known {
			detail = fmt.Sprintf("inventory updated, %d gpus", len(n.GPUs))
			_, err = tx.ExecContext(ctx, s.q(`UPDATE nodes SET metrics_url = ?, labels = ?, versions = ?, gpus = ?, updated_at = ? WHERE name = ?`),
				n.MetricsURL, string(labels), string(versions), string(gj), nanos(now), n.Name)
		} else {
			var res sql.Result
			res, err = tx.ExecContext(ctx, s.q(`INSERT INTO nodes (`+nodeCols+`, registered_at, updated_at)
	VALUES (?, 'ready', 'healthy', '', '', '', ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`),
				n.Name, n.MetricsURL, string(labels), string(versions), string(gj), nanos(now), nanos(now))
			if err == nil {
				if k, _ := res.RowsAffected(); k == 0 {
					return errRetryTx // registered by another replica meanwhile: merge with it
				}
			}
		}
		if err != nil {
			return fmt.Errorf("put node %s: %w", n.Name, err)
		}
		if err := s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: "agent:" + n.Name, Kind: "node.registered", Object: n.Name, Detail: detail}); err != nil {
			return err
		}
		if changed := versionChanges(old.n.Versions, n.Versions); known && changed != "" {
			// A stack's bake time counts from here (docs/STACKS.md).
			return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: "agent:" + n.Name, Kind: "node.versions", Object: n.Name, Detail: changed})
		}
		return nil
	})
}

// versionChanges says which of a node's versions changed, in words
// ("driver 535.104.05 -> 550.54.15"), the agent's own version aside; ""
// when none did.
func versionChanges(old, now map[string]string) string {
	keys := map[string]bool{}
	for k := range maps.Keys(old) {
		keys[k] = true
	}
	for k := range maps.Keys(now) {
		keys[k] = true
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if k == "agent" || old[k] == now[k] {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s -> %s", k, orNone(old[k]), orNone(now[k])))
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Node reads one node.
func (s *SQL) Node(ctx context.Context, name string) (gpufleet.Node, error) {
	row, err := s.nodeTx(ctx, s.rd, name, "")
	return row.node(), err
}

// Nodes lists the nodes by name.
func (s *SQL) Nodes(ctx context.Context) ([]gpufleet.Node, error) {
	return list(ctx, s.rd, `SELECT `+nodeCols+` FROM nodes ORDER BY name`, nil, func(r scanner) (gpufleet.Node, error) {
		row, err := scanNode(r)
		return row.node(), err
	})
}

var validNodeStates = map[gpufleet.NodeState]bool{
	gpufleet.NodeReady: true, gpufleet.NodeCordoned: true, gpufleet.NodeDraining: true,
	gpufleet.NodeDown: true, gpufleet.NodeRepairing: true, gpufleet.NodeValidating: true,
}

// SetNodeState changes a node's state and state reason, with a
// "node.<state>" event (node.cordoned, node.ready...). Setting the state
// and reason it already has changes nothing.
func (s *SQL) SetNodeState(ctx context.Context, name string, state gpufleet.NodeState, cause gpufleet.StateCause, reason, actor string, at time.Time) error {
	if !validNodeStates[state] {
		return invalid("node %s: state %q", name, state)
	}
	at = s.orNow(at)
	return s.write(ctx, func(tx *sql.Tx) error {
		old, err := s.nodeTx(ctx, tx, name, s.d.forUpdate)
		if err != nil {
			return err
		}
		if old.n.State == state && old.stateReason == reason && old.n.StateCause == cause {
			return nil
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE nodes SET state = ?, state_reason = ?, state_cause = ?, updated_at = ? WHERE name = ?`),
			string(state), reason, string(cause), nanos(at), name); err != nil {
			return fmt.Errorf("set node %s state: %w", name, err)
		}
		detail := fmt.Sprintf("%s -> %s", old.n.State, state)
		if reason != "" {
			detail += ": " + reason
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: actor, Kind: "node." + string(state), Object: name, Detail: detail})
	})
}

// NodeHealthState reads the health rules' memory of a node ("" when none).
func (s *SQL) NodeHealthState(ctx context.Context, name string) (string, error) {
	var st string
	err := s.rd.QueryRowContext(ctx, s.q(`SELECT health_state FROM nodes WHERE name = ?`), name).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notFound("node", name)
	}
	if err != nil {
		return "", fmt.Errorf("read node %s health state: %w", name, err)
	}
	return st, nil
}

// SetNodeHealthState stores the health rules' memory of a node.
func (s *SQL) SetNodeHealthState(ctx context.Context, name, state string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`UPDATE nodes SET health_state = ? WHERE name = ?`), state, name)
		if err != nil {
			return fmt.Errorf("set node %s health state: %w", name, err)
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			return notFound("node", name)
		}
		return nil
	})
}

var validHealth = map[gpufleet.Health]bool{gpufleet.Healthy: true, gpufleet.Degraded: true, gpufleet.Unhealthy: true}

// SetNodeHealth records the health rules' finding for a node and, for each
// GPU in gpus (matched by UUID, else by index), its health, reason and,
// when set, state. A change of the node's health writes a "node.<health>"
// event (node.degraded, node.unhealthy, node.healthy); a change of a GPU's
// health a "gpu.<health>" event on its UUID. The actor is "health".
func (s *SQL) SetNodeHealth(ctx context.Context, name string, health gpufleet.Health, reason string, gpus []gpufleet.NodeGPU, at time.Time) error {
	if !validHealth[health] {
		return invalid("node %s: health %q", name, health)
	}
	for _, g := range gpus {
		if g.Health != "" && !validHealth[g.Health] {
			return invalid("node %s gpu %d: health %q", name, g.Index, g.Health)
		}
	}
	at = s.orNow(at)
	return s.write(ctx, func(tx *sql.Tx) error {
		old, err := s.nodeTx(ctx, tx, name, s.d.forUpdate)
		if err != nil {
			return err
		}
		cur := old.n.GPUs
		var events []gpufleet.Event
		for _, g := range gpus {
			i := -1
			for k := range cur {
				if (g.UUID != "" && cur[k].UUID == g.UUID) || (g.UUID == "" && cur[k].Index == g.Index) {
					i = k
					break
				}
			}
			if i < 0 {
				return fmt.Errorf("%w: node %s has no gpu %q (index %d)", gpufleet.ErrNotFound, name, g.UUID, g.Index)
			}
			h := g.Health
			if h == "" {
				h = cur[i].Health
			}
			if h != cur[i].Health {
				detail := fmt.Sprintf("node %s gpu %d", name, cur[i].Index)
				if g.Reason != "" {
					detail += ": " + g.Reason
				}
				events = append(events, gpufleet.Event{At: at, Actor: "health", Kind: "gpu." + string(h), Object: cur[i].UUID, Detail: detail})
			}
			cur[i].Health, cur[i].Reason = h, g.Reason
			if g.State != "" && (g.State != cur[i].State || g.StateReason != cur[i].StateReason || g.StateCause != cur[i].StateCause) {
				if !validNodeStates[g.State] {
					return invalid("node %s gpu %d: state %q", name, cur[i].Index, g.State)
				}
				if g.State != cur[i].State {
					detail := fmt.Sprintf("node %s gpu %d: %s -> %s", name, cur[i].Index, cur[i].State, g.State)
					if g.StateReason != "" {
						detail += ": " + g.StateReason
					}
					events = append(events, gpufleet.Event{At: at, Actor: "health", Kind: "gpu." + string(g.State), Object: cur[i].UUID, Detail: detail})
				}
				cur[i].State, cur[i].StateReason, cur[i].StateCause = g.State, g.StateReason, g.StateCause
			}
		}
		gj, err := json.Marshal(cur)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE nodes SET health = ?, health_reason = ?, gpus = ?, updated_at = ? WHERE name = ?`),
			string(health), reason, string(gj), nanos(at), name); err != nil {
			return fmt.Errorf("set node %s health: %w", name, err)
		}
		if health != old.n.Health {
			detail := fmt.Sprintf("%s -> %s", old.n.Health, health)
			if reason != "" {
				detail += ": " + reason
			}
			events = append([]gpufleet.Event{{At: at, Actor: "health", Kind: "node." + string(health), Object: name, Detail: detail}}, events...)
		}
		for _, e := range events {
			if err := s.insertEvent(ctx, tx, e); err != nil {
				return err
			}
		}
		return nil
	})
}

package server

import (
	"context"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/rollout"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/stack"
)

// StartRollout starts moving the selected nodes to a stack (admin): it
// plans the waves and records the rollout; the leader steps it.
func (s *Server) StartRollout(ctx context.Context, p api.Principal, req api.RolloutRequest) (rollout.Rollout, error) {
	if err := requireAdmin(p); err != nil {
		return rollout.Rollout{}, err
	}
	if err := req.Validate(); err != nil {
		return rollout.Rollout{}, err
	}
	st, err := s.stackNamed(ctx, req.Stack)
	if err != nil {
		return rollout.Rollout{}, fmt.Errorf("stack: %w", err)
	}
	if st.State == gpufleet.StackRetired {
		return rollout.Rollout{}, fmt.Errorf("%w: stack %s is retired", gpufleet.ErrInvalid, st.Name)
	}
	model := ""
	if req.GPUModel != "" {
		g, err := s.cat.Lookup(req.GPUModel)
		if err != nil {
			return rollout.Rollout{}, fmt.Errorf("gpu_model: %w", err)
		}
		model = g.ID
	}
	all, err := s.Rollouts(ctx, p)
	if err != nil {
		return rollout.Rollout{}, err
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return rollout.Rollout{}, err
	}
	busy := map[string]string{}
	for _, r := range all {
		if r.State == rollout.Running || r.State == rollout.Paused || r.State == rollout.RollingBack {
			for _, n := range r.Nodes {
				busy[n.Name] = r.ID
			}
		}
	}
	var selected []string
	var targets []rollout.Target
	for _, n := range nodes {
		if model != "" && !slices.ContainsFunc(n.GPUs, func(g gpufleet.NodeGPU) bool { return g.Model == model }) {
			continue
		}
		if !labelsMatch(n.Labels, req.Selector) {
			continue
		}
		if id, ok := busy[n.Name]; ok {
			return rollout.Rollout{}, fmt.Errorf("%w: node %s is in rollout %s: finish or abort it first", gpufleet.ErrInvalid, n.Name, id)
		}
		selected = append(selected, n.Name)
		targets = append(targets, s.target(n))
	}
	now := s.now()
	r := rollout.Rollout{ID: "ro-" + randomString(8), Stack: st.Name, Target: st.Versions, GPUModel: model, Selector: req.Selector,
		Canary: req.Canary, Waves: req.Waves, MaxUnavailable: req.MaxUnavailable, MaxUnavailablePercent: req.MaxUnavailablePercent,
		UpdateCommand: req.UpdateCommand, CreatedBy: actor(p), CreatedAt: now, UpdatedAt: now}
	if req.DrainPolicy != "" {
		if r.DrainPolicy, err = rollout.ParseDrainPolicy(req.DrainPolicy); err != nil {
			return rollout.Rollout{}, err
		}
	}
	if req.OnHalt != "" {
		if r.OnHalt, err = rollout.ParseOnHalt(req.OnHalt); err != nil {
			return rollout.Rollout{}, err
		}
	}
	if blockers := rollout.Preflight(st.Versions, targets); len(blockers) > 0 {
		if !req.Force {
			return rollout.Rollout{}, rollout.PreflightError(st.Name, blockers, len(targets))
		}
		for _, b := range blockers {
			r.Warnings = append(r.Warnings, "started with --force although the rules say: "+b.String())
		}
	}
	if req.BakeS != nil {
		r.BakeS = *req.BakeS
	}
	if req.UpdateTimeoutS != nil {
		r.UpdateTimeoutS = *req.UpdateTimeoutS
	}
	if err := rollout.Plan(&r, selected); err != nil {
		return r, err
	}
	detail := fmt.Sprintf("stack %s on %d nodes (canary %d, waves %v, max unavailable %d, bake %s, drain %s, on halt %s)", r.Stack, len(r.Nodes), r.Canary, r.Waves,
		r.MaxUnavailable, time.Duration(r.BakeS*float64(time.Second)), r.DrainPolicy, r.OnHalt)
	for _, w := range r.Warnings {
		detail += "; " + w
	}
	if err := s.st.PutRollout(ctx, r, actor(p), detail); err != nil {
		return r, err
	}
	s.nudge()
	return r, nil
}

// Rollouts lists the rollouts, newest first.
func (s *Server) Rollouts(ctx context.Context, p api.Principal) ([]rollout.Rollout, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	return s.st.Rollouts(ctx)
}

// Rollout returns one rollout.
func (s *Server) Rollout(ctx context.Context, p api.Principal, id string) (rollout.Rollout, error) {
	if err := requireUser(p); err != nil {
		return rollout.Rollout{}, err
	}
	return s.st.Rollout(ctx, id)
}

// RolloutAction pauses (no new node starts; those in flight finish their
// step), resumes, aborts (stops for good, saying what it leaves) or
// rolls back (every updated node to its previous versions) a rollout
// (admin).
func (s *Server) RolloutAction(ctx context.Context, p api.Principal, id, action string) (rollout.Rollout, error) {
	if err := requireAdmin(p); err != nil {
		return rollout.Rollout{}, err
	}
	r, err := s.st.Rollout(ctx, id)
	if err != nil {
		return r, err
	}
	now := s.now()
	switch action {
	case "pause":
		if r.State != rollout.Running {
			return r, fmt.Errorf("%w: rollout %s is %s, not running", gpufleet.ErrInvalid, id, r.State)
		}
		r.State = rollout.Paused
	case "resume":
		if r.State != rollout.Paused {
			return r, fmt.Errorf("%w: rollout %s is %s, not paused", gpufleet.ErrInvalid, id, r.State)
		}
		r.State = rollout.Running
	case "abort":
		if r, err = rollout.Abort(r, actor(p), now); err != nil {
			return r, err
		}
	case "rollback":
		if r, err = rollout.Rollback(r, now); err != nil {
			return r, err
		}
	default:
		return r, fmt.Errorf("%w: rollout action %s: expected pause, resume, abort or rollback", gpufleet.ErrInvalid, gpufleet.Quote(action))
	}
	r.UpdatedAt = now
	if err := s.st.PutRollout(ctx, r, actor(p), action+" by "+actor(p)); err != nil {
		return r, err
	}
	s.nudge()
	return r, nil
}

// stepRolloutsSafely runs stepRollouts and turns a panic into an error,
// so a rollout that trips a bug pauses rollouts, not the scheduler.
func (s *Server) stepRolloutsSafely(ctx context.Context, jobs []gpufleet.Job, m *nodeMoves, now time.Time) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("stepping rollouts panicked", "panic", v, "stack", string(debug.Stack()))
			err = fmt.Errorf("stepping rollouts panicked: %v", v)
		}
	}()
	return s.stepRollouts(ctx, jobs, m, now)
}

// stepRollouts advances the active rollouts by what the fleet shows now,
// applies their actions (drain, cordon, back to ready) to the store and
// to m, records each rollout that changed, and keeps the rollouts for the
// update orders heartbeats carry.
func (s *Server) stepRollouts(ctx context.Context, jobs []gpufleet.Job, m *nodeMoves, now time.Time) error {
	nodes := m.nodes
	all, err := s.st.Rollouts(ctx)
	if err != nil {
		return err
	}
	var active []rollout.Rollout
	for _, r := range all {
		if r.State == rollout.Running || r.State == rollout.RollingBack || r.State == rollout.Paused {
			active = append(active, r)
		}
	}
	if len(active) == 0 {
		s.setRollouts(nil)
		return nil
	}
	running, production, busy := map[string]int{}, map[string]bool{}, map[string]bool{}
	for _, j := range jobs {
		if a := activeAttempt(j); a != nil {
			for _, n := range a.Nodes {
				running[n.Name]++
				production[n.Name] = production[n.Name] || j.Priority == gpufleet.Production
				for _, g := range n.GPUs {
					busy[g] = true
				}
			}
		}
	}
	spare, err := s.spareShort(ctx, nodes, busy, now)
	if err != nil {
		return err
	}
	views := map[string]rollout.View{}
	for _, n := range nodes {
		v := s.view(n, now)
		age, known := s.heartbeatAge(n.Name, now)
		rv := rollout.View{State: v.State, Health: v.Health, Reason: v.Reason, Versions: n.Versions, Running: running[n.Name],
			Seen: known && age <= s.cfg.HeartbeatGrace, Production: production[n.Name], SpareShort: spare[n.Name]}
		for _, f := range stack.Check(gpufleet.NodeStack(n.Versions), s.capabilities(n)) {
			if f.Severity == stack.Incompatible {
				rv.Incompatible = f.Message
				break
			}
		}
		views[n.Name] = rv
	}
	for i, r := range active {
		next, acts := rollout.Step(r, views, now)
		for _, a := range acts {
			// Validating runs the return-to-service check the repair flow
			// runs (the node returns to ready when it passes).
			state := map[rollout.ActionKind]gpufleet.NodeState{rollout.Drain: gpufleet.NodeDraining, rollout.Cordon: gpufleet.NodeCordoned,
				rollout.Validate: gpufleet.NodeValidating}[a.Kind]
			l := scheduler.NodeLife{State: state, Cause: gpufleet.CauseRollout, Reason: a.Reason}
			if err := s.st.SetNodeState(ctx, a.Node, l.State, l.Cause, l.Reason, "rollout:"+r.ID, now); err != nil {
				return fmt.Errorf("rollout %s: %s %s: %w", r.ID, a.Kind, a.Node, err)
			}
			m.set(a.Node, l)
		}
		if !rolloutChanged(r, next) {
			continue
		}
		for j := range next.Nodes {
			if j < len(r.Nodes) && next.Nodes[j].Phase != r.Nodes[j].Phase {
				n := next.Nodes[j]
				detail := fmt.Sprintf("%s: %s -> %s", n.Name, r.Nodes[j].Phase, n.Phase)
				if n.Phase == rollout.Failed {
					detail += ": " + n.Reason
				}
				if err := s.st.AppendEvent(ctx, gpufleet.Event{At: now, Actor: "rollout:" + r.ID, Kind: "rollout.step", Object: r.ID, Detail: detail}); err != nil {
					return err
				}
			}
		}
		next.UpdatedAt = now
		detail := ""
		if next.State != r.State {
			detail = next.Reason
			if detail == "" {
				detail = string(r.State) + " -> " + string(next.State)
			}
		}
		if err := s.st.PutRollout(ctx, next, "rollout:"+r.ID, detail); err != nil {
			return err
		}
		active[i] = next
	}
	s.setRollouts(active)
	return nil
}

// target is a node as the rollouts' pre-flight check sees it.
func (s *Server) target(n gpufleet.Node) rollout.Target {
	t := rollout.Target{Name: n.Name, Versions: n.Versions, CCs: s.capabilities(n)}
	for _, g := range n.GPUs {
		if !slices.Contains(t.Models, g.Model) {
			t.Models = append(t.Models, g.Model)
		}
	}
	return t
}

// rolloutChanged reports whether a step changed a rollout's state.
func rolloutChanged(a, b rollout.Rollout) bool {
	if a.State != b.State || a.Wave != b.Wave || a.Reason != b.Reason || len(a.Nodes) != len(b.Nodes) {
		return true
	}
	for i := range a.Nodes {
		x, y := a.Nodes[i], b.Nodes[i]
		if x.Phase != y.Phase || !x.Since.Equal(y.Since) || x.Reason != y.Reason || x.Waiting != y.Waiting || x.Updates != y.Updates || !maps.Equal(x.Previous, y.Previous) {
			return true
		}
	}
	return false
}

// setRollouts keeps the active rollouts for update orders.
func (s *Server) setRollouts(rs []rollout.Rollout) {
	s.lead.mu.Lock()
	s.lead.rollouts = rs
	s.lead.mu.Unlock()
}

// updateOrders are the stack updates a node must run now.
func (s *Server) updateOrders(node string) []api.UpdateOrder {
	s.lead.mu.Lock()
	defer s.lead.mu.Unlock()
	var out []api.UpdateOrder
	for i := range s.lead.rollouts {
		if o, ok := s.lead.rollouts[i].Order(node); ok {
			out = append(out, api.UpdateOrder{Key: o.Key, Command: o.Command, Versions: o.Versions})
		}
	}
	return out
}

// updated records what a node's updates left it running.
func (s *Server) updated(ctx context.Context, node string, res []api.UpdateResult, now time.Time) error {
	for _, r := range res {
		if r.Versions == nil {
			continue
		}
		if err := s.st.SetNodeVersions(ctx, node, r.Versions, now); err != nil {
			return err
		}
		if !r.OK {
			s.log.Warn("stack update failed on the node", "node", node, "order", r.Key, "detail", r.Detail)
		}
		s.nudge()
	}
	return nil
}

// labelsMatch reports whether labels carry every selector pair.
func labelsMatch(labels, sel map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// spareShort says, per node, why taking it out of service now would leave
// fewer free GPUs than the production spare (Config.Spare) of a GPU class
// or model it holds; nodes absent are free to go.
func (s *Server) spareShort(ctx context.Context, nodes []gpufleet.Node, busy map[string]bool, now time.Time) (map[string]string, error) {
	out := map[string]string{}
	if len(s.cfg.Spare) == 0 {
		return out, nil
	}
	classes, err := s.st.Classes(ctx)
	if err != nil {
		return nil, err
	}
	members := map[string][]string{}
	for _, c := range classes {
		members[c.Name] = c.Models
	}
	free := func(n gpufleet.Node, models []string) int {
		v := s.view(n, now)
		if v.State != gpufleet.NodeReady {
			return 0
		}
		k := 0
		for _, g := range n.GPUs {
			if slices.Contains(models, g.Model) && !busy[g.UUID] && (g.State == "" || g.State == gpufleet.NodeReady) && g.Health != gpufleet.Unhealthy {
				k++
			}
		}
		return k
	}
	for _, key := range slices.Sorted(maps.Keys(s.cfg.Spare)) {
		want := s.cfg.Spare[key]
		models, ok := members[key]
		if !ok {
			models = []string{key}
		}
		total := 0
		for _, n := range nodes {
			total += free(n, models)
		}
		for _, n := range nodes {
			if mine := free(n, models); mine > 0 && total-mine < want && out[n.Name] == "" {
				out[n.Name] = fmt.Sprintf("taking it out would leave %d free %s GPUs, under the production spare of %d", total-mine, key, want)
			}
		}
	}
	return out, nil
}

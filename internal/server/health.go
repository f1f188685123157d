package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/health"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// healthActor names the health rules in the audit log; the states they
// set carry cause gpufleet.CauseHealth, which the quarantine circuit
// breaker counts (scheduler.Breaker).
const healthActor = "health"

// nodeHealth is what the server keeps in memory about a node's health
// between heartbeats: its inventory, the rules' memory and their last
// summary (what the store holds).
type nodeHealth struct {
	loaded    bool
	inventory []gpufleet.NodeGPU
	state     health.State
	summary   health.Summary
	// validation is the return-to-service check in flight, if any.
	validation *api.ValidationOrder
	validSeq   int
	// evidence is each GPU's last health evidence (agents send it only
	// when it changes); missing the GPUs last reported missing; lastEval
	// when the rules last ran.
	evidence map[string]api.GPUEvidence
	missing  []string
	lastEval time.Time
	// silent is set while the recorded finding is the node's silence, so
	// that its next heartbeat is judged at once.
	silent bool
	// bench are the node's benchmark figures under the gate (loaded
	// from the store the first time, then set when figures arrive);
	// benchDirty asks the rules to run at the next heartbeat.
	bench       []health.BenchShortfall
	benchLoaded bool
	benchDirty  bool
}

// healthEvery is the longest the rules go without running for a node
// whose evidence has not changed: time-based findings (sustained
// throttling, counter rates, held conditions expiring) need it.
const healthEvery = 10 * time.Second

// loadHealth reads a node's inventory and the rules' memory from the store
// the first time this replica hears from it. s.live.mu must NOT be held.
func (s *Server) loadHealth(ctx context.Context, node string) (*nodeHealth, error) {
	s.live.mu.Lock()
	h := s.live.node(node).health
	s.live.mu.Unlock()
	if h.loaded {
		return h, nil
	}
	n, err := s.st.Node(ctx, node)
	if err != nil {
		return nil, err
	}
	raw, err := s.st.NodeHealthState(ctx, node)
	if err != nil {
		return nil, err
	}
	var st health.State
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			s.log.Warn("discarding unreadable health state", "node", node, "err", err)
			st = health.State{}
		}
	}
	s.live.mu.Lock()
	h.inventory, h.state, h.loaded = n.GPUs, st, true
	h.summary = storedSummary(n)
	benchLoaded := h.benchLoaded
	s.live.mu.Unlock()
	if !benchLoaded {
		if _, err := s.refreshBench(ctx, node); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// storedSummary is the health summary a stored node shows.
func storedSummary(n gpufleet.Node) health.Summary {
	sum := health.Summary{Health: n.Health, Reason: n.HealthReason}
	for _, g := range n.GPUs {
		if g.Health != "" && g.Health != gpufleet.Healthy {
			sum.GPUs = append(sum.GPUs, health.GPUSummary{Index: g.Index, Health: g.Health, Reason: g.Reason})
		}
	}
	return sum
}

// evidence turns a heartbeat into the health rules' input; last holds each
// GPU's latest evidence (this heartbeat's, or an earlier one's when this
// one left it out because it had not changed).
func evidence(node string, inv []gpufleet.NodeGPU, r api.HeartbeatRequest, last map[string]api.GPUEvidence) health.NodeEvidence {
	ev := health.NodeEvidence{Node: node, InventoryGPUs: len(inv)}
	bySample := map[string]api.GPUSample{}
	for _, g := range r.Samples {
		bySample[g.UUID] = g
	}
	for _, g := range inv {
		ge := health.GPUEvidence{Index: g.Index, UUID: g.UUID, Model: g.Model, Present: !slices.Contains(r.MissingGPUs, g.UUID)}
		if smp, ok := bySample[g.UUID]; ok {
			ge.XIDs, ge.Utilization = smp.XIDs, smp.Utilization
			if e, ok := last[g.UUID]; ok {
				ge.Counters, ge.ClockEventReasons = e.Counters, e.ClockEventsAll
			}
		}
		ev.GPUs = append(ev.GPUs, ge)
	}
	return ev
}

// judge runs the health rules over a heartbeat and, when their summary
// changed, records it and applies the actions that take capacity out of
// service (behind the circuit breaker).
func (s *Server) judge(ctx context.Context, node string, r api.HeartbeatRequest, now time.Time) error {
	h, err := s.loadHealth(ctx, node)
	if err != nil {
		return err
	}
	// Unchanged evidence, no XID and the same missing GPUs: the finding
	// cannot change but with time, so the rules run every healthEvery.
	s.live.mu.Lock()
	if h.evidence == nil {
		h.evidence = map[string]api.GPUEvidence{}
	}
	changed := !slices.Equal(h.missing, r.MissingGPUs) || h.benchDirty
	h.benchDirty = false
	for _, smp := range r.Samples {
		if smp.Evidence != nil {
			h.evidence[smp.UUID] = *smp.Evidence
			changed = true
		}
		changed = changed || len(smp.XIDs) > 0
	}
	h.missing = slices.Clone(r.MissingGPUs)
	due := changed || h.silent || now.Sub(h.lastEval) >= healthEvery
	if due {
		h.lastEval, h.silent = now, false
	}
	var last map[string]api.GPUEvidence
	if due {
		last = maps.Clone(h.evidence)
	}
	prev, inv, shortfalls := h.state, h.inventory, slices.Clone(h.bench)
	s.live.mu.Unlock()
	if !due || len(inv) == 0 {
		return nil
	}
	ev := evidence(node, inv, r, last)
	ev.Bench = shortfalls
	next, conds := health.Evaluate(prev, ev, now, s.cfg.Health)
	return s.record(ctx, node, h, next, conds, now)
}

// wantsEvidence reports whether this replica lacks a reporting GPU's
// evidence, so that the agent should send all of it.
func (s *Server) wantsEvidence(node string, r api.HeartbeatRequest) bool {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	h := s.live.node(node).health
	for _, smp := range r.Samples {
		if _, ok := h.evidence[smp.UUID]; !ok && smp.Evidence == nil {
			return true
		}
	}
	return false
}

// record stores a new health finding when it differs from the last, and
// acts on it.
func (s *Server) record(ctx context.Context, node string, h *nodeHealth, next health.State, conds []health.Condition, now time.Time) error {
	sum := health.Summarize(conds)
	s.live.mu.Lock()
	h.state = next
	same := sameSummary(h.summary, sum)
	inv := h.inventory
	s.live.mu.Unlock()
	if same {
		return nil
	}
	gpus := make([]gpufleet.NodeGPU, 0, len(inv))
	for _, g := range inv {
		u := gpufleet.NodeGPU{Index: g.Index, UUID: g.UUID, Health: gpufleet.Healthy}
		if i := slices.IndexFunc(sum.GPUs, func(x health.GPUSummary) bool { return x.Index == g.Index }); i >= 0 {
			u.Health, u.Reason = sum.GPUs[i].Health, sum.GPUs[i].Reason
		}
		gpus = append(gpus, u)
	}
	node_health := sum.Health
	if node_health == "" {
		node_health = gpufleet.Healthy
	}
	if err := s.st.SetNodeHealth(ctx, node, node_health, sum.Reason, gpus, now); err != nil {
		return err
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return err
	}
	if err := s.st.SetNodeHealthState(ctx, node, string(raw)); err != nil {
		return err
	}
	s.live.mu.Lock()
	h.summary = sum
	s.live.mu.Unlock()
	for _, c := range conds {
		s.log.Warn("health condition", "node", node, "gpu", c.GPU, "rule", c.Rule, "severity", c.Severity, "action", c.Action, "reason", c.Reason)
	}
	if err := s.quarantine(ctx, node, sum, conds, now); err != nil {
		return err
	}
	s.nudge()
	return nil
}

// sameSummary reports whether two summaries say the same.
func sameSummary(a, b health.Summary) bool {
	norm := func(h gpufleet.Health) gpufleet.Health {
		if h == "" {
			return gpufleet.Healthy
		}
		return h
	}
	return norm(a.Health) == norm(b.Health) && a.Reason == b.Reason &&
		slices.EqualFunc(a.GPUs, b.GPUs, func(x, y health.GPUSummary) bool {
			return x.Index == y.Index && norm(x.Health) == norm(y.Health) && x.Reason == y.Reason
		})
}

// quarantine applies the actions that take capacity out of service: a
// GPU-scope action drains the GPU, a node-scope one the node. The circuit
// breaker refuses when automatic quarantine would then hold more than the
// configured fraction of the fleet; the refusal is an event, and the
// conditions stay reported for a person to decide.
func (s *Server) quarantine(ctx context.Context, node string, sum health.Summary, conds []health.Condition, now time.Time) error {
	if !sum.Action.TakesOutOfService() {
		return nil
	}
	n, err := s.st.Node(ctx, node)
	if err != nil {
		return err
	}
	if _, ok := scheduler.Quarantine(scheduler.NodeLife{State: n.State}, ""); !ok {
		return nil // already out of service, or being repaired
	}
	// explain is the explanation of gpu's condition that carries the
	// action (gpu -1: the node's worst action, from whichever GPU).
	explain := func(gpu int) string {
		for _, c := range conds {
			if (gpu < 0 && c.Action == sum.Action) || (gpu >= 0 && c.GPU == gpu && c.Action.TakesOutOfService()) {
				return c.Explanation
			}
		}
		return ""
	}
	var drainGPUs []gpufleet.NodeGPU
	adding := 0
	nodeScope := sum.Action.Scope() == health.ScopeNode
	if nodeScope {
		for _, g := range n.GPUs {
			if g.State == "" || g.State == gpufleet.NodeReady {
				adding++
			}
		}
	} else {
		for _, gs := range sum.GPUs {
			if !gs.Action.TakesOutOfService() {
				continue
			}
			for _, g := range n.GPUs {
				if g.Index != gs.Index || (g.State != "" && g.State != gpufleet.NodeReady) {
					continue
				}
				reason := gs.Reason
				if e := explain(g.Index); e != "" {
					reason = e
				}
				l, _ := scheduler.Quarantine(scheduler.NodeLife{State: g.State}, reason)
				drainGPUs = append(drainGPUs, gpufleet.NodeGPU{Index: g.Index, UUID: g.UUID, Health: gs.Health, Reason: gs.Reason,
					State: l.State, StateReason: l.Reason, StateCause: l.Cause})
			}
		}
		adding = len(drainGPUs)
	}
	if adding == 0 {
		return nil
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return err
	}
	q := scheduler.Breaker(nodes, adding, s.cfg.Health.QuarantineMaxFraction)
	if !q.Allowed {
		s.log.Error("circuit breaker: automatic quarantine refused", "node", node, "reason", q.Reason)
		return s.st.AppendEvent(ctx, gpufleet.Event{At: now, Actor: healthActor, Kind: "health.quarantine_refused", Object: node,
			Detail: fmt.Sprintf("%s (%s); the conditions stay reported: drain by hand if they are real", q.Reason, sum.Reason)})
	}
	if nodeScope {
		reason := sum.Reason
		if e := explain(-1); e != "" {
			reason = e
		}
		l, _ := scheduler.Quarantine(scheduler.NodeLife{State: n.State}, reason)
		return s.st.SetNodeState(ctx, node, l.State, l.Cause, l.Reason, healthActor, now)
	}
	return s.st.SetNodeHealth(ctx, node, n.Health, n.HealthReason, drainGPUs, now)
}

// judgeSilent reports nodes silent past the grace as unhealthy (once) and
// drains none: losing a node's attempts is the lost-node path's job.
func (s *Server) judgeSilent(ctx context.Context, nodes []gpufleet.Node, now time.Time) error {
	for _, n := range nodes {
		age, known := s.heartbeatAge(n.Name, now)
		if !known || age <= s.cfg.HeartbeatGrace {
			continue
		}
		h, err := s.loadHealth(ctx, n.Name)
		if err != nil {
			return err
		}
		s.live.mu.Lock()
		prev := h.state
		s.live.mu.Unlock()
		_, conds := health.Evaluate(prev, health.NodeEvidence{Node: n.Name, HeartbeatAge: age, HeartbeatGrace: s.cfg.HeartbeatGrace}, now, s.cfg.Health)
		// The node's GPUs were not heard: keep their findings, add the
		// heartbeat's.
		for _, c := range prev.Active {
			if c.GPU >= 0 {
				conds = append(conds, c.Condition)
			}
		}
		sum := health.Summarize(conds)
		s.live.mu.Lock()
		hadIt := strings.Contains(h.summary.Reason, "no heartbeat") || h.summary.Health == gpufleet.Unhealthy
		s.live.mu.Unlock()
		if hadIt && sum.Health == gpufleet.Unhealthy {
			continue // said once; the age in the reason would change every cycle
		}
		// The rules' memory stays as the last heartbeat left it: silence
		// says nothing about the GPUs.
		s.live.mu.Lock()
		h.silent = true
		s.live.mu.Unlock()
		if err := s.record(ctx, n.Name, h, prev, conds, now); err != nil {
			return err
		}
	}
	return nil
}

// advanceStates moves nodes and GPUs along the repair path, in the store
// and in m: a draining node or GPU that no longer holds an active attempt
// goes to repairing.
func (s *Server) advanceStates(ctx context.Context, jobs []gpufleet.Job, m *nodeMoves, now time.Time) error {
	busyNode := map[string]bool{}
	busyGPU := map[string]bool{} // GPU or MIG UUID
	for _, j := range jobs {
		if a := activeAttempt(j); a != nil {
			for _, n := range a.Nodes {
				busyNode[n.Name] = true
				for _, g := range n.GPUs {
					busyGPU[g] = true
				}
			}
		}
	}
	for _, n := range m.nodes {
		if l, ok := scheduler.Drained(scheduler.NodeLife{State: n.State, Cause: n.StateCause, Reason: n.StateReason}, busyNode[n.Name]); ok {
			if err := s.st.SetNodeState(ctx, n.Name, l.State, l.Cause, l.Reason, "system", now); err != nil {
				return err
			}
			m.set(n.Name, l)
			continue
		}
		var done []gpufleet.NodeGPU
		for _, g := range n.GPUs {
			busy := busyGPU[g.UUID] || slices.ContainsFunc(g.MIGInstances, func(m gpufleet.MIGInstance) bool { return busyGPU[m.UUID] })
			if l, ok := scheduler.Drained(scheduler.NodeLife{State: g.State, Cause: g.StateCause, Reason: g.StateReason}, busy); ok {
				done = append(done, gpufleet.NodeGPU{Index: g.Index, UUID: g.UUID, Health: g.Health, Reason: g.Reason,
					State: l.State, StateReason: l.Reason, StateCause: l.Cause})
			}
		}
		if len(done) > 0 {
			if err := s.st.SetNodeHealth(ctx, n.Name, n.Health, n.HealthReason, done, now); err != nil {
				return err
			}
			m.setGPUs(n.Name, done)
		}
	}
	return nil
}

// nodeMoves is the nodes as the leader's cycle has moved them so far. Its
// writes take effect when the cycle commits; what it schedules next must
// see them now.
type nodeMoves struct {
	nodes  []gpufleet.Node
	cloned bool
}

// node returns the node named name, ready to change, or nil.
func (m *nodeMoves) node(name string) *gpufleet.Node {
	if !m.cloned {
		m.nodes, m.cloned = slices.Clone(m.nodes), true
	}
	for i := range m.nodes {
		if m.nodes[i].Name == name {
			return &m.nodes[i]
		}
	}
	return nil
}

// set moves node name to l.
func (m *nodeMoves) set(name string, l scheduler.NodeLife) {
	if n := m.node(name); n != nil {
		n.State, n.StateCause, n.StateReason = l.State, l.Cause, l.Reason
	}
}

// setGPUs moves node name's GPUs in gpus to their states, as the store's
// SetNodeHealth does (by UUID; health "" keeps the GPU's).
func (m *nodeMoves) setGPUs(name string, gpus []gpufleet.NodeGPU) {
	n := m.node(name)
	if n == nil {
		return
	}
	n.GPUs = slices.Clone(n.GPUs)
	for _, g := range gpus {
		for i := range n.GPUs {
			if n.GPUs[i].UUID != g.UUID {
				continue
			}
			if g.Health != "" {
				n.GPUs[i].Health = g.Health
			}
			n.GPUs[i].Reason = g.Reason
			if g.State != "" {
				n.GPUs[i].State, n.GPUs[i].StateReason, n.GPUs[i].StateCause = g.State, g.StateReason, g.StateCause
			}
		}
	}
}

// validationOrder is the check the node's agent must run now: every GPU
// when the node itself is validating, else the validating GPUs.
func (s *Server) validationOrder(n gpufleet.Node) *api.ValidationOrder {
	var gpus []string
	if n.State != gpufleet.NodeValidating {
		for _, g := range n.GPUs {
			if g.State == gpufleet.NodeValidating {
				gpus = append(gpus, g.UUID)
			}
		}
		if len(gpus) == 0 {
			return nil
		}
	}
	epoch := s.epoch()
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	h := s.live.node(n.Name).health
	if h.validation != nil && slices.Equal(h.validation.GPUs, gpus) {
		return h.validation
	}
	h.validSeq++
	h.validation = &api.ValidationOrder{ID: fmt.Sprintf("v-%s-%d-%d", n.Name, epoch, h.validSeq), GPUs: gpus}
	return h.validation
}

// validated applies the agent's validation results: a pass returns the
// node or GPUs to ready and healthy, a failure sends them back to repair.
func (s *Server) validated(ctx context.Context, node string, results []api.ValidationResult, now time.Time) error {
	s.live.mu.Lock()
	h := s.live.node(node).health
	order := h.validation
	s.live.mu.Unlock()
	if order == nil {
		return nil
	}
	i := slices.IndexFunc(results, func(r api.ValidationResult) bool { return r.ID == order.ID })
	if i < 0 {
		return nil
	}
	res := results[i]
	if res.Bench != nil && len(res.Bench.Measurements) > 0 {
		// The benchmark gate: figures under their gate against the fleet
		// fail the validation, with the evidence.
		short, err := s.recordBench(ctx, node, bench.TriggerValidation, *res.Bench, now)
		if err != nil {
			return err
		}
		if len(short) > 0 && res.Passed {
			var ev []string
			for _, sf := range short {
				ev = append(ev, sf.Evidence)
			}
			res.Passed, res.Detail = false, "benchmark under the gate: "+strings.Join(ev, "; ")
		}
	}
	n, err := s.st.Node(ctx, node)
	if err != nil {
		return err
	}
	// The core decides each validating GPU's next state, and the node's;
	// a GPU of a validating node validates with it.
	next, _ := scheduler.Validated(scheduler.NodeLife{State: gpufleet.NodeValidating}, res.Passed, res.Detail)
	var gpus []gpufleet.NodeGPU
	for _, g := range n.GPUs {
		if g.State != gpufleet.NodeValidating && n.State != gpufleet.NodeValidating {
			continue
		}
		u := gpufleet.NodeGPU{Index: g.Index, UUID: g.UUID, Health: g.Health, Reason: g.Reason, State: next.State, StateReason: next.Reason, StateCause: next.Cause}
		if next.State == gpufleet.NodeReady {
			u.Health, u.Reason = gpufleet.Healthy, ""
		}
		gpus = append(gpus, u)
	}
	hl, err := s.loadHealth(ctx, node)
	if err != nil {
		return err
	}
	nodeHealth, nodeReason := n.Health, n.HealthReason
	s.live.mu.Lock()
	if res.Passed {
		// The repair is done: the rules forget what they held about it,
		// and the node's health is what remains (other GPUs' conditions).
		for _, g := range gpus {
			hl.state = hl.state.ClearGPU(g.Index)
		}
		if n.State == gpufleet.NodeValidating {
			hl.state = hl.state.ClearGPU(-1)
		}
		var conds []health.Condition
		for _, c := range hl.state.Active {
			conds = append(conds, c.Condition)
		}
		hl.summary = health.Summarize(conds)
		nodeHealth, nodeReason = hl.summary.Health, hl.summary.Reason
		if nodeHealth == "" {
			nodeHealth = gpufleet.Healthy
		}
		for i := range gpus {
			if j := slices.IndexFunc(hl.summary.GPUs, func(x health.GPUSummary) bool { return x.Index == gpus[i].Index }); j >= 0 {
				gpus[i].Health, gpus[i].Reason = hl.summary.GPUs[j].Health, hl.summary.GPUs[j].Reason
			}
		}
	}
	h.validation = nil
	state := hl.state
	s.live.mu.Unlock()
	if n.State == gpufleet.NodeValidating && !res.Passed {
		nodeHealth = gpufleet.Unhealthy
		nodeReason = next.Reason
	}
	if err := s.st.SetNodeHealth(ctx, node, nodeHealth, nodeReason, gpus, now); err != nil {
		return err
	}
	raw, err := json.Marshal(state)
	if err != nil {
		return err
	}
	if err := s.st.SetNodeHealthState(ctx, node, string(raw)); err != nil {
		return err
	}
	if l, ok := scheduler.Validated(scheduler.NodeLife{State: n.State, Cause: n.StateCause, Reason: n.StateReason}, res.Passed, res.Detail); ok {
		if err := s.st.SetNodeState(ctx, node, l.State, l.Cause, l.Reason, "agent:"+node, now); err != nil {
			return err
		}
	}
	kind := "node.validation_passed"
	if !res.Passed {
		kind = "node.validation_failed"
	}
	if err := s.st.AppendEvent(ctx, gpufleet.Event{At: now, Actor: "agent:" + node, Kind: kind, Object: node, Detail: res.Detail}); err != nil {
		return err
	}
	s.nudge()
	return nil
}

// markRepaired starts the return to service of a node in repair, or of its
// GPUs in repair: they go to validating, and the agent checks them.
func (s *Server) markRepaired(ctx context.Context, p api.Principal, name string) error {
	n, err := s.st.Node(ctx, name)
	if err != nil {
		return err
	}
	var gpus []gpufleet.NodeGPU
	for _, g := range n.GPUs {
		if l, err := scheduler.Repaired(scheduler.NodeLife{State: g.State, Cause: g.StateCause, Reason: g.StateReason}, actor(p)); err == nil {
			gpus = append(gpus, gpufleet.NodeGPU{Index: g.Index, UUID: g.UUID, Health: g.Health, Reason: g.Reason,
				State: l.State, StateReason: l.Reason, StateCause: l.Cause})
		}
	}
	l, err := scheduler.Repaired(scheduler.NodeLife{State: n.State, Cause: n.StateCause, Reason: n.StateReason}, actor(p))
	switch {
	case err == nil:
		if len(gpus) > 0 {
			if err := s.st.SetNodeHealth(ctx, name, n.Health, n.HealthReason, gpus, s.now()); err != nil {
				return err
			}
		}
		return s.st.SetNodeState(ctx, name, l.State, l.Cause, l.Reason, actor(p), s.now())
	case len(gpus) > 0:
		return s.st.SetNodeHealth(ctx, name, n.Health, n.HealthReason, gpus, s.now())
	}
	return fmt.Errorf("%w: node %s is %s and has no GPU in repair: only a node or GPU in repairing can be marked repaired", gpufleet.ErrInvalid, gpufleet.Quote(name), n.State)
}

// errInRepair refuses uncordon of a node on the repair path.
var errInRepair = errors.New("is on the repair path: mark it repaired; it returns to ready once validation passes")

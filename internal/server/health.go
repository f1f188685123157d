package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
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

// healths is the health component: the rules' memory of each node between
// heartbeats (nodeHealth), under its own lock, over the store calls it
// declares (healthStore). It carries out what the core decides (the rules'
// health.Evaluate; scheduler.Quarantine, Breaker, Validated and Repaired
// for the node's lifecycle); the heartbeat path, the leader cycle and the
// repair command call it. Its lock is never held with another.
type healths struct {
	mu    sync.Mutex
	nodes map[string]*nodeHealth

	st  healthStore
	cfg health.Config
	log *slog.Logger
	// shortfalls judges a node's newest benchmark figures against the
	// fleet (the bench gate) and hands them to setBench; nudge asks the
	// leader for a cycle.
	shortfalls func(ctx context.Context, node string) ([]bench.Shortfall, error)
	nudge      func()
}

// healthStore is what the health component reads and writes.
type healthStore interface {
	Node(ctx context.Context, name string) (gpufleet.Node, error)
	Nodes(ctx context.Context) ([]gpufleet.Node, error)
	NodeHealthState(ctx context.Context, node string) (string, error)
	SetNodeHealthState(ctx context.Context, node, state string) error
	SetNodeHealth(ctx context.Context, node string, h gpufleet.Health, reason string, gpus []gpufleet.NodeGPU, at time.Time) error
	SetNodeState(ctx context.Context, node string, state gpufleet.NodeState, cause gpufleet.StateCause, reason, actor string, at time.Time) error
	AppendEvent(ctx context.Context, e gpufleet.Event) error
}

func newHealths(st healthStore, cfg health.Config, log *slog.Logger) *healths {
	return &healths{nodes: map[string]*nodeHealth{}, st: st, cfg: cfg, log: log, nudge: func() {}}
}

// node returns a node's record, made on first use; h.mu must be held.
func (k *healths) node(name string) *nodeHealth {
	h := k.nodes[name]
	if h == nil {
		h = &nodeHealth{}
		k.nodes[name] = h
	}
	return h
}

// forget makes the next heartbeat read the node's inventory and memory
// from the store again (it registered: the inventory may have changed).
func (k *healths) forget(node string) {
	k.mu.Lock()
	k.node(node).loaded = false
	k.mu.Unlock()
}

// setBench hands a node's benchmark shortfalls to its rules, which run
// at its next heartbeat.
func (k *healths) setBench(node string, short []health.BenchShortfall) {
	k.mu.Lock()
	h := k.node(node)
	h.bench, h.benchLoaded, h.benchDirty = short, true, true
	k.mu.Unlock()
}

// load reads a node's inventory and the rules' memory from the store the
// first time this replica hears from it. k.mu must NOT be held.
func (k *healths) load(ctx context.Context, node string) (*nodeHealth, error) {
	k.mu.Lock()
	h := k.node(node)
	loaded := h.loaded
	k.mu.Unlock()
	if loaded {
		return h, nil
	}
	n, err := k.st.Node(ctx, node)
	if err != nil {
		return nil, err
	}
	raw, err := k.st.NodeHealthState(ctx, node)
	if err != nil {
		return nil, err
	}
	var st health.State
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			k.log.Warn("discarding unreadable health state", "node", node, "err", err)
			st = health.State{}
		}
	}
	k.mu.Lock()
	h.inventory, h.state, h.loaded = n.GPUs, st, true
	h.summary = storedSummary(n)
	benchLoaded := h.benchLoaded
	k.mu.Unlock()
	if !benchLoaded && k.shortfalls != nil {
		if _, err := k.shortfalls(ctx, node); err != nil {
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
func (k *healths) judge(ctx context.Context, node string, r api.HeartbeatRequest, now time.Time) error {
	h, err := k.load(ctx, node)
	if err != nil {
		return err
	}
	// Unchanged evidence, no XID and the same missing GPUs: the finding
	// cannot change but with time, so the rules run every healthEvery.
	k.mu.Lock()
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
	k.mu.Unlock()
	if !due || len(inv) == 0 {
		return nil
	}
	ev := evidence(node, inv, r, last)
	ev.Bench = shortfalls
	next, conds := health.Evaluate(prev, ev, now, k.cfg)
	return k.record(ctx, node, h, next, conds, now)
}

// wantsEvidence reports whether this replica lacks a reporting GPU's
// evidence, so that the agent should send all of it.
func (k *healths) wantsEvidence(node string, r api.HeartbeatRequest) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	h := k.node(node)
	for _, smp := range r.Samples {
		if _, ok := h.evidence[smp.UUID]; !ok && smp.Evidence == nil {
			return true
		}
	}
	return false
}

// record stores a new health finding when it differs from the last, and
// acts on it.
func (k *healths) record(ctx context.Context, node string, h *nodeHealth, next health.State, conds []health.Condition, now time.Time) error {
	sum := health.Summarize(conds)
	k.mu.Lock()
	h.state = next
	same := sameSummary(h.summary, sum)
	inv := h.inventory
	k.mu.Unlock()
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
	if err := k.st.SetNodeHealth(ctx, node, node_health, sum.Reason, gpus, now); err != nil {
		return err
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return err
	}
	if err := k.st.SetNodeHealthState(ctx, node, string(raw)); err != nil {
		return err
	}
	k.mu.Lock()
	h.summary = sum
	k.mu.Unlock()
	for _, c := range conds {
		k.log.Warn("health condition", "node", node, "gpu", c.GPU, "rule", c.Rule, "severity", c.Severity, "action", c.Action, "reason", c.Reason)
	}
	if err := k.quarantine(ctx, node, sum, conds, now); err != nil {
		return err
	}
	k.nudge()
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
func (k *healths) quarantine(ctx context.Context, node string, sum health.Summary, conds []health.Condition, now time.Time) error {
	if !sum.Action.TakesOutOfService() {
		return nil
	}
	n, err := k.st.Node(ctx, node)
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
	nodes, err := k.st.Nodes(ctx)
	if err != nil {
		return err
	}
	q := scheduler.Breaker(nodes, adding, k.cfg.QuarantineMaxFraction)
	if !q.Allowed {
		k.log.Error("circuit breaker: automatic quarantine refused", "node", node, "reason", q.Reason)
		return k.st.AppendEvent(ctx, gpufleet.Event{At: now, Actor: healthActor, Kind: "health.quarantine_refused", Object: node,
			Detail: fmt.Sprintf("%s (%s); the conditions stay reported: drain by hand if they are real", q.Reason, sum.Reason)})
	}
	if nodeScope {
		reason := sum.Reason
		if e := explain(-1); e != "" {
			reason = e
		}
		l, _ := scheduler.Quarantine(scheduler.NodeLife{State: n.State}, reason)
		return k.st.SetNodeState(ctx, node, l.State, l.Cause, l.Reason, healthActor, now)
	}
	return k.st.SetNodeHealth(ctx, node, n.Health, n.HealthReason, drainGPUs, now)
}

// judgeSilent reports nodes silent past the grace as unhealthy (once) and
// drains none: losing a node's attempts is the lost-node path's job. age
// is how long a node has been silent, and whether it was ever heard.
func (k *healths) judgeSilent(ctx context.Context, nodes []gpufleet.Node, age func(node string) (time.Duration, bool), grace time.Duration, now time.Time) error {
	for _, n := range nodes {
		age, known := age(n.Name)
		if !known || age <= grace {
			continue
		}
		h, err := k.load(ctx, n.Name)
		if err != nil {
			return err
		}
		k.mu.Lock()
		prev := h.state
		k.mu.Unlock()
		_, conds := health.Evaluate(prev, health.NodeEvidence{Node: n.Name, HeartbeatAge: age, HeartbeatGrace: grace}, now, k.cfg)
		// The node's GPUs were not heard: keep their findings, add the
		// heartbeat's.
		for _, c := range prev.Active {
			if c.GPU >= 0 {
				conds = append(conds, c.Condition)
			}
		}
		sum := health.Summarize(conds)
		k.mu.Lock()
		hadIt := strings.Contains(h.summary.Reason, "no heartbeat") || h.summary.Health == gpufleet.Unhealthy
		k.mu.Unlock()
		if hadIt && sum.Health == gpufleet.Unhealthy {
			continue // said once; the age in the reason would change every cycle
		}
		// The rules' memory stays as the last heartbeat left it: silence
		// says nothing about the GPUs.
		k.mu.Lock()
		h.silent = true
		k.mu.Unlock()
		if err := k.record(ctx, n.Name, h, prev, conds, now); err != nil {
			return err
		}
	}
	return nil
}

// advanceStates moves nodes and GPUs along the repair path, in the store
// and in m: a draining node or GPU that no longer holds an active attempt
// goes to repairing.
func (k *healths) advanceStates(ctx context.Context, jobs []gpufleet.Job, m *nodeMoves, now time.Time) error {
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
			if err := k.st.SetNodeState(ctx, n.Name, l.State, l.Cause, l.Reason, "system", now); err != nil {
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
			if err := k.st.SetNodeHealth(ctx, n.Name, n.Health, n.HealthReason, done, now); err != nil {
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
func (k *healths) validationOrder(n gpufleet.Node, epoch int64) *api.ValidationOrder {
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
	k.mu.Lock()
	defer k.mu.Unlock()
	h := k.node(n.Name)
	if h.validation != nil && slices.Equal(h.validation.GPUs, gpus) {
		return h.validation
	}
	h.validSeq++
	h.validation = &api.ValidationOrder{ID: fmt.Sprintf("v-%s-%d-%d", n.Name, epoch, h.validSeq), GPUs: gpus}
	for _, b := range h.bench {
		if t := bench.Test(b.Test); !slices.Contains(bench.LevelTests(bench.LevelQuick), t) && slices.Contains(bench.Tests(), t) && !slices.Contains(h.validation.Tests, t) {
			h.validation.Tests = append(h.validation.Tests, t)
		}
	}
	return h.validation
}

// validated applies the agent's validation results: a pass returns the
// node or GPUs to ready and healthy, a failure sends them back to repair.
func (s *Server) validated(ctx context.Context, node string, results []api.ValidationResult, now time.Time) error {
	res, ok := s.health.inFlight(node, results)
	if !ok {
		return nil
	}
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
	return s.health.validated(ctx, node, res, now)
}

// inFlight is the result, among results, of the node's check in flight.
func (k *healths) inFlight(node string, results []api.ValidationResult) (api.ValidationResult, bool) {
	k.mu.Lock()
	order := k.node(node).validation
	k.mu.Unlock()
	if order == nil {
		return api.ValidationResult{}, false
	}
	i := slices.IndexFunc(results, func(r api.ValidationResult) bool { return r.ID == order.ID })
	if i < 0 {
		return api.ValidationResult{}, false
	}
	return results[i], true
}

// validated applies the result of the node's check in flight (its
// benchmark gate already judged).
func (k *healths) validated(ctx context.Context, node string, res api.ValidationResult, now time.Time) error {
	n, err := k.st.Node(ctx, node)
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
	hl, err := k.load(ctx, node)
	if err != nil {
		return err
	}
	nodeHealth, nodeReason := n.Health, n.HealthReason
	k.mu.Lock()
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
	hl.validation = nil
	state := hl.state
	k.mu.Unlock()
	if n.State == gpufleet.NodeValidating && !res.Passed {
		nodeHealth = gpufleet.Unhealthy
		nodeReason = next.Reason
	}
	if err := k.st.SetNodeHealth(ctx, node, nodeHealth, nodeReason, gpus, now); err != nil {
		return err
	}
	raw, err := json.Marshal(state)
	if err != nil {
		return err
	}
	if err := k.st.SetNodeHealthState(ctx, node, string(raw)); err != nil {
		return err
	}
	if l, ok := scheduler.Validated(scheduler.NodeLife{State: n.State, Cause: n.StateCause, Reason: n.StateReason}, res.Passed, res.Detail); ok {
		if err := k.st.SetNodeState(ctx, node, l.State, l.Cause, l.Reason, "agent:"+node, now); err != nil {
			return err
		}
	}
	kind := "node.validation_passed"
	if !res.Passed {
		kind = "node.validation_failed"
	}
	if err := k.st.AppendEvent(ctx, gpufleet.Event{At: now, Actor: "agent:" + node, Kind: kind, Object: node, Detail: res.Detail}); err != nil {
		return err
	}
	k.nudge()
	return nil
}

// markRepaired starts the return to service of a node in repair, or of its
// GPUs in repair: they go to validating, and the agent checks them.
func (k *healths) markRepaired(ctx context.Context, who, name string, now time.Time) error {
	n, err := k.st.Node(ctx, name)
	if err != nil {
		return err
	}
	var gpus []gpufleet.NodeGPU
	for _, g := range n.GPUs {
		if l, err := scheduler.Repaired(scheduler.NodeLife{State: g.State, Cause: g.StateCause, Reason: g.StateReason}, who); err == nil {
			gpus = append(gpus, gpufleet.NodeGPU{Index: g.Index, UUID: g.UUID, Health: g.Health, Reason: g.Reason,
				State: l.State, StateReason: l.Reason, StateCause: l.Cause})
		}
	}
	l, err := scheduler.Repaired(scheduler.NodeLife{State: n.State, Cause: n.StateCause, Reason: n.StateReason}, who)
	switch {
	case err == nil:
		if len(gpus) > 0 {
			if err := k.st.SetNodeHealth(ctx, name, n.Health, n.HealthReason, gpus, now); err != nil {
				return err
			}
		}
		return k.st.SetNodeState(ctx, name, l.State, l.Cause, l.Reason, who, now)
	case len(gpus) > 0:
		return k.st.SetNodeHealth(ctx, name, n.Health, n.HealthReason, gpus, now)
	case k.benchOnly(ctx, name):
		l, err := scheduler.Rebenched(scheduler.NodeLife{State: n.State, Cause: n.StateCause, Reason: n.StateReason}, who, true)
		if err != nil {
			return fmt.Errorf("node %s: %w", gpufleet.Quote(name), err)
		}
		return k.st.SetNodeState(ctx, name, l.State, l.Cause, l.Reason, who, now)
	}
	return fmt.Errorf("%w: node %s is %s and has no GPU in repair: only a node or GPU in repairing can be marked repaired", gpufleet.ErrInvalid, gpufleet.Quote(name), n.State)
}

// benchOnly reports whether the node has findings in force and every one
// comes from its benchmark figures (the bench-degraded rule).
func (k *healths) benchOnly(ctx context.Context, name string) bool {
	h, err := k.load(ctx, name)
	if err != nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range h.state.Active {
		if c.Rule != health.RuleBenchDegraded {
			return false
		}
	}
	return len(h.state.Active) > 0
}

// errInRepair refuses uncordon of a node on the repair path.
var errInRepair = errors.New("is on the repair path: mark it repaired; it returns to ready once validation passes")

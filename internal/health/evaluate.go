package health

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// Condition is one finding of a rule about a GPU or a node.
type Condition struct {
	// Rule is the stable id of the rule: "xid-79", "ecc-dbe", ... (see
	// Rules).
	Rule string `json:"rule"`
	// GPU is the GPU's index on its node, or -1 for the node itself.
	GPU  int    `json:"gpu"`
	UUID string `json:"uuid,omitempty"`
	// Severity is what the condition says about the GPU or node.
	Severity gpufleet.Health `json:"severity"`
	// Action is what gpufleet does about it.
	Action Action `json:"action"`
	// Reason is a short phrase naming the evidence, for lists and the
	// node's reason: "XID 79 (fell off the bus)".
	Reason string `json:"reason"`
	// Explanation is one sentence a person can act on: the evidence, then
	// what to do.
	Explanation string `json:"explanation"`
	// Since is when the condition was first seen.
	Since time.Time `json:"since"`
}

// NodeGPU is the GPU index of node-level conditions.
const NodeGPU = -1

// Evaluate applies every rule to the evidence of one node at now, with
// memory from prev, and returns the new memory and the conditions in
// force, sorted by GPU (node first), then by action (most severe first),
// then by rule. It does not change prev. Zero fields of cfg take their
// defaults. GPUs with a negative index are ignored, and of two with the
// same index the first counts.
//
// Conditions backed by a reading (a pending remap, a link down) last as
// long as the reading says so. Conditions raised by an event (an XID, a
// counter that grew too fast) are held for cfg.EventHold after the event
// was last seen, or until State.ClearGPU; an XID whose action is ignore is
// reported once and not held.
func Evaluate(prev State, ev NodeEvidence, now time.Time, cfg Config) (State, []Condition) {
	cfg = cfg.withDefaults()
	gpus := slices.DeleteFunc(slices.Clone(ev.GPUs), func(g GPUEvidence) bool { return g.Index < 0 })
	sort.SliceStable(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })
	gpus = slices.CompactFunc(gpus, func(a, b GPUEvidence) bool { return a.Index == b.Index })

	var (
		next     State
		hits     []hit
		replaced = map[int]bool{}
		seen     = map[int]bool{}
	)
	for _, g := range gpus {
		seen[g.Index] = true
		pg, ok := prev.gpu(g.Index)
		if ok && pg.UUID != "" && g.UUID != "" && pg.UUID != g.UUID {
			// A different GPU sits at this index now: forget the old one.
			pg, ok = GPUState{}, false
			replaced[g.Index] = true
		}
		uuid := g.UUID
		if uuid == "" {
			uuid = pg.UUID
		}
		e := &gpuEval{cfg: cfg, now: now, ev: g, prev: pg, next: GPUState{Index: g.Index, UUID: uuid}}
		e.evaluate()
		hits = append(hits, e.hits...)
		next.GPUs = append(next.GPUs, e.next)
	}
	// GPUs not in the evidence keep their counter baselines; their runs end.
	for _, pg := range prev.GPUs {
		if !seen[pg.Index] {
			next.GPUs = append(next.GPUs, GPUState{Index: pg.Index, UUID: pg.UUID, Counters: slices.Clone(pg.Counters)})
		}
	}
	sort.Slice(next.GPUs, func(i, j int) bool { return next.GPUs[i].Index < next.GPUs[j].Index })
	hits = append(hits, nodeHits(ev, len(gpus), now, cfg)...)
	hits = append(hits, benchHits(ev)...)

	done := map[string]bool{}
	for _, h := range hits {
		k := strconv.Itoa(h.GPU) + "/" + h.Rule
		if done[k] {
			continue
		}
		done[k] = true
		a := ActiveCondition{Condition: h.Condition, LastSeen: now, Held: h.held}
		if p, ok := prev.active(h.Rule, h.GPU); ok && !replaced[h.GPU] {
			a.Since = p.Since
		} else if a.Since.IsZero() || a.Since.After(now) {
			a.Since = now
		}
		next.Active = append(next.Active, a)
	}
	for _, p := range prev.Active {
		k := strconv.Itoa(p.GPU) + "/" + p.Rule
		if done[k] || !p.Held || replaced[p.GPU] || now.Sub(p.LastSeen) >= cfg.EventHold {
			continue
		}
		done[k] = true
		next.Active = append(next.Active, p)
	}
	sort.Slice(next.Active, func(i, j int) bool { return conditionLess(next.Active[i].Condition, next.Active[j].Condition) })
	out := make([]Condition, len(next.Active))
	for i, a := range next.Active {
		out[i] = a.Condition
	}
	return next, out
}

// conditionLess orders conditions by GPU, then most severe action, then
// rule id.
func conditionLess(a, b Condition) bool {
	if a.GPU != b.GPU {
		return a.GPU < b.GPU
	}
	if a.Action != b.Action {
		return a.Action.Rank() > b.Action.Rank()
	}
	if a.Rule != b.Rule {
		return a.Rule < b.Rule
	}
	return a.Explanation < b.Explanation
}

// hit is a condition found in this evaluation. Since is zero unless the
// rule knows when its evidence began.
type hit struct {
	Condition
	held bool
}

// newHit builds a hit of a rule from the rule table.
func newHit(rule string, gpu int, uuid, reason, explanation string) hit {
	r := ruleByID[rule]
	return hit{Condition: Condition{Rule: rule, GPU: gpu, UUID: uuid, Severity: r.Severity, Action: r.Action,
		Reason: reason, Explanation: explanation}, held: r.Held}
}

// gpuEval evaluates one GPU.
type gpuEval struct {
	cfg  Config
	now  time.Time
	ev   GPUEvidence
	prev GPUState
	next GPUState
	hits []hit
}

func (e *gpuEval) add(rule, reason, explanation string) *hit {
	e.hits = append(e.hits, newHit(rule, e.ev.Index, e.next.UUID, reason, explanation))
	return &e.hits[len(e.hits)-1]
}

func (e *gpuEval) evaluate() {
	e.xids()
	if !e.ev.Present {
		e.add("gpu-missing", "missing from the node's report", fmt.Sprintf(
			"GPU %d%s is in the node's inventory but the node no longer reports it (it probably fell off the bus): drain the node and reboot it, and replace the GPU if it does not come back.",
			e.ev.Index, paren(e.next.UUID)))
		e.finish()
		return
	}
	e.memory()
	e.throttle()
	e.pcie()
	e.nvlink()
	e.finish()
}

// finish carries over the counters this evaluation had no reading for and
// sorts the memory.
func (e *gpuEval) finish() {
	for _, c := range e.prev.Counters {
		if _, ok := e.next.counter(c.Name); !ok {
			e.next.Counters = append(e.next.Counters, c)
		}
	}
	sort.Slice(e.next.Counters, func(i, j int) bool { return e.next.Counters[i].Name < e.next.Counters[j].Name })
	sort.Slice(e.next.Runs, func(i, j int) bool { return e.next.Runs[i].Name < e.next.Runs[j].Name })
}

func (e *gpuEval) xids() {
	codes := slices.Clone(e.ev.XIDs)
	app := uint64(0)
	for _, c := range codes {
		if x, ok := LookupXID(c); ok && x.Cause == CauseApplication {
			app++
		}
	}
	slices.Sort(codes)
	for _, code := range slices.Compact(codes) {
		x, known := LookupXID(code)
		if !known {
			x = xidFor(code)
			h := e.add(XIDRule(code), fmt.Sprintf("unknown XID %d", code), fmt.Sprintf(
				"GPU %d raised XID %d, which gpufleet's catalog does not list: look it up in NVIDIA's XID catalog (%s); the GPU stays degraded meanwhile.",
				e.ev.Index, code, xidCatalogURL))
			h.Severity, h.Action, h.held = x.Severity, x.Action, true
			continue
		}
		h := e.add(XIDRule(code), fmt.Sprintf("XID %d (%s)", code, x.Name),
			fmt.Sprintf("GPU %d raised XID %d (%s): %s.", e.ev.Index, code, x.Name, x.Advice))
		h.Severity, h.Action, h.held = x.Severity, x.Action, x.Action != ActionIgnore
	}

	// Application-class XIDs are counted on a counter of their own, so that
	// a stream of them on one GPU shows.
	pc, had := e.prev.counter("app-xids")
	if app == 0 && !had {
		return
	}
	if !had {
		pc = Counter{Name: "app-xids", AnchorAt: e.now}
	}
	c, fired, growth, span := track("app-xids", pc, true, pc.Last+app, e.now, e.cfg.AppXIDWindow, e.cfg.AppXIDBurst)
	e.next.Counters = append(e.next.Counters, c)
	if fired {
		e.add("xid-app-burst", fmt.Sprintf("%d application XIDs in %s", growth, gpufleet.FormatDuration(span)), fmt.Sprintf(
			"GPU %d raised %d application-class XIDs in %s (threshold %d per %s): check whether they come from one job or many, and drain the GPU for diagnostics if many.",
			e.ev.Index, growth, gpufleet.FormatDuration(span), e.cfg.AppXIDBurst, gpufleet.FormatDuration(e.cfg.AppXIDWindow)))
	}
}

// counter tracks a monotonic counter reading and reports whether it grew
// by threshold per window. A nil reading keeps the old baseline.
func (e *gpuEval) counter(name string, v *uint64, window time.Duration, threshold uint64) (fired bool, from, to uint64, span time.Duration) {
	if v == nil {
		return false, 0, 0, 0
	}
	pc, had := e.prev.counter(name)
	c, fired, growth, span := track(name, pc, had, *v, e.now, window, threshold)
	e.next.Counters = append(e.next.Counters, c)
	return fired, *v - growth, *v, span
}

// track advances a counter to the reading v at now. The counter measures
// growth from an anchor; with a window, growth is compared with threshold
// per window (scaled up when the anchor is older than one window) and the
// anchor moves on when the window has passed or the rule fired; without
// one, any growth of threshold since the last reading fires. The first
// reading only sets the baseline, and a reading below the last one (the
// driver reloaded and the counter restarted) starts over without firing.
func track(name string, prev Counter, had bool, v uint64, now time.Time, window time.Duration, threshold uint64) (next Counter, fired bool, growth uint64, span time.Duration) {
	fresh := Counter{Name: name, Last: v, Anchor: v, AnchorAt: now}
	if !had || v < prev.Last || v < prev.Anchor || now.Before(prev.AnchorAt) {
		return fresh, false, 0, 0
	}
	growth, span = v-prev.Anchor, now.Sub(prev.AnchorAt)
	if window <= 0 {
		return fresh, growth > 0 && growth >= threshold, growth, span
	}
	fired = growth > 0 && float64(growth)*float64(window) >= float64(threshold)*float64(max(span, window))
	if fired || span >= window {
		return fresh, fired, growth, span
	}
	return Counter{Name: name, Last: v, Anchor: prev.Anchor, AnchorAt: prev.AnchorAt}, false, growth, span
}

// run records whether a signal is present now and returns since when it
// has been present in every evaluation. A nil reading counts as absent.
func (e *gpuEval) run(name string, on bool) (time.Time, bool) {
	if !on {
		return time.Time{}, false
	}
	since := e.now
	if r, ok := e.prev.run(name); ok && !r.Since.After(e.now) {
		since = r.Since
	}
	e.next.Runs = append(e.next.Runs, Run{Name: name, Since: since})
	return since, true
}

func (e *gpuEval) memory() {
	g, i := e.ev, e.ev.Index
	for _, c := range []struct {
		name, kind string
		v          *uint64
	}{{"ecc-uncorrected-volatile", "volatile", g.ECCUncorrectedVolatile}, {"ecc-uncorrected-aggregate", "aggregate", g.ECCUncorrectedAggregate}} {
		if fired, from, to, _ := e.counter(c.name, c.v, 0, e.cfg.ECCUncorrectedGrowth); fired {
			e.add("ecc-dbe", fmt.Sprintf("uncorrectable ECC errors +%d", to-from), fmt.Sprintf(
				"GPU %d's uncorrectable ECC count (%s) rose from %d to %d: drain and reset the GPU, and run field diagnostics if it happens again.",
				i, c.kind, from, to))
		}
	}
	for _, c := range []struct {
		name, kind string
		v          *uint64
	}{{"ecc-corrected-volatile", "volatile", g.ECCCorrectedVolatile}, {"ecc-corrected-aggregate", "aggregate", g.ECCCorrectedAggregate}} {
		if fired, from, to, span := e.counter(c.name, c.v, e.cfg.ECCCorrectedWindow, e.cfg.ECCCorrectedGrowth); fired {
			e.add("ecc-sbe-rate", fmt.Sprintf("correctable ECC errors +%d in %s", to-from, gpufleet.FormatDuration(span)), fmt.Sprintf(
				"GPU %d's correctable ECC count (%s) rose by %d in %s (threshold %d per %s): watch for row remaps and plan a reset with diagnostics.",
				i, c.kind, to-from, gpufleet.FormatDuration(span), e.cfg.ECCCorrectedGrowth, gpufleet.FormatDuration(e.cfg.ECCCorrectedWindow)))
		}
	}
	if isTrue(g.RowRemapFailure) {
		e.add("row-remap-failure", "row remap failure", fmt.Sprintf(
			"GPU %d could not remap a faulty memory row (no spare row left or the remap failed): run field diagnostics and replace the GPU.", i))
	}
	if isTrue(g.RowRemapPending) {
		rows := ""
		if g.RemappedRowsUncorrectable != nil && g.RemappedRowsCorrectable != nil {
			rows = fmt.Sprintf(" (%d rows remapped for uncorrectable and %d for correctable errors so far)", *g.RemappedRowsUncorrectable, *g.RemappedRowsCorrectable)
		}
		e.add("row-remap-pending", "row remap pending", fmt.Sprintf(
			"GPU %d has a memory row remap pending%s: drain and reset the GPU so the remap takes effect.", i, rows))
	}
	if isTrue(g.RetiredPagesPending) {
		e.add("retired-pages-pending", "retired pages pending", fmt.Sprintf(
			"GPU %d has memory pages pending retirement: drain and reset the GPU so the retirement takes effect.", i))
	}
	// An absent count is not zero, but the present ones are a lower bound
	// of the total: if they alone reach a mark, the total does too.
	if g.RetiredPagesSBE != nil || g.RetiredPagesDBE != nil {
		total := deref(g.RetiredPagesSBE) + deref(g.RetiredPagesDBE)
		switch {
		case total >= e.cfg.RetiredPagesLimit:
			e.add("retired-pages-limit", fmt.Sprintf("%d retired pages", total), fmt.Sprintf(
				"GPU %d has %d retired memory pages (limit %d): run field diagnostics and replace the GPU.", i, total, e.cfg.RetiredPagesLimit))
		case total >= e.cfg.RetiredPagesHigh:
			e.add("retired-pages-high", fmt.Sprintf("%d retired pages", total), fmt.Sprintf(
				"GPU %d has %d retired memory pages (warning at %d, replacement at %d): run field diagnostics at the next maintenance.",
				i, total, e.cfg.RetiredPagesHigh, e.cfg.RetiredPagesLimit))
		}
	}
}

// clockRules are the sustained clock-event rules: the run that times
// them, the rule, the words of its reason, and the clock-event bits.
var clockRules = []struct {
	run, rule, short, what, advice string
	mask                           uint64
}{
	{"power-brake", "power-brake-sustained", "power brake", "had its power brake asserted", "drain it and check the node's power supplies and the rack's power budget", gpu.ClockEventHWPowerBrake},
	{"thermal", "thermal-sustained", "thermal throttling", "been thermally throttled", "check inlet temperature, fans and airflow", gpu.ClockEventSWThermalSlowdown | gpu.ClockEventHWThermalSlowdown},
	{"hw-slowdown", "hw-slowdown-sustained", "hardware slowdown", "been in hardware slowdown", "check its temperature and the node's power supplies", gpu.ClockEventHWSlowdown},
}

// ClockReasonWords are the words a sustained clock-event finding's reason
// starts with ("power brake", "thermal throttling", "hardware
// slowdown"), for readers of its events (the audit's throttling check).
func ClockReasonWords() []string {
	out := make([]string, len(clockRules))
	for i, t := range clockRules {
		out[i] = t.short
	}
	return out
}

// throttle applies the sustained clock-event rules. Software power capping
// (0x4), idle, application clocks and sync boost are normal and ignored.
func (e *gpuEval) throttle() {
	r, i := e.ev.ClockEventReasons, e.ev.Index
	has := func(mask uint64) bool { return r != nil && *r&mask != 0 }
	for _, t := range clockRules {
		since, on := e.run(t.run, has(t.mask))
		if d := e.now.Sub(since); on && d >= e.cfg.ThrottleSustain {
			h := e.add(t.rule, fmt.Sprintf("%s for %s", t.short, gpufleet.FormatDuration(d)), fmt.Sprintf(
				"GPU %d has %s (clock event reasons %#x) for %s: %s.", i, t.what, *r, gpufleet.FormatDuration(d), t.advice))
			h.Since = since
		}
	}
}

func (e *gpuEval) pcie() {
	g, i := e.ev, e.ev.Index
	narrow := g.PCIeWidth != nil && g.PCIeMaxWidth != nil && *g.PCIeMaxWidth > 0 && *g.PCIeWidth < *g.PCIeMaxWidth
	loaded := g.Utilization != nil && *g.Utilization >= e.cfg.PCIeLoadUtilization
	slow := g.PCIeGen != nil && g.PCIeMaxGen != nil && *g.PCIeMaxGen > 0 && *g.PCIeGen < *g.PCIeMaxGen && loaded
	since, on := e.run("pcie-downgrade", narrow || slow)
	if d := e.now.Sub(since); on && d >= e.cfg.PCIeDowngradeSustain {
		link := fmt.Sprintf("gen %s x%s of gen %s x%s", optInt(g.PCIeGen), optInt(g.PCIeWidth), optInt(g.PCIeMaxGen), optInt(g.PCIeMaxWidth))
		h := e.add("pcie-downgrade", "PCIe link at "+link, fmt.Sprintf(
			"GPU %d's PCIe link has run at %s for %s: reseat the GPU or its riser and check the slot and BIOS link settings.", i, link, gpufleet.FormatDuration(d)))
		h.Since = since
	}
	if fired, from, to, span := e.counter("pcie-replay", g.PCIeReplayCount, e.cfg.PCIeReplayWindow, e.cfg.PCIeReplayGrowth); fired {
		e.add("pcie-replay", fmt.Sprintf("PCIe replays +%d in %s", to-from, gpufleet.FormatDuration(span)), fmt.Sprintf(
			"GPU %d's PCIe replay counter rose by %d in %s (threshold %d per %s): check the link width and generation and reseat the GPU or its riser.",
			i, to-from, gpufleet.FormatDuration(span), e.cfg.PCIeReplayGrowth, gpufleet.FormatDuration(e.cfg.PCIeReplayWindow)))
	}
}

func (e *gpuEval) nvlink() {
	g, i := e.ev, e.ev.Index
	if g.NVLinkLinksUp != nil && g.NVLinkLinksTotal != nil && *g.NVLinkLinksTotal > 0 && *g.NVLinkLinksUp < *g.NVLinkLinksTotal {
		e.add("nvlink-down", fmt.Sprintf("%d of %d NVLinks up", *g.NVLinkLinksUp, *g.NVLinkLinksTotal), fmt.Sprintf(
			"GPU %d has %d of %d NVLinks up: drain it so multi-GPU jobs do not slow down or hang, then reset the GPU or reboot the node to retrain the links.",
			i, *g.NVLinkLinksUp, *g.NVLinkLinksTotal))
	}
	if fired, from, to, span := e.counter("nvlink-errors", g.NVLinkErrors, e.cfg.NVLinkErrorWindow, e.cfg.NVLinkErrorGrowth); fired {
		e.add("nvlink-errors", fmt.Sprintf("NVLink errors +%d in %s", to-from, gpufleet.FormatDuration(span)), fmt.Sprintf(
			"GPU %d's NVLink error counter rose by %d in %s (threshold %d per %s): find the link with nvidia-smi nvlink -e and reset the GPU when convenient.",
			i, to-from, gpufleet.FormatDuration(span), e.cfg.NVLinkErrorGrowth, gpufleet.FormatDuration(e.cfg.NVLinkErrorWindow)))
	}
}

// nodeHits applies the node-level rules.
func nodeHits(ev NodeEvidence, listed int, now time.Time, cfg Config) []hit {
	var out []hit
	if ev.InventoryGPUs > listed {
		out = append(out, newHit("gpu-missing", NodeGPU, "", fmt.Sprintf("%d of %d GPUs reported", listed, ev.InventoryGPUs), fmt.Sprintf(
			"Node %s reports %d of the %d GPUs it registered with: drain the node and reboot it, and replace any GPU that does not come back.",
			nodeName(ev.Node), listed, ev.InventoryGPUs)))
	}
	grace := ev.HeartbeatGrace
	if grace <= 0 {
		grace = cfg.HeartbeatGrace
	}
	if ev.HeartbeatAge > grace {
		h := newHit("heartbeat-lost", NodeGPU, "", "no heartbeat for "+gpufleet.FormatDuration(ev.HeartbeatAge), fmt.Sprintf(
			"Node %s has sent no heartbeat for %s (grace %s): check that it is up, reachable and running the gpufleet agent.",
			nodeName(ev.Node), gpufleet.FormatDuration(ev.HeartbeatAge), gpufleet.FormatDuration(grace)))
		h.Since = now.Add(grace - ev.HeartbeatAge)
		out = append(out, h)
	}
	return out
}

// RuleBenchDegraded is the rule of a GPU (or node) whose benchmark
// figures are under the fleet gate.
const RuleBenchDegraded = "bench-degraded"

// benchHits turns benchmark shortfalls into one bench-degraded
// condition per GPU (or node) with every figure's evidence.
func benchHits(ev NodeEvidence) []hit {
	by := map[int][]BenchShortfall{}
	var order []int
	for _, b := range ev.Bench {
		if b.GPU < NodeGPU {
			continue
		}
		if _, ok := by[b.GPU]; !ok {
			order = append(order, b.GPU)
		}
		by[b.GPU] = append(by[b.GPU], b)
	}
	var out []hit
	for _, g := range order {
		bs := by[g]
		reason := bs[0].Reason
		if len(bs) > 1 {
			reason += fmt.Sprintf(" (and %d more figures)", len(bs)-1)
		}
		var ev []string
		for _, b := range bs {
			ev = append(ev, b.Evidence)
		}
		out = append(out, newHit(RuleBenchDegraded, g, bs[0].UUID, reason,
			strings.Join(ev, "; ")+". Cordon the node and run gpufleet bench run to confirm; repair the GPU if it stays under."))
	}
	return out
}

func isTrue(b *bool) bool { return b != nil && *b }

func deref(v *uint64) uint64 {
	if v == nil {
		return 0
	}
	return *v
}

func optInt(v *int) string {
	if v == nil {
		return "?"
	}
	return strconv.Itoa(*v)
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func nodeName(s string) string {
	if s == "" {
		return "(unnamed)"
	}
	return s
}

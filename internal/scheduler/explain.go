package scheduler

import (
	"slices"

	"github.com/gpufleet/gpufleet"
)

// Explanations as data (gpufleet.Explanation): every pending job and every
// refusal at submission carries the nodes looked at, the nodes each
// filter left out and the dimension that ran out. One scan of the nodes
// (scanNodes) makes the counts; the sentence is the Explanation's String.

// modelFilter says why model m is not among the shape's models: the first
// of the request's model constraints it fails.
func (s *sched) modelFilter(r *gpufleet.Resources, sh *shape, m int32) gpufleet.FilterCode {
	mi := &s.f.models[m]
	named := len(r.GPUModels) == 0
	for _, name := range r.GPUModels {
		if s.modelNamed(mi, name) {
			named = true
			break
		}
	}
	if !named || mi.opaque {
		return gpufleet.FilterModel
	}
	mem := mi.gpu.MemoryBytes
	if sh.kind == gpufleet.MIG {
		if mp, ok := mi.gpu.MIG(r.Sharing.Profile); ok {
			mem = mp.MemoryBytes
		}
	}
	switch {
	case r.GPUMemoryMinBytes > 0 && mem < int64(r.GPUMemoryMinBytes):
		return gpufleet.FilterMemory
	case !mi.gpu.ComputeCapability.AtLeast(r.MinComputeCapability):
		return gpufleet.FilterComputeCapability
	case r.Precision != "":
		if _, ok := mi.gpu.Peak(r.Precision); !ok {
			return gpufleet.FilterPrecision
		}
	}
	return gpufleet.FilterModel
}

// filterOrder is the order in which a node meets the filters; scan counts
// are kept by index into it.
var filterOrder = []gpufleet.FilterCode{
	gpufleet.FilterModel, gpufleet.FilterMemory, gpufleet.FilterComputeCapability, gpufleet.FilterPrecision,
	gpufleet.FilterSelector, gpufleet.FilterStack, gpufleet.FilterIsolation, gpufleet.FilterOverhead, gpufleet.FilterRuntime,
	gpufleet.FilterQuota, gpufleet.FilterSlowerModel,
	gpufleet.FilterNotReady, gpufleet.FilterCapacity, gpufleet.FilterTopology, gpufleet.FilterRackPower, gpufleet.FilterReservation,
}

// Indexes into filterOrder.
const (
	fModel = iota
	fMemory
	fCC
	fPrecision
	fSelector
	fStack
	fIsolation
	fOverhead
	fRuntime
	fQuota
	fSlower
	fNotReady
	fCapacity
	fTopology
	fRackPower
	fReservation
	fPass // the node passes every filter
	nFilters
)

// scan is one pass of the filters over the fleet's nodes for a shape.
type scan struct {
	counts [nFilters]int
	// The figures of the words, over the ready nodes that pass the
	// static filters: the most free GPUs (instances, GPUs with room for
	// the share) on one node, the free GPUs in all, the nodes with a
	// multi-node job's GPUs per node free, the largest free NVLink set.
	most, total, spread, dom int64
	// rack power: the rack with the most headroom among the nodes the
	// power filter left out, and its figures for this job.
	rack              int32
	draw, add, limit  float64
	budget, headroomW float64
}

// staticFilter is the first filter that is not about the fleet's state
// that node n fails for the shape (fPass when none): its models, labels,
// stack, mechanism and runtime.
func (s *sched) staticFilter(sh *shape, r *gpufleet.Resources, n *nodeSlot, shapeModels []bool) int {
	has := false
	for gi := range n.gpus {
		if shapeModels[n.gpus[gi].model] {
			has = true
			break
		}
	}
	if !has {
		if len(n.gpus) == 0 {
			return fModel
		}
		switch s.modelFilter(r, sh, n.gpus[0].model) {
		case gpufleet.FilterMemory:
			return fMemory
		case gpufleet.FilterComputeCapability:
			return fCC
		case gpufleet.FilterPrecision:
			return fPrecision
		}
		return fModel
	}
	for _, kv := range sh.selector {
		if v, ok := n.labels[kv[0]]; !ok || v != kv[1] {
			return fSelector
		}
	}
	if sh.stackOK != nil && !sh.stackOK[n.stack] {
		return fStack
	}
	if sh.isoOK != nil && !sh.isoOK[n.virt] {
		if !gpufleet.MechanismOf(s.f.virts[n.virt], gpufleet.Sharing{Kind: sh.kind}).Meets(sh.iso, nil) {
			return fIsolation
		}
		return fOverhead
	}
	if sh.container && !n.containers {
		return fRuntime
	}
	return fPass
}

// staticScan is a shape's judgement by the filters no state of the fleet
// changes, made once per call: the nodes each left out, and the nodes
// that pass them all, in fleet order.
type staticScan struct {
	counts [nFilters]int
	pass   []int32
}

// staticOf judges the shape's static filters on every node, once.
func (s *sched) staticOf(sh *shape, r *gpufleet.Resources) *staticScan {
	if sh.scan != nil {
		return sh.scan
	}
	st := &staticScan{}
	shapeModels := append([]bool(nil), s.modelSet(sh.models)...)
	for ni := range s.f.nodes {
		k := s.staticFilter(sh, r, &s.f.nodes[ni], shapeModels)
		st.counts[k]++
		if k == fPass {
			st.pass = append(st.pass, int32(ni))
		}
	}
	sh.scan = st
	return st
}

// anyPass reports whether some node passes the shape's static filters,
// stopping at the first (most shapes have one early in the fleet).
func (s *sched) anyPass(sh *shape, r *gpufleet.Resources) bool {
	shapeModels := s.modelSet(sh.models)
	for ni := range s.f.nodes {
		if s.staticFilter(sh, r, &s.f.nodes[ni], shapeModels) == fPass {
			return true
		}
	}
	return false
}

// scanNodes counts, over every node of the fleet, the first filter each
// fails for a shape that may use models now (slow: the models it waits
// out as too slow; the shape's other models are held by quota). With
// dynamic false only the filters that are not about the fleet's state
// apply. The static filters are judged once per shape (staticOf), so a
// scan visits only the nodes that pass them.
func (s *sched) scanNodes(sh *shape, r *gpufleet.Resources, models, slow []int32, dynamic bool, mode fitMode) scan {
	var sc scan
	sc.rack = -1
	st := s.staticOf(sh, r)
	sc.counts = st.counts
	if !dynamic {
		return sc
	}
	sc.counts[fPass] = 0
	allowed := s.modelSet(models)
	need := sh.gpus
	if sh.multi {
		need = sh.perNode
	}
	// Per-node power applies to the shapes that take all their GPUs on one
	// node; a spread's racks add up (powerWhy explains those). The budget
	// is the rack's (less the production reserve for other classes): a
	// rack the reservation's draw alone keeps the job off is counted under
	// reservation.
	perNodePower := s.pw.on && !s.pw.off && !sh.multi && sh.kind == gpufleet.Exclusive
	long := s.pw.long
	s.pw.long = false
	defer func() { s.pw.long = long }()
	for _, ni := range st.pass {
		sc.counts[s.dynamicFilter(sh, &s.f.nodes[ni], ni, allowed, slow, need, perNodePower, mode, &sc)]++
	}
	return sc
}

// dynamicFilter is the first filter about the fleet's state node ni fails
// (fPass when none).
func (s *sched) dynamicFilter(sh *shape, n *nodeSlot, ni int32, allowed []bool, slow []int32, need int32, power bool, mode fitMode, sc *scan) int {
	usable := false
	if sh.kind == gpufleet.MIG { // GPUs in MIG mode have no entry in mfree
		for gi := range n.gpus {
			usable = usable || allowed[n.gpus[gi].model]
		}
	} else {
		for _, mf := range n.mfree { // one entry per model of its whole GPUs
			usable = usable || allowed[mf.model]
		}
	}
	if !usable {
		for gi := range n.gpus {
			if slices.Contains(slow, n.gpus[gi].model) {
				return fSlower
			}
		}
		return fQuota
	}
	if !n.ready {
		return fNotReady
	}
	switch sh.kind {
	case gpufleet.MIG:
		var c int32
		for gi := range n.gpus {
			g := &n.gpus[gi]
			if !g.ready || !allowed[g.model] {
				continue
			}
			for _, in := range g.mig {
				if in.profile == sh.profile && !in.used {
					c++
				}
			}
		}
		sc.most = max(sc.most, int64(c))
		if c < need {
			return fCapacity
		}
		return fPass
	case gpufleet.TimeSlice:
		c := int32(0)
		for gi := range n.gpus {
			g := &n.gpus[gi]
			if allowed[g.model] && countable(n, g) && !g.excl && g.used+sh.units <= unit && (g.used > 0 || !g.reserved) {
				c++
			}
		}
		sc.most = max(sc.most, int64(c))
		if c < need {
			return fCapacity
		}
		return fPass
	}
	for _, mf := range n.mfree {
		if !allowed[mf.model] {
			continue
		}
		sc.most = max(sc.most, int64(mf.free))
		sc.total += int64(mf.free)
		if sh.multi && mf.free >= sh.perNode {
			sc.spread++
		}
		if sh.nvlink && int64(mf.free) > sc.dom {
			sc.dom = max(sc.dom, int64(largestDomain(n, mf.model)))
		}
	}
	if sh.multi || sh.nodes != 1 && s.spreadsAll(sh) {
		// A spread: every node with a free GPU of its models helps.
		for _, mf := range n.mfree {
			if allowed[mf.model] && mf.free >= max(need, 1) {
				return fPass
			}
		}
		return fCapacity
	}
	best := fCapacity
	for _, mf := range n.mfree {
		m := mf.model
		if !allowed[m] || mf.free+mf.resv < need {
			continue
		}
		k := fPass
		switch {
		case sh.nvlink && largestDomain(n, m) < need && mf.free >= need:
			k = fTopology
		case power && !s.powerOK(ni, m, need*unit):
			k = fRackPower
			if r := s.pw.rackOf[ni]; r >= 0 {
				w := float64(need*unit) * s.pw.perUnit(m)
				if h := s.pw.limit(r) - s.pw.draw[r] - w; sc.rack < 0 || h > sc.headroomW {
					sc.rack, sc.headroomW = r, h
					sc.draw, sc.add, sc.limit, sc.budget = s.pw.draw[r], w, s.pw.limit(r), s.pw.budget[r]
				}
			}
		case mf.free < need && mode != modeShort:
			k = fReservation
		}
		best = max(best, k)
	}
	return best
}

// spreadsAll reports whether the shape goes over as few nodes as possible
// on every model of the fleet it may use.
func (s *sched) spreadsAll(sh *shape) bool {
	for _, m := range sh.models {
		if !sh.spreads(s.f, m) {
			return false
		}
	}
	return len(sh.models) > 0
}

// explanation turns a scan into an Explanation with code.
func (s *sched) explanation(code string, sc *scan) *gpufleet.Explanation {
	e := &gpufleet.Explanation{Code: code, NodesEvaluated: len(s.f.nodes), NodesFiltered: []gpufleet.FilterCount{}}
	for k := range fPass {
		if sc.counts[k] > 0 {
			e.NodesFiltered = append(e.NodesFiltered, gpufleet.FilterCount{Code: filterOrder[k], Nodes: sc.counts[k]})
		}
	}
	return e
}

// lastFilter is the latest filter in filter order that left out a node:
// where the nodes that came closest stopped.
func (sc *scan) lastFilter() int {
	for k := fPass - 1; k >= 0; k-- {
		if sc.counts[k] > 0 {
			return k
		}
	}
	return -1
}

// codeExplanation is the shared explanation of a bare code, with no data
// and no sentence: the fallback for a reason decided without explaining
// (the ETA simulation's), which no pending entry shows. Read only.
func (s *sched) codeExplanation(code string) *gpufleet.Explanation {
	if e, ok := s.codeEx[code]; ok {
		return e
	}
	if s.codeEx == nil {
		s.codeEx = map[string]*gpufleet.Explanation{}
	}
	e := &gpufleet.Explanation{Code: code, NodesFiltered: []gpufleet.FilterCount{}}
	s.codeEx[code] = e
	return e
}

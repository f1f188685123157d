package scheduler

import (
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// Reason codes of Pending.ReasonCode. Each comes with a sentence in
// Pending.Reason that carries the counts behind it.
const (
	// ReasonUnplaceable: nothing in the fleet can ever run the job (no
	// matching model, more GPUs than any node or domain holds, an invalid
	// request). EstimatedStart is nil.
	ReasonUnplaceable = "unplaceable"
	// ReasonQuotaExceeded: the job asks more than its team's quota plus
	// borrowing limit ever allows. EstimatedStart is nil.
	ReasonQuotaExceeded = "quota_exceeded"
	// ReasonQuota: the team's quota is used up and borrowing is not
	// possible now (limit reached, or the idle capacity is held for teams
	// under their quota).
	ReasonQuota = "quota"
	// ReasonCapacity: not enough free GPUs of a matching model now.
	ReasonCapacity = "capacity"
	// ReasonTopology: enough GPUs, but not inside one NVLink domain.
	ReasonTopology = "topology"
	// ReasonOrder: it would fit, but strict FIFO order keeps it behind a
	// job that does not.
	ReasonOrder = "order"
	// ReasonReservation: it would fit, but would run past the backfill
	// reservation of the head job on GPUs that job needs.
	ReasonReservation = "reservation"
	// ReasonPreempting: running jobs were preempted for it; it starts once
	// they have stopped.
	ReasonPreempting = "preempting"
	// ReasonCycleLimit: Config.MaxPlacementsPerCycle was reached.
	ReasonCycleLimit = "cycle_limit"
	// ReasonStackMismatch: no node with a matching GPU runs the stack or
	// the versions the job requires (resources.stack, resources.requires).
	// EstimatedStart is nil until one does (a rollout, a node joining).
	ReasonStackMismatch = "stack_mismatch"
	// ReasonIsolation: the job requires isolation (resources.isolation) or
	// caps the overhead (resources.overhead), and the GPUs that are free,
	// or all the fleet's when EstimatedStart is nil, are on nodes whose
	// mechanism (virtualization and sharing) does not meet it.
	ReasonIsolation = "isolation"
	// ReasonRuntimeMissing: the job runs in an image and no node with a
	// matching GPU runs containers (runtime podman or docker): it is never
	// placed on a node that would fail its attempt. EstimatedStart is nil
	// until such a node joins.
	ReasonRuntimeMissing = "runtime_missing"
)

// WaitCodes lists every Pending.ReasonCode; StopCodes every Stop.Code;
// FailCodes every Fail.Code. These are the reason codes users see for the
// scheduler's decisions; scenario files and simulator replays produce each
// of them (TestScenariosCoverEveryCode, the simulator's TestReplayCodes).
func WaitCodes() []string {
	return []string{ReasonUnplaceable, ReasonQuotaExceeded, ReasonQuota, ReasonCapacity, ReasonTopology,
		ReasonOrder, ReasonReservation, ReasonPreempting, ReasonCycleLimit, ReasonSlowerModel, ReasonRackPower, ReasonStackMismatch, ReasonIsolation, ReasonRuntimeMissing}
}

// StopCodes lists every Stop.Code (see WaitCodes): gpufleet.StopCodes.
func StopCodes() []string {
	var out []string
	for _, c := range gpufleet.StopCodes() {
		out = append(out, string(c))
	}
	return out
}

// FailCodes lists every Fail.Code (see WaitCodes).
func FailCodes() []string { return []string{FailInvalid} }

// NeverStarts reports whether a pending job with this reason code and no
// EstimatedStart can never start as submitted: nothing in the fleet
// matches it, no node runs its stack, no node's mechanism meets its
// isolation, or its team's quota never allows it. (An isolation wait with
// an estimate is waiting for GPUs under a mechanism it accepts.)
func NeverStarts(code string) bool {
	return code == ReasonUnplaceable || code == ReasonQuotaExceeded || code == ReasonStackMismatch || code == ReasonIsolation ||
		code == ReasonRuntimeMissing
}

// why is a decision's reason: a code and, when explaining, the reason as
// data (ex) with its sentence (text, ex's String rendered once).
type why struct {
	code  string
	text  string
	class int32 // quota reasons: the class
	limit bool  // quota reasons: the borrowing limit (not idle capacity)
	model int32 // ReasonSlowerModel: the slower model that has room
	// quota reasons explained: the figures of the sentence, in milli-GPUs
	// (used, asked, quota, then borrowed and limit, or free and waiting),
	// formatted only for the jobs that stay pending (see words).
	quota *[5]int64
	// ex is the reason as data, when the scheduler made it (shared by
	// every job of the reason: read only); text is then its sentence.
	ex *gpufleet.Explanation
}

// explained is a pending job's reason as data and its sentence: a quota
// reason's figures are made here, for the jobs that stay pending (brief:
// the sentence shared by the class's jobs past the reason depth); every
// other explanation was rendered once, when it was made.
func (s *sched) explained(w why, brief bool) (*gpufleet.Explanation, string) {
	switch {
	case w.quota != nil && brief:
		b := s.briefQuota(w)
		return b.ex, b.text
	case w.quota != nil:
		e := s.quotaExplanation(w)
		return e, e.String()
	case w.ex != nil:
		return w.ex, w.text
	}
	return s.codeExplanation(w.code), w.text
}

// quotaExplanation is a quota reason with its team's figures as data.
func (s *sched) quotaExplanation(w why) *gpufleet.Explanation {
	n := w.quota
	g := func(milli int64) *float64 { v := float64(milli) / unit; return &v }
	q := &gpufleet.QuotaShortfall{Class: s.classes[w.class], Used: *g(n[0]), Asked: *g(n[1]), Quota: *g(n[2]), LimitReached: w.limit}
	if w.limit {
		q.Borrowed, q.Limit = g(n[3]), g(n[4])
	} else {
		q.Free, q.Waiting = g(n[3]), g(n[4])
	}
	return &gpufleet.Explanation{Code: w.code, NodesFiltered: []gpufleet.FilterCount{}, Exhausted: gpufleet.DimQuota, Quota: q}
}

// capacity reports a reason that more free GPUs would cure.
func (w why) capacity() bool {
	return w.code == ReasonCapacity || w.code == ReasonTopology || w.code == ReasonRackPower
}

// staticWhy explains a job no state of the fleet can ever run, or nil.
func (s *sched) staticWhy(p *pjob) *why {
	sh := p.shape
	if !sh.staticSet {
		sh.static = s.shapeStatic(sh, &p.job.Resources)
		sh.staticSet = true
	}
	if sh.static != nil {
		return sh.static
	}
	if !s.cfg.Quotas {
		return nil
	}
	// Quota never admits the job or always may: per shape and team.
	for int(p.team) >= len(sh.quotaNever) {
		sh.quotaNever = append(sh.quotaNever, quotaNeverEntry{})
	}
	e := &sh.quotaNever[p.team]
	if !e.set {
		e.why, e.set = s.quotaNever(p), true
	}
	return e.why
}

// quotaNeverEntry caches quotaNever for one shape and team.
type quotaNeverEntry struct {
	why *why
	set bool
}

func (s *sched) shapeStatic(sh *shape, r *gpufleet.Resources) *why {
	if sh.invalid != "" {
		e := s.explanation(ReasonUnplaceable, &scan{})
		e.NodesEvaluated, e.Invalid = 0, sh.invalid
		return exWhy(e)
	}
	if len(sh.models) == 0 {
		sc := s.scanNodes(sh, r, nil, nil, false, modeNormal)
		e := s.explanation(ReasonUnplaceable, &sc)
		if !slices.ContainsFunc(s.f.models, func(m modelInfo) bool { return m.gpus > 0 }) {
			e.EmptyFleet = true
		} else {
			e.NoModel = modelTerms(r)
			e.Detail = e.String() // the words, for clients that read them
		}
		return exWhy(e)
	}
	if len(sh.selector) > 0 || sh.stackOK != nil || sh.isoOK != nil || sh.container {
		if w := s.filteredOut(sh, r); w != nil {
			return w
		}
	}
	if sh.kind == gpufleet.MIG && sh.profile < 0 {
		sc := s.scanNodes(sh, r, nil, nil, false, modeNormal)
		e := s.explanation(ReasonUnplaceable, &sc)
		e.Profile = r.Sharing.Profile
		return exWhy(e)
	}
	// Never fits: on the fleet with nothing running, whatever the racks'
	// power now (it frees as work ends).
	f, resv, off := s.f, s.resv, s.pw.off
	s.f, s.resv, s.pw.off = s.ever, nil, true
	defer func() { s.f, s.resv, s.pw.off = f, resv, off }()
	if s.mayFit(sh, sh.models) {
		if _, ok := s.search(sh, sh.models, modeNormal); ok {
			return nil
		}
	}
	w := s.diagnose(sh, r, sh.models, nil, true, modeNormal)
	return &w
}

// filteredOut explains a shape the filters that no state of the fleet
// changes leave no node for, or nil: each node is counted under the first
// it fails, and the latest filter that left out the nodes that came
// closest is the reason. When some node passes (most shapes have one early
// in the fleet) the counts wait for a fit that fails.
func (s *sched) filteredOut(sh *shape, r *gpufleet.Resources) *why {
	if sh.scan == nil && s.anyPass(sh, r) {
		return nil
	}
	sc := s.scanNodes(sh, r, sh.models, nil, false, modeNormal)
	if sc.counts[fPass] > 0 {
		return nil
	}
	var e *gpufleet.Explanation
	switch sc.lastFilter() {
	case fRuntime:
		e = s.explanation(ReasonRuntimeMissing, &sc)
		e.Detail = e.String() // the words, for clients that read them
	case fIsolation, fOverhead:
		e = s.explanation(ReasonIsolation, &sc)
		e.Never, e.Isolation = true, s.isolationShortfall(sh)
		e.Detail = e.Isolation.String() // the words before Isolation, for clients that read them
	case fStack:
		e = s.explanation(ReasonStackMismatch, &sc)
		e.Stack = sh.stackWhy
		e.Detail = e.Stack.String() // the words before Stack, for clients that read them
	default:
		e = s.explanation(ReasonUnplaceable, &sc)
		e.Selector = selectorText(sh.selector)
	}
	return exWhy(e)
}

// exWhy is the reason an explanation gives, its sentence written once.
func exWhy(e *gpufleet.Explanation) *why {
	return &why{code: e.Code, text: e.String(), ex: e}
}

// modelTerms is a request's constraints on the GPU model, as data.
func modelTerms(r *gpufleet.Resources) *gpufleet.ModelTerms {
	m := &gpufleet.ModelTerms{GPUModels: r.GPUModels, GPUMemoryMinBytes: r.GPUMemoryMinBytes, Precision: string(r.Precision)}
	if !r.MinComputeCapability.IsZero() {
		m.MinComputeCapability = r.MinComputeCapability.String()
	}
	if r.Sharing.Kind == gpufleet.MIG {
		m.MIGProfile = r.Sharing.Profile
	}
	if len(r.NodeSelector) > 0 {
		var sel [][2]string
		for _, k := range sortedKeys(r.NodeSelector) {
			sel = append(sel, [2]string{k, r.NodeSelector[k]})
		}
		m.NodeSelector = selectorText(sel)
	}
	return m
}

// isolationShortfall is what the job requires and what the fleet's
// mechanisms that do not meet it give.
func (s *sched) isolationShortfall(sh *shape) *gpufleet.IsolationShortfall {
	out := &gpufleet.IsolationShortfall{Mechanisms: []gpufleet.MechanismShortfall{}}
	if sh.iso != "" && sh.iso != gpufleet.IsolationAny {
		out.Isolation = sh.iso
	}
	if sh.overhead != nil {
		v := float64(*sh.overhead)
		out.OverheadMax = &v
	}
	for i, v := range s.f.virts {
		if !sh.isoOK[i] {
			m := gpufleet.MechanismOf(v, gpufleet.Sharing{Kind: sh.kind})
			out.Mechanisms = append(out.Mechanisms, gpufleet.MechanismShortfall{Name: m.Name, Isolation: m.Isolation(), Overhead: m.Overhead})
		}
	}
	return out
}

// selectorText writes a node selector as rack=r12,zone=a.
func selectorText(sel [][2]string) string {
	parts := make([]string, len(sel))
	for i, kv := range sel {
		parts[i] = kv[0] + "=" + kv[1]
	}
	return strings.Join(parts, ",")
}

// diagnose explains why a shape does not fit the current fleet on models
// (slow: those it waits out as too slow), with the counts that matter.
// never says the fleet is empty: it can never fit.
func (s *sched) diagnose(sh *shape, r *gpufleet.Resources, models, slow []int32, never bool, mode fitMode) why {
	f := s.f
	sc := s.scanNodes(sh, r, models, slow, true, mode)
	allowed := s.modelSet(models)
	code := ReasonCapacity
	e := &gpufleet.Explanation{Need: int(sh.gpus), Never: never}
	switch {
	case sh.kind == gpufleet.MIG:
		e.Exhausted, e.Most, e.Profile = gpufleet.DimMIGInstances, int(sc.most), f.profiles[sh.profile]
	case sh.kind == gpufleet.TimeSlice:
		e.Exhausted, e.Most, e.Share = gpufleet.DimTimeSlice, int(sc.most), float64(sh.units)/unit
	case !never && !sh.nvlink && !sh.multi && !s.spreadsAll(sh) && sc.counts[fPass] == 0 && sc.counts[fRackPower] > 0 && sc.lastFilter() == fRackPower:
		// The GPUs are there, their racks' power is not.
		code = ReasonRackPower
		e.Exhausted = gpufleet.DimRackPower
		e.Rack = &gpufleet.RackShortfall{Rack: s.pw.names[sc.rack], DrawWatts: sc.draw, AddWatts: sc.add,
			LimitWatts: sc.limit, BudgetWatts: sc.budget}
		e.Rack.NeverGPUs, e.Rack.NeverWatts = s.neverRack(sh, models)
	default:
		auto := true
		for _, m := range models {
			auto = auto && sh.spreads(f, m)
		}
		switch {
		case sh.nvlink && sh.gpus > 1 && sc.dom < 2 && !sh.multi:
			code = ReasonTopology
			e.Exhausted, e.Most = gpufleet.DimNVLinkDomain, int(sc.dom)
		case sh.multi:
			e.Exhausted, e.Need, e.PerNode, e.Most = gpufleet.DimNodes, int(sh.nodes), int(sh.perNode), int(sc.spread)
		case auto:
			e.Exhausted, e.Most = gpufleet.DimFleetGPUs, int(sc.total)
		case sh.nvlink:
			code = ReasonTopology
			e.Exhausted, e.Most = gpufleet.DimNVLinkDomain, int(sc.dom)
		default:
			e.Exhausted, e.Most = gpufleet.DimGPUs, int(sc.most)
		}
	}
	if never {
		code = ReasonUnplaceable
	} else if f.notReady {
		e.NotReady = s.notReadyMatching(sh, allowed)
	}
	ex := s.explanation(code, &sc)
	ex.Exhausted, ex.Need, ex.Most, ex.PerNode, ex.Never, ex.NotReady = e.Exhausted, e.Need, e.Most, e.PerNode, e.Never, e.NotReady
	ex.Profile, ex.Share, ex.Rack = e.Profile, e.Share, e.Rack
	return *exWhy(ex)
}

// notReadyMatching counts the nodes the shape may use that are not ready
// or have a GPU of an allowed model that is not.
func (s *sched) notReadyMatching(sh *shape, allowed []bool) int {
	c := 0
	for ni := range s.f.nodes {
		n := &s.f.nodes[ni]
		if !sh.selects(n) {
			continue
		}
		for gi := range n.gpus {
			if g := &n.gpus[gi]; allowed[g.model] && (!n.ready || !g.ready) {
				c++
				break
			}
		}
	}
	return c
}

// largestDomain is the most whole free GPUs of model m in one NVLink domain
// of a node.
func largestDomain(n *nodeSlot, m int32) int32 {
	var counts [64]int32
	var best int32
	for gi := range n.gpus {
		g := &n.gpus[gi]
		if g.model != m || g.domain < 0 || g.domain >= 64 || !wholeFree(n, g, false) {
			continue
		}
		counts[g.domain]++
		best = max(best, counts[g.domain])
	}
	if best == 0 {
		for gi := range n.gpus {
			if g := &n.gpus[gi]; g.model == m && wholeFree(n, g, false) {
				return 1
			}
		}
	}
	return best
}

// bare is an explanation of code with no node looked at, for the data
// the caller adds.
func bare(code string) *gpufleet.Explanation {
	return &gpufleet.Explanation{Code: code, NodesFiltered: []gpufleet.FilterCount{}}
}

// orderWhy explains a job that fits but waits behind blocker in strict
// order; the explanation is the same for every job behind it.
func (s *sched) orderWhy(blocker *pjob) why {
	if s.texts.order.ex == nil {
		e := bare(ReasonOrder)
		e.Blocker = &gpufleet.Blocker{Job: blocker.job.ID, Position: blocker.idx + 1}
		s.texts.order = *exWhy(e)
	}
	return s.texts.order
}

func (s *sched) reservationWhy(j *pjob) why {
	if !s.explain {
		return why{code: ReasonReservation}
	}
	r := s.resv
	e := bare(ReasonReservation)
	e.Reservation = &gpufleet.ReservationHold{Job: r.job.job.ID, Start: r.at}
	if s.brief {
		if s.texts.resv != r {
			e.Brief = true
			s.texts.resv, s.texts.resvWhy = r, *exWhy(e)
		}
		return s.texts.resvWhy
	}
	e.Reservation.EstimateS = j.est.Seconds()
	return *exWhy(e)
}

func (s *sched) cycleLimitWhy() why {
	if s.texts.limit.ex == nil {
		e := bare(ReasonCycleLimit)
		e.CycleLimit = s.cfg.MaxPlacementsPerCycle
		s.texts.limit = *exWhy(e)
	}
	return s.texts.limit
}

// withSearchLimit adds to a reason that the job did not look for victims
// because Config.MaxPreemptionSearches was reached. Many jobs share a
// reason's explanation: the one with the limit is made once per
// explanation it extends.
func (s *sched) withSearchLimit(w why) why {
	return s.extend(w, &s.texts.searchLimit, func(e *gpufleet.Explanation) { e.SearchLimit = s.cfg.MaxPreemptionSearches })
}

// withSpare adds to a reason the GPUs held free for production failover,
// once per explanation it extends.
func (s *sched) withSpare(w why) why {
	n := len(s.spare.allocs)
	if s.texts.spareN != n {
		s.texts.spare, s.texts.spareN = extension{}, n
	}
	return s.extend(w, &s.texts.spare, func(e *gpufleet.Explanation) { e.SpareHeld = n })
}

// extension remembers the explanations one addition (the spare, the
// search limit) made, by the explanation each extends, with its sentence;
// base and last are the latest asked for, as the jobs that wait for one
// reason come in runs.
type extension struct {
	by   map[*gpufleet.Explanation]extended
	base *gpufleet.Explanation
	last extended
}

// extended is an explanation an addition made, and its sentence.
type extended struct {
	ex   *gpufleet.Explanation
	text string
}

// extend is w with a copy of its explanation that add changes, made and
// rendered once per explanation it extends (read only, as w's).
func (s *sched) extend(w why, m *extension, add func(*gpufleet.Explanation)) why {
	base := w.ex
	if base == nil {
		base = s.codeExplanation(w.code)
	}
	if m.base != base {
		x, ok := m.by[base]
		if !ok {
			e := *base
			add(&e)
			x = extended{ex: &e, text: e.String()}
			if m.by == nil {
				m.by = map[*gpufleet.Explanation]extended{}
			}
			m.by[base] = x
		}
		m.base, m.last = base, x
	}
	w.ex, w.text = m.last.ex, m.last.text
	return w
}

// briefTexts holds the explanations shared by many jobs: those of jobs
// past Config.ReasonDepth (brief), which leave out the figures of the
// job, and those that are the same for every job.
type briefTexts struct {
	order, limit why
	resv         *reservation // the reservation resvWhy is about
	resvWhy      why
	slower       map[int32]why // per model
	quota        map[[2]int32]why
	searchLimit  extension
	spare        extension // for spareN GPUs
	spareN       int
}

// briefQuota is a quota reason without the team's figures.
func (s *sched) briefQuota(w why) why {
	limit := int32(0)
	if w.limit {
		limit = 1
	}
	key := [2]int32{w.class, limit}
	if t, ok := s.texts.quota[key]; ok {
		return t
	}
	e := bare(w.code)
	e.Exhausted, e.Brief = gpufleet.DimQuota, true
	e.Quota = &gpufleet.QuotaShortfall{Class: s.classes[w.class], LimitReached: w.limit}
	if s.texts.quota == nil {
		s.texts.quota = map[[2]int32]why{}
	}
	t := *exWhy(e)
	s.texts.quota[key] = t
	return t
}

package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Preemption reason codes.
const (
	PreemptPriority = gpufleet.StopPreemptedPriority // for a job of a higher class
	PreemptReclaim  = gpufleet.StopPreemptedReclaim  // borrowed capacity returned to its owner
)

// preemptSearch is what only the preemption searches of one Schedule call
// use: priority and reclaim preemption (preempt), starvation preemption
// (starvePreempt) and its bound on estimated starts (starveBound). It is
// the sched's (sched.pre): buildRunning lists the possible victims, the
// searches of the cycle fill the rest as they run; the ETA simulation
// does not preempt and leaves it alone.
type preemptSearch struct {
	// nodeRuns lists per node, by index, the running jobs a search may
	// stop there or count on, as the cycle began: the preemptible ones
	// neither stopping nor protected, and the stopping ones (victimsOn
	// judges each again; the preemption index is built from it);
	// victimAt is the nodes with any, in index order.
	nodeRuns [][]*rjob
	victimAt []int32
	fails    map[preemptKey]bool // failed searches this cycle (preemptKeyOf)
	// starveTries counts the starvation preemption searches this cycle
	// (Config.StarvationMaxTries).
	starveTries int
	// boundVictims are the preemptible running jobs, longest running
	// first, for starveBound; built lazily.
	boundVictims []*rjob

	// scratch of victimsOn and pickFrom
	victimBuf []*rjob
	availBuf  []bool
	domBuf    []int32
}

// scanAllVictimNodes makes preempt visit every node with preemptible work
// and cache failed searches per team, as it did before the preemption
// index and its cache key: tests compare the two (export_test.go). It is
// never set outside tests.
var scanAllVictimNodes bool

// mayPreempt says whether running job v may be stopped for queued job j.
// Only preemptible jobs, and only of a lower class, or (with quotas) jobs
// running on borrowed capacity: of a lower class, or of any class when j
// claims its own guaranteed quota back (reclaim).
func (s *sched) mayPreempt(v *rjob, j *pjob, reclaim bool, class int32) bool {
	if !v.job.Preemptible || v.victim || v.protected {
		return false
	}
	lower := v.rank > j.rank
	if !s.cfg.Quotas || v.team == j.team {
		return lower
	}
	if !v.borrowed {
		return false
	}
	return lower || (reclaim && v.g.class == class)
}

// preemptQuota says whether j's team may take model m by preemption at
// all (its borrowing limit allows the charge) and whether it would
// reclaim its own guaranteed quota (then borrowed work of any class may be
// stopped for it).
func (s *sched) preemptQuota(j *pjob, m int32) (allowed, reclaim bool) {
	class := s.f.models[m].class
	if !s.cfg.Quotas || class < 0 {
		return true, false
	}
	charge := s.charge(j.shape, m)
	ts := &s.teams[j.team]
	if ts.limit >= 0 && ts.used[class]+charge > ts.quota[class]+ts.limit {
		return false, false
	}
	return true, ts.used[class]+charge <= ts.quota[class]
}

// preemptKey is what decides a preemption search's answer in a cycle,
// the key of the cache of failed searches. Within a cycle the possible
// victims only leave (chosen, or claimed when stopping), free GPUs only
// shrink and quota use only grows, so a search that failed keeps failing:
// its entry holds for the rest of the cycle and no change of the victims'
// set can invalidate it. The shape, the preemptor's class rank and, with
// quotas, the models the team's borrowing limit allows and those on which
// it reclaims decide the answer; the team only when it has work that only
// it may stop, or must not reclaim (preemptIndex.teamMatters). Then the
// entry is the team's, and the two model masks, which only ever move
// toward failure, are left out. The number of entries is bounded by
// shapes x classes (x teams), not by the length of the queue.
type preemptKey struct {
	shape, rank, team int32 // team -1: any team
	allowed, reclaim  uint64
}

// preemptKeyOf is j's preemptKey.
func (s *sched) preemptKeyOf(x *preemptIndex, j *pjob) preemptKey {
	sh := j.shape
	k := preemptKey{shape: sh.id, rank: int32(j.rank), team: -1}
	if !s.cfg.Quotas {
		return k
	}
	for i, m := range sh.models {
		allowed, reclaim := s.preemptQuota(j, m)
		if i >= 64 || x.teamMatters(j.team, m, int32(j.rank), reclaim) {
			return preemptKey{shape: sh.id, rank: int32(j.rank), team: j.team}
		}
		if allowed {
			k.allowed |= 1 << i
		}
		if reclaim {
			k.reclaim |= 1 << i
		}
	}
	return k
}

// everyVictimNode visits every node with preemptible or stopping work, in
// index order: the scan the preemption index replaces (scanAllVictimNodes).
func (s *sched) everyVictimNode(_ *pjob, _ int32, _ bool, _ int32, visit func(ni int32) bool) {
	for _, ni := range s.pre.victimAt {
		if !visit(ni) {
			return
		}
	}
}

// victimSet is one node's way to make room by preemption.
type victimSet struct {
	ok      bool
	node    int32
	model   int32
	gpus    []int32
	victims []*rjob
	cost    [4]int64
	reclaim bool
}

// preempt looks for running jobs to stop so that j fits on one node,
// losing the least work: victims of the lowest classes first, the most
// recently started first; nodes compare by the highest class they would
// stop, then GPU-seconds lost, then victim count. On success the victims
// are reported, the free GPUs of the chosen node are claimed for j, and j
// waits for the victims to stop (it is placed in a later cycle).
//
// Candidate nodes come from the preemption index (preemptidx.go), in node
// order; a failed search is cached (preemptKeyOf) for the rest of the
// cycle; at most Config.MaxPreemptionSearches searches run per cycle, in
// cluster order.
func (s *sched) preempt(j *pjob) bool {
	sh := j.shape
	if sh.kind != gpufleet.Exclusive || sh.multi || len(s.pre.victimAt) == 0 {
		return false
	}
	x := s.preemptIdx()
	key, walk := s.preemptKeyOf(x, j), x.nodes
	if scanAllVictimNodes {
		key, walk = preemptKey{shape: sh.id, rank: int32(j.rank), team: j.team}, s.everyVictimNode
	}
	if s.pre.fails[key] {
		return false
	}
	if limit := s.cfg.MaxPreemptionSearches; limit > 0 && s.out.Stats.PreemptionSearches >= limit {
		s.out.Stats.PreemptionSearchesSkipped++
		return false
	}
	s.out.Stats.PreemptionSearches++
	var best victimSet
	for _, m := range sh.models {
		if sh.gpus > s.f.maxK[m] {
			continue
		}
		class := s.f.models[m].class
		allowed, reclaim := s.preemptQuota(j, m)
		if !allowed {
			continue
		}
		found := 0
		walk(j, m, reclaim, sh.gpus, func(ni int32) bool {
			vs := s.victimsOn(j, ni, m, reclaim, class)
			if !vs.ok {
				return true
			}
			vs.reclaim = reclaim
			found++
			if !best.ok || slices.Compare(vs.cost[:], best.cost[:]) < 0 {
				best = vs
				best.victims = slices.Clone(vs.victims) // vs's are scratch
			}
			return found < s.maxPreemptNodes()
		})
		if best.ok && sh.prefer {
			break
		}
	}
	if !best.ok {
		s.pre.fails[key] = true
		return false
	}
	var allocs []alloc
	for _, gi := range best.gpus {
		allocs = append(allocs, alloc{node: best.node, gpu: gi, inst: -1, units: unit, whole: true})
	}
	s.commitPreemption(j, allocs, best.victims, false, func(v *rjob) (gpufleet.StopCode, string) {
		if best.reclaim && v.team != j.team {
			return PreemptReclaim, fmt.Sprintf("preempted to return borrowed %s capacity to team %s (job %s)", s.className(v.g.class), j.job.Team, j.job.ID)
		}
		return PreemptPriority, fmt.Sprintf("preempted for job %s (%s)", j.job.ID, s.outranks(j, v))
	})
	return true
}

// commitPreemption stops victims for j, which is to run on allocs (victims
// stopping already are counted on, not stopped again). On the
// capacity model the victims' GPUs in allocs pass to a claim for j at
// once, so that no later job of this cycle takes them and no later
// reservation counts on them; their other GPUs, and their quota use, stay
// held until the victim's grace ends. Every victim is reported with its
// reason code and words, and j waits for them to stop (the ETA pass
// starts it when the longest grace ends).
func (s *sched) commitPreemption(j *pjob, allocs []alloc, victims []*rjob, starving bool, reason func(*rjob) (gpufleet.StopCode, string)) {
	held := make(map[[2]int32]bool, len(allocs))
	for _, a := range allocs {
		held[[2]int32{a.node, a.gpu}] = true
	}
	// GPUs only change hands here, none comes free: cached "does not fit"
	// answers still hold.
	ep := s.f.epoch
	defer func() { s.f.epoch = ep }()
	var grace time.Duration
	already := 0
	if x := s.f.pidx; x != nil {
		for _, v := range victims {
			x.removeVictim(v)
		}
	}
	for _, v := range victims {
		v.victim, v.claimed = true, true
		s.releaseGrant(v.g)
		v.g.gen++ // its end event is void
		// The rest of the victim, quota use included, ends with its grace.
		rest := &grant{team: v.g.team, class: v.g.class, charge: v.g.charge}
		for _, a := range v.g.allocs {
			if !held[[2]int32{a.node, a.gpu}] {
				rest.allocs = append(rest.allocs, a)
			}
		}
		s.grantWatts(rest, v.job.Priority) // its GPUs that are not claimed draw until its grace ends
		s.takeGrant(rest)
		if v.stopping {
			// Stopping already: no new stop, it leaves when its grace ends.
			s.events.push(event{at: v.stopEnd, g: rest, gen: rest.gen})
			grace = max(grace, v.stopEnd.Sub(s.now))
			already++
			continue
		}
		g := s.graceOf(v.job)
		s.events.push(event{at: s.now.Add(g), g: rest, gen: rest.gen})
		grace = max(grace, g)
		code, text := reason(v)
		st := Stop{Job: v.job.ID, For: j.job.ID, Reason: fmt.Sprintf("%s; grace %s to checkpoint", text, g), Code: code, Grace: g, Bound: s.boundReached(v.job)}
		if st.Bound != "" {
			st.Reason += "; " + st.Bound
		}
		s.out.Stops = append(s.out.Stops, st)
		s.out.Stats.Preempted++
	}
	claim := &grant{team: j.team, class: -1, allocs: allocs}
	s.grantWatts(claim, j.job.Priority) // the preemptor's draw, counted from now
	s.takeGrant(claim)
	s.claims = append(s.claims, claimAt{g: claim, at: s.now.Add(grace)})
	preempted := true // every victim stopped for a preemptor, this cycle or before
	for _, v := range victims {
		preempted = preempted && (!v.stopping || v.job.StopCode.IsPreemption())
	}
	code := ReasonPreempting
	if !preempted && already == len(victims) {
		// Nothing stopped for it: it waits for GPUs that are leaving.
		code = ReasonCapacity
	}
	if !s.explain {
		j.why = why{code: code}
		return
	}
	e := bare(code)
	e.Preemption = &gpufleet.Preemption{Victims: len(victims), GraceS: grace.Seconds(), Stopping: !preempted, Starving: starving}
	j.why = *exWhy(e)
}

// victimsOn finds the cheapest set of victims on one node that makes room
// for j on model m.
func (s *sched) victimsOn(j *pjob, ni, m int32, reclaim bool, class int32) victimSet {
	n := &s.f.nodes[ni]
	if s.f.mfIndex(n, m) < 0 || !j.shape.selects(n) {
		return victimSet{}
	}
	cands := s.pre.victimBuf[:0]
	defer func() { s.pre.victimBuf = cands[:0] }()
	for _, v := range s.pre.nodeRuns[ni] {
		if (v.stopping && !v.claimed || s.mayPreempt(v, j, reclaim, class)) && holdsWhole(v, ni, n, m) {
			cands = append(cands, v)
		}
	}
	if len(cands) == 0 {
		return victimSet{}
	}
	// Jobs stopping already come first: their GPUs are leaving anyway,
	// and counting on them keeps a later cycle from stopping more jobs
	// for the same preemptor while the first ones checkpoint.
	slices.SortFunc(cands, func(a, b *rjob) int {
		if a.stopping != b.stopping {
			if a.stopping {
				return -1
			}
			return 1
		}
		if a.stopping {
			if c := a.stopEnd.Compare(b.stopEnd); c != 0 {
				return c
			}
			return strings.Compare(a.job.ID, b.job.ID)
		}
		if c := cmp.Compare(b.rank, a.rank); c != 0 {
			return c
		}
		if c := b.job.Started.Compare(a.job.Started); c != 0 {
			return c
		}
		return strings.Compare(a.job.ID, b.job.ID)
	})
	avail := s.pre.availBuf[:0]
	for range n.gpus {
		avail = append(avail, false)
	}
	s.pre.availBuf = avail
	for gi := range n.gpus {
		avail[gi] = n.gpus[gi].model == m && wholeFree(n, &n.gpus[gi], false)
	}
	for i, v := range cands {
		for _, a := range v.g.allocs {
			if a.node == ni && a.inst < 0 && !n.gpus[a.gpu].reserved {
				avail[a.gpu] = true
			}
		}
		gpus, ok := s.pre.pickFrom(n, m, avail, j.shape.gpus, j.shape.nvlink)
		if !ok {
			continue
		}
		vs := victimSet{ok: true, node: ni, model: m, gpus: gpus, victims: cands[:i+1]}
		top := math.MaxInt32 // above every rank
		var lost, stopped int64
		for _, v := range vs.victims {
			if v.stopping {
				continue // costs nothing more
			}
			stopped++
			top = min(top, v.rank)
			lost += int64(s.now.Sub(v.job.Started).Seconds()) * int64(len(v.g.allocs))
		}
		vs.cost = [4]int64{-int64(top), lost, stopped, int64(ni)}
		return vs
	}
	return victimSet{}
}

// holdsWhole reports whether v holds a whole GPU of model m on node ni.
func holdsWhole(v *rjob, ni int32, n *nodeSlot, m int32) bool {
	for _, a := range v.g.allocs {
		if a.node == ni && a.whole && n.gpus[a.gpu].model == m {
			return true
		}
	}
	return false
}

// pickFrom chooses need GPUs among the available ones, inside one NVLink
// domain when one holds them (required when nvlink): the domain with the
// fewest available GPUs that holds them, the lowest domain first; its
// GPUs in index order. The slice returned is the caller's.
func (ps *preemptSearch) pickFrom(n *nodeSlot, m int32, avail []bool, need int32, nvlink bool) ([]int32, bool) {
	count := ps.domBuf[:0] // per domain, available GPUs of model m
	var all int32
	for gi, ok := range avail {
		if !ok || n.gpus[gi].model != m {
			continue
		}
		all++
		if d := n.gpus[gi].domain; d >= 0 {
			for int(d) >= len(count) {
				count = append(count, 0)
			}
			count[d]++
		}
	}
	ps.domBuf = count
	if all < need {
		return nil, false
	}
	bestDom, bestLen := int32(-1), int32(1<<30)
	for d, c := range count {
		if c >= need && c < bestLen {
			bestDom, bestLen = int32(d), c
		}
	}
	if bestDom < 0 && nvlink && need > 1 {
		return nil, false
	}
	out := make([]int32, 0, need)
	for gi, ok := range avail {
		if ok && n.gpus[gi].model == m && (bestDom < 0 || n.gpus[gi].domain == bestDom) {
			out = append(out, int32(gi))
			if int32(len(out)) == need {
				break
			}
		}
	}
	return out, true
}

func (s *sched) className(c int32) string {
	if c < 0 {
		return "unquoted"
	}
	return s.classes[c]
}

// claimAt is a preemptor's claim on GPUs and when its victims are gone.
type claimAt struct {
	g  *grant
	at time.Time
}

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
func (s *sched) preempt(j *pjob) bool {
	sh := j.shape
	if sh.kind != gpufleet.Exclusive || sh.multi || len(s.victimAt) == 0 {
		return false
	}
	key := failKey{shape: sh.id, mask: uint64(j.rank)<<32 | uint64(j.team), mode: modePreempt}
	if _, ok := s.fails[key]; ok {
		return false
	}
	var best victimSet
	for _, m := range sh.models {
		if sh.gpus > s.f.maxK[m] {
			continue
		}
		class := s.f.models[m].class
		charge := s.charge(sh, m)
		reclaim := false
		if s.cfg.Quotas && class >= 0 {
			ts := &s.teams[j.team]
			if ts.limit >= 0 && ts.used[class]+charge > ts.quota[class]+ts.limit {
				continue
			}
			reclaim = ts.used[class]+charge <= ts.quota[class]
		}
		found := 0
		for _, ni := range s.victimAt {
			if s.nodeLow[ni] <= j.rank && !(reclaim && s.nodeBorrowed[ni]) {
				continue // nothing here j may stop
			}
			vs := s.victimsOn(j, ni, m, reclaim, class)
			if !vs.ok {
				continue
			}
			vs.reclaim = reclaim
			found++
			if !best.ok || slices.Compare(vs.cost[:], best.cost[:]) < 0 {
				best = vs
			}
			if found >= s.maxPreemptNodes() {
				break
			}
		}
		if best.ok && sh.prefer {
			break
		}
	}
	if !best.ok {
		s.fails[key] = failEntry{}
		return false
	}
	var allocs []alloc
	for _, gi := range best.gpus {
		allocs = append(allocs, alloc{node: best.node, gpu: gi, inst: -1, units: unit, whole: true})
	}
	s.commitPreemption(j, allocs, best.victims, "", func(v *rjob) (string, string) {
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
func (s *sched) commitPreemption(j *pjob, allocs []alloc, victims []*rjob, prefix string, reason func(*rjob) (string, string)) {
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
	s.takeGrant(claim)
	s.claims = append(s.claims, claimAt{g: claim, at: s.now.Add(grace)})
	preempted := true // every victim stopped for a preemptor, this cycle or before
	for _, v := range victims {
		preempted = preempted && (!v.stopping || strings.HasPrefix(v.job.StopCode, "preempted_"))
	}
	if !preempted && already == len(victims) {
		// Nothing stopped for it: it waits for GPUs that are leaving.
		verb := "leave"
		if already == 1 {
			verb = "leaves"
		}
		j.why = why{code: ReasonCapacity, text: fmt.Sprintf("the GPUs it needs come free when %s %s (grace up to %s)",
			plural(int32(already), "stopping job"), verb, grace)}
		return
	}
	noun := "preempted job"
	if !preempted {
		noun = "stopping job"
	}
	j.why = why{code: ReasonPreempting, text: prefix + fmt.Sprintf("waiting for %s to stop (grace up to %s)", plural(int32(len(victims)), noun), grace)}
}

// victimsOn finds the cheapest set of victims on one node that makes room
// for j on model m.
func (s *sched) victimsOn(j *pjob, ni, m int32, reclaim bool, class int32) victimSet {
	n := &s.f.nodes[ni]
	if s.f.mfIndex(n, m) < 0 || !selectorOK(n, j.shape.selector) {
		return victimSet{}
	}
	var cands []*rjob
	for _, v := range s.nodeRuns[ni] {
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
	avail := make([]bool, len(n.gpus))
	for gi := range n.gpus {
		avail[gi] = n.gpus[gi].model == m && wholeFree(n, &n.gpus[gi], false)
	}
	for i, v := range cands {
		for _, a := range v.g.allocs {
			if a.node == ni && a.inst < 0 && !n.gpus[a.gpu].reserved {
				avail[a.gpu] = true
			}
		}
		gpus, ok := pickFrom(n, m, avail, j.shape.gpus, j.shape.nvlink)
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
// domain when one holds them (required when nvlink).
func pickFrom(n *nodeSlot, m int32, avail []bool, need int32, nvlink bool) ([]int32, bool) {
	byDom := map[int32][]int32{}
	var all []int32
	for gi, ok := range avail {
		if !ok || n.gpus[gi].model != m {
			continue
		}
		all = append(all, int32(gi))
		byDom[n.gpus[gi].domain] = append(byDom[n.gpus[gi].domain], int32(gi))
	}
	if int32(len(all)) < need {
		return nil, false
	}
	bestDom, bestLen := int32(-2), 1<<30
	for _, d := range sortedKeys(byDom) {
		if d >= 0 && int32(len(byDom[d])) >= need && len(byDom[d]) < bestLen {
			bestDom, bestLen = d, len(byDom[d])
		}
	}
	if bestDom >= 0 {
		return slices.Clone(byDom[bestDom][:need]), true
	}
	if nvlink && need > 1 {
		return nil, false
	}
	return all[:need], true
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

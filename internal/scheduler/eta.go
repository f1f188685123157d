package scheduler

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
)

// The ETA is a forward simulation through the same placement code: from
// the state the cycle leaves, running jobs end at Started+Estimate (now if
// overdue; preempted ones after their grace), and at each end the queue is
// tried again in cluster order under the same policy (strict order, EASY
// backfill with the head's reservation, quotas). The order is computed
// again as simulated time passes (reorder), when the arrivals expected by
// then (Config.ArrivalWindow) join the queue. A job's estimated start is
// the simulated time it starts. Each job is placed once; jobs with the
// same shape are grouped, so a moment at which a shape cannot fit costs
// one cached check, not one per queued job.

// etaSim is what only the ETA simulation of one Schedule call uses: the
// queue it walks, the groups of one shape it looks at again only when
// capacity or quota they could use moves, the teams' simulated usage and
// the arrivals it expects. It is the sched's (sched.eta): estimate builds
// it from the queue the cycle leaves, on the cycle's fleet, teams and
// events. classGen and resvGen are versions the groups compare: the
// cycle's grants and reservation move them as well as the simulation's,
// and only the simulation reads them.
type etaSim struct {
	groups []*simGroup // every group made so far; those of the queue have subs
	queue  []*pjob     // in the simulation's cluster order (reorder sorts it again)
	open   openList    // queue's jobs not started yet
	left   int         // how many of them
	sheap  subHeap     // groupPhase's sub-queues, by position
	use    simUse
	real   int     // queued jobs not yet started in the simulation, not counting expected ones
	future []*pjob // expected arrivals not yet in the queue, by arrival
	// classGen grows when a class's quota reserve may shrink.
	classGen []uint32
	// resvGen grows when the backfill reservation is made, taken or
	// dropped.
	resvGen uint32
}

// simGroup is the queued jobs of one shape, split by team (quotas differ
// per team).
type simGroup struct {
	sh   *shape
	subs []*simSub
	left int
	dead [4]bool // per fitMode, within one simulated moment
	prod bool    // some job of it is production (may use racks' reserves)

	// A group is looked at again only when capacity it could use was
	// freed (stamp) or a quota that held one of its teams moved (waits).
	checked bool
	stamp   uint64
	waits   []quotaWait
}

// quotaWait is a team held by quota: by its borrowing limit (it waits for
// its own use to shrink) or by capacity reserved for owners (it waits for
// the class's reserve to move).
type quotaWait struct {
	team, class int32
	limit       bool
	gen         uint32
}

// quotaMoved reports whether any quota that held the group has moved.
func (s *sched) quotaMoved(g *simGroup) bool {
	for _, w := range g.waits {
		if w.limit && s.teams[w.team].gen != w.gen || !w.limit && s.eta.classGen[w.class] != w.gen {
			return true
		}
	}
	return false
}

// simSub is one team's jobs of a shape, in cluster order.
type simSub struct {
	g     *simGroup
	jobs  []*pjob
	open  openList
	ests  minTree // estimates of open jobs, to find the next short one
	scan  int32
	first int32
}

// minTree is a segment tree of minimums: the first job at or after an
// index with an estimate within a bound, in O(log n).
type minTree struct {
	n int
	t []int64
}

func newMinTree(vals []int64) minTree {
	n := 1
	for n < len(vals) {
		n *= 2
	}
	m := minTree{n: n, t: make([]int64, 2*n)}
	for i := range m.t[n:] {
		m.t[n+i] = math.MaxInt64
	}
	copy(m.t[n:], vals)
	for i := n - 1; i >= 1; i-- {
		m.t[i] = min(m.t[2*i], m.t[2*i+1])
	}
	return m
}

func (m *minTree) set(i int, v int64) {
	i += m.n
	m.t[i] = v
	for i > 1 {
		i /= 2
		m.t[i] = min(m.t[2*i], m.t[2*i+1])
	}
}

// first returns the first index >= from whose value is <= x, or -1.
func (m *minTree) first(from int, x int64) int {
	var rec func(node, lo, hi int) int
	rec = func(node, lo, hi int) int {
		if hi <= from || m.t[node] > x {
			return -1
		}
		if hi-lo == 1 {
			return lo
		}
		mid := (lo + hi) / 2
		if r := rec(2*node, lo, mid); r >= 0 {
			return r
		}
		return rec(2*node+1, mid, hi)
	}
	return rec(1, 0, m.n)
}

// openList finds the next unstarted job after skipping started ones, with
// path compression so long runs of started jobs are skipped at once.
type openList struct{ next []int32 }

func newOpenList(n int) openList {
	o := openList{next: make([]int32, n+1)}
	for i := range o.next {
		o.next[i] = int32(i)
	}
	return o
}

// find returns the first open index >= i (len when none).
func (o *openList) find(i int32) int32 {
	r := i
	for o.next[r] != r {
		r = o.next[r]
	}
	for o.next[i] != r {
		o.next[i], i = r, o.next[i]
	}
	return r
}

func (o *openList) close(i int32) { o.next[i] = i + 1 }

// estimate runs the simulation and sets startAt on every job it starts.
func (s *sched) estimate() {
	s.explain = false
	s.f.pidx = nil // no preemption in the simulation
	for _, c := range s.claims {
		s.events.push(event{at: c.at, g: c.g, gen: c.g.gen})
	}
	var queue []*pjob
	for _, j := range s.pending {
		if !j.started && j.static == nil {
			queue = append(queue, j)
		}
	}
	s.eta.real = len(queue)
	s.eta.future = s.expectedArrivals()
	s.eta.index(queue)
	s.eta.use = simUse{at: s.now, usage: make([]float64, len(s.teams)), rate: make([]float64, len(s.teams))}
	for i := range s.teams {
		s.eta.use.usage[i] = s.teams[i].usage
	}
	for _, e := range s.events.ev {
		if e.gen == e.g.gen {
			s.eta.use.rate[e.g.team] += allocGPUs(e.g.allocs)
		}
	}
	t := s.now
	next := s.now.Add(ETAReorderFirst) // the next re-ordering
	for {
		if (s.orderMoves() || len(s.eta.future) > 0) && !t.Before(next) {
			s.reorder(t)
			for h := next.Sub(s.now); !t.Before(next); next = s.now.Add(h) {
				if h >= maxETA {
					// ETAs stop at maxETA: re-sorting further is no use, and the
					// simulated time may pass the longest duration there is.
					next = time.Unix(math.MaxInt64/4, 0)
					break
				}
				h = s.nextHorizon(h)
			}
		}
		s.simCycle(t)
		if s.eta.real == 0 {
			return
		}
		for s.events.len() > 0 && s.events.peek().gen != s.events.peek().g.gen {
			s.events.pop()
		}
		if s.events.len() == 0 {
			return // the rest can never start (quota)
		}
		t = s.events.peek().at
		s.eta.use.accrue(t, s.cfg.UsageHalfLife)
		for s.events.len() > 0 && !s.events.peek().at.After(t) {
			e := s.events.pop()
			if e.gen == e.g.gen {
				s.releaseGrant(e.g)
				s.eta.use.rate[e.g.team] -= allocGPUs(e.g.allocs)
			}
		}
	}
}

// ETAReorderFirst is when the simulation first puts its queue back in
// the order the policy would give it then and lets in the arrivals it
// expects by then; it does so again at twice that time from now, four
// times, and so on (nextHorizon), so a simulation of a year sorts the
// queue about fourteen times.
const ETAReorderFirst = time.Hour

// nextHorizon is the re-ordering after the one at h from now: twice as far,
// but within Config.ArrivalWindow at most a sixth of the window further,
// so that expected arrivals come in at most that late (a day: every 4 h).
func (s *sched) nextHorizon(h time.Duration) time.Duration {
	if w := s.cfg.ArrivalWindow; h < w {
		return min(2*h, h+max(w/6, time.Minute), w)
	}
	return 2 * h
}

// expectedArrivals is the jobs the simulation expects to arrive, by
// arrival time: each job of Input.Arrivals submitted within
// Config.ArrivalWindow before now, submitted again a window later (the
// last window's stream repeats once). They are never shown; they take
// their turn in the order from the first re-ordering after they arrive.
func (s *sched) expectedArrivals() []*pjob {
	w := s.cfg.ArrivalWindow
	if w <= 0 {
		return nil
	}
	from := s.now.Add(-w)
	var out []*pjob
	for i := range s.in.Arrivals {
		a := &s.in.Arrivals[i]
		if a.Invalid != "" || a.Submitted.Before(from) || a.Submitted.After(s.now) {
			continue
		}
		sh := s.shapeOf(&a.Resources)
		if sh.invalid != "" {
			continue
		}
		j := *a
		j.ID = "expected/" + a.ID
		j.Submitted = a.Submitted.Add(w)
		j.Placement, j.Started, j.Requeued = nil, time.Time{}, false
		p := &pjob{job: &j, rank: s.rankOf(&j), team: s.team(j.Team), shape: sh, est: s.estimateOf(&j),
			submit: j.Submitted.UnixNano(), prod: j.Priority == gpufleet.Production, expected: true}
		if p.static = s.staticWhy(p); p.static != nil {
			continue
		}
		out = append(out, p)
	}
	slices.SortStableFunc(out, func(a, b *pjob) int { return cmp.Compare(a.submit, b.submit) })
	return out
}

// KeepArrivals is how callers keep Input.Arrivals: js appended (jobs just
// submitted, oldest first), then the jobs submitted more than window
// before now dropped, and the oldest beyond ArrivalHistory. A leader that
// takes over a queue of 50k passes them at once: one trim, not one each.
func KeepArrivals(arrivals []Job, now time.Time, window time.Duration, js ...Job) []Job {
	arrivals = append(arrivals, js...)
	from := now.Add(-window)
	i := 0
	for i < len(arrivals) && (arrivals[i].Submitted.Before(from) || len(arrivals)-i > ArrivalHistory) {
		i++
	}
	return slices.Delete(arrivals, 0, i)
}

// ArrivalHistory bounds Input.Arrivals: at most this many of the newest
// arrivals are expected again.
const ArrivalHistory = 4096

// index makes queue, in cluster order, the simulation's queue: its
// shapes' groups and their team sub-queues, the open lists and the trees
// of estimates.
func (e *etaSim) index(queue []*pjob) {
	for _, g := range e.groups {
		g.subs, g.left, g.checked, g.prod = g.subs[:0], 0, false, false
	}
	for i, j := range queue {
		j.simIdx = int32(i)
		g := j.shape.group
		if g == nil {
			g = &simGroup{sh: j.shape}
			j.shape.group = g
			e.groups = append(e.groups, g)
		}
		g.left++
		g.prod = g.prod || j.prod
		var sub *simSub
		for _, x := range g.subs {
			if x.jobs[0].team == j.team {
				sub = x
				break
			}
		}
		if sub == nil {
			sub = &simSub{g: g}
			g.subs = append(g.subs, sub)
		}
		j.sub, j.subIdx = sub, int32(len(sub.jobs))
		sub.jobs = append(sub.jobs, j)
	}
	for _, g := range e.groups {
		for _, sub := range g.subs {
			sub.open = newOpenList(len(sub.jobs))
			ests := make([]int64, len(sub.jobs))
			for i, j := range sub.jobs {
				ests[i] = int64(j.est)
			}
			sub.ests = newMinTree(ests)
		}
	}
	e.queue, e.open, e.left = queue, newOpenList(len(queue)), len(queue)
}

// orderMoves reports whether the cluster order changes as time passes:
// response ratios and Slurm's age grow at rates that differ by job, and
// jobs reach the starvation threshold.
func (s *sched) orderMoves() bool {
	return s.cfg.SizeSlack > 0 && s.cfg.ResponseRatio || s.cfg.Multifactor != nil || s.cfg.StarvationSlowdown > 0
}

// reorder puts the jobs the simulation has not started in the order the
// policy gives them at t (the same order function, as if the cycle ran
// then), so that a short job submitted late passes long ones as its
// response ratio grows, as it will in the cycles to come, and teams'
// usage is what the simulated runs have added to it (simUse). The head's
// reservation is dropped: the next simulated moment reserves for the new
// head.
func (s *sched) reorder(t time.Time) {
	left := s.eta.unstarted(t)
	qs := make([]queued, len(left))
	for i, j := range left {
		qs[i] = queued{job: j.job, shape: j.shape, rank: int32(j.rank), team: j.team, est: j.est, submit: j.submit, prod: j.prod}
	}
	now := s.now
	s.now = t
	for i := range s.teams {
		s.teams[i].usage, s.eta.use.usage[i] = s.eta.use.usage[i], s.teams[i].usage
	}
	perm := s.order(qs)
	for i := range s.teams {
		s.teams[i].usage, s.eta.use.usage[i] = s.eta.use.usage[i], s.teams[i].usage
	}
	s.now = now
	queue := make([]*pjob, len(perm))
	for k, i := range perm {
		queue[k] = left[i]
	}
	if s.resv != nil {
		s.dropReservation()
		s.eta.resvGen++
	}
	s.eta.index(queue)
}

// unstarted is the queue's jobs not started yet, in its order, then the
// expected arrivals submitted by t, which leave future.
func (e *etaSim) unstarted(t time.Time) []*pjob {
	left := make([]*pjob, 0, e.left)
	for i := e.open.find(0); int(i) < len(e.queue); i = e.open.find(i + 1) {
		left = append(left, e.queue[i])
	}
	for len(e.future) > 0 && e.future[0].submit <= t.UnixNano() {
		left = append(left, e.future[0])
		e.future = e.future[1:]
	}
	return left
}

// simUse is the teams' decayed usage as the simulation runs: what they had
// at the cycle plus, from then, the GPUs their running and simulated jobs
// hold (rate) over time, halved every Config.UsageHalfLife as the caller
// does between cycles.
type simUse struct {
	at          time.Time
	usage, rate []float64
}

// accrue brings the simulated usage forward to t, halved every halfLife
// (none: no decay).
func (u *simUse) accrue(t time.Time, halfLife time.Duration) {
	dt := t.Sub(u.at).Seconds()
	if dt <= 0 {
		return
	}
	h := halfLife.Seconds()
	for i, r := range u.rate {
		if h > 0 {
			d := math.Exp2(-dt / h)
			u.usage[i] = u.usage[i]*d + r*h/math.Ln2*(1-d)
		} else {
			u.usage[i] += r * dt
		}
	}
	u.at = t
}

// allocGPUs is what a placement adds to its team's usage rate, in GPUs:
// whole GPUs and time-slice units at their fraction, a MIG instance at a
// seventh.
func allocGPUs(allocs []alloc) float64 {
	n := 0.0
	for _, a := range allocs {
		if a.inst >= 0 {
			n += 1.0 / 7
		} else {
			n += float64(a.units) / unit
		}
	}
	return n
}

// simStart starts a job in the simulation.
func (s *sched) simStart(j *pjob, p placement, t time.Time) {
	s.start(j, p, t)
	s.eta.started(j, p.allocs)
}

// started takes j, just started on allocs, off the queue, its group and
// its sub-queue, and adds its GPUs to its team's usage rate.
func (e *etaSim) started(j *pjob, allocs []alloc) {
	e.use.rate[j.team] += allocGPUs(allocs)
	if !j.expected {
		e.real--
	}
	e.left--
	j.shape.group.left--
	e.open.close(j.simIdx)
	j.sub.open.close(j.subIdx)
	j.sub.ests.set(int(j.subIdx), math.MaxInt64)
}

// simCycle is one simulated moment: the head of the queue first (strict
// order stops there; backfill reserves for it), then every shape that can
// fit, its jobs in cluster order.
func (s *sched) simCycle(t time.Time) {
	s.at = t
	// The reservation's job first: the scan below gives up after 32 jobs
	// held by quota, and may not reach it.
	if r := s.resv; r != nil && !r.job.started && !r.at.After(t) {
		held := s.dropReservation()
		if p, _, ok := s.place(r.job, modeNormal); ok {
			s.simStart(r.job, p, t)
			s.eta.resvGen++
		} else {
			s.applyReservation(held)
		}
	}
	if s.cfg.Backfill || s.cfg.StrictOrder {
		skipped := 0
		for i := s.eta.open.find(0); int(i) < len(s.eta.queue) && skipped < 32; i = s.eta.open.find(i + 1) {
			j := s.eta.queue[i]
			var held *reservation
			if s.resv != nil && s.resv.job == j {
				held = s.dropReservation()
			}
			p, w, ok := s.place(j, s.modeFor(j, t))
			if ok {
				s.simStart(j, p, t)
				continue
			}
			if held != nil {
				s.applyReservation(held)
			}
			if !w.capacity() {
				skipped++
				continue
			}
			if !s.cfg.Backfill {
				return
			}
			if s.resv == nil && !s.reserveFor(j, t) {
				skipped++
				continue
			}
			break
		}
		if !s.cfg.Backfill {
			return
		}
	}
	s.groupPhase(t)
}

// groupPhase starts what fits now, shape by shape, in cluster order.
func (s *sched) groupPhase(t time.Time) {
	h := &s.eta.sheap
	h.subs = h.subs[:0]
	loose := modeNormal
	if s.resv != nil {
		loose = modeShort
	}
	for _, g := range s.eta.groups {
		if g.left == 0 {
			continue
		}
		st := s.f.stamp(g.sh) + uint64(s.eta.resvGen) + s.pw.freed
		if g.checked && st == g.stamp && !s.quotaMoved(g) {
			continue
		}
		g.checked, g.stamp, g.waits = true, st, g.waits[:0]
		if !s.shapeFits(g, loose) {
			continue
		}
		g.dead = [4]bool{}
		for _, sub := range g.subs {
			sub.first = sub.open.find(sub.first)
			if int(sub.first) < len(sub.jobs) {
				sub.scan = sub.first
				h.push(sub)
			}
		}
	}
	for len(h.subs) > 0 {
		sub := h.pop()
		g := sub.g
		if g.dead[loose] {
			continue
		}
		j := sub.jobs[sub.scan]
		if s.resv == nil || s.resv.job != j {
			mode := s.modeFor(j, t)
			if !g.dead[mode] {
				p, w, ok := s.place(j, mode)
				switch {
				case ok:
					s.simStart(j, p, t)
				case w.code == ReasonSlowerModel:
					// It takes the slower model later: look again then.
					g.checked = false
					if d := s.slowerWaitAll(j); d > 0 {
						s.events.push(event{at: t.Add(d), g: &grant{class: -1}}) // holds nothing: a wake-up
					}
				case !w.capacity() && w.code != ReasonReservation:
					qw := quotaWait{team: j.team, class: w.class, limit: w.limit}
					if w.limit {
						qw.gen = s.teams[j.team].gen
					} else if w.class >= 0 {
						qw.gen = s.eta.classGen[w.class]
					}
					g.waits = append(g.waits, qw)
					continue // quota: this team's jobs of the shape wait
				default:
					g.dead[mode] = true
					if mode == modeShort {
						g.dead[modeLong] = true
					}
				}
			}
		}
		sub.scan = s.nextScan(sub, t)
		if int(sub.scan) < len(sub.jobs) && !g.dead[loose] {
			h.push(sub)
		}
	}
}

// nextScan moves a sub-queue to its next job worth trying: the next open
// one, or, when only jobs that end before the reservation can still fit,
// the next of those.
func (s *sched) nextScan(sub *simSub, t time.Time) int32 {
	i := sub.open.find(sub.scan + 1)
	g := sub.g
	if s.resv == nil || !g.dead[modeLong] || g.dead[modeShort] || int(i) >= len(sub.jobs) {
		return i
	}
	r := sub.ests.first(int(i), int64(s.resv.at.Sub(t)))
	if r < 0 {
		return int32(len(sub.jobs))
	}
	return int32(r)
}

// shapeFits checks, cached, whether any job of a group could fit: capacity
// on all its models and, with racks, power for the class of its jobs that
// draws least, with the production reserve if one of them is production
// (each job's own search then judges its own class).
func (s *sched) shapeFits(g *simGroup, mode fitMode) bool {
	sh := g.sh
	key := failKey{sh.id, ^uint64(0), mode, -1}
	if g.prod {
		key.power = -2
	}
	if e, ok := s.fails[key]; ok && e.epoch == s.f.epoch {
		return false
	}
	if mode != modeShort && !s.mayFit(sh, sh.models) {
		s.fails[key] = failEntry{epoch: s.f.epoch, why: why{code: ReasonCapacity}}
		return false
	}
	class, prod := s.pw.curClass, s.pw.curProd
	s.pw.curClass, s.pw.curProd = -1, g.prod
	_, ok := s.search(sh, sh.models, mode)
	s.pw.curClass, s.pw.curProd = class, prod
	if !ok {
		s.fails[key] = failEntry{epoch: s.f.epoch, why: why{code: ReasonCapacity}}
		return false
	}
	return true
}

// subHeap orders team sub-queues by their current job's cluster position.
type subHeap struct{ subs []subEntry }

type subEntry struct {
	pos int
	sub *simSub
}

func (h *subHeap) push(x *simSub) {
	h.subs = append(h.subs, subEntry{int(x.jobs[x.scan].simIdx), x})
	for i := len(h.subs) - 1; i > 0; {
		p := (i - 1) / 2
		if h.subs[i].pos >= h.subs[p].pos {
			break
		}
		h.subs[i], h.subs[p] = h.subs[p], h.subs[i]
		i = p
	}
}

func (h *subHeap) pop() *simSub {
	top := h.subs[0].sub
	last := len(h.subs) - 1
	h.subs[0] = h.subs[last]
	h.subs = h.subs[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && h.subs[l].pos < h.subs[m].pos {
			m = l
		}
		if r < last && h.subs[r].pos < h.subs[m].pos {
			m = r
		}
		if m == i {
			break
		}
		h.subs[i], h.subs[m] = h.subs[m], h.subs[i]
		i = m
	}
	return top
}

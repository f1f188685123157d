package scheduler

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Schedule decides one cycle: which queued jobs start now and where, which
// running jobs to preempt, and, for every job still queued, its position,
// the reason it waits and its estimated start. It is a pure function of
// its input: the same Input gives the same Output, whatever the order of
// Input.Nodes.
func Schedule(in Input) Output {
	s := newSched(&in, false)
	s.explain = true
	s.placeCycle()
	s.upgrade()
	pending := make([]*pjob, 0, len(s.pending))
	for _, j := range s.pending {
		if !j.started {
			pending = append(pending, j)
		}
	}
	s.out.Recheck = s.recheck(pending)
	if s.cfg.ETA {
		s.estimate()
	}
	var cal *etaCal
	if s.cfg.ETA {
		cal = newETACal(in.WaitHistory)
	}
	s.out.Pending = make([]Pending, 0, len(pending))
	teamPos := map[int32]int{}
	for i, j := range pending {
		teamPos[j.team]++
		ex, reason := s.explained(j.why, j.brief)
		p := Pending{Job: j.job.ID, Position: i + 1, TeamPosition: teamPos[j.team], ReasonCode: j.why.code, Reason: reason,
			Explanation: ex, Estimate: s.runEstimate(j.job)}
		if j.started && s.cfg.ETA {
			s.etaOf(&p, j, cal)
		}
		s.out.Pending = append(s.out.Pending, p)
	}
	return s.out
}

// etaOf fills a pending job's estimated start: the simulated start,
// capped by the policy's own bound, calibrated on recent waits.
func (s *sched) etaOf(p *Pending, j *pjob, cal *etaCal) {
	sim := j.startAt
	if b, ok := s.starveBound(j); ok && b.Before(sim) {
		sim = b
	}
	r := cal.rangeFor(j.job.Resources.GPUs, j.est, sim.Sub(s.now))
	p50 := s.now.Add(r.p50)
	p.Simulated, p.EstimatedStart = &sim, &p50
	if r.ok {
		p90 := s.now.Add(max(r.p90, r.p50))
		conf := r.confidence
		p.EstimatedStartP90, p.ETAConfidence = &p90, &conf
	}
}

// starveBound is the policy's own "no later than" for a queued job: with
// starvation preemption, once its slowdown reaches StarvationSlowdown it
// may stop a preemptible job of its class or lower that has run
// StarvationMinRun and has StarvationLeftFactor times its estimate left
// (and is not protected by its preemption bound), and
// starts about a grace later. The bound is the first moment such a victim
// exists, among the boundVictims running jobs that become eligible first;
// none, no bound. Whole GPUs only (shares and MIG instances do not preempt
// for starvation). It is a bound, not a promise: the victims must also
// free enough GPUs of a model the job may use.
func (s *sched) starveBound(j *pjob) (time.Time, bool) {
	if !s.cfg.Preemption || !s.cfg.ResponseRatio || s.cfg.StarvationSlowdown <= 0 || j.shape.kind != gpufleet.Exclusive {
		return time.Time{}, false
	}
	f := s.cfg.StarvationSlowdown - 1
	d := time.Duration(min(f*float64(max(j.est, time.Second)), float64(maxETA)))
	at := j.job.Submitted.Add(d)
	if at.Before(s.now) {
		at = s.now
	}
	if s.pre.boundVictims == nil {
		for _, v := range s.running {
			if v.job.Preemptible && !v.stopping {
				s.pre.boundVictims = append(s.pre.boundVictims, v)
			}
		}
		slices.SortFunc(s.pre.boundVictims, func(a, b *rjob) int {
			if c := a.job.Started.Compare(b.job.Started); c != 0 {
				return c
			}
			return strings.Compare(a.job.ID, b.job.ID)
		})
	}
	need := time.Duration(s.cfg.StarvationLeftFactor*float64(j.est)) + s.cfg.RestartCost
	for i, v := range s.pre.boundVictims {
		if i == maxBoundVictims {
			break
		}
		if v.rank < j.rank || v.protected || s.cfg.Quotas && v.team != j.team && v.g.class >= 0 && !v.borrowed {
			continue
		}
		t := at
		if e := v.job.Started.Add(s.cfg.StarvationMinRun); e.After(t) {
			t = e
		}
		if v.job.Started.Add(s.estimateOf(v.job)).Sub(t) >= need {
			return t.Add(s.cfg.DefaultGrace), true
		}
	}
	return time.Time{}, false
}

// maxBoundVictims bounds the running jobs starveBound looks at per job.
const maxBoundVictims = 64

// pjob is a queued job.
type pjob struct {
	job     *Job
	idx     int // cluster order, from 0
	rank    int
	team    int32
	shape   *shape
	est     time.Duration
	demand  int64   // milli-GPUs it would take, for the quota reserve
	classes []int32 // quota classes its demand counts against
	static  *why    // never placeable, with the reason
	tag     float64 // fair-share virtual start
	submit  int64   // submit time, Unix nanoseconds
	started bool    // started this cycle, or in the ETA simulation
	prod    bool    // production class: the failover spare is its own
	brief   bool    // past Config.ReasonDepth: its reason leaves out its figures
	starve  bool    // starving (Config.StarvationSlowdown)
	startAt time.Time
	why     why

	simIdx int32 // place in the simulation queue
	sub    *simSub
	subIdx int32
	// expected: not a queued job but one the ETA simulation expects to
	// arrive (Config.ArrivalWindow).
	expected bool
}

// rjob is a running job.
type rjob struct {
	job      *Job
	rank     int
	team     int32
	g        *grant
	victim   bool
	borrowed bool
	// protected: it has reached a preemption bound (Config.
	// MaxPreemptionsPerJob, PerDay) and is no victim; until when, or zero
	// for good.
	protected      bool
	protectedUntil time.Time
	// stopping jobs leave their GPUs at stopEnd (a stop of an earlier
	// cycle, or of this one's mustStop): a queued job may claim those GPUs
	// instead of stopping more jobs (claimed: one has).
	stopping, claimed bool
	stopEnd           time.Time
}

// grant is what a started job holds, as the capacity model and the quota
// accounting see it.
type grant struct {
	allocs []alloc
	team   int32
	class  int32 // quota class, -1 for none
	charge int64 // milli-GPUs
	gen    uint32
	// watts is what the grant adds to its racks' draw (Input.Racks); a
	// running job's is counted in the racks' measured draw already, so it
	// is set only after the grant was taken.
	watts []rackWatts
}

// teamState is a team's quota accounting, in milli-GPUs per quota class.
type teamState struct {
	name   string
	weight float64
	usage  float64
	limit  int64  // borrowing limit, -1 for none
	gen    uint32 // grows when the team's use shrinks
	quota  []int64
	used   []int64
	demand []int64
}

// failKey caches "does not fit" per shape, allowed models and mode.
type failKey struct {
	shape int32
	mask  uint64
	mode  fitMode
	power int32 // with racks: the job's class rank + 1, and its reserve (powerKey)
}

type failEntry struct {
	epoch uint32
	why   why
	// brief: made for a job past Config.ReasonDepth, whose rack-power
	// reason has no node counts; a job within the depth makes its own.
	brief bool
}

// sched is the state of one Schedule call. Its own fields are the
// cycle's state, which the ETA pass goes on from: the fleet, the teams and
// their quota use, the queued and running jobs, the release events, the
// caches of failed fits, the backfill reservation, the explanations, rack
// power and the output; with them the scratch of the placement searches,
// which the cycle and the ETA pass share. What only the ETA simulation
// uses is in eta, what only the preemption searches use in pre.
type sched struct {
	in  *Input
	cfg Config
	now time.Time
	// at is the moment being decided: now in the cycle, the simulated time
	// in the ETA pass.
	at      time.Time
	f       *fleet
	ever    *fleet // the fleet with nothing running and every node ready, for "can never fit"
	prio    map[gpufleet.Priority]int
	teams   []teamState
	teamIdx map[string]int32
	runs    runIndex // Input.Runs' estimates (estimate.go)
	classes []string

	shapes     []*shape
	shapeIdx   map[string]*shape
	stackCache map[string]stackNeed // per stack-requirement wording
	pending    []*pjob              // cluster order
	running    []*rjob              // by id
	events     eventHeap
	resv       *reservation
	fails      map[failKey]failEntry
	explain    bool                             // build reason texts (off in the ETA simulation)
	codeEx     map[string]*gpufleet.Explanation // codeExplanation's, per code
	brief      bool                             // the job being placed is past Config.ReasonDepth
	texts      briefTexts
	claims     []claimAt  // GPUs held for preemptors until their victims stop
	state      runState   // nodes and GPUs by name, when any drains or is silent
	pw         powerState // racks' budgets and draws (Input.Racks)
	out        Output

	eta etaSim        // the ETA simulation (eta.go)
	pre preemptSearch // the preemption searches (preempt.go, starve.go)

	fgdS  *fgdState // workload mix for fragmentation-gradient packing
	spare spareHold // Config.Spare, held while lower classes are placed

	// scratch of the placement searches (place.go, fit.go, fgd.go)
	best     cand
	doms     [][2]int32
	gpuBuf   []int32
	cands    []nodeCand
	gcount   []int32
	gsum     []int64
	modelBuf []bool
	allowBuf []int32
	keyBuf   []byte
	subsets  map[string]uint64 // see subsetID
}

// newSched builds the state of one call from its input. With shared the
// capacity model is the cached fleet itself, not a copy, for a caller that
// places nothing (Explain): the copy is most of a check's cost on a large
// fleet.
func newSched(in *Input, shared bool) *sched {
	s := &sched{in: in, cfg: in.Config.withDefaults(), now: in.Now, at: in.Now, shapeIdx: map[string]*shape{}, fails: map[failKey]failEntry{},
		pre: preemptSearch{fails: map[preemptKey]bool{}}}
	if s.cfg.Packing == "" {
		s.cfg.Packing = PackFirstFit
	}
	if s.cfg.DefaultEstimate <= 0 {
		s.cfg.DefaultEstimate = time.Hour
	}
	prios := s.cfg.Priorities
	if len(prios) == 0 {
		prios = gpufleet.Priorities()
	}
	s.prio = map[gpufleet.Priority]int{}
	for i, p := range prios {
		if _, ok := s.prio[p]; !ok {
			s.prio[p] = i
		}
	}
	s.runs = s.runIndexFor(in)
	s.buildTeams()
	s.f, s.ever = s.fleetFor(in, shared)
	s.eta.classGen = make([]uint32, len(s.classes))
	s.buildPower()
	s.buildRunning()
	s.buildPending()
	return s
}

// rank is a priority class's place, 0 highest; unknown classes rank last.
func (s *sched) rank(p gpufleet.Priority) int {
	if !s.cfg.PriorityClasses {
		return 0
	}
	if r, ok := s.prio[p]; ok {
		return r
	}
	return len(s.prio)
}

// estimateOf is the run time j is planned on (runEstimate).
func (s *sched) estimateOf(j *Job) time.Duration {
	if j.Estimate > 0 {
		return j.Estimate
	}
	return s.runEstimate(j).Duration()
}

// buildRunning applies running jobs to the capacity model and queues their
// ends as release events.
func (s *sched) buildRunning() {
	s.pre.nodeRuns = make([][]*rjob, len(s.f.nodes))
	// By id, then input order.
	type idKey struct {
		id string
		i  int
	}
	var keys []idKey
	for i := range s.in.Jobs {
		if s.in.Jobs[i].Running() {
			keys = append(keys, idKey{s.in.Jobs[i].ID, i})
		}
	}
	slices.SortFunc(keys, func(a, b idKey) int {
		if c := strings.Compare(a.id, b.id); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	jobs := make([]*Job, len(keys))
	for i, k := range keys {
		jobs[i] = &s.in.Jobs[k.i]
	}
	if len(jobs) > 0 { // only running jobs read it (mustStop, recheck)
		s.state = s.stateIndex()
	}
	powerStops, alerts := rackPowerStops(s.cfg, s.in.Racks, s.in.Nodes, jobs)
	s.out.PowerAlerts = alerts
	// One allocation each for the running jobs, their grants and allocs.
	runs, grants := make([]rjob, len(jobs)), make([]grant, len(jobs))
	n := 0
	for _, j := range jobs {
		for _, p := range j.Placement {
			n += len(p.GPUs)
		}
	}
	allocs := make([]alloc, 0, n)
	for i, j := range jobs {
		r := &runs[i]
		*r = rjob{job: j, rank: s.rankOf(j), team: s.team(j.Team)}
		if j.Preemptible && s.cfg.Preemption {
			r.protected, r.protectedUntil = s.protection(j)
		}
		g := &grants[i]
		*g = grant{team: r.team, class: -1}
		start := len(allocs)
		whole := j.Resources.Sharing.Exclusive()
		for _, p := range j.Placement {
			units := int32(unit)
			if frac := p.Fraction; frac > 0 && frac < 1 {
				units = int32(frac*unit + 0.5)
			} else if !whole && j.Resources.Sharing.Kind == gpufleet.TimeSlice && j.Resources.Sharing.Fraction > 0 {
				units = int32(j.Resources.Sharing.Fraction*unit + 0.5)
			}
			for _, id := range p.GPUs {
				l, ok := s.f.locs[id]
				if !ok {
					continue
				}
				a := alloc{node: l.node, gpu: l.gpu, inst: l.inst, units: units, whole: l.inst < 0 && units == unit && j.Resources.Sharing.Kind != gpufleet.TimeSlice}
				if l.inst >= 0 {
					a.units = unit
				}
				allocs = append(allocs, a)
				model := s.f.nodes[l.node].gpus[l.gpu].model
				if c := s.f.models[model].class; c >= 0 {
					g.class = c
					if l.inst >= 0 {
						g.charge += s.f.migCharge(model, s.f.nodes[l.node].gpus[l.gpu].mig[l.inst].profile)
					} else {
						g.charge += int64(units)
					}
				}
			}
		}
		if len(allocs) > start {
			g.allocs = allocs[start:len(allocs):len(allocs)]
		}
		r.g = g
		s.takeGrant(g)
		s.grantWatts(g, j.Priority) // its draw is measured already: only its end takes it off
		end := j.Started.Add(s.estimateOf(j))
		if !j.StopAt.IsZero() {
			end = j.StopAt // stopping: its GPUs come free when its grace ends
			r.stopping = true
		} else if code, text := s.mustStop(j, s.state); code != "" {
			grace := s.graceOf(j)
			if code == StopNodeLost {
				grace = 0 // the agent has fenced the run: nothing to wait for
			}
			s.out.Stops = append(s.out.Stops, Stop{Job: j.ID, Code: code, Reason: text, Grace: grace})
			end = s.now.Add(grace)
			r.stopping = true
		} else if text := powerStops[j.ID]; text != "" {
			grace := s.graceOf(j)
			s.out.Stops = append(s.out.Stops, Stop{Job: j.ID, Code: StopRackPower, Reason: text, Grace: grace})
			end = s.now.Add(grace)
			r.stopping = true
		}
		if end.Before(s.now) {
			end = s.now
		}
		r.stopEnd = end
		r.victim = r.stopping // not a victim for anyone: it is stopping already
		s.events.push(event{at: end, g: g, gen: g.gen})
		s.running = append(s.running, r)
		if (j.Preemptible && !r.victim && !r.protected) || r.stopping {
			last := int32(-1)
			for _, a := range g.allocs {
				if a.inst < 0 && a.node != last {
					s.pre.nodeRuns[a.node] = append(s.pre.nodeRuns[a.node], r)
					last = a.node
				}
			}
		}
	}
	s.markBorrowed()
	for ni, rs := range s.pre.nodeRuns {
		if len(rs) > 0 {
			s.pre.victimAt = append(s.pre.victimAt, int32(ni))
		}
	}
}

// graceOf is the grace a stop gives j: its own, else the policy's default.
func (s *sched) graceOf(j *Job) time.Duration {
	if j.Grace > 0 {
		return j.Grace
	}
	return s.cfg.DefaultGrace
}

// runState is what a running job's node and GPUs say about it.
type runState struct {
	nodes map[string]*Node
	gpus  map[string]*GPU // by GPU and MIG instance id
}

// stateIndex indexes the input's nodes and GPUs by name and id; empty
// when every node and GPU is ready and reporting (nothing drains, nothing
// is lost).
func (s *sched) stateIndex() runState {
	if !s.f.notReady && !s.anySilent() {
		return runState{}
	}
	st := runState{nodes: make(map[string]*Node, len(s.in.Nodes)), gpus: map[string]*GPU{}}
	for i := range s.in.Nodes {
		n := &s.in.Nodes[i]
		st.nodes[n.Name] = n
		for g := range n.GPUs {
			if n.GPUs[g].State == Draining {
				st.gpus[n.GPUs[g].ID] = &n.GPUs[g]
				for _, m := range n.GPUs[g].MIG {
					st.gpus[m.ID] = &n.GPUs[g]
				}
			}
		}
	}
	return st
}

// anySilent reports whether any node has a LastSeen (the server's nodes
// always do; the simulator's only once they fail).
func (s *sched) anySilent() bool {
	for i := range s.in.Nodes {
		if !s.in.Nodes[i].LastSeen.IsZero() {
			return true
		}
	}
	return false
}

// lost reports whether node n has been silent for Config.LostAfter.
func (s *sched) lost(n *Node) bool {
	return !n.LastSeen.IsZero() && s.now.Sub(n.LastSeen) >= s.cfg.LostAfter
}

// mustStop says why a running job must stop now, whatever the queue: one
// of its nodes is lost, its request is invalid, it was cancelled, its run
// reached its time limit, or its node or one of its GPUs is draining.
// Empty when none of these holds.
func (s *sched) mustStop(j *Job, st runState) (code gpufleet.StopCode, text string) {
	for _, p := range j.Placement {
		if n := st.nodes[p.Node]; n != nil && s.lost(n) {
			return StopNodeLost, fmt.Sprintf("node %s silent for %s (lost after %s: its agent has fenced the run)",
				n.Name, s.now.Sub(n.LastSeen).Round(time.Second), s.cfg.LostAfter)
		}
	}
	switch {
	case j.Invalid != "":
		return StopInvalid, "invalid request: " + j.Invalid
	case j.CancelRequested:
		return StopCancel, "cancelled"
	case j.TimeLimit > 0 && !s.now.Before(j.Started.Add(j.TimeLimit)):
		return StopTimeLimit, fmt.Sprintf("time limit %s reached", j.TimeLimit)
	}
	for _, p := range j.Placement {
		if n := st.nodes[p.Node]; n != nil && n.State == Draining {
			return StopDrain, withReason(fmt.Sprintf("node %s is draining", n.Name), n.Reason)
		}
		for _, id := range p.GPUs {
			if g := st.gpus[id]; g != nil {
				return StopDrain, withReason(fmt.Sprintf("gpu %d of node %s is draining", g.Index, p.Node), g.Reason)
			}
		}
	}
	return "", ""
}

func withReason(text, reason string) string {
	if reason == "" {
		return text
	}
	return text + ": " + reason
}

// buildPending puts queued jobs in cluster order.
// Jobs are read in input order (failures are reported in it), then laid
// out in cluster order, the order the cycle walks them.
func (s *sched) buildPending() {
	n := 0
	for i := range s.in.Jobs {
		if !s.in.Jobs[i].Running() {
			n++
		}
	}
	qs := make([]queued, 0, n)
	for i := range s.in.Jobs {
		j := &s.in.Jobs[i]
		if j.Running() {
			continue
		}
		if j.Invalid != "" {
			s.out.Fails = append(s.out.Fails, Fail{Job: j.ID, Code: FailInvalid, Reason: "invalid request: " + j.Invalid})
			continue
		}
		sh := s.shapeOf(&j.Resources)
		if sh.invalid != "" {
			s.out.Fails = append(s.out.Fails, Fail{Job: j.ID, Code: FailInvalid, Reason: "invalid request: " + sh.invalid})
			continue
		}
		qs = append(qs, queued{job: j, shape: sh, rank: int32(s.rankOf(j)), team: s.team(j.Team), est: s.estimateOf(j),
			submit: j.Submitted.UnixNano(), prod: j.Priority == gpufleet.Production})
	}
	perm := s.order(qs)
	slab := make([]pjob, len(perm)) // one allocation for every queued job
	s.pending = make([]*pjob, len(perm))
	var classes []int32
	for k, i := range perm {
		q := &qs[i]
		p := &slab[k]
		*p = pjob{job: q.job, idx: k, rank: int(q.rank), team: q.team, shape: q.shape, est: q.est, submit: q.submit,
			tag: q.tag, starve: q.starve, prod: q.prod}
		s.pending[k] = p
		p.static = s.staticWhy(p)
		sh := q.shape
		if p.static != nil || !s.cfg.Quotas || len(sh.models) == 0 {
			continue
		}
		p.demand = s.charge(sh, sh.models[0])
		ts := &s.teams[p.team]
		start := len(classes)
		for _, m := range sh.models {
			c := s.f.models[m].class
			if c >= 0 && ts.quota[c] > 0 && !slices.Contains(classes[start:], c) {
				classes = append(classes, c)
				ts.demand[c] += p.demand
			}
		}
		if len(classes) > start {
			p.classes = classes[start:len(classes):len(classes)]
		}
	}
}

// takeGrant and releaseGrant apply a placement to capacity and quota use.
func (s *sched) takeGrant(g *grant) {
	for _, a := range g.allocs {
		s.f.take(a)
	}
	s.powerTake(g)
	if g.class >= 0 {
		s.teams[g.team].used[g.class] += g.charge
	}
}

func (s *sched) releaseGrant(g *grant) {
	for _, a := range g.allocs {
		s.f.release(a)
	}
	s.powerRelease(g)
	if g.class >= 0 {
		s.teams[g.team].used[g.class] -= g.charge
		s.teams[g.team].gen++
		s.eta.classGen[g.class]++
	}
}

// tryPlace finds GPUs for a queued job in the given mode, honouring quotas.
// A "does not fit" answer is cached per shape until capacity grows.
func (s *sched) tryPlace(j *pjob, mode fitMode) (placement, why, bool) {
	sh := j.shape
	if j.static != nil {
		return placement{}, *j.static, false
	}
	s.setPowerJob(j.job)
	u := s.usable(j)
	if len(u.models) == 0 && len(u.slow) == 0 && u.quotaWhy.code != "" {
		return placement{}, u.quotaWhy, false
	}
	if mode == modeLong && s.resv != nil && s.resv.shared && (s.resv.mig == (sh.kind == gpufleet.MIG)) {
		return placement{}, s.reservationWhy(j), false
	}
	key := failKey{sh.id, u.mask, mode, s.powerKey()}
	if e, ok := s.fails[key]; ok && e.epoch == s.f.epoch && (!e.brief || s.brief) {
		if e.why.code == ReasonSlowerModel {
			return placement{}, s.slowerWhy(j, e.why.model), false // its own wait
		}
		return placement{}, e.why, false
	}
	if mode == modeShort || s.mayFit(sh, u.models) {
		if p, ok := s.search(sh, u.models, mode); ok {
			return p, why{}, true
		}
	}
	return placement{}, s.failed(key, j, u, mode), false
}

// usableModels is what a queued job may be placed on now.
type usableModels struct {
	models   []int32 // in the shape's order
	mask     uint64  // bit i%64 set when the shape's model i is usable
	quotaWhy why     // the first quota refusal, when quota kept models out
	slow     []int32 // models left out as too slow for now (slowerWait)
}

// usable filters a job's models by its team's quota and, for jobs that
// prefer the fastest model, by slowerWait.
func (s *sched) usable(j *pjob) usableModels {
	sh := j.shape
	if !s.cfg.Quotas && sh.slower == nil {
		return usableModels{models: sh.models, mask: ^uint64(0)}
	}
	u := usableModels{models: s.allowBuf[:0]}
	for i, m := range sh.models {
		if s.cfg.Quotas {
			// Only the first refusal is explained.
			if ok, w := s.admit(j.team, m, s.charge(sh, m), s.explain && u.quotaWhy.code == ""); !ok {
				if u.quotaWhy.code == "" {
					u.quotaWhy = w
				}
				continue
			}
		}
		if sh.slower != nil && s.slowerWait(j, m) > 0 {
			u.slow = append(u.slow, m)
			continue
		}
		u.models = append(u.models, m)
		u.mask |= 1 << (i % 64)
	}
	s.allowBuf = u.models
	if len(sh.models) > 64 {
		u.mask = s.subsetID(u.models, u.slow) // one bit per model would not fit
	}
	return u
}

// subsetID numbers the distinct (usable, slow) model subsets of shapes with
// more than 64 models, for the fail-cache key: two different subsets never
// share a number, as a bit mask would need more than 64 bits to promise.
func (s *sched) subsetID(models, slow []int32) uint64 {
	b := s.keyBuf[:0]
	for _, m := range models {
		b = binary.LittleEndian.AppendUint32(b, uint32(m))
	}
	b = append(b, 0xff, 0xff, 0xff, 0xff) // no model has this index
	for _, m := range slow {
		b = binary.LittleEndian.AppendUint32(b, uint32(m))
	}
	s.keyBuf = b
	if id, ok := s.subsets[string(b)]; ok {
		return id
	}
	if s.subsets == nil {
		s.subsets = map[string]uint64{}
	}
	id := uint64(len(s.subsets))
	s.subsets[string(b)] = id
	return id
}

// failed caches and explains a failed fit. When quota kept the job off
// models that have room, the quota is the reason; when it waits for a
// faster model while a slower one has room, that is.
func (s *sched) failed(key failKey, j *pjob, u usableModels, mode fitMode) why {
	sh := j.shape
	w := why{code: ReasonCapacity}
	if len(u.slow) > 0 && (mode == modeShort || s.mayFit(sh, u.slow)) {
		if p, ok := s.search(sh, u.slow, mode); ok {
			w = s.slowerWhy(j, p.model)
		}
	}
	if w.code == ReasonCapacity && u.quotaWhy.code != "" && len(u.models)+len(u.slow) < len(sh.models) {
		var blocked []int32
		for _, m := range sh.models {
			if !slices.Contains(u.models, m) && !slices.Contains(u.slow, m) {
				blocked = append(blocked, m)
			}
		}
		if (mode == modeShort || s.mayFit(sh, blocked)) && s.fitsSome(sh, blocked, mode) {
			w = u.quotaWhy
		}
	}
	if w.code == ReasonCapacity && s.explain {
		// The ETA simulation (explain off) needs no words, and rack power
		// and capacity are the same to it: it waits for the next end.
		// One scan of the nodes counts what each filter left out; rack
		// power over a spread's racks and the mechanisms of nodes the
		// filters left out take a search of their own.
		if s.brief {
			// Past the reason depth a rack-power hold is told without
			// counting the nodes: the search powerWhy makes is cheaper
			// than a scan of the fleet, and most jobs of a long queue
			// are here.
			if rack, ok := s.powerWhy(sh, u.models, mode); ok {
				ex := bare(ReasonRackPower)
				ex.Exhausted, ex.Rack, ex.Brief = gpufleet.DimRackPower, rack, true
				pw := *exWhy(ex)
				s.fails[key] = failEntry{epoch: s.f.epoch, why: pw, brief: true}
				return pw
			}
		}
		w = s.diagnose(sh, &j.job.Resources, u.models, u.slow, false, mode)
		if w.code != ReasonRackPower && !s.brief { // brief: tried above
			if rack, ok := s.powerWhy(sh, u.models, mode); ok {
				ex := *w.ex
				ex.Code, ex.Exhausted, ex.Need, ex.Most, ex.Rack = ReasonRackPower, gpufleet.DimRackPower, 0, 0, rack
				w = *exWhy(&ex)
			}
		}
		if w.code != ReasonRackPower {
			if iso, ok := s.isolationWhy(sh, u.models, mode); ok {
				ex := *w.ex
				ex.Code, ex.Exhausted, ex.Need, ex.Most, ex.Isolation = ReasonIsolation, "", 0, 0, iso
				ex.Detail = iso.String() // the words before Isolation, for clients that read them
				w = *exWhy(&ex)
			}
		}
	}
	s.fails[key] = failEntry{epoch: s.f.epoch, why: w}
	return w
}

func (s *sched) fitsSome(sh *shape, models []int32, mode fitMode) bool {
	_, ok := s.search(sh, models, mode)
	return ok
}

// start commits a placement at time t and queues the job's end.
func (s *sched) start(j *pjob, p placement, t time.Time) {
	g := &grant{allocs: p.allocs, team: j.team, class: s.f.models[p.model].class, charge: s.charge(j.shape, p.model)}
	s.grantWatts(g, j.job.Priority)
	s.takeGrant(g)
	j.started, j.startAt = true, t
	ts := &s.teams[j.team]
	for _, c := range j.classes {
		ts.demand[c] -= j.demand
		s.eta.classGen[c]++
	}
	s.events.push(event{at: t.Add(j.est), g: g, gen: g.gen})
}

// output turns a placement into the contract's per-node form.
func (s *sched) output(j *pjob, p placement) []Placement {
	var out []Placement
	for _, a := range p.allocs {
		n := &s.f.nodes[a.node]
		id := n.gpus[a.gpu].id
		if a.inst >= 0 {
			id = n.gpus[a.gpu].mig[a.inst].id
		}
		frac := 1.0
		if j.shape.kind == gpufleet.TimeSlice {
			frac = j.job.Resources.Sharing.Fraction
		}
		if len(out) == 0 || out[len(out)-1].Node != n.name {
			out = append(out, Placement{Node: n.name, Fraction: frac})
		}
		out[len(out)-1].GPUs = append(out[len(out)-1].GPUs, id)
	}
	// Nodes by name: the placement reads the same whatever the node order.
	slices.SortStableFunc(out, func(a, b Placement) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// placeCycle walks the queue in cluster order once and decides.
func (s *sched) placeCycle() {
	var blocker *pjob // strict order: the first job that could not start
	// A job's position in the pending list and in its team's, if it does
	// not start, is known when its turn comes: jobs start only in their
	// turn. teamPending counts each team's jobs so far that did not start.
	depth := s.cfg.ReasonDepth
	teamPending := make([]int, len(s.teams))
	defer func() { s.brief = false }()
	for i, j := range s.pending {
		if depth > 0 {
			s.brief = i-s.out.Stats.Placed >= depth && teamPending[j.team] >= depth
			j.brief = s.brief
			teamPending[j.team]++ // until it starts
		}
		s.out.Stats.Considered++
		if j.static != nil {
			j.why = *j.static
			continue
		}
		if s.cfg.MaxPlacementsPerCycle > 0 && s.out.Stats.Placed >= s.cfg.MaxPlacementsPerCycle {
			j.why = s.cycleLimitWhy()
			continue
		}
		if blocker != nil {
			if _, w, ok := s.tryPlace(j, modeNormal); ok {
				j.why = s.orderWhy(blocker)
			} else {
				j.why = w
			}
			continue
		}
		mode := s.modeFor(j, s.now)
		p, w, ok := s.place(j, mode)
		if ok {
			s.start(j, p, s.now)
			if depth > 0 {
				teamPending[j.team]--
			}
			st := Start{Job: j.job.ID, Placement: s.output(j, p), Backfilled: s.resv != nil}
			s.out.Starts = append(s.out.Starts, st)
			s.out.Stats.Placed++
			if st.Backfilled {
				s.out.Stats.Backfilled++
			}
			continue
		}
		j.why = w
		if !w.capacity() {
			continue
		}
		// A job its rack's power holds back does not preempt: stopping
		// others for GPUs that are free would not give it power. Letting
		// starvation preemption free power too was measured on the Philly
		// replay at 80% of rated power (docs/POWER.md): allocation fell
		// from 43% to 24% and fairness did not improve, as each stop of a
		// large job wasted its restart and freed power the next small job
		// took.
		if s.cfg.Preemption && w.code != ReasonRackPower {
			skipped := s.out.Stats.PreemptionSearchesSkipped
			if s.preempt(j) {
				continue
			}
			if s.out.Stats.PreemptionSearchesSkipped > skipped {
				j.why = s.withSearchLimit(j.why)
			}
		}
		if s.resv != nil && w.code != ReasonRackPower && s.starvePreempt(j, mode) {
			continue
		}
		if mode == modeLong {
			if _, _, ok := s.tryPlace(j, modeShort); ok {
				j.why = s.reservationWhy(j)
			}
			continue
		}
		switch {
		case s.cfg.Backfill:
			if s.resv == nil && s.reserveFor(j, s.now) {
				s.starvePreempt(j, modeNormal)
			}
		case s.cfg.StrictOrder:
			blocker = j
		}
	}
	s.releaseSpare()
}

// modeFor says how a job at time t stands to the backfill reservation.
func (s *sched) modeFor(j *pjob, t time.Time) fitMode {
	if s.resv == nil || s.resv.job == j {
		return modeNormal
	}
	if !t.Add(j.est).After(s.resv.at) {
		return modeShort
	}
	return modeLong
}

// team returns a team's index, adding unknown teams with no quota.
func (s *sched) team(name string) int32 {
	if i, ok := s.teamIdx[name]; ok {
		return i
	}
	s.teamIdx[name] = int32(len(s.teams))
	n := len(s.classes)
	s.teams = append(s.teams, teamState{name: name, weight: 1, limit: -1,
		quota: make([]int64, n), used: make([]int64, n), demand: make([]int64, n)})
	return s.teamIdx[name]
}

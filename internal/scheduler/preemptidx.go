package scheduler

import (
	"math"
	"slices"
)

// preemptIndex finds, for a queued job that does not fit, the nodes where
// stopping running work could make room for it, without scanning every
// node with preemptible work. It keeps, per node and GPU model, the whole
// GPUs that possible victims hold, by their class (rank):
//
//   - stop: GPUs of jobs stopping already that no preemptor has claimed
//     (any job may count on them);
//   - shared: GPUs of preemptible jobs any team may stop when it outranks
//     them: every preemptible job without quotas, the jobs running on
//     borrowed quota with them (those are also what reclaim stops,
//     whatever their class);
//   - own (quotas only): GPUs of each team's preemptible jobs within its
//     quota, which only the team's own higher classes may stop.
//
// A node can make room for a job that needs k GPUs of model m only if its
// free GPUs of m plus those the job may stop there add up to k. For each
// (model, preemptor rank) asked for, and for reclaim (any class of
// borrowed work), a roomIndex keeps that sum per node, capped at the most
// GPUs of m on a node, in cumulative bitsets: ge[k] holds the nodes whose
// room is at least k. A query walks ge[k] (and, with quotas, the team's
// own jobs) in node order, so victimsOn is called on a superset of the
// nodes where it succeeds, in the same order as a scan of every node:
// the victims chosen are the scan's.
//
// The index follows the fleet: a change of a node's free GPUs
// (fleet.adjFree) updates its rooms, and victims leave it when they are
// chosen (removeVictim). It is built at the cycle's first preemption
// search and dropped before the ETA pass.
type preemptIndex struct {
	f      *fleet
	nR     int32 // ranks 0..nR-1
	quotas bool
	base   []int32 // per node: its first slot; a slot per entry of nodeSlot.mfree
	free   []int32 // per slot: the node's free GPUs of the model (modelFree.free)
	stop   []int32 // per slot
	shared []int32 // per slot and rank: slot*nR + rank
	rooms  [][]*roomIndex
	// own lists, per team and model (team*len(models) + model), the GPUs
	// each team's non-borrowed preemptible jobs hold, by node. ownLow is
	// the lowest class (highest rank) among them, -1 for none; borTop the
	// highest class (lowest rank) of the team's borrowed preemptible work,
	// nR for none. Neither is updated as victims are chosen: they only
	// ever say the team matters when it may not (preemptKeyOf).
	own    [][]ownRun
	ownLow []int32
	borTop []int32
}

// ownRun is a team's running job on one node: the whole GPUs of the
// list's model it holds there, and the node's slot for the model.
type ownRun struct {
	node, slot, gpus int32
	r                *rjob
}

// roomIndex is the room for preemption per node for one model and one
// preemptor rank (rank -1: reclaim, every borrowed job counts).
type roomIndex struct {
	m, rank int32
	level   []int32  // per node: min(room, maxK) if the node holds a victim, else 0
	ge      []bitset // [k], k >= 1: nodes whose level is k or more
}

// preemptIdx returns the cycle's preemption index, building it at the
// first call.
func (s *sched) preemptIdx() *preemptIndex {
	if s.f.pidx != nil {
		return s.f.pidx
	}
	f := s.f
	x := &preemptIndex{f: f, nR: int32(s.ranks()), quotas: s.cfg.Quotas}
	x.base = make([]int32, len(f.nodes)+1)
	for ni := range f.nodes {
		x.base[ni+1] = x.base[ni] + int32(len(f.nodes[ni].mfree))
	}
	slots := x.base[len(f.nodes)]
	x.stop = make([]int32, slots)
	x.free = make([]int32, slots)
	x.shared = make([]int32, slots*x.nR)
	nm := int32(len(f.models))
	x.rooms = make([][]*roomIndex, nm)
	if x.quotas {
		x.own = make([][]ownRun, int32(len(s.teams))*nm)
		x.ownLow = make([]int32, len(x.own))
		x.borTop = make([]int32, len(x.own))
		for i := range x.own {
			x.ownLow[i], x.borTop[i] = -1, x.nR
		}
	}
	for ni, rs := range s.pre.nodeRuns {
		n := &f.nodes[ni]
		for i, mf := range n.mfree {
			sl := x.base[ni] + int32(i)
			x.free[sl] = mf.free
			for _, v := range rs {
				g := heldOn(v, int32(ni), n, mf.model)
				if g == 0 {
					continue
				}
				switch {
				case v.stopping:
					if !v.claimed {
						x.stop[sl] += g
					}
				case !v.job.Preemptible || v.victim:
				case !x.quotas:
					x.shared[sl*x.nR+int32(v.rank)] += g
				case v.borrowed:
					x.shared[sl*x.nR+int32(v.rank)] += g
					k := v.team*nm + mf.model
					x.borTop[k] = min(x.borTop[k], int32(v.rank))
				default:
					k := v.team*nm + mf.model
					x.own[k] = append(x.own[k], ownRun{node: int32(ni), slot: sl, gpus: g, r: v})
					x.ownLow[k] = max(x.ownLow[k], int32(v.rank))
				}
			}
		}
	}
	f.pidx = x
	return x
}

// heldOn is the GPUs of model m on node ni that victimsOn would count as
// v's: its GPUs there (not MIG instances), when it holds one of model m
// whole; 0 otherwise.
func heldOn(v *rjob, ni int32, n *nodeSlot, m int32) int32 {
	if !holdsWhole(v, ni, n, m) {
		return 0
	}
	var c int32
	for _, a := range v.g.allocs {
		if a.node == ni && a.inst < 0 && n.gpus[a.gpu].model == m {
			c++
		}
	}
	return c
}

// room returns the room index of model m for a preemptor of the given
// rank (-1: reclaim), building it on first use.
func (x *preemptIndex) room(m, rank int32) *roomIndex {
	for _, ri := range x.rooms[m] {
		if ri.rank == rank {
			return ri
		}
	}
	f := x.f
	ri := &roomIndex{m: m, rank: rank, level: make([]int32, len(f.nodes)), ge: make([]bitset, f.maxK[m]+1)}
	for k := range ri.ge {
		ri.ge[k] = newBitset(len(f.nodes))
	}
	x.rooms[m] = append(x.rooms[m], ri)
	for ni := range f.nodes {
		x.setLevel(ri, int32(ni))
	}
	return ri
}

// victimGPUs is what the shared and stopping work on a slot offer a
// preemptor of the given rank (-1: reclaim).
func (x *preemptIndex) victimGPUs(sl, rank int32) int32 {
	c := x.stop[sl]
	row := x.shared[sl*x.nR : (sl+1)*x.nR]
	for r := rank + 1; r < x.nR; r++ {
		c += row[r]
	}
	return c
}

// setLevel recomputes one node's level in a room index.
func (x *preemptIndex) setLevel(ri *roomIndex, ni int32) {
	n := &x.f.nodes[ni]
	lv := int32(0)
	if i := x.f.mfIndex(n, ri.m); i >= 0 {
		sl := x.base[ni] + int32(i)
		x.free[sl] = n.mfree[i].free
		if c := x.victimGPUs(sl, ri.rank); c > 0 {
			lv = min(x.free[sl]+c, x.f.maxK[ri.m])
		}
	}
	old := ri.level[ni]
	for k := old + 1; k <= lv; k++ {
		ri.ge[k].set(ni)
	}
	for k := lv + 1; k <= old; k++ {
		ri.ge[k].unset(ni)
	}
	ri.level[ni] = lv
}

// update follows a change of node ni's free GPUs of model m.
func (x *preemptIndex) update(ni, m int32) {
	n := &x.f.nodes[ni]
	i := x.f.mfIndex(n, m)
	x.free[x.base[ni]+int32(i)] = n.mfree[i].free
	for _, ri := range x.rooms[m] {
		x.setLevel(ri, ni)
	}
}

// removeVictim takes a job chosen as a victim (or a stopping job claimed)
// out of the index; call it before its flags change.
func (x *preemptIndex) removeVictim(v *rjob) {
	shared := !v.stopping && v.job.Preemptible && !v.victim && (!x.quotas || v.borrowed)
	stop := v.stopping && !v.claimed
	if !shared && !stop {
		return // an own job: queries skip victims
	}
	var done []int32 // nodes taken care of: a placement may list one twice
	for _, a := range v.g.allocs {
		if a.inst >= 0 || slices.Contains(done, a.node) {
			continue
		}
		done = append(done, a.node)
		n := &x.f.nodes[a.node]
		for i, mf := range n.mfree {
			g := heldOn(v, a.node, n, mf.model)
			if g == 0 {
				continue
			}
			sl := x.base[a.node] + int32(i)
			if stop {
				x.stop[sl] -= g
			} else {
				x.shared[sl*x.nR+int32(v.rank)] -= g
			}
			x.update(a.node, mf.model)
		}
	}
}

// teamMatters reports whether a preemption search for team t's job of
// the given rank on model m may find other victims than any other team's
// would: the team has jobs within its quota of a lower class (only it may
// stop them), or, reclaiming, borrowed jobs of its class or higher (any
// other team may reclaim them, it may not).
func (x *preemptIndex) teamMatters(t, m, rank int32, reclaim bool) bool {
	if !x.quotas {
		return false
	}
	k := t*int32(len(x.f.models)) + m
	return x.ownLow[k] > rank || reclaim && x.borTop[k] <= rank
}

// nodes calls visit on every node, in index order, where j could make
// room for need GPUs of model m by preemption (reclaim: borrowed work of
// any class counts), until visit returns false. It may visit nodes where
// no victim set works (victimsOn decides), never skips one where one does.
// The room index yields the nodes where shared and stopping work make the
// room; with quotas, the team's own jobs of a lower class are walked
// alongside, in node order too, for the nodes where they make it.
func (x *preemptIndex) nodes(j *pjob, m int32, reclaim bool, need int32, visit func(ni int32) bool) {
	rank := int32(j.rank)
	if reclaim {
		rank = -1
	}
	ri := x.room(m, rank)
	var runs []ownRun
	if x.quotas {
		runs = x.own[j.team*int32(len(x.f.models))+m]
	}
	oi := 0
	// ownBefore returns the next node before limit, from runs[oi] on,
	// where the team's own jobs make the room and the room index does not
	// list it; -1 when none. The walk never passes limit, the room
	// index's next node, so a search that ends early walks little.
	ownBefore := func(limit int32) int32 {
		for oi < len(runs) && runs[oi].node < limit {
			ni, sl, c := runs[oi].node, runs[oi].slot, int32(0)
			for ; oi < len(runs) && runs[oi].node == ni; oi++ {
				if r := runs[oi].r; !r.victim && r.rank > j.rank {
					c += runs[oi].gpus
				}
			}
			if c == 0 || ri.level[ni] >= need {
				continue // nothing of its own, or listed anyway
			}
			if x.free[sl]+x.victimGPUs(sl, rank)+c >= need {
				return ni
			}
		}
		return -1
	}
	b := ri.ge[need]
	for ni := b.next(0); ; {
		limit := ni
		if ni < 0 {
			limit = math.MaxInt32
		}
		next := ownBefore(limit)
		switch {
		case next >= 0:
		case ni >= 0:
			next, ni = ni, b.next(ni+1)
		default:
			return
		}
		if !visit(next) {
			return
		}
	}
}

package scheduler

import (
	"math"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
)

// ReasonRackPower: GPUs are free, but placing the job there would take
// its rack's projected draw over the rack's power budget (Input.Racks).
const ReasonRackPower = "rack_power"

// Rack is a power domain (a rack, a PDU, a row) whose nodes name it in
// Node.Rack, with a budget placements keep under.
type Rack struct {
	Name string `json:"name"`
	// BudgetWatts is the most the rack may draw; 0 means no budget.
	BudgetWatts gpufleet.Watts `json:"budget_watts"`
	// ProductionReserveWatts is the part of the budget only production
	// work may use: other classes are placed as if the budget were
	// BudgetWatts - ProductionReserveWatts.
	ProductionReserveWatts gpufleet.Watts `json:"production_reserve_watts,omitempty"`
	// DrawWatts is the rack's projected draw now, as the caller projects
	// it: the measured draw of what runs there, the idle draw of the rest
	// of its GPUs and a host overhead per node (internal/power). Work the
	// scheduler places adds GPUDraw on top; work that ends, in the ETA's
	// simulation, takes it off again.
	DrawWatts gpufleet.Watts `json:"draw_watts"`
	// IdleWatts is what the rack draws with no job on it: its host
	// overheads and idle GPUs; 0: unknown. A job that would take even the
	// idle rack over its budget is told so in its reason: it cannot start
	// there until the budget changes.
	IdleWatts gpufleet.Watts `json:"idle_watts,omitempty"`
	// OverBudgetFor is how long the rack's projected draw has stayed over
	// its budget, as the caller kept it (the server's leader since it
	// first saw the rack over, the simulator likewise); 0 when it is not
	// over. Config.OverBudget reads it.
	OverBudgetFor time.Duration `json:"over_budget_for,omitempty"`
}

// GPUDraw is what one GPU adds to its rack's draw when a job runs on it,
// above the idle draw Rack.DrawWatts already counts: per catalog id, then
// per priority class, in watts. A model or class missing falls back to the
// model's TDP less its idle draw (the catalog's figures; a tenth of the
// TDP when the idle draw is unpublished), the prior the caller's learned
// figures replace. Shares of a GPU add their fraction (a MIG instance its
// slices of 7).
type GPUDraw map[string]map[gpufleet.Priority]float64

// powerState is the racks of this call: budgets, draws as placements
// are made and undone, and the rack of each node of the fleet.
type powerState struct {
	on      bool
	names   []string
	budget  []float64 // per rack, less the production reserve for other classes
	reserve []float64
	draw    []float64
	idle    []float64 // per rack, its draw with no job (0: unknown)
	// rackHas is per rack which models its nodes have, built on the first
	// reason that needs it (idleRackHolds).
	rackHas [][]bool
	rackOf  []int32 // per fleet node; -1: no budget
	// add is per model index the draw one GPU adds, per priority class
	// (classIdx); a class missing takes addAny.
	add    [][]float64
	addAny []float64
	addMin []float64 // the least of a model's add: for checks of a whole group (curClass -1)
	// cur is the job whose placement is being searched: its class (-1:
	// the class that draws least) and whether it may use the production
	// reserve.
	curClass int
	curProd  bool
	off      bool   // searches ignore power (to tell a power refusal apart)
	freed    uint64 // grows whenever a grant's draw leaves a rack
	// resv is per rack the draw the backfill reservation's head will add;
	// long is set while a search places a job that would run past the
	// reservation, which must leave resv free.
	resv []float64
	long bool
	// ver grows with every change of a draw or a reservation; head caches
	// the largest headroom of any rack per (curProd, long) at a version.
	// open: some node has no budget, so there is always room.
	ver  uint64
	head [4]struct {
		ver uint64
		w   float64
	}
	open bool
	// rackNodes is per rack its fleet nodes; nodeSet is powerNodes' last
	// answer.
	rackNodes [][]int32
	nodeSet   struct {
		bits       bitset
		ver        uint64
		w          float64
		prod, long bool
		few        bool
	}
}

// buildPower indexes the racks of the input over the fleet's nodes.
func (s *sched) buildPower() {
	p := &s.pw
	if len(s.in.Racks) == 0 {
		return
	}
	byName := map[string]int32{}
	for _, r := range s.in.Racks {
		if r.BudgetWatts <= 0 || r.Name == "" {
			continue
		}
		if _, dup := byName[r.Name]; dup {
			continue
		}
		byName[r.Name] = int32(len(p.names))
		p.names = append(p.names, r.Name)
		p.budget = append(p.budget, float64(r.BudgetWatts))
		p.reserve = append(p.reserve, float64(min(max(r.ProductionReserveWatts, 0), r.BudgetWatts)))
		p.draw = append(p.draw, float64(max(r.DrawWatts, 0)))
		p.idle = append(p.idle, float64(max(r.IdleWatts, 0)))
		p.resv = append(p.resv, 0)
	}
	if len(p.names) == 0 {
		return
	}
	p.on = true
	p.rackOf = make([]int32, len(s.f.nodes))
	p.rackNodes = make([][]int32, len(p.names))
	for ni := range s.f.nodes {
		p.rackOf[ni] = -1
		if r := s.f.nodes[ni].rack; r >= 0 {
			if i, ok := byName[s.f.racks[r]]; ok {
				p.rackOf[ni] = i
				p.rackNodes[i] = append(p.rackNodes[i], int32(ni))
			}
		}
		p.open = p.open || p.rackOf[ni] < 0
	}
	classes := len(s.prio) + 1
	p.add = make([][]float64, len(s.f.models))
	p.addAny = make([]float64, len(s.f.models))
	p.addMin = make([]float64, len(s.f.models))
	for m := range s.f.models {
		g := &s.f.models[m].gpu
		prior := 0.0
		if g.TDPWatts != nil {
			idle := *g.TDPWatts / 10
			if g.IdleWatts != nil {
				idle = *g.IdleWatts
			}
			prior = max(*g.TDPWatts-idle, 0)
		}
		p.addAny[m] = prior
		p.add[m] = make([]float64, classes)
		for c := range p.add[m] {
			p.add[m][c] = prior
		}
		for prio, w := range s.in.GPUDraw[s.f.models[m].id] {
			if c, ok := s.prio[prio]; ok && w >= 0 && !math.IsInf(w, 0) {
				p.add[m][c] = w
			}
		}
		p.addMin[m] = slices.Min(p.add[m])
	}
}

// classIdx is a priority class's index in GPUDraw's table: its place in
// Config.Priorities, whether or not the policy orders by class.
func (s *sched) classIdx(p gpufleet.Priority) int {
	if c, ok := s.prio[p]; ok {
		return c
	}
	return len(s.prio)
}

// setPowerJob makes the searches that follow judge power for job j.
func (s *sched) setPowerJob(j *Job) {
	s.pw.curClass, s.pw.curProd = s.classIdx(j.Priority), j.Priority == gpufleet.Production
}

// perUnit is the draw one unit (a thousandth of a GPU) of model m adds
// for the current job.
func (p *powerState) perUnit(m int32) float64 {
	if p.curClass < 0 {
		return p.addMin[m] / unit
	}
	if p.curClass < len(p.add[m]) {
		return p.add[m][p.curClass] / unit
	}
	return p.addAny[m] / unit
}

// powerOK reports whether node ni's rack can take units of model m more
// for the current job.
func (s *sched) powerOK(ni, m, units int32) bool {
	p := &s.pw
	if !p.on || p.off {
		return true
	}
	r := p.rackOf[ni]
	if r < 0 {
		return true
	}
	return p.draw[r]+float64(units)*p.perUnit(m) <= p.limit(r)+1e-6
}

// limit is rack r's budget for the current job: less the production
// reserve for other classes, and less the reservation's draw for a job
// that would run past it.
func (p *powerState) limit(r int32) float64 {
	l := p.budget[r]
	if !p.curProd {
		l -= p.reserve[r]
	}
	if p.long {
		l -= p.resv[r]
	}
	return l
}

// allocUnits is what an alloc takes of its GPU, in units, for power: a
// MIG instance its profile's slices of 7.
func (s *sched) allocUnits(a alloc) int32 {
	if a.inst >= 0 {
		n := &s.f.nodes[a.node]
		name := s.f.profiles[n.gpus[a.gpu].mig[a.inst].profile]
		if p, err := gpufleet.ParseMIGProfile(name); err == nil {
			return int32(p.Share() * unit)
		}
		return unit / 7
	}
	return a.units
}

// placementPower sums, per rack, what allocs of model m add.
func (s *sched) placementPower(allocs []alloc, m int32) map[int32]float64 {
	p := &s.pw
	out := map[int32]float64{}
	for _, a := range allocs {
		if r := p.rackOf[a.node]; r >= 0 {
			out[r] += float64(s.allocUnits(a)) * p.perUnit(m)
		}
	}
	return out
}

// powerFits reports whether a whole placement keeps every rack under its
// budget (a job over several nodes of one rack adds them up).
func (s *sched) powerFits(allocs []alloc, m int32) bool {
	p := &s.pw
	if !p.on || p.off {
		return true
	}
	for r, w := range s.placementPower(allocs, m) {
		if p.draw[r]+w > p.limit(r)+1e-6 {
			return false
		}
	}
	return true
}

// grantWatts sets what a grant adds to its racks' draw, by its job's
// priority class.
func (s *sched) grantWatts(g *grant, prio gpufleet.Priority) {
	p := &s.pw
	if !p.on {
		return
	}
	save := p.curClass
	p.curClass = s.classIdx(prio)
	g.watts = g.watts[:0]
	for _, a := range g.allocs {
		r := p.rackOf[a.node]
		if r < 0 {
			continue
		}
		m := s.f.nodes[a.node].gpus[a.gpu].model
		g.watts = append(g.watts, rackWatts{r, float64(s.allocUnits(a)) * p.perUnit(m)})
	}
	p.curClass = save
}

// chosenPowerOK reports whether the nodes chosen for a job spread over
// several, each taking take(c) GPUs of model m, keep their racks under
// budget, adding up the nodes of one rack.
func (s *sched) chosenPowerOK(chosen []nodeCand, m int32, take func(nodeCand) int32) bool {
	p := &s.pw
	if !p.on || p.off || len(chosen) == 0 {
		return true
	}
	add := map[int32]float64{}
	for _, c := range chosen {
		if r := p.rackOf[c.ni]; r >= 0 {
			add[r] += float64(take(c)*unit) * p.perUnit(m)
		}
	}
	for r, w := range add {
		if p.draw[r]+w > p.limit(r)+1e-6 {
			return false
		}
	}
	return true
}

// powerSpread picks n of cands, in their order, for a job spread over
// racks anywhere: each next node whose rack can still take take(c) GPUs
// of model m beside the nodes already chosen in it, so that a job too
// large for any one rack's budget spreads over as many racks as it
// needs. Without budgets it is cands[:n]; when power leaves fewer than n
// it is cands[:n] too, which the whole placement's check then refuses
// (and powerWhy names the rack).
func (s *sched) powerSpread(cands []nodeCand, m, n int32, take func(nodeCand) int32) []nodeCand {
	p := &s.pw
	if !p.on || p.off {
		return slices.Clone(cands[:n])
	}
	var chosen []nodeCand
	for _, c := range cands {
		if int32(len(chosen)) == n {
			break
		}
		if s.powerRoomWith(chosen, c, m, take(c), take) {
			chosen = append(chosen, c)
		}
	}
	if int32(len(chosen)) < n {
		return slices.Clone(cands[:n])
	}
	return chosen
}

// powerRoomWith reports whether node c's rack can take units GPUs of
// model m more for the current job beside what the chosen nodes in the
// same rack take (take(x) each).
func (s *sched) powerRoomWith(chosen []nodeCand, c nodeCand, m int32, gpus int32, take func(nodeCand) int32) bool {
	p := &s.pw
	if !p.on || p.off {
		return true
	}
	r := p.rackOf[c.ni]
	if r < 0 {
		return true
	}
	w := float64(gpus*unit) * p.perUnit(m)
	for _, x := range chosen {
		if p.rackOf[x.ni] == r {
			w += float64(take(x)*unit) * p.perUnit(m)
		}
	}
	return p.draw[r]+w <= p.limit(r)+1e-6
}

// rackWatts is a grant's draw on one rack.
type rackWatts struct {
	rack int32
	w    float64
}

// powerTake and powerRelease apply a grant's draw to its racks.
func (s *sched) powerTake(g *grant) {
	for _, rw := range g.watts {
		s.pw.draw[rw.rack] += rw.w
	}
	s.pw.ver++
}

func (s *sched) powerRelease(g *grant) {
	for _, rw := range g.watts {
		s.pw.draw[rw.rack] = max(0, s.pw.draw[rw.rack]-rw.w)
	}
	if len(g.watts) > 0 {
		s.pw.freed++ // a rack has more room: the ETA looks at every shape again
	}
	s.pw.ver++
}

// powerRoom is a quick check before a search: whether some rack has room
// for the least a job of the shape must add to one rack (one GPU of its
// thriftiest model, all of its GPUs when they must share a node, one MIG
// slice, one time-slice share). In a full fleet it saves searching every
// node for a job no rack can take.
func (s *sched) powerRoom(sh *shape, models []int32) bool {
	p := &s.pw
	if !p.on || p.off || p.open {
		return true
	}
	units := int64(unit)
	switch {
	case sh.kind == gpufleet.MIG:
		units = unit / 7
	case sh.kind == gpufleet.TimeSlice:
		units = int64(sh.units)
	case sh.multi:
		units = int64(max(sh.perNode, 1)) * unit
	default:
		one := true // all its GPUs on one node, whichever model
		for _, m := range models {
			one = one && (sh.nodes == 1 || sh.gpus <= s.f.maxK[m])
		}
		if one {
			units = int64(sh.gpus) * unit
		}
	}
	least := math.Inf(1)
	for _, m := range models {
		least = min(least, p.perUnit(m))
	}
	return float64(units)*least <= p.headroom()+1e-6
}

// powerNodes returns, when power leaves few racks able to take units of
// model m on one node for the current job, the nodes of those racks as a
// set (ok true): a search then visits only them, in the order and with the
// outcome of a full scan that skips the others with powerOK. In a fleet
// whose racks are near their budgets a job that does not fit otherwise
// visits every node with free GPUs. ok is false when a quarter of the
// fleet or more qualifies: the plain scan is as cheap. The set is kept
// while the draws and the job's power figures stay the same.
func (s *sched) powerNodes(m, units int32) (bitset, bool) {
	p := &s.pw
	if !p.on || p.off || p.open || scanAllRackNodes {
		return nil, false
	}
	w := float64(units) * p.perUnit(m)
	c := &p.nodeSet
	if c.bits != nil && c.ver == p.ver && c.w == w && c.prod == p.curProd && c.long == p.long {
		return c.bits, c.few
	}
	if c.bits == nil {
		c.bits = newBitset(len(s.f.nodes))
	}
	clear(c.bits)
	c.ver, c.w, c.prod, c.long, c.few = p.ver, w, p.curProd, p.long, true
	n := 0
	for r := range p.budget {
		if p.draw[r]+w <= p.limit(int32(r))+1e-6 {
			if n += len(p.rackNodes[r]); n > len(s.f.nodes)/4 {
				c.few = false
				return nil, false
			}
			for _, ni := range p.rackNodes[r] {
				c.bits.set(ni)
			}
		}
	}
	return c.bits, true
}

// scanAllRackNodes turns powerNodes off (ScanAllRackNodes, for tests).
var scanAllRackNodes bool

// headroom is the most any rack can still take for the current job.
func (p *powerState) headroom() float64 {
	i := 0
	if p.curProd {
		i |= 1
	}
	if p.long {
		i |= 2
	}
	h := &p.head[i]
	if h.ver != p.ver+1 {
		h.w = math.Inf(-1)
		for r := range p.budget {
			h.w = max(h.w, p.limit(int32(r))-p.draw[r])
		}
		h.ver = p.ver + 1
	}
	return h.w
}

// powerKey is the part of a "does not fit" cache key that power decides:
// the job's class rank (what its GPUs draw) and its reserve; 0 without
// racks.
func (s *sched) powerKey() int32 {
	if !s.pw.on {
		return 0
	}
	k := int32(s.pw.curClass+1) << 1
	if s.pw.curProd {
		k |= 1
	}
	return k
}

// powerWhy explains a job that fits the free GPUs only if power is
// ignored: the first rack, by index, that its placement would take over
// its budget. ok is false when power is not the reason.
func (s *sched) powerWhy(sh *shape, models []int32, mode fitMode) (*gpufleet.RackShortfall, bool) {
	p := &s.pw
	if !p.on {
		return nil, false
	}
	p.off = true
	pl, ok := s.search(sh, models, mode)
	p.off = false
	if !ok {
		return nil, false
	}
	per := s.placementPower(pl.allocs, pl.model)
	racks := make([]int32, 0, len(per))
	for r := range per {
		racks = append(racks, r)
	}
	slices.Sort(racks)
	for _, r := range racks {
		if w := per[r]; p.draw[r]+w > p.limit(r)+1e-6 {
			// The limit told is the production reserve's: the
			// reservation's draw (a long job) is not.
			limit := p.budget[r]
			if !p.curProd && p.reserve[r] > 0 {
				limit = p.limit(r)
			}
			rs := &gpufleet.RackShortfall{Rack: p.names[r], DrawWatts: p.draw[r], AddWatts: w, LimitWatts: limit,
				BudgetWatts: p.budget[r], Placement: true}
			if least, ok := s.leastRackShare(sh, pl.model); ok && !s.idleRackHolds(pl.model, least) {
				rs.NeverGPUs, rs.NeverWatts = int(least), float64(least*unit)*p.perUnit(pl.model)
			}
			return rs, true
		}
	}
	return nil, false
}

// neverRack is, when no rack with the GPUs of any of models can hold the
// least share of sh even idle, that share in GPUs and the least it draws;
// 0, 0 when some rack could.
func (s *sched) neverRack(sh *shape, models []int32) (int, float64) {
	gpus, watts := 0, math.Inf(1)
	for _, m := range models {
		least, ok := s.leastRackShare(sh, m)
		if !ok || s.idleRackHolds(m, least) {
			return 0, 0
		}
		if w := float64(least*unit) * s.pw.perUnit(m); w < watts {
			gpus, watts = int(least), w
		}
	}
	if gpus == 0 {
		return 0, 0
	}
	return gpus, watts
}

// leastRackShare is the fewest GPUs of a job one rack must take: a node's
// share of a job spread over nodes, all of a job that stays on one node;
// ok is false for shapes that can split finer (fewest nodes, shares).
func (s *sched) leastRackShare(sh *shape, m int32) (int32, bool) {
	switch {
	case sh.kind == gpufleet.MIG || sh.kind == gpufleet.TimeSlice:
		return 0, false
	case sh.multi:
		return max(sh.perNode, 1), true
	case sh.nodes == 1 || sh.gpus <= s.f.maxK[m]:
		return sh.gpus, true
	}
	return 0, false
}

// idleRackHolds reports whether some rack with GPUs of model m, idle
// (Rack.IdleWatts), has room for gpus of them for the current job; true
// when a rack's idle draw is unknown or a node has no budget.
func (s *sched) idleRackHolds(m, gpus int32) bool {
	p := &s.pw
	if p.open {
		return true
	}
	if p.rackHas == nil {
		p.rackHas = make([][]bool, len(p.rackNodes))
		for r, nodes := range p.rackNodes {
			p.rackHas[r] = make([]bool, len(s.f.models))
			for _, ni := range nodes {
				for gi := range s.f.nodes[ni].gpus {
					p.rackHas[r][s.f.nodes[ni].gpus[gi].model] = true
				}
			}
		}
	}
	w := float64(gpus*unit) * p.perUnit(m)
	for r := range p.rackNodes {
		if !p.rackHas[r][m] {
			continue
		}
		if p.idle[r] <= 0 || p.idle[r]+w <= p.limit(int32(r))+1e-6 {
			return true
		}
	}
	return false
}

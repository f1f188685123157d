package scheduler

import (
	"cmp"
	"slices"

	"github.com/gpufleet/gpufleet"
)

// fitMode says how a placement treats the backfill reservation.
type fitMode uint8

const (
	modeNormal  fitMode = iota // no reservation held
	modeLong                   // ends after the reservation: keep off reserved GPUs
	modeShort                  // ends before the reservation: reserved GPUs usable
	modePreempt                // key for cached preemption failures
)

// placement is a chosen set of GPUs for one job.
type placement struct {
	model  int32
	allocs []alloc
}

// cand is the best candidate found so far by a search.
type cand struct {
	ok     bool
	score  [4]int64
	model  int32
	allocs []alloc
}

func (c *cand) better(sc [4]int64) bool { return !c.ok || slices.Compare(sc[:], c.score[:]) < 0 }

// search finds GPUs for a shape on the allowed models, or reports that
// none fit now. All packing policies go through here, the placement cycle,
// the reservation and the ETA simulation alike.
func (s *sched) search(sh *shape, models []int32, mode fitMode) (placement, bool) {
	s.pw.long = mode == modeLong
	defer func() { s.pw.long = false }()
	best := &s.best
	best.ok = false
	best.allocs = best.allocs[:0]
	if len(models) == 0 || !s.powerRoom(sh, models) {
		return placement{}, false
	}
	switch sh.kind {
	case gpufleet.MIG:
		s.searchMIG(sh, models, best)
	case gpufleet.TimeSlice:
		for _, m := range models {
			if s.cfg.Packing == PackTopology && sh.gpus == 1 {
				s.searchShareFGD(sh, m, mode == modeLong, best)
			} else {
				s.searchTimeSlice(sh, m, mode == modeLong, best)
			}
			if sh.prefer && best.ok {
				break
			}
		}
	default:
		for _, m := range models {
			switch {
			case sh.multi:
				s.searchSpread(sh, m, best)
			case sh.spreads(s.f, m):
				s.searchFewestNodes(sh, m, best)
			case sh.gpus > s.f.maxK[m]:
				// nodes 1: more than any node holds
			default:
				s.searchNode(sh, m, best)
				if mode == modeShort && s.resv != nil {
					s.searchReservedNodes(sh, m, best)
				}
			}
			if sh.prefer && best.ok {
				break
			}
		}
	}
	if !best.ok || !s.powerFits(best.allocs, best.model) {
		return placement{}, false
	}
	return placement{model: best.model, allocs: slices.Clone(best.allocs)}, true
}

// mayFit is a cheap necessary condition for an exclusive shape to fit.
func (s *sched) mayFit(sh *shape, models []int32) bool {
	f := s.f
	for _, m := range models {
		switch {
		case sh.kind != gpufleet.Exclusive:
			return true
		case sh.multi:
			var n int32
			for k := sh.perNode; k <= f.maxK[m]; k++ {
				n += f.counts[m][k]
			}
			if n >= sh.nodes {
				return true
			}
		case sh.spreads(f, m):
			if f.totalFree[m] >= int64(sh.gpus) {
				return true
			}
		case sh.gpus > f.maxK[m]:
		default:
			for k := sh.gpus; k <= f.maxK[m]; k++ {
				if f.counts[m][k] > 0 {
					return true
				}
			}
		}
	}
	return false
}

// nodeScore orders single-node candidates by the packing policy: first-fit
// takes the first node in the fleet's node order (fastest model first, then
// seeded; see nodeOrder), best-fit the node left with the fewest free GPUs,
// topology first keeps the job inside the NVLink domain it fills best; ties
// go by node order.
func (s *sched) nodeScore(k, domLeft, ni int32) [4]int64 {
	switch s.cfg.Packing {
	case PackBestFit:
		return [4]int64{int64(k), int64(ni)}
	case PackTopology:
		return [4]int64{int64(domLeft), int64(k), int64(ni)}
	}
	return [4]int64{int64(ni)}
}

// searchNode looks for one node with enough whole free GPUs of model m,
// walking the free-count buckets from the tightest fit up.
func (s *sched) searchNode(sh *shape, m int32, best *cand) {
	f := s.f
	seen := 0
	topo := s.cfg.Packing == PackTopology
	racks, few := s.powerNodes(m, sh.gpus*unit)
	for k := sh.gpus; k <= f.maxK[m]; k++ {
		if f.counts[m][k] == 0 {
			continue
		}
		b := f.buckets[m][k]
		next := b.next
		if few {
			next = func(i int32) int32 { return b.nextAnd(racks, i) }
		}
		for ni := next(0); ni >= 0; ni = next(ni + 1) {
			n := &f.nodes[ni]
			if !sh.selects(n) || !s.powerOK(ni, m, sh.gpus*unit) {
				continue
			}
			gpus, domLeft, ok := s.pickOnNode(n, m, sh.gpus, sh.nvlink, false)
			if !ok {
				continue
			}
			seen++
			sc := s.nodeScore(k, domLeft, ni)
			if best.better(sc) {
				best.set(m, ni, gpus, unit)
				best.score = sc
			}
			if !topo || domLeft == 0 {
				break // later nodes of this bucket score worse
			}
			if seen >= s.cfg.TopologyScanNodes {
				return
			}
		}
		if best.ok && s.cfg.Packing == PackBestFit {
			return
		}
		if best.ok && topo && (best.score[0] == 0 || seen >= s.cfg.TopologyScanNodes) {
			return
		}
	}
}

// searchReservedNodes lets a job that ends before the reservation use the
// reserved GPUs too.
func (s *sched) searchReservedNodes(sh *shape, m int32, best *cand) {
	for _, ni := range s.resv.nodes {
		n := &s.f.nodes[ni]
		if !sh.selects(n) || !s.powerOK(ni, m, sh.gpus*unit) {
			continue
		}
		gpus, domLeft, ok := s.pickOnNode(n, m, sh.gpus, sh.nvlink, true)
		if !ok {
			continue
		}
		i := s.f.mfIndex(n, m)
		sc := s.nodeScore(n.mfree[i].free+n.mfree[i].resv, domLeft, ni)
		if best.better(sc) {
			best.set(m, ni, gpus, unit)
			best.score = sc
		}
	}
}

func (c *cand) set(m, ni int32, gpus []int32, units int32) {
	c.ok = true
	c.model = m
	c.allocs = c.allocs[:0]
	for _, gi := range gpus {
		c.allocs = append(c.allocs, alloc{node: ni, gpu: gi, inst: -1, units: units, whole: units == unit})
	}
}

// pickOnNode chooses need whole free GPUs of model m on one node: inside the
// NVLink domain with the fewest free GPUs that still holds them (filling
// holes), else over as few domains as possible unless nvlink is required.
// domLeft is the free GPUs the chosen domain keeps; spanning domains scores
// 1000 plus the domains spanned.
func (s *sched) pickOnNode(n *nodeSlot, m int32, need int32, nvlink, allowResv bool) ([]int32, int32, bool) {
	doms := s.doms[:0]
	var total int32
	single := int32(-1) // a PCIe-only GPU, a perfect home for a 1-GPU job
	for gi := range n.gpus {
		g := &n.gpus[gi]
		if g.model != m || !wholeFree(n, g, allowResv) {
			continue
		}
		total++
		if g.domain < 0 {
			if single < 0 {
				single = int32(gi)
			}
			continue
		}
		found := false
		for i := range doms {
			if doms[i][0] == g.domain {
				doms[i][1]++
				found = true
				break
			}
		}
		if !found {
			doms = append(doms, [2]int32{g.domain, 1})
		}
	}
	s.doms = doms
	if total < need {
		return nil, 0, false
	}
	out := s.gpuBuf[:0]
	if need == 1 && single >= 0 {
		s.gpuBuf = append(out, single)
		return s.gpuBuf, 0, true
	}
	bestDom, bestFree := int32(-1), int32(1<<30)
	for _, d := range doms {
		if d[1] >= need && d[1] < bestFree {
			bestDom, bestFree = d[0], d[1]
		}
	}
	if bestDom >= 0 {
		for gi := range n.gpus {
			g := &n.gpus[gi]
			if g.model == m && g.domain == bestDom && wholeFree(n, g, allowResv) {
				out = append(out, int32(gi))
				if int32(len(out)) == need {
					break
				}
			}
		}
		s.gpuBuf = out
		return out, bestFree - need, true
	}
	if nvlink {
		return nil, 0, false
	}
	// Span domains, largest first, then PCIe-only GPUs.
	slices.SortFunc(doms, func(a, b [2]int32) int {
		if c := cmp.Compare(b[1], a[1]); c != 0 {
			return c
		}
		return cmp.Compare(a[0], b[0])
	})
	spans := int32(0)
	for _, d := range doms {
		spans++
		for gi := range n.gpus {
			g := &n.gpus[gi]
			if g.model == m && g.domain == d[0] && wholeFree(n, g, allowResv) {
				out = append(out, int32(gi))
				if int32(len(out)) == need {
					break
				}
			}
		}
		if int32(len(out)) == need {
			break
		}
	}
	for gi := range n.gpus {
		if int32(len(out)) == need {
			break
		}
		g := &n.gpus[gi]
		if g.model == m && g.domain < 0 && wholeFree(n, g, allowResv) {
			out = append(out, int32(gi))
			spans++
		}
	}
	s.gpuBuf = out
	return out, 1000 + spans, true
}

// nodeCand is a node that can host part of a multi-node job.
type nodeCand struct {
	ni, free, rack, block int32
}

// groupOf returns a candidate's rack (level 0) or block (level 1).
func groupOf(c nodeCand, level int) int32 {
	if level == 0 {
		return c.rack
	}
	return c.block
}

// spreadCands lists nodes with at least min whole free GPUs of model m,
// by free count ascending, then in node order.
func (s *sched) spreadCands(sh *shape, m, min int32) []nodeCand {
	f := s.f
	cands := s.cands[:0]
	racks, few := s.powerNodes(m, max(min, 1)*unit)
	for k := max(min, 1); k <= f.maxK[m]; k++ {
		if f.counts[m][k] == 0 {
			continue
		}
		b := f.buckets[m][k]
		next := b.next
		if few {
			next = func(i int32) int32 { return b.nextAnd(racks, i) }
		}
		for ni := next(0); ni >= 0; ni = next(ni + 1) {
			n := &f.nodes[ni]
			if !sh.selects(n) || !s.powerOK(ni, m, max(min, 1)*unit) {
				continue
			}
			if sh.nvlink && sh.perNode > 1 {
				if _, _, ok := s.pickOnNode(n, m, sh.perNode, true, false); !ok {
					continue
				}
			}
			cands = append(cands, nodeCand{ni: ni, free: k, rack: n.rack, block: n.block})
		}
	}
	s.cands = cands
	return cands
}

// groupScratch returns zeroed per-group counters for n groups.
func (s *sched) groupScratch(n int) ([]int32, []int64) {
	if cap(s.gcount) < n {
		s.gcount, s.gsum = make([]int32, n), make([]int64, n)
	}
	c, sum := s.gcount[:n], s.gsum[:n]
	clear(c)
	clear(sum)
	return c, sum
}

// searchSpread places a job spread evenly over sh.nodes nodes: inside one
// rack if it can, then inside one block, then anywhere. Candidates come
// tightest first, so each group's first sh.nodes are its best fit; one
// pass counts them, no sorting.
func (s *sched) searchSpread(sh *shape, m int32, best *cand) {
	cands := s.spreadCands(sh, m, sh.perNode)
	if int32(len(cands)) < sh.nodes {
		return
	}
	var chosen []nodeCand
	var score [4]int64
	for level := 0; level < 2 && chosen == nil; level++ {
		groups := len(s.f.racks)
		if level == 1 {
			groups = len(s.f.blocks)
		}
		cnt, left := s.groupScratch(groups)
		bestG := int32(-1)
		for _, c := range cands {
			g := groupOf(c, level)
			if g < 0 || cnt[g] >= sh.nodes {
				continue
			}
			cnt[g]++
			if s.cfg.Packing != PackFirstFit {
				left[g] += int64(c.free - sh.perNode)
			}
			if cnt[g] == sh.nodes {
				sc := [4]int64{int64(level), left[g], int64(g)}
				if bestG < 0 || slices.Compare(sc[:], score[:]) < 0 {
					bestG, score = g, sc
				}
			}
		}
		if bestG >= 0 {
			for _, c := range cands {
				if groupOf(c, level) == bestG && int32(len(chosen)) < sh.nodes {
					chosen = append(chosen, c)
				}
			}
			if !s.chosenPowerOK(chosen, m, func(nodeCand) int32 { return sh.perNode }) {
				chosen = nil // that rack or block lacks the power: the next level
			}
		}
	}
	if chosen == nil {
		if s.cfg.Packing == PackFirstFit {
			slices.SortFunc(cands, func(a, b nodeCand) int { return cmp.Compare(a.ni, b.ni) })
		}
		chosen = s.powerSpread(cands, m, sh.nodes, func(nodeCand) int32 { return sh.perNode })
		score = [4]int64{2}
	}
	if !best.better(score) {
		return
	}
	s.spreadAllocs(sh, m, chosen, func(nodeCand) int32 { return sh.perNode }, score, best)
}

// searchFewestNodes places a job larger than any node on as few nodes as
// possible, preferring one rack, then one block.
func (s *sched) searchFewestNodes(sh *shape, m int32, best *cand) {
	if s.f.totalFree[m] < int64(sh.gpus) {
		return
	}
	cands := s.spreadCands(sh, m, 1)
	var chosen []nodeCand
	var score [4]int64
	for level := 0; level < 3 && chosen == nil; level++ {
		groups := 1
		switch level {
		case 0:
			groups = len(s.f.racks)
		case 1:
			groups = len(s.f.blocks)
		}
		cnt, sum := s.groupScratch(groups)
		bestG := int32(-1)
		for i := len(cands) - 1; i >= 0; i-- { // most free first
			c := cands[i]
			g := int32(0)
			if level < 2 {
				g = groupOf(c, level)
			}
			if g < 0 || sum[g] >= int64(sh.gpus) {
				continue
			}
			cnt[g]++
			sum[g] += int64(c.free)
			if sum[g] >= int64(sh.gpus) {
				sc := [4]int64{int64(level), int64(cnt[g]), int64(g)}
				if bestG < 0 || slices.Compare(sc[:], score[:]) < 0 {
					bestG, score = g, sc
				}
			}
		}
		if bestG < 0 {
			continue
		}
		var got int64
		for i := len(cands) - 1; i >= 0 && got < int64(sh.gpus); i-- {
			c := cands[i]
			if level < 2 && groupOf(c, level) != bestG {
				continue
			}
			if level == 2 && !s.powerRoomWith(chosen, c, m, min(c.free, int32(int64(sh.gpus)-got)), func(x nodeCand) int32 { return x.free }) {
				continue // its rack lacks the power with the nodes chosen there: another rack's node
			}
			chosen = append(chosen, c)
			got += int64(c.free)
		}
		if got < int64(sh.gpus) {
			chosen = nil // power leaves too few nodes
			continue
		}
		left := sh.gpus
		if !s.chosenPowerOK(chosen, m, func(c nodeCand) int32 {
			take := min(c.free, left)
			left -= take
			return take
		}) {
			chosen = nil // that rack or block lacks the power: the next level
		}
	}
	if chosen == nil || !best.better(score) {
		return
	}
	left := sh.gpus
	s.spreadAllocs(sh, m, chosen, func(c nodeCand) int32 {
		take := min(c.free, left)
		left -= take
		return take
	}, score, best)
}

// spreadAllocs turns chosen nodes into the candidate's GPUs.
func (s *sched) spreadAllocs(sh *shape, m int32, chosen []nodeCand, count func(nodeCand) int32, sc [4]int64, best *cand) {
	slices.SortFunc(chosen, func(a, b nodeCand) int { return cmp.Compare(a.ni, b.ni) })
	var allocs []alloc
	for _, c := range chosen {
		want := count(c)
		gpus, _, ok := s.pickOnNode(&s.f.nodes[c.ni], m, want, sh.nvlink, false)
		if !ok {
			return
		}
		for _, gi := range gpus {
			allocs = append(allocs, alloc{node: c.ni, gpu: gi, inst: -1, units: unit, whole: true})
		}
	}
	best.ok, best.model, best.score = true, m, sc
	best.allocs = append(best.allocs[:0], allocs...)
}

// searchMIG finds free MIG instances of the profile on one node, packing
// onto the node and GPUs with the fewest free instances.
func (s *sched) searchMIG(sh *shape, models []int32, best *cand) {
	if sh.profile < 0 {
		return
	}
	f := s.f
	allowed := s.modelSet(models)
	if s.cfg.Packing != PackFirstFit {
		s.searchMIGBuckets(sh, allowed, best)
		return
	}
	b := f.migNodes[sh.profile]
	for ni := b.next(0); ni >= 0; ni = b.next(ni + 1) {
		n := &f.nodes[ni]
		if n.migFree[sh.profile] < sh.gpus || !sh.selects(n) {
			continue
		}
		var free int32
		for gi := range n.gpus {
			g := &n.gpus[gi]
			if g.mig == nil || !g.ready || !allowed[g.model] {
				continue
			}
			for _, in := range g.mig {
				if in.profile == sh.profile && !in.used {
					free++
				}
			}
		}
		if free < sh.gpus {
			continue
		}
		sc := [4]int64{int64(ni)}
		if s.cfg.Packing != PackFirstFit {
			sc = [4]int64{int64(free), int64(ni)}
		}
		if !best.better(sc) {
			continue
		}
		s.pickMIG(n, ni, sh, allowed, best)
		best.score = sc
		if s.cfg.Packing == PackFirstFit {
			return
		}
	}
}

// searchMIGBuckets is searchMIG's best fit: the node with the fewest free
// instances of the profile on allowed models that still holds the job,
// then the first by name. On a node whose instances of the profile are
// all on one model's GPUs that count is migFree (or 0 when the model is
// not allowed), so the buckets, walked from the job's count up, yield
// the best such node first; nodes with several models' instances
// (migMixed) are counted one by one.
func (s *sched) searchMIGBuckets(sh *shape, allowed []bool, best *cand) {
	f := s.f
	p := sh.profile
	mixed := f.migMixed[p]
	bestNi, bestFree := int32(-1), int32(0)
	buckets := f.migBuckets[p]
	for c := sh.gpus; int(c) < len(buckets) && bestNi < 0; c++ {
		if f.migCounts[p][c] == 0 {
			continue
		}
		b := buckets[c]
		for ni := b.next(0); ni >= 0; ni = b.next(ni + 1) {
			n := &f.nodes[ni]
			if mixed.has(ni) || !sh.selects(n) || !allowed[migModel(n, p)] {
				continue
			}
			bestNi, bestFree = ni, c
			break
		}
	}
	for ni := mixed.next(0); ni >= 0; ni = mixed.next(ni + 1) {
		n := &f.nodes[ni]
		if n.migFree == nil || n.migFree[p] < sh.gpus || !sh.selects(n) {
			continue
		}
		var free int32
		for gi := range n.gpus {
			g := &n.gpus[gi]
			if g.mig == nil || !g.ready || !allowed[g.model] {
				continue
			}
			for _, in := range g.mig {
				if in.profile == p && !in.used {
					free++
				}
			}
		}
		if free >= sh.gpus && (bestNi < 0 || free < bestFree || free == bestFree && ni < bestNi) {
			bestNi, bestFree = ni, free
		}
	}
	if bestNi < 0 {
		return
	}
	s.pickMIG(&f.nodes[bestNi], bestNi, sh, allowed, best)
	best.score = [4]int64{int64(bestFree), int64(bestNi)}
}

// pickMIG takes instances from the GPUs with the fewest free ones first.
func (s *sched) pickMIG(n *nodeSlot, ni int32, sh *shape, allowed []bool, best *cand) {
	type gfree struct{ gi, free int32 }
	var gs []gfree
	for gi := range n.gpus {
		g := &n.gpus[gi]
		if g.mig == nil || !g.ready || !allowed[g.model] {
			continue
		}
		var free int32
		for _, in := range g.mig {
			if in.profile == sh.profile && !in.used {
				free++
			}
		}
		if free > 0 {
			gs = append(gs, gfree{int32(gi), free})
		}
	}
	slices.SortFunc(gs, func(a, b gfree) int {
		if c := cmp.Compare(a.free, b.free); c != 0 {
			return c
		}
		return cmp.Compare(a.gi, b.gi)
	})
	best.ok = true
	best.model = n.gpus[gs[0].gi].model
	best.allocs = best.allocs[:0]
	for _, gf := range gs {
		for ii, in := range n.gpus[gf.gi].mig {
			if int32(len(best.allocs)) == sh.gpus {
				return
			}
			if in.profile == sh.profile && !in.used {
				best.allocs = append(best.allocs, alloc{node: ni, gpu: gf.gi, inst: int32(ii), units: unit})
			}
		}
	}
}

// searchTimeSlice packs time-slice shares onto GPUs already shared, then
// onto whole free GPUs of the tightest node. Shares never land on a GPU in
// MIG mode or one held whole.
// A long job (modeLong) also keeps off a GPU reserved for a shared head.
func (s *sched) searchTimeSlice(sh *shape, m int32, long bool, best *cand) {
	f := s.f
	b := f.tsNodes[m]
	for ni := b.next(0); ni >= 0; ni = b.next(ni + 1) {
		n := &f.nodes[ni]
		if !sh.selects(n) {
			continue
		}
		var partial, whole int32
		for gi := range n.gpus {
			g := &n.gpus[gi]
			if g.model != m || !countable(n, g) || g.excl || long && g.reserved {
				continue
			}
			switch {
			case g.used == 0 && !g.reserved:
				whole++
			case g.used > 0 && g.used+sh.units <= unit:
				partial++
			}
		}
		if partial+whole < sh.gpus {
			continue
		}
		broken := max(0, sh.gpus-partial)
		sc := [4]int64{int64(broken), int64(ni)}
		if best.better(sc) {
			s.pickShares(n, ni, m, sh, long, best)
			best.score = sc
		}
		if broken == 0 {
			return
		}
	}
	if best.ok {
		return
	}
	// No shared GPU has room: open whole GPUs on the tightest node.
	for k := sh.gpus; k <= f.maxK[m]; k++ {
		bk := f.buckets[m][k]
		for ni := bk.next(0); ni >= 0; ni = bk.next(ni + 1) {
			n := &f.nodes[ni]
			if !sh.selects(n) {
				continue
			}
			sc := [4]int64{int64(sh.gpus), int64(k), int64(ni)}
			if best.better(sc) {
				s.pickShares(n, ni, m, sh, long, best)
				best.score = sc
			}
			return
		}
	}
}

// pickShares takes the fullest shared GPUs first, then whole free ones.
func (s *sched) pickShares(n *nodeSlot, ni, m int32, sh *shape, long bool, best *cand) {
	type gu struct{ gi, used int32 }
	var gs []gu
	for gi := range n.gpus {
		g := &n.gpus[gi]
		if g.model != m || !countable(n, g) || g.excl || g.used+sh.units > unit || (g.used == 0 || long) && g.reserved {
			continue
		}
		gs = append(gs, gu{int32(gi), g.used})
	}
	slices.SortFunc(gs, func(a, b gu) int {
		if c := cmp.Compare(b.used, a.used); c != 0 {
			return c
		}
		return cmp.Compare(a.gi, b.gi)
	})
	best.ok, best.model = true, m
	best.allocs = best.allocs[:0]
	for _, g := range gs[:sh.gpus] {
		best.allocs = append(best.allocs, alloc{node: ni, gpu: g.gi, inst: -1, units: sh.units})
	}
}

// modelSet returns a per-model membership table.
func (s *sched) modelSet(models []int32) []bool {
	set := s.modelBuf[:0]
	for range s.f.models {
		set = append(set, false)
	}
	for _, m := range models {
		set[m] = true
	}
	s.modelBuf = set
	return set
}

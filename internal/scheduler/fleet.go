package scheduler

import (
	"cmp"
	"hash/fnv"
	"maps"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// unit is one whole GPU in time-slice units (and in milli-GPUs of quota
// accounting): a share of 0.25 is 250 units.
const unit = 1000

// bitset is a set of node indices; iteration runs in index order, which is
// the fleet's node order (see nodeOrder), so every scan is deterministic.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) set(i int32)   { b[i>>6] |= 1 << (uint(i) & 63) }
func (b bitset) unset(i int32) { b[i>>6] &^= 1 << (uint(i) & 63) }

func (b bitset) has(i int32) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }

// nextAnd returns the first member >= i that is also in c, or -1.
func (b bitset) nextAnd(c bitset, i int32) int32 {
	w := int(i >> 6)
	if w >= len(b) {
		return -1
	}
	word := (b[w] & c[w]) >> (uint(i) & 63)
	if word != 0 {
		return i + int32(bits.TrailingZeros64(word))
	}
	for w++; w < len(b); w++ {
		if x := b[w] & c[w]; x != 0 {
			return int32(w*64 + bits.TrailingZeros64(x))
		}
	}
	return -1
}

// next returns the first member >= i, or -1.
func (b bitset) next(i int32) int32 {
	w := int(i >> 6)
	if w >= len(b) {
		return -1
	}
	word := b[w] >> (uint(i) & 63)
	if word != 0 {
		return i + int32(bits.TrailingZeros64(word))
	}
	for w++; w < len(b); w++ {
		if b[w] != 0 {
			return int32(w*64 + bits.TrailingZeros64(b[w]))
		}
	}
	return -1
}

// modelInfo is one GPU model of the fleet.
type modelInfo struct {
	id     string
	gpu    catalog.GPU
	opaque bool  // only ID and Name known: matches by name only
	class  int32 // quota class, -1 when no team's quota names it
	gpus   int   // GPUs of the model in the fleet, whatever their state
	speed  float64
	price  *float64
	// perWatt is the bf16 (else fp16) peak per watt of TDP, 0 when either
	// is unpublished: the energy a unit of compute-bound work takes on it
	// is proportional to its inverse.
	perWatt float64
}

// migSlot is one MIG instance of a GPU.
type migSlot struct {
	id      string
	profile int32
	used    bool
}

// gpuSlot is one GPU in the free-capacity model.
type gpuSlot struct {
	id       string
	model    int32
	domain   int32 // node-local NVLink domain, -1 for PCIe only
	ready    bool
	mig      []migSlot // non-nil in MIG mode
	used     int32     // units in use; unit when held whole
	excl     bool      // held whole (exclusive job or a preemption claim)
	reserved bool      // part of the head job's backfill reservation
}

// modelFree counts one model's GPUs on a node.
type modelFree struct {
	model int32
	free  int32 // whole-free, not reserved, countable
	resv  int32 // whole-free but reserved
}

// nodeSlot is one node in the free-capacity model.
type nodeSlot struct {
	name        string
	ready       bool
	rack, block int32 // -1 when unknown
	labels      map[string]string
	stack       int32 // index into fleet.stacks: the node's distinct versions
	virt        int32 // index into fleet.virts: the node's virtualization
	containers  bool  // its agent runs jobs with an image (runtime podman or docker)
	gpus        []gpuSlot
	mfree       []modelFree // one entry per model on the node, by model
	migFree     []int32     // free MIG instances per profile; nil without MIG
}

// loc names a GPU or MIG instance.
type loc struct {
	node, gpu, inst int32 // inst -1 for a whole GPU
}

// fleet is the compact free-capacity model the placement code works on. It
// keeps, per model, the nodes bucketed by their count of whole free GPUs,
// so a fit is found without scanning every node.
type fleet struct {
	nodes      []nodeSlot
	models     []modelInfo
	modelIdx   map[string]int32
	profiles   []string
	profileIdx map[string]int32
	racks      []string
	blocks     []string
	// stacks are the nodes' distinct software versions, and stackNode the
	// first node (by fleet order) that runs each; a job's stack needs are
	// judged once per distinct stack, not once per node.
	stacks    []gpufleet.StackVersions
	stackNode []string
	// virts are the nodes' distinct virtualizations (the virtualization
	// label); a job's isolation needs are judged once per distinct one.
	virts []gpufleet.Virtualization

	maxK      []int32    // per model: most GPUs of the model on one node
	buckets   [][]bitset // [model][k]: nodes with exactly k whole free GPUs
	counts    [][]int32  // [model][k]: members of buckets[model][k]
	totalFree []int64    // per model: whole free GPUs
	migNodes  []bitset   // [profile]: nodes with a free instance
	// migBuckets[p][c] holds the nodes with exactly c free instances of
	// profile p (c >= 1), as buckets does for whole GPUs; migMixed[p]
	// (read-only) the nodes whose instances of p are on GPUs of more than
	// one model, where the count of a model's free instances is not
	// migFree.
	migBuckets [][]bitset
	migCounts  [][]int32 // [profile][c]: members of migBuckets[profile][c]
	migMixed   []bitset
	tsNodes    []bitset // [model]: nodes with a partly shared GPU
	classFree  []int64  // per quota class: free capacity in milli-GPUs
	locs       map[string]loc
	notReady   bool // some node or GPU is not ready

	// epoch grows whenever capacity grows; cached "does not fit" answers
	// are valid only within one epoch.
	epoch uint32
	// raise counts, per model and level k, the times a node's whole free
	// GPUs rose to k or more: a shape needing k GPUs on one node can only
	// start fitting when raise[m][k] moves. migRaise, tsRaise, totalRaise
	// and resvRaise do the same for MIG instances, time-slice room, total
	// free GPUs and reserved GPUs.
	raise      [][]uint32
	migRaise   []uint32
	tsRaise    []uint32
	totalRaise []uint32
	resvRaise  uint32

	// pidx, during the placement cycle once a job has searched for
	// victims, is told of every change of a node's free GPUs.
	pidx *preemptIndex
}

// buildFleet turns the input's nodes into the capacity model, nodes in
// nodeOrder so that input order does not matter. anyState counts every
// node and GPU as ready: the fleet a job could ever run on, since a
// cordoned, draining or down node may return.
func buildFleet(in *Input, classOf func(model string) int32, nClasses int, anyState bool) *fleet {
	ids := 0
	nodes := make([]*Node, 0, len(in.Nodes))
	for i := range in.Nodes {
		nodes = append(nodes, &in.Nodes[i])
		for g := range in.Nodes[i].GPUs {
			ids += 1 + len(in.Nodes[i].GPUs[g].MIG)
		}
	}
	f := &fleet{modelIdx: map[string]int32{}, profileIdx: map[string]int32{}, locs: make(map[string]loc, ids)}

	// Intern models: every Input.Models entry plus any model a node names.
	modelIDs := map[string]bool{}
	for id := range in.Models {
		modelIDs[id] = true
	}
	for _, n := range nodes {
		for _, g := range n.GPUs {
			modelIDs[g.Model] = true
		}
	}
	for _, id := range sortedKeys(modelIDs) {
		g, ok := in.Models[id]
		if !ok {
			g = catalog.GPU{ID: id, Name: id}
		}
		mi := modelInfo{id: id, gpu: g, class: classOf(id), price: g.PricePerHourUSD}
		mi.opaque = g.MemoryBytes == 0 && g.ComputeCapability.IsZero() && len(g.PeakFLOPS) == 0
		if v, ok := g.Peak(gpufleet.BF16); ok {
			mi.speed = v
		} else if v, ok := g.Peak(gpufleet.FP16); ok {
			mi.speed = v
		}
		if g.TDPWatts != nil && *g.TDPWatts > 0 {
			mi.perWatt = mi.speed / *g.TDPWatts
		}
		f.modelIdx[id] = int32(len(f.models))
		f.models = append(f.models, mi)
	}
	nodeOrder(nodes, f, in.Config.Seed)
	rackIdx, blockIdx, stackIdx := map[string]int32{}, map[string]int32{}, map[string]int32{}
	intern := func(m map[string]int32, list *[]string, s string) int32 {
		if s == "" {
			return -1
		}
		if i, ok := m[s]; ok {
			return i
		}
		m[s] = int32(len(*list))
		*list = append(*list, s)
		return m[s]
	}
	f.maxK = make([]int32, len(f.models))
	byIndex := func(a, b GPU) int { return a.Index - b.Index }
	// Per node: its NVLink domains (a domain name and a model make one,
	// numbered in order of appearance) and its GPUs per model.
	type domain struct {
		name  string
		model int32
	}
	var doms []domain
	var perModel []modelFree // free counts the model's GPUs here
	for _, n := range nodes {
		ns := nodeSlot{name: n.Name, ready: anyState || n.State == Ready || n.State == "", labels: n.Labels,
			rack: intern(rackIdx, &f.racks, n.Rack), block: intern(blockIdx, &f.blocks, n.Block)}
		ns.stack = f.internStack(stackIdx, n)
		ns.virt = f.internVirt(gpufleet.NodeVirtualization(n.Labels))
		ns.containers = gpufleet.RunsContainers(n.Labels)
		gs := n.GPUs
		if !slices.IsSortedFunc(gs, byIndex) {
			gs = slices.Clone(gs)
			slices.SortStableFunc(gs, byIndex)
		}
		doms, perModel = doms[:0], perModel[:0]
		ns.gpus = make([]gpuSlot, 0, len(gs))
		for _, g := range gs {
			m := f.modelIdx[g.Model]
			f.models[m].gpus++
			slot := gpuSlot{id: g.ID, model: m, domain: -1, ready: anyState || g.State == Ready || g.State == ""}
			if g.NVLinkDomain != "" {
				d := slices.Index(doms, domain{g.NVLinkDomain, m})
				if d < 0 {
					d = len(doms)
					doms = append(doms, domain{g.NVLinkDomain, m})
				}
				slot.domain = int32(d)
			}
			if len(g.MIG) > 0 {
				slot.mig = make([]migSlot, 0, len(g.MIG))
				for _, mi := range g.MIG {
					p := intern(f.profileIdx, &f.profiles, strings.ToLower(mi.Profile))
					slot.mig = append(slot.mig, migSlot{id: mi.ID, profile: p})
				}
			} else if i := slices.IndexFunc(perModel, func(mf modelFree) bool { return mf.model == m }); i >= 0 {
				perModel[i].free++
			} else {
				perModel = append(perModel, modelFree{model: m, free: 1})
			}
			ns.gpus = append(ns.gpus, slot)
			f.notReady = f.notReady || !slot.ready
		}
		f.notReady = f.notReady || !ns.ready
		slices.SortFunc(perModel, func(a, b modelFree) int { return cmp.Compare(a.model, b.model) })
		for _, pm := range perModel {
			ns.mfree = append(ns.mfree, modelFree{model: pm.model})
			f.maxK[pm.model] = max(f.maxK[pm.model], pm.free)
		}
		f.nodes = append(f.nodes, ns)
	}
	f.raise = make([][]uint32, len(f.models))
	f.tsRaise = make([]uint32, len(f.models))
	f.totalRaise = make([]uint32, len(f.models))
	f.buckets = make([][]bitset, len(f.models))
	f.counts = make([][]int32, len(f.models))
	f.totalFree = make([]int64, len(f.models))
	f.tsNodes = make([]bitset, len(f.models))
	for m := range f.models {
		f.buckets[m] = make([]bitset, f.maxK[m]+1)
		for k := range f.buckets[m] {
			f.buckets[m][k] = newBitset(len(f.nodes))
		}
		f.counts[m] = make([]int32, f.maxK[m]+1)
		f.raise[m] = make([]uint32, f.maxK[m]+1)
		f.tsNodes[m] = newBitset(len(f.nodes))
	}
	f.migNodes = make([]bitset, len(f.profiles))
	f.migRaise = make([]uint32, len(f.profiles))
	for p := range f.profiles {
		f.migNodes[p] = newBitset(len(f.nodes))
	}
	f.indexMIG()
	f.classFree = make([]int64, nClasses)
	for ni := range f.nodes {
		n := &f.nodes[ni]
		for gi := range n.gpus {
			g := &n.gpus[gi]
			f.locs[g.id] = loc{int32(ni), int32(gi), -1}
			for ii, inst := range g.mig {
				f.locs[inst.id] = loc{int32(ni), int32(gi), int32(ii)}
			}
			if !n.ready || !g.ready {
				continue
			}
			if g.mig != nil {
				if n.migFree == nil {
					n.migFree = make([]int32, len(f.profiles))
				}
				for _, inst := range g.mig {
					f.migCount(int32(ni), inst.profile, +1)
					f.addClass(g.model, f.migCharge(g.model, inst.profile))
				}
				continue
			}
			n.mfree[f.mfIndex(n, g.model)].free++
			f.totalFree[g.model]++
			f.addClass(g.model, unit)
		}
		for _, mf := range n.mfree {
			f.buckets[mf.model][mf.free].set(int32(ni))
			f.counts[mf.model][mf.free]++
		}
	}
	return f
}

// nodeOrder sorts the nodes into the fleet's node order, the tie-break of
// every packing policy among equally good nodes (first-fit takes the first
// node in it that fits; best-fit and topology break their ties by it; node
// scans, preemption searches and spreads go in it): nodes whose fastest
// model is faster first (bf16, else fp16 peak from the catalog; opaque
// models, with no figures, after every model that has them, by name), then
// a seeded order, a PCG seeded from Config.Seed and the node's name, so
// that no node wins ties for its name (k80-000 before v100-000), then the
// name. The order depends on the nodes' names, models and the seed, never
// on the input's order.
func nodeOrder(nodes []*Node, f *fleet, seed uint64) {
	// Model ranks: fastest first; equal speeds (opaque models: 0) by id.
	rank := make([]int, len(f.models))
	byRank := make([]int, len(f.models))
	for i := range byRank {
		byRank[i] = i
	}
	slices.SortStableFunc(byRank, func(a, b int) int {
		if c := cmp.Compare(f.models[b].speed, f.models[a].speed); c != 0 {
			return c
		}
		return strings.Compare(f.models[a].id, f.models[b].id)
	})
	for r, m := range byRank {
		rank[m] = r
	}
	type key struct {
		n    *Node
		best int
		hash uint64
	}
	keys := make([]key, len(nodes))
	for i, n := range nodes {
		k := key{n: n, best: len(f.models)}
		for _, g := range n.GPUs {
			if m, ok := f.modelIdx[g.Model]; ok {
				k.best = min(k.best, rank[m])
			}
		}
		h := fnv.New64a()
		h.Write([]byte(n.Name))
		k.hash = rand.New(rand.NewPCG(seed, h.Sum64())).Uint64()
		keys[i] = k
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(a.best, b.best); c != 0 {
			return c
		}
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return strings.Compare(a.n.Name, b.n.Name)
	})
	for i := range keys {
		nodes[i] = keys[i].n
	}
}

// clone copies the mutable state so that the copy can be changed freely.
// The per-node and per-model slices of the copy share a few backing arrays,
// so a copy costs a handful of allocations whatever the fleet's size; the
// read-only parts (names, labels, GPU ids, locs) are shared.
func (f *fleet) clone() *fleet {
	c := *f
	c.pidx = nil
	c.nodes = slices.Clone(f.nodes)
	ng, nm := 0, 0
	for i := range f.nodes {
		ng += len(f.nodes[i].gpus)
		nm += len(f.nodes[i].mfree)
	}
	gpus := make([]gpuSlot, 0, ng)
	mfree := make([]modelFree, 0, nm)
	for i := range c.nodes {
		n := &c.nodes[i]
		start := len(gpus)
		gpus = append(gpus, n.gpus...)
		n.gpus = gpus[start:len(gpus):len(gpus)]
		for gi := range n.gpus {
			if n.gpus[gi].mig != nil {
				n.gpus[gi].mig = slices.Clone(n.gpus[gi].mig)
			}
		}
		start = len(mfree)
		mfree = append(mfree, n.mfree...)
		n.mfree = mfree[start:len(mfree):len(mfree)]
		if n.migFree != nil {
			n.migFree = slices.Clone(n.migFree)
		}
	}
	words := 0
	for m := range f.buckets {
		for k := range f.buckets[m] {
			words += len(f.buckets[m][k])
		}
		words += len(f.tsNodes[m])
	}
	for p := range f.migNodes {
		words += len(f.migNodes[p])
		for c := range f.migBuckets[p] {
			words += len(f.migBuckets[p][c])
		}
	}
	bits := make([]uint64, 0, words)
	cloneBits := func(b bitset) bitset {
		start := len(bits)
		bits = append(bits, b...)
		return bitset(bits[start:len(bits):len(bits)])
	}
	c.buckets = make([][]bitset, len(f.buckets))
	for m := range f.buckets {
		c.buckets[m] = make([]bitset, len(f.buckets[m]))
		for k := range f.buckets[m] {
			c.buckets[m][k] = cloneBits(f.buckets[m][k])
		}
	}
	c.counts = make([][]int32, len(f.counts))
	for m := range f.counts {
		c.counts[m] = slices.Clone(f.counts[m])
	}
	c.totalFree = slices.Clone(f.totalFree)
	c.migNodes = make([]bitset, len(f.migNodes))
	c.migBuckets = make([][]bitset, len(f.migBuckets))
	c.migCounts = make([][]int32, len(f.migCounts))
	for p := range f.migNodes {
		c.migCounts[p] = slices.Clone(f.migCounts[p])
		c.migNodes[p] = cloneBits(f.migNodes[p])
		c.migBuckets[p] = make([]bitset, len(f.migBuckets[p]))
		for k := range f.migBuckets[p] {
			c.migBuckets[p][k] = cloneBits(f.migBuckets[p][k])
		}
	}
	c.tsNodes = make([]bitset, len(f.tsNodes))
	for m := range f.tsNodes {
		c.tsNodes[m] = cloneBits(f.tsNodes[m])
	}
	c.classFree = slices.Clone(f.classFree)
	c.raise = make([][]uint32, len(f.raise))
	for m := range f.raise {
		c.raise[m] = slices.Clone(f.raise[m])
	}
	c.migRaise = slices.Clone(f.migRaise)
	c.tsRaise = slices.Clone(f.tsRaise)
	c.totalRaise = slices.Clone(f.totalRaise)
	return &c
}

// indexMIG sizes the MIG buckets, per profile, to the most instances of
// the profile on one node, and finds the nodes where the profile's
// instances are on GPUs of more than one model.
func (f *fleet) indexMIG() {
	most := make([]int32, len(f.profiles))
	f.migMixed = make([]bitset, len(f.profiles))
	for p := range f.profiles {
		f.migMixed[p] = newBitset(len(f.nodes))
	}
	count := make([]int32, len(f.profiles))
	model := make([]int32, len(f.profiles))
	for ni := range f.nodes {
		n := &f.nodes[ni]
		clear(count)
		for gi := range n.gpus {
			g := &n.gpus[gi]
			for _, in := range g.mig {
				if count[in.profile] == 0 {
					model[in.profile] = g.model
				} else if model[in.profile] != g.model {
					f.migMixed[in.profile].set(int32(ni))
				}
				count[in.profile]++
			}
		}
		for p, c := range count {
			most[p] = max(most[p], c)
		}
	}
	f.migBuckets = make([][]bitset, len(f.profiles))
	f.migCounts = make([][]int32, len(f.profiles))
	for p := range f.profiles {
		f.migCounts[p] = make([]int32, most[p]+1)
		f.migBuckets[p] = make([]bitset, most[p]+1)
		for c := 1; c <= int(most[p]); c++ {
			f.migBuckets[p][c] = newBitset(len(f.nodes))
		}
	}
}

// migCount moves a node's count of free instances of profile p by delta,
// keeping migNodes and migBuckets.
func (f *fleet) migCount(ni, p, delta int32) {
	n := &f.nodes[ni]
	if n.migFree == nil {
		n.migFree = make([]int32, len(f.profiles))
	}
	old := n.migFree[p]
	n.migFree[p] += delta
	if old > 0 {
		f.migBuckets[p][old].unset(ni)
		f.migCounts[p][old]--
	}
	if c := n.migFree[p]; c > 0 {
		f.migBuckets[p][c].set(ni)
		f.migCounts[p][c]++
		f.migNodes[p].set(ni)
	} else {
		f.migNodes[p].unset(ni)
	}
}

// migModel is the model of the GPUs that hold node n's instances of
// profile p (one model: n is not in migMixed[p]).
func migModel(n *nodeSlot, p int32) int32 {
	for gi := range n.gpus {
		for _, in := range n.gpus[gi].mig {
			if in.profile == p {
				return n.gpus[gi].model
			}
		}
	}
	return -1
}

func (f *fleet) mfIndex(n *nodeSlot, m int32) int {
	for i := range n.mfree {
		if n.mfree[i].model == m {
			return i
		}
	}
	return -1
}

// migCharge is the quota charge of one MIG instance in milli-GPUs.
func (f *fleet) migCharge(m, p int32) int64 {
	g := f.models[m].gpu
	total := 0
	for _, mp := range g.MIGProfiles {
		total = max(total, mp.Slices)
	}
	if mp, ok := g.MIG(f.profiles[p]); ok && total > 0 && mp.Slices > 0 {
		return int64(mp.Slices) * unit / int64(total)
	}
	return unit / 7
}

func (f *fleet) addClass(m int32, delta int64) {
	if c := f.models[m].class; c >= 0 {
		f.classFree[c] += delta
	}
}

// countable reports whether a non-MIG GPU counts as capacity.
func countable(n *nodeSlot, g *gpuSlot) bool { return n.ready && g.ready && g.mig == nil }

// adjFree moves a node between free-count buckets of model m.
func (f *fleet) adjFree(ni int32, m int32, delta int32) {
	n := &f.nodes[ni]
	i := f.mfIndex(n, m)
	mf := &n.mfree[i]
	f.buckets[m][mf.free].unset(ni)
	f.counts[m][mf.free]--
	old := mf.free
	mf.free += delta
	f.buckets[m][mf.free].set(ni)
	f.counts[m][mf.free]++
	f.totalFree[m] += int64(delta)
	if f.pidx != nil {
		f.pidx.update(ni, m)
	}
	if delta > 0 {
		f.epoch++
		for k := old + 1; k <= mf.free; k++ {
			f.raise[m][k]++
		}
		f.tsRaise[m]++
		f.totalRaise[m]++
	}
}

// becomesBusy and becomesFree keep the counters when a GPU's used count
// leaves or returns to zero.
func (f *fleet) becomesBusy(ni, gi int32) {
	n := &f.nodes[ni]
	g := &n.gpus[gi]
	if !countable(n, g) {
		return
	}
	if g.reserved {
		n.mfree[f.mfIndex(n, g.model)].resv--
		return
	}
	f.adjFree(ni, g.model, -1)
}

func (f *fleet) becomesFree(ni, gi int32) {
	n := &f.nodes[ni]
	g := &n.gpus[gi]
	if !countable(n, g) {
		return
	}
	if g.reserved {
		n.mfree[f.mfIndex(n, g.model)].resv++
		f.epoch++
		f.resvRaise++
		return
	}
	f.adjFree(ni, g.model, +1)
}

// alloc is one piece of a placement: a whole GPU, a time-slice share of
// one, or one MIG instance.
type alloc struct {
	node, gpu, inst int32 // inst -1 unless MIG
	units           int32 // time-slice units; unit for whole
	whole           bool
}

// take applies one piece of a placement to the free-capacity model.
func (f *fleet) take(a alloc) {
	n := &f.nodes[a.node]
	g := &n.gpus[a.gpu]
	if a.inst >= 0 {
		in := &g.mig[a.inst]
		if in.used {
			return
		}
		in.used = true
		if n.ready && g.ready {
			f.migCount(a.node, in.profile, -1)
			f.addClass(g.model, -f.migCharge(g.model, in.profile))
		}
		return
	}
	wasFree := g.used == 0
	g.used += a.units
	if a.whole {
		g.excl = true
	}
	if wasFree && g.used > 0 {
		f.becomesBusy(a.node, a.gpu)
	}
	if countable(n, g) {
		f.addClass(g.model, -int64(a.units))
		if !a.whole {
			f.updateTS(a.node, g.model)
		}
	}
}

// release undoes take.
func (f *fleet) release(a alloc) {
	n := &f.nodes[a.node]
	g := &n.gpus[a.gpu]
	if a.inst >= 0 {
		in := &g.mig[a.inst]
		if !in.used {
			return
		}
		in.used = false
		if n.ready && g.ready {
			f.migCount(a.node, in.profile, +1)
			f.addClass(g.model, f.migCharge(g.model, in.profile))
			f.epoch++
			f.migRaise[in.profile]++
		}
		return
	}
	g.used -= a.units
	if a.whole {
		g.excl = false
	}
	if countable(n, g) {
		f.addClass(g.model, int64(a.units))
	}
	if g.used == 0 {
		f.becomesFree(a.node, a.gpu)
	}
	if countable(n, g) && !a.whole {
		f.updateTS(a.node, g.model)
		f.epoch++
		f.tsRaise[g.model]++
	}
}

// updateTS keeps tsNodes: nodes with a partly used, shareable GPU.
func (f *fleet) updateTS(ni, m int32) {
	n := &f.nodes[ni]
	for gi := range n.gpus {
		g := &n.gpus[gi]
		if g.model == m && countable(n, g) && !g.excl && g.used > 0 && g.used < unit {
			f.tsNodes[m].set(ni)
			return
		}
	}
	f.tsNodes[m].unset(ni)
}

// reserve and unreserve mark a GPU as held for the backfill reservation.
func (f *fleet) reserve(ni, gi int32) {
	n := &f.nodes[ni]
	g := &n.gpus[gi]
	if g.reserved {
		return
	}
	if countable(n, g) && g.used == 0 {
		f.adjFree(ni, g.model, -1)
		n.mfree[f.mfIndex(n, g.model)].resv++
	}
	g.reserved = true
}

func (f *fleet) unreserve(ni, gi int32) {
	n := &f.nodes[ni]
	g := &n.gpus[gi]
	if !g.reserved {
		return
	}
	g.reserved = false
	if countable(n, g) && g.used == 0 {
		n.mfree[f.mfIndex(n, g.model)].resv--
		f.adjFree(ni, g.model, +1)
	}
	f.epoch++
}

// wholeFree reports whether a GPU can be given whole to a job.
func wholeFree(n *nodeSlot, g *gpuSlot, allowReserved bool) bool {
	return g.used == 0 && countable(n, g) && (allowReserved || !g.reserved)
}

// stamp sums the counters that must move before a shape that did not fit
// can fit: it is unchanged while no relevant capacity was freed.
func (f *fleet) stamp(sh *shape) uint64 {
	var st uint64
	for _, m := range sh.models {
		switch {
		case sh.kind == gpufleet.MIG:
			if sh.profile >= 0 {
				st += uint64(f.migRaise[sh.profile])
			}
		case sh.kind == gpufleet.TimeSlice:
			st += uint64(f.tsRaise[m])
		case sh.multi:
			if sh.perNode <= f.maxK[m] {
				st += uint64(f.raise[m][sh.perNode])
			}
		case sh.spreads(f, m):
			st += uint64(f.totalRaise[m])
		case sh.gpus > f.maxK[m]:
		default:
			st += uint64(f.raise[m][sh.gpus])
		}
	}
	return st + uint64(f.resvRaise)
}

// internVirt returns the index of a node's virtualization in f.virts,
// adding it when new.
func (f *fleet) internVirt(v gpufleet.Virtualization) int32 {
	if i := slices.Index(f.virts, v); i >= 0 {
		return int32(i)
	}
	f.virts = append(f.virts, v)
	return int32(len(f.virts) - 1)
}

// internStack returns the index of a node's versions in f.stacks, adding
// them when new. Fleets run few distinct stacks: up to 8 are compared
// directly, more are keyed.
func (f *fleet) internStack(idx map[string]int32, n *Node) int32 {
	if len(f.stacks) <= 8 {
		for i, v := range f.stacks {
			if maps.Equal(v, n.Stack) {
				return int32(i)
			}
		}
	} else if i, ok := idx[stackKey(n.Stack)]; ok {
		return i
	}
	id := int32(len(f.stacks))
	f.stacks, f.stackNode = append(f.stacks, n.Stack), append(f.stackNode, n.Name)
	if len(f.stacks) == 9 {
		for i, v := range f.stacks {
			idx[stackKey(v)] = int32(i)
		}
	} else if len(f.stacks) > 9 {
		idx[stackKey(n.Stack)] = id
	}
	return id
}

// stackKey is the identity of a node's versions: component=version by
// component, length-prefixed.
func stackKey(v gpufleet.StackVersions) string {
	var b []byte
	for _, c := range gpufleet.StackComponents {
		if x, ok := v[c]; ok {
			b = strconv.AppendInt(b, int64(len(c)+len(x)+1), 10)
			b = append(b, ':')
			b = append(b, c...)
			b = append(b, '=')
			b = append(b, x...)
		}
	}
	return string(b)
}

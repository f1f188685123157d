package scheduler

import (
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// Fragmentation gradient descent (FGD; Weng et al., "Beware of
// Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
// Gradient Descent", USENIX ATC'23), used by topology packing for one-GPU
// time-slice shares. Exclusive jobs keep topology's best-fit: for them the
// increase below is best-fit's order but for rare ties, and scoring them by
// it cost the synthetic large fleet throughput and preemptions (see
// docs/SCHEDULER.md).
//
// The target workload is the mix of request shapes of this call's jobs,
// queued and running, each job counting once. A node's fragmentation for
// one shape is the free GPU capacity on the node (in units) that a task of
// that shape cannot use:
//
//   - a shape that may not run on the node's model: all free capacity;
//   - k whole GPUs: the partly used GPUs' free shares, plus the whole free
//     GPUs when fewer than k are left (F = R + [f < k]·f·unit);
//   - a share e of one GPU: the free shares smaller than e. Whole free GPUs
//     can always take it, and when none is left and no share is as big as
//     e, every share is smaller than e, so F = Σ_{r < e} r either way.
//
// The node's fragmentation is the weighted sum over the mix; a task goes
// where its placement raises that sum least. Because F depends on so
// little, the increase has closed forms that do not look at the rest of
// the node:
//
//   - a share d on a GPU with free r: share shapes e by
//     [r-d < e](r-d) - [r < e]·r, whole and ineligible shapes by -d;
//   - a share d opening a whole free GPU on a node with f whole free: share
//     shapes by [unit-d < e](unit-d), whole shapes by unit-d while f-1 >= k,
//     f·unit-d when f = k, -d when f < k; ineligible shapes by -d.
//
// So one table per (model, share) serves every node, and a share's best GPU is found by one pass over the nodes
// that have partly used GPUs plus one node per whole-free count. Node
// selectors and NVLink needs of the mix are not modelled (the mix is about
// GPU counts, shares and models).

// fgdModel is the workload mix as one GPU model sees it, with job counts
// as weights.
type fgdModel struct {
	whole  [][2]int64 // (GPUs per node, weight) of exclusive shapes that may use the model
	shares [][2]int64 // (units, weight) of one-GPU time-slice shapes that may use the model
	wholeW int64      // total weight of whole
	inel   int64      // weight of shapes that may not use the model

	shareMemo map[int32][]int64 // per share size: the increase by free units r, lazily
}

// fgdState is the workload mix of one Schedule call, built on first use.
type fgdState struct {
	models []fgdModel
	total  int64
}

// fgdKey groups jobs whose requests are the same for the workload mix.
type fgdKey struct {
	gpus, nodes int
	kind        gpufleet.SharingKind
	frac        float64
	profile     string
	model0      string
	nmodels     int
	mem         gpufleet.Bytes
	cc          gpufleet.ComputeCapability
	prec        gpufleet.Precision
}

// fgd returns this call's workload mix, built from the queued and running
// jobs the first time a placement needs it.
func (s *sched) fgd() *fgdState {
	if s.fgdS != nil {
		return s.fgdS
	}
	st := &fgdState{models: make([]fgdModel, len(s.f.models))}
	s.fgdS = st
	type entry struct {
		n   int64
		rep int // a job with the key, the first in input order with the smallest id
	}
	counts := map[fgdKey]*entry{}
	var long map[string]*entry // jobs naming several models: keyed by their shape key
	for i := range s.in.Jobs {
		r := &s.in.Jobs[i].Resources
		if len(r.GPUModels) > 1 || len(r.NodeSelector) > 0 {
			if long == nil {
				long = map[string]*entry{}
			}
			s.keyBuf = shapeKey(s.keyBuf, r, "", false)
			if e, ok := long[string(s.keyBuf)]; ok {
				e.n++
				if s.in.Jobs[i].ID < s.in.Jobs[e.rep].ID {
					e.rep = i
				}
				continue
			}
			long[string(s.keyBuf)] = &entry{n: 1, rep: i}
			continue
		}
		k := fgdKey{gpus: r.GPUs, nodes: r.Nodes, kind: r.Sharing.Kind, frac: r.Sharing.Fraction, profile: r.Sharing.Profile,
			nmodels: len(r.GPUModels), mem: r.GPUMemoryMinBytes, cc: r.MinComputeCapability, prec: r.Precision}
		if k.kind == "" {
			k.kind = gpufleet.Exclusive
		}
		if k.kind != gpufleet.TimeSlice {
			k.frac = 0
		}
		if len(r.GPUModels) == 1 {
			k.model0 = r.GPUModels[0]
		}
		if e, ok := counts[k]; ok {
			e.n++
			if s.in.Jobs[i].ID < s.in.Jobs[e.rep].ID {
				e.rep = i
			}
			continue
		}
		counts[k] = &entry{n: 1, rep: i}
	}
	reps := make([]*entry, 0, len(counts)+len(long))
	for _, e := range counts {
		reps = append(reps, e)
	}
	for _, e := range long {
		reps = append(reps, e)
	}
	// Resolve in a fixed order so that shapes are interned deterministically.
	slices.SortFunc(reps, func(a, b *entry) int { return strings.Compare(s.in.Jobs[a.rep].ID, s.in.Jobs[b.rep].ID) })
	for _, e := range reps {
		sh := s.shapeOf(&s.in.Jobs[e.rep].Resources)
		if sh.invalid != "" || sh.kind == gpufleet.MIG {
			continue
		}
		st.total += e.n
		for m := range st.models {
			fm := &st.models[m]
			if !slices.Contains(sh.models, int32(m)) {
				fm.inel += e.n
				continue
			}
			switch {
			case sh.kind == gpufleet.TimeSlice && sh.gpus == 1:
				fm.shares = append(fm.shares, [2]int64{int64(sh.units), e.n})
			case sh.kind == gpufleet.TimeSlice:
				// Shares on several GPUs of one node: like whole GPUs for
				// the count, which is what they need free.
				fm.whole = append(fm.whole, [2]int64{int64(sh.gpus), e.n})
				fm.wholeW += e.n
			default:
				k := int64(sh.gpus)
				if sh.multi {
					k = int64(sh.perNode)
				}
				k = min(k, int64(s.f.maxK[m]))
				fm.whole = append(fm.whole, [2]int64{k, e.n})
				fm.wholeW += e.n
			}
		}
	}
	return st
}

// shareDelta is the fragmentation increase of putting a share of d units
// of model m on a GPU with r units free (r = unit: a whole free GPU on a
// node that keeps f-1 whole free).
func (s *sched) shareDelta(m, d, r, f int32) int64 {
	fm := &s.fgd().models[m]
	if r < unit {
		if fm.shareMemo == nil {
			fm.shareMemo = map[int32][]int64{}
		}
		memo := fm.shareMemo[d]
		if memo == nil {
			memo = make([]int64, unit)
			for i := range memo {
				memo[i] = -1 << 62
			}
			fm.shareMemo[d] = memo
		}
		if v := memo[r]; v != -1<<62 {
			return v
		}
		v := -int64(d) * (fm.wholeW + fm.inel)
		for _, w := range fm.shares {
			if e := w[0]; r-d < int32(e) {
				v += int64(r-d) * w[1]
			}
			if e := w[0]; r < int32(e) {
				v -= int64(r) * w[1]
			}
		}
		memo[r] = v
		return v
	}
	v := -int64(d) * fm.inel
	for _, w := range fm.shares {
		if unit-d < int32(w[0]) {
			v += int64(unit-d) * w[1]
		}
	}
	for _, w := range fm.whole {
		switch k := w[0]; {
		case int64(f)-1 >= k:
			v += int64(unit-d) * w[1]
		case int64(f) == k:
			v += (int64(f)*unit - int64(d)) * w[1]
		default:
			v -= int64(d) * w[1]
		}
	}
	return v
}

// searchShareFGD places a one-GPU share on model m by fragmentation
// gradient: every partly used GPU with room, and one whole free GPU per
// whole-free count (those nodes differ only by their count), scored by the
// increase, then by not opening a whole GPU, then by the room left (best
// fit), then by node and GPU.
// A long job (modeLong) keeps off a GPU reserved for a shared head.
func (s *sched) searchShareFGD(sh *shape, m int32, long bool, best *cand) {
	f := s.f
	b := f.tsNodes[m]
	d := sh.units
	for ni := b.next(0); ni >= 0; ni = b.next(ni + 1) {
		n := &f.nodes[ni]
		if !sh.selects(n) {
			continue
		}
		for gi := range n.gpus {
			g := &n.gpus[gi]
			if g.model != m || !countable(n, g) || g.excl || g.used == 0 || g.used+d > unit || long && g.reserved {
				continue
			}
			r := unit - g.used
			sc := [4]int64{s.shareDelta(m, d, r, 0), 0, int64(r), int64(ni)<<16 | int64(gi)}
			if best.better(sc) {
				best.ok, best.model, best.score = true, m, sc
				best.allocs = append(best.allocs[:0], alloc{node: ni, gpu: int32(gi), inst: -1, units: d})
			}
		}
	}
	for k := int32(1); k <= f.maxK[m]; k++ {
		if f.counts[m][k] == 0 {
			continue
		}
		delta := s.shareDelta(m, d, unit, k)
		if best.ok && delta > best.score[0] {
			continue
		}
		bk := f.buckets[m][k]
		for ni := bk.next(0); ni >= 0; ni = bk.next(ni + 1) {
			n := &f.nodes[ni]
			if !sh.selects(n) {
				continue
			}
			gi := int32(-1)
			for i := range n.gpus {
				if g := &n.gpus[i]; g.model == m && wholeFree(n, g, false) {
					gi = int32(i)
					break
				}
			}
			if gi < 0 {
				continue
			}
			sc := [4]int64{delta, 1, int64(k), int64(ni)<<16 | int64(gi)}
			if best.better(sc) {
				best.ok, best.model, best.score = true, m, sc
				best.allocs = append(best.allocs[:0], alloc{node: ni, gpu: gi, inst: -1, units: d})
			}
			break
		}
	}
}

package scheduler

import (
	"cmp"
	"slices"
)

// spareHold is the capacity held back for production failover (Config.
// Spare) while lower classes are placed.
type spareHold struct {
	allocs []alloc
	held   bool
}

// holdSpare takes, for each GPU class or model with a spare count, up to
// that many whole free GPUs of it out of the capacity model, so that jobs
// of lower classes cannot use them, choosing nodes by best fit for the
// whole spare (see below), then node order.
func (s *sched) holdSpare() {
	if len(s.cfg.Spare) == 0 || s.spare.held {
		return
	}
	s.spare.held = true
	s.spare.allocs = s.spare.allocs[:0]
	for _, key := range sortedKeys(s.cfg.Spare) {
		want := int32(s.cfg.Spare[key])
		// A key is a GPU class (Input.Classes) or a catalog id.
		ids, isClass := s.in.Classes[key]
		if !isClass {
			ids = []string{key}
		}
		models := make([]bool, len(s.f.models))
		for _, id := range ids {
			if m, ok := s.f.modelIdx[id]; ok {
				models[m] = true
			}
		}
		if want <= 0 {
			continue
		}
		type nodeFree struct{ ni, free int32 }
		var nodes []nodeFree
		for ni := range s.f.nodes {
			n := &s.f.nodes[ni]
			var free int32
			for gi := range n.gpus {
				if g := &n.gpus[gi]; models[g.model] && wholeFree(n, g, false) {
					free++
				}
			}
			if free > 0 {
				nodes = append(nodes, nodeFree{int32(ni), free})
			}
		}
		// Best fit for a block of the spare: the node with the fewest free
		// GPUs that still holds it whole (a failed-over server needs its
		// GPUs together, and bigger holes stay for other work); failing
		// that, the nodes with the most free GPUs first.
		slices.SortStableFunc(nodes, func(a, b nodeFree) int {
			af, bf := a.free >= want, b.free >= want
			switch {
			case af && bf:
				return cmp.Compare(a.free, b.free)
			case af != bf:
				if af {
					return -1
				}
				return 1
			}
			return cmp.Compare(b.free, a.free)
		})
		for _, nf := range nodes {
			n := &s.f.nodes[nf.ni]
			for gi := range n.gpus {
				if want == 0 {
					break
				}
				if g := &n.gpus[gi]; models[g.model] && wholeFree(n, g, false) {
					a := alloc{node: nf.ni, gpu: int32(gi), inst: -1, units: unit, whole: true}
					s.f.take(a)
					s.spare.allocs = append(s.spare.allocs, a)
					want--
				}
			}
		}
	}
}

// releaseSpare gives the held spare back (before a production job).
func (s *sched) releaseSpare() {
	if !s.spare.held {
		return
	}
	for _, a := range s.spare.allocs {
		s.f.release(a)
	}
	s.spare.held = false
}

// place is tryPlace with the spare held for every class but production.
func (s *sched) place(j *pjob, mode fitMode) (placement, why, bool) {
	if j.prod {
		s.releaseSpare()
	} else {
		s.holdSpare()
	}
	p, w, ok := s.tryPlace(j, mode)
	if !ok && w.capacity() && s.explain && len(s.spare.allocs) > 0 && s.spare.held {
		w = s.withSpare(w)
	}
	return p, w, ok
}

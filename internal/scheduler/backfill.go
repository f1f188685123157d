package scheduler

import (
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
)

// reservation is the EASY backfill reservation of the head job: the time
// its GPUs are expected to be free and, for an exclusive head, which GPUs.
// A later job may start before it only if it ends by then (modeShort) or
// keeps off the reserved GPUs (modeLong). A one-GPU time-slice head
// reserves its GPU (long jobs keep off it, whatever they ask); other shared
// heads (MIG, time-slice on several GPUs) reserve their pool instead: long
// jobs of the same pool wait.
type reservation struct {
	job    *pjob
	at     time.Time
	locs   []alloc
	nodes  []int32
	shared bool
	mig    bool
	// watts is what the head's placement adds to its racks: jobs that
	// would run past at (modeLong) leave it free, so power the head needs
	// cannot go to them.
	watts []rackWatts
}

// reserveFor computes the head job's shadow time, the earliest moment
// enough GPUs are free for it as running jobs end, by releasing their
// grants in end order on the capacity model and undoing that afterwards;
// then it marks the GPUs found as reserved.
func (s *sched) reserveFor(h *pjob, t time.Time) bool {
	sh := h.shape
	var undo []*grant
	var at time.Time
	var found placement
	ok := false
	models := s.usable(h).models
	fits := func() bool {
		if !s.mayFit(sh, models) {
			return false
		}
		p, ok := s.search(sh, models, modeNormal)
		if ok {
			found = p
		}
		return ok
	}
	s.events.walk(func(e *event) bool {
		if e.gen != e.g.gen {
			return true
		}
		if len(undo) > 0 && !e.at.Equal(at) && fits() {
			ok = true
			return false
		}
		s.releaseGrant(e.g)
		undo = append(undo, e.g)
		at = e.at
		return true
	})
	if !ok && len(undo) > 0 {
		ok = fits()
	}
	for i := len(undo) - 1; i >= 0; i-- {
		s.takeGrant(undo[i])
	}
	if !ok {
		return false
	}
	if at.Before(t) {
		at = t
	}
	r := &reservation{job: h, at: at}
	if sh.kind == gpufleet.Exclusive || sh.kind == gpufleet.TimeSlice && sh.gpus == 1 {
		// A one-GPU share reserves the GPU it would get, like an
		// exclusive head: jobs that keep off it cannot delay it.
		r.locs = found.allocs
		for _, a := range found.allocs {
			if !slices.Contains(r.nodes, a.node) {
				r.nodes = append(r.nodes, a.node)
			}
		}
	} else {
		r.shared, r.mig = true, sh.kind == gpufleet.MIG
	}
	if s.pw.on {
		for rack, w := range s.placementPower(found.allocs, found.model) {
			r.watts = append(r.watts, rackWatts{rack, w})
		}
	}
	s.applyReservation(r)
	s.eta.resvGen++
	return true
}

// applyReservation marks a reservation's GPUs; dropReservation clears them.
func (s *sched) applyReservation(r *reservation) {
	for _, a := range r.locs {
		s.f.reserve(a.node, a.gpu)
	}
	for _, rw := range r.watts {
		s.pw.resv[rw.rack] += rw.w
	}
	s.pw.ver++
	s.resv = r
}

func (s *sched) dropReservation() *reservation {
	r := s.resv
	if r == nil {
		return nil
	}
	for _, a := range r.locs {
		s.f.unreserve(a.node, a.gpu)
	}
	for _, rw := range r.watts {
		s.pw.resv[rw.rack] = max(0, s.pw.resv[rw.rack]-rw.w)
	}
	s.pw.ver++
	s.resv = nil
	return r
}

// event is the expected end of a running (or simulated) job.
type event struct {
	at  time.Time
	seq uint64
	g   *grant
	gen uint32 // stale when the grant's gen moved on
}

// eventHeap is a min-heap of ends by time, then insertion order.
type eventHeap struct {
	ev  []event
	seq uint64
	// frontier is scratch for walk.
	frontier []int32
}

func (h *eventHeap) less(i, j int) bool {
	a, b := &h.ev[i], &h.ev[j]
	if c := a.at.Compare(b.at); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}

func (h *eventHeap) len() int { return len(h.ev) }

func (h *eventHeap) push(e event) {
	h.seq++
	e.seq = h.seq
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *eventHeap) peek() *event { return &h.ev[0] }

func (h *eventHeap) pop() event {
	top := h.ev[0]
	last := len(h.ev) - 1
	h.ev[0] = h.ev[last]
	h.ev = h.ev[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && h.less(l, m) {
			m = l
		}
		if r < last && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h.ev[i], h.ev[m] = h.ev[m], h.ev[i]
		i = m
	}
	return top
}

// walk visits events in order without popping them, until fn returns
// false: a frontier heap over the heap's indices yields the k earliest in
// O(k log k).
func (h *eventHeap) walk(fn func(*event) bool) {
	if len(h.ev) == 0 {
		return
	}
	fr := append(h.frontier[:0], 0)
	lessIdx := func(a, b int32) bool { return h.less(int(a), int(b)) }
	for len(fr) > 0 {
		// pop the smallest index from fr
		top := fr[0]
		last := len(fr) - 1
		fr[0] = fr[last]
		fr = fr[:last]
		for i := 0; ; {
			l, r, m := 2*i+1, 2*i+2, i
			if l < last && lessIdx(fr[l], fr[m]) {
				m = l
			}
			if r < last && lessIdx(fr[r], fr[m]) {
				m = r
			}
			if m == i {
				break
			}
			fr[i], fr[m] = fr[m], fr[i]
			i = m
		}
		if !fn(&h.ev[top]) {
			break
		}
		for _, c := range []int32{2*top + 1, 2*top + 2} {
			if int(c) >= len(h.ev) {
				continue
			}
			fr = append(fr, c)
			for i := len(fr) - 1; i > 0; {
				p := (i - 1) / 2
				if !lessIdx(fr[i], fr[p]) {
					break
				}
				fr[i], fr[p] = fr[p], fr[i]
				i = p
			}
		}
	}
	h.frontier = fr
}

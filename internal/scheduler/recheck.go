package scheduler

import (
	"math"
	"time"
)

// recheck is Output.Recheck: the earliest moment after now at which time
// alone may change a decision of this cycle. It looks at the queue left
// after placeCycle (pending) and at the running jobs. It runs every cycle
// over the whole queue, so it works in Unix nanoseconds.
func (s *sched) recheck(pending []*pjob) time.Time {
	now := s.now.UnixNano()
	next := int64(math.MaxInt64)
	at := func(t int64) {
		if t > now && t < next {
			next = t
		}
	}
	factor := s.cfg.StarvationSlowdown - 1
	starveOn := s.cfg.StarvationSlowdown > 0 && s.cfg.Preemption && s.cfg.ResponseRatio
	anyStarving := false
	for _, j := range pending {
		if j.static != nil {
			continue
		}
		if j.why.code == ReasonSlowerModel {
			at(now + int64(s.slowerWait(j, j.why.model))) // it takes the slower model
		}
		if starveOn {
			// When slowdownNow reaches StarvationSlowdown (starving).
			t := j.submit + int64(factor*float64(max(j.est, time.Second)))
			if t > now {
				at(t)
			} else {
				anyStarving = true
			}
		}
	}
	for _, st := range s.out.Stops {
		at(now + int64(st.Grace)) // stopped this cycle
	}
	for _, r := range s.running {
		j := r.job
		switch {
		case !j.StopAt.IsZero():
			at(j.StopAt.UnixNano()) // its grace ends and its GPUs come free
		case j.TimeLimit > 0:
			at(j.Started.UnixNano() + int64(j.TimeLimit))
		}
		if j.StopAt.IsZero() && s.state.nodes != nil {
			for _, p := range j.Placement {
				if n := s.state.nodes[p.Node]; n != nil && !n.LastSeen.IsZero() {
					at(n.LastSeen.UnixNano() + int64(s.cfg.LostAfter)) // the run is lost if the node stays silent
				}
			}
		}
		if !r.protectedUntil.IsZero() && j.StopAt.IsZero() {
			at(r.protectedUntil.UnixNano()) // its day bound ends: a victim again
		}
		if anyStarving && j.Preemptible && j.StopAt.IsZero() {
			at(j.Started.UnixNano() + int64(s.cfg.StarvationMinRun)) // it may become a starving job's victim
		}
	}
	if t := s.lasRecheck(pending); !t.IsZero() {
		at(t.UnixNano()) // a running job's service reaches a LAS threshold
	}
	if t := overBudgetRecheck(s.cfg, s.in.Racks, s.now); !t.IsZero() {
		at(t.UnixNano()) // a rack has been over its budget long enough for a stop
	}
	if next == math.MaxInt64 {
		return time.Time{}
	}
	return time.Unix(0, next).In(s.now.Location())
}

package scheduler

import "time"

// recheck is Output.Recheck: the earliest moment after now at which time
// alone may change a decision of this cycle. It looks at the queue left
// after placeCycle (pending) and at the running jobs.
func (s *sched) recheck(pending []*pjob) time.Time {
	var next time.Time
	at := func(t time.Time) {
		if t.After(s.now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	starveOn := s.cfg.StarvationSlowdown > 0 && s.cfg.Preemption && s.cfg.ResponseRatio
	anyStarving := false
	for _, j := range pending {
		if j.static != nil {
			continue
		}
		if j.why.code == ReasonSlowerModel {
			at(s.now.Add(s.slowerWait(j, j.why.model))) // it takes the slower model
		}
		if starveOn {
			if s.starving(j) {
				anyStarving = true
			} else {
				// slowdownNow reaches StarvationSlowdown.
				est := max(j.est, time.Second)
				at(j.job.Submitted.Add(time.Duration((s.cfg.StarvationSlowdown - 1) * float64(est))))
			}
		}
	}
	for _, st := range s.out.Stops {
		at(s.now.Add(st.Grace)) // stopped this cycle
	}
	for _, r := range s.running {
		j := r.job
		switch {
		case !j.StopAt.IsZero():
			at(j.StopAt) // its grace ends and its GPUs come free
		case j.TimeLimit > 0:
			at(j.Started.Add(j.TimeLimit))
		}
		if anyStarving && j.Preemptible && j.StopAt.IsZero() {
			at(j.Started.Add(s.cfg.StarvationMinRun)) // it may become a starving job's victim
		}
	}
	return next
}

package scheduler

import (
	"fmt"
	"time"
)

// PreemptionWindow is the span over which Config.MaxPreemptionsPerDay
// counts a job's preemptions: a rolling day before Input.Now.
const PreemptionWindow = 24 * time.Hour

// Default preemption bounds (Config.MaxPreemptionsPerJob and PerDay): a job
// is stopped by preemption at most twice in any 24 hours and ten times in
// all. Each stop costs its victim its grace and a restart (about 2 minutes
// with the simulator's defaults), so two a day cost well under 1% of its
// day, and ten in all keep a month-long job from becoming everyone's
// victim (on Philly before the bound, 149 jobs were stopped ten times or
// more, one 91 times). docs/SCHEDULER.md#preemption-bounds measures them.
const (
	DefaultMaxPreemptionsPerJob = 10
	DefaultMaxPreemptionsPerDay = 2
)

// bounds are a policy's preemption bounds; a negative one is no bound.
func (c Config) bounds() (total, day int) {
	total, day = c.MaxPreemptionsPerJob, c.MaxPreemptionsPerDay
	if total == 0 {
		total = DefaultMaxPreemptionsPerJob
	}
	if day == 0 {
		day = DefaultMaxPreemptionsPerDay
	}
	return total, day
}

// recentPreemptions counts j's preemptions within PreemptionWindow before
// now, and returns the earliest of them.
func recentPreemptions(j *Job, now time.Time) (n int, earliest time.Time) {
	from := now.Add(-PreemptionWindow)
	for _, t := range j.RecentPreemptions {
		if t.After(from) && !t.After(now) {
			n++
			if earliest.IsZero() || t.Before(earliest) {
				earliest = t
			}
		}
	}
	return n, earliest
}

// protection says whether running job j has reached a preemption bound,
// so that no preemption of any kind may stop it: for good (until is zero)
// when it has been preempted MaxPreemptionsPerJob times, until its
// earliest preemption of the last day leaves the window when
// MaxPreemptionsPerDay.
func (s *sched) protection(j *Job) (protected bool, until time.Time) {
	total, day := s.cfg.bounds()
	if total >= 0 && j.Preemptions >= total {
		return true, time.Time{}
	}
	if day >= 0 {
		if n, earliest := recentPreemptions(j, s.now); n >= day {
			return true, earliest.Add(PreemptionWindow)
		}
	}
	return false, time.Time{}
}

// boundReached says, in words, whether stopping victim j now for a
// preemption brings it to a bound (empty when not): the caller shows it
// to the job's owner (the server records a job.preemption_bound event).
func (s *sched) boundReached(j *Job) string {
	total, day := s.cfg.bounds()
	if total >= 0 && j.Preemptions+1 >= total {
		return fmt.Sprintf("preemption %d of at most %d: the job will not be preempted again", j.Preemptions+1, total)
	}
	if day >= 0 {
		if n, _ := recentPreemptions(j, s.now); n+1 >= day {
			return fmt.Sprintf("preemption %d in 24h, the most per day: the job will not be preempted again before %s",
				n+1, s.untilAfterStop(j).Format(time.RFC3339))
		}
	}
	return ""
}

// untilAfterStop is when a job stopped now for a preemption leaves its
// day bound: a day after the earliest of its preemptions in the window,
// this one included.
func (s *sched) untilAfterStop(j *Job) time.Time {
	_, earliest := recentPreemptions(j, s.now)
	if earliest.IsZero() {
		earliest = s.now
	}
	return earliest.Add(PreemptionWindow)
}

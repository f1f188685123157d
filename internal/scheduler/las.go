package scheduler

import (
	"fmt"
	"math"
	"time"
)

// Discretized two-dimensional least-attained-service (2D-LAS), after
// Tiresias (Gu et al., NSDI 2019): a job's attained service is its
// GPU-time so far (GPUs x time, every run), and the thresholds
// Config.LASThresholds cut it into queues, queue 0 for the least. Jobs go
// by queue, then first come first served within one; a queued job may
// preempt (with Config.Preemption) a running job of a later queue, which
// returns to the queue its service puts it in. Nothing reads a run-time
// estimate: no reservation, no size order, no starvation rule.

// lasQueues is the number of LAS queues, 0 when LAS is off.
func (s *sched) lasQueues() int {
	if len(s.cfg.LASThresholds) == 0 {
		return 0
	}
	return len(s.cfg.LASThresholds) + 1
}

// attained is a job's GPU-time so far: its earlier runs' (Job.Attained)
// plus, running, its current run's GPUs (time-slice shares count their
// fraction) times its time on them.
func (s *sched) attained(j *Job) time.Duration {
	if j.Running() {
		return j.Attained + runGPUTime(j.Placement, s.now.Sub(j.Started))
	}
	return j.Attained
}

// lasQueue is the LAS queue of a job with attained service a: the number
// of thresholds it has reached.
func (s *sched) lasQueue(a time.Duration) int {
	q := 0
	for _, t := range s.cfg.LASThresholds {
		if a >= t {
			q++
		}
	}
	return q
}

// ranks is how many values rankOf can take: the classes and an unknown
// class, times the LAS queues.
func (s *sched) ranks() int { return (len(s.prio) + 1) * max(1, s.lasQueues()) }

// rankOf is a job's place in the order of classes and, under LAS, queues:
// with LAS every class splits into its queues, so a job of a later queue
// ranks below one of an earlier queue of its class, for the order and for
// preemption alike (mayPreempt stops only lower ranks).
func (s *sched) rankOf(j *Job) int {
	r := s.rank(j.Priority)
	if k := s.lasQueues(); k > 0 {
		r = r*k + s.lasQueue(s.attained(j))
	}
	return r
}

// outranks says in words why queued job j may preempt running job v.
func (s *sched) outranks(j *pjob, v *rjob) string {
	if s.lasQueues() > 0 && j.job.Priority == v.job.Priority {
		return fmt.Sprintf("LAS queue %d of %d for %.1f GPU-hours received, against this job's queue %d for %.1f",
			s.lasQueue(s.attained(j.job)), s.lasQueues(), s.attained(j.job).Hours(),
			s.lasQueue(s.attained(v.job)), s.attained(v.job).Hours())
	}
	return fmt.Sprintf("%s outranks %s", j.job.Priority, v.job.Priority)
}

// lasRecheck is when the first running job reaches its next LAS threshold
// while a queued job of its rank waits (it becomes that job's victim), or
// zero.
func (s *sched) lasRecheck(pending []*pjob) time.Time {
	if s.lasQueues() == 0 || !s.cfg.Preemption || len(pending) == 0 {
		return time.Time{}
	}
	waiting := map[int]bool{}
	for _, p := range pending {
		if p.static == nil {
			waiting[p.rank] = true
		}
	}
	var next time.Time
	for _, r := range s.running {
		j := r.job
		if !j.Preemptible || !j.StopAt.IsZero() || !waiting[r.rank] || (r.protected && r.protectedUntil.IsZero()) {
			continue
		}
		a := s.attained(j)
		gpus := float64(runGPUTime(j.Placement, time.Second)) / float64(time.Second)
		if gpus == 0 {
			continue
		}
		for _, t := range s.cfg.LASThresholds {
			if a < t {
				at := s.now.Add(time.Duration(math.Ceil(float64(t-a) / gpus)))
				if next.IsZero() || at.Before(next) {
					next = at
				}
				break
			}
		}
	}
	return next
}

package scheduler

import (
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// ReasonSlowerModel: a slower model has room, but the job prefers the
// fastest and waits for it a while (see slowerWait).
const ReasonSlowerModel = "slower_model"

// slowerMin is the slowdown from which a model counts as slower: below it
// a job that prefers the fastest model takes it at once.
const slowerMin = 1.5

// slowdownOn is how many times slower than on fast a job runs on slow, at
// least: the smaller of the FP32 peak ratio and the memory bandwidth ratio,
// the two ends of the roofline (a bandwidth-bound job loses the bandwidth
// ratio, a compute-bound one the FLOPS ratio). 1 when the catalog lacks the
// figures (opaque models).
func slowdownOn(fast, slow *catalog.GPU) float64 {
	r := 0.0
	if a, ok := fast.Peak(gpufleet.FP32); ok {
		if b, ok := slow.Peak(gpufleet.FP32); ok && b > 0 {
			r = a / b
		}
	}
	if a, b := fast.MemoryBandwidthBytesPerS, slow.MemoryBandwidthBytesPerS; a > 0 && b > 0 && (r == 0 || a/b < r) {
		r = a / b
	}
	return max(r, 1)
}

// slowerWait is how much longer j should wait before it takes model m, a
// slower model than the fastest it may use (0: take it now). It is the
// ski-rental rule: a job waits for a faster model at most as long as the
// slower one would add to its run time, estimate × (slowdown − 1),
// counted from the time it last entered the queue; so it never ends more
// than twice as late as the better of the two choices would have let it.
// Models less than slowerMin times slower are taken at once. Without it a
// long job takes whatever has room now: on the Philly trace, preempted or
// late jobs ran for months on K80s (docs/SCHEDULER.md#slower-models).
func (s *sched) slowerWait(j *pjob, m int32) time.Duration {
	r := j.shape.slower[m]
	if r < slowerMin {
		return 0
	}
	queued := j.job.Queued
	if queued.IsZero() {
		queued = j.job.Submitted
	}
	extra := time.Duration(float64(j.est) * (r - 1))
	return max(extra-s.at.Sub(queued), 0)
}

// slowerWaitAll is how long until j takes the first of its slower models.
func (s *sched) slowerWaitAll(j *pjob) time.Duration {
	var d time.Duration = -1
	for _, m := range j.shape.models {
		if w := s.slowerWait(j, m); w > 0 && (d < 0 || w < d) {
			d = w
		}
	}
	return d
}

// slowerWhy explains a job waiting for a faster model than m.
func (s *sched) slowerWhy(j *pjob, m int32) why {
	if !s.explain {
		return why{code: ReasonSlowerModel, model: m}
	}
	if s.brief {
		w, ok := s.texts.slower[m]
		if !ok {
			e := bare(ReasonSlowerModel)
			e.Slower, e.Brief = &gpufleet.SlowerWait{Model: s.f.models[m].id}, true
			w = *exWhy(e)
			w.model = m
			if s.texts.slower == nil {
				s.texts.slower = map[int32]why{}
			}
			s.texts.slower[m] = w
		}
		return w
	}
	e := bare(ReasonSlowerModel)
	e.Slower = &gpufleet.SlowerWait{Model: s.f.models[m].id, Slowdown: j.shape.slower[m],
		TakesInS: s.slowerWait(j, m).Round(time.Second).Seconds()}
	w := *exWhy(e)
	w.model = m
	return w
}

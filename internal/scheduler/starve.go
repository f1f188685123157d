package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// PreemptStarvation is the code of a preemption for a starving job of the
// same or a higher class (Config.StarvationSlowdown).
const PreemptStarvation = gpufleet.StopPreemptedStarvation

// Starvation preemption's tuning is in Config: StarvationLeftFactor,
// StarvationGainFactor, StarvationOrderMargin, StarvationMaxReleases and
// StarvationMaxTries (see their docs and docs/SCHEDULER.md#starvation).

// starving reports whether a queued job's slowdown so far, (wait +
// estimate) / estimate, has reached Config.StarvationSlowdown.
func (s *sched) starving(j *pjob) bool { return s.starvingAt(j.est, j.job.Submitted) }

// starvingAt is starving for a job of the given estimate and submit time.
func (s *sched) starvingAt(est time.Duration, submitted time.Time) bool {
	return s.cfg.StarvationSlowdown > 0 && s.slowdownAt(est, submitted) >= s.cfg.StarvationSlowdown
}

// slowdownNow is the slowdown j would have if it started now.
func (s *sched) slowdownNow(j *pjob) float64 { return s.slowdownAt(j.est, j.job.Submitted) }

func (s *sched) slowdownAt(est time.Duration, submitted time.Time) float64 {
	e := max(est.Seconds(), 1)
	return (max(s.now.Sub(submitted).Seconds(), 0) + e) / e
}

// starvePreempt stops running jobs for a starving job j that does not fit:
// a short job that needs whole nodes (or a whole NVLink domain) otherwise
// waits for the longest jobs on them to end, and its slowdown grows
// without bound (the worst teams of the Philly trace,
// docs/SCHEDULER.md#starvation). Victims are preemptible jobs of j's class
// or lower, on j's team or on borrowed capacity, that have far longer left
// to run than j (Config.StarvationLeftFactor), have run for Config.StarvationMinRun
// since their last start, and would sort well after j once requeued (with
// Config.ResponseRatio order only); the ones with the most left to run go
// first. j is placed in its backfill mode, so the head's reservation holds;
// for the head itself the reservation is lifted. It preempts only when j
// saves StarvationGainFactor times the GPU-seconds the victims lose, counting
// as j's saving its reserved wait (the head) or the time it has waited so
// far (any other job). On success j claims the GPUs, like a priority
// preemption, and starts in a later cycle: starving jobs go ahead of
// requeued ones (see order). At most StarvationMaxTries jobs try per cycle.
func (s *sched) starvePreempt(j *pjob, mode fitMode) bool {
	sh := j.shape
	if sh.kind != gpufleet.Exclusive || !s.cfg.Preemption || !s.cfg.ResponseRatio || s.pre.starveTries >= s.cfg.StarvationMaxTries || !s.starving(j) {
		return false
	}
	s.pre.starveTries++
	head := s.resv != nil && s.resv.job == j
	wait := s.now.Sub(j.job.Queued)
	if j.job.Queued.IsZero() {
		wait = s.now.Sub(j.job.Submitted)
	}
	if head {
		wait = s.resv.at.Sub(s.now)
		mode = modeNormal
	}
	ratio := s.slowdownNow(j)
	restart := s.cfg.RestartCost
	gain := s.cfg.StarvationGainFactor
	minLeft := time.Duration(s.cfg.StarvationLeftFactor*float64(j.est)) + restart
	// Without a gain on the wait alone, no victim set can pay.
	if float64(wait) < gain*float64(restart+j.est) {
		return false
	}
	type cand struct {
		v    *rjob
		left time.Duration
	}
	var cands, leaving []cand
	for _, v := range s.running {
		if v.stopping && !v.claimed {
			leaving = append(leaving, cand{v, v.stopEnd.Sub(s.now)}) // leaving anyway: costs nothing
			continue
		}
		if !v.job.Preemptible || v.victim || v.protected || v.rank < j.rank || s.now.Sub(v.job.Started) < s.cfg.StarvationMinRun {
			continue
		}
		if s.cfg.Quotas && v.team != j.team && v.g.class >= 0 && !v.borrowed {
			continue // another team's guaranteed quota
		}
		left := v.job.Started.Add(s.estimateOf(v.job)).Sub(s.now)
		if left < minLeft {
			continue
		}
		// Requeued, the victim must sort well after j (fair-share factors
		// move a ratio by at most FairShareClamp², 4x), or it would take
		// j's GPUs back.
		vest := max(left.Seconds(), 1)
		if (max(s.now.Sub(v.job.Submitted).Seconds(), 0)+vest)/vest*s.cfg.StarvationOrderMargin >= ratio {
			continue
		}
		cands = append(cands, cand{v, left})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if c := cmp.Compare(b.left, a.left); c != 0 {
			return c
		}
		return strings.Compare(a.v.job.ID, b.v.job.ID)
	})
	if len(cands) > s.cfg.StarvationMaxReleases {
		cands = cands[:s.cfg.StarvationMaxReleases]
	}
	// Jobs stopping already are released first, soonest gone first: a
	// starving job counts on them before it stops anyone else.
	slices.SortFunc(leaving, func(a, b cand) int {
		if c := cmp.Compare(a.left, b.left); c != 0 {
			return c
		}
		return strings.Compare(a.v.job.ID, b.v.job.ID)
	})
	cands = append(leaving, cands...)
	// Release victims one by one until j fits, then undo the releases.
	var resv *reservation
	if head {
		resv = s.dropReservation()
	}
	ep := s.f.epoch
	var released []*grant
	var found placement
	ok := false
	for _, c := range cands {
		s.releaseGrant(c.v.g)
		released = append(released, c.v.g)
		models := s.usable(j).models
		if mode != modeShort && !s.mayFit(sh, models) {
			continue
		}
		if p, fit := s.search(sh, models, mode); fit {
			found, ok = p, true
			break
		}
	}
	for i := len(released) - 1; i >= 0; i-- {
		s.takeGrant(released[i])
	}
	// The fleet is as it was: cached "does not fit" answers still hold.
	s.f.epoch = ep
	fail := func() bool {
		if resv != nil {
			s.applyReservation(resv)
		}
		return false
	}
	if !ok {
		return fail()
	}
	// The victims are the released jobs holding a GPU of the placement.
	held := map[[2]int32]bool{}
	for _, a := range found.allocs {
		held[[2]int32{a.node, a.gpu}] = true
	}
	var victims []*rjob
	var lost int64
	for _, c := range cands[:len(released)] {
		for _, a := range c.v.g.allocs {
			if held[[2]int32{a.node, a.gpu}] {
				victims = append(victims, c.v)
				if !c.v.stopping {
					lost += int64(len(c.v.g.allocs)) * int64(restart+j.est)
				}
				break
			}
		}
	}
	if float64(sh.gpus)*float64(wait) < gain*float64(lost) {
		return fail()
	}
	text := fmt.Sprintf("preempted for starving job %s (slowdown %.0f so far)", j.job.ID, ratio)
	if head {
		text = fmt.Sprintf("preempted for starving job %s (slowdown %.0f so far; its reserved start is %s away)", j.job.ID, ratio, wait.Round(time.Second))
	}
	s.commitPreemption(j, found.allocs, victims, true, func(*rjob) (gpufleet.StopCode, string) { return PreemptStarvation, text })
	return true
}

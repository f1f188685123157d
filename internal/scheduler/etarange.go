package scheduler

import (
	"math"
	"slices"
	"time"
)

// The ETA a user is shown is a range. Its median is the forward
// simulation's start (eta.go), which re-orders the queue as simulated time
// passes, expects the last day's arrivals again, and is capped by the
// policy's own bound. The simulation still assumes that no starving job
// preempts and that arrivals repeat, so its error is wide; the p90 bounds
// it with the empirical error of the
// same simulation on recently started jobs, in the manner of QBETS (Nurmi,
// Brevik and Wolski, "QBETS: queue bounds estimation from time series",
// JSSPP 2007), which bounds queue waits by quantiles of recent waits, here
// conditioned on the simulation itself:
//
//   - each started job that waited at submission leaves a WaitSample:
//     its size, its estimate, the wait the simulation predicted then and
//     the wait it had;
//   - jobs still waiting are samples too, right-censored: their wait so
//     far is a lower bound of their wait. Without them the history would
//     hold only the waits short enough to have ended, and under a growing
//     queue the range would be too short exactly when waits grow;
//   - samples fall into cells by size class, estimate class and predicted
//     wait class (factors of 4); a cell with too few samples falls back to
//     the cell without the estimate class, then to the one without the size
//     class, then to the predicted class alone, then to all samples;
//   - in a cell, the log residual r = ln((actual + c) / (predicted + c))
//     (c = ETAOffset, one minute, so that "starts now" predictions do not
//     divide by zero) has its 90th percentile q90 by the Kaplan-Meier
//     estimator (censored samples leave the risk set without an event); a
//     queued job whose simulated remaining wait is w is shown
//     p90 = (w + c)·exp(q90) - c after now;
//   - the policy's own bound caps the simulated wait first: a job that
//     starves at Config.StarvationSlowdown may preempt, so its start has a
//     "no later than" near the moment it starts starving;
//   - the confidence is the share of the cell's samples whose wait fell
//     within max(1 h, 25 %) of the simulated wait: how often the median
//     was right for jobs like this one (a still-waiting sample counts once
//     its wait so far is past that window).
//
// The median was calibrated too, with the cell's q50, while the
// simulation kept the queue's order frozen and was biased; once it
// re-ordered, the shifted median was further off than the simulation's
// own on the Philly replay (docs/PERFORMANCE.md#eta-accuracy).
//
// Without enough history (fewer than ETAMinSamples samples) the range is
// the simulation's start alone, with no p90 and no confidence.

// WaitSample is the wait of one job that queued at submission and then
// started, with the wait the forward simulation predicted for it when it
// was submitted (Pending.Simulated minus the submit time). A job still
// waiting is a Censored sample whose Actual is its wait so far. Callers
// keep the recent ones (Input.WaitHistory); the scheduler keeps nothing.
type WaitSample struct {
	GPUs      int           `json:"gpus"`
	Estimate  time.Duration `json:"estimate"`
	Predicted time.Duration `json:"predicted"`
	Actual    time.Duration `json:"actual"`
	Censored  bool          `json:"censored,omitempty"`
}

// ETA calibration constants.
const (
	// ETAOffset is c in the log residual: waits well under it count as
	// "starts now".
	ETAOffset = time.Minute
	// ETAMinSamples is the fewest samples a cell needs to be used.
	ETAMinSamples = 20
	// ETAHistory is how many recent samples of started jobs a caller
	// keeps per size class (KeepWait), and of still-waiting ones in all:
	// so that a rare class (jobs of 9+ GPUs) keeps a history of its own
	// while 1-GPU jobs start by the thousand.
	ETAHistory = 1024
)

// KeepWait appends a started job's sample to a caller's history and
// drops the oldest samples of its size class beyond ETAHistory; the
// history stays oldest first.
func KeepWait(history []WaitSample, s WaitSample) []WaitSample {
	history = append(history, s)
	c, n := sizeClass(s.GPUs), 0
	for _, h := range history {
		if sizeClass(h.GPUs) == c {
			n++
		}
	}
	if n <= ETAHistory {
		return history
	}
	for i, h := range history {
		if sizeClass(h.GPUs) == c {
			return slices.Delete(history, i, i+1)
		}
	}
	return history
}

// etaCell is the quantiles of one cell of samples.
type etaCell struct {
	n         int
	q90       float64
	confident float64
}

// etaCal maps a job's features to the quantiles of its cell, by level:
// etaLevels lists which features each level keys on.
type etaCal struct {
	levels [len(etaLevels)]map[[3]int8]*etaCell
	all    *etaCell
}

// etaLevels are the cells' keys, finest first: size class, estimate
// class, predicted class; a false drops the feature (-1 in the key).
var etaLevels = [...][3]bool{{true, true, true}, {true, false, true}, {false, true, true}, {false, false, true}}

func etaKey(level int, f [3]int8) [3]int8 {
	for i, on := range etaLevels[level] {
		if !on {
			f[i] = -1
		}
	}
	return f
}

func sizeClass(gpus int) int8 {
	switch {
	case gpus <= 1:
		return 0
	case gpus <= 4:
		return 1
	case gpus <= 8:
		return 2
	}
	return 3
}

// logClass buckets a duration by factors of 4 above one minute.
func logClass(d time.Duration) int8 {
	if d < time.Minute {
		return 0
	}
	return int8(min(1+int(math.Log(d.Minutes())/math.Log(4)), 12))
}

func residual(predicted, actual time.Duration) float64 {
	c := ETAOffset.Seconds()
	return math.Log((max(actual.Seconds(), 0) + c) / (max(predicted.Seconds(), 0) + c))
}

// apply turns a simulated remaining wait into a calibrated one with the
// residual r.
func applyResidual(w time.Duration, r float64) time.Duration {
	c := ETAOffset.Seconds()
	s := (max(w.Seconds(), 0)+c)*math.Exp(r) - c
	if s <= 0 {
		return 0
	}
	if s >= float64(maxETA/time.Second) {
		return maxETA
	}
	return time.Duration(math.Round(s)) * time.Second // to the second: no false precision
}

// maxETA bounds a calibrated wait (ten years), far from time.Duration's end.
const maxETA = 10 * 365 * 24 * time.Hour

// newETACal builds the calibration from the history; nil while fewer
// than ETAMinSamples jobs have started.
func newETACal(history []WaitSample) *etaCal {
	started := 0
	for _, s := range history {
		if !s.Censored {
			started++
		}
	}
	if started < ETAMinSamples {
		return nil
	}
	var groups [len(etaLevels)]map[[3]int8][]int
	for l := range groups {
		groups[l] = map[[3]int8][]int{}
	}
	all := make([]int, len(history))
	for i, s := range history {
		f := [3]int8{sizeClass(s.GPUs), logClass(s.Estimate), logClass(s.Predicted)}
		for l := range groups {
			k := etaKey(l, f)
			groups[l][k] = append(groups[l][k], i)
		}
		all[i] = i
	}
	cal := &etaCal{}
	for l, g := range groups {
		cal.levels[l] = map[[3]int8]*etaCell{}
		for k, idx := range g {
			if c := cellOf(history, idx); c != nil {
				cal.levels[l][k] = c
			}
		}
	}
	cal.all = cellOf(history, all)
	return cal
}

// cellOf computes a cell's quantiles and confidence; nil with fewer than
// ETAMinSamples started jobs.
func cellOf(history []WaitSample, idx []int) *etaCell {
	type obs struct {
		r        float64
		censored bool
	}
	os := make([]obs, len(idx))
	events := 0
	for i, j := range idx {
		s := history[j]
		os[i] = obs{residual(s.Predicted, s.Actual), s.Censored}
		if !s.Censored {
			events++
		}
	}
	if events < ETAMinSamples {
		return nil
	}
	// Kaplan-Meier: at a tie an event comes before a censoring.
	slices.SortFunc(os, func(a, b obs) int {
		if a.r != b.r {
			if a.r < b.r {
				return -1
			}
			return 1
		}
		if a.censored != b.censored {
			if b.censored {
				return -1
			}
			return 1
		}
		return 0
	})
	c := &etaCell{n: len(idx), q90: math.NaN()}
	surv, risk, last := 1.0, len(os), 0.0
	for _, o := range os {
		if !o.censored {
			surv *= float64(risk-1) / float64(risk)
			last = o.r
			if math.IsNaN(c.q90) && 1-surv >= 0.9 {
				c.q90 = o.r
			}
		}
		risk--
	}
	// Censored past the quantile: the largest residual seen bounds it
	// from below.
	if math.IsNaN(c.q90) {
		c.q90 = max(last, os[len(os)-1].r)
	}
	hits, judged := 0, 0
	for _, j := range idx {
		s := history[j]
		p := s.Predicted
		switch {
		case !s.Censored:
			judged++
			if withinETA(p, s.Actual) {
				hits++
			}
		case s.Actual > p+max(time.Hour, p/4):
			judged++ // still waiting, and already past the window
		}
	}
	if judged > 0 {
		c.confident = float64(hits) / float64(judged)
	}
	return c
}

// withinETA reports whether an actual wait fell within max(1 h, 25 %) of
// a predicted one: the accuracy users can plan around.
func withinETA(predicted, actual time.Duration) bool {
	d := predicted - actual
	if d < 0 {
		d = -d
	}
	return d <= max(time.Hour, actual/4)
}

// cell finds the most specific cell with enough samples for a job.
func (c *etaCal) cell(gpus int, est, predicted time.Duration) *etaCell {
	f := [3]int8{sizeClass(gpus), logClass(est), logClass(predicted)}
	for l, cells := range c.levels {
		if x := cells[etaKey(l, f)]; x != nil {
			return x
		}
	}
	return c.all
}

// etaRange is a queued job's calibrated estimate, from now.
type etaRange struct {
	p50, p90   time.Duration
	confidence float64
	ok         bool // calibrated (enough history)
}

// rangeFor gives a job whose simulated remaining wait is w its range: w
// itself and the calibrated p90.
func (c *etaCal) rangeFor(gpus int, est, w time.Duration) etaRange {
	if c == nil {
		return etaRange{p50: w}
	}
	x := c.cell(gpus, est, w)
	if x == nil {
		return etaRange{p50: w}
	}
	return etaRange{p50: w, p90: applyResidual(w, x.q90), confidence: x.confident, ok: true}
}

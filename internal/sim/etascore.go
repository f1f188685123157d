package sim

import (
	"math"
	"slices"
)

// ETA scoring. Every job that queued at submission and then started was
// shown an estimated start; the report judges it against the start the
// job had, next to three predictors a practitioner could use with the same
// information (nothing that happens after the submission):
//
//   - "gpufleet": the scheduler's calibrated range (Pending.EstimatedStart
//     as the median, Pending.EstimatedStartP90);
//   - "simulation": the forward simulation's start alone
//     (Pending.Simulated), the ETA gpufleet showed before calibration;
//   - "starts_now": the constant guess that the job starts at once;
//   - "median_recent_wait": the median wait of the recent jobs of the same
//     size class (the history the calibration sees), QBETS' simplest form.
//
// For each, by size class and by run-time class: the median relative
// error |predicted - actual| / max(actual, 1 min), the share of jobs that
// started within max(1 h, 25 %) of the prediction (ETAWithin), and, for a
// range, the share that started by its p90.

// ETAPredictors names the predictors of an ETAScore, in report order.
var ETAPredictors = []string{"gpufleet", "simulation", "starts_now", "median_recent_wait"}

// ETAScore is the accuracy of the ETAs shown at submission, by class.
type ETAScore struct {
	// BySize is keyed by GPUs asked: "1", "2-4", "5-8", "9+"; ByRunTime
	// by the job's true run time: "<1h", "1h-10h", "10h-10d", ">=10d".
	// "all" is in both.
	BySize    map[string]ETAClass `json:"by_size"`
	ByRunTime map[string]ETAClass `json:"by_run_time"`
	// ByHalf splits the jobs by submission into the trace's first and
	// second half ("first", "second"): a time split, for a figure the
	// calibration's settings were not chosen on.
	ByHalf map[string]ETAClass `json:"by_half"`
}

// ETAClass is one class's jobs and each predictor's accuracy on them.
type ETAClass struct {
	Jobs       int                     `json:"jobs"`
	Predictors map[string]ETAPredictor `json:"predictors"`
}

// ETAPredictor is one predictor's accuracy on a class.
type ETAPredictor struct {
	Jobs int `json:"jobs"` // jobs it gave a prediction for
	// MedianRelError is the median of |predicted - actual| / max(actual, 60 s).
	MedianRelError *float64 `json:"median_rel_error"`
	// Within is the share of jobs that started within max(1 h, 25 % of
	// their wait) of the prediction.
	Within *float64 `json:"within_1h_or_25pct"`
	// BeforeP90 is the share that started by the predicted p90 (ranges
	// only; null otherwise).
	BeforeP90 *float64 `json:"before_p90"`
}

// sizeClass is a job's size class by GPUs asked.
func sizeClass(gpus int) string {
	switch {
	case gpus <= 1:
		return "1"
	case gpus <= 4:
		return "2-4"
	case gpus <= 8:
		return "5-8"
	}
	return "9+"
}

// runTimeClass is a job's class by its true run time in seconds.
func runTimeClass(s float64) string {
	switch {
	case s < 3600:
		return "<1h"
	case s < 36000:
		return "1h-10h"
	case s < 864000:
		return "10h-10d"
	}
	return ">=10d"
}

// etaWithin is the accuracy users can plan around: within an hour, or a
// quarter of the wait.
func etaWithin(predicted, actual float64) bool {
	return math.Abs(predicted-actual) <= max(3600, actual/4)
}

// etaScore scores the jobs' ETAs.
func (e *engine) etaScore() *ETAScore {
	type obs struct {
		size, run, half string
		actual          float64
		pred            [4]float64 // per ETAPredictors; -1 none
		p90             float64
	}
	var all []obs
	mid := e.t0
	if n := len(e.jobs); n > 0 {
		mid = (e.jobs[0].submit + e.jobs[n-1].submit) / 2
	}
	for _, js := range e.jobs {
		if !js.started || !js.etaOK || js.eta < 0 {
			continue
		}
		o := obs{size: sizeClass(js.j.GPUs), run: runTimeClass(js.j.RefDuration()), half: "first", actual: js.firstStart - js.submit, p90: -1}
		if js.submit >= mid {
			o.half = "second"
		}
		o.pred = [4]float64{js.eta - js.submit, -1, 0, -1}
		if js.etaSim >= 0 {
			o.pred[1] = js.etaSim - js.submit
		}
		if js.etaRecent >= 0 {
			o.pred[3] = js.etaRecent - js.submit
		}
		if js.etaP90 >= 0 {
			o.p90 = js.etaP90 - js.submit
		}
		all = append(all, o)
	}
	if len(all) == 0 {
		return nil
	}
	class := func(sel func(obs) bool) ETAClass {
		c := ETAClass{Predictors: map[string]ETAPredictor{}}
		for i, name := range ETAPredictors {
			var rel []float64
			within, before, ranged := 0, 0, 0
			for _, o := range all {
				if !sel(o) || o.pred[i] < 0 {
					continue
				}
				rel = append(rel, math.Abs(o.pred[i]-o.actual)/max(o.actual, 60))
				if etaWithin(o.pred[i], o.actual) {
					within++
				}
				if i == 0 && o.p90 >= 0 {
					ranged++
					if o.actual <= o.p90 {
						before++
					}
				}
			}
			p := ETAPredictor{Jobs: len(rel)}
			if len(rel) > 0 {
				slices.Sort(rel)
				p.MedianRelError = percentile(rel, 50)
				w := float64(within) / float64(len(rel))
				p.Within = &w
			}
			if ranged > 0 {
				b := float64(before) / float64(ranged)
				p.BeforeP90 = &b
			}
			c.Predictors[name] = p
			if i == 0 {
				c.Jobs = len(rel)
			}
		}
		return c
	}
	s := &ETAScore{BySize: map[string]ETAClass{}, ByRunTime: map[string]ETAClass{}, ByHalf: map[string]ETAClass{}}
	sizes, runs, halves := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, o := range all {
		sizes[o.size], runs[o.run], halves[o.half] = true, true, true
	}
	for k := range halves {
		s.ByHalf[k] = class(func(o obs) bool { return o.half == k })
	}
	for k := range sizes {
		s.BySize[k] = class(func(o obs) bool { return o.size == k })
	}
	for k := range runs {
		s.ByRunTime[k] = class(func(o obs) bool { return o.run == k })
	}
	everything := class(func(obs) bool { return true })
	s.BySize["all"], s.ByRunTime["all"] = everything, everything
	return s
}

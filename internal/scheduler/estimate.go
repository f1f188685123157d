package scheduler

import (
	"math"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Estimates from history. A job that gives no estimate is planned on the
// runs of similar jobs that finished before it: a quantile
// (Config.EstimateQuantile) of the newest RunsPerKey runs of the first of
// these that has Config.EstimateMinRuns of them:
//
//   - workload: the same team's jobs of the same workload (the caller's
//     word for "the same job run again": its name, else its command) and
//     size class; a job that ran before learns from its own runs this way;
//   - team_size: the same team's jobs of the size class;
//   - size: every job of the size class.
//
// A time limit caps the figure; with no history the job's time limit, else
// its class's default (Config.PriorityEstimates, Config.DefaultEstimate),
// stands in. This is the "system-generated prediction" of Tsafrir, Etsion
// and Feitelson ("Backfilling using system-generated predictions rather
// than user runtime estimates", IEEE TPDS 18(6), 2007), keyed as they key
// it (the user's recent jobs) with wider keys to fall back on.
//
// The run a job is planned on is what is left of it: a job whose earlier
// runs lasted P (Job.Attained over its GPUs) and whose current run has
// lasted e is planned to end at L − P from its current start while that is
// ahead of it, and, once it has outlived L, to run as long again as it has
// run so far (P + e more): past its history, a job's age is the best
// guide to how long it has left.

// RunSample is one finished run a caller keeps for the estimates: the
// job's team and workload, its GPUs and how long its last run lasted.
type RunSample struct {
	Team     string        `json:"team"`
	Workload string        `json:"workload,omitempty"`
	GPUs     int           `json:"gpus"`
	Ran      time.Duration `json:"ran"`
}

const (
	// RunHistory is how many finished runs a caller keeps (KeepRun).
	RunHistory = 8192
	// RunsPerKey is how many of the newest runs of a key an estimate reads.
	RunsPerKey = 20
	// DefaultEstimateQuantile and DefaultEstimateMinRuns are the
	// estimates' quantile and the fewest runs a key needs, chosen on the
	// tuning split (docs/PERFORMANCE.md#estimates-from-history).
	DefaultEstimateQuantile = 0.5
	DefaultEstimateMinRuns  = 2
)

// KeepRun appends a finished run to a caller's history, oldest first, and
// drops the oldest beyond RunHistory.
func KeepRun(history []RunSample, s RunSample) []RunSample {
	if s.Ran <= 0 {
		return history
	}
	history = append(history, s)
	if over := len(history) - RunHistory; over > 0 {
		history = slices.Delete(history, 0, over)
	}
	return history
}

// runKey is one history key: a source and what it matches.
type runKey struct {
	from     gpufleet.EstimateSource
	team     string
	workload string
	size     int8
}

// runIndex is the estimates of every key with enough runs, built once per
// Schedule call from Input.Runs.
type runIndex map[runKey]gpufleet.RunEstimate

// indexRuns builds the index: the newest RunsPerKey runs of each key, a
// quantile of those of keys with at least minRuns.
func indexRuns(runs []RunSample, q float64, minRuns int) runIndex {
	if len(runs) == 0 {
		return nil
	}
	byKey := map[runKey][]time.Duration{}
	add := func(k runKey, d time.Duration) {
		if v := byKey[k]; len(v) < RunsPerKey {
			byKey[k] = append(v, d)
		}
	}
	for i := len(runs) - 1; i >= 0; i-- {
		r := &runs[i]
		c := sizeClass(r.GPUs)
		if r.Workload != "" {
			add(runKey{from: gpufleet.EstimateWorkload, team: r.Team, workload: r.Workload, size: c}, r.Ran)
		}
		add(runKey{from: gpufleet.EstimateTeamSize, team: r.Team, size: c}, r.Ran)
		add(runKey{from: gpufleet.EstimateSize, size: c}, r.Ran)
	}
	idx := make(runIndex, len(byKey))
	for k, v := range byKey {
		if len(v) < minRuns {
			continue
		}
		slices.Sort(v)
		i := min(len(v)-1, max(0, int(math.Ceil(q*float64(len(v))))-1))
		idx[k] = gpufleet.RunEstimate{Seconds: v[i].Seconds(), From: k.from, Runs: len(v)}
	}
	return idx
}

// learned is the estimate of a whole run of j from the history, its time
// limit or its class's default.
func (s *sched) learned(j *Job) gpufleet.RunEstimate {
	c := sizeClass(j.Resources.GPUs)
	keys := [3]runKey{
		{from: gpufleet.EstimateWorkload, team: j.Team, workload: j.Workload, size: c},
		{from: gpufleet.EstimateTeamSize, team: j.Team, size: c},
		{from: gpufleet.EstimateSize, size: c},
	}
	for i, k := range keys {
		if i == 0 && j.Workload == "" {
			continue
		}
		if e, ok := s.runs[k]; ok {
			if j.TimeLimit > 0 && e.Seconds > j.TimeLimit.Seconds() {
				e.Seconds = j.TimeLimit.Seconds()
			}
			return e
		}
	}
	if j.TimeLimit > 0 {
		return gpufleet.RunEstimate{Seconds: j.TimeLimit.Seconds(), From: gpufleet.EstimateTimeLimit}
	}
	d := s.cfg.DefaultEstimate
	if v, ok := s.cfg.PriorityEstimates[j.Priority]; ok && v > 0 {
		d = v
	}
	return gpufleet.RunEstimate{Seconds: d.Seconds(), From: gpufleet.EstimateDefault}
}

// runEstimate is what j is planned on for its next (queued) or current
// (running) run: its own estimate, else what is left of the learned one.
func (s *sched) runEstimate(j *Job) gpufleet.RunEstimate {
	if j.Estimate > 0 {
		return gpufleet.RunEstimate{Seconds: j.Estimate.Seconds(), From: gpufleet.EstimateGiven}
	}
	e := s.learned(j)
	var before time.Duration // earlier runs, per GPU
	if g := j.Resources.GPUs; g > 0 && j.Attained > 0 {
		before = j.Attained / time.Duration(g)
	}
	var ran time.Duration // the current run so far
	if j.Running() && s.now.After(j.Started) {
		ran = s.now.Sub(j.Started)
	}
	whole := e.Duration()
	if left := whole - before; left > ran {
		e.Seconds = left.Seconds()
	} else {
		e.Seconds = (2*ran + before).Seconds()
	}
	e.Seconds = max(e.Seconds, 1)
	return e
}

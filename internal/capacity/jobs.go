package capacity

import (
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/forecast"
)

// JobModel is the GPU model a job's demand belongs to: the model of the
// node its last attempt ran on; for a job that never ran, the first model
// it allows; "" when it says none (it counts in the whole fleet's demand
// only).
func JobModel(j gpufleet.Job, nodeModel map[string]string) string {
	for i := len(j.Attempts) - 1; i >= 0; i-- {
		if m := nodeModel[j.Attempts[i].Node]; m != "" {
			return m
		}
	}
	if len(j.Resources.GPUModels) > 0 {
		return j.Resources.GPUModels[0]
	}
	return ""
}

// Pool is the jobs of a model that ended having run on whole GPUs, in the
// shape replays sample: GPUs, the run time their attempts used, class,
// team and time of day.
func Pool(jobs []gpufleet.Job, model string, nodeModel map[string]string) []PoolJob {
	var out []PoolJob
	for _, j := range jobs {
		if !j.State.Terminal() || !j.Resources.Sharing.Exclusive() || j.Resources.GPUs < 1 || JobModel(j, nodeModel) != model {
			continue
		}
		used := 0.0
		for _, a := range j.Attempts {
			used += a.GPUSeconds
		}
		if used <= 0 {
			continue
		}
		sub := j.SubmittedAt.UTC()
		out = append(out, PoolJob{GPUs: j.Resources.GPUs, Seconds: used / float64(j.Resources.GPUs), Class: j.Priority, Team: j.Team,
			DaySeconds: sub.Sub(sub.Truncate(24 * time.Hour)).Seconds()})
	}
	return out
}

// HistoryDays is how far back demand is read: a year.
const HistoryDays = 365

// DemandHistory is the daily demand (forecast.StoreDemand) of the jobs
// keep selects over the last HistoryDays, from the first day with any, up
// to yesterday (today is not over).
func DemandHistory(jobs []gpufleet.Job, now time.Time, keep func(gpufleet.Job) bool) forecast.Series {
	hist := forecast.StoreDemand(jobs, now.AddDate(0, 0, -HistoryDays), now.AddDate(0, 0, 1), now, keep)
	first := slices.IndexFunc(hist.Values, func(v float64) bool { return v > 0 })
	if first < 0 {
		first = len(hist.Values)
	}
	hist = forecast.Series{Start: hist.Day(first), Values: hist.Values[first:]}
	if len(hist.Values) > 0 {
		hist.Values = hist.Values[:len(hist.Values)-1]
	}
	return hist
}

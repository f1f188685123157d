package forecast

import (
	"time"

	"github.com/gpufleet/gpufleet"
)

// JobDemand is the GPU-hours a job of the store asks for, on the day it
// was submitted: the GPU-seconds its attempts used when it ended having
// run; else its estimate (or, without one, its time limit), or what it has
// run so far when that is more (a job that waits still asks); an hour
// when it says nothing.
func JobDemand(j gpufleet.Job, now time.Time) float64 {
	used := 0.0
	for _, a := range j.Attempts {
		used += a.GPUSeconds
	}
	gpus := float64(max(j.Resources.GPUs, 1))
	if j.State.Terminal() && used > 0 {
		return used / 3600
	}
	secs := used / gpus
	switch {
	case j.EstimateS != nil:
		secs = max(secs, *j.EstimateS)
	case j.TimeLimitS != nil:
		secs = max(secs, *j.TimeLimitS)
	}
	if secs == 0 {
		secs = 3600
	}
	return gpus * secs / 3600
}

// StoreDemand is the daily demand of jobs submitted in [from, to) (whole
// UTC days), every job counted by JobDemand on its submission day; keep,
// when not nil, selects the jobs (a team, a GPU model).
func StoreDemand(jobs []gpufleet.Job, from, to, now time.Time, keep func(gpufleet.Job) bool) Series {
	from, to = from.UTC().Truncate(24*time.Hour), to.UTC().Truncate(24*time.Hour)
	days := int(to.Sub(from) / (24 * time.Hour))
	s := Series{Start: from, Values: make([]float64, max(days, 0))}
	for _, j := range jobs {
		if keep != nil && !keep(j) {
			continue
		}
		d := int(j.SubmittedAt.UTC().Sub(from) / (24 * time.Hour))
		if j.SubmittedAt.Before(from) || d >= days {
			continue
		}
		s.Values[d] += JobDemand(j, now)
	}
	return s
}

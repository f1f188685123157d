package sim

import (
	"encoding/csv"
	"io"
	"math"
	"slices"
	"strconv"
	"time"
)

// WriteDemandCSV writes the daily demand of a replay (docs/CAPACITY.md):
// for each day from epoch and GPU model, the GPU-hours asked for by the
// jobs submitted that day (GPUs times the run time the job needs, whether
// it ran at once, waited, or never started: demand, not what the fleet
// managed to serve) and how many were submitted. A job that completed
// counts the run time it took; any other its trace duration on the model
// it ran on, or its plain duration. A job that never ran counts under
// "any", since no model was chosen for it. Columns: day, gpu_model,
// gpu_hours_asked, jobs_submitted.
func WriteDemandCSV(w io.Writer, tr *Trace, jobs []JobResult, epoch time.Time) error {
	byID := make(map[string]*Job, len(tr.Jobs))
	for i := range tr.Jobs {
		byID[tr.Jobs[i].ID] = &tr.Jobs[i]
	}
	type key struct {
		day   int
		model string
	}
	hours := map[key]float64{}
	submitted := map[key]int{}
	days := 0
	var models []string
	for _, r := range jobs {
		model := r.Model
		if model == "" {
			model = "any"
		}
		secs := r.RunS
		if r.End != "completed" {
			secs = 0
			if j := byID[r.ID]; j != nil {
				secs = j.Duration
				if d, ok := j.DurationOn[r.Model]; ok {
					secs = d
				}
			}
		}
		k := key{int(math.Floor(r.SubmitS / 86400)), model}
		if k.day < 0 {
			continue
		}
		hours[k] += float64(r.GPUs) * secs / 3600
		submitted[k]++
		days = max(days, k.day+1)
		if !slices.Contains(models, model) {
			models = append(models, model)
		}
	}
	slices.Sort(models)
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"day", "gpu_model", "gpu_hours_asked", "jobs_submitted"})
	for d := range days {
		for _, m := range models {
			k := key{d, m}
			_ = cw.Write([]string{epoch.AddDate(0, 0, d).Format(time.DateOnly), m,
				strconv.FormatFloat(hours[k], 'f', 3, 64), strconv.Itoa(submitted[k])})
		}
	}
	cw.Flush()
	return cw.Error()
}

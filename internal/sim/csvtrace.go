package sim

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// parseCSV reads the simulator's generic trace format: a headed CSV with
//
//	submit_s     required, seconds from the trace start
//	duration_s   required, run time in seconds on any GPU model
//	gpus         required, GPUs (or time-slice shares), >= 1
//	id           optional, default job-<row>
//	nodes        optional, spread over this many nodes (0 = as few as possible)
//	team         optional, default "default"
//	priority     optional, production|interactive|training|batch, default training
//	gpu_model    optional, allowlist of catalog ids or class names, '|'-separated
//	sharing      optional, exclusive | timeslice:F | mig:PROFILE
//	estimate_s   optional, the user's run-time estimate
//	preemptible  optional, true|false; default true below production
//	duration_s_<model>  optional, run time on that model (heterogeneous speed)
//
// Unknown columns are ignored.
func parseCSV(r io.Reader, opt ReadOptions) (*Trace, error) {
	tr := &Trace{Name: opt.Name, Format: "csv", Models: map[string]catalog.GPU{}}
	seen := map[string]bool{}
	bad, err := readCSV(r, opt, []string{"submit_s", "duration_s", "gpus"}, func(rw row) error {
		id := rw.get("id")
		if !rw.has("id") {
			id = fmt.Sprintf("job-%d", len(tr.Jobs)+tr.Skipped+1)
		}
		j := Job{ID: id, Team: "default", Class: scheduler.Training, Sharing: scheduler.Sharing{Kind: scheduler.Exclusive}}
		var err error
		if j.Submit, err = rw.float("submit_s"); err != nil {
			return err
		}
		if j.Duration, err = rw.float("duration_s"); err != nil {
			return err
		}
		j.Duration = max(j.Duration, 1)
		if j.GPUs, err = rw.int("gpus", 1<<20); err != nil {
			return err
		}
		if j.GPUs == 0 {
			return fmt.Errorf("gpus: 0 (a simulated job needs a GPU)")
		}
		if s := rw.get("nodes"); s != "" {
			if j.Nodes, err = rw.int("nodes", j.GPUs); err != nil {
				return err
			}
		}
		if s := rw.get("team"); s != "" {
			j.Team = s
		}
		if s := rw.get("priority"); s != "" {
			if !slices.Contains(scheduler.DefaultPriorities, scheduler.Priority(s)) {
				return fmt.Errorf("priority: %q is not production, interactive, training or batch", s)
			}
			j.Class = scheduler.Priority(s)
		}
		j.Preemptible = j.Class != scheduler.Production
		if s := rw.get("preemptible"); s != "" {
			if j.Preemptible, err = strconv.ParseBool(s); err != nil {
				return fmt.Errorf("preemptible: %q is not true or false", s)
			}
		}
		if s := rw.get("gpu_model"); s != "" {
			for _, m := range strings.Split(s, "|") {
				if m = strings.TrimSpace(m); m != "" && !slices.Contains(j.GPUModels, m) {
					j.GPUModels = append(j.GPUModels, m)
				}
			}
		}
		if s := rw.get("sharing"); s != "" {
			if j.Sharing, err = ParseSharing(s); err != nil {
				return err
			}
		}
		if _, ok, err := rw.optFloat("estimate_s"); err != nil {
			return err
		} else if ok {
			j.Estimate, _ = rw.float("estimate_s")
		}
		for _, col := range slices.Sorted(maps.Keys(rw.cols)) {
			m, ok := strings.CutPrefix(col, "duration_s_")
			if !ok || m == "" {
				continue
			}
			d, ok, err := rw.optFloat(col)
			if err != nil {
				return err
			}
			if ok {
				if j.DurationOn == nil {
					j.DurationOn = map[string]float64{}
				}
				j.DurationOn[m] = max(d, 1)
			}
		}
		if err := checkUnique(seen, id); err != nil {
			return err
		}
		tr.Jobs = append(tr.Jobs, j)
		return nil
	})
	tr.BadLines = bad
	if err != nil {
		return nil, err
	}
	return tr, nil
}

// ParseSharing parses "exclusive", "timeslice:0.25" or "mig:1g.10gb".
func ParseSharing(s string) (scheduler.Sharing, error) {
	kind, arg, _ := strings.Cut(s, ":")
	switch scheduler.SharingKind(kind) {
	case scheduler.Exclusive:
		if arg == "" {
			return scheduler.Sharing{Kind: scheduler.Exclusive}, nil
		}
	case scheduler.TimeSlice:
		f, err := strconv.ParseFloat(arg, 64)
		if err == nil && f > 0 && f <= 1 {
			return scheduler.Sharing{Kind: scheduler.TimeSlice, Fraction: f}, nil
		}
	case scheduler.MIG:
		if arg != "" {
			return scheduler.Sharing{Kind: scheduler.MIG, Profile: arg}, nil
		}
	}
	return scheduler.Sharing{}, fmt.Errorf("sharing: %q is not exclusive, timeslice:FRACTION (0,1] or mig:PROFILE", s)
}

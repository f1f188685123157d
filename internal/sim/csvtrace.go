package sim

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// maxFails bounds a trace job's failing runs.
const maxFails = 1000

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
//	interconnect optional, nvlink | any: nvlink wants each node's share in one NVLink domain
//	estimate_s   optional, the user's run-time estimate
//	preemptible  optional, true|false; default true below production
//	grace_s      optional, seconds a stop gives the job (default: the policy's)
//	time_limit_s optional, a run is stopped after this long and the job ends
//	cancel_s     optional, the user cancels the job this long after submitting
//	retries      optional, failed runs the job may retry (0 to gpufleet.MaxRetries)
//	fails        optional, how many of its runs fail before one succeeds (0 to 1000)
//	fail_after_s optional, a failing run fails this long after it starts (default: halfway)
//	duration_s_<model>  optional, run time on that model (heterogeneous speed)
//	stack, requires, isolation, overhead  optional, as resources.* of a job
//	runtime      optional, container: the job runs in an image (nodes labelled runtime podman or docker)
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
		j := Job{ID: id, Team: "default", Class: gpufleet.Training}
		var err error
		if j.Submit, err = rw.float("submit_s"); err != nil {
			return err
		}
		if j.Duration, err = rw.float("duration_s"); err != nil {
			return err
		}
		j.Duration = max(j.Duration, 1)
		if j.GPUs, err = rw.int("gpus", gpufleet.MaxFleetGPUs); err != nil {
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
			if j.Class, err = gpufleet.ParsePriority(s); err != nil {
				return gpufleet.InField("priority", err)
			}
		}
		j.Preemptible = j.Class != gpufleet.Production
		if s := rw.get("preemptible"); s != "" {
			if j.Preemptible, err = strconv.ParseBool(s); err != nil {
				return fmt.Errorf("preemptible: %s is not true or false", gpufleet.Quote(s))
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
			if j.Sharing, err = gpufleet.ParseSharing(s); err != nil {
				return gpufleet.InField("sharing", err)
			}
		}
		j.Stack = rw.get("stack")
		if s := rw.get("requires"); s != "" {
			j.Requires = map[string]string{}
			for _, kv := range strings.Split(s, ";") {
				k, v, _ := strings.Cut(kv, ":")
				j.Requires[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		if s := rw.get("isolation"); s != "" {
			if j.Isolation, err = gpufleet.ParseIsolation(s); err != nil {
				return gpufleet.InField("isolation", err)
			}
		}
		j.Runtime = rw.get("runtime") // container: the job runs in an image
		if s := rw.get("overhead"); s != "" {
			o, err := gpufleet.ParseOverhead(s)
			if err != nil {
				return gpufleet.InField("overhead", err)
			}
			j.Overhead = &o
		}
		if s := rw.get("interconnect"); s != "" {
			if err := j.Interconnect.UnmarshalText([]byte(s)); err != nil {
				return gpufleet.InField("interconnect", err)
			}
		}
		for _, c := range []struct {
			col string
			v   *float64
		}{{"estimate_s", &j.Estimate}, {"grace_s", &j.Grace}, {"time_limit_s", &j.TimeLimit}, {"cancel_s", &j.Cancel}, {"fail_after_s", &j.FailAfter}} {
			v, ok, err := rw.optFloat(c.col)
			if err != nil {
				return err
			}
			if ok {
				*c.v = v
			}
		}
		for _, c := range []struct {
			col string
			v   *int
			hi  int
		}{{"retries", &j.Retries, gpufleet.MaxRetries}, {"fails", &j.Fails, maxFails}} {
			if s := rw.get(c.col); s != "" {
				n, err := strconv.Atoi(s)
				if err != nil {
					return gpufleet.InField(c.col, fmt.Errorf("%w: %q is not an integer", gpufleet.ErrInvalid, s))
				}
				if err := gpufleet.ValidateCount(c.col, n, 0, c.hi); err != nil {
					return err
				}
				*c.v = n
			}
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
		return tr.add(j, opt)
	})
	tr.BadLines = bad
	if err != nil {
		return nil, err
	}
	return tr, nil
}

package sim

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// fakeSchedule is a small strict-FIFO first-fit scheduler for engine tests
// that must not depend on the real policies. It preempts the most recently
// started preemptible job of a lower class when a production job does not
// fit and no job is stopping already, with the job's grace or the policy's
// default, and
// estimates every queued job to start an hour from now.
func fakeSchedule(in scheduler.Input) scheduler.Output {
	free := map[string]float64{}
	for _, n := range in.Nodes {
		for _, g := range n.GPUs {
			if g.State == scheduler.Ready && n.State == scheduler.Ready {
				free[g.ID] = 1
			}
		}
	}
	var pending, running []scheduler.Job
	for _, j := range in.Jobs {
		if j.Running() {
			running = append(running, j)
			for _, p := range j.Placement {
				for _, id := range p.GPUs {
					free[id] -= p.Fraction
				}
			}
		} else {
			pending = append(pending, j)
		}
	}
	rank := map[gpufleet.Priority]int{gpufleet.Production: 0, gpufleet.Interactive: 1, gpufleet.Training: 2, gpufleet.Batch: 3}
	slices.SortStableFunc(pending, func(a, b scheduler.Job) int {
		if c := cmp.Compare(rank[a.Priority], rank[b.Priority]); c != 0 {
			return c
		}
		if a.Requeued != b.Requeued {
			if a.Requeued {
				return -1
			}
			return 1
		}
		if c := a.Submitted.Compare(b.Submitted); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	var out scheduler.Output
	blocked := false
	for _, j := range pending {
		if !blocked {
			if pl := fakePlace(in.Nodes, free, j); pl != nil {
				out.Starts = append(out.Starts, scheduler.Start{Job: j.ID, Placement: pl})
				continue
			}
			if j.Priority == gpufleet.Production && !slices.ContainsFunc(running, func(r scheduler.Job) bool { return !r.StopAt.IsZero() }) {
				for i := len(running) - 1; i >= 0; i-- {
					r := running[i]
					if r.Preemptible && r.StopAt.IsZero() && rank[r.Priority] > rank[j.Priority] {
						grace := r.Grace
						if grace == 0 {
							grace = in.Config.DefaultGrace
						}
						out.Stops = append(out.Stops, scheduler.Stop{Job: r.ID, For: j.ID, Reason: "production job needs the GPUs",
							Code: scheduler.PreemptPriority, Grace: grace})
						running = slices.Delete(running, i, i+1)
						break
					}
				}
			}
			blocked = true
		}
		eta := in.Now.Add(time.Hour)
		out.Pending = append(out.Pending, scheduler.Pending{Job: j.ID, Position: len(out.Pending) + 1, ReasonCode: "fifo", EstimatedStart: &eta})
	}
	return out
}

func fakePlace(nodes []scheduler.Node, free map[string]float64, j scheduler.Job) []scheduler.Placement {
	f := 1.0
	if j.Resources.Sharing.Kind == gpufleet.TimeSlice {
		f = j.Resources.Sharing.Fraction
	}
	ok := func(g scheduler.GPU) bool {
		return (len(j.Resources.GPUModels) == 0 || slices.Contains(j.Resources.GPUModels, g.Model)) && free[g.ID] >= f-1e-9
	}
	var pl []scheduler.Placement
	left := j.Resources.GPUs
	for _, n := range nodes {
		var ids []string
		for _, g := range n.GPUs {
			if len(ids) < left && ok(g) {
				ids = append(ids, g.ID)
			}
		}
		if len(ids) == 0 || (len(ids) < left && len(ids) < len(n.GPUs)) {
			continue // whole nodes only when spreading
		}
		pl = append(pl, scheduler.Placement{Node: n.Name, GPUs: ids, Fraction: f})
		if left -= len(ids); left == 0 {
			for _, p := range pl {
				for _, id := range p.GPUs {
					free[id] -= f
				}
			}
			return pl
		}
	}
	return nil
}

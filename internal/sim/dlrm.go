package sim

import (
	"fmt"
	"io"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// parseDLRM reads Alibaba's GPU-disaggregated DLRM inference trace
// (cluster-trace-gpu-v2025). Every instance asking for a GPU is a
// long-running, non-preemptible production job of team app_name; CPU-node
// instances (gpu_request 0) are skipped and counted. Instances that existed
// before the trace (empty creation_time) arrive at 0 and start at 0;
// instances alive at the end (empty deletion_time) run until the trace's
// last timestamp.
func parseDLRM(r io.Reader, opt ReadOptions) (*Trace, error) {
	tr := &Trace{Name: opt.Name, Format: "dlrm", Models: map[string]catalog.GPU{}}
	seen := map[string]bool{}
	type open struct {
		i     int
		start float64
	}
	var alive []open
	end := 0.0
	required := []string{"instance_sn", "app_name", "gpu_request", "creation_time", "scheduled_time", "deletion_time"}
	bad, err := readCSV(r, opt, required, func(rw row) error {
		id := rw.get("instance_sn")
		gpu, err := rw.float("gpu_request")
		if err != nil {
			return err
		}
		if gpu != float64(int(gpu)) || gpu > 1024 {
			return fmt.Errorf("gpu_request: %v is not a whole number of GPUs", gpu)
		}
		created, hasCreated, err := rw.optFloat("creation_time")
		if err != nil {
			return err
		}
		start, hasStart, err := rw.optFloat("scheduled_time")
		if err != nil {
			return err
		}
		deleted, hasDeleted, err := rw.optFloat("deletion_time")
		if err != nil {
			return err
		}
		if !hasStart {
			start = created
		}
		if hasCreated && start < created || hasDeleted && deleted < start {
			return fmt.Errorf("times out of order: creation %g, scheduled %g, deletion %g", created, start, deleted)
		}
		if err := checkUnique(seen, id); err != nil {
			return err
		}
		end = max(end, created, start, deleted)
		if gpu == 0 {
			tr.Skipped++
			return nil
		}
		app := rw.get("app_name")
		if app == "" {
			return fmt.Errorf("app_name: empty")
		}
		j := Job{
			ID: id, Team: app, Class: gpufleet.Production, Submit: created, GPUs: int(gpu),
		}
		if hasDeleted {
			j.Duration = max(deleted-start, 1)
		} else {
			alive = append(alive, open{len(tr.Jobs), start})
		}
		return tr.add(j, opt)
	})
	tr.BadLines = bad
	if err != nil {
		return nil, err
	}
	for _, a := range alive {
		tr.Jobs[a.i].Duration = max(end-a.start, 1)
	}
	tr.Notes = append(tr.Notes,
		fmt.Sprintf("%d CPU-node instances skipped", tr.Skipped),
		fmt.Sprintf("%d instances alive at the trace end run until %.0f s", len(alive), end))
	return tr, nil
}

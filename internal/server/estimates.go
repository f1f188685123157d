package server

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"hash/fnv"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

// workloadOf is the server's word for "the same job run again"
// (scheduler.Job.Workload): the job's name, else a hash of its command.
func workloadOf(name string, command []string) string {
	if name != "" {
		return "name:" + name
	}
	if len(command) == 0 {
		return ""
	}
	h := fnv.New64a()
	for _, a := range command {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(a)))
		h.Write(n[:])
		h.Write([]byte(a))
	}
	return "cmd:" + hex.EncodeToString(h.Sum(nil))
}

// runHistory is the leader's copy of the finished runs the estimates of
// jobs without one learn from (scheduler.Input.Runs). The store holds
// them, so a new leader reads the same: the newest scheduler.RunHistory
// at first, then each cycle the jobs that succeeded since.
type runHistory struct {
	runs   []scheduler.RunSample
	loaded bool
	since  time.Time       // the newest finish read
	atEdge map[string]bool // the jobs that finished at since, already kept
	// version counts the changes of runs, and cache keeps the scheduler's
	// index of them between cycles (scheduler.Input.RunsVersion).
	version uint64
	cache   *scheduler.FleetCache
}

// update reads the jobs that succeeded since the last call and returns
// the history, oldest first. A failed read keeps what it had.
func (h *runHistory) update(ctx context.Context, st store.Store) ([]scheduler.RunSample, error) {
	runs, err := st.Runs(ctx, h.since, scheduler.RunHistory)
	if err != nil {
		return h.runs, err
	}
	h.loaded = true
	if h.cache == nil {
		h.cache, h.version = &scheduler.FleetCache{}, 1
	}
	slices.Reverse(runs) // oldest first
	for _, r := range runs {
		if h.atEdge[r.Job] {
			continue
		}
		if r.Finished.After(h.since) {
			h.since, h.atEdge = r.Finished, map[string]bool{}
		}
		h.atEdge[r.Job] = true
		h.version++
		h.runs = scheduler.KeepRun(h.runs, scheduler.RunSample{Team: r.Team, Workload: workloadOf(r.Name, r.Command),
			GPUs: r.GPUs, Ran: r.Ran})
	}
	return h.runs, nil
}

// queueEstimate is the queue entry's copy of the run time a pending job
// is planned on.
func queueEstimate(p scheduler.Pending) *gpufleet.RunEstimate {
	if p.Estimate.From == "" {
		return nil
	}
	e := p.Estimate
	return &e
}

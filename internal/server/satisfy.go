package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// fleetCacheTTL is how long a submit reuses the fleet it checked the last
// request against. A request it would refuse is checked again against the
// store as it is now, so a node that joined a moment ago counts.
const fleetCacheTTL = 2 * time.Second

// fleetCache is the fleet submissions are checked against, with the
// scheduler's index of it: a check builds no index while the fleet is
// the same (at 10,000 nodes a check took 35 ms building one, 0.4 ms with
// it kept; BenchmarkExplainLargeFleet).
type fleetCache struct {
	mu      sync.Mutex
	at      time.Time
	in      scheduler.Input
	set     bool
	index   scheduler.FleetCache
	version uint64 // the in's FleetVersion, one more at every read
}

// canonicalModels rewrites a job's gpu_models to catalog ids, so the
// scheduler matches them as the catalog does (any case, dashes, vendor
// prefixes, NVML names). An entry that is an admin-defined class, or a
// model a node reports that the catalog does not know, stays as it is;
// any other entry is unknown, with the nearest catalog ids suggested.
func (s *Server) canonicalModels(in scheduler.Input, res *gpufleet.Resources) error {
	var unknown error
	out := make([]string, 0, len(res.GPUModels))
	for i, m := range res.GPUModels {
		if _, ok := in.Classes[m]; ok {
			out = append(out, m)
			continue
		}
		if _, ok := in.Models[m]; ok {
			out = append(out, m)
			continue
		}
		g, err := s.cat.Lookup(m)
		if err != nil {
			if unknown == nil {
				unknown = fmt.Errorf("%w: resources.gpu_models[%d]: %s, nor a class", gpufleet.ErrUnsatisfiable, i, strings.TrimPrefix(err.Error(), gpufleet.ErrNotFound.Error()+": "))
			}
			out = append(out, m)
			continue
		}
		out = append(out, g.ID)
	}
	res.GPUModels = out
	return unknown
}

// satisfiable refuses a job that no node of the fleet could ever run as it
// asks (ErrUnsatisfiable, a 422, naming the constraint that fails): an
// unknown GPU model, more GPUs or nodes than the fleet has, memory above
// every model, a selector no node carries, GPU classes the team's quota
// and borrowing limit never allow. With allow (allow_unsatisfiable, the
// CLI's --queue-anyway) the job is queued regardless: its nodes have not
// joined yet. It canonicalises the job's gpu_models either way.
func (s *Server) satisfiable(ctx context.Context, j *gpufleet.Job, allow bool) error {
	check := func(in scheduler.Input) error {
		if err := s.canonicalModels(in, &j.Resources); err != nil {
			return err
		}
		if err := shmFits(in.Nodes, j.ShmSize); err != nil {
			return err
		}
		sj, _ := toSchedJob(*j)
		if e, reason := scheduler.Explain(in, sj); e != nil {
			return &gpufleet.ExplainedError{Explanation: e,
				Err: fmt.Errorf("%w: no node of the fleet can ever run this job as submitted (%s: %s)", gpufleet.ErrUnsatisfiable, e.Code, reason)}
		}
		return nil
	}
	in, fresh, err := s.checkFleet(ctx, false)
	if err != nil {
		return err
	}
	err = check(in)
	if err != nil && !fresh {
		// A refusal is checked against the store as it is now.
		if in, _, err = s.checkFleet(ctx, true); err != nil {
			return err
		}
		err = check(in)
	}
	if err != nil && allow && !errors.Is(err, gpufleet.ErrInvalid) {
		return nil
	}
	if errors.Is(err, gpufleet.ErrUnsatisfiable) {
		return fmt.Errorf("%w; if its nodes have not joined yet, submit it with --queue-anyway (allow_unsatisfiable)", err)
	}
	return err
}

// checkFleet returns the fleet to check submissions against: the cached
// one while it is young, else (or with fresh) one read from the store now.
func (s *Server) checkFleet(ctx context.Context, fresh bool) (scheduler.Input, bool, error) {
	now := s.now()
	c := &s.fleetCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if !fresh && c.set && now.Sub(c.at) < fleetCacheTTL && !now.Before(c.at) {
		return c.in, false, nil
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return scheduler.Input{}, false, err
	}
	in, err := s.fleetInput(ctx, now, nodes)
	if err != nil {
		return scheduler.Input{}, false, err
	}
	c.version++
	in.Cache, in.FleetVersion = &c.index, c.version
	c.in, c.at, c.set = in, now, true
	return in, true, nil
}

// forgetFleetCheck drops the cached fleet, so the next submission is
// checked against the store as it is now (after a change of the stacks a
// job may require).
func (s *Server) forgetFleetCheck() {
	s.fleetCheck.mu.Lock()
	s.fleetCheck.set = false
	s.fleetCheck.mu.Unlock()
}

// shmFits refuses a shared-memory size larger than the memory of every
// node that reports its memory (the host-memory-bytes label); with no node
// reporting it there is nothing to check against.
func shmFits(nodes []scheduler.Node, shm gpufleet.Bytes) error {
	if shm <= 0 {
		return nil
	}
	var largest int64
	for _, n := range nodes {
		if v, err := strconv.ParseInt(n.Labels[gpufleet.HostMemoryLabel], 10, 64); err == nil && v > largest {
			largest = v
		}
	}
	if largest > 0 && int64(shm) > largest {
		return fmt.Errorf("%w: shm_size %d (%.1f GiB): more than the memory of the fleet's largest node (%.1f GiB)", gpufleet.ErrInvalid,
			shm, float64(shm)/(1<<30), float64(largest)/(1<<30))
	}
	return nil
}

package server

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

// rebenchTimeout is how long a node the schedule cordoned waits for its
// figures before it returns to service anyway (its agent may be gone;
// its silence is the health rules' to judge).
const rebenchTimeout = 10 * time.Minute

// rebench is the scheduled re-bench component (Config.BenchSchedule): it
// picks idle nodes by the schedule (bench.Schedule.Due, the pure rule),
// cordons them in the leader's fenced cycle, orders their bench once the
// cycle committed, and returns them to ready once their figures arrived.
// Its memory (when each node was last measured, the starts of the past
// hour, the orders in flight) is under its own lock; a new leader starts
// with the store's figures and releases nodes whose order it never gave.
type rebench struct {
	mu sync.Mutex
	// last is each node's newest figure time, read from the store once.
	last    map[string]time.Time
	loaded  bool
	started []time.Time
	// orders are the scheduled bench orders in flight, by id: their node
	// and when they were given.
	orders map[string]rebenchOrder
}

type rebenchOrder struct {
	node string
	at   time.Time
}

// measured notes figures of node at; scheduled reports whether order id
// was the schedule's (and forgets it).
func (r *rebench) measured(node, id string, at time.Time) (scheduled bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]time.Time{}
	}
	if at.After(r.last[node]) {
		r.last[node] = at
	}
	if _, ok := r.orders[id]; ok {
		delete(r.orders, id)
		return true
	}
	return false
}

// stepRebenchSafely runs stepRebench and turns a panic into an error: the
// schedule waits, scheduling does not.
func (s *Server) stepRebenchSafely(ctx context.Context, jobs []gpufleet.Job, m *nodeMoves, now time.Time) (order []string, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("scheduled re-bench panicked", "panic", v, "stack", string(debug.Stack()))
			order, err = nil, fmt.Errorf("scheduled re-bench panicked: %v", v)
		}
	}()
	return s.stepRebench(ctx, jobs, m, now)
}

// stepRebench returns to ready the nodes the schedule holds whose figures
// arrived (or whose order is not this leader's, or timed out), then
// cordons the nodes the schedule says are due, in the cycle's batch and
// in m; it returns them, for their orders once the cycle committed.
func (s *Server) stepRebench(ctx context.Context, jobs []gpufleet.Job, m *nodeMoves, now time.Time) ([]string, error) {
	sched := s.cfg.BenchSchedule
	r := &s.rebench
	r.mu.Lock()
	inFlight := map[string]time.Time{}
	for _, o := range r.orders {
		inFlight[o.node] = o.at
	}
	r.mu.Unlock()
	for _, n := range m.nodes {
		if n.State != gpufleet.NodeCordoned || n.StateCause != gpufleet.CauseBench {
			continue
		}
		if at, ok := inFlight[n.Name]; ok && now.Sub(at) < rebenchTimeout {
			continue // still measuring
		}
		why := "re-bench done"
		if _, ok := inFlight[n.Name]; ok {
			why = fmt.Sprintf("re-bench: no figures within %s; back in service", gpufleet.FormatDuration(rebenchTimeout))
			r.mu.Lock()
			for id, o := range r.orders {
				if o.node == n.Name {
					delete(r.orders, id)
				}
			}
			r.mu.Unlock()
		}
		l := scheduler.NodeLife{State: gpufleet.NodeReady}
		if err := s.st.SetNodeState(ctx, n.Name, l.State, l.Cause, why, "bench-schedule", now); err != nil {
			return nil, err
		}
		m.set(n.Name, l)
	}
	if sched == nil || !sched.Open(now) {
		return nil, nil
	}
	if err := s.loadRebench(ctx); err != nil {
		return nil, err
	}
	busy := map[string]bool{}
	for _, j := range jobs {
		if a := activeAttempt(j); a != nil {
			for _, n := range a.Nodes {
				busy[n.Name] = true
			}
		}
	}
	r.mu.Lock()
	var cands []bench.Candidate
	for _, n := range m.nodes {
		age, known := s.heartbeatAge(n.Name, now)
		idle := n.State == gpufleet.NodeReady && n.Health != gpufleet.Unhealthy && !busy[n.Name] && known && age <= s.cfg.HeartbeatGrace
		cands = append(cands, bench.Candidate{Node: n.Name, Idle: idle, LastBench: r.last[n.Name]})
	}
	due := sched.Due(cands, r.started, now)
	r.started = slices.DeleteFunc(r.started, func(t time.Time) bool { return now.Sub(t) >= time.Hour })
	r.mu.Unlock()
	for _, name := range due {
		l := scheduler.NodeLife{State: gpufleet.NodeCordoned, Cause: gpufleet.CauseBench,
			Reason: fmt.Sprintf("scheduled re-bench (%s): %s benchmark of its idle GPUs; back in service when its figures arrive", sched, sched.Level)}
		if err := s.st.SetNodeState(ctx, name, l.State, l.Cause, l.Reason, "bench-schedule", now); err != nil {
			return nil, err
		}
		m.set(name, l)
	}
	return due, nil
}

// orderRebench gives the bench orders of the nodes the committed cycle
// cordoned for the schedule.
func (s *Server) orderRebench(nodes []string, now time.Time) {
	if len(nodes) == 0 {
		return
	}
	r := &s.rebench
	for _, n := range nodes {
		o := s.queueBench(n, api.BenchOrder{Quick: s.cfg.BenchSchedule.Level == bench.LevelQuick, Level: s.cfg.BenchSchedule.Level})
		r.mu.Lock()
		if r.orders == nil {
			r.orders = map[string]rebenchOrder{}
		}
		r.orders[o.ID] = rebenchOrder{node: n, at: now}
		r.started = append(r.started, now)
		r.mu.Unlock()
		s.log.Info("scheduled re-bench", "node", n, "order", o.ID, "level", o.Level)
	}
}

// loadRebench reads each node's newest figure time from the store, once.
func (s *Server) loadRebench(ctx context.Context) error {
	r := &s.rebench
	r.mu.Lock()
	loaded := r.loaded
	r.mu.Unlock()
	if loaded {
		return nil
	}
	rs, err := s.st.BenchResults(ctx, store.BenchFilter{Latest: true})
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]time.Time{}
	}
	for _, x := range rs {
		if x.At.After(r.last[x.Node]) {
			r.last[x.Node] = x.At
		}
	}
	r.loaded = true
	return nil
}

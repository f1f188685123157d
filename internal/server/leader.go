package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/rollout"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

// leadership is this replica's leadership and what the leader keeps
// between cycles: a component with its own lock, which guards every field.
type leadership struct {
	mu sync.Mutex
	leaderState
}

// current is this replica's leadership epoch (0 before it first led).
func (l *leadership) current() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

// leads reports whether this replica holds the lease, renewed within
// half its ttl, at now (monotonic).
func (l *leadership) leads(now time.Time, ttl time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held && now.Sub(l.renewedAt) < ttl/2
}

// leaderState is what the leader keeps between cycles.
type leaderState struct {
	held  bool
	epoch int64
	// renewedAt is the monotonic time of the last successful renewal; the
	// leader stops scheduling once LeaseTTL/2 has passed without one.
	renewedAt time.Time
	// ready is set after the first complete cycle as leader.
	ready bool
	// orders are the per-node starts and stops agents receive.
	orders map[string]nodeOrders
	// rollouts are the active rollouts as last stepped, for the update
	// orders heartbeats carry.
	rollouts []rollout.Rollout
	// usage is each team's decayed GPU-seconds, for fair share.
	usage   map[string]float64
	usageAt time.Time
	// lastFull is when the last full cycle ran, lastEvent the newest audit
	// event it had seen, and withWork the nodes holding attempts (a full
	// cycle runs once one of them has been silent for heartbeat grace).
	lastFull  time.Time
	lastEvent int64
	withWork  map[string]bool
	// valid are the active jobs that passed validation (screen);
	// culprits the jobs the scheduler panicked on, with the panic in words
	// (scheduleSafely).
	valid    map[string]bool
	culprits map[string]suspect
	// eta keeps what calibrates the ETAs (scheduler.Input.WaitHistory).
	eta etaHistory
	// runs keeps what the estimates learn from (scheduler.Input.Runs).
	runs runHistory
}

// etaHistory is the leader's memory of queued jobs' predicted waits and
// of the waits of jobs that started: the scheduler calibrates its ETAs on
// them. It lives with the leadership: a new leader starts with none and
// shows the simulation's starts alone until ETAMinSamples jobs started.
type etaHistory struct {
	predicted map[string]prediction // queued job: what the cycle that first saw it predicted
	waits     []scheduler.WaitSample
	// arrivals is the jobs submitted in the policy's arrival window that
	// the leader has seen (scheduler.Input.Arrivals); seen their ids.
	arrivals []scheduler.Job
	seen     map[string]time.Time
}

// prediction is what a queued job was told when first seen: its simulated
// wait from submission, and the run time it was planned on.
type prediction struct{ wait, est time.Duration }

// arrived records the jobs of a cycle's input the leader sees for the
// first time and returns the arrivals the ETAs expect again.
func (h *etaHistory) arrived(in scheduler.Input) []scheduler.Job {
	w := in.Config.ArrivalWindow
	if h.seen == nil {
		h.seen = map[string]time.Time{}
	}
	var fresh []*scheduler.Job
	for i := range in.Jobs {
		j := &in.Jobs[i]
		if _, ok := h.seen[j.ID]; !ok && !j.Submitted.Before(in.Now.Add(-w)) {
			h.seen[j.ID] = j.Submitted
			fresh = append(fresh, j)
		}
	}
	slices.SortFunc(fresh, func(a, b *scheduler.Job) int { return a.Submitted.Compare(b.Submitted) })
	// Only the newest ArrivalHistory can be kept.
	fresh = fresh[max(0, len(fresh)-scheduler.ArrivalHistory):]
	add := make([]scheduler.Job, len(fresh))
	for i, j := range fresh {
		add[i] = *j
		add[i].Placement = nil
	}
	h.arrivals = scheduler.KeepArrivals(h.arrivals, in.Now, w, add...)
	maps.DeleteFunc(h.seen, func(_ string, at time.Time) bool { return at.Before(in.Now.Add(-w)) })
	return h.arrivals
}

// history is what the scheduler calibrates on (Input.WaitHistory), as the
// simulator builds it: the recent starts, and the queued jobs whose
// prediction it knows as censored samples (their wait so far), the
// longest waiting first, at most scheduler.ETAHistory of each.
func (h *etaHistory) history(in scheduler.Input) []scheduler.WaitSample {
	out := slices.Clone(h.waits)
	var waiting []*scheduler.Job
	for i := range in.Jobs {
		if _, ok := h.predicted[in.Jobs[i].ID]; ok && !in.Jobs[i].Running() {
			waiting = append(waiting, &in.Jobs[i])
		}
	}
	slices.SortFunc(waiting, func(a, b *scheduler.Job) int { return a.Submitted.Compare(b.Submitted) })
	for _, j := range waiting[:min(len(waiting), scheduler.ETAHistory)] {
		p := h.predicted[j.ID]
		out = append(out, scheduler.WaitSample{GPUs: j.Resources.GPUs, Estimate: p.est, Predicted: p.wait,
			Actual: in.Now.Sub(j.Submitted), Censored: true})
	}
	return out
}

// observe records a cycle: queued jobs' first simulated starts, and, for
// jobs that start now, their wait against that prediction.
func (h *etaHistory) observe(in scheduler.Input, out scheduler.Output, now time.Time) {
	jobs := make(map[string]*scheduler.Job, len(in.Jobs))
	for i := range in.Jobs {
		jobs[in.Jobs[i].ID] = &in.Jobs[i]
	}
	for _, st := range out.Starts {
		j := jobs[st.Job]
		pred, ok := h.predicted[st.Job]
		if j == nil || !ok {
			continue
		}
		h.waits = scheduler.KeepWait(h.waits, scheduler.WaitSample{GPUs: j.Resources.GPUs, Estimate: pred.est,
			Predicted: pred.wait, Actual: now.Sub(j.Submitted)})
	}
	next := make(map[string]prediction, len(out.Pending))
	for _, p := range out.Pending {
		if pred, ok := h.predicted[p.Job]; ok {
			next[p.Job] = pred
		} else if j := jobs[p.Job]; j != nil && p.Simulated != nil {
			next[p.Job] = prediction{wait: p.Simulated.Sub(j.Submitted), est: p.Estimate.Duration()}
		}
	}
	h.predicted = next
}

type nodeOrders struct {
	start    []api.Assignment
	stop     []api.StopOrder
	validate *api.ValidationOrder // a return-to-service check to run
	active   map[string]bool      // non-terminal attempts placed on the node
}

// epoch is this replica's leadership epoch (0 before it first led).
func (s *Server) epoch() int64 { return s.lead.current() }

// Leader reports whether this replica currently holds the lease.
func (s *Server) Leader() bool {
	return s.lead.leads(time.Now(), s.cfg.LeaseTTL)
}

// Advertise records url as where this replica answers, for followers to
// forward requests to when it leads (api.HandlerOptions.Leader).
func (s *Server) Advertise(ctx context.Context, url string) error {
	s.lead.mu.Lock()
	s.selfURL = url
	s.lead.mu.Unlock()
	return s.st.PutReplica(ctx, s.cfg.ID, url, s.now())
}

// LeaderURL says where the leader answers (api.LeaderFunc): this replica
// when it leads or holds the lease in the store (its first cycle is under
// way), else the lease holder's advertised URL; an error wrapping
// api.ErrUnavailable when nobody leads now.
func (s *Server) LeaderURL(ctx context.Context) (string, bool, error) {
	s.lead.mu.Lock()
	self := s.selfURL
	s.lead.mu.Unlock()
	if s.Leader() {
		return self, true, nil
	}
	l, err := s.st.Lease(ctx)
	switch {
	case errors.Is(err, gpufleet.ErrNotFound):
		return "", false, fmt.Errorf("%w: no replica has led yet", api.ErrUnavailable)
	case err != nil:
		return "", false, fmt.Errorf("%w: reading the lease: %v", api.ErrUnavailable, err)
	case l.Holder == s.cfg.ID:
		return self, true, nil
	case !time.Now().Before(l.ExpiresAt):
		return "", false, fmt.Errorf("%w: no replica leads now (the lease of %s, epoch %d, has ended)", api.ErrUnavailable, l.Holder, l.Epoch)
	case l.URL == "":
		return "", false, fmt.Errorf("%w: the leader %s gave no URL to forward to", api.ErrUnavailable, l.Holder)
	}
	return l.URL, false, nil
}

// Run drives the leader loop until ctx is done: it takes or renews the
// lease every tick and, while leader, marks silent nodes, declares lost
// attempts and runs the scheduler. Submissions, cancels and finished
// attempts wake it early.
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Tick)
	defer t.Stop()
	go s.auditLoop(ctx)
	for {
		if err := s.safeCycle(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("scheduling cycle failed", "err", err)
		}
		select {
		case <-ctx.Done():
			s.stepDown(context.WithoutCancel(ctx))
			return nil
		case <-t.C:
		case <-s.wake:
		}
	}
}

// stepDown gives the lease up if this replica holds it in the store (the
// last cycle, cut short by the shutdown, may have forgotten it): Run calls
// it as it ends, once no cycle runs, so that a server that stops hands
// over at once instead of making the others (or itself, restarted) wait
// out the lease.
func (s *Server) stepDown(ctx context.Context) {
	s.lead.mu.Lock()
	s.lead.held, s.lead.ready = false, false
	s.lead.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	released, err := s.st.ReleaseLease(ctx, s.cfg.ID)
	switch {
	case err != nil:
		s.log.Warn("giving the lease up", "err", err)
	case released:
		s.log.Info("gave the lease up")
	}
}

// safeCycle runs Cycle and turns a panic into an error: no cycle takes
// the leader down (the scheduler's own panics are isolated to the job
// that causes them; see scheduleSafely).
func (s *Server) safeCycle(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			s.dirty.Store(true)
			s.log.Error("leader cycle panicked", "panic", v, "stack", string(debug.Stack()))
			err = fmt.Errorf("leader cycle panicked: %v", v)
		}
	}()
	return s.Cycle(ctx)
}

// Cycle runs one leader cycle. It is exported for tests that step time.
// Every write of the cycle is fenced by the lease's epoch (store.Fenced):
// once another replica has taken the lease, none of them lands and the
// replica stops leading.
func (s *Server) Cycle(ctx context.Context) error {
	err := s.cycle(ctx)
	if errors.Is(err, store.ErrFenced) {
		s.lead.mu.Lock()
		s.lead.held, s.lead.ready = false, false
		s.lead.mu.Unlock()
		s.log.Warn("lost leadership during the cycle: its writes were refused", "err", err)
		return nil
	}
	return err
}

func (s *Server) cycle(ctx context.Context) error {
	// The lease runs for LeaseTTL from a moment after this one (the
	// database reads its clock inside TryLease), so this monotonic reading
	// bounds it from below: the cycle's work, the decision's commit
	// included, must end by LeaseTTL/2 after it, whatever happens to the
	// database or to this process (a pause, a slow network) meanwhile.
	asked := time.Now()
	lease, held, err := s.st.TryLease(ctx, s.cfg.ID, s.cfg.LeaseTTL)
	s.lead.mu.Lock()
	if err != nil || !held {
		s.lead.held, s.lead.ready = false, false
		s.lead.mu.Unlock()
		if err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		return nil
	}
	fresh := !s.lead.held || s.lead.epoch != lease.Epoch
	if fresh {
		s.lead.leaderState = leaderState{usage: s.lead.usage, usageAt: s.lead.usageAt}
		s.log.Info("leading", "epoch", lease.Epoch)
	}
	s.lead.held, s.lead.epoch, s.lead.renewedAt = true, lease.Epoch, asked
	s.lead.mu.Unlock()
	if fresh {
		s.live.led(s.now())
	}
	// Accounting (rollups, usage) is what this replica measured, not a
	// decision: it is written unfenced. Everything else is fenced.
	acct, cancel := context.WithDeadline(ctx, asked.Add(s.cfg.LeaseTTL/2))
	defer cancel()
	ctx = store.Fenced(acct, lease.Epoch)
	if err := s.tele.flush(acct, s.now(), false); err != nil {
		s.log.Warn("flushing rollups", "err", err)
	}

	start := time.Now()
	now := s.now()
	if !s.dirty.Swap(false) && !s.due(ctx, now) {
		return nil // nothing changed: the lease is renewed, the last decision stands
	}
	mark, err := s.st.LastEventID(ctx)
	if err != nil {
		return err
	}
	jobs, err := s.st.ActiveJobs(ctx)
	if err != nil {
		return err
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return err
	}
	// The cycle's writes (node moves, health, rollouts, the decision) are
	// one transaction at its end, fenced; what it publishes to agents
	// follows the commit.
	var publish func()
	var rebenches []string // cordoned by the bench schedule: ordered after the commit
	err = s.st.Batch(ctx, func(ctx context.Context) error {
		if err := s.health.judgeSilent(ctx, nodes, func(n string) (time.Duration, bool) { return s.heartbeatAge(n, now) }, s.cfg.HeartbeatGrace, now); err != nil {
			return err
		}
		m := &nodeMoves{nodes: nodes}
		if err := s.health.advanceStates(ctx, jobs, m, now); err != nil {
			return err
		}
		if err := s.stepRolloutsSafely(ctx, jobs, m, now); err != nil {
			// Rollouts wait for the next cycle; scheduling does not.
			s.log.Warn("stepping rollouts", "err", err)
		}
		var err error
		if rebenches, err = s.stepRebenchSafely(ctx, jobs, m, now); err != nil {
			s.log.Warn("scheduled re-bench", "err", err)
		}
		publish, err = s.schedule(ctx, lease.Epoch, now, jobs, m.nodes)
		return err
	})
	if err == nil {
		publish()
		s.orderRebench(rebenches, now)
	}
	s.metrics.cycle.Observe(time.Since(start).Seconds())
	if ferr := s.acct.flush(acct); ferr != nil {
		s.log.Warn("flushing usage", "err", ferr)
	}
	if err != nil {
		s.dirty.Store(true) // try again next tick
		return err
	}
	s.lead.mu.Lock()
	s.lead.lastFull, s.lead.lastEvent = now, mark
	s.lead.mu.Unlock()
	return nil
}

// due reports whether a full cycle must run although nothing was nudged:
// another replica changed the store (a new audit event), IdleCycle has
// passed, or a node holding work has gone silent long enough to matter.
func (s *Server) due(ctx context.Context, now time.Time) bool {
	s.lead.mu.Lock()
	last, lastEvent, ready := s.lead.lastFull, s.lead.lastEvent, s.lead.ready
	var nodes []string
	for n := range s.lead.withWork {
		nodes = append(nodes, n)
	}
	s.lead.mu.Unlock()
	if !ready || now.Sub(last) >= s.cfg.IdleCycle || now.Before(last) {
		return true
	}
	for _, n := range nodes {
		if age, _ := s.heartbeatAge(n, now); age > s.cfg.HeartbeatGrace {
			return true
		}
	}
	id, err := s.st.LastEventID(ctx)
	return err != nil || id != lastEvent
}

// schedule runs the scheduler on the cycle's snapshot and writes its
// decision fenced by epoch; publish, once the decision is committed, makes
// it what agents are told and what the leader remembers.
func (s *Server) schedule(ctx context.Context, epoch int64, now time.Time, jobs []gpufleet.Job, nodes []gpufleet.Node) (publish func(), err error) {
	jobs = s.screen(jobs)
	in, byID, err := s.snapshot(ctx, now, jobs, nodes)
	if err != nil {
		return nil, err
	}
	s.lead.mu.Lock()
	runs := s.lead.runs
	s.lead.mu.Unlock()
	// The read is outside the lock; only this cycle's goroutine updates it.
	if in.Runs, err = runs.update(ctx, s.st); err != nil {
		s.log.Warn("finished runs not read; estimates keep the history they had", "err", err)
	}
	in.Cache, in.RunsVersion = runs.cache, runs.version
	s.lead.mu.Lock()
	s.lead.runs = runs
	in.WaitHistory = s.lead.eta.history(in)
	in.Arrivals = s.lead.eta.arrived(in)
	s.lead.mu.Unlock()
	out, leftOut, err := s.scheduleSafely(ctx, in)
	if err != nil {
		return nil, err
	}
	out = endLeftOut(out, leftOut, byID, in.Config.DefaultGrace)
	d := store.Decision{At: now}
	// What the core's view of a running job lacks for its agent's orders:
	// the attempt's id and its stop's words, from the store, or from the
	// decision being written.
	refs := make(map[string]attemptRef, len(byID))
	for id, j := range byID {
		if a := activeAttempt(j); a != nil {
			ref := attemptRef{id: a.ID, starting: a.State == gpufleet.AttemptStarting, reason: a.Reason}
			if a.StopRequested && a.StopGraceS != nil {
				ref.grace = *a.StopGraceS
			}
			refs[id] = ref
		}
	}
	for _, st := range out.Starts {
		j := byID[st.Job]
		start := store.Start{JobID: st.Job, AttemptID: "a-" + randomString(8), Fraction: 1}
		for _, p := range st.Placement {
			start.Nodes = append(start.Nodes, gpufleet.AttemptNode{Name: p.Node, GPUs: p.GPUs})
			if p.Fraction > 0 {
				start.Fraction = p.Fraction
			}
		}
		d.Starts = append(d.Starts, start)
		refs[st.Job] = attemptRef{id: start.AttemptID, starting: true}
		s.log.Info("placing", "job", j.ID, "team", j.Team, "attempt", start.AttemptID, "nodes", len(start.Nodes))
	}
	// Every stop is the scheduler's: preemptions, drains, time limits,
	// cancels and lost nodes, each with its grace. The store keeps the
	// grace for the stop order the agent gets and for the scheduler's next
	// view of the job; a lost attempt has nobody to stop it and is over.
	for _, st := range out.Stops {
		ref, ok := refs[st.Job]
		if !ok {
			continue
		}
		d.Stops = append(d.Stops, store.Stop{AttemptID: ref.id, Reason: st.Reason, ReasonCode: st.Code, Grace: st.Grace,
			Lost: st.Code == scheduler.StopNodeLost})
		ref.reason, ref.grace = st.Reason, st.Grace.Seconds()
		refs[st.Job] = ref
		if st.Bound != "" {
			// The job's owner sees in its events why it is no longer
			// preempted (Config.MaxPreemptionsPerJob, PerDay).
			d.Events = append(d.Events, gpufleet.Event{Actor: "scheduler", Kind: "job.preemption_bound", Object: st.Job,
				Team: byID[st.Job].Team, Detail: st.Bound})
		}
	}
	for _, f := range out.Fails {
		d.Fails = append(d.Fails, store.Fail{JobID: f.Job, Reason: f.Reason, ReasonCode: f.Code})
	}
	for _, a := range s.racks.newAlerts(out.PowerAlerts) {
		// The stop policy could not act (only production or
		// non-preemptible work there): the operator hears of it once per
		// time over.
		d.Events = append(d.Events, gpufleet.Event{Actor: "scheduler", Kind: "rack.over_budget", Object: a.Rack, Detail: a.Reason})
		s.log.Warn("rack over its power budget and nothing may be stopped", "rack", a.Rack, "draw_watts", float64(a.DrawWatts),
			"budget_watts", float64(a.BudgetWatts), "over_for", a.OverFor)
	}
	for _, p := range out.Pending {
		j := byID[p.Job]
		d.Queue = append(d.Queue, gpufleet.QueueEntry{ID: p.Job, Team: j.Team, Priority: j.Priority, Position: p.Position,
			TeamPosition: p.TeamPosition, Reason: p.Reason, ReasonCode: p.ReasonCode, EstimatedStart: p.EstimatedStart,
			EstimatedStartP90: p.EstimatedStartP90, ETAConfidence: p.ETAConfidence, Explanation: p.Explanation, Estimate: queueEstimate(p)})
	}
	// Starts are stamped after the snapshot was read, so that an attempt
	// never appears to begin before the one it replaces ended.
	d.At = s.now()
	if err := s.st.ApplySchedule(ctx, epoch, d); err != nil {
		return nil, err
	}
	teams, err := s.st.Teams(ctx)
	if err != nil {
		s.log.Warn("reading the teams' uid offsets and registry credentials", "err", err)
	}
	return func() {
		s.lead.mu.Lock()
		s.lead.eta.observe(in, out, now)
		s.lead.mu.Unlock()
		s.metrics.decisions.Add(float64(len(d.Starts) + len(d.Stops)))
		for _, sp := range d.Stops {
			if sp.Lost {
				s.metrics.ended.WithLabelValues(string(gpufleet.AttemptLost), string(sp.ReasonCode)).Inc()
			}
		}
		// Until the next cycle the fleet is what the core says the
		// decision made of it.
		v := fleetView{Input: scheduler.Decided(in, out), specs: byID, attempts: refs}
		s.setOrders(v, nodes, teamsByName(teams))
		s.setGPUs(v, nodes)
	}, nil
}

// endLeftOut adds to out what the scheduler would have decided for the
// jobs it panicked on even as invalid (leftOut: id to why): the last
// resort, a stop with the default grace for a running one that is not
// already stopping, a failure for a queued one.
func endLeftOut(out scheduler.Output, leftOut map[string]string, jobs map[string]gpufleet.Job, grace time.Duration) scheduler.Output {
	for _, id := range slices.Sorted(maps.Keys(leftOut)) {
		if a := activeAttempt(jobs[id]); a != nil {
			if !a.StopRequested {
				out.Stops = append(out.Stops, scheduler.Stop{Job: id, Code: scheduler.StopInvalid, Reason: leftOut[id], Grace: grace})
			}
		} else {
			out.Fails = append(out.Fails, scheduler.Fail{Job: id, Code: scheduler.FailInvalid, Reason: leftOut[id]})
		}
	}
	return out
}

// attemptRef is what a running job's orders need beyond the core's view
// of it: its attempt's id, whether its agent has yet to start it, and its
// stop's words and grace (seconds) once a stop is decided.
type attemptRef struct {
	id       string
	starting bool
	reason   string
	grace    float64
}

// fleetView is the leader's view of the fleet between cycles: the core's
// (scheduler.Decided), the jobs' specs and their attempts' names.
type fleetView struct {
	scheduler.Input
	specs    map[string]gpufleet.Job
	attempts map[string]attemptRef
}

// running calls fn for every job holding GPUs in v, with its spec and
// attempt.
func (v fleetView) running(fn func(j scheduler.Job, spec gpufleet.Job, a attemptRef)) {
	for _, j := range v.Jobs {
		if !j.Running() {
			continue
		}
		if a, ok := v.attempts[j.ID]; ok {
			fn(j, v.specs[j.ID], a)
		}
	}
}

// activeAttempt is a job's non-terminal attempt, if any.
func activeAttempt(j gpufleet.Job) *gpufleet.Attempt {
	for i := len(j.Attempts) - 1; i >= 0; i-- {
		if !j.Attempts[i].State.Terminal() {
			return &j.Attempts[i]
		}
	}
	return nil
}

// teamsByName indexes teams by name.
func teamsByName(teams []gpufleet.Team) map[string]gpufleet.Team {
	out := make(map[string]gpufleet.Team, len(teams))
	for _, t := range teams {
		out[t.Name] = t
	}
	return out
}

// setOrders rebuilds what each node's heartbeat answers with, from v: a
// start carries the grace its stops will give (the job's, else the
// policy's default), its team's uid offset, and for an image its team's
// credentials for the image's registry.
func (s *Server) setOrders(v fleetView, nodes []gpufleet.Node, teams map[string]gpufleet.Team) {
	modelOf := modelsByUUID(nodes)
	infos := map[string]attemptInfo{}
	orders := map[string]nodeOrders{}
	get := func(n string) nodeOrders {
		o, ok := orders[n]
		if !ok {
			o = nodeOrders{active: map[string]bool{}}
		}
		return o
	}
	v.running(func(j scheduler.Job, spec gpufleet.Job, a attemptRef) {
		if len(j.Placement[0].GPUs) > 0 {
			infos[a.id] = attemptInfo{team: j.Team, model: modelOf[j.Placement[0].GPUs[0]]}
		}
		// A stop's grace is the one the scheduler decided with it; a start
		// carries the grace the job's stops will give.
		stopping := !j.StopAt.IsZero()
		grace := v.Config.DefaultGrace.Seconds()
		if j.Grace > 0 {
			grace = j.Grace.Seconds()
		}
		if stopping && a.grace > 0 {
			grace = a.grace
		}
		for rank, p := range j.Placement {
			o := get(p.Node)
			o.active[a.id] = true
			switch {
			case stopping:
				o.stop = append(o.stop, api.StopOrder{AttemptID: a.id, Reason: a.reason, ReasonCode: string(j.StopCode), GraceS: grace})
			case a.starting:
				o.start = append(o.start, api.Assignment{AttemptID: a.id, JobID: j.ID, Command: spec.Command, Env: spec.Env,
					Workdir: spec.Workdir, Launch: spec.Launch, Team: j.Team, Priority: j.Priority, GPUs: p.GPUs, Fraction: fracOr1(p.Fraction), TimeLimitS: spec.TimeLimitS,
					GraceS: grace, SimLoad: string(spec.SimLoad), CPUs: spec.Resources.CPUs, MemoryBytes: int64(spec.Resources.MemoryBytes), NodeRank: rank, NNodes: len(j.Placement), GPUsPerNode: len(p.GPUs),
					MasterAddr: j.Placement[0].Node, MasterPort: masterPort(a.id), Work: spec.Work})
				as := &o.start[len(o.start)-1]
				if t, ok := teams[j.Team]; ok {
					off := t.UIDOffset
					as.TeamUIDOffset = &off
					if c, ok := t.RegistryAuth[gpufleet.ImageRegistry(spec.Image)]; ok && spec.Container() {
						as.RegistryAuth = &api.RegistryAuth{Registry: gpufleet.ImageRegistry(spec.Image), Username: c.Username, Password: c.Password}
					}
				}
			}
			orders[p.Node] = o
		}
	})
	for _, n := range nodes {
		if vo := s.health.validationOrder(n, s.epoch()); vo != nil {
			o := get(n.Name)
			o.validate = vo
			orders[n.Name] = o
		}
	}
	s.lead.mu.Lock()
	s.lead.orders = orders
	s.lead.ready = true
	s.lead.withWork = map[string]bool{}
	for n, o := range orders {
		if len(o.active) > 0 {
			s.lead.withWork[n] = true
		}
	}
	s.lead.mu.Unlock()
	s.acct.setAttempts(infos)
	s.setJobMetrics(v, nodes)
}

// setJobMetrics replaces the queue and job series from v.
func (s *Server) setJobMetrics(v fleetView, nodes []gpufleet.Node) {
	depth := map[[2]string]float64{}
	oldest := map[string]float64{}
	count := map[[2]string]int{}
	for _, j := range v.Jobs {
		if !j.Running() {
			depth[[2]string{string(j.Priority), j.Team}]++
			p := string(j.Priority)
			oldest[p] = max(oldest[p], v.Now.Sub(j.Submitted).Seconds())
			count[[2]string{string(gpufleet.JobQueued), p}]++
		}
	}
	s.metrics.setQueue(depth, oldest)
	s.metrics.setNodes(nodes)
	ids := map[string]gpuShare{} // GPU and MIG instance id -> what holding it takes
	for _, n := range nodes {
		for _, g := range n.GPUs {
			ids[g.UUID] = gpuShare{g.Model, 1}
			for _, mi := range g.MIGInstances {
				if p, err := gpufleet.ParseMIGProfile(mi.Profile); err == nil {
					ids[mi.UUID] = gpuShare{g.Model, p.Share()}
				}
			}
		}
	}
	held := map[string]float64{}
	v.running(func(j scheduler.Job, _ gpufleet.Job, a attemptRef) {
		state := gpufleet.JobRunning
		if a.starting {
			state = gpufleet.JobScheduled
		}
		count[[2]string{string(state), string(j.Priority)}]++
		for _, p := range j.Placement {
			for _, id := range p.GPUs {
				g := ids[id]
				held[g.model] += fracOr1(p.Fraction) * g.share
			}
		}
	})
	s.metrics.setJobs(count, held)
}

// masterPort derives a rendezvous port from the attempt id, in the
// dynamic range, so concurrent attempts on one node do not collide.
func masterPort(attempt string) int {
	h := 0
	for _, c := range attempt {
		h = (h*31 + int(c)) % 10000
	}
	return 29500 + h%10000
}

// snapshot builds the scheduler's input from the store.
func (s *Server) snapshot(ctx context.Context, now time.Time, jobs []gpufleet.Job, nodes []gpufleet.Node) (scheduler.Input, map[string]gpufleet.Job, error) {
	in, err := s.fleetInput(ctx, now, nodes)
	if err != nil {
		return in, nil, err
	}
	gauges, pue, err := s.racks.input(ctx, &in, nodes, heldBy(jobs))
	if err != nil {
		return in, nil, err
	}
	s.racks.overBudget(in.Racks, now)
	s.metrics.setRacksOver(in.Racks)
	s.metrics.setRacks(gauges)
	s.acct.setNodePUE(pue)
	usage := s.decayUsage(jobs, now, in.Config.UsageHalfLife)
	for i := range in.Teams {
		in.Teams[i].Usage = usage[in.Teams[i].Name]
	}
	byID := map[string]gpufleet.Job{}
	for _, j := range jobs {
		byID[j.ID] = j
		sj, ok := toSchedJob(j)
		if ok {
			in.Jobs = append(in.Jobs, sj)
		}
	}
	return in, byID, nil
}

// fleetInput is the scheduler's input without the work: the policy, the
// nodes as the scheduler sees them, their models, the classes and the
// teams (without usage).
func (s *Server) fleetInput(ctx context.Context, now time.Time, nodes []gpufleet.Node) (scheduler.Input, error) {
	cfg, _ := scheduler.PolicyConfig(s.cfg.Policy)
	cfg.Spare = s.cfg.Spare
	cfg.PriorityEstimates = s.cfg.DefaultEstimate
	// Past heartbeat grace + fence + margin a silent node's agent has
	// fenced its attempts: the scheduler declares them lost, and the jobs
	// requeue. At most one attempt of a job ever runs.
	cfg.LostAfter = s.cfg.HeartbeatGrace + s.cfg.FenceAfter + s.cfg.LostMargin
	cfg.OverBudget, cfg.OverBudgetAfter = s.cfg.OverBudget, s.cfg.OverBudgetAfter
	in := scheduler.Input{Now: now, Config: cfg, Models: map[string]catalog.GPU{}, Classes: map[string][]string{}}
	for _, n := range nodes {
		v := s.view(n, now)
		sn := scheduler.Node{Name: n.Name, State: scheduler.StateOf(v.State), Block: n.Labels["block"], Labels: n.Labels,
			Reason: v.StateReason, Stack: gpufleet.NodeStack(n.Versions)}
		if age, _ := s.heartbeatAge(n.Name, now); age > 0 {
			sn.LastSeen = now.Add(-age)
		}
		for _, g := range n.GPUs {
			sg := scheduler.GPU{ID: g.UUID, Index: g.Index, Model: g.Model, NVLinkDomain: g.NVLinkDomain, State: scheduler.Ready}
			switch {
			case g.State == gpufleet.NodeDraining:
				sg.State, sg.Reason = scheduler.Draining, g.StateReason
			case g.Health == gpufleet.Unhealthy || (g.State != "" && g.State != gpufleet.NodeReady):
				sg.State = scheduler.Cordoned
			}
			for _, m := range g.MIGInstances {
				sg.MIG = append(sg.MIG, scheduler.MIGInstance{ID: m.UUID, Profile: m.Profile})
			}
			sn.GPUs = append(sn.GPUs, sg)
			if _, ok := in.Models[g.Model]; !ok {
				if cg, err := s.cat.Lookup(g.Model); err == nil {
					in.Models[g.Model] = cg
				} else {
					in.Models[g.Model] = catalog.GPU{ID: g.Model, Name: g.Model}
				}
			}
		}
		in.Nodes = append(in.Nodes, sn)
	}
	classes, err := s.st.Classes(ctx)
	if err != nil {
		return in, err
	}
	for _, c := range classes {
		in.Classes[c.Name] = c.Models
	}
	stacks, err := s.st.Stacks(ctx)
	if err != nil {
		return in, err
	}
	in.Stacks = stackInputs(stacks)
	teams, err := s.st.Teams(ctx)
	if err != nil {
		return in, err
	}
	for _, t := range teams {
		in.Teams = append(in.Teams, scheduler.Team{Name: t.Name, Quota: t.Quota, BorrowingLimit: t.BorrowingLimit, Weight: t.Weight})
	}
	return in, nil
}

// toSchedJob converts a stored job: queued, or running with its attempt
// (stopping, when a stop was decided). A queued job whose cancel is
// pending is left out: the store ends it.
func toSchedJob(j gpufleet.Job) (scheduler.Job, bool) {
	sj := scheduler.Job{ID: j.ID, Team: j.Team, Workload: workloadOf(j.Name, j.Command), Priority: j.Priority, Submitted: j.SubmittedAt,
		Preemptible: j.Preemptible, Requeued: j.Interruptions > 0, Retries: j.Retries, Resources: j.Resources, CancelRequested: j.CancelRequested,
		Invalid: j.Defect}
	if j.TimeLimitS != nil {
		sj.TimeLimit = seconds(*j.TimeLimitS)
	}
	if j.EstimateS != nil {
		sj.Estimate = seconds(*j.EstimateS)
	}
	if j.GraceS != nil {
		sj.Grace = seconds(*j.GraceS)
	}
	for _, a := range j.Attempts {
		if !a.State.Terminal() {
			continue
		}
		// LAS reads the GPU-time of the ended runs; the preemption bounds
		// the ended runs a preemption stopped (the agent reports the
		// stop's code as the attempt's).
		sj.Attained += seconds(a.GPUSeconds)
		if gpufleet.StopCode(a.ReasonCode).IsPreemption() {
			sj.Preemptions++
			switch {
			case a.FinishedAt != nil:
				sj.RecentPreemptions = append(sj.RecentPreemptions, *a.FinishedAt)
			case a.StopRequestedAt != nil:
				sj.RecentPreemptions = append(sj.RecentPreemptions, *a.StopRequestedAt)
			}
		}
	}
	if a := activeAttempt(j); a != nil {
		if a.StartedAt != nil {
			sj.Started = *a.StartedAt
		} else {
			sj.Started = j.SubmittedAt
		}
		frac := fracOr1(a.Fraction)
		for _, n := range a.Nodes {
			sj.Placement = append(sj.Placement, scheduler.Placement{Node: n.Name, GPUs: slices.Clone(n.GPUs), Fraction: frac})
		}
		if a.StopRequested {
			// Stopping: it holds its GPUs until the stop's grace ends.
			sj.StopAt, sj.StopCode = sj.Started, gpufleet.StopCode(a.ReasonCode)
			if a.StopRequestedAt != nil && a.StopGraceS != nil {
				sj.StopAt = a.StopRequestedAt.Add(seconds(*a.StopGraceS))
			}
		}
	} else if j.State != gpufleet.JobQueued || j.CancelRequested {
		return scheduler.Job{}, false
	} else if n := len(j.Attempts); n > 0 && j.Attempts[n-1].FinishedAt != nil {
		sj.Queued = *j.Attempts[n-1].FinishedAt // back in the queue since its last attempt ended
	}
	return sj, true
}

// decayUsage advances each team's decayed GPU-seconds to now from the
// GPUs its running jobs hold.
func (s *Server) decayUsage(jobs []gpufleet.Job, now time.Time, halfLife time.Duration) map[string]float64 {
	s.lead.mu.Lock()
	defer s.lead.mu.Unlock()
	if s.lead.usage == nil {
		s.lead.usage = map[string]float64{}
	}
	dt := 0.0
	if !s.lead.usageAt.IsZero() {
		dt = now.Sub(s.lead.usageAt).Seconds()
	}
	s.lead.usageAt = now
	if halfLife <= 0 {
		halfLife = 7 * 24 * time.Hour
	}
	decay := math.Pow(0.5, dt/halfLife.Seconds())
	held := map[string]float64{}
	for _, j := range jobs {
		if a := activeAttempt(j); a != nil {
			gpus := 0
			for _, n := range a.Nodes {
				gpus += len(n.GPUs)
			}
			held[j.Team] += float64(gpus) * fracOr1(a.Fraction)
		}
	}
	out := map[string]float64{}
	for t, u := range s.lead.usage {
		s.lead.usage[t] = u * decay
	}
	for t, g := range held {
		s.lead.usage[t] += g * dt
	}
	for t, u := range s.lead.usage {
		out[t] = u
	}
	return out
}

// seconds turns a stored duration in seconds into a time.Duration; the
// validation bounds it far below the overflow.
func seconds(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }

// fracOr1 is a stored time-slice fraction, 1 for whole GPUs.
func fracOr1(f float64) float64 {
	if f <= 0 {
		return 1
	}
	return f
}

package server

import (
	"context"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// ReasonInvalidRequest is the reason code of a job the leader fails
// because the scheduler cannot take it (scheduler.FailInvalid): a stored
// request beyond the limits (a row written around the API), or one that
// made the scheduler panic.
const ReasonInvalidRequest = scheduler.FailInvalid

// maxCulprits bounds the jobs one cycle fails for panics before it gives
// up and tries again next cycle.
const maxCulprits = 4

// screen validates the active jobs read from the store, as SubmitJob
// validated them on the way in: the store is an edge too. A job that fails
// reaches the scheduler with Job.Defect set to why (toSchedJob makes it
// scheduler.Job.Invalid), and the scheduler decides its end like any
// other: a queued one fails, a running one is stopped with its grace and
// then ends, both with code invalid_request. A running one is passed as
// what it holds (holdingOnly), so that nothing in its row but its
// placement reaches the scheduler. Jobs valid earlier in this leadership
// are not checked again (a job's request never changes).
func (s *Server) screen(jobs []gpufleet.Job) []gpufleet.Job {
	s.lead.mu.Lock()
	seen := s.lead.valid
	s.lead.mu.Unlock()
	valid := make(map[string]bool, len(jobs))
	out := make([]gpufleet.Job, 0, len(jobs))
	for _, j := range jobs {
		if seen[j.ID] {
			valid[j.ID] = true
			out = append(out, j)
			continue
		}
		err := j.Validate()
		if err == nil {
			valid[j.ID] = true
			out = append(out, j)
			continue
		}
		s.log.Error("a stored job fails validation: the scheduler ends it", "job", j.ID, "team", j.Team, "err", err)
		why := "the stored request does not pass validation: " + strings.TrimPrefix(err.Error(), gpufleet.ErrInvalid.Error()+": ")
		if a := activeAttempt(j); a != nil {
			j = holdingOnly(j, a)
		}
		j.Defect = why
		out = append(out, j)
	}
	s.lead.mu.Lock()
	s.lead.valid = valid
	s.lead.mu.Unlock()
	return out
}

// culprit tiers: a job the scheduler panicked on is first handed back to
// it as invalid, for the scheduler to end; if it panics on the job even
// then, the job is left out and the server ends it itself.
const (
	culpritInvalid = iota + 1
	culpritLeftOut
)

// suspect is a job the scheduler panicked on this leadership.
type suspect struct {
	why  string
	tier int
}

// scheduleSafely runs the scheduler and survives a panic: it finds the
// job that causes it and hands it back to the scheduler as invalid
// (scheduler.Job.Invalid, reduced to what it holds), so that the scheduler
// decides its end like any invalid request's: a queued one fails, a
// running one stops with the default grace, both with code
// invalid_request. If the scheduler panics on the job even then, the job
// is left out of the input and returned in leftOut with the panic in
// words, for the caller to end itself: the one decision the scheduler
// cannot make. Suspects are remembered for the leadership, so later cycles
// do not panic on them again.
func (s *Server) scheduleSafely(ctx context.Context, in scheduler.Input) (out scheduler.Output, leftOut map[string]string, err error) {
	s.lead.mu.Lock()
	known := maps.Clone(s.lead.culprits)
	s.lead.mu.Unlock()
	if known == nil {
		known = map[string]suspect{}
	}
	all := in.Jobs
	in.Jobs = markCulprits(all, known)
	in.Arrivals = slices.DeleteFunc(slices.Clone(in.Arrivals), func(j scheduler.Job) bool {
		_, bad := known[j.ID]
		return bad
	})
	out, perr := runSchedule(s.decide, in)
	if perr != nil && len(in.Arrivals) > 0 {
		// The ETA's expected arrivals are copies of jobs seen earlier,
		// information the decisions can do without: try without them
		// first, and forget them if they were the cause.
		s.log.Error("the scheduler panicked; trying again without the expected arrivals", "panic", perr.value, "stack", perr.stack)
		in.Arrivals = nil
		if out, perr = runSchedule(s.decide, in); perr == nil {
			s.lead.mu.Lock()
			s.lead.eta.arrivals = nil
			s.lead.mu.Unlock()
		}
	}
	last := ""
	for found := 0; perr != nil; found++ {
		s.log.Error("the scheduler panicked; looking for the job that causes it", "panic", perr.value, "stack", perr.stack)
		if found == maxCulprits {
			return scheduler.Output{}, nil, fmt.Errorf("the scheduler panicked %d times this cycle: %v", maxCulprits+1, perr.value)
		}
		if last != "" && known[last].tier == culpritInvalid {
			// Does it panic on the job just marked invalid, even so?
			sus := known[last]
			sus.tier = culpritLeftOut
			known[last] = sus
			in.Jobs = markCulprits(all, known)
			if out, perr = runSchedule(s.decide, in); perr == nil {
				break
			}
			sus.tier = culpritInvalid
			known[last] = sus
			in.Jobs = markCulprits(all, known)
		}
		id, err := culprit(ctx, s.decide, in)
		if err != nil {
			return scheduler.Output{}, nil, fmt.Errorf("the scheduler panicked (%v) and no single job explains it: %w", perr.value, err)
		}
		sus := known[id]
		sus.tier++
		if sus.why == "" {
			sus.why = fmt.Sprintf("the scheduler panicked on this job (%v); it is ended so the rest of the queue runs", perr.value)
		}
		if sus.tier > culpritLeftOut {
			return scheduler.Output{}, nil, fmt.Errorf("the scheduler panicked (%v) with job %s left out", perr.value, id)
		}
		known[id], last = sus, id
		in.Jobs = markCulprits(all, known)
		out, perr = runSchedule(s.decide, in)
	}
	s.lead.mu.Lock()
	s.lead.culprits = known
	s.lead.mu.Unlock()
	for id, sus := range known {
		if sus.tier == culpritLeftOut {
			if leftOut == nil {
				leftOut = map[string]string{}
			}
			leftOut[id] = sus.why
		}
	}
	return out, leftOut, nil
}

// markCulprits applies the suspects to the jobs: a job handed back as
// invalid is reduced to what the scheduler can always read (a running one
// to the GPUs it holds); a job left out is dropped.
func markCulprits(jobs []scheduler.Job, suspects map[string]suspect) []scheduler.Job {
	if len(suspects) == 0 {
		return jobs
	}
	out := make([]scheduler.Job, 0, len(jobs))
	for _, j := range jobs {
		switch sus, ok := suspects[j.ID]; {
		case !ok:
		case sus.tier == culpritLeftOut:
			continue
		default:
			j = scheduler.Job{ID: j.ID, Team: j.Team, Priority: j.Priority, Submitted: j.Submitted, Started: j.Started,
				Placement: j.Placement, StopAt: j.StopAt, StopCode: j.StopCode, Grace: j.Grace, Invalid: sus.why,
				Resources: gpufleet.Resources{GPUs: placed(j.Placement)}}
		}
		out = append(out, j)
	}
	return out
}

// panicked is a recovered panic with its stack.
type panicked struct {
	value any
	stack string
}

// runSchedule calls the scheduler, turning a panic into a value.
func runSchedule(decide func(scheduler.Input) scheduler.Output, in scheduler.Input) (out scheduler.Output, p *panicked) {
	defer func() {
		if v := recover(); v != nil {
			p = &panicked{value: v, stack: string(debug.Stack())}
		}
	}()
	return decide(in), nil
}

// culprit finds, by bisection on the jobs in id order, the first job whose
// addition makes the scheduler panic: with jobs[:k-1] it does not, with
// jobs[:k] it does. in must make it panic. It takes about log2(n) calls;
// ctx bounds them.
func culprit(ctx context.Context, decide func(scheduler.Input) scheduler.Output, in scheduler.Input) (string, error) {
	jobs := slices.Clone(in.Jobs)
	slices.SortFunc(jobs, func(a, b scheduler.Job) int { return strings.Compare(a.ID, b.ID) })
	panics := func(k int) bool {
		try := in
		try.Jobs = jobs[:k]
		try.Cache, try.FleetVersion = nil, 0
		_, p := runSchedule(decide, try)
		return p != nil
	}
	lo, hi := 0, len(jobs) // panics(lo) is false (no jobs), panics(hi) true
	if panics(0) {
		return "", fmt.Errorf("it panics with no jobs at all")
	}
	for hi-lo > 1 {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		mid := (lo + hi) / 2
		if panics(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return jobs[hi-1].ID, nil
}

// holdingOnly is a running job reduced to what it holds: a request the
// scheduler can always read, for the cycles until its attempt stops.
func holdingOnly(j gpufleet.Job, a *gpufleet.Attempt) gpufleet.Job {
	n := 0
	for _, an := range a.Nodes {
		n += len(an.GPUs)
	}
	h := j
	h.Resources, h.Preemptible, h.Priority = gpufleet.Resources{GPUs: max(n, 1)}, false, gpufleet.Production
	h.GraceS, h.TimeLimitS, h.EstimateS = nil, nil, nil // the default grace; no limit to apply
	if a.Fraction > 0 && a.Fraction < 1 {
		h.Resources.Sharing = gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: a.Fraction}
	}
	return h
}

func placed(ps []scheduler.Placement) int {
	n := 0
	for _, p := range ps {
		n += len(p.GPUs)
	}
	return max(n, 1)
}

package server

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/store"
)

// jobFromRequest builds the job to store from a request that passed
// JobRequest.Validate (and admission, which may fill its resources),
// with its class's defaults. It refuses a request whose own sharing cannot
// meet the isolation its class requires by default.
func (s *Server) jobFromRequest(team string, r api.SubmitRequest, now time.Time) (gpufleet.Job, error) {
	j := gpufleet.Job{
		Team: team, Name: r.Name, Labels: r.Labels, State: gpufleet.JobQueued, Priority: r.Priority,
		RequestID: r.RequestID, Resources: r.Resources, Command: r.Command, Env: r.Env, Workdir: r.Workdir, Launch: r.Launch,
		Preemptible: r.Preemptible, Retries: gpufleet.Retries{Max: r.Retries}, SimLoad: r.SimLoad, Work: r.Work, SubmittedAt: now,
	}
	if j.Priority == "" {
		j.Priority = gpufleet.Batch
	}
	if j.Container() {
		j.Resources.Runtime = gpufleet.RuntimeContainer // only nodes that run containers hold it
	}
	if j.Resources.Isolation == "" {
		j.Resources.Isolation = s.cfg.DefaultIsolation[j.Priority]
		if err := j.Resources.Validate(); err != nil {
			return gpufleet.Job{}, fmt.Errorf("%w (%s jobs need isolation %s unless they say otherwise: set resources.isolation soft or any to accept less)",
				err, j.Priority, j.Resources.Isolation)
		}
	}
	seconds := func(d gpufleet.Duration) *float64 {
		if d <= 0 {
			return nil
		}
		v := d.Seconds()
		return &v
	}
	// A job without an estimate is planned on the runs of similar jobs,
	// its time limit or its class's default: the scheduler's core decides
	// which, cycle by cycle (scheduler.Job.Estimate).
	j.TimeLimitS, j.EstimateS, j.GraceS = seconds(r.TimeLimit), seconds(r.Estimate), seconds(r.Grace)
	return j, nil
}

// SubmitJob validates, admits and stores a job. The same request id from
// the same team returns the job it created before.
func (s *Server) SubmitJob(ctx context.Context, p api.Principal, r api.SubmitRequest) (api.SubmitResponse, error) {
	if err := requireUser(p); err != nil {
		return api.SubmitResponse{}, err
	}
	team, err := teamOf(p, r.Team)
	if err != nil {
		return api.SubmitResponse{}, err
	}
	t, err := s.st.Team(ctx, team)
	if err != nil {
		return api.SubmitResponse{}, fmt.Errorf("team %s: %w", gpufleet.Quote(team), err)
	}
	if err := r.Validate(); err != nil {
		return api.SubmitResponse{}, err
	}
	for i, m := range r.Mounts {
		if why := gpufleet.AllowsMount(t.Mounts, m); why != "" {
			return api.SubmitResponse{}, fmt.Errorf("%w: mounts[%d]: %s", gpufleet.ErrInvalid, i, why)
		}
	}
	var warnings []string
	var plan any
	var planned map[string]float64
	if r.Model != nil {
		adm, err := s.admit(ctx, team, r)
		if err != nil {
			return api.SubmitResponse{}, err
		}
		r.Resources, warnings, plan, planned = adm.resources, adm.warnings, adm.plan, adm.joulesPerToken
		if err := r.Resources.Validate(); err != nil {
			return api.SubmitResponse{}, fmt.Errorf("admission: %w", err)
		}
	}
	if r.Resources.Prefer == gpufleet.Efficient && len(r.Resources.JoulesPerUnit) == 0 {
		if r.Resources.JoulesPerUnit, err = s.joulesPerUnit(ctx, team, r.Name, r.Work, planned); err != nil {
			return api.SubmitResponse{}, err
		}
	}
	j, err := s.jobFromRequest(team, r, s.now())
	if err != nil {
		return api.SubmitResponse{}, err
	}
	j.Plan = plan
	if err := s.satisfiable(ctx, &j, r.AllowUnsatisfiable); err != nil {
		return api.SubmitResponse{}, err
	}
	res, err := s.st.SubmitJobs(ctx, []gpufleet.Job{j}, actor(p))
	if err != nil {
		return api.SubmitResponse{}, err
	}
	if res[0].Err != nil {
		return api.SubmitResponse{}, res[0].Err
	}
	if res[0].Created {
		s.metrics.submitted.Inc()
		s.nudge()
	}
	return api.SubmitResponse{Job: res[0].Job, Warnings: warnings}, nil
}

// Jobs lists jobs visible to p: a member's team, or any team for admins.
func (s *Server) Jobs(ctx context.Context, p api.Principal, q api.JobQuery) (api.JobList, error) {
	if err := requireUser(p); err != nil {
		return api.JobList{}, err
	}
	if q.NextToken != "" && !store.ValidJobID(q.NextToken) {
		return api.JobList{}, fmt.Errorf("%w: next_token %s: not a token this server issued", gpufleet.ErrInvalid, gpufleet.Quote(q.NextToken))
	}
	for _, st := range q.States {
		if !validJobState(st) {
			return api.JobList{}, fmt.Errorf("%w: state %s: expected queued, scheduled, running, succeeded, failed or cancelled", gpufleet.ErrInvalid, gpufleet.Quote(string(st)))
		}
	}
	f := store.JobFilter{Team: q.Team, States: q.States, Selector: q.Selector, After: q.NextToken, Limit: q.Limit}
	if !p.IsAdmin() {
		if q.Team != "" && q.Team != p.Team {
			return api.JobList{Jobs: []gpufleet.Job{}}, nil
		}
		f.Team = p.Team
	}
	if len(f.States) == 0 && !q.All {
		f.States = []gpufleet.JobState{gpufleet.JobQueued, gpufleet.JobScheduled, gpufleet.JobRunning}
	}
	jobs, next, err := s.st.ListJobs(ctx, f)
	if err != nil {
		return api.JobList{}, err
	}
	if jobs == nil {
		jobs = []gpufleet.Job{}
	}
	return api.JobList{Jobs: jobs, NextToken: next}, nil
}

// Job returns one job; another team's job is not found.
func (s *Server) Job(ctx context.Context, p api.Principal, id string) (gpufleet.Job, error) {
	if err := requireUser(p); err != nil {
		return gpufleet.Job{}, err
	}
	j, err := s.st.Job(ctx, id)
	if err != nil {
		return gpufleet.Job{}, err
	}
	if !visible(p, j.Team) {
		return gpufleet.Job{}, fmt.Errorf("%w: job %s", gpufleet.ErrNotFound, gpufleet.Quote(id))
	}
	if len(j.Attempts) > 0 {
		nodes, err := s.st.Nodes(ctx)
		if err != nil {
			return gpufleet.Job{}, err
		}
		withMechanisms(&j, nodes)
	}
	return j, nil
}

// withMechanisms fills in what each attempt of j got on its first node:
// the node's virtualization with the job's sharing.
func withMechanisms(j *gpufleet.Job, nodes []gpufleet.Node) {
	virt := make(map[string]gpufleet.Virtualization, len(nodes))
	for _, n := range nodes {
		virt[n.Name] = gpufleet.NodeVirtualization(n.Labels)
	}
	for i := range j.Attempts {
		a := &j.Attempts[i]
		v, ok := virt[a.Node]
		if !ok {
			continue
		}
		m := gpufleet.MechanismOf(v, j.Resources.Sharing)
		a.Mechanism = &m
	}
}

// CancelJob requests a cancel: a queued job ends at once, a running one
// once its attempts have stopped.
func (s *Server) CancelJob(ctx context.Context, p api.Principal, id string) (gpufleet.Job, error) {
	if _, err := s.Job(ctx, p, id); err != nil {
		return gpufleet.Job{}, err
	}
	j, err := s.st.RequestCancel(ctx, id, actor(p), s.now())
	if err == nil {
		s.nudge()
	}
	return j, err
}

var _ api.JobCanceller = (*Server)(nil)

// CancelJobs cancels every active job visible to p that q picks: its label
// selector, which must not be empty (an empty one would pick every job),
// and optionally a team and active states (default queued, scheduled and
// running). A member cancels only its own team's jobs. It returns the jobs
// picked, as the cancel left them; cancelling again changes nothing.
func (s *Server) CancelJobs(ctx context.Context, p api.Principal, q api.JobQuery) (api.JobList, error) {
	if err := requireUser(p); err != nil {
		return api.JobList{}, err
	}
	if q.Selector.Empty() {
		return api.JobList{}, fmt.Errorf("%w: selector: required (an empty selector would cancel every job; cancel by id instead)", gpufleet.ErrInvalid)
	}
	for _, st := range q.States {
		if st.Terminal() || !validJobState(st) {
			return api.JobList{}, fmt.Errorf("%w: state %s: expected queued, scheduled or running", gpufleet.ErrInvalid, gpufleet.Quote(string(st)))
		}
	}
	if len(q.States) == 0 {
		q.States = []gpufleet.JobState{gpufleet.JobQueued, gpufleet.JobScheduled, gpufleet.JobRunning}
	}
	q.All, q.NextToken, q.Limit = false, "", api.MaxPageLimit
	var picked []gpufleet.Job
	for {
		page, err := s.Jobs(ctx, p, q)
		if err != nil {
			return api.JobList{}, err
		}
		picked = append(picked, page.Jobs...)
		if page.NextToken == "" {
			break
		}
		q.NextToken = page.NextToken
	}
	out := make([]gpufleet.Job, 0, len(picked))
	for _, j := range picked {
		c, err := s.st.RequestCancel(ctx, j.ID, actor(p), s.now())
		if err != nil {
			return api.JobList{}, fmt.Errorf("cancel job %s: %w", j.ID, err)
		}
		out = append(out, c)
	}
	if len(out) > 0 {
		s.nudge()
	}
	return api.JobList{Jobs: out}, nil
}

// validJobState reports whether st is a job state.
func validJobState(st gpufleet.JobState) bool {
	switch st {
	case gpufleet.JobQueued, gpufleet.JobScheduled, gpufleet.JobRunning, gpufleet.JobSucceeded, gpufleet.JobFailed, gpufleet.JobCancelled:
		return true
	}
	return false
}

// Queue lists every pending job visible to p with its position, reason and
// estimated start, as the leader last computed them.
func (s *Server) Queue(ctx context.Context, p api.Principal) ([]gpufleet.QueueEntry, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	jobs, err := s.st.ActiveJobs(ctx)
	if err != nil {
		return nil, err
	}
	stored, err := s.st.Queue(ctx)
	if err != nil {
		return nil, err
	}
	decided := make(map[string]gpufleet.QueueEntry, len(stored))
	for _, e := range stored {
		decided[e.ID] = e
	}
	out := []gpufleet.QueueEntry{}
	for _, j := range jobs {
		if j.State != gpufleet.JobQueued || !visible(p, j.Team) {
			continue
		}
		e, ok := decided[j.ID]
		if !ok {
			e = gpufleet.QueueEntry{ID: j.ID, Team: j.Team, Priority: j.Priority, Reason: "waiting for the scheduler", ReasonCode: "pending"}
		}
		e.Name, e.GPUs = j.Name, j.Resources.GPUs
		out = append(out, e)
	}
	slices.SortStableFunc(out, func(a, b gpufleet.QueueEntry) int {
		if a.Position == 0 || b.Position == 0 {
			return 0
		}
		return a.Position - b.Position
	})
	return out, nil
}

package server

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

var (
	envKey   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	nameRe   = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)
	reserved = []string{"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "GPUFLEET_JOB_ID", "GPUFLEET_ATTEMPT_ID"}
)

// parseSeconds reads a duration as "90s", "4h", "1h30m" or plain seconds.
func parseSeconds(field, s string) (*float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if v <= 0 {
			return nil, fmt.Errorf("%w: %s %q: expected a positive duration", gpufleet.ErrInvalid, field, s)
		}
		return &v, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("%w: %s %q: expected a duration such as 90s or 4h", gpufleet.ErrInvalid, field, s)
	}
	v := d.Seconds()
	return &v, nil
}

// validSharing checks "exclusive", "mig:PROFILE" or "timeslice:F".
func validSharing(s string) error {
	_, err := toSharing(s)
	return err
}

func toSharing(s string) (scheduler.Sharing, error) {
	kind, arg, _ := strings.Cut(s, ":")
	switch kind {
	case "", "exclusive":
		if arg != "" {
			return scheduler.Sharing{}, fmt.Errorf("%w: resources.sharing %q: exclusive takes no argument", gpufleet.ErrInvalid, s)
		}
		return scheduler.Sharing{Kind: scheduler.Exclusive}, nil
	case "mig":
		if arg == "" {
			return scheduler.Sharing{}, fmt.Errorf("%w: resources.sharing %q: expected mig:PROFILE such as mig:1g.10gb", gpufleet.ErrInvalid, s)
		}
		return scheduler.Sharing{Kind: scheduler.MIG, Profile: strings.ToLower(arg)}, nil
	case "timeslice":
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || f <= 0 || f > 1 {
			return scheduler.Sharing{}, fmt.Errorf("%w: resources.sharing %q: expected timeslice:F with 0 < F <= 1", gpufleet.ErrInvalid, s)
		}
		return scheduler.Sharing{Kind: scheduler.TimeSlice, Fraction: f}, nil
	}
	return scheduler.Sharing{}, fmt.Errorf("%w: resources.sharing %q: expected exclusive, mig:PROFILE or timeslice:F", gpufleet.ErrInvalid, s)
}

// jobFromRequest validates a submission and builds the job to store.
func (s *Server) jobFromRequest(team string, r api.SubmitRequest, now time.Time) (gpufleet.Job, error) {
	j := gpufleet.Job{
		Team: team, Name: r.Name, State: gpufleet.JobQueued, Priority: r.Priority,
		RequestID: r.RequestID, Resources: r.Resources, Command: r.Command, Env: r.Env, Workdir: r.Workdir,
		Preemptible: r.Preemptible, Retries: gpufleet.Retries{Max: r.Retries}, SimLoad: r.SimLoad, SubmittedAt: now,
	}
	if j.Priority == "" {
		j.Priority = string(scheduler.Batch)
	}
	if !slices.Contains(scheduler.DefaultPriorities, scheduler.Priority(j.Priority)) {
		return j, fmt.Errorf("%w: priority %q: expected production, interactive, training or batch", gpufleet.ErrInvalid, r.Priority)
	}
	if len(r.Command) == 0 || strings.TrimSpace(r.Command[0]) == "" {
		return j, fmt.Errorf("%w: command: required (the program and its arguments)", gpufleet.ErrInvalid)
	}
	if r.Name != "" && !nameRe.MatchString(r.Name) {
		return j, fmt.Errorf("%w: name %q: expected lower-case letters, digits, '.', '_' or '-', at most 63", gpufleet.ErrInvalid, r.Name)
	}
	if len(r.RequestID) > 128 {
		return j, fmt.Errorf("%w: request_id: at most 128 characters", gpufleet.ErrInvalid)
	}
	for k := range r.Env {
		if !envKey.MatchString(k) {
			return j, fmt.Errorf("%w: env %q: expected a variable name", gpufleet.ErrInvalid, k)
		}
		if slices.Contains(reserved, k) || strings.HasPrefix(k, "GPUFLEET_") {
			return j, fmt.Errorf("%w: env %q is set by gpufleet", gpufleet.ErrInvalid, k)
		}
	}
	if r.Workdir != "" && (!filepath.IsAbs(r.Workdir) || filepath.Clean(r.Workdir) != r.Workdir) {
		return j, fmt.Errorf("%w: workdir %q: expected a clean absolute path", gpufleet.ErrInvalid, r.Workdir)
	}
	if r.Retries < 0 || r.Retries > 100 {
		return j, fmt.Errorf("%w: retries %d: expected 0 to 100", gpufleet.ErrInvalid, r.Retries)
	}
	switch r.SimLoad {
	case "", "compute", "memory", "idle":
	default:
		return j, fmt.Errorf("%w: sim_load %q: expected compute, memory or idle", gpufleet.ErrInvalid, r.SimLoad)
	}
	var err error
	if j.TimeLimitS, err = parseSeconds("time_limit", r.TimeLimit); err != nil {
		return j, err
	}
	if j.EstimateS, err = parseSeconds("estimate", r.Estimate); err != nil {
		return j, err
	}
	if j.GraceS, err = parseSeconds("grace", r.Grace); err != nil {
		return j, err
	}
	if j.EstimateS == nil {
		if j.TimeLimitS != nil {
			j.EstimateS = j.TimeLimitS
		} else {
			v := s.cfg.DefaultEstimate[scheduler.Priority(j.Priority)].Seconds()
			j.EstimateS = &v
		}
	}
	return j, validResources(j.Resources)
}

// validResources checks the resource request (after admission filled it).
func validResources(res gpufleet.Resources) error {
	if res.GPUs < 1 {
		return fmt.Errorf("%w: resources.gpus %d: expected at least 1 (or describe the model so the planner sizes it)", gpufleet.ErrInvalid, res.GPUs)
	}
	if res.Nodes < 0 || (res.Nodes > 0 && res.GPUs%res.Nodes != 0) {
		return fmt.Errorf("%w: resources.nodes %d: expected a divisor of gpus %d", gpufleet.ErrInvalid, res.Nodes, res.GPUs)
	}
	if res.GPUMemoryMinBytes < 0 {
		return fmt.Errorf("%w: resources.gpu_memory_min_bytes: expected a positive size", gpufleet.ErrInvalid)
	}
	if res.CPUs < 0 || res.CPUs > 4096 || math.IsNaN(res.CPUs) {
		return fmt.Errorf("%w: resources.cpus %g: expected a CPU count between 0 (no limit) and 4096", gpufleet.ErrInvalid, res.CPUs)
	}
	if res.MemoryBytes < 0 || (res.MemoryBytes > 0 && res.MemoryBytes < 1<<20) {
		return fmt.Errorf("%w: resources.memory_bytes %d: expected 0 (no limit) or at least 1 MiB", gpufleet.ErrInvalid, res.MemoryBytes)
	}
	if err := validSharing(res.Sharing); err != nil {
		return err
	}
	switch res.Interconnect {
	case "", "any", "nvlink":
	default:
		return fmt.Errorf("%w: resources.interconnect %q: expected nvlink or any", gpufleet.ErrInvalid, res.Interconnect)
	}
	switch res.Prefer {
	case "", "cheapest", "fastest":
	default:
		return fmt.Errorf("%w: resources.prefer %q: expected cheapest or fastest", gpufleet.ErrInvalid, res.Prefer)
	}
	if cc := res.MinComputeCapability; cc != "" {
		if _, _, ok := parseCC(cc); !ok {
			return fmt.Errorf("%w: resources.min_compute_capability %q: expected X.Y such as 8.0", gpufleet.ErrInvalid, cc)
		}
	}
	return nil
}

func parseCC(s string) (int, int, bool) {
	a, b, ok := strings.Cut(s, ".")
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	return x, y, ok && err1 == nil && err2 == nil && x >= 0 && y >= 0
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
	if _, err := s.st.Team(ctx, team); err != nil {
		return api.SubmitResponse{}, fmt.Errorf("team %q: %w", team, err)
	}
	var warnings []string
	var plan any
	if r.Model != nil {
		adm, err := s.admit(ctx, team, r)
		if err != nil {
			return api.SubmitResponse{}, err
		}
		r.Resources, warnings, plan = adm.resources, adm.warnings, adm.plan
	}
	j, err := s.jobFromRequest(team, r, s.now())
	if err != nil {
		return api.SubmitResponse{}, err
	}
	j.Plan = plan
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
	f := store.JobFilter{Team: q.Team, States: q.States, After: q.NextToken, Limit: q.Limit}
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
		return gpufleet.Job{}, fmt.Errorf("%w: job %q", gpufleet.ErrNotFound, id)
	}
	return j, nil
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
	out := []gpufleet.QueueEntry{}
	for _, j := range jobs {
		if j.State != gpufleet.JobQueued || !visible(p, j.Team) {
			continue
		}
		e := gpufleet.QueueEntry{ID: j.ID, Team: j.Team, Priority: j.Priority, Reason: "waiting for the scheduler", ReasonCode: "pending"}
		if j.Queue != nil {
			e = *j.Queue
		}
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

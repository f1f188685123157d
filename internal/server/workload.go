package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
)

// BenchGPUModelEnv names the GPU model a workload bench's job runs on, in
// its environment.
const BenchGPUModelEnv = "BENCH_GPU_MODEL"

// maxWorkloadModels bounds the GPU models of one workload bench.
const maxWorkloadModels = 16

// StartWorkloadBench submits the job of r once per GPU model, each
// pinned to its model, through the normal submission path (admission,
// quotas, the scheduler), and records the workload bench. A submission
// that fails cancels those already made: nothing is half-started.
func (s *Server) StartWorkloadBench(ctx context.Context, p api.Principal, r api.WorkloadBenchRequest) (bench.WorkloadReport, error) {
	if err := requireUser(p); err != nil {
		return bench.WorkloadReport{}, err
	}
	team, err := teamOf(p, r.Job.Team)
	if err != nil {
		return bench.WorkloadReport{}, err
	}
	if len(r.GPUModels) == 0 || len(r.GPUModels) > maxWorkloadModels {
		return bench.WorkloadReport{}, fmt.Errorf("%w: gpu_models: %d entries, expected 1 to %d", gpufleet.ErrInvalid, len(r.GPUModels), maxWorkloadModels)
	}
	var models []string
	for i, m := range r.GPUModels {
		if err := gpufleet.CheckText(fmt.Sprintf("gpu_models[%d]", i), m, gpufleet.MaxWordLen, false); err != nil {
			return bench.WorkloadReport{}, err
		}
		g, err := s.cat.Lookup(m)
		if err != nil {
			return bench.WorkloadReport{}, fmt.Errorf("gpu_models[%d]: %w", i, err)
		}
		if slices.Contains(models, g.ID) {
			return bench.WorkloadReport{}, fmt.Errorf("%w: gpu_models[%d]: %s named twice", gpufleet.ErrInvalid, i, g.ID)
		}
		models = append(models, g.ID)
	}
	if r.Job.Work == nil {
		return bench.WorkloadReport{}, fmt.Errorf("%w: job.work: required: the expression whose first group is the throughput the command prints, per second (--metric)", gpufleet.ErrInvalid)
	}
	if len(r.Job.Resources.GPUModels) > 0 {
		return bench.WorkloadReport{}, fmt.Errorf("%w: job.resources.gpu_models: leave it empty; gpu_models names the models to compare", gpufleet.ErrInvalid)
	}
	if err := r.Job.Work.Validate(); err != nil {
		return bench.WorkloadReport{}, err
	}
	now := s.now()
	w := bench.Workload{ID: "wb-" + randomString(10), Team: team, CreatedBy: actor(p), CreatedAt: now, GPUModels: models,
		GPUs: r.Job.Resources.GPUs, Metric: r.Job.Work.Metric, Unit: r.Job.Work.UnitName(), Command: r.Job.Command, Model: r.Job.Model}
	for _, m := range models {
		job := r.Job
		job.Team = team
		job.Resources.GPUModels = []string{m}
		// The command may label what it prints with the model it got.
		job.Env = maps.Clone(r.Job.Env)
		if job.Env == nil {
			job.Env = map[string]string{}
		}
		job.Env[BenchGPUModelEnv] = m
		if job.Name == "" {
			job.Name = "bench-" + m
		}
		if job.RequestID != "" {
			job.RequestID = w.ID + "-" + m
		}
		resp, err := s.SubmitJob(ctx, p, job)
		if err != nil {
			for _, j := range w.Jobs {
				if _, cerr := s.CancelJob(ctx, p, j.JobID); cerr != nil {
					s.log.Warn("cancelling a workload bench's job after a failed submission", "job", j.JobID, "err", cerr)
				}
			}
			return bench.WorkloadReport{}, fmt.Errorf("gpu model %s: %w", m, err)
		}
		w.Jobs = append(w.Jobs, bench.WorkloadJob{GPUModel: m, JobID: resp.ID})
	}
	if err := s.st.PutWorkloadBench(ctx, w); err != nil {
		return bench.WorkloadReport{}, err
	}
	if err := s.st.AppendEvent(ctx, gpufleet.Event{At: now, Actor: actor(p), Kind: "bench.workload", Object: w.ID, Team: team,
		Detail: fmt.Sprintf("%d GPU models, %d GPUs each: %v", len(models), w.GPUs, models)}); err != nil {
		return bench.WorkloadReport{}, err
	}
	return s.workloadReport(ctx, p, w)
}

// WorkloadBench reads a workload bench's report; another team's is not
// found.
func (s *Server) WorkloadBench(ctx context.Context, p api.Principal, id string) (bench.WorkloadReport, error) {
	if err := requireUser(p); err != nil {
		return bench.WorkloadReport{}, err
	}
	w, err := s.st.WorkloadBench(ctx, id)
	if err != nil {
		return bench.WorkloadReport{}, err
	}
	if !visible(p, w.Team) {
		return bench.WorkloadReport{}, fmt.Errorf("%w: workload bench %s", gpufleet.ErrNotFound, gpufleet.Quote(id))
	}
	return s.workloadReport(ctx, p, w)
}

// WorkloadBenches lists the workload benches p may see, newest first.
func (s *Server) WorkloadBenches(ctx context.Context, p api.Principal) ([]bench.WorkloadReport, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	team := ""
	if !p.IsAdmin() {
		team = p.Team
	}
	ws, err := s.st.WorkloadBenches(ctx, team)
	if err != nil {
		return nil, err
	}
	out := make([]bench.WorkloadReport, 0, len(ws))
	for _, w := range ws {
		r, err := s.workloadReport(ctx, p, w)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// workloadReport gathers each job's run (its newest attempt that
// started: the throughput it printed, its energy, its GPUs' telemetry
// while held), the catalog price and the planner's prediction, and lets
// the core build the report.
func (s *Server) workloadReport(ctx context.Context, p api.Principal, w bench.Workload) (bench.WorkloadReport, error) {
	now := s.now()
	var runs []bench.WorkloadRun
	for _, wj := range w.Jobs {
		run := bench.WorkloadRun{GPUModel: wj.GPUModel, JobID: wj.JobID, GPUs: w.GPUs}
		if g, err := s.cat.Lookup(wj.GPUModel); err == nil {
			run.PricePerHourUSD = g.PricePerHourUSD
		}
		j, err := s.Job(ctx, p, wj.JobID)
		switch {
		case errors.Is(err, gpufleet.ErrNotFound):
			run.State, run.Done = "gone", true
			runs = append(runs, run)
			continue
		case err != nil:
			return bench.WorkloadReport{}, err
		}
		run.State, run.Done = string(j.State), j.State.Terminal()
		if a := lastStarted(j); a != nil {
			end := now
			if a.FinishedAt != nil {
				end = *a.FinishedAt
			}
			// The seconds the agent accounted the GPUs for, the time base of
			// its energy; the wall clock until it reports any.
			run.Seconds = end.Sub(*a.StartedAt).Seconds()
			if a.GPUSeconds > 0 && w.GPUs > 0 {
				run.Seconds = a.GPUSeconds / float64(w.GPUs)
			}
			run.EnergyJoules = a.EnergyJoules
			run.Throughput = a.Work
			if err := s.runTelemetry(ctx, p, j.ID, *a.StartedAt, end, a, &run); err != nil {
				return bench.WorkloadReport{}, err
			}
		}
		if w.Model != nil {
			run.Predicted = s.predictedThroughput(ctx, p, *w.Model, wj.GPUModel, w.GPUs, w.Team)
		}
		runs = append(runs, run)
	}
	return bench.Report(w, runs), nil
}

// lastStarted is the newest attempt of j that started.
func lastStarted(j gpufleet.Job) *gpufleet.Attempt {
	for i := len(j.Attempts) - 1; i >= 0; i-- {
		if j.Attempts[i].StartedAt != nil {
			return &j.Attempts[i]
		}
	}
	return nil
}

// runTelemetry reads the mean SM, tensor and DRAM activity and board
// power of the GPUs an attempt held while it held them. The attempt's own
// accounting is exact: SM activity is its effective GPU-seconds over its
// GPU-seconds, power its energy over its GPU-seconds. Tensor and DRAM
// activity come from the one-minute rollups of its GPUs, which also hold
// the idle seconds of the minutes it started and ended in; a GPU that
// nothing else held is idle then (every activity zero), so the rollups'
// means are the held means times one share, and scaling them by the exact
// SM activity over the rollups' removes it.
func (s *Server) runTelemetry(ctx context.Context, p api.Principal, job string, from, to time.Time, a *gpufleet.Attempt, run *bench.WorkloadRun) error {
	rows, err := s.Rollups(ctx, p, api.RollupQuery{JobID: job, From: from.Truncate(time.Minute), To: to.Add(time.Minute).Truncate(time.Minute)})
	if err != nil {
		return err
	}
	type acc struct{ sum, n float64 }
	var sm, tensor, dram, power acc
	add := func(a *acc, v *float64, n int) {
		if v != nil && n > 0 {
			a.sum += *v * float64(n)
			a.n += float64(n)
		}
	}
	for _, r := range rows {
		add(&sm, r.SMActivity, r.Samples)
		add(&tensor, r.TensorActivity, r.Samples)
		add(&dram, r.DRAMActivity, r.Samples)
		add(&power, r.PowerWatts, r.Samples)
	}
	mean := func(a acc) *float64 {
		if a.n == 0 {
			return nil
		}
		v := a.sum / a.n
		return &v
	}
	run.SMActivity, run.TensorActivity, run.DRAMActivity, run.PowerWatts = mean(sm), mean(tensor), mean(dram), mean(power)
	if a.GPUSeconds > 0 {
		w := a.EnergyJoules / a.GPUSeconds
		run.PowerWatts = &w
		if held := a.EffectiveGPUSeconds / a.GPUSeconds; run.SMActivity != nil && *run.SMActivity > 0 {
			scale := held / *run.SMActivity
			for _, v := range []*float64{run.TensorActivity, run.DRAMActivity} {
				if v != nil {
					*v = min(1, *v*scale)
				}
			}
			run.SMActivity = &held
		}
	}
	return nil
}

// predictedThroughput is the planner's throughput for the model on gpus
// GPUs of one model: output tokens per second (inference) or training
// tokens per second; nil when it cannot say (the model does not fit, an
// unknown model).
func (s *Server) predictedThroughput(ctx context.Context, p api.Principal, m gpufleet.ModelRequest, gpuModel string, gpus int, team string) *float64 {
	resp, err := s.Plan(ctx, p, api.PlanQuery{Model: m, GPUModels: []string{gpuModel}, GPUs: gpus, Team: team})
	if err != nil || resp.Plan == nil {
		return nil
	}
	for _, c := range resp.Plan.Candidates {
		if c.GPU != gpuModel || !c.Fits {
			continue
		}
		if c.OutputTokensPerS != nil {
			return c.OutputTokensPerS
		}
		return c.TrainingTokensPerS
	}
	return nil
}

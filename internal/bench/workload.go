package bench

import (
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Workload is a workload bench: the same command run as a job on each of
// several GPU models through the scheduler, its throughput read from what
// it prints (the job's work counter), joined with the attempt's
// telemetry and priced (docs/BENCH.md#workload).
type Workload struct {
	ID        string    `json:"id"`
	Team      string    `json:"team"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	GPUModels []string  `json:"gpu_models"`
	GPUs      int       `json:"gpus"`
	// Metric is the expression whose first group is the throughput the
	// command prints, in Unit per second.
	Metric  string   `json:"metric"`
	Unit    string   `json:"unit"`
	Command []string `json:"command"`
	// Model is the model block of the job, for the planner's prediction
	// of the same work; nil when the job names no model.
	Model *gpufleet.ModelRequest `json:"model,omitempty"`
	Jobs  []WorkloadJob          `json:"jobs"`
}

// WorkloadJob is the job a workload bench submitted for one GPU model.
type WorkloadJob struct {
	GPUModel string `json:"gpu_model"`
	JobID    string `json:"job_id"`
}

// WorkloadRun is what the fleet knows of one GPU model's run, the input
// of a report row. Nil fields are unknown.
type WorkloadRun struct {
	GPUModel string
	JobID    string
	// State is the job's state; Done when it ended.
	State string
	Done  bool
	// Throughput is the figure the command printed, per second.
	Throughput *float64
	GPUs       int
	// Seconds is how long the attempt held its GPUs, the time base of
	// EnergyJoules, its GPUs' energy.
	Seconds      float64
	EnergyJoules float64
	// Mean activity over the GPUs while held (0-1) and mean board power
	// per GPU; SM activity, tensor and DRAM activity come from GPM
	// (Hopper and newer).
	SMActivity, TensorActivity, DRAMActivity, PowerWatts *float64
	// PricePerHourUSD is the catalog's price of one GPU.
	PricePerHourUSD *float64
	// Predicted is the planner's throughput for the model the job names
	// on the same GPUs, in the same unit (tokens per second).
	Predicted *float64
}

// WorkloadRow is one GPU model's line of the report.
type WorkloadRow struct {
	GPUModel string `json:"gpu_model"`
	JobID    string `json:"job_id"`
	State    string `json:"state"`
	GPUs     int    `json:"gpus"`
	// Throughput is in Unit per second, as the command printed it.
	Throughput *float64 `json:"throughput"`
	// USDPerMillion is dollars per million units at the catalog price.
	USDPerMillion *float64 `json:"usd_per_million"`
	// JoulesPerUnit is the GPUs' energy per unit: mean power over the run
	// divided by throughput.
	JoulesPerUnit  *float64 `json:"joules_per_unit"`
	SMActivity     *float64 `json:"sm_activity"`
	TensorActivity *float64 `json:"tensor_activity"`
	DRAMActivity   *float64 `json:"dram_activity"`
	PowerWatts     *float64 `json:"power_watts"`
	// Bound is what limits the run, from the activity counters: compute,
	// memory, neither (the GPU waits: host, input, launches) or unknown.
	Bound string `json:"bound"`
	// Predicted is the planner's throughput for the named model; Ratio is
	// measured over predicted.
	Predicted *float64 `json:"predicted"`
	Ratio     *float64 `json:"ratio"`
	Note      string   `json:"note,omitempty"`
}

// WorkloadReport is a workload bench with one row per GPU model.
type WorkloadReport struct {
	Workload
	Done bool          `json:"done"`
	Rows []WorkloadRow `json:"rows"`
}

// Bound thresholds: GPM activity above which a unit is the limit. DRAM
// active more than half the time, and more than the tensor pipes, is
// memory-bound; tensor pipes busy more than half the time, compute-bound;
// otherwise SMs active under half the time means the GPU waits on
// something else (host, input, launches), and over half, non-tensor
// compute.
const (
	boundActive   = 0.5
	boundSMIdle   = 0.5
	minThroughput = 1e-12
)

// Report builds the report of w from its runs, in w's GPU model order.
func Report(w Workload, runs []WorkloadRun) WorkloadReport {
	rep := WorkloadReport{Workload: w, Done: len(runs) > 0}
	for _, r := range runs {
		row := WorkloadRow{GPUModel: r.GPUModel, JobID: r.JobID, State: r.State, GPUs: r.GPUs,
			Throughput: r.Throughput, SMActivity: r.SMActivity, TensorActivity: r.TensorActivity,
			DRAMActivity: r.DRAMActivity, PowerWatts: r.PowerWatts, Predicted: r.Predicted}
		rep.Done = rep.Done && r.Done
		row.Bound, row.Note = bound(r)
		if t := r.Throughput; t != nil && *t > minThroughput {
			if r.PricePerHourUSD != nil {
				row.USDPerMillion = ptr(*r.PricePerHourUSD * float64(r.GPUs) / 3600 / *t * 1e6)
			}
			if r.Seconds > 0 && r.EnergyJoules > 0 {
				row.JoulesPerUnit = ptr(r.EnergyJoules / r.Seconds / *t)
			}
			if r.Predicted != nil && *r.Predicted > 0 {
				row.Ratio = ptr(*t / *r.Predicted)
			}
		} else if r.Done {
			row.Note = joinNote(row.Note, fmt.Sprintf("the job printed no line matching %s", w.Metric))
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep
}

// bound classifies a run by its activity counters.
func bound(r WorkloadRun) (string, string) {
	if r.SMActivity == nil || r.TensorActivity == nil || r.DRAMActivity == nil {
		return "unknown", "no SM, tensor and DRAM activity counters on this GPU model (GPM needs Hopper or newer)"
	}
	sm, tensor, dram := *r.SMActivity, *r.TensorActivity, *r.DRAMActivity
	switch {
	case dram >= boundActive && dram > tensor:
		return "memory", fmt.Sprintf("DRAM active %.0f%%, tensor pipes %.0f%%", 100*dram, 100*tensor)
	case tensor >= boundActive:
		return "compute", fmt.Sprintf("tensor pipes active %.0f%%, DRAM %.0f%%", 100*tensor, 100*dram)
	case sm < boundSMIdle:
		return "neither", fmt.Sprintf("SMs active %.0f%% of the time, DRAM %.0f%%, tensor pipes %.0f%%: the GPU waits on the host, input or launches", 100*sm, 100*dram, 100*tensor)
	}
	return "compute", fmt.Sprintf("SMs active %.0f%% with tensor pipes at %.0f%% and DRAM at %.0f%%: non-tensor compute", 100*sm, 100*tensor, 100*dram)
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

package gpufleet

import (
	"fmt"
	"time"
)

// EstimateSource says where the run time the scheduler plans a job on
// came from (docs/SCHEDULER.md#estimates-from-history): the job's own
// estimate or time limit, the runs of similar jobs, or the default.
type EstimateSource string

// The estimate sources, most specific history first.
const (
	EstimateGiven     EstimateSource = "given"      // request.estimate
	EstimateWorkload  EstimateSource = "workload"   // runs of the team's jobs of the same name (or command) and size class
	EstimateTeamSize  EstimateSource = "team_size"  // runs of the team's jobs of the size class
	EstimateSize      EstimateSource = "size"       // runs of the fleet's jobs of the size class
	EstimateTimeLimit EstimateSource = "time_limit" // request.time_limit, with no history to go on
	EstimateDefault   EstimateSource = "default"    // the priority class's default, with no history
)

// RunEstimate is the run time the scheduler plans a job on: what backfill
// reservations, preemption bounds and the ETA read.
type RunEstimate struct {
	// Seconds is the planned length of the job's next (or current) run.
	Seconds float64        `json:"seconds"`
	From    EstimateSource `json:"from"`
	// Runs is how many finished runs a history estimate was taken from.
	Runs int `json:"runs,omitempty"`
}

// Duration is the estimate as a time.Duration.
func (e RunEstimate) Duration() time.Duration {
	return time.Duration(e.Seconds * float64(time.Second))
}

// String is the estimate in words, as the CLI and the dashboard show it:
// "3h from 4 runs of its workload", "4h, the default".
func (e RunEstimate) String() string {
	d := FormatDuration(e.Duration())
	runs := "runs"
	if e.Runs == 1 {
		runs = "run"
	}
	switch e.From {
	case EstimateGiven:
		return d + ", its estimate"
	case EstimateWorkload:
		return fmt.Sprintf("%s from %d %s of its workload", d, e.Runs, runs)
	case EstimateTeamSize:
		return fmt.Sprintf("%s from %d %s of its team's jobs of its size", d, e.Runs, runs)
	case EstimateSize:
		return fmt.Sprintf("%s from %d %s of jobs of its size", d, e.Runs, runs)
	case EstimateTimeLimit:
		return d + ", its time limit"
	}
	return d + ", the default"
}

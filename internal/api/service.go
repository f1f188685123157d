package api

import (
	"context"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/rollout"
	"github.com/gpufleet/gpufleet/planner"
)

// Principal is who makes a request: an admin token (fleet-wide), a member
// token (one team), or an agent's node credential (one node).
type Principal struct {
	TokenID string
	Role    gpufleet.Role // admin or member; empty for agents
	Team    string        // for members
	Node    string        // for agents
}

// IsAdmin reports whether the principal is fleet-wide.
func (p Principal) IsAdmin() bool { return p.Role == gpufleet.RoleAdmin }

// IsMonitor reports whether the principal may only read metrics and
// service discovery.
func (p Principal) IsMonitor() bool { return p.Role == gpufleet.RoleMonitor }

// SubmitRequest is the body of POST /api/v1/jobs: a gpufleet.JobRequest.
// Unknown fields are rejected.
type SubmitRequest = gpufleet.JobRequest

// ModelRequest is the model block of a submission.
type ModelRequest = gpufleet.ModelRequest

// SubmitResponse is the job plus any admission warnings.
type SubmitResponse struct {
	gpufleet.Job
	Warnings []string `json:"warnings,omitempty"`
}

// JobList is a page of jobs.
type JobList struct {
	Jobs      []gpufleet.Job `json:"jobs"`
	NextToken string         `json:"next_token"`
}

// JobQuery filters GET /api/v1/jobs.
type JobQuery struct {
	Team   string
	States []gpufleet.JobState
	// Selector keeps the jobs whose labels it matches (?selector=).
	Selector  gpufleet.LabelSelector
	All       bool // include finished jobs
	NextToken string
	Limit     int
}

// JobCanceller cancels the jobs a label selector picks: POST
// /api/v1/jobs/cancel?selector=. q.Selector must not be empty; q.Team and
// q.States narrow it to a team and active states. A member cancels only
// its own team's jobs. A server without it answers 422.
type JobCanceller interface {
	CancelJobs(ctx context.Context, p Principal, q JobQuery) (JobList, error)
}

// TeamRequest creates or updates a team.
type TeamRequest struct {
	Name           string         `json:"name"`
	Quota          map[string]int `json:"quota,omitempty"`
	BorrowingLimit *int           `json:"borrowing_limit,omitempty"`
	Weight         *float64       `json:"weight,omitempty"`
	// Mounts, when given, replaces the host paths the team's container
	// jobs may mount (an empty list: none).
	Mounts *[]gpufleet.MountAllow `json:"mounts,omitempty"`
	// RegistryAuth sets the team's credentials per registry; a null
	// value removes the registry's. Responses never carry them.
	RegistryAuth map[string]*gpufleet.RegistryCredential `json:"registry_auth,omitempty"`
}

// TokenRequest creates a token.
type TokenRequest struct {
	Team string        `json:"team,omitempty"`
	Role gpufleet.Role `json:"role"`
}

// JoinTokenRequest creates an agent join token.
type JoinTokenRequest struct {
	Node string            `json:"node,omitempty"`
	TTL  gpufleet.Duration `json:"ttl,omitzero"` // "1h"; none: single use without expiry
}

// JoinTokenResponse carries the secret once.
type JoinTokenResponse struct {
	ID        string     `json:"id"`
	Token     string     `json:"token"`
	Node      string     `json:"node,omitempty"`
	ExpiresAt *time.Time `json:"expires_at"`
	SingleUse bool       `json:"single_use"`
}

// UsageQuery selects accounting.
type UsageQuery struct {
	Team     string
	From, To time.Time
	// By groups the energy rows: EnergyByTeam (the default), EnergyByJob
	// or EnergyByModel; Period buckets them (power.ParsePeriod: day,
	// week, month, all).
	By     string
	Period string
}

// What energy rows group by.
const (
	EnergyByTeam  = "team"
	EnergyByJob   = "job"
	EnergyByModel = "gpu-model"
)

// UsageReport is GPU-hours, effective GPU-hours and energy by team, and
// energy rows with facility energy and CO2e grouped as the query asks.
type UsageReport struct {
	From  time.Time   `json:"from"`
	To    time.Time   `json:"to"`
	Teams []TeamUsage `json:"teams"`
	// PUE (where a rack gives none of its own) and GridIntensity are what
	// the facility energy and CO2e use
	// (GridIntensity is the constant; GridIntensityHourly says an hourly
	// file gives the hours it holds).
	PUE                 float64     `json:"pue"`
	GridIntensity       float64     `json:"grid_intensity_g_per_kwh"`
	GridIntensityHourly bool        `json:"grid_intensity_hourly"`
	By                  string      `json:"by"`
	Period              string      `json:"period"`
	Energy              []EnergyRow `json:"energy"`
}

// EnergyRow is the energy of one team, job or GPU model in one period.
type EnergyRow struct {
	Team  string `json:"team,omitempty"`
	Job   string `json:"job,omitempty"`
	Model string `json:"gpu_model,omitempty"`
	// PeriodStart is the bucket's start; null for the whole report.
	PeriodStart *time.Time `json:"period_start"`
	GPUHours    float64    `json:"gpu_hours"`
	// GPUEnergyKWh is what the GPUs drew; FacilityEnergyKWh that times
	// the PUE of the racks they were in (the report's PUE outside racks);
	// CO2eKg the facility energy at the grid's intensity.
	GPUEnergyKWh      float64 `json:"gpu_energy_kwh"`
	FacilityEnergyKWh float64 `json:"facility_energy_kwh"`
	CO2eKg            float64 `json:"co2e_kg"`
	// AvgGPUWatts is one GPU's mean draw over the GPU-hours.
	AvgGPUWatts float64 `json:"avg_gpu_watts"`
	// Work, by job, is the units of work the job's attempts reported (its
	// work counter), WorkUnit what they count and JoulesPerUnit the GPU
	// energy of all its attempts over that work; absent when the job
	// reports none.
	Work          *float64 `json:"work,omitempty"`
	WorkUnit      string   `json:"work_unit,omitempty"`
	JoulesPerUnit *float64 `json:"joules_per_unit,omitempty"`
}

// TeamUsage is one team's accounting over the period, in total and per
// GPU model.
type TeamUsage struct {
	Team              string  `json:"team"`
	GPUHours          float64 `json:"gpu_hours"`
	EffectiveGPUHours float64 `json:"effective_gpu_hours"`
	// IdleAllocatedGPUHour is the time, from the per-GPU rollups, the
	// team held GPUs whose effective utilization over a heartbeat interval
	// was under IdleThreshold; IdleAllocatedUSD prices it at the catalog's
	// hourly price.
	IdleAllocatedGPUHour float64      `json:"idle_allocated_gpu_hours"`
	IdleAllocatedUSD     float64      `json:"idle_allocated_usd"`
	EnergyJoules         float64      `json:"energy_joules"`
	Models               []ModelUsage `json:"models"`
}

// ModelUsage is a team's accounting on one GPU model.
type ModelUsage struct {
	Model                string  `json:"model"`
	GPUHours             float64 `json:"gpu_hours"`
	EffectiveGPUHours    float64 `json:"effective_gpu_hours"`
	IdleAllocatedGPUHour float64 `json:"idle_allocated_gpu_hours"`
	IdleAllocatedUSD     float64 `json:"idle_allocated_usd"`
	EnergyJoules         float64 `json:"energy_joules"`
}

// IdleThreshold is the effective utilization under which an allocated
// GPU-minute counts as idle.
const IdleThreshold = 0.05

// NodeAction is cordon, uncordon, drain or repaired.
type NodeAction string

// Node actions.
const (
	Cordon   NodeAction = "cordon"
	Uncordon NodeAction = "uncordon"
	Drain    NodeAction = "drain"
	// Repaired starts a repaired node's (or its repaired GPUs') return to
	// service: validating, then ready once the agent's check passes.
	Repaired NodeAction = "repaired"
)

// Service is what the HTTP API needs from the control plane. Every method
// checks the principal: a member sees and touches only its own team's jobs
// (gpufleet.ErrNotFound for the others), admin-only methods return
// ErrForbidden to members.
type Service interface {
	SubmitJob(ctx context.Context, p Principal, r SubmitRequest) (SubmitResponse, error)
	Jobs(ctx context.Context, p Principal, q JobQuery) (JobList, error)
	Job(ctx context.Context, p Principal, id string) (gpufleet.Job, error)
	CancelJob(ctx context.Context, p Principal, id string) (gpufleet.Job, error)
	Queue(ctx context.Context, p Principal) ([]gpufleet.QueueEntry, error)

	Nodes(ctx context.Context, p Principal) ([]gpufleet.Node, error)
	Node(ctx context.Context, p Principal, name string) (gpufleet.Node, error)
	NodeAction(ctx context.Context, p Principal, name string, a NodeAction) (gpufleet.Node, error)

	Teams(ctx context.Context, p Principal) ([]gpufleet.Team, error)
	PutTeam(ctx context.Context, p Principal, r TeamRequest) (gpufleet.Team, error)
	Classes(ctx context.Context, p Principal) ([]gpufleet.Class, error)
	PutClass(ctx context.Context, p Principal, c gpufleet.Class) (gpufleet.Class, error)
	Racks(ctx context.Context, p Principal) ([]gpufleet.Rack, error)
	// PutRack creates or replaces a rack; a change that moves nodes from
	// another rack or leaves the rack's projected draw over its budget
	// needs r.Force (else it wraps gpufleet.ErrUnsatisfiable).
	PutRack(ctx context.Context, p Principal, r PutRackRequest) (gpufleet.Rack, error)
	DeleteRack(ctx context.Context, p Principal, name string) error
	// Stacks lists the named stacks with the nodes running each;
	// CreateStack records one (admin); ValidateStack validates one for a
	// GPU model from its nodes' evidence (admin); RetireStack retires one
	// (admin); StackCheck judges every node's stack by the rules.
	Stacks(ctx context.Context, p Principal) ([]gpufleet.Stack, error)
	CreateStack(ctx context.Context, p Principal, req CreateStackRequest) (gpufleet.Stack, error)
	ValidateStack(ctx context.Context, p Principal, name, gpuModel string, bake time.Duration) (gpufleet.Stack, error)
	RetireStack(ctx context.Context, p Principal, name string) error
	StackCheck(ctx context.Context, p Principal) ([]NodeStack, error)
	// StartRollout moves nodes to a stack in waves (admin); Rollouts lists
	// them; Rollout reads one; RolloutAction pauses, resumes, aborts or
	// rolls one back (admin).
	StartRollout(ctx context.Context, p Principal, r RolloutRequest) (rollout.Rollout, error)
	Rollouts(ctx context.Context, p Principal) ([]rollout.Rollout, error)
	Rollout(ctx context.Context, p Principal, id string) (rollout.Rollout, error)
	RolloutAction(ctx context.Context, p Principal, id, action string) (rollout.Rollout, error)
	Tokens(ctx context.Context, p Principal) ([]gpufleet.Token, error)
	CreateToken(ctx context.Context, p Principal, r TokenRequest) (gpufleet.Token, error)
	RevokeToken(ctx context.Context, p Principal, id string) error
	CreateJoinToken(ctx context.Context, p Principal, r JoinTokenRequest) (JoinTokenResponse, error)
	Usage(ctx context.Context, p Principal, q UsageQuery) (UsageReport, error)
	// Rollups returns per-GPU one-minute rollups, oldest first.
	Rollups(ctx context.Context, p Principal, q RollupQuery) ([]GPURollup, error)
	// Plan runs the planner; without GPU models it compares those of
	// the fleet the team may use.
	Plan(ctx context.Context, p Principal, q PlanQuery) (PlanResponse, error)

	// Authenticate resolves a bearer token (user token or node credential).
	Authenticate(ctx context.Context, bearer string) (Principal, error)
}

// RollupQuery selects per-GPU one-minute rollups: those of one node (and
// optionally one GPU), or those of the GPUs a job's attempts held while
// they held them. Zero From/To default to the last hour.
type RollupQuery struct {
	Node     string
	GPU      string // GPU UUID
	JobID    string
	From, To time.Time
}

// PlanQuery asks the server for a plan: the model as a job describes it
// (GET /api/v1/plan takes its fields as parameters), the GPU models to
// compare (empty: those of the fleet the team may use), and the GPU count
// (0: the smallest that fits).
type PlanQuery struct {
	Model     ModelRequest
	GPUModels []string
	GPUs      int
	Team      string
}

// PlanResponse is a plan with what it compared: Scope is "fleet" (the GPU
// models of the fleet the team may use, with how many the fleet has in
// Available) or "given".
type PlanResponse struct {
	Scope     string         `json:"scope"`
	Compared  []string       `json:"compared"`
	Available map[string]int `json:"available,omitempty"`
	Plan      *planner.Plan  `json:"plan"`
}

// RollupList is the body of the rollup routes.
type RollupList struct {
	Rollups []GPURollup `json:"rollups"`
}

// GPURollup is one GPU's aggregate over one minute. Means are over the
// samples that had the reading; a reading no sample had is null.
type GPURollup struct {
	Node                 string    `json:"node"`
	GPU                  string    `json:"gpu"` // UUID
	Model                string    `json:"model"`
	Minute               time.Time `json:"minute"`
	Team                 string    `json:"team,omitempty"` // who held it; admins and that team only
	Samples              int       `json:"samples"`
	Utilization          *float64  `json:"utilization"`
	SMActivity           *float64  `json:"sm_activity"`
	DRAMActivity         *float64  `json:"dram_activity"`
	TensorActivity       *float64  `json:"tensor_activity"`
	EffectiveUtilization *float64  `json:"effective_utilization"`
	MemoryUsedBytesMax   *int64    `json:"memory_used_bytes_max"`
	PowerWatts           *float64  `json:"power_watts"`
	EnergyJoules         float64   `json:"energy_joules"`
	TemperatureCMax      *float64  `json:"temperature_c_max"`
}

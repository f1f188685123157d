package gpufleet

import (
	"fmt"
	"time"
)

// JobState is where a job is in its life.
type JobState string

// Job states. A cancel sets CancelRequested; the job turns Cancelled once
// its attempts have stopped.
const (
	JobQueued    JobState = "queued"
	JobScheduled JobState = "scheduled" // placed; its attempt is starting
	JobRunning   JobState = "running"
	JobSucceeded JobState = "succeeded"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
)

// Terminal reports whether the state is final.
func (s JobState) Terminal() bool {
	return s == JobSucceeded || s == JobFailed || s == JobCancelled
}

// AttemptState is where one run of a job is.
type AttemptState string

// Attempt states. Stopped covers preempted, drained and cancelled runs.
const (
	AttemptStarting  AttemptState = "starting"
	AttemptRunning   AttemptState = "running"
	AttemptSucceeded AttemptState = "succeeded"
	AttemptFailed    AttemptState = "failed"
	AttemptStopped   AttemptState = "stopped"
	AttemptLost      AttemptState = "lost"
)

// Terminal reports whether the attempt has ended.
func (s AttemptState) Terminal() bool {
	return s == AttemptSucceeded || s == AttemptFailed || s == AttemptStopped || s == AttemptLost
}

// NodeState is what the scheduler may do with a node or GPU.
type NodeState string

// Node states.
const (
	NodeReady      NodeState = "ready"
	NodeCordoned   NodeState = "cordoned"
	NodeDraining   NodeState = "draining"
	NodeDown       NodeState = "down" // no heartbeat
	NodeRepairing  NodeState = "repairing"
	NodeValidating NodeState = "validating"
)

// Health is the condition of a node or GPU, from the health rules.
type Health string

// Health values.
const (
	Healthy   Health = "healthy"
	Degraded  Health = "degraded"
	Unhealthy Health = "unhealthy"
)

// Role is what a token may do.
type Role string

// Roles: an admin is fleet-wide; a member belongs to one team; a monitor
// token only reads the control plane's metrics and the agents' service
// discovery (what Prometheus needs, and nothing else).
const (
	RoleAdmin   Role = "admin"
	RoleMember  Role = "member"
	RoleMonitor Role = "monitor"
)

// ParseRole returns the role named s (admin, member or monitor).
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAdmin, RoleMember, RoleMonitor:
		return r, nil
	}
	return "", fmt.Errorf("%w: role %s: expected member, admin or monitor", ErrInvalid, Quote(s))
}

// Resources is what a job asks for. The scheduler reads the same type.
type Resources struct {
	// GPUs is the total over all nodes: whole GPUs, MIG instances or
	// time-slice shares.
	GPUs int `json:"gpus"`
	// Nodes spreads the GPUs evenly over this many nodes (a gang); 0 means
	// as few nodes as possible.
	Nodes int `json:"nodes,omitempty"`
	// GPUModels is an allowlist of catalog ids, aliases or admin-defined
	// classes; empty means any model.
	GPUModels            []string          `json:"gpu_models,omitempty"`
	GPUMemoryMinBytes    Bytes             `json:"gpu_memory_min_bytes,omitempty"`
	MinComputeCapability ComputeCapability `json:"min_compute_capability,omitzero"`
	// Precision must be native on the GPU.
	Precision    Precision         `json:"precision,omitempty"`
	Interconnect Interconnect      `json:"interconnect,omitempty"`
	Sharing      Sharing           `json:"sharing,omitzero"`
	Prefer       Preference        `json:"prefer,omitempty"`
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Stack names a stack (gpufleet stacks) whose versions the node must
	// run; Requires constrains single components' versions, such as
	// {"cuda": ">=12.4", "driver": ">=550", "torch": "2.5"}
	// (docs/STACKS.md). A node must meet both.
	Stack    string            `json:"stack,omitempty"`
	Requires map[string]string `json:"requires,omitempty"`
	// JoulesPerUnit is, per GPU model (catalog id), the GPU energy one
	// unit of the job's work takes there, for prefer efficient: measured
	// by the job's earlier runs or the planner's figure, filled in at
	// submission when not given. Models it leaves out are estimated from
	// the given ones by peak per watt (docs/POWER.md#prefer-efficient).
	JoulesPerUnit map[string]float64 `json:"joules_per_unit,omitempty"`
	// CPUs and MemoryBytes limit each attempt on each node (cgroup v2
	// cpu.max and memory.max where the node has them); zero: no limit.
	// The scheduler places by GPUs only.
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes Bytes   `json:"memory_bytes,omitempty"`
	// Isolation is the isolation the job needs from the mechanism it runs
	// under (hard, soft or any; see MechanismOf); empty takes its priority
	// class's default at submission. Overhead caps the mechanism's
	// expected overhead ("<= 5%"); nil accepts any.
	Isolation Isolation      `json:"isolation,omitempty"`
	Overhead  *OverheadLimit `json:"overhead,omitempty"`
	// Runtime is what the nodes must run the job with: RuntimeContainer
	// for a job with an image (the server sets it at submission), so that
	// only nodes whose agent runs containers hold it; empty: any node.
	Runtime string `json:"runtime,omitempty"`
}

// Retries counts a job's own failures against its budget. Preemption, drain
// and node loss do not use it up.
type Retries struct {
	Max  int `json:"max"`
	Used int `json:"used"`
}

// String says how many of the retries the job's failures used: "1 of 2
// used". Used counts failed attempts, so the last failure of a job that
// ran out of retries is one more than Max: it reads "2 of 2 used, then
// failed".
func (r Retries) String() string {
	switch {
	case r.Max == 0 && r.Used == 0:
		return "none allowed"
	case r.Max == 0:
		return "none allowed: it failed on its first failure"
	case r.Used > r.Max:
		return fmt.Sprintf("all %d used, then it failed", r.Max)
	}
	return fmt.Sprintf("%d of %d used", r.Used, r.Max)
}

// Job is a unit of work and its history, as the API returns it.
type Job struct {
	ID              string            `json:"id"`
	Team            string            `json:"team"`
	Name            string            `json:"name"`
	State           JobState          `json:"state"`
	CancelRequested bool              `json:"cancel_requested"`
	Priority        Priority          `json:"priority"`
	RequestID       string            `json:"request_id,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"` // as submitted (labels.go)
	Resources       Resources         `json:"resources"`
	Command         []string          `json:"command"`
	Env             map[string]string `json:"env,omitempty"`
	Workdir         string            `json:"workdir,omitempty"`
	Launch
	TimeLimitS  *float64 `json:"time_limit_s"`
	EstimateS   *float64 `json:"estimate_s"`
	Preemptible bool     `json:"preemptible"`
	GraceS      *float64 `json:"grace_s"`
	Retries     Retries  `json:"retries"`
	// Interruptions counts stops that were not the job's fault (preemption,
	// drain, node loss); they do not use the retry budget.
	Interruptions int        `json:"interruptions"`
	SimLoad       SimLoad    `json:"sim_load,omitempty"` // compute, memory or idle, for simulated nodes
	SubmittedAt   time.Time  `json:"submitted_at"`
	StartedAt     *time.Time `json:"started_at"`
	FinishedAt    *time.Time `json:"finished_at"`
	// Work is how the job reports the work it does, when it does.
	Work *WorkCounter `json:"work,omitempty"`
	// Plan is the planner's answer the job was admitted with, when it
	// described a model.
	Plan     any       `json:"plan"`
	Attempts []Attempt `json:"attempts"`
	// Queue is the job's place in the queue while it is queued.
	Queue *QueueEntry `json:"queue,omitempty"`
	// Reason and ReasonCode say why a job ended without its attempts
	// deciding it: invalid_request for a stored job the scheduler could
	// not take. Empty otherwise: the attempts say why.
	Reason     string `json:"reason,omitempty"`
	ReasonCode string `json:"reason_code,omitempty"`
	// Defect is set by the store when the stored job does not decode (a
	// row written by hand or by another version); Validate refuses it.
	Defect string `json:"-"`
}

// AttemptNode is one node of an attempt with its GPU or MIG UUIDs.
type AttemptNode struct {
	Name string   `json:"name"`
	GPUs []string `json:"gpus"`
}

// Attempt is one run of a job on one set of GPUs.
type Attempt struct {
	ID         string        `json:"id"`
	JobID      string        `json:"job_id"`
	State      AttemptState  `json:"state"`
	Node       string        `json:"node"` // first node's name
	GPUs       []string      `json:"gpus"` // first node's GPU or MIG UUIDs
	Nodes      []AttemptNode `json:"nodes"`
	StartedAt  *time.Time    `json:"started_at"`
	FinishedAt *time.Time    `json:"finished_at"`
	ExitCode   *int          `json:"exit_code"`
	Reason     string        `json:"reason"`
	ReasonCode string        `json:"reason_code"`
	// StopRequested is set when the server wants the attempt stopped
	// (preemption, drain, cancel, time limit); the agent stops it.
	// StopRequestedAt is when that was decided and StopGraceS the grace
	// the stop gives; both null until then.
	StopRequested   bool       `json:"stop_requested"`
	StopRequestedAt *time.Time `json:"stop_requested_at"`
	StopGraceS      *float64   `json:"stop_grace_s"`
	// Fraction is the time-slice share held on each GPU (1 when whole).
	Fraction            float64 `json:"fraction"`
	GPUSeconds          float64 `json:"gpu_seconds"`
	EffectiveGPUSeconds float64 `json:"effective_gpu_seconds"`
	EnergyJoules        float64 `json:"energy_joules"`
	// Work is the units of work the attempt reported (the job's Work
	// counter, the largest count any node's output showed); null when it
	// reported none.
	Work *float64 `json:"work"`
	// Mechanism is what the attempt got on its first node: that node's
	// virtualization with the job's sharing, its isolation and expected
	// overhead; null when the node is no longer known. Filled in when a
	// job is read, from the node's virtualization label.
	Mechanism *Mechanism `json:"mechanism"`
}

// AllGPUs lists the GPU (or MIG instance) UUIDs the attempt holds on every
// node: Nodes' when set, else the first node's GPUs.
func (a *Attempt) AllGPUs() []string {
	if len(a.Nodes) == 0 {
		return a.GPUs
	}
	var out []string
	for _, n := range a.Nodes {
		out = append(out, n.GPUs...)
	}
	return out
}

// QueueEntry is a pending job's place in the queue.
type QueueEntry struct {
	ID   string `json:"id"`
	Name string `json:"name"` // the job's name, "" when it has none
	// GPUs is the job's total GPUs (or MIG instances, or time-slice shares).
	GPUs         int      `json:"gpus"`
	Team         string   `json:"team"`
	Priority     Priority `json:"priority"`
	Position     int      `json:"position"`
	TeamPosition int      `json:"team_position"`
	Reason       string   `json:"reason"`
	ReasonCode   string   `json:"reason_code"`
	// EstimatedStart is the median estimated start; EstimatedStartP90 the
	// start it should begin by nine times in ten; ETAConfidence (0-1) the
	// share of similar recent jobs that started within max(1 h, 25 %) of
	// their median. All null when unknown (docs/SCHEDULER.md#eta-method).
	EstimatedStart    *time.Time `json:"estimated_start"`
	EstimatedStartP90 *time.Time `json:"estimated_start_p90"`
	ETAConfidence     *float64   `json:"eta_confidence"`
	// Estimate is the run time the scheduler plans the job on and where
	// it came from: the job's estimate, the runs of similar jobs, its time
	// limit or the default (docs/SCHEDULER.md#estimates-from-history).
	Estimate *RunEstimate `json:"estimate,omitempty"`
	// Explanation is the reason as data (docs/JOBS.md#why-a-job-waits):
	// the nodes evaluated, the nodes each filter left out, the dimension
	// exhausted. Absent before the scheduler's first cycle decided it.
	Explanation *Explanation `json:"explanation,omitempty"`
}

// StateCause says who put a node or a GPU in its state: the quarantine
// circuit breaker counts what the health rules took out of service, and
// a reason is words for people, never parsed.
type StateCause string

// The causes of a node's or GPU's state.
const (
	CauseOperator StateCause = "operator" // a person: cordon, drain, uncordon, marked repaired
	CauseHealth   StateCause = "health"   // the health rules' automatic quarantine
	CauseRepair   StateCause = "repair"   // the repair path: drained to repairing, validation's result
	CauseRollout  StateCause = "rollout"  // a software rollout's drain and return
	CauseBench    StateCause = "bench"    // a scheduled re-bench holds the idle node while it measures
)

// NodeGPU is one GPU of a node.
type NodeGPU struct {
	Index       int       `json:"index"`
	UUID        string    `json:"uuid"`
	Model       string    `json:"model"`
	MemoryBytes int64     `json:"memory_bytes"`
	State       NodeState `json:"state"`
	// StateReason says why the GPU is in its state (a health rule's drain,
	// a failed validation), StateCause who put it there.
	StateReason  string        `json:"state_reason,omitempty"`
	StateCause   StateCause    `json:"state_cause,omitempty"`
	Health       Health        `json:"health"`
	Reason       string        `json:"reason"` // the health reason
	NVLinkDomain string        `json:"nvlink_domain,omitempty"`
	MIGInstances []MIGInstance `json:"mig_instances"`
	// Live is the GPU's last reported sample and who holds it; absent
	// when the node has not reported since this server started.
	Live *GPULive `json:"live,omitempty"`
}

// GPULive is a GPU's latest telemetry as the server last heard it, and its
// allocation. Readings the device does not support are null.
type GPULive struct {
	Utilization *float64 `json:"utilization"`
	SMActivity  *float64 `json:"sm_activity"`
	// EffectiveUtilization is SM activity where the GPU reports it, else
	// utilization.
	EffectiveUtilization *float64 `json:"effective_utilization"`
	MemoryUsedBytes      *int64   `json:"memory_used_bytes"`
	PowerWatts           *float64 `json:"power_watts"`
	TemperatureC         *float64 `json:"temperature_c"`
	ThrottleReasons      []string `json:"throttle_reasons,omitempty"`
	// Allocated is true while an attempt holds the GPU (or one of its MIG
	// instances or time-slice shares).
	Allocated bool `json:"allocated"`
	// Team holds the GPU; shown to admins and to the team itself only.
	Team string `json:"team,omitempty"`
	// RecentXIDs are the XIDs the GPU raised in the last hour, newest last.
	RecentXIDs []int `json:"recent_xids,omitempty"`
}

// MIGInstance is one MIG instance of a GPU.
type MIGInstance struct {
	UUID    string `json:"uuid"`
	Profile string `json:"profile"`
}

// Node is one machine of the fleet.
type Node struct {
	Name   string    `json:"name"`
	State  NodeState `json:"state"`
	Health Health    `json:"health"`
	// Reason is the health reason while the node is not healthy, else the
	// state reason; StateReason and HealthReason give both.
	Reason        string            `json:"reason"`
	StateReason   string            `json:"state_reason"`
	StateCause    StateCause        `json:"state_cause,omitempty"`
	HealthReason  string            `json:"health_reason"`
	HeartbeatAgeS *float64          `json:"heartbeat_age_s"`
	MetricsURL    string            `json:"metrics_url"`
	Labels        map[string]string `json:"labels"`
	Versions      map[string]string `json:"versions"`
	GPUs          []NodeGPU         `json:"gpus"`
}

// Team is a tenant: guaranteed quota per GPU class, borrowing limit and
// fair-share weight, and what it uses now.
type Team struct {
	Name           string         `json:"name"`
	Quota          map[string]int `json:"quota"`
	BorrowingLimit int            `json:"borrowing_limit"` // -1: no limit
	Weight         float64        `json:"weight"`
	Used           map[string]int `json:"used"`
	// Mounts are the host paths the team's container jobs may mount.
	Mounts []MountAllow `json:"mounts,omitempty"`
	// Registries names the registries the team has credentials for.
	Registries []string `json:"registries,omitempty"`
	// RegistryAuth holds those credentials; it is never marshalled.
	RegistryAuth map[string]RegistryCredential `json:"-"`
	// UIDOffset is the team's place in the agents' uid range: its process
	// attempts run as the range's first uid plus this, on every node.
	UIDOffset int `json:"uid_offset"`
}

// Class is an admin-defined group of catalog ids.
type Class struct {
	Name   string   `json:"name"`
	Models []string `json:"models"`
}

// Rack is a power domain (a rack, a PDU, a row) whose nodes' placements
// keep its projected draw under its budget (docs/POWER.md). Its nodes are
// those named in Nodes, and only those: a node is listed by one rack at
// most, and its RackLabel only ever adds it to a list.
type Rack struct {
	Name             string `json:"name"`
	PowerBudgetWatts Watts  `json:"power_budget_watts"`
	// ProductionReserveWatts is the part of the budget only production
	// work may use.
	ProductionReserveWatts Watts `json:"production_reserve_watts"`
	// CoolingWatts is the heat the rack's cooling removes; null when not
	// given. PUE is the facility's power usage effectiveness for the
	// rack's energy; null means the server's default.
	CoolingWatts *Watts   `json:"cooling_watts"`
	PUE          *float64 `json:"pue"`
	Nodes        []string `json:"nodes"`
	// Members, RatedWatts and DrawWatts are read-only: the nodes listed
	// that have registered, their GPUs and hosts at their rating, and the
	// projected draw now (null when the server does not lead).
	Members    []string `json:"members"`
	RatedWatts Watts    `json:"rated_watts"`
	DrawWatts  *Watts   `json:"draw_watts"`
}

// RackLabel is the node label that names a node's first rack: unless a
// rack lists the node, it joins the list of the rack the label names when
// the node first registers, or when that rack is created
// (docs/POWER.md#racks). Later registrations leave the lists alone, and
// the label never takes a node from the rack that lists it.
const RackLabel = "rack"

// MaxPUE bounds a PUE: no facility spends twice its IT power again on
// overhead and stays in use.
const MaxPUE = 3.0

// Validate checks a rack as a request gives it.
func (r *Rack) Validate() error {
	if err := ValidateName("name", r.Name); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    Watts
	}{{"power_budget_watts", r.PowerBudgetWatts}, {"production_reserve_watts", r.ProductionReserveWatts}} {
		if !(f.v >= 0 && f.v <= MaxWatts) {
			return fmt.Errorf("%w: %s %g: expected 0 to %g", ErrInvalid, f.name, float64(f.v), float64(MaxWatts))
		}
	}
	if r.ProductionReserveWatts > r.PowerBudgetWatts {
		return fmt.Errorf("%w: production_reserve_watts %g: expected at most the budget, %g", ErrInvalid, float64(r.ProductionReserveWatts), float64(r.PowerBudgetWatts))
	}
	if c := r.CoolingWatts; c != nil && !(*c >= 0 && *c <= MaxWatts) {
		return fmt.Errorf("%w: cooling_watts %g: expected 0 to %g", ErrInvalid, float64(*c), float64(MaxWatts))
	}
	if p := r.PUE; p != nil && !(*p >= 1 && *p <= MaxPUE) {
		return fmt.Errorf("%w: pue %g: expected 1 to %g", ErrInvalid, *p, MaxPUE)
	}
	if len(r.Nodes) > MaxListLen*64 {
		return fmt.Errorf("%w: nodes: %d, at most %d", ErrInvalid, len(r.Nodes), MaxListLen*64)
	}
	seen := map[string]bool{}
	for i, n := range r.Nodes {
		if err := ValidateName(fmt.Sprintf("nodes[%d]", i), n); err != nil {
			return err
		}
		if seen[n] {
			return fmt.Errorf("%w: nodes[%d] %s: listed twice", ErrInvalid, i, Quote(n))
		}
		seen[n] = true
	}
	return nil
}

// Token is an API credential. The secret appears once, at creation.
type Token struct {
	ID        string     `json:"id"`
	Token     string     `json:"token,omitempty"`
	Team      string     `json:"team"`
	Role      Role       `json:"role"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// Event is one entry of the audit log: a state change and who caused it.
type Event struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`  // token id, "scheduler", "agent:NODE", "system"
	Kind   string    `json:"kind"`   // job.submitted, attempt.started, node.cordoned...
	Object string    `json:"object"` // job, attempt or node id
	Team   string    `json:"team,omitempty"`
	Detail string    `json:"detail"`
}

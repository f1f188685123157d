package api

import (
	"context"
	"io"
	"time"

	"github.com/gpufleet/gpufleet"
)

// ProtocolVersion is the agent protocol this build speaks. The agent
// protocol is lenient: unknown fields are ignored, so neighbouring
// versions work together during an upgrade.
const ProtocolVersion = 1

// RegisterRequest is an agent joining with a join token.
type RegisterRequest struct {
	ProtocolVersion int                `json:"protocol_version"`
	Node            string             `json:"node"`
	Labels          map[string]string  `json:"labels"`
	Versions        map[string]string  `json:"versions"`
	GPUs            []gpufleet.NodeGPU `json:"gpus"`
	MetricsURL      string             `json:"metrics_url"`
	// Attempts lists the attempts the agent still runs (after a restart),
	// so the server can reconcile them.
	Attempts []AttemptReport `json:"attempts,omitempty"`
}

// RegisterResponse carries the node credential (secret shown once).
type RegisterResponse struct {
	ProtocolVersion int       `json:"protocol_version"`
	Node            string    `json:"node"`
	Credential      string    `json:"credential"`
	ExpiresAt       time.Time `json:"expires_at"`
	HeartbeatS      float64   `json:"heartbeat_s"`
	FenceAfterS     float64   `json:"fence_after_s"`
}

// GPUSample is a compact per-GPU summary of the last heartbeat interval.
// Absent readings are null.
type GPUSample struct {
	UUID              string   `json:"uuid"`
	Utilization       *float64 `json:"utilization"`     // 0-1
	SMActivity        *float64 `json:"sm_activity"`     // 0-1, GPM/DCGM where available
	DRAMActivity      *float64 `json:"dram_activity"`   // 0-1
	TensorActivity    *float64 `json:"tensor_activity"` // 0-1
	MemoryUsedBytes   *int64   `json:"memory_used_bytes"`
	PowerWatts        *float64 `json:"power_watts"`
	EnergyJoulesTotal *float64 `json:"energy_joules_total"` // monotonic counter
	TemperatureC      *float64 `json:"temperature_c"`
	ThrottleReasons   []string `json:"throttle_reasons,omitempty"`
	ECCUncorrected    *int64   `json:"ecc_uncorrected"`
	XIDs              []int    `json:"xids,omitempty"` // since the last heartbeat
	// Evidence is what the health rules read: the interval's last reading
	// of the error counters and link state, and the clock-event reasons
	// present in every sample of the interval. Absent readings are null.
	// The agent leaves it out while it equals what the server last
	// acknowledged (the server keeps it), and sends it whole when the
	// server asks (HeartbeatResponse.FullEvidence).
	Evidence *GPUEvidence `json:"evidence,omitempty"`
}

// GPUEvidence is a GPU's health evidence over one heartbeat interval.
type GPUEvidence struct {
	// ClockEventsAll is the NVML clock-event bitmask ANDed over the
	// interval's samples: a bit set here was set the whole time.
	ClockEventsAll            *uint64 `json:"clock_events_all"`
	ECCCorrectedVolatile      *uint64 `json:"ecc_corrected_volatile"`
	ECCUncorrectedVolatile    *uint64 `json:"ecc_uncorrected_volatile"`
	ECCUncorrectedAggregate   *uint64 `json:"ecc_uncorrected_aggregate"`
	RetiredPagesSBE           *uint64 `json:"retired_pages_sbe"`
	RetiredPagesDBE           *uint64 `json:"retired_pages_dbe"`
	RetiredPagesPending       *bool   `json:"retired_pages_pending"`
	RemappedRowsCorrectable   *uint64 `json:"remapped_rows_correctable"`
	RemappedRowsUncorrectable *uint64 `json:"remapped_rows_uncorrectable"`
	RowRemapPending           *bool   `json:"row_remap_pending"`
	RowRemapFailure           *bool   `json:"row_remap_failure"`
	PCIeGen                   *int    `json:"pcie_gen"`
	PCIeWidth                 *int    `json:"pcie_width"`
	PCIeMaxGen                *int    `json:"pcie_max_gen"`
	PCIeMaxWidth              *int    `json:"pcie_max_width"`
	PCIeReplayCount           *uint64 `json:"pcie_replay_count"`
	NVLinkLinksUp             *int    `json:"nvlink_links_up"`
	NVLinkLinksTotal          *int    `json:"nvlink_links_total"`
	NVLinkErrors              *uint64 `json:"nvlink_errors"`
}

// ValidationOrder asks the agent to check GPUs before they return to
// service (after a repair). GPUs empty means every GPU of the node.
type ValidationOrder struct {
	ID   string   `json:"id"`
	GPUs []string `json:"gpus,omitempty"`
}

// ValidationResult is the outcome of a ValidationOrder.
type ValidationResult struct {
	ID     string `json:"id"`
	Passed bool   `json:"passed"`
	// Detail says what failed (or what was checked), in words.
	Detail string `json:"detail"`
}

// AttemptReport is an attempt's state as the agent sees it.
type AttemptReport struct {
	AttemptID           string                `json:"attempt_id"`
	JobID               string                `json:"job_id"`
	State               gpufleet.AttemptState `json:"state"`
	ExitCode            *int                  `json:"exit_code"`
	Reason              string                `json:"reason,omitempty"`
	ReasonCode          string                `json:"reason_code,omitempty"`
	GPUSeconds          float64               `json:"gpu_seconds"`
	EffectiveGPUSeconds float64               `json:"effective_gpu_seconds"`
	EnergyJoules        float64               `json:"energy_joules"`
}

// HeartbeatRequest is the agent's periodic report.
type HeartbeatRequest struct {
	ProtocolVersion int                `json:"protocol_version"`
	Node            string             `json:"node"`
	Samples         []GPUSample        `json:"samples,omitempty"`
	GPUs            []gpufleet.NodeGPU `json:"gpus,omitempty"` // only when the inventory changed
	Attempts        []AttemptReport    `json:"attempts,omitempty"`
	// MetricsURL is the agent's /metrics, repeated so that a restarted
	// server learns it without a new registration.
	MetricsURL string `json:"metrics_url,omitempty"`
	// FaultAcks lists the fault orders (FaultOrder.ID) the agent applied
	// or refused; the server stops resending them.
	FaultAcks []string `json:"fault_acks,omitempty"`
	// Validations are the results of validation orders.
	Validations []ValidationResult `json:"validations,omitempty"`
	// MissingGPUs are inventory GPUs (UUIDs) that discovery no longer
	// finds: fallen off the bus.
	MissingGPUs []string `json:"missing_gpus,omitempty"`
}

// Assignment is an attempt the agent must start.
type Assignment struct {
	AttemptID  string            `json:"attempt_id"`
	JobID      string            `json:"job_id"`
	Command    []string          `json:"command"`
	Env        map[string]string `json:"env,omitempty"`
	Workdir    string            `json:"workdir,omitempty"`
	Team       string            `json:"team"`
	GPUs       []string          `json:"gpus"` // GPU or MIG UUIDs on this node
	Fraction   float64           `json:"fraction"`
	TimeLimitS *float64          `json:"time_limit_s"`
	GraceS     float64           `json:"grace_s"`
	SimLoad    string            `json:"sim_load,omitempty"`
	// CPUs and MemoryBytes are the job's per-node limits (0: none).
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	// Multi-node rendezvous.
	NodeRank    int    `json:"node_rank"`
	NNodes      int    `json:"nnodes"`
	GPUsPerNode int    `json:"gpus_per_node"`
	MasterAddr  string `json:"master_addr,omitempty"`
	MasterPort  int    `json:"master_port,omitempty"`
}

// StopOrder tells the agent to stop an attempt.
type StopOrder struct {
	AttemptID  string  `json:"attempt_id"`
	Reason     string  `json:"reason"`
	ReasonCode string  `json:"reason_code"`
	GraceS     float64 `json:"grace_s"`
}

// HeartbeatResponse carries the work for the node.
type HeartbeatResponse struct {
	ProtocolVersion int          `json:"protocol_version"`
	Start           []Assignment `json:"start,omitempty"`
	Stop            []StopOrder  `json:"stop,omitempty"`
	// Unknown lists reported attempts the server does not expect on this
	// node (stale): the agent kills them.
	Unknown []string `json:"unknown,omitempty"`
	// Faults are fault injections and clears for simulated GPUs, resent
	// until the agent acknowledges them.
	Faults []FaultOrder `json:"faults,omitempty"`
	// Validate asks for return-to-service checks, resent until the agent
	// reports a result.
	Validate []ValidationOrder `json:"validate,omitempty"`
	// FullEvidence asks for every GPU's evidence in the next heartbeat:
	// this replica does not hold it (a restart, a new leader).
	FullEvidence bool `json:"full_evidence,omitempty"`
}

// AgentService is what the agent endpoints need.
type AgentService interface {
	Register(ctx context.Context, joinToken string, r RegisterRequest) (RegisterResponse, error)
	Heartbeat(ctx context.Context, p Principal, r HeartbeatRequest) (HeartbeatResponse, error)
	// RenewCredential swaps an agent's node credential for a fresh one.
	RenewCredential(ctx context.Context, p Principal) (RegisterResponse, error)
}

// LogService streams a job's logs.
type LogService interface {
	// Logs writes the job's log (its latest attempt's) to w; with follow it
	// keeps writing until the attempt ends or ctx is done.
	Logs(ctx context.Context, p Principal, jobID string, follow bool, w io.Writer) error
}

// WatchService streams changes.
type WatchService interface {
	// Watch returns events visible to p after id since (0: from now) until
	// ctx is done.
	Watch(ctx context.Context, p Principal, since int64) (<-chan gpufleet.Event, error)
}

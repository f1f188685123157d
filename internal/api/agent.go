package api

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/capacity"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// ProtocolVersion is the agent protocol this build speaks. The agent
// protocol is lenient: unknown fields are ignored, so neighbouring
// versions work together during an upgrade.
const ProtocolVersion = 2

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
	// Credential is the node credential the agent already holds, if any:
	// it proves the agent is the node it names, so a join token bound to
	// no name may register it again while the node is alive.
	Credential string `json:"credential,omitempty"`
	// Bench is the quick microbenchmark set the agent ran on its idle GPUs
	// before joining (docs/BENCH.md); absent when it ran none.
	Bench *BenchReport `json:"bench,omitempty"`
}

// BenchOrder asks the agent to run microbenchmarks on GPUs that hold no
// attempt (docs/BENCH.md); resent until the agent reports its result.
type BenchOrder struct {
	ID string `json:"id"`
	// GPUs are the UUIDs to measure; empty means every GPU of the node.
	GPUs []string `json:"gpus,omitempty"`
	// Tests to run; empty means every test.
	Tests []bench.Test `json:"tests,omitempty"`
	Quick bool         `json:"quick"`
	// Level is the bench level; absent from servers before levels (Quick
	// then says quick or the full set).
	Level bench.Level `json:"level,omitempty"`
	// Rendezvous asks rank 0 of an all-reduce across nodes to open the
	// rendezvous the other members join (NCCL's unique id): the report
	// carries it as Token. Group asks a member to run its part, with the
	// token. Either makes the order that and nothing else
	// (docs/BENCH.md#across-nodes).
	Rendezvous *bench.GroupRun `json:"rendezvous,omitempty"`
	Group      *bench.GroupRun `json:"group,omitempty"`
}

// BenchReport is what a bench order, a validation or the join bench
// measured: the runs' raw rates, which the server turns into figures
// against its catalog and judges against the fleet.
type BenchReport struct {
	ID           string              `json:"id"`
	Measurements []bench.Measurement `json:"measurements,omitempty"`
	// Detail says what was skipped or failed, in words.
	Detail string `json:"detail,omitempty"`
	// Token is the rendezvous a Rendezvous order opened.
	Token []byte `json:"token,omitempty"`
}

func (b *BenchReport) validate(field string) error {
	if b == nil {
		return nil
	}
	if err := gpufleet.CheckText(field+".id", b.ID, maxIDLen, false); err != nil {
		return err
	}
	if err := gpufleet.CheckText(field+".detail", b.Detail, maxDetailLen, true); err != nil {
		return err
	}
	if len(b.Token) > bench.MaxTokenBytes {
		return fmt.Errorf("%w: %s.token: %d bytes, at most %d", gpufleet.ErrInvalid, field, len(b.Token), bench.MaxTokenBytes)
	}
	return bench.ValidateMeasurements(field+".measurements", b.Measurements)
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

// GPUEvidence is a GPU's health evidence over one heartbeat interval:
// the interval's last reading of its counters, the very type the GPU
// backend reads and the health rules judge.
type GPUEvidence struct {
	// ClockEventsAll is the NVML clock-event bitmask ANDed over the
	// interval's samples: a bit set here was set the whole time.
	ClockEventsAll *uint64 `json:"clock_events_all"`
	gpu.Counters
}

// ValidationOrder asks the agent to check GPUs before they return to
// service (after a repair). GPUs empty means every GPU of the node.
type ValidationOrder struct {
	ID   string   `json:"id"`
	GPUs []string `json:"gpus,omitempty"`
	// Tests are microbenchmarks the check runs beside the quick set: those
	// of the figures that hold the node back (a memory pattern or stress
	// failure is re-run, not left standing).
	Tests []bench.Test `json:"tests,omitempty"`
}

// ValidationResult is the outcome of a ValidationOrder.
type ValidationResult struct {
	ID     string `json:"id"`
	Passed bool   `json:"passed"`
	// Detail says what failed (or what was checked), in words.
	Detail string `json:"detail"`
	// Bench is the quick microbenchmark set run on the GPUs checked; the
	// server fails the validation when a figure is under its gate against
	// the fleet.
	Bench *BenchReport `json:"bench,omitempty"`
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
	// Work is the last count of the job's work counter the attempt's
	// output showed on this node; absent until one did.
	Work *float64 `json:"work,omitempty"`
	// Events are what happened to the attempt on the node since the last
	// answered report (an image pull's start and end), for the job's
	// events.
	Events []AttemptEvent `json:"events,omitempty"`
}

// AttemptEvent is one thing that happened to an attempt on its node.
type AttemptEvent struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"` // attempt.image_pull
	Detail string    `json:"detail"`
}

// maxAttemptEvents bounds the events of one attempt in one report.
const maxAttemptEvents = 16

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
	// Updates are the results of stack update orders, with the versions
	// the node runs afterwards; resent while the server still orders them.
	Updates []UpdateResult `json:"updates,omitempty"`
	// Bench are the results of bench orders, resent while the server
	// still orders them.
	Bench []BenchReport `json:"bench,omitempty"`
	// PowerCapFailures are the power caps (HeartbeatResponse.PowerCaps)
	// the agent failed to set or to lift since the last heartbeat.
	PowerCapFailures []PowerCapFailure `json:"power_cap_failures,omitempty"`
}

// UpdateOrder asks the agent to move its node to a stack (a rollout,
// docs/STACKS.md): the operator's command, run once per key, with the
// target versions in its environment (GPUFLEET_STACK_DRIVER=550.54.15,
// ...); simulated GPUs take the versions directly.
type UpdateOrder struct {
	Key      string            `json:"key"`
	Command  string            `json:"command"`
	Versions map[string]string `json:"versions"`
}

// UpdateResult is how an update order went, and the node's versions
// afterwards.
type UpdateResult struct {
	Key      string            `json:"key"`
	OK       bool              `json:"ok"`
	Detail   string            `json:"detail"`
	Versions map[string]string `json:"versions"`
}

// Assignment is an attempt the agent must start.
type Assignment struct {
	AttemptID string            `json:"attempt_id"`
	JobID     string            `json:"job_id"`
	Command   []string          `json:"command"`
	Env       map[string]string `json:"env,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	// Launch is the job's image, stop signal, mounts and shared memory.
	gpufleet.Launch
	Team string `json:"team"`
	// Priority is the job's priority class, for the GPU metrics' labels.
	Priority   gpufleet.Priority `json:"priority,omitempty"`
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
	// Work is the job's work counter, read from the attempt's output.
	Work *gpufleet.WorkCounter `json:"work,omitempty"`
	// RegistryAuth is the team's login to the image's registry, for the
	// pull; the agent keeps it in a 0600 file and never logs it.
	RegistryAuth *RegistryAuth `json:"registry_auth,omitempty"`
	// TeamUIDOffset is the team's offset in the agents' --uid-range (the
	// server gives every team its own); nil from an older server.
	TeamUIDOffset *int `json:"team_uid_offset,omitempty"`
}

// RegistryAuth is a registry login an assignment carries.
type RegistryAuth struct {
	Registry string `json:"registry"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// String hides the password (an assignment printed by mistake).
func (r RegistryAuth) String() string { return r.Username + "@" + r.Registry + " (password hidden)" }

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
	// Update asks for stack updates, resent until the node reports the
	// result (its versions then show where it is).
	Update []UpdateOrder `json:"update,omitempty"`
	// Bench asks for microbenchmarks, resent until the agent reports.
	Bench []BenchOrder `json:"bench,omitempty"`
	// FullEvidence asks for every GPU's evidence in the next heartbeat:
	// this replica does not hold it (a restart, a new leader).
	FullEvidence bool `json:"full_evidence,omitempty"`
	// HeartbeatS and FenceAfterS repeat the registration's settings
	// (protocol 2), so that an agent that could not register again, a
	// restarted one with a spent join token, learns its fence from the
	// first answer: it starts nothing until it knows it.
	HeartbeatS  float64 `json:"heartbeat_s,omitempty"`
	FenceAfterS float64 `json:"fence_after_s,omitempty"`
	// PowerCaps are the power limits the server wants on the node's GPUs
	// now (gpufleet serve --power-caps on): one per GPU a measured job
	// holds, its charge in its rack's projected draw. The list is whole
	// each time: a GPU the agent capped that is not in it goes back to its
	// default limit (the job left, or caps are off). docs/POWER.md.
	PowerCaps []PowerCap `json:"power_caps,omitempty"`
}

// PowerCap is the power limit one GPU should run at, in watts; the agent
// sets it within the GPU's constraints.
type PowerCap struct {
	GPU   string  `json:"gpu"` // GPU UUID
	Watts float64 `json:"watts"`
}

// PowerCapFailure is a power cap the agent could not set, reported once.
type PowerCapFailure struct {
	GPU    string  `json:"gpu"`
	Watts  float64 `json:"watts"`
	Detail string  `json:"detail"`
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
	// Logs writes a job's log to w: its latest attempt's, or the one q
	// names; with q.Follow it keeps writing until the attempt ends or ctx
	// is done.
	Logs(ctx context.Context, p Principal, jobID string, q LogQuery, w io.Writer) error
}

// LogQuery says which of a job's logs to read, and how much.
type LogQuery struct {
	// Attempt names the attempt (an id of the job's); Previous takes the
	// one before the latest (the attempt a failover or preemption
	// stopped). Neither: the latest.
	Attempt  string
	Previous bool
	// Tail, when positive, is how many of the last lines to print.
	Tail int
	// Since, when positive, keeps the lines the server received in that
	// last stretch of time; SinceTime those received at or after it. Give
	// at most one. The server times each chunk an agent ships (every
	// second), so a line's time is when it reached the server.
	Since     time.Duration
	SinceTime time.Time
	// Follow keeps printing until the attempt ends.
	Follow bool
}

// MaxTailLines bounds LogQuery.Tail.
const MaxTailLines = 100000

// Validate checks the query at the edge.
func (q LogQuery) Validate() error {
	if q.Attempt != "" && q.Previous {
		return fmt.Errorf("%w: attempt and previous: give one", gpufleet.ErrInvalid)
	}
	if q.Attempt != "" {
		if err := gpufleet.CheckText("attempt", q.Attempt, maxIDLen, false); err != nil {
			return err
		}
	}
	if q.Tail < 0 || q.Tail > MaxTailLines {
		return fmt.Errorf("%w: tail %d: expected 0 to %d lines", gpufleet.ErrInvalid, q.Tail, MaxTailLines)
	}
	switch {
	case q.Since != 0 && !q.SinceTime.IsZero():
		return fmt.Errorf("%w: since and since_time: give one", gpufleet.ErrInvalid)
	case q.Since < 0:
		return fmt.Errorf("%w: since %s: expected a positive duration", gpufleet.ErrInvalid, q.Since)
	case !q.SinceTime.IsZero() && (q.SinceTime.Year() < 1970 || q.SinceTime.Year() > 9999):
		return fmt.Errorf("%w: since_time %s: expected a time from 1970 to 9999", gpufleet.ErrInvalid, q.SinceTime.Format(time.RFC3339))
	}
	return nil
}

// WatchService streams changes.
type WatchService interface {
	// Watch returns events visible to p after id since (0: from now) until
	// ctx is done.
	Watch(ctx context.Context, p Principal, since int64) (<-chan gpufleet.Event, error)
}

// Protocol versions a server of this build takes: its own and its
// neighbours, so that agents and servers can be upgraded one at a time.
// Version 2 adds heartbeat_s and fence_after_s to every heartbeat answer.
const (
	MinProtocolVersion = ProtocolVersion - 1
	MaxProtocolVersion = ProtocolVersion + 1
)

// Bounds on what one agent reports.
const (
	maxAgentLabels   = 128       // labels and versions, each
	maxLabelValueLen = 1024      // one label or version value
	maxReports       = 4096      // attempts in one report
	maxAcks          = 1024      // fault acks, validations
	maxIDLen         = 128       // attempt, job, order and GPU ids
	maxDetailLen     = 4096      // a validation's detail, an attempt's reason
	maxURLLen        = 2048      // metrics_url
	maxSamples       = 8 * 256   // GPUs and MIG instances of one node
	maxMIGPerGPU     = 8         // MIG instances of one GPU
	maxCounter       = 1 << 62   // no counter of a heartbeat is near this
	maxGPUSeconds    = 1e15      // per attempt, far beyond any real run
	maxEnergyJoules  = 1e18      // per attempt or GPU counter
	maxWork          = 1e21      // units of work of one attempt: a trillion tokens a second for 30 years
	maxMemoryBytes   = 1<<50 - 1 // one GPU's memory
)

func checkProtocol(v int) error {
	if v < MinProtocolVersion || v > MaxProtocolVersion {
		return fmt.Errorf("%w: protocol_version %d: this server speaks %d to %d; upgrade the agent or the server", gpufleet.ErrInvalid, v, MinProtocolVersion, MaxProtocolVersion)
	}
	return nil
}

// Validate checks a registration at the edge: the protocol version, the
// node name, bounded labels, versions and inventory, and the attempts it
// reports. Unknown fields were already ignored (the protocol is lenient).
func (r *RegisterRequest) Validate() error {
	if err := checkProtocol(r.ProtocolVersion); err != nil {
		return err
	}
	if err := gpufleet.ValidateNodeName("node", r.Node); err != nil {
		return err
	}
	if err := checkLabels("labels", r.Labels); err != nil {
		return err
	}
	if v, ok := r.Labels[capacity.PurchasedLabel]; ok {
		if _, err := capacity.ParsePurchased(v); err != nil {
			return fmt.Errorf("labels: %w", err)
		}
	}
	if v, ok := r.Labels[gpufleet.VirtualizationLabel]; ok {
		if _, err := gpufleet.ParseVirtualization(v); err != nil {
			return fmt.Errorf("labels: %w", err)
		}
	}
	if err := checkLabels("versions", r.Versions); err != nil {
		return err
	}
	if err := checkInventory(r.GPUs); err != nil {
		return err
	}
	if err := gpufleet.CheckText("metrics_url", r.MetricsURL, maxURLLen, false); err != nil {
		return err
	}
	if err := r.Bench.validate("bench"); err != nil {
		return err
	}
	return checkReports(r.Attempts)
}

// Validate checks a heartbeat at the edge, as RegisterRequest.Validate
// does a registration.
func (r *HeartbeatRequest) Validate() error {
	if err := checkProtocol(r.ProtocolVersion); err != nil {
		return err
	}
	if len(r.Samples) > maxSamples {
		return fmt.Errorf("%w: samples: %d, at most %d", gpufleet.ErrInvalid, len(r.Samples), maxSamples)
	}
	for i := range r.Samples {
		if err := r.Samples[i].validate(fmt.Sprintf("samples[%d]", i)); err != nil {
			return err
		}
	}
	if err := checkInventory(r.GPUs); err != nil {
		return err
	}
	if err := checkReports(r.Attempts); err != nil {
		return err
	}
	if err := gpufleet.CheckText("metrics_url", r.MetricsURL, maxURLLen, false); err != nil {
		return err
	}
	if len(r.PowerCapFailures) > maxSamples {
		return fmt.Errorf("%w: power_cap_failures: %d, at most %d", gpufleet.ErrInvalid, len(r.PowerCapFailures), maxSamples)
	}
	for i, f := range r.PowerCapFailures {
		if err := gpufleet.CheckText(fmt.Sprintf("power_cap_failures[%d].gpu", i), f.GPU, maxIDLen, false); err != nil {
			return err
		}
		if err := gpufleet.CheckText(fmt.Sprintf("power_cap_failures[%d].detail", i), f.Detail, maxDetailLen, true); err != nil {
			return err
		}
		if !(f.Watts >= 0 && f.Watts < 1e7) {
			return fmt.Errorf("%w: power_cap_failures[%d].watts: %v", gpufleet.ErrInvalid, i, f.Watts)
		}
	}
	if len(r.FaultAcks) > maxAcks || len(r.Validations) > maxAcks || len(r.MissingGPUs) > maxSamples {
		return fmt.Errorf("%w: fault_acks, validations or missing_gpus: too many entries", gpufleet.ErrInvalid)
	}
	for i, id := range r.FaultAcks {
		if err := gpufleet.CheckText(fmt.Sprintf("fault_acks[%d]", i), id, maxIDLen, false); err != nil {
			return err
		}
	}
	for i, v := range r.Validations {
		if err := gpufleet.CheckText(fmt.Sprintf("validations[%d].id", i), v.ID, maxIDLen, false); err != nil {
			return err
		}
		if err := gpufleet.CheckText(fmt.Sprintf("validations[%d].detail", i), v.Detail, maxDetailLen, true); err != nil {
			return err
		}
		if err := v.Bench.validate(fmt.Sprintf("validations[%d].bench", i)); err != nil {
			return err
		}
	}
	for i, id := range r.MissingGPUs {
		if err := gpufleet.CheckText(fmt.Sprintf("missing_gpus[%d]", i), id, maxIDLen, false); err != nil {
			return err
		}
	}
	if len(r.Bench) > maxAcks {
		return fmt.Errorf("%w: bench: too many entries", gpufleet.ErrInvalid)
	}
	for i := range r.Bench {
		if err := r.Bench[i].validate(fmt.Sprintf("bench[%d]", i)); err != nil {
			return err
		}
	}
	if len(r.Updates) > maxAcks {
		return fmt.Errorf("%w: updates: too many entries", gpufleet.ErrInvalid)
	}
	for i, u := range r.Updates {
		if err := gpufleet.CheckText(fmt.Sprintf("updates[%d].key", i), u.Key, maxIDLen, false); err != nil {
			return err
		}
		if err := gpufleet.CheckText(fmt.Sprintf("updates[%d].detail", i), u.Detail, maxDetailLen, true); err != nil {
			return err
		}
		if err := checkLabels(fmt.Sprintf("updates[%d].versions", i), u.Versions); err != nil {
			return err
		}
	}
	return nil
}

func checkLabels(field string, m map[string]string) error {
	if len(m) > maxAgentLabels {
		return fmt.Errorf("%w: %s: %d entries, at most %d", gpufleet.ErrInvalid, field, len(m), maxAgentLabels)
	}
	for k, v := range m {
		if k == "" {
			return fmt.Errorf("%w: %s: empty name", gpufleet.ErrInvalid, field)
		}
		if err := gpufleet.CheckText(field+" key", k, gpufleet.MaxWordLen, false); err != nil {
			return err
		}
		if err := gpufleet.CheckText(field+"."+k, v, maxLabelValueLen, false); err != nil {
			return err
		}
	}
	return nil
}

func checkInventory(gpus []gpufleet.NodeGPU) error {
	if len(gpus) > gpufleet.MaxNodeGPUs {
		return fmt.Errorf("%w: gpus: %d, at most %d per node", gpufleet.ErrInvalid, len(gpus), gpufleet.MaxNodeGPUs)
	}
	for i, g := range gpus {
		field := fmt.Sprintf("gpus[%d]", i)
		if g.UUID == "" {
			return fmt.Errorf("%w: %s.uuid: required", gpufleet.ErrInvalid, field)
		}
		for _, f := range []struct{ name, v string }{{"uuid", g.UUID}, {"model", g.Model}, {"nvlink_domain", g.NVLinkDomain}} {
			if err := gpufleet.CheckText(field+"."+f.name, f.v, maxIDLen, false); err != nil {
				return err
			}
		}
		if g.Index < 0 || g.Index >= gpufleet.MaxNodeGPUs || g.MemoryBytes < 0 || g.MemoryBytes > maxMemoryBytes {
			return fmt.Errorf("%w: %s: index %d or memory_bytes %d out of range", gpufleet.ErrInvalid, field, g.Index, g.MemoryBytes)
		}
		if len(g.MIGInstances) > maxMIGPerGPU {
			return fmt.Errorf("%w: %s.mig_instances: %d, at most %d", gpufleet.ErrInvalid, field, len(g.MIGInstances), maxMIGPerGPU)
		}
		for j, m := range g.MIGInstances {
			if m.UUID == "" {
				return fmt.Errorf("%w: %s.mig_instances[%d].uuid: required", gpufleet.ErrInvalid, field, j)
			}
			if err := gpufleet.CheckText(fmt.Sprintf("%s.mig_instances[%d]", field, j), m.UUID+m.Profile, 2*maxIDLen, false); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkReports(reports []AttemptReport) error {
	if len(reports) > maxReports {
		return fmt.Errorf("%w: attempts: %d, at most %d", gpufleet.ErrInvalid, len(reports), maxReports)
	}
	for i, a := range reports {
		field := fmt.Sprintf("attempts[%d]", i)
		for _, f := range []struct {
			name, v string
			max     int
		}{{"attempt_id", a.AttemptID, maxIDLen}, {"job_id", a.JobID, maxIDLen}, {"state", string(a.State), maxIDLen},
			{"reason", a.Reason, maxDetailLen}, {"reason_code", a.ReasonCode, maxIDLen}} {
			if err := gpufleet.CheckText(field+"."+f.name, f.v, f.max, f.name == "reason"); err != nil {
				return err
			}
		}
		for _, f := range []struct {
			name string
			v    float64
			max  float64
		}{{"gpu_seconds", a.GPUSeconds, maxGPUSeconds}, {"effective_gpu_seconds", a.EffectiveGPUSeconds, maxGPUSeconds}, {"energy_joules", a.EnergyJoules, maxEnergyJoules}} {
			if !(f.v >= 0 && f.v <= f.max) {
				return fmt.Errorf("%w: %s.%s %g: expected 0 to %g", gpufleet.ErrInvalid, field, f.name, f.v, f.max)
			}
		}
		if a.Work != nil && !(*a.Work >= 0 && *a.Work <= maxWork) {
			return fmt.Errorf("%w: %s.work %g: expected 0 to %g", gpufleet.ErrInvalid, field, *a.Work, maxWork)
		}
		if len(a.Events) > maxAttemptEvents {
			return fmt.Errorf("%w: %s.events: %d, at most %d", gpufleet.ErrInvalid, field, len(a.Events), maxAttemptEvents)
		}
		for k, e := range a.Events {
			if e.Kind != EventImagePull {
				return fmt.Errorf("%w: %s.events[%d].kind %s: expected %s", gpufleet.ErrInvalid, field, k, gpufleet.Quote(e.Kind), EventImagePull)
			}
			if err := gpufleet.CheckText(fmt.Sprintf("%s.events[%d].detail", field, k), e.Detail, maxDetailLen, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// EventImagePull is the event kind of an image pull on a node.
const EventImagePull = "attempt.image_pull"

// validate checks one GPU's sample: an id, fractions within 0-1, and
// readings within physical bounds, so that no report can poison the
// rollups or the health rules with NaN, negative or absurd values.
func (s *GPUSample) validate(field string) error {
	if s.UUID == "" {
		return fmt.Errorf("%w: %s.uuid: required", gpufleet.ErrInvalid, field)
	}
	if err := gpufleet.CheckText(field+".uuid", s.UUID, maxIDLen, false); err != nil {
		return err
	}
	for _, f := range []struct {
		name     string
		v        *float64
		min, max float64
	}{
		{"utilization", s.Utilization, 0, 1}, {"sm_activity", s.SMActivity, 0, 1}, {"dram_activity", s.DRAMActivity, 0, 1},
		{"tensor_activity", s.TensorActivity, 0, 1}, {"power_watts", s.PowerWatts, 0, 1e5},
		{"energy_joules_total", s.EnergyJoulesTotal, 0, maxEnergyJoules}, {"temperature_c", s.TemperatureC, -100, 500},
	} {
		if f.v != nil && !(*f.v >= f.min && *f.v <= f.max) {
			return fmt.Errorf("%w: %s.%s %g: expected %g to %g", gpufleet.ErrInvalid, field, f.name, *f.v, f.min, f.max)
		}
	}
	if s.MemoryUsedBytes != nil && (*s.MemoryUsedBytes < 0 || *s.MemoryUsedBytes > maxMemoryBytes) {
		return fmt.Errorf("%w: %s.memory_used_bytes %d: out of range", gpufleet.ErrInvalid, field, *s.MemoryUsedBytes)
	}
	if s.ECCUncorrected != nil && (*s.ECCUncorrected < 0 || *s.ECCUncorrected > maxCounter) {
		return fmt.Errorf("%w: %s.ecc_uncorrected %d: out of range", gpufleet.ErrInvalid, field, *s.ECCUncorrected)
	}
	if e := s.Evidence; e != nil {
		for _, f := range []struct {
			name string
			v    *int
			max  int
		}{{"pcie_gen", e.PCIeGen, 16}, {"pcie_width", e.PCIeWidth, 64}, {"pcie_max_gen", e.PCIeMaxGen, 16}, {"pcie_max_width", e.PCIeMaxWidth, 64},
			{"nvlink_links_up", e.NVLinkLinksUp, 64}, {"nvlink_links_total", e.NVLinkLinksTotal, 64}} {
			if f.v != nil && (*f.v < 0 || *f.v > f.max) {
				return fmt.Errorf("%w: %s.evidence.%s %d: expected 0 to %d", gpufleet.ErrInvalid, field, f.name, *f.v, f.max)
			}
		}
	}
	if len(s.ThrottleReasons) > 64 || len(s.XIDs) > maxAcks {
		return fmt.Errorf("%w: %s: too many throttle_reasons or xids", gpufleet.ErrInvalid, field)
	}
	for _, r := range s.ThrottleReasons {
		if err := gpufleet.CheckText(field+".throttle_reasons", r, maxIDLen, false); err != nil {
			return err
		}
	}
	for _, x := range s.XIDs {
		if x < 0 || x > 1<<20 {
			return fmt.Errorf("%w: %s.xids: %d out of range", gpufleet.ErrInvalid, field, x)
		}
	}
	return nil
}

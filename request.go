package gpufleet

import (
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strings"
	"time"
)

// Interconnect is what a multi-GPU job needs between its GPUs on a node.
type Interconnect string

// Interconnect requirements; empty is any.
const (
	AnyInterconnect Interconnect = "any"
	NVLink          Interconnect = "nvlink" // all GPUs in one NVLink domain
)

// UnmarshalText accepts nvlink, any or empty.
func (i *Interconnect) UnmarshalText(b []byte) error {
	v := Interconnect(b)
	if err := v.Validate(); err != nil {
		return err
	}
	*i = v
	return nil
}

// Validate checks the value.
func (i Interconnect) Validate() error {
	switch i {
	case "", AnyInterconnect, NVLink:
		return nil
	}
	return badValue("interconnect", string(i), "expected nvlink or any")
}

// Preference is how a job that several GPU models fit picks one.
type Preference string

// Preferences; empty takes the first model that fits.
const (
	Cheapest  Preference = "cheapest"  // lowest catalog price; unknown price last
	Fastest   Preference = "fastest"   // highest bf16 (else fp16) peak
	Efficient Preference = "efficient" // fewest joules per unit of work: the job's JoulesPerUnit, else highest peak per watt of TDP; unknown last
)

// UnmarshalText accepts cheapest, fastest, efficient or empty.
func (p *Preference) UnmarshalText(b []byte) error {
	v := Preference(b)
	if err := v.Validate(); err != nil {
		return err
	}
	*p = v
	return nil
}

// Validate checks the value.
func (p Preference) Validate() error {
	switch p {
	case "", Cheapest, Fastest, Efficient:
		return nil
	}
	return badValue("prefer", string(p), "expected cheapest, fastest or efficient")
}

// SimLoad is the load a job puts on simulated GPUs (it has no effect on
// real ones).
type SimLoad string

// Simulated loads; empty is the simulator's default.
const (
	SimCompute SimLoad = "compute"
	SimMemory  SimLoad = "memory"
	SimIdle    SimLoad = "idle"
)

// UnmarshalText accepts compute, memory, idle or empty.
func (l *SimLoad) UnmarshalText(b []byte) error {
	v := SimLoad(b)
	if err := v.Validate(); err != nil {
		return err
	}
	*l = v
	return nil
}

// Validate checks the value.
func (l SimLoad) Validate() error {
	switch l {
	case "", SimCompute, SimMemory, SimIdle:
		return nil
	}
	return badValue("sim_load", string(l), "expected compute, memory or idle")
}

// JobRequest is a job as a user asks for it: the body of POST
// /api/v1/jobs and the schema of job files (docs/JOBS.md). Validate checks
// it; the server fills what the planner decides for a job that describes
// its model.
type JobRequest struct {
	Name      string            `json:"name,omitempty"`
	Team      string            `json:"team,omitempty"`
	Priority  Priority          `json:"priority,omitempty"`
	RequestID string            `json:"request_id,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"` // what label selectors pick the job by (labels.go)
	Resources Resources         `json:"resources"`
	Command   []string          `json:"command"`
	Env       map[string]string `json:"env,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	// Launch is the image, stop signal, mounts and the rest of how the
	// command runs on its node.
	Launch
	TimeLimit   Duration `json:"time_limit,omitzero"` // "4h" or seconds
	Estimate    Duration `json:"estimate,omitzero"`
	Preemptible bool     `json:"preemptible,omitempty"`
	Grace       Duration `json:"grace,omitzero"`
	Retries     int      `json:"retries,omitempty"`
	SimLoad     SimLoad  `json:"sim_load,omitempty"`
	// Work, when set, reads the work the job reports from its output, for
	// energy per unit of work (docs/POWER.md#energy-per-unit-of-work).
	Work *WorkCounter `json:"work,omitempty"`
	// Model, when set, is admitted through the planner (memory-fit
	// admission).
	Model *ModelRequest `json:"model,omitempty"`
	// Strict rejects a request smaller than its plan instead of warning.
	Strict bool `json:"strict,omitempty"`
	// AllowUnsatisfiable queues a job that no node of the fleet could hold
	// now (the nodes have not joined yet) instead of refusing it.
	AllowUnsatisfiable bool `json:"allow_unsatisfiable,omitempty"`
}

// ModelRequest describes the model a job runs, as `gpufleet plan` takes
// it. The planner reads its vocabulary (mode, formats, optimizer).
type ModelRequest struct {
	Name         string         `json:"name,omitempty"`   // built-in name
	Config       map[string]any `json:"config,omitempty"` // inline config.json
	Mode         string         `json:"mode,omitempty"`   // inference or training
	Precision    string         `json:"precision,omitempty"`
	KVPrecision  string         `json:"kv_precision,omitempty"`
	Batch        int            `json:"batch,omitempty"`
	InputTokens  int            `json:"input_tokens,omitempty"`
	OutputTokens int            `json:"output_tokens,omitempty"`
	Seq          int            `json:"seq,omitempty"`
	MicroBatch   int            `json:"micro_batch,omitempty"`
	GlobalBatch  int            `json:"global_batch,omitempty"`
	Optimizer    string         `json:"optimizer,omitempty"`
	ZeRO         int            `json:"zero,omitempty"`
	Recompute    string         `json:"recompute,omitempty"`
	TP           int            `json:"tp,omitempty"`
	PP           int            `json:"pp,omitempty"`
	DP           int            `json:"dp,omitempty"`
	CP           int            `json:"cp,omitempty"` // context parallelism (training)
	EP           int            `json:"ep,omitempty"` // expert parallelism (a mixture of experts)
	// Tokens is the training run's tokens (default 1e12); FP32GradAccum
	// keeps fp32 gradients (Megatron's default).
	Tokens        int64 `json:"tokens,omitempty"`
	FP32GradAccum bool  `json:"fp32_grad_accum,omitempty"`
	// Scenario is offline (the largest batch that fits) or server (the
	// largest batch meeting TPOTTargetMS and TTFTTargetMS, the times per
	// output token and to the first token).
	Scenario     string  `json:"scenario,omitempty"`
	TPOTTargetMS float64 `json:"tpot_target_ms,omitempty"`
	TTFTTargetMS float64 `json:"ttft_target_ms,omitempty"`
	// Engine is the serving engine (vllm, trtllm, sglang; default vllm)
	// and MemoryHeadroom the share of each GPU's memory it must leave free
	// (default: the engine's own cap).
	Engine         string  `json:"engine,omitempty"`
	MemoryHeadroom float64 `json:"memory_headroom,omitempty"`
	// MaxModelLen and MaxNumBatchedTokens are the engine's limits of one
	// sequence and of one forward pass (vLLM's max_model_len and
	// max_num_batched_tokens); 0 takes the engine's defaults.
	MaxModelLen         int `json:"max_model_len,omitempty"`
	MaxNumBatchedTokens int `json:"max_num_batched_tokens,omitempty"`
	MaxNumSeqs          int `json:"max_num_seqs,omitempty"`
}

// reservedEnv are the variables gpufleet sets for every attempt.
var reservedEnv = []string{"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}

// Validate checks everything of a request that does not depend on the
// fleet, with the limits of limits.go. A request that describes its model
// may leave resources.gpus at 0 for the planner to fill.
func (r *JobRequest) Validate() error {
	if r.Name != "" {
		if err := ValidateName("name", r.Name); err != nil {
			return err
		}
	}
	if r.Team != "" {
		if err := ValidateName("team", r.Team); err != nil {
			return err
		}
	}
	if r.Priority != "" && !r.Priority.Valid() {
		_, err := ParsePriority(string(r.Priority))
		return InField("priority", err)
	}
	if err := CheckText("request_id", r.RequestID, MaxRequestIDLen, false); err != nil {
		return err
	}
	if err := ValidateLabels("labels", r.Labels); err != nil {
		return err
	}
	if err := validateCommand(r.Command); err != nil {
		return err
	}
	if err := validateEnv(r.Env); err != nil {
		return err
	}
	if r.Workdir != "" {
		if err := CheckText("workdir", r.Workdir, MaxPathLen, false); err != nil {
			return err
		}
		if !strings.HasPrefix(r.Workdir, "/") || path.Clean(r.Workdir) != r.Workdir {
			return fmt.Errorf("%w: workdir %s: expected a clean absolute path", ErrInvalid, Quote(r.Workdir))
		}
	}
	if err := r.Launch.Validate(); err != nil {
		return err
	}
	for _, d := range []struct {
		field string
		v     Duration
		max   Duration
	}{{"time_limit", r.TimeLimit, Duration(MaxDuration)}, {"estimate", r.Estimate, Duration(MaxDuration)}, {"grace", r.Grace, Duration(MaxGrace)}} {
		if d.v < 0 || d.v > d.max {
			return fmt.Errorf("%w: %s %s: expected at most %s", ErrInvalid, d.field, d.v, d.max)
		}
	}
	if err := ValidateCount("retries", r.Retries, 0, MaxRetries); err != nil {
		return err
	}
	if err := r.SimLoad.Validate(); err != nil {
		return InField("sim_load", err)
	}
	if r.Work != nil {
		if err := r.Work.Validate(); err != nil {
			return err
		}
	}
	if r.Model != nil {
		if err := r.Model.Validate(); err != nil {
			return err
		}
		if r.Resources.GPUs == 0 {
			res := r.Resources
			res.GPUs = 1 // the planner fills the count; check the rest
			return res.Validate()
		}
	}
	return r.Resources.Validate()
}

func validateCommand(cmd []string) error {
	if len(cmd) == 0 || strings.TrimSpace(cmd[0]) == "" {
		return fmt.Errorf("%w: command: required (the program and its arguments)", ErrInvalid)
	}
	if len(cmd) > MaxCommandArgs {
		return fmt.Errorf("%w: command: %d arguments, at most %d", ErrInvalid, len(cmd), MaxCommandArgs)
	}
	total := 0
	for i, a := range cmd {
		total += len(a) + 1
		if total > MaxCommandBytes {
			return fmt.Errorf("%w: command: more than %d bytes", ErrInvalid, MaxCommandBytes)
		}
		if err := CheckText(fmt.Sprintf("command[%d]", i), a, MaxCommandBytes, true); err != nil {
			return err
		}
	}
	return nil
}

func validateEnv(env map[string]string) error {
	if len(env) > MaxEnvVars {
		return fmt.Errorf("%w: env: %d variables, at most %d", ErrInvalid, len(env), MaxEnvVars)
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		if len(k) > MaxEnvKeyLen || !envKeyRe.MatchString(k) {
			return fmt.Errorf("%w: env %s: expected a variable name (letters, digits, '_', not starting with a digit, at most %d)", ErrInvalid, Quote(k), MaxEnvKeyLen)
		}
		total += len(k) + len(v) + 2
		if total > MaxEnvBytes {
			return fmt.Errorf("%w: env: more than %d bytes", ErrInvalid, MaxEnvBytes)
		}
		if slices.Contains(reservedEnv, k) || strings.HasPrefix(k, "GPUFLEET_") {
			return fmt.Errorf("%w: env %s is set by gpufleet", ErrInvalid, Quote(k))
		}
		if err := CheckText("env "+k, v, MaxEnvBytes, true); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks the model block's fields: lengths, vocabulary words and
// counts within their bounds (the planner checks the rest).
func (m *ModelRequest) Validate() error {
	if err := CheckText("model.name", m.Name, MaxWordLen, false); err != nil {
		return err
	}
	for _, f := range []struct {
		field string
		v     string
	}{{"model.mode", m.Mode}, {"model.precision", m.Precision}, {"model.kv_precision", m.KVPrecision}, {"model.optimizer", m.Optimizer}, {"model.recompute", m.Recompute}, {"model.engine", m.Engine}, {"model.scenario", m.Scenario}} {
		if err := CheckText(f.field, f.v, 80, false); err != nil {
			return err
		}
	}
	for _, n := range []struct {
		field string
		v     int
		max   int
	}{
		{"model.batch", m.Batch, 1 << 20}, {"model.input_tokens", m.InputTokens, 1 << 24}, {"model.output_tokens", m.OutputTokens, 1 << 24},
		{"model.seq", m.Seq, 1 << 24}, {"model.micro_batch", m.MicroBatch, 1 << 20}, {"model.global_batch", m.GlobalBatch, 1 << 24},
		{"model.zero", m.ZeRO, 3}, {"model.tp", m.TP, MaxNodeGPUs}, {"model.pp", m.PP, 1 << 10},
		{"model.dp", m.DP, MaxFleetGPUs}, {"model.cp", m.CP, 64}, {"model.ep", m.EP, MaxFleetGPUs},
		{"model.max_model_len", m.MaxModelLen, 1 << 24}, {"model.max_num_batched_tokens", m.MaxNumBatchedTokens, 1 << 24},
		{"model.max_num_seqs", m.MaxNumSeqs, 1 << 20},
	} {
		if err := ValidateCount(n.field, n.v, 0, n.max); err != nil {
			return err
		}
	}
	if m.Tokens < 0 || m.Tokens > 1e15 {
		return fmt.Errorf("%w: model.tokens %d: expected 0 (the default) to 1e15", ErrInvalid, m.Tokens)
	}
	for _, t := range []struct {
		field string
		v     float64
	}{{"model.tpot_target_ms", m.TPOTTargetMS}, {"model.ttft_target_ms", m.TTFTTargetMS}} {
		if !(t.v >= 0 && t.v <= 3.6e6) {
			return fmt.Errorf("%w: %s %g: expected milliseconds, 0 (none) to an hour", ErrInvalid, t.field, t.v)
		}
	}
	if !(m.MemoryHeadroom >= 0 && m.MemoryHeadroom <= 0.9) {
		return fmt.Errorf("%w: model.memory_headroom %g: expected 0 (the engine's own) to 0.9", ErrInvalid, m.MemoryHeadroom)
	}
	return nil
}

// Validate checks a resource request against the limits: counts, sizes,
// the vocabulary of every field, and bounded lists and labels.
func (r Resources) Validate() error {
	if r.Runtime != "" && r.Runtime != RuntimeContainer {
		return badValue("resources.runtime", r.Runtime, "expected container or nothing")
	}
	if err := ValidateCount("resources.gpus", r.GPUs, 1, MaxFleetGPUs); err != nil {
		return err
	}
	if err := ValidateCount("resources.nodes", r.Nodes, 0, min(r.GPUs, MaxFleetNodes)); err != nil {
		return err
	}
	if r.Nodes > 1 && r.GPUs%r.Nodes != 0 {
		return fmt.Errorf("%w: resources.nodes %d: expected a divisor of resources.gpus %d", ErrInvalid, r.Nodes, r.GPUs)
	}
	if r.Nodes > 1 && !r.Sharing.Exclusive() {
		return fmt.Errorf("%w: resources.sharing %s: shared GPUs (mig, timeslice) cannot span nodes", ErrInvalid, r.Sharing)
	}
	if len(r.GPUModels) > MaxListLen {
		return fmt.Errorf("%w: resources.gpu_models: %d entries, at most %d", ErrInvalid, len(r.GPUModels), MaxListLen)
	}
	for i, m := range r.GPUModels {
		if err := CheckText(fmt.Sprintf("resources.gpu_models[%d]", i), m, MaxWordLen, false); err != nil {
			return err
		}
		if strings.TrimSpace(m) == "" {
			return fmt.Errorf("%w: resources.gpu_models[%d]: empty", ErrInvalid, i)
		}
	}
	if r.GPUMemoryMinBytes < 0 || r.GPUMemoryMinBytes > MaxGPUMemory {
		return fmt.Errorf("%w: resources.gpu_memory_min_bytes %d: expected 0 to %d (%s)", ErrInvalid, r.GPUMemoryMinBytes, MaxGPUMemory, MaxGPUMemory)
	}
	if err := r.MinComputeCapability.Validate(); err != nil {
		return InField("resources.min_compute_capability", err)
	}
	if r.Precision != "" && !r.Precision.Valid() {
		_, err := ParsePrecision(string(r.Precision))
		return InField("resources.precision", err)
	}
	if err := r.Interconnect.Validate(); err != nil {
		return InField("resources.interconnect", err)
	}
	if err := r.Sharing.Validate(); err != nil {
		return InField("resources.sharing", err)
	}
	if err := r.Prefer.Validate(); err != nil {
		return InField("resources.prefer", err)
	}
	if len(r.JoulesPerUnit) > MaxListLen {
		return fmt.Errorf("%w: resources.joules_per_unit: %d models, at most %d", ErrInvalid, len(r.JoulesPerUnit), MaxListLen)
	}
	for _, m := range slices.Sorted(maps.Keys(r.JoulesPerUnit)) {
		if err := CheckText("resources.joules_per_unit key", m, MaxWordLen, false); err != nil {
			return err
		}
		if v := r.JoulesPerUnit[m]; strings.TrimSpace(m) == "" || !(v > 0 && v <= MaxJoulesPerUnit) {
			return fmt.Errorf("%w: resources.joules_per_unit[%s] %g: expected a GPU model and joules above 0, at most %g", ErrInvalid, Quote(m), v, MaxJoulesPerUnit)
		}
	}
	if len(r.NodeSelector) > MaxListLen {
		return fmt.Errorf("%w: resources.node_selector: %d labels, at most %d", ErrInvalid, len(r.NodeSelector), MaxListLen)
	}
	for _, k := range slices.Sorted(maps.Keys(r.NodeSelector)) {
		if k == "" {
			return fmt.Errorf("%w: resources.node_selector: empty label name", ErrInvalid)
		}
		if err := CheckText("resources.node_selector key", k, MaxWordLen, false); err != nil {
			return err
		}
		if err := CheckText("resources.node_selector."+k, r.NodeSelector[k], MaxWordLen, false); err != nil {
			return err
		}
	}
	if r.Stack != "" {
		if err := ValidateName("resources.stack", r.Stack); err != nil {
			return err
		}
	}
	if len(r.Requires) > len(StackComponents) {
		return fmt.Errorf("%w: resources.requires: %d components, at most %d", ErrInvalid, len(r.Requires), len(StackComponents))
	}
	if _, err := ParseStackRequirements("resources.requires", r.Requires); err != nil {
		return err
	}
	if math.IsNaN(r.CPUs) || r.CPUs < 0 || r.CPUs > MaxCPUs {
		return fmt.Errorf("%w: resources.cpus %g: expected a CPU count from 0 (no limit) to %d", ErrInvalid, r.CPUs, MaxCPUs)
	}
	if r.MemoryBytes != 0 && (r.MemoryBytes < MinHostMemory || r.MemoryBytes > MaxHostMemory) {
		return fmt.Errorf("%w: resources.memory_bytes %d: expected 0 (no limit) or %s to %s", ErrInvalid, r.MemoryBytes, MinHostMemory, MaxHostMemory)
	}
	return r.validateIsolation()
}

// validateIsolation checks the isolation and overhead requirements, and
// that the job's own sharing can meet them on some node: time-slicing
// never isolates hard, and costs its switching overhead even on bare
// metal.
func (r Resources) validateIsolation() error {
	if r.Isolation != "" {
		if _, err := ParseIsolation(string(r.Isolation)); err != nil {
			return InField("resources.isolation", err)
		}
	}
	if r.Overhead != nil {
		if err := r.Overhead.Validate(); err != nil {
			return InField("resources.overhead", err)
		}
	}
	best := MechanismOf(Virtualization{Kind: BareMetal}, r.Sharing)
	if !best.Isolation().Meets(r.Isolation) {
		return fmt.Errorf("%w: resources.isolation %s: sharing %s gives %s isolation at best (%s memory, %s fault isolation); ask exclusive or mig:PROFILE, or isolation soft",
			ErrInvalid, r.Isolation, r.Sharing, best.Isolation(), best.Memory, best.Fault)
	}
	if !best.Meets("", r.Overhead) {
		return fmt.Errorf("%w: resources.overhead %s: sharing %s costs %.0f%% at best", ErrInvalid, r.Overhead, r.Sharing, best.Overhead*100)
	}
	return nil
}

// Validate checks a stored job as JobRequest.Validate checks a request:
// the store is an edge too, since a row may have been written by hand, by
// another version or by a bug. The leader fails a job that does not pass
// (reason code invalid_request) instead of scheduling it.
func (j *Job) Validate() error {
	if j.Defect != "" {
		return fmt.Errorf("%w: stored job: %s", ErrInvalid, j.Defect)
	}
	if !j.Priority.Valid() {
		_, err := ParsePriority(string(j.Priority))
		return InField("priority", err)
	}
	if err := j.Resources.Validate(); err != nil {
		return err
	}
	if err := ValidateLabels("labels", j.Labels); err != nil {
		return err
	}
	if err := validateCommand(j.Command); err != nil {
		return err
	}
	if err := validateEnv(j.Env); err != nil {
		return err
	}
	if err := j.Launch.Validate(); err != nil {
		return err
	}
	if j.Container() && j.Resources.Runtime != RuntimeContainer {
		return fmt.Errorf("%w: resources.runtime %s: a job with an image needs %s", ErrInvalid, Quote(j.Resources.Runtime), RuntimeContainer)
	}
	if j.Work != nil {
		if err := j.Work.Validate(); err != nil {
			return err
		}
	}
	for _, d := range []struct {
		field string
		v     *float64
		max   time.Duration
	}{{"time_limit_s", j.TimeLimitS, MaxDuration}, {"estimate_s", j.EstimateS, MaxDuration}, {"grace_s", j.GraceS, MaxGrace}} {
		if d.v != nil && !(*d.v >= 0 && *d.v <= d.max.Seconds()) {
			return fmt.Errorf("%w: %s %g: expected 0 to %g", ErrInvalid, d.field, *d.v, d.max.Seconds())
		}
	}
	return ValidateCount("retries.max", j.Retries.Max, 0, MaxRetries)
}

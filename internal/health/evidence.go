package health

import (
	"time"

	"github.com/gpufleet/gpufleet/internal/gpu"
)

// GPUEvidence is what one GPU showed since the last evaluation. Readings
// are pointers: nil means the GPU did not report it (unsupported, MIG
// mode, off the bus), which never triggers a rule and is never read as
// zero. The server fills it from the agent's heartbeat.
type GPUEvidence struct {
	Index int
	UUID  string
	Model string
	// Present is false when the GPU is in the node's inventory but the
	// node did not report it in this heartbeat (it fell off the bus).
	Present bool
	// XIDs raised since the last evaluation, in any order, repeats allowed.
	XIDs []int

	// Counters are the GPU's error counters and link state, as the GPU
	// backend read them and the heartbeat carried them.
	gpu.Counters

	// ClockEventReasons is NVML's clock-event (throttle) reason bitmask
	// set the whole interval; see the gpu.ClockEvent* constants.
	ClockEventReasons *uint64

	// Utilization is the fraction of time a kernel ran (0-1), used to tell
	// a GPU under load from an idle one.
	Utilization *float64
}

// NodeEvidence is what one node showed since the last evaluation.
type NodeEvidence struct {
	Node string
	// InventoryGPUs is the number of GPUs the node registered with. GPUs
	// beyond those listed in GPUs are missing.
	InventoryGPUs int
	// HeartbeatAge is how long ago the last heartbeat arrived, at now.
	HeartbeatAge time.Duration
	// HeartbeatGrace is how long the node may be silent; zero takes
	// Config.HeartbeatGrace.
	HeartbeatGrace time.Duration
	GPUs           []GPUEvidence
	// Bench are the node's benchmark figures under their gate against
	// their model's fleet median (internal/bench judges them).
	Bench []BenchShortfall
}

// BenchShortfall is one benchmark figure under its gate.
type BenchShortfall struct {
	// GPU is the GPU's index, or NodeGPU for a figure of the node (an
	// all-reduce across its GPUs).
	GPU  int
	UUID string
	// Reason is a short phrase; Evidence the sentence with the figures.
	Reason, Evidence string
	// Test is the microbenchmark the figure comes from (copy, stress,
	// ...), so that a re-check runs it again.
	Test string
}

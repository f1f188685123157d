package health

import "time"

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

	// ECC error counters: volatile since the last driver load, aggregate
	// over the GPU's life.
	ECCCorrectedVolatile    *uint64
	ECCUncorrectedVolatile  *uint64
	ECCCorrectedAggregate   *uint64
	ECCUncorrectedAggregate *uint64
	// Page retirement (before Ampere).
	RetiredPagesSBE     *uint64
	RetiredPagesDBE     *uint64
	RetiredPagesPending *bool
	// Row remapping (Ampere and newer).
	RemappedRowsCorrectable   *uint64
	RemappedRowsUncorrectable *uint64
	RowRemapPending           *bool
	RowRemapFailure           *bool

	// ClockEventReasons is NVML's clock-event (throttle) reason bitmask;
	// see the ClockEvent* constants.
	ClockEventReasons *uint64

	PCIeGen      *int
	PCIeWidth    *int
	PCIeMaxGen   *int
	PCIeMaxWidth *int
	// PCIeReplayCount is the link's replay counter (monotonic until the
	// driver reloads).
	PCIeReplayCount *uint64

	NVLinkLinksUp    *int
	NVLinkLinksTotal *int
	// NVLinkErrors is the sum of the links' CRC, replay and recovery error
	// counters.
	NVLinkErrors *uint64

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
}

// NVML clock-event reason bits (nvmlClocksEventReason*), as
// GetCurrentClocksEventReasons returns them (telemetry.md §1).
const (
	ClockEventGPUIdle           uint64 = 0x1
	ClockEventAppClocksSetting  uint64 = 0x2
	ClockEventSWPowerCap        uint64 = 0x4
	ClockEventHWSlowdown        uint64 = 0x8
	ClockEventSyncBoost         uint64 = 0x10
	ClockEventSWThermalSlowdown uint64 = 0x20
	ClockEventHWThermalSlowdown uint64 = 0x40
	ClockEventHWPowerBrake      uint64 = 0x80
)

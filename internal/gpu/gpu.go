// Package gpu is the agent's view of the hardware: a small Backend
// interface that returns value snapshots, with two implementations chosen
// once at start: nvml (real GPUs through NVIDIA's NVML, linux and cgo only)
// and simgpu (simulated GPUs built from catalog models, with injectable
// faults, for machines without GPUs).
//
// A reading the device does not support is absent (a nil pointer), never a
// zero.
package gpu

import (
	"context"
	"errors"
	"time"

	"github.com/gpufleet/gpufleet"
)

// ErrUnavailable means the backend cannot run here (no NVML library, no
// cgo, or a platform without it).
var ErrUnavailable = errors.New("gpu backend unavailable")

// MIGInstance is one MIG instance of a GPU in MIG mode.
type MIGInstance struct {
	UUID        string `json:"uuid"` // MIG-...
	Profile     string `json:"profile"`
	MemoryBytes int64  `json:"memory_bytes"`
	// GPUInstanceID is the driver's GPU instance id on its GPU (what
	// dcgm-exporter labels GPU_I_ID).
	GPUInstanceID int `json:"gpu_instance_id"`
}

// MIGSample is one reading of one MIG instance: NVML reads memory per
// instance; utilization rates are not available in MIG mode.
type MIGSample struct {
	UUID            string `json:"uuid"`
	MemoryUsedBytes *int64 `json:"memory_used_bytes"`
	MemoryFreeBytes *int64 `json:"memory_free_bytes"`
}

// Device is one GPU as discovered.
type Device struct {
	Index             int                        `json:"index"`
	UUID              string                     `json:"uuid"`
	Name              string                     `json:"name"`  // as NVML reports it
	Model             string                     `json:"model"` // catalog id, or Name when unknown
	PCIBusID          string                     `json:"pci_bus_id"`
	Serial            string                     `json:"serial,omitempty"`
	Architecture      string                     `json:"architecture,omitempty"`
	ComputeCapability gpufleet.ComputeCapability `json:"compute_capability,omitzero"`
	MemoryBytes       int64                      `json:"memory_bytes"`
	NVLinkPeers       []int                      `json:"nvlink_peers,omitempty"` // indexes reachable over NVLink
	NVLinkDomain      string                     `json:"nvlink_domain,omitempty"`
	MIGMode           bool                       `json:"mig_mode"`
	MIG               []MIGInstance              `json:"mig,omitempty"`
	// Virtualization is how this GPU reaches the OS, as the driver says
	// (NVML's virtualization mode): "passthrough", "vgpu" (a guest's
	// virtual GPU), "vgpu-host" (a hypervisor host sharing it out to VMs),
	// or empty for none or unknown.
	Virtualization string `json:"virtualization,omitempty"`
}

// Versions is the software and firmware stack of a node and its GPUs.
type Versions struct {
	Driver string `json:"driver"`
	CUDA   string `json:"cuda"`
	NVML   string `json:"nvml,omitempty"`
	// Per GPU UUID.
	VBIOS       map[string]string `json:"vbios,omitempty"`
	InfoROM     map[string]string `json:"inforom,omitempty"`
	GSPFirmware map[string]string `json:"gsp_firmware,omitempty"`
}

// Process is a process holding GPU memory.
type Process struct {
	PID           int   `json:"pid"`
	UsedBytes     int64 `json:"used_bytes"`
	GPUInstanceID *int  `json:"gpu_instance_id,omitempty"`
}

// Clock-event (throttle) reason bits, as NVML defines them.
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

// Sample is one reading of one GPU. Ratios are 0-1.
type Sample struct {
	UUID string    `json:"uuid"`
	Time time.Time `json:"time"`

	Utilization       *float64 `json:"utilization"`        // fraction of time a kernel ran
	MemoryUtilization *float64 `json:"memory_utilization"` // fraction of time memory was read or written
	// GPM (Hopper and newer); absent elsewhere.
	SMActivity     *float64 `json:"sm_activity"`
	SMOccupancy    *float64 `json:"sm_occupancy"`
	TensorActivity *float64 `json:"tensor_activity"`
	DRAMActivity   *float64 `json:"dram_activity"`

	MemoryUsedBytes *int64 `json:"memory_used_bytes"`
	MemoryFreeBytes *int64 `json:"memory_free_bytes"`

	PowerWatts        *float64 `json:"power_watts"`
	PowerLimitWatts   *float64 `json:"power_limit_watts"`
	EnergyMillijoules *uint64  `json:"energy_millijoules"` // monotonic since driver load

	TemperatureC       *float64 `json:"temperature_c"`
	MemoryTemperatureC *float64 `json:"memory_temperature_c"`
	SMClockMHz         *float64 `json:"sm_clock_mhz"`
	MemoryClockMHz     *float64 `json:"memory_clock_mhz"`
	// ClockEventReasons is the NVML bitmask (ClockEvent* constants).
	ClockEventReasons  *uint64 `json:"clock_event_reasons"`
	PowerViolationNs   *uint64 `json:"power_violation_ns"`
	ThermalViolationNs *uint64 `json:"thermal_violation_ns"`

	// Video engines: the fraction of time the encoder (NVENC) and decoder
	// (NVDEC) were busy; absent on a GPU without them.
	EncoderUtilization *float64 `json:"encoder_utilization"`
	DecoderUtilization *float64 `json:"decoder_utilization"`
	// PCIe throughput over NVML's short sampling window, in bytes per
	// second, transmitted (to the host) and received.
	PCIeTxBytesPerSecond *float64 `json:"pcie_tx_bytes_per_second"`
	PCIeRxBytesPerSecond *float64 `json:"pcie_rx_bytes_per_second"`
	// NVLink data bytes transmitted and received over all links, monotonic
	// since the driver loaded (absent without NVLink).
	NVLinkTxBytes *uint64 `json:"nvlink_tx_bytes"`
	NVLinkRxBytes *uint64 `json:"nvlink_rx_bytes"`

	// MIG is one reading per MIG instance of a GPU in MIG mode.
	MIG []MIGSample `json:"mig,omitempty"`

	// Counters are the error counters and link state, what the health
	// rules read.
	Counters

	Processes []Process `json:"processes,omitempty"`
}

// Counters are a GPU's error counters and link state in one reading:
// what the health rules judge. The agent reads them into Sample, sends
// the interval's last reading in its heartbeat (api.GPUEvidence) and the
// server hands them to the rules (health.GPUEvidence): one type all the
// way, so a counter added here reaches the rules.
type Counters struct {
	// ECC error counts: volatile since the last driver load, aggregate
	// over the GPU's life.
	ECCCorrectedVolatile    *uint64 `json:"ecc_corrected_volatile"`
	ECCUncorrectedVolatile  *uint64 `json:"ecc_uncorrected_volatile"`
	ECCCorrectedAggregate   *uint64 `json:"ecc_corrected_aggregate"`
	ECCUncorrectedAggregate *uint64 `json:"ecc_uncorrected_aggregate"`
	// Page retirement (before Ampere).
	RetiredPagesSBE     *uint64 `json:"retired_pages_sbe"`
	RetiredPagesDBE     *uint64 `json:"retired_pages_dbe"`
	RetiredPagesPending *bool   `json:"retired_pages_pending"`
	// Row remapping (Ampere and newer).
	RemappedRowsCorrectable   *uint64 `json:"remapped_rows_correctable"`
	RemappedRowsUncorrectable *uint64 `json:"remapped_rows_uncorrectable"`
	RowRemapPending           *bool   `json:"row_remap_pending"`
	RowRemapFailure           *bool   `json:"row_remap_failure"`

	PCIeGen      *int `json:"pcie_gen"`
	PCIeWidth    *int `json:"pcie_width"`
	PCIeMaxGen   *int `json:"pcie_max_gen"`
	PCIeMaxWidth *int `json:"pcie_max_width"`
	// PCIeReplayCount is the link's replay counter (monotonic until the
	// driver reloads).
	PCIeReplayCount *uint64 `json:"pcie_replay_count"`

	NVLinkLinksUp    *int    `json:"nvlink_links_up"`
	NVLinkLinksTotal *int    `json:"nvlink_links_total"`
	NVLinkErrors     *uint64 `json:"nvlink_errors"` // CRC, replay and recovery counts added
}

// EventKind names a hardware event.
type EventKind string

// Event kinds.
const (
	EventXID    EventKind = "xid"
	EventECCSBE EventKind = "ecc-sbe"
	EventECCDBE EventKind = "ecc-dbe"
)

// Event is an XID or ECC event of a GPU.
type Event struct {
	UUID string    `json:"uuid"`
	Time time.Time `json:"time"`
	Kind EventKind `json:"kind"`
	XID  int       `json:"xid,omitempty"`
}

// Backend reads GPUs. Implementations return value snapshots and are safe
// for concurrent use.
type Backend interface {
	// Devices discovers the GPUs (a GPU that fell off the bus is missing).
	Devices(ctx context.Context) ([]Device, error)
	// Versions reads the driver, CUDA and firmware versions.
	Versions(ctx context.Context) (Versions, error)
	// Sample reads every GPU once.
	Sample(ctx context.Context) ([]Sample, error)
	// Events returns the XID and ECC events since the last call, waiting
	// at most wait for the first one.
	Events(ctx context.Context, wait time.Duration) ([]Event, error)
	// Close releases the backend.
	Close() error
}

// ErrNoPowerCaps means a GPU's power limit cannot be set here: the
// driver or board does not support it, or the agent lacks the
// permission (NVML needs root). It is no failure of the node: the node
// reports that it cannot cap power, and the server's stop policy holds
// its racks' budgets instead (docs/POWER.md).
var ErrNoPowerCaps = errors.New("gpu power limit cannot be set here")

// PowerLimits are the power management limits of one GPU, in watts: the
// range a limit may be set in, the board's default and the limit in
// force now.
type PowerLimits struct {
	MinWatts     float64 `json:"min_watts"`
	MaxWatts     float64 `json:"max_watts"`
	DefaultWatts float64 `json:"default_watts"`
	// CurrentWatts is the limit in force; 0 when the backend cannot tell.
	CurrentWatts float64 `json:"current_watts,omitempty"`
}

// Clamp is watts within [MinWatts, MaxWatts].
func (l PowerLimits) Clamp(watts float64) float64 {
	return min(max(watts, l.MinWatts), l.MaxWatts)
}

// PowerCapper is a backend that can set GPUs' power limits (NVML's power
// management limit), an optional ability the agent finds once with a
// type assertion. Both methods return an error wrapping ErrNoPowerCaps
// where the GPU's limit cannot be set here.
type PowerCapper interface {
	// PowerLimits reads the limits of the GPU at index.
	PowerLimits(ctx context.Context, index int) (PowerLimits, error)
	// SetPowerLimit sets the GPU's power limit to watts, which must lie
	// within its PowerLimits (else an error wrapping gpufleet.ErrInvalid).
	SetPowerLimit(ctx context.Context, index int, watts float64) error
}

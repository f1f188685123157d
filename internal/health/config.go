package health

import (
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Config holds the thresholds of the rules. A zero field takes its value
// from DefaultConfig, so Config{} behaves like DefaultConfig().
type Config struct {
	// EventHold is how long a condition raised by an event (an XID, a
	// counter that grew too fast) stays in force after its evidence was
	// last seen, unless State.ClearGPU clears it sooner (after a repair).
	// Default 24h.
	EventHold time.Duration

	// ECCUncorrectedGrowth is the growth of an uncorrectable (double-bit)
	// ECC counter between two evaluations that makes a GPU unhealthy.
	// Default 1: any uncorrectable error counts.
	ECCUncorrectedGrowth uint64
	// ECCCorrectedGrowth per ECCCorrectedWindow of a correctable
	// (single-bit) ECC counter degrades a GPU. Default 100 per hour. NVIDIA
	// gives no number here (DCGM's own SBE limit is a placeholder), so this
	// is gpufleet's choice; XID 92 is the driver's own high-rate signal.
	ECCCorrectedGrowth uint64
	ECCCorrectedWindow time.Duration

	// RetiredPagesHigh retired pages (single- plus double-bit) degrade a
	// GPU; RetiredPagesLimit make it a replacement candidate. Defaults 15
	// and 60, DCGM's soft and hard retired-page limits
	// (dcgm_gpu_hardware_limits.h); the InfoROM holds at most 64.
	RetiredPagesHigh  uint64
	RetiredPagesLimit uint64

	// ThrottleSustain is how long a thermal, hardware-slowdown or
	// power-brake clock-event reason must be present in every evaluation
	// before it counts. Default 5m.
	ThrottleSustain time.Duration

	// PCIeDowngradeSustain is how long a PCIe link must stay below its
	// maximum generation (under load) or width (at any load) before it
	// counts. Default 5m.
	PCIeDowngradeSustain time.Duration
	// PCIeLoadUtilization is the utilization (0-1) from which a GPU is
	// under load, so that a lower link generation is a fault and not power
	// saving. Default 0.25.
	PCIeLoadUtilization float64
	// PCIeReplayGrowth per PCIeReplayWindow degrades a GPU. Default 8 per
	// minute, the rate DCGM calls the most the driver team recommends.
	PCIeReplayGrowth uint64
	PCIeReplayWindow time.Duration

	// NVLinkErrorGrowth per NVLinkErrorWindow of the summed NVLink error
	// counter (CRC, replay, recovery) degrades a GPU. Default 6000 per
	// minute: DCGM counts CRC errors only from 100 per second.
	NVLinkErrorGrowth uint64
	NVLinkErrorWindow time.Duration

	// AppXIDBurst application-class XIDs (13, 31, 43, ...) on one GPU
	// within AppXIDWindow degrade it: one is the application's fault, a
	// stream of them across jobs points at the GPU. Default 10 per hour.
	AppXIDBurst  uint64
	AppXIDWindow time.Duration

	// HeartbeatGrace is how long a node may be silent before the
	// heartbeat-lost condition, when the evidence carries no grace of its
	// own. Default 30s, the server's default.
	HeartbeatGrace time.Duration

	// QuarantineMaxFraction is the share of the fleet's GPUs that automatic
	// quarantine may hold out of service at once (see CheckQuarantine).
	// Default 0.10.
	QuarantineMaxFraction float64
}

// DefaultConfig returns the default thresholds.
func DefaultConfig() Config {
	return Config{
		EventHold:             24 * time.Hour,
		ECCUncorrectedGrowth:  1,
		ECCCorrectedGrowth:    100,
		ECCCorrectedWindow:    time.Hour,
		RetiredPagesHigh:      15,
		RetiredPagesLimit:     60,
		ThrottleSustain:       5 * time.Minute,
		PCIeDowngradeSustain:  5 * time.Minute,
		PCIeLoadUtilization:   0.25,
		PCIeReplayGrowth:      8,
		PCIeReplayWindow:      time.Minute,
		NVLinkErrorGrowth:     6000,
		NVLinkErrorWindow:     time.Minute,
		AppXIDBurst:           10,
		AppXIDWindow:          time.Hour,
		HeartbeatGrace:        30 * time.Second,
		QuarantineMaxFraction: 0.10,
	}
}

// withDefaults fills zero (and negative) fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	dur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	cnt := func(v *uint64, def uint64) {
		if *v == 0 {
			*v = def
		}
	}
	dur(&c.EventHold, d.EventHold)
	cnt(&c.ECCUncorrectedGrowth, d.ECCUncorrectedGrowth)
	cnt(&c.ECCCorrectedGrowth, d.ECCCorrectedGrowth)
	dur(&c.ECCCorrectedWindow, d.ECCCorrectedWindow)
	cnt(&c.RetiredPagesHigh, d.RetiredPagesHigh)
	cnt(&c.RetiredPagesLimit, d.RetiredPagesLimit)
	dur(&c.ThrottleSustain, d.ThrottleSustain)
	dur(&c.PCIeDowngradeSustain, d.PCIeDowngradeSustain)
	if !(c.PCIeLoadUtilization > 0 && c.PCIeLoadUtilization <= 1) {
		c.PCIeLoadUtilization = d.PCIeLoadUtilization
	}
	cnt(&c.PCIeReplayGrowth, d.PCIeReplayGrowth)
	dur(&c.PCIeReplayWindow, d.PCIeReplayWindow)
	cnt(&c.NVLinkErrorGrowth, d.NVLinkErrorGrowth)
	dur(&c.NVLinkErrorWindow, d.NVLinkErrorWindow)
	cnt(&c.AppXIDBurst, d.AppXIDBurst)
	dur(&c.AppXIDWindow, d.AppXIDWindow)
	dur(&c.HeartbeatGrace, d.HeartbeatGrace)
	if !(c.QuarantineMaxFraction > 0 && c.QuarantineMaxFraction <= 1) {
		c.QuarantineMaxFraction = d.QuarantineMaxFraction
	}
	return c
}

// Validate reports a setting that cannot work: a negative duration, a
// fraction outside 0-1, or a high retired-page mark above the limit. Zero
// fields are fine (they take their defaults).
func (c Config) Validate() error {
	durations := []struct {
		name string
		d    time.Duration
	}{
		{"event hold", c.EventHold}, {"ecc corrected window", c.ECCCorrectedWindow},
		{"throttle sustain", c.ThrottleSustain}, {"pcie downgrade sustain", c.PCIeDowngradeSustain},
		{"pcie replay window", c.PCIeReplayWindow}, {"nvlink error window", c.NVLinkErrorWindow},
		{"app xid window", c.AppXIDWindow}, {"heartbeat grace", c.HeartbeatGrace},
	}
	for _, f := range durations {
		if f.d < 0 {
			return fmt.Errorf("%w: health %s %s is negative", gpufleet.ErrInvalid, f.name, f.d)
		}
	}
	if c.PCIeLoadUtilization < 0 || c.PCIeLoadUtilization > 1 {
		return fmt.Errorf("%w: health pcie load utilization %g is outside 0-1", gpufleet.ErrInvalid, c.PCIeLoadUtilization)
	}
	if c.QuarantineMaxFraction < 0 || c.QuarantineMaxFraction > 1 {
		return fmt.Errorf("%w: health quarantine max fraction %g is outside 0-1", gpufleet.ErrInvalid, c.QuarantineMaxFraction)
	}
	n := c.withDefaults()
	if n.RetiredPagesHigh > n.RetiredPagesLimit {
		return fmt.Errorf("%w: health retired pages high mark %d is above the limit %d", gpufleet.ErrInvalid, n.RetiredPagesHigh, n.RetiredPagesLimit)
	}
	return nil
}

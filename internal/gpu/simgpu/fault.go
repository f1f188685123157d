package simgpu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// FaultKind names a simulated hardware fault.
type FaultKind string

// Fault kinds. docs/GPU.md has the evidence each leaves.
const (
	// FaultXID raises one XID event with Fault.XID (79 behaves as
	// FaultFallenOffBus).
	FaultXID FaultKind = "xid"
	// FaultECCSingleBit: corrected ECC counters rise (one now, one every
	// SBEIntervalSeconds while active), each with an ecc-sbe event.
	FaultECCSingleBit FaultKind = "ecc-sbe"
	// FaultECCDoubleBit: uncorrected counters +1, ecc-dbe event, XID 48;
	// the driver then records a row remap (Ampere+) or a page retirement
	// (older), pending until reset, with XID 63.
	FaultECCDoubleBit FaultKind = "ecc-dbe"
	// FaultRowRemapPending: an uncorrectable row remap waits for a reset
	// (XID 63). Ampere and newer.
	FaultRowRemapPending FaultKind = "row-remap-pending"
	// FaultRowRemapFailure: a bank ran out of spare rows (XID 64). Ampere
	// and newer.
	FaultRowRemapFailure FaultKind = "row-remap-failure"
	// FaultThermalRunaway: cooling is lost; the temperature climbs past
	// slowdown, thermal clock-event bits are set and SM clocks drop.
	FaultThermalRunaway FaultKind = "thermal-runaway"
	// FaultPowerBrake: the board asserts HW power brake; clocks and power
	// are cut.
	FaultPowerBrake FaultKind = "power-brake"
	// FaultPCIeDowngrade: the link trains one generation lower at half
	// width and the replay counter grows.
	FaultPCIeDowngrade FaultKind = "pcie-downgrade"
	// FaultNVLinkDown: Fault.Links links (default 1) go down, NVLink error
	// counters grow, XID 74. With every link down the GPU loses its peers.
	FaultNVLinkDown FaultKind = "nvlink-down"
	// FaultFallenOffBus: XID 79, then the GPU is missing from Devices,
	// Versions and Sample.
	FaultFallenOffBus FaultKind = "fallen-off-bus"
	// FaultSlowMemory: the memory runs slow (a degraded HBM stack, memory
	// clocks held down): device memory bandwidth falls to
	// SlowMemoryFactor and the memory clock reads lower. Nothing else
	// shows it; the copy benchmark does.
	FaultSlowMemory FaultKind = "slow-memory"
	// FaultNICDown: the GPU's rail of the scale-out network is down (its
	// NIC's link, or the cable to the leaf switch). NVML shows nothing;
	// the all-reduce across nodes runs on the rails left
	// (docs/BENCH.md#across-nodes).
	FaultNICDown FaultKind = "nic-down"
)

// FaultKinds lists every kind, for help texts.
var FaultKinds = []FaultKind{
	FaultXID, FaultECCSingleBit, FaultECCDoubleBit, FaultRowRemapPending, FaultRowRemapFailure,
	FaultThermalRunaway, FaultPowerBrake, FaultPCIeDowngrade, FaultNVLinkDown, FaultFallenOffBus, FaultSlowMemory, FaultNICDown,
}

// Fault is one injected fault.
type Fault struct {
	Kind  FaultKind `json:"kind"`
	XID   int       `json:"xid,omitempty"`   // FaultXID
	Links int       `json:"links,omitempty"` // FaultNVLinkDown; 0 means 1
}

// ParseFault reads "xid:13", "ecc-dbe", "nvlink-down:18", "thermal-runaway"...
func ParseFault(s string) (Fault, error) {
	kind, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
	f := Fault{Kind: FaultKind(strings.ToLower(kind))}
	known := false
	for _, k := range FaultKinds {
		known = known || k == f.Kind
	}
	if !known {
		return Fault{}, fmt.Errorf("%w: fault %q: want one of %v", gpufleet.ErrInvalid, s, FaultKinds)
	}
	n := 0
	if hasArg {
		var err error
		if n, err = strconv.Atoi(arg); err != nil || n < 1 {
			return Fault{}, fmt.Errorf("%w: fault %q: argument must be a positive number", gpufleet.ErrInvalid, s)
		}
	}
	switch f.Kind {
	case FaultXID:
		if !hasArg {
			return Fault{}, fmt.Errorf("%w: fault %q: want xid:<number>", gpufleet.ErrInvalid, s)
		}
		f.XID = n
	case FaultNVLinkDown:
		f.Links = n
	default:
		if hasArg {
			return Fault{}, fmt.Errorf("%w: fault %q takes no argument", gpufleet.ErrInvalid, s)
		}
	}
	return f, nil
}

func (f Fault) String() string {
	switch {
	case f.Kind == FaultXID:
		return fmt.Sprintf("xid:%d", f.XID)
	case f.Kind == FaultNVLinkDown && f.Links > 0:
		return fmt.Sprintf("nvlink-down:%d", f.Links)
	}
	return string(f.Kind)
}

// Inject starts fault f on the GPU at index. It raises the events the real
// fault raises now; lasting effects stay until Clear. Injecting into a GPU
// that does not exist (or fell off the bus) is an error wrapping
// gpufleet.ErrNotFound; a fault the model cannot have (row remapping
// before Ampere, NVLink on a PCIe card, ECC on GeForce) wraps
// gpufleet.ErrUnsupported.
func (b *Backend) Inject(index int, f Fault) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, err := b.device(index)
	if err != nil {
		return err
	}
	b.advance(d)
	if d.gone {
		return fmt.Errorf("%w: gpu %d fell off the bus", gpufleet.ErrNotFound, index)
	}
	tr := d.tr
	unsupported := func(why string) error {
		return fmt.Errorf("%w: %s on gpu %d (%s): %s", gpufleet.ErrUnsupported, f.Kind, index, d.model.ID, why)
	}
	xid := func(n int) { b.emit(gpu.Event{UUID: d.info.UUID, Time: d.last, Kind: gpu.EventXID, XID: n}) }
	switch f.Kind {
	case FaultXID:
		if f.XID < 1 {
			return fmt.Errorf("%w: xid %d", gpufleet.ErrInvalid, f.XID)
		}
		if f.XID == 79 {
			return b.fallOff(d)
		}
		xid(f.XID)
		return nil
	case FaultFallenOffBus:
		return b.fallOff(d)
	case FaultECCSingleBit:
		if !tr.ecc {
			return unsupported("no ECC")
		}
		d.eccCorrVol++
		d.eccCorrAgg++
		d.sbeAcc = 0
		b.emit(gpu.Event{UUID: d.info.UUID, Time: d.last, Kind: gpu.EventECCSBE})
	case FaultECCDoubleBit:
		if !tr.ecc {
			return unsupported("no ECC")
		}
		d.eccUncVol++
		d.eccUncAgg++
		b.emit(gpu.Event{UUID: d.info.UUID, Time: d.last, Kind: gpu.EventECCDBE})
		xid(48)
		if tr.rowRemap {
			d.remapUnc++
			d.remapPending = true
		} else {
			d.retiredDBE++
			d.retiredPending = true
		}
		xid(63)
	case FaultRowRemapPending:
		if !tr.rowRemap {
			return unsupported("row remapping needs Ampere or newer")
		}
		d.remapUnc++
		d.remapPending = true
		xid(63)
	case FaultRowRemapFailure:
		if !tr.rowRemap {
			return unsupported("row remapping needs Ampere or newer")
		}
		d.remapFailure = true
		xid(64)
	case FaultThermalRunaway, FaultPowerBrake, FaultPCIeDowngrade, FaultSlowMemory, FaultNICDown:
	case FaultNVLinkDown:
		if tr.nvlinks == 0 {
			return unsupported("no NVLink")
		}
		if f.Links == 0 {
			f.Links = 1
		}
		if f.Links > tr.nvlinks {
			return fmt.Errorf("%w: %d links down on a GPU with %d", gpufleet.ErrInvalid, f.Links, tr.nvlinks)
		}
		xid(74)
	default:
		return fmt.Errorf("%w: fault kind %q", gpufleet.ErrInvalid, f.Kind)
	}
	d.faults[f.Kind] = f
	return nil
}

func (b *Backend) fallOff(d *device) error {
	b.emit(gpu.Event{UUID: d.info.UUID, Time: d.last, Kind: gpu.EventXID, XID: 79})
	d.gone = true
	d.faults[FaultFallenOffBus] = Fault{Kind: FaultFallenOffBus}
	return nil
}

// Clear ends every fault of the GPU at index, as a repair and GPU reset
// would: a GPU that fell off the bus comes back, pending remaps and
// retirements are applied (pending false, failure cleared), volatile ECC
// counters restart at zero; aggregate counters, remapped and retired
// counts, PCIe replays and NVLink errors keep their values.
func (b *Backend) Clear(index int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, err := b.device(index)
	if err != nil {
		return err
	}
	b.advance(d)
	if d.gone {
		d.gone = false
		d.tempC = AmbientC + d.tr.rth*d.tr.idle // it was off
	}
	clear(d.faults)
	d.remapPending, d.remapFailure, d.retiredPending = false, false, false
	d.eccCorrVol, d.eccUncVol = 0, 0
	d.sbeAcc = 0
	return nil
}

// Faults returns the active faults of the GPU at index, in FaultKinds order.
func (b *Backend) Faults(index int) ([]Fault, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, err := b.device(index)
	if err != nil {
		return nil, err
	}
	var out []Fault
	for _, k := range FaultKinds {
		if f, ok := d.faults[k]; ok {
			out = append(out, f)
		}
	}
	return out, nil
}

func (b *Backend) device(index int) (*device, error) {
	if index < 0 || index >= len(b.devs) {
		return nil, fmt.Errorf("%w: gpu index %d (have %d)", gpufleet.ErrNotFound, index, len(b.devs))
	}
	return b.devs[index], nil
}

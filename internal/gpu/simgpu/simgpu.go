package simgpu

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

var _ gpu.Backend = (*Backend)(nil)

// Spec asks for Count GPUs of one catalog model (the Specs of a node
// together at most gpufleet.MaxNodeGPUs, as the server takes). MIG, when
// set, is a layout ("1g.18gb x7", "3g.71gb x2; 1g.18gb x1") configured on
// the first MIGCount of them (all of them when MIGCount is 0).
type Spec struct {
	Model    string `json:"model"`
	Count    int    `json:"count"`
	MIG      string `json:"mig,omitempty"`
	MIGCount int    `json:"mig_count,omitempty"`
}

// Option configures New.
type Option func(*options)

type options struct {
	now    func() time.Time
	node   string
	seed   uint64
	cat    *catalog.Catalog
	driver string
	cuda   string
	noCaps bool
}

// WithClock sets the clock the simulation integrates over. Tests step it;
// the default is time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithNodeName makes UUIDs, serials and MIG UUIDs deterministic per node.
func WithNodeName(name string) Option { return func(o *options) { o.node = name } }

// WithSeed seeds the jitter of power and activity readings (default 1).
func WithSeed(seed uint64) Option { return func(o *options) { o.seed = seed } }

// WithCatalog sets the catalog models come from (default catalog.Default()).
func WithCatalog(c *catalog.Catalog) Option { return func(o *options) { o.cat = c } }

// WithDriver sets the driver and CUDA versions reported (default
// "550.54.15" and "12.4").
func WithDriver(driver, cuda string) Option {
	return func(o *options) { o.driver, o.cuda = driver, cuda }
}

// WithoutPowerCaps makes the GPUs refuse power limits, as NVML does
// without root or on a board that does not support them: PowerLimits and
// SetPowerLimit return gpu.ErrNoPowerCaps.
func WithoutPowerCaps() Option { return func(o *options) { o.noCaps = true } }

// Backend simulates the GPUs of one node. It is safe for concurrent use.
type Backend struct {
	now    func() time.Time
	node   string
	driver string
	cuda   string
	noCaps bool

	mu     sync.Mutex
	devs   []*device
	byUUID map[string]target
	events []gpu.Event
	notify chan struct{}
	closed bool
}

// target is what a UUID names: a GPU or one of its MIG instances, with the
// share of the GPU a load on it takes.
type target struct {
	dev    *device
	weight float64
}

// device is one simulated GPU and its state.
type device struct {
	info   gpu.Device
	model  catalog.GPU
	tr     traits
	rng    *rand.Rand
	last   time.Time
	loads  map[string]*[3]float64 // by target UUID: fraction per Load (loads order)
	faults map[FaultKind]Fault
	gone   bool
	// limit is the power limit set (SetPowerLimit); 0: the default, the
	// TDP.
	limit float64

	tempC                                        float64
	energyMJ                                     float64
	powerViol                                    float64 // seconds
	thermViol                                    float64 // seconds
	eccCorrVol, eccUncVol, eccCorrAgg, eccUncAgg uint64
	retiredSBE, retiredDBE                       uint64
	retiredPending                               bool
	remapCorr, remapUnc                          uint64
	remapPending, remapFailure                   bool
	pcieReplay                                   float64
	nvlinkErrors                                 float64
	nvlinkBytes                                  float64 // per direction
	sbeAcc                                       float64
}

// New builds the simulated GPUs of specs, indexed in spec order.
func New(specs []Spec, opts ...Option) (*Backend, error) {
	o := options{now: time.Now, node: "sim", seed: 1, driver: "550.54.15", cuda: "12.4"}
	for _, opt := range opts {
		opt(&o)
	}
	if o.cat == nil {
		o.cat = catalog.Default()
	}
	b := &Backend{
		now: o.now, node: o.node, driver: o.driver, cuda: o.cuda, noCaps: o.noCaps,
		byUUID: map[string]target{},
		notify: make(chan struct{}, 1),
	}
	start := o.now()
	for si, spec := range specs {
		g, err := o.cat.Lookup(spec.Model)
		if err != nil {
			return nil, fmt.Errorf("spec %d: %w", si, err)
		}
		if g.Vendor != "NVIDIA" {
			return nil, fmt.Errorf("%w: spec %d: %s is not an NVIDIA GPU", gpufleet.ErrUnsupported, si, g.ID)
		}
		if spec.Count < 1 || spec.Count > gpufleet.MaxNodeGPUs-len(b.devs) {
			return nil, fmt.Errorf("%w: spec %d: count %d: a node has 1 to %d GPUs", gpufleet.ErrInvalid, si, spec.Count, gpufleet.MaxNodeGPUs)
		}
		var layout []migLayout
		if spec.MIG != "" {
			if layout, err = parseMIG(g, spec.MIG); err != nil {
				return nil, fmt.Errorf("spec %d: %w", si, err)
			}
		}
		migCount := spec.MIGCount
		if spec.MIG != "" && migCount == 0 {
			migCount = spec.Count
		}
		if migCount < 0 || migCount > spec.Count {
			return nil, fmt.Errorf("%w: spec %d: MIG on %d of %d GPUs", gpufleet.ErrInvalid, si, migCount, spec.Count)
		}
		tr := traitsOf(g)
		first := len(b.devs)
		for k := range spec.Count {
			idx := len(b.devs)
			d := &device{
				model: g, tr: tr,
				rng:    rand.New(rand.NewPCG(o.seed, uint64(idx))),
				last:   start,
				loads:  map[string]*[3]float64{},
				faults: map[FaultKind]Fault{},
			}
			d.info = gpu.Device{
				Index:             idx,
				UUID:              nvmlUUID("GPU", o.node, idx, -1),
				Name:              nvmlName(g),
				Model:             g.ID,
				PCIBusID:          busID(idx),
				Serial:            serial(o.node, idx),
				Architecture:      g.Architecture,
				ComputeCapability: g.ComputeCapability,
				MemoryBytes:       g.MemoryBytes,
			}
			b.byUUID[d.info.UUID] = target{dev: d, weight: 1}
			if k < migCount {
				d.info.MIGMode = true
				n := 0
				for _, l := range layout {
					for range l.count {
						inst := gpu.MIGInstance{UUID: nvmlUUID("MIG", o.node, idx, n), Profile: l.profile.Name, MemoryBytes: l.profile.MemoryBytes,
							GPUInstanceID: instanceID(d.info.MIG, l.profile.Slices)}
						d.info.MIG = append(d.info.MIG, inst)
						b.byUUID[inst.UUID] = target{dev: d, weight: float64(l.profile.Slices) / 7}
						n++
					}
				}
			}
			d.tempC = AmbientC + tr.rth*tr.idle
			b.devs = append(b.devs, d)
		}
		// NVLink: GPUs of one spec form domains of the catalog's size.
		if tr.nvlinks > 0 {
			for lo := first; lo < len(b.devs); lo += g.DomainSize {
				hi := min(lo+g.DomainSize, len(b.devs))
				if hi-lo < 2 {
					continue
				}
				for i := lo; i < hi; i++ {
					for j := lo; j < hi; j++ {
						if i != j {
							b.devs[i].info.NVLinkPeers = append(b.devs[i].info.NVLinkPeers, j)
						}
					}
					b.devs[i].info.NVLinkDomain = "nvlink:" + b.devs[lo].info.UUID
				}
			}
		}
	}
	return b, nil
}

// nvmlUUID formats a hash of (node, gpu, mig) like an NVML UUID:
// GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func nvmlUUID(prefix, node string, idx, mig int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%d", prefix, node, idx, mig))
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// serial is a 13-digit board serial derived from (node, gpu).
func serial(node string, idx int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "serial\x00%s\x00%d", node, idx))
	return fmt.Sprintf("1654%09d", binary.BigEndian.Uint64(h[:8])%1_000_000_000)
}

// SetLoad sets the share of one load profile on a GPU or MIG instance
// (named by UUID). Fractions are time shares in [0, 1]; profiles add, so a
// GPU time-sliced between a compute and a memory attempt has both.
func (b *Backend) SetLoad(uuid string, l Load, fraction float64) error {
	if fraction < 0 || fraction > 1 || math.IsNaN(fraction) {
		return fmt.Errorf("%w: load fraction %v not in [0, 1]", gpufleet.ErrInvalid, fraction)
	}
	return b.changeLoad(uuid, l, func(float64) float64 { return fraction })
}

// AddLoad adds delta (negative to take a share back) to one load profile
// on a GPU or MIG instance, for several time-sliced attempts of the same
// profile. The share never drops below 0; above 1 the GPU is saturated.
func (b *Backend) AddLoad(uuid string, l Load, delta float64) error {
	if math.IsNaN(delta) {
		return fmt.Errorf("%w: load delta NaN", gpufleet.ErrInvalid)
	}
	return b.changeLoad(uuid, l, func(f float64) float64 { return max(0, f+delta) })
}

func (b *Backend) changeLoad(uuid string, l Load, f func(float64) float64) error {
	li := -1
	for i, x := range loads {
		if x == l {
			li = i
		}
	}
	if li < 0 {
		return fmt.Errorf("%w: load %q", gpufleet.ErrInvalid, l)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.byUUID[uuid]
	if !ok {
		return fmt.Errorf("%w: gpu %s", gpufleet.ErrNotFound, uuid)
	}
	b.advance(t.dev)
	fr := t.dev.loads[uuid]
	if fr == nil {
		fr = &[3]float64{}
		t.dev.loads[uuid] = fr
	}
	fr[li] = f(fr[li])
	return nil
}

// ClearLoad removes every load of a GPU or MIG instance.
func (b *Backend) ClearLoad(uuid string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.byUUID[uuid]
	if !ok {
		return fmt.Errorf("%w: gpu %s", gpufleet.ErrNotFound, uuid)
	}
	b.advance(t.dev)
	delete(t.dev.loads, uuid)
	return nil
}

// state is what the load, faults and temperature of a device make of it at
// one moment.
type state struct {
	busy                         float64 // fraction of time a kernel runs
	util, memUtil                float64
	sm, occ, tensor, dram        float64
	pcie, nvlink                 float64 // fractions of the links' bandwidth
	memUsed                      int64
	factor                       float64 // SM clock factor
	power                        float64
	target                       float64 // temperature the GPU heads to
	reasons                      uint64
	powerLimited, thermalLimited bool
}

func (d *device) state() state {
	var raw [3]float64 // per Load, weighted by MIG share
	for uuid, fr := range d.loads {
		w := 1.0
		if uuid != d.info.UUID {
			for _, m := range d.info.MIG {
				if m.UUID == uuid {
					w = float64(migSlices(m.Profile)) / 7
				}
			}
		}
		for i := range raw {
			raw[i] += w * fr[i]
		}
	}
	var s state
	// Busy loads share the GPU's time; beyond saturation they are scaled.
	c, m := raw[0], raw[1]
	if c+m > 1 {
		c, m = c/(c+m), m/(c+m)
	}
	pc, pm := profiles[LoadCompute], profiles[LoadMemory]
	s.busy = c + m
	s.util = c*pc.util + m*pm.util
	s.memUtil = c*pc.memUtil + m*pm.memUtil
	s.sm = c*pc.sm + m*pm.sm
	s.occ = c*pc.occ + m*pm.occ
	s.tensor = c*pc.tensor + m*pm.tensor
	s.dram = c*pc.dram + m*pm.dram
	s.pcie = c*pc.pcie + m*pm.pcie
	s.nvlink = c*pc.nvlink + m*pm.nvlink
	alloc := 0.0
	for i, l := range loads {
		alloc += raw[i] * profiles[l].memAlloc
	}
	s.memUsed = int64(min(alloc, MaxMemoryFraction) * float64(d.model.MemoryBytes))

	tr := d.tr
	s.factor = 1
	if d.tempC >= tr.slowdown {
		s.factor = max(MinClockFactor, 1-ThrottlePerC*(d.tempC-tr.slowdown))
		s.reasons |= gpu.ClockEventSWThermalSlowdown
		s.thermalLimited = true
		if d.tempC >= tr.slowdown+HWSlowdownMarginC {
			s.reasons |= gpu.ClockEventHWThermalSlowdown | gpu.ClockEventHWSlowdown
		}
	}
	if _, ok := d.faults[FaultPowerBrake]; ok {
		s.factor = min(s.factor, PowerBrakeClockFactor)
		s.reasons |= gpu.ClockEventHWPowerBrake | gpu.ClockEventHWSlowdown
		s.powerLimited = true
	}
	dyn := c*(pc.powerOfTDP*tr.tdp-tr.idle) + m*(pm.powerOfTDP*tr.tdp-tr.idle)
	s.power = tr.idle + s.factor*max(dyn, 0)
	if limit := d.powerLimit(); s.power > limit {
		// The driver lowers clocks until the draw meets the limit: the
		// dynamic part, and the clocks, scale down together.
		if s.power > tr.idle {
			s.factor *= max(limit-tr.idle, 0) / (s.power - tr.idle)
		}
		s.power = limit
		s.reasons |= gpu.ClockEventSWPowerCap
		s.powerLimited = true
	}
	if s.busy == 0 {
		s.reasons |= gpu.ClockEventGPUIdle
	}
	s.target = AmbientC + tr.rth*s.power
	if _, ok := d.faults[FaultThermalRunaway]; ok {
		s.target = max(s.target, tr.slowdown+RunawayOvershootC)
	}
	return s
}

// gpuInstanceIDs are the GPU instance ids the driver gives by instance
// size on a 7-slice GPU (NVIDIA's MIG user guide, "nvidia-smi mig -lgi"
// listings: 0 for the whole GPU, 1-2 for halves, 3-6 for two slices, 7-14
// for one).
var gpuInstanceIDs = map[int][]int{7: {0}, 4: {1}, 3: {1, 2}, 2: {3, 4, 5, 6}, 1: {7, 8, 9, 10, 11, 12, 13, 14}}

// instanceID is the first id for an instance of the given slices that the
// instances made so far do not use.
func instanceID(made []gpu.MIGInstance, slices int) int {
	used := map[int]bool{}
	for _, m := range made {
		used[m.GPUInstanceID] = true
	}
	for _, id := range gpuInstanceIDs[slices] {
		if !used[id] {
			return id
		}
	}
	id := 0
	for used[id] {
		id++
	}
	return id
}

// migSlices is the compute slices of a MIG profile name ("3g.40gb": 3),
// from 1 to the 7 a GPU has: a profile that names none counts as one, more
// than seven as the whole GPU (a long digit string never overflows).
func migSlices(profile string) int {
	n := 0
	for _, c := range profile {
		if c < '0' || c > '9' {
			break
		}
		if n = n*10 + int(c-'0'); n > 7 {
			return 7
		}
	}
	return max(n, 1)
}

// maxStep bounds one integration step, so the result does not depend on
// how far apart the calls are (beyond the last partial second).
const maxStep = time.Second

// advance integrates d from its last time to now: energy, temperature,
// violation times and the counters of active faults.
func (b *Backend) advance(d *device) {
	now := b.now()
	for d.last.Before(now) {
		h := min(now.Sub(d.last), maxStep)
		d.last = d.last.Add(h)
		if d.gone {
			continue
		}
		sec := h.Seconds()
		s := d.state()
		d.energyMJ += s.power * sec * 1000
		d.tempC += (s.target - d.tempC) * (1 - math.Exp(-sec/ThermalTauSeconds))
		if s.powerLimited {
			d.powerViol += sec
		}
		if s.thermalLimited {
			d.thermViol += sec
		}
		if _, ok := d.faults[FaultPCIeDowngrade]; ok {
			d.pcieReplay += PCIeReplaysPerSecond * sec
		}
		if f, ok := d.faults[FaultNVLinkDown]; ok {
			d.nvlinkErrors += NVLinkErrorsPerLinkSecond * float64(f.Links) * sec
		}
		if d.tr.nvlinks > 0 && !b.isolated(d) {
			d.nvlinkBytes += s.nvlink * d.nvlinkBytesPerS() * sec
		}
		if _, ok := d.faults[FaultECCSingleBit]; ok {
			d.sbeAcc += sec / SBEIntervalSeconds
			for d.sbeAcc >= 1 {
				d.sbeAcc--
				d.eccCorrVol++
				d.eccCorrAgg++
				b.emit(gpu.Event{UUID: d.info.UUID, Time: d.last, Kind: gpu.EventECCSBE})
			}
		}
	}
}

func (b *Backend) emit(e gpu.Event) {
	b.events = append(b.events, e)
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// Devices returns the simulated GPUs; a GPU that fell off the bus is
// missing, and so are NVLink peers whose links are all down.
func (b *Backend) Devices(ctx context.Context) ([]gpu.Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []gpu.Device{}
	for _, d := range b.devs {
		if d.gone {
			continue
		}
		info := d.info
		info.MIG = append([]gpu.MIGInstance(nil), d.info.MIG...)
		info.NVLinkPeers = nil
		if !b.isolated(d) {
			for _, j := range d.info.NVLinkPeers {
				if p := b.devs[j]; !p.gone && !b.isolated(p) {
					info.NVLinkPeers = append(info.NVLinkPeers, j)
				}
			}
		}
		if len(info.NVLinkPeers) == 0 {
			info.NVLinkDomain = ""
		}
		out = append(out, info)
	}
	return out, nil
}

// isolated reports whether every NVLink of d is down.
func (b *Backend) isolated(d *device) bool {
	f, ok := d.faults[FaultNVLinkDown]
	return ok && f.Links >= d.tr.nvlinks
}

// Versions reports the simulated driver stack. VBIOS and InfoROM versions
// are fixed strings; the GSP firmware carries the driver version, as on
// real systems.
func (b *Backend) Versions(ctx context.Context) (gpu.Versions, error) {
	if err := ctx.Err(); err != nil {
		return gpu.Versions{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v := gpu.Versions{
		Driver: b.driver, CUDA: b.cuda, NVML: "12." + b.driver,
		VBIOS: map[string]string{}, InfoROM: map[string]string{}, GSPFirmware: map[string]string{},
	}
	for _, d := range b.devs {
		if d.gone {
			continue
		}
		v.VBIOS[d.info.UUID] = "96.00.89.00.01"
		v.InfoROM[d.info.UUID] = "G520.0200.00.05"
		v.GSPFirmware[d.info.UUID] = b.driver
	}
	return v, nil
}

// SetVersions moves the simulated node to another driver and CUDA
// version, as a stack update would (the firmware follows the driver).
func (b *Backend) SetVersions(driver, cuda string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if driver != "" {
		b.driver = driver
	}
	if cuda != "" {
		b.cuda = cuda
	}
}

func ptr[T any](v T) *T { return &v }

// round rounds v to the given number of decimals.
func round(v float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(v*p) / p
}

// Sample reads every present GPU.
func (b *Backend) Sample(ctx context.Context) ([]gpu.Sample, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []gpu.Sample{}
	for _, d := range b.devs {
		b.advance(d)
		if d.gone {
			continue
		}
		out = append(out, b.sample(d))
	}
	return out, nil
}

func (b *Backend) sample(d *device) gpu.Sample {
	tr := d.tr
	st := d.state()
	s := gpu.Sample{UUID: d.info.UUID, Time: d.last}
	if !d.info.MIGMode { // NVML has no utilization rates in MIG mode
		s.Utilization = ptr(round(st.util, 2))
		s.MemoryUtilization = ptr(round(st.memUtil, 2))
	}
	if tr.gpm {
		jit := func(v float64) *float64 {
			if st.busy > 0 {
				v += ActivityNoise * (2*d.rng.Float64() - 1)
			}
			return ptr(round(min(max(v, 0), 1), 3))
		}
		s.SMActivity, s.SMOccupancy, s.TensorActivity, s.DRAMActivity = jit(st.sm), jit(st.occ), jit(st.tensor), jit(st.dram)
	}
	s.MemoryUsedBytes = ptr(st.memUsed)
	s.MemoryFreeBytes = ptr(d.model.MemoryBytes - st.memUsed)
	power := st.power + PowerNoiseFraction*tr.tdp*(2*d.rng.Float64()-1)
	s.PowerWatts = ptr(round(min(max(power, 0), d.powerLimit()), 3))
	s.PowerLimitWatts = ptr(d.powerLimit())
	s.EnergyMillijoules = ptr(uint64(d.energyMJ))
	s.TemperatureC = ptr(math.Round(d.tempC))
	if tr.hbm {
		s.MemoryTemperatureC = ptr(math.Round(d.tempC + MemoryTempOffsetC + MemoryTempPerDRAM*st.dram))
	}
	sm := tr.smMHz * st.factor
	if st.busy == 0 {
		sm = min(IdleSMClockMHz, sm)
	}
	s.SMClockMHz = ptr(math.Round(sm))
	s.MemoryClockMHz = ptr(tr.memMHz)
	if _, ok := d.faults[FaultSlowMemory]; ok {
		s.MemoryClockMHz = ptr(math.Round(tr.memMHz * SlowMemoryFactor))
	}
	s.ClockEventReasons = ptr(st.reasons)
	s.PowerViolationNs = ptr(uint64(d.powerViol * 1e9))
	s.ThermalViolationNs = ptr(uint64(d.thermViol * 1e9))
	if tr.ecc {
		s.ECCCorrectedVolatile, s.ECCUncorrectedVolatile = ptr(d.eccCorrVol), ptr(d.eccUncVol)
		s.ECCCorrectedAggregate, s.ECCUncorrectedAggregate = ptr(d.eccCorrAgg), ptr(d.eccUncAgg)
	}
	if tr.pageRetire {
		s.RetiredPagesSBE, s.RetiredPagesDBE, s.RetiredPagesPending = ptr(d.retiredSBE), ptr(d.retiredDBE), ptr(d.retiredPending)
	}
	if tr.rowRemap && !d.info.MIGMode { // NVML: not supported with MIG instances
		s.RemappedRowsCorrectable, s.RemappedRowsUncorrectable = ptr(d.remapCorr), ptr(d.remapUnc)
		s.RowRemapPending, s.RowRemapFailure = ptr(d.remapPending), ptr(d.remapFailure)
	}
	gen, width := tr.pcieGen, 16
	if _, ok := d.faults[FaultPCIeDowngrade]; ok {
		gen, width = max(gen-1, 1), width/2
	}
	s.PCIeGen, s.PCIeWidth, s.PCIeMaxGen, s.PCIeMaxWidth = ptr(gen), ptr(width), ptr(tr.pcieGen), ptr(16)
	s.PCIeReplayCount = ptr(uint64(d.pcieReplay))
	if tr.nvlinks > 0 {
		up := tr.nvlinks
		if f, ok := d.faults[FaultNVLinkDown]; ok {
			up -= f.Links
		}
		s.NVLinkLinksUp, s.NVLinkLinksTotal, s.NVLinkErrors = ptr(up), ptr(tr.nvlinks), ptr(uint64(d.nvlinkErrors))
		s.NVLinkTxBytes, s.NVLinkRxBytes = ptr(uint64(d.nvlinkBytes)), ptr(uint64(d.nvlinkBytes))
	}
	rx := st.pcie * pcieBytesPerS(gen, width)
	s.PCIeRxBytesPerSecond, s.PCIeTxBytesPerSecond = ptr(math.Round(rx)), ptr(math.Round(rx/2))
	s.EncoderUtilization, s.DecoderUtilization = ptr(0.0), ptr(0.0)
	for _, m := range d.info.MIG {
		used := int64(min(d.instanceAlloc(m.UUID), MaxMemoryFraction) * float64(m.MemoryBytes))
		s.MIG = append(s.MIG, gpu.MIGSample{UUID: m.UUID, MemoryUsedBytes: ptr(used), MemoryFreeBytes: ptr(m.MemoryBytes - used)})
	}
	return s
}

// instanceAlloc is the fraction of a MIG instance's memory its loads hold.
func (d *device) instanceAlloc(uuid string) float64 {
	fr := d.loads[uuid]
	if fr == nil {
		return 0
	}
	alloc := 0.0
	for i, l := range loads {
		alloc += fr[i] * profiles[l].memAlloc
	}
	return alloc
}

// nvlinkBytesPerS is the GPU's NVLink bandwidth per direction (the
// catalog quotes both directions added), with the links that are down
// taken out.
func (d *device) nvlinkBytesPerS() float64 {
	up := d.tr.nvlinks
	if f, ok := d.faults[FaultNVLinkDown]; ok {
		up -= f.Links
	}
	return d.model.InterconnectBandwidthBytesPerS / 2 * float64(max(up, 0)) / float64(d.tr.nvlinks)
}

// Events returns the events raised since the last call, waiting at most
// wait (wall time) for the first.
func (b *Backend) Events(ctx context.Context, wait time.Duration) ([]gpu.Event, error) {
	take := func() []gpu.Event {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, d := range b.devs {
			b.advance(d)
		}
		out := b.events
		b.events = nil
		return out
	}
	if out := take(); len(out) > 0 || wait <= 0 {
		return out, ctx.Err()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	case <-b.notify:
	}
	return take(), nil
}

// Close does nothing; the simulation holds no resources.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

var _ gpu.PowerCapper = (*Backend)(nil)

// PowerLimitMinFraction is the lowest power limit a simulated GPU takes,
// as a share of its TDP: NVML's constraints for data-centre boards sit
// near it (H100 SXM 200 of 700 W, A100 SXM 100 of 400 W, L4 40 of 72 W,
// from nvidia-smi -q -d POWER).
const PowerLimitMinFraction = 0.25

// powerLimit is the GPU's power limit in force: the one set, else its
// TDP (the default).
func (d *device) powerLimit() float64 {
	if d.limit > 0 {
		return d.limit
	}
	return d.tr.tdp
}

// limits is the GPU's power limits.
func (d *device) limits() gpu.PowerLimits {
	return gpu.PowerLimits{MinWatts: PowerLimitMinFraction * d.tr.tdp, MaxWatts: d.tr.tdp, DefaultWatts: d.tr.tdp, CurrentWatts: d.powerLimit()}
}

// capDevice is the GPU at index for a power limit, or an error.
func (b *Backend) capDevice(index int) (*device, error) {
	if b.noCaps {
		return nil, fmt.Errorf("%w: simulated gpu %d refuses power limits", gpu.ErrNoPowerCaps, index)
	}
	if index < 0 || index >= len(b.devs) || b.devs[index].gone {
		return nil, fmt.Errorf("%w: gpu %d", gpufleet.ErrNotFound, index)
	}
	return b.devs[index], nil
}

// PowerLimits reads the simulated GPU's power limits: from
// PowerLimitMinFraction of its TDP to its TDP, the TDP by default.
func (b *Backend) PowerLimits(ctx context.Context, index int) (gpu.PowerLimits, error) {
	if err := ctx.Err(); err != nil {
		return gpu.PowerLimits{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	d, err := b.capDevice(index)
	if err != nil {
		return gpu.PowerLimits{}, err
	}
	return d.limits(), nil
}

// SetPowerLimit sets the simulated GPU's power limit: from now on its
// draw is clipped to it, with the clock-event reason sw_power_cap while
// it is, and its samples report it as PowerLimitWatts.
func (b *Backend) SetPowerLimit(ctx context.Context, index int, watts float64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	d, err := b.capDevice(index)
	if err != nil {
		return err
	}
	l := d.limits()
	if !(watts >= l.MinWatts && watts <= l.MaxWatts) {
		return fmt.Errorf("%w: gpu %d: power limit %.0f W outside %.0f-%.0f W", gpufleet.ErrInvalid, index, watts, l.MinWatts, l.MaxWatts)
	}
	b.advance(d) // the time so far ran at the old limit
	d.limit = watts
	return nil
}

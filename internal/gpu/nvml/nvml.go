//go:build linux && cgo

package nvml

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

var _ gpu.Backend = (*Backend)(nil)

// eventMask is the set of events the backend asks every GPU for.
const eventMask = uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError)

// noInstance is the GPU/compute instance id NVML reports outside MIG.
const noInstance = math.MaxUint32

// Option configures New.
type Option func(*options)

type options struct {
	lib     nvml.Interface
	logger  *slog.Logger
	catalog *catalog.Catalog
	now     func() time.Time
}

// WithLibrary makes the backend use lib instead of nvml.New(): a mock
// server in tests, or nvml.New(nvml.WithLibraryPath(...)) for a driver
// outside the loader path.
func WithLibrary(lib nvml.Interface) Option { return func(o *options) { o.lib = lib } }

// WithLogger sets the logger for devices that refuse events and similar
// non-fatal trouble. The default discards.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithCatalog sets the catalog used to map NVML names to model ids. The
// default is catalog.Default().
func WithCatalog(c *catalog.Catalog) Option { return func(o *options) { o.catalog = c } }

// WithClock sets the clock that stamps samples and events (tests).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Backend reads GPUs through NVML. It is safe for concurrent use.
type Backend struct {
	lib nvml.Interface
	log *slog.Logger
	cat *catalog.Catalog
	now func() time.Time

	mu  sync.Mutex
	gpm map[string]*gpmState // by GPU UUID

	evMu sync.Mutex
	set  nvml.EventSet // nil when no device registered
}

// gpmState keeps the previous GPM sample of one device, so each Sample
// call takes one new GPM sample and diffs it against the last.
type gpmState struct {
	supported bool
	prev, cur nvml.GpmSample
	havePrev  bool
}

// New initialises NVML and registers for XID and ECC events. It returns an
// error wrapping gpu.ErrUnavailable when the NVML library is missing.
func New(opts ...Option) (*Backend, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.lib == nil {
		o.lib = nvml.New()
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.catalog == nil {
		o.catalog = catalog.Default()
	}
	if o.now == nil {
		o.now = time.Now
	}
	switch ret := o.lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, fmt.Errorf("%w: nvml library not found", gpu.ErrUnavailable)
	default:
		return nil, fmt.Errorf("nvml init: %s", ret.Error())
	}
	b := &Backend{
		lib: o.lib,
		log: o.logger.With("component", "gpu-nvml"),
		cat: o.catalog,
		now: o.now,
		gpm: map[string]*gpmState{},
	}
	b.registerEvents()
	return b, nil
}

// handle is one enumerated GPU.
type handle struct {
	index int
	uuid  string
	dev   nvml.Device
}

// handles enumerates the GPUs NVML can reach; a lost GPU is skipped.
func (b *Backend) handles() ([]handle, error) {
	n, ret := b.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %s", ret.Error())
	}
	out := make([]handle, 0, n)
	for i := range n {
		dev, ret := b.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			b.log.Warn("gpu unreachable", "index", i, "err", ret.Error())
			continue
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			b.log.Warn("gpu has no uuid", "index", i, "err", ret.Error())
			continue
		}
		out = append(out, handle{index: i, uuid: uuid, dev: dev})
	}
	return out, nil
}

func (b *Backend) registerEvents() {
	set, ret := b.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		b.log.Warn("no nvml event set", "err", ret.Error())
		return
	}
	hs, err := b.handles()
	if err != nil {
		b.log.Warn("no devices for events", "err", err)
	}
	registered := 0
	for _, h := range hs {
		supported, ret := h.dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			b.log.Warn("gpu refuses events", "uuid", h.uuid, "err", ret.Error())
			continue
		}
		mask := eventMask & supported
		if mask == 0 {
			b.log.Warn("gpu supports none of the events", "uuid", h.uuid)
			continue
		}
		if ret := h.dev.RegisterEvents(mask, set); ret != nvml.SUCCESS {
			b.log.Warn("gpu refuses events", "uuid", h.uuid, "err", ret.Error())
			continue
		}
		registered++
	}
	if registered == 0 {
		set.Free()
		return
	}
	b.set = set
}

// Devices discovers the GPUs.
func (b *Backend) Devices(ctx context.Context) ([]gpu.Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	hs, err := b.handles()
	if err != nil {
		return nil, err
	}
	out := make([]gpu.Device, 0, len(hs))
	busToPos := map[string]int{}
	for _, h := range hs {
		d := b.device(h)
		if d.PCIBusID != "" {
			busToPos[normBusID(d.PCIBusID)] = len(out)
		}
		out = append(out, d)
	}
	// NVLink peers: links whose remote end is another GPU of this node,
	// plus pairs NVML reports as NVLink P2P capable (through NVSwitch).
	peers := make([]map[int]bool, len(out))
	for i, h := range hs {
		peers[i] = map[int]bool{}
		for l := range nvml.NVLINK_MAX_LINKS {
			st, ret := h.dev.GetNvLinkState(l)
			if ret != nvml.SUCCESS || st != nvml.FEATURE_ENABLED {
				continue
			}
			pci, ret := h.dev.GetNvLinkRemotePciInfo(l)
			if ret != nvml.SUCCESS {
				continue
			}
			if j, ok := busToPos[normBusID(busID(pci))]; ok && j != i {
				peers[i][j] = true
			}
		}
		for j, o := range hs {
			if j == i {
				continue
			}
			st, ret := h.dev.GetP2PStatus(o.dev, nvml.P2P_CAPS_INDEX_NVLINK)
			if ret == nvml.SUCCESS && st == nvml.P2P_STATUS_OK {
				peers[i][j] = true
			}
		}
	}
	for i := range out {
		for j := range peers[i] {
			peers[j][i] = true // links are symmetric; one side may not say so
		}
	}
	for i := range out {
		for _, j := range slices.Sorted(mapKeys(peers[i])) {
			out[i].NVLinkPeers = append(out[i].NVLinkPeers, out[j].Index)
		}
	}
	b.assignDomains(hs, out, peers)
	return out, nil
}

func mapKeys(m map[int]bool) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// assignDomains sets NVLinkDomain: the fabric clique when the GPU is
// registered with a fabric manager (NVSwitch systems, NVL72), else the
// connected component of the node's NVLink graph, named after its
// lowest-indexed GPU's UUID. A GPU without NVLink peers has no domain.
func (b *Backend) assignDomains(hs []handle, out []gpu.Device, peers []map[int]bool) {
	comp := make([]int, len(out))
	for i := range comp {
		comp[i] = -1
	}
	for i := range out {
		if comp[i] >= 0 {
			continue
		}
		stack := []int{i}
		comp[i] = i
		for len(stack) > 0 {
			k := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for j := range peers[k] {
				if comp[j] < 0 {
					comp[j] = i
					stack = append(stack, j)
				}
			}
		}
	}
	for i, h := range hs {
		if len(peers[i]) == 0 {
			continue
		}
		if fi, ret := h.dev.GetGpuFabricInfo(); ret == nvml.SUCCESS &&
			fi.State == nvml.GPU_FABRIC_STATE_COMPLETED && nvml.Return(fi.Status) == nvml.SUCCESS {
			out[i].NVLinkDomain = fmt.Sprintf("fabric:%s/%d", uuidString(fi.ClusterUuid), fi.CliqueId)
			continue
		}
		out[i].NVLinkDomain = "nvlink:" + out[comp[i]].UUID
	}
}

// virtualizationMode names NVML's virtualization mode of a device.
func virtualizationMode(m nvml.GpuVirtualizationMode) string {
	switch m {
	case nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH:
		return "passthrough"
	case nvml.GPU_VIRTUALIZATION_MODE_VGPU:
		return "vgpu"
	case nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU, nvml.GPU_VIRTUALIZATION_MODE_HOST_VSGA:
		return "vgpu-host"
	}
	return ""
}

func uuidString(u [16]uint8) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// device reads the identity of one GPU; readings it cannot get stay empty.
func (b *Backend) device(h handle) gpu.Device {
	d := gpu.Device{Index: h.index, UUID: h.uuid}
	if name, ret := h.dev.GetName(); ret == nvml.SUCCESS {
		d.Name = name
	}
	d.Model = d.Name
	var model catalog.GPU
	if g, ok := lookupModel(b.cat, d.Name); ok {
		model = g
		d.Model = g.ID
	}
	if pci, ret := h.dev.GetPciInfo(); ret == nvml.SUCCESS {
		d.PCIBusID = busID(pci)
	}
	if s, ret := h.dev.GetSerial(); ret == nvml.SUCCESS {
		d.Serial = s
	}
	d.Architecture = model.Architecture
	if a, ret := h.dev.GetArchitecture(); ret == nvml.SUCCESS {
		if name := archName(a); name != "" {
			d.Architecture = name
		}
	}
	d.ComputeCapability = model.ComputeCapability
	if maj, mnr, ret := h.dev.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		if cc := (gpufleet.ComputeCapability{Major: maj, Minor: mnr}); cc.Validate() == nil {
			d.ComputeCapability = cc
		}
	}
	if total, _, _, ok := memoryInfo(h.dev); ok {
		d.MemoryBytes = int64(total)
	}
	if m, ret := h.dev.GetVirtualizationMode(); ret == nvml.SUCCESS {
		d.Virtualization = virtualizationMode(m)
	}
	if cur, _, ret := h.dev.GetMigMode(); ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE {
		d.MIGMode = true
		d.MIG = b.migInstances(h, model)
	}
	return d
}

// migInstances lists the MIG devices of a GPU in MIG mode.
func (b *Backend) migInstances(h handle, model catalog.GPU) []gpu.MIGInstance {
	n, ret := h.dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil
	}
	var out []gpu.MIGInstance
	for i := range n {
		mig, ret := h.dev.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // empty slot (ERROR_NOT_FOUND)
		}
		uuid, ret := mig.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		inst := gpu.MIGInstance{UUID: uuid}
		if id, ret := mig.GetGpuInstanceId(); ret == nvml.SUCCESS {
			inst.GPUInstanceID = id
		}
		if total, _, _, ok := memoryInfo(mig); ok {
			inst.MemoryBytes = int64(total)
		}
		slices := 0
		if attr, ret := mig.GetAttributes(); ret == nvml.SUCCESS {
			slices = int(attr.GpuInstanceSliceCount)
			if inst.MemoryBytes == 0 {
				inst.MemoryBytes = int64(attr.MemorySizeMB) << 20
			}
		}
		inst.Profile = migProfileName(model, slices, inst.MemoryBytes)
		out = append(out, inst)
	}
	return out
}

// migProfileName names a MIG instance from its slice count and memory: the
// catalog profile of the model with that many slices and the nearest
// memory, else "<slices>g.<GB>gb".
func migProfileName(model catalog.GPU, slices int, mem int64) string {
	best, bestDiff := "", math.Inf(1)
	for _, p := range model.MIGProfiles {
		if p.Slices != slices || strings.HasSuffix(p.Name, "+me") {
			continue
		}
		diff := math.Abs(float64(p.MemoryBytes-mem)) / float64(p.MemoryBytes)
		if diff < bestDiff && diff < 0.2 {
			best, bestDiff = p.Name, diff
		}
	}
	if best != "" {
		return best
	}
	return fmt.Sprintf("%dg.%dgb", slices, int(math.Round(float64(mem)/1e9)))
}

// memorySuffix matches the words NVML appends to some names ("180GB",
// "HBM3e") and the catalog's aliases may lack.
var memorySuffix = regexp.MustCompile(`(?i)^(\d+gb|hbm\w*|gddr\w*)$`)

// lookupModel maps an NVML name to a catalog entry: the name as given,
// then without trailing memory-size and memory-type words.
func lookupModel(c *catalog.Catalog, name string) (catalog.GPU, bool) {
	if name == "" {
		return catalog.GPU{}, false
	}
	if g, err := c.Lookup(name); err == nil {
		return g, true
	}
	words := strings.Fields(name)
	trimmed := false
	for len(words) > 2 && memorySuffix.MatchString(words[len(words)-1]) {
		words, trimmed = words[:len(words)-1], true
	}
	if trimmed {
		if g, err := c.Lookup(strings.Join(words, " ")); err == nil {
			return g, true
		}
	}
	return catalog.GPU{}, false
}

func archName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_KEPLER:
		return "Kepler"
	case nvml.DEVICE_ARCH_MAXWELL:
		return "Maxwell"
	case nvml.DEVICE_ARCH_PASCAL:
		return "Pascal"
	case nvml.DEVICE_ARCH_VOLTA:
		return "Volta"
	case nvml.DEVICE_ARCH_TURING:
		return "Turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "Ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "Ada Lovelace"
	case nvml.DEVICE_ARCH_HOPPER:
		return "Hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "Blackwell"
	case nvml.DEVICE_ARCH_RUBIN:
		return "Rubin"
	}
	return ""
}

// busID returns the PCI bus id NVML wrote, or one built from the numbers.
func busID(p nvml.PciInfo) string {
	var sb strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	if sb.Len() > 0 {
		return sb.String()
	}
	if p.Domain == 0 && p.Bus == 0 && p.Device == 0 {
		return ""
	}
	return fmt.Sprintf("%08X:%02X:%02X.0", p.Domain, p.Bus, p.Device)
}

// normBusID makes "00000000:18:00.0" and "0000:18:00.0" compare equal.
func normBusID(s string) string {
	s = strings.ToLower(s)
	dom, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	dom = strings.TrimLeft(dom, "0")
	return dom + ":" + rest
}

// memoryInfo reads total, used and free memory with the v2 call, falling
// back to v1 on drivers without it.
func memoryInfo(d nvml.Device) (total, used, free uint64, ok bool) {
	if m, ret := d.GetMemoryInfo_v2(); ret == nvml.SUCCESS {
		return m.Total, m.Used, m.Free, true
	}
	if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
		return m.Total, m.Used, m.Free, true
	}
	return 0, 0, 0, false
}

// Versions reads the driver, CUDA, NVML and per-GPU firmware versions.
func (b *Backend) Versions(ctx context.Context) (gpu.Versions, error) {
	if err := ctx.Err(); err != nil {
		return gpu.Versions{}, err
	}
	var v gpu.Versions
	if s, ret := b.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		v.Driver = s
	}
	if n, ret := b.lib.SystemGetCudaDriverVersion_v2(); ret == nvml.SUCCESS {
		v.CUDA = cudaVersion(n)
	} else if n, ret := b.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		v.CUDA = cudaVersion(n)
	}
	if s, ret := b.lib.SystemGetNVMLVersion(); ret == nvml.SUCCESS {
		v.NVML = s
	}
	hs, err := b.handles()
	if err != nil {
		return gpu.Versions{}, err
	}
	put := func(m *map[string]string, uuid, val string) {
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[uuid] = val
	}
	for _, h := range hs {
		if s, ret := h.dev.GetVbiosVersion(); ret == nvml.SUCCESS {
			put(&v.VBIOS, h.uuid, s)
		}
		if s, ret := h.dev.GetInforomImageVersion(); ret == nvml.SUCCESS {
			put(&v.InfoROM, h.uuid, s)
		}
		if s, ret := h.dev.GetGspFirmwareVersion(); ret == nvml.SUCCESS {
			put(&v.GSPFirmware, h.uuid, s)
		}
	}
	return v, nil
}

// cudaVersion turns NVML's 12040 into "12.4".
func cudaVersion(n int) string { return fmt.Sprintf("%d.%d", n/1000, (n%1000)/10) }

// Sample reads every GPU once. A reading the GPU does not support (or that
// fails) is nil. GPM metrics need two samples: the first call after start
// leaves them nil, later calls report the interval since the previous one.
func (b *Backend) Sample(ctx context.Context) ([]gpu.Sample, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	hs, err := b.handles()
	if err != nil {
		return nil, err
	}
	out := make([]gpu.Sample, 0, len(hs))
	for _, h := range hs {
		out = append(out, b.sample(h))
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }

func (b *Backend) sample(h handle) gpu.Sample {
	d := h.dev
	s := gpu.Sample{UUID: h.uuid, Time: b.now()}
	if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
		s.Utilization = ptr(float64(u.Gpu) / 100)
		s.MemoryUtilization = ptr(float64(u.Memory) / 100)
	}
	b.gpmSample(h, &s)
	if _, used, free, ok := memoryInfo(d); ok {
		s.MemoryUsedBytes = ptr(int64(used))
		s.MemoryFreeBytes = ptr(int64(free))
	}
	if mw, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
		s.PowerWatts = ptr(float64(mw) / 1000)
	}
	if mw, ret := d.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
		s.PowerLimitWatts = ptr(float64(mw) / 1000)
	}
	if mj, ret := d.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
		s.EnergyMillijoules = ptr(mj)
	}
	if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		s.TemperatureC = ptr(float64(t))
	}
	fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_MEMORY_TEMP}}
	if ret := d.GetFieldValues(fv); ret == nvml.SUCCESS && nvml.Return(fv[0].NvmlReturn) == nvml.SUCCESS {
		if t, ok := fieldFloat(fv[0]); ok && t > 0 {
			s.MemoryTemperatureC = ptr(t)
		}
	}
	if c, ret := d.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		s.SMClockMHz = ptr(float64(c))
	}
	if c, ret := d.GetClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
		s.MemoryClockMHz = ptr(float64(c))
	}
	if r, ret := d.GetCurrentClocksEventReasons(); ret == nvml.SUCCESS {
		s.ClockEventReasons = ptr(r)
	}
	if v, ret := d.GetViolationStatus(nvml.PERF_POLICY_POWER); ret == nvml.SUCCESS {
		s.PowerViolationNs = ptr(v.ViolationTime)
	}
	if v, ret := d.GetViolationStatus(nvml.PERF_POLICY_THERMAL); ret == nvml.SUCCESS {
		s.ThermalViolationNs = ptr(v.ViolationTime)
	}
	ecc := func(t nvml.MemoryErrorType, c nvml.EccCounterType) *uint64 {
		if n, ret := d.GetTotalEccErrors(t, c); ret == nvml.SUCCESS {
			return ptr(n)
		}
		return nil
	}
	s.ECCCorrectedVolatile = ecc(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
	s.ECCUncorrectedVolatile = ecc(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	s.ECCCorrectedAggregate = ecc(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC)
	s.ECCUncorrectedAggregate = ecc(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC)
	if p, ret := d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS); ret == nvml.SUCCESS {
		s.RetiredPagesSBE = ptr(uint64(len(p)))
	}
	if p, ret := d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR); ret == nvml.SUCCESS {
		s.RetiredPagesDBE = ptr(uint64(len(p)))
	}
	if st, ret := d.GetRetiredPagesPendingStatus(); ret == nvml.SUCCESS {
		s.RetiredPagesPending = ptr(st == nvml.FEATURE_ENABLED)
	}
	if corr, unc, pending, failed, ret := d.GetRemappedRows(); ret == nvml.SUCCESS {
		s.RemappedRowsCorrectable = ptr(uint64(corr))
		s.RemappedRowsUncorrectable = ptr(uint64(unc))
		s.RowRemapPending = ptr(pending)
		s.RowRemapFailure = ptr(failed)
	}
	if v, ret := d.GetCurrPcieLinkGeneration(); ret == nvml.SUCCESS {
		s.PCIeGen = ptr(v)
	}
	if v, ret := d.GetCurrPcieLinkWidth(); ret == nvml.SUCCESS {
		s.PCIeWidth = ptr(v)
	}
	if v, ret := d.GetMaxPcieLinkGeneration(); ret == nvml.SUCCESS {
		s.PCIeMaxGen = ptr(v)
	}
	if v, ret := d.GetMaxPcieLinkWidth(); ret == nvml.SUCCESS {
		s.PCIeMaxWidth = ptr(v)
	}
	if v, ret := d.GetPcieReplayCounter(); ret == nvml.SUCCESS {
		s.PCIeReplayCount = ptr(uint64(v))
	}
	// NVML's PCIe throughput is in KB/s (1024 bytes) over a 20 ms window.
	if v, ret := d.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); ret == nvml.SUCCESS {
		s.PCIeTxBytesPerSecond = ptr(float64(v) * 1024)
	}
	if v, ret := d.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); ret == nvml.SUCCESS {
		s.PCIeRxBytesPerSecond = ptr(float64(v) * 1024)
	}
	if u, _, ret := d.GetEncoderUtilization(); ret == nvml.SUCCESS {
		s.EncoderUtilization = ptr(float64(u) / 100)
	}
	if u, _, ret := d.GetDecoderUtilization(); ret == nvml.SUCCESS {
		s.DecoderUtilization = ptr(float64(u) / 100)
	}
	nvlinks(d, &s)
	migMode := false
	if cur, _, ret := d.GetMigMode(); ret == nvml.SUCCESS {
		migMode = cur == nvml.DEVICE_MIG_ENABLE
	}
	if migMode {
		s.MIG = migSamples(d)
	}
	if ps, ret := d.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
		for _, p := range ps {
			proc := gpu.Process{PID: int(p.Pid), UsedBytes: int64(p.UsedGpuMemory)}
			if migMode && p.GpuInstanceId != noInstance {
				proc.GPUInstanceID = ptr(int(p.GpuInstanceId))
			}
			s.Processes = append(s.Processes, proc)
		}
	}
	return s
}

// nvlinkErrorCounters are added into Sample.NVLinkErrors.
var nvlinkErrorCounters = []nvml.NvLinkErrorCounter{
	nvml.NVLINK_ERROR_DL_REPLAY, nvml.NVLINK_ERROR_DL_RECOVERY,
	nvml.NVLINK_ERROR_DL_CRC_FLIT, nvml.NVLINK_ERROR_DL_CRC_DATA,
}

// nvlinks counts links (a link exists when its state reads) and adds their
// error counters. A GPU with no readable link has the fields absent.
func nvlinks(d nvml.Device, s *gpu.Sample) {
	total, up := 0, 0
	var errs uint64
	errsOK := false
	for l := range nvml.NVLINK_MAX_LINKS {
		st, ret := d.GetNvLinkState(l)
		if ret != nvml.SUCCESS {
			continue
		}
		total++
		if st == nvml.FEATURE_ENABLED {
			up++
		}
		for _, c := range nvlinkErrorCounters {
			if n, ret := d.GetNvLinkErrorCounter(l, c); ret == nvml.SUCCESS {
				errs += n
				errsOK = true
			}
		}
	}
	if total == 0 {
		return
	}
	s.NVLinkLinksTotal = ptr(total)
	s.NVLinkLinksUp = ptr(up)
	if errsOK {
		s.NVLinkErrors = ptr(errs)
	}
	// Data throughput counters in KiB; scope UINT_MAX sums every link.
	fv := []nvml.FieldValue{
		{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: math.MaxUint32},
		{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: math.MaxUint32},
	}
	if ret := d.GetFieldValues(fv); ret == nvml.SUCCESS {
		for i, dst := range []**uint64{&s.NVLinkTxBytes, &s.NVLinkRxBytes} {
			if nvml.Return(fv[i].NvmlReturn) != nvml.SUCCESS {
				continue
			}
			if v, ok := fieldFloat(fv[i]); ok && v >= 0 {
				*dst = ptr(uint64(v) * 1024)
			}
		}
	}
}

// migSamples reads the memory of each MIG instance of a GPU in MIG mode.
func migSamples(d nvml.Device) []gpu.MIGSample {
	n, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil
	}
	var out []gpu.MIGSample
	for i := range n {
		mig, ret := d.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := mig.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		ms := gpu.MIGSample{UUID: uuid}
		if _, used, free, ok := memoryInfo(mig); ok {
			ms.MemoryUsedBytes, ms.MemoryFreeBytes = ptr(int64(used)), ptr(int64(free))
		}
		out = append(out, ms)
	}
	return out
}

// fieldFloat decodes a field value by its type.
func fieldFloat(f nvml.FieldValue) (float64, bool) {
	v := f.Value
	u64 := uint64(v[0]) | uint64(v[1])<<8 | uint64(v[2])<<16 | uint64(v[3])<<24 |
		uint64(v[4])<<32 | uint64(v[5])<<40 | uint64(v[6])<<48 | uint64(v[7])<<56
	u32 := uint32(u64)
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(u64), true
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(u32), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(u64), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(u64)), true
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(u32)), true
	}
	return 0, false
}

// gpmMetricIDs are read on Hopper and newer; percentages become ratios.
var gpmMetricIDs = []nvml.GpmMetricId{
	nvml.GPM_METRIC_SM_UTIL, nvml.GPM_METRIC_SM_OCCUPANCY,
	nvml.GPM_METRIC_ANY_TENSOR_UTIL, nvml.GPM_METRIC_DRAM_BW_UTIL,
}

// gpmSample takes one GPM sample and, when a previous one exists, fills
// the GPM metrics over the interval between them.
func (b *Backend) gpmSample(h handle, s *gpu.Sample) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.gpm[h.uuid]
	if !ok {
		st = &gpmState{}
		b.gpm[h.uuid] = st
		sup, ret := h.dev.GpmQueryDeviceSupport()
		if ret == nvml.SUCCESS && sup.IsSupportedDevice != 0 {
			p, r1 := b.lib.GpmSampleAlloc()
			c, r2 := b.lib.GpmSampleAlloc()
			if r1 == nvml.SUCCESS && r2 == nvml.SUCCESS {
				st.supported, st.prev, st.cur = true, p, c
			} else {
				b.log.Warn("gpm sample alloc failed", "uuid", h.uuid, "err", r1.Error(), "err2", r2.Error())
				if r1 == nvml.SUCCESS {
					p.Free()
				}
				if r2 == nvml.SUCCESS {
					c.Free()
				}
			}
		}
	}
	if !st.supported {
		return
	}
	if ret := h.dev.GpmSampleGet(st.cur); ret != nvml.SUCCESS {
		st.havePrev = false
		return
	}
	if st.havePrev {
		m := &nvml.GpmMetricsGetType{NumMetrics: uint32(len(gpmMetricIDs)), Sample1: st.prev, Sample2: st.cur}
		for i, id := range gpmMetricIDs {
			m.Metrics[i].MetricId = uint32(id)
		}
		if ret := b.lib.GpmMetricsGet(m); ret == nvml.SUCCESS {
			dst := []**float64{&s.SMActivity, &s.SMOccupancy, &s.TensorActivity, &s.DRAMActivity}
			for i := range gpmMetricIDs {
				if nvml.Return(m.Metrics[i].NvmlReturn) == nvml.SUCCESS {
					*dst[i] = ptr(m.Metrics[i].Value / 100)
				}
			}
		}
	}
	st.prev, st.cur = st.cur, st.prev
	st.havePrev = true
}

// maxWaitSlice bounds one blocking NVML wait so ctx is checked between.
const maxWaitSlice = 250 * time.Millisecond

// Events returns the XID and ECC events NVML reports, waiting at most wait
// for the first one and then taking whatever else is queued.
func (b *Backend) Events(ctx context.Context, wait time.Duration) ([]gpu.Event, error) {
	b.evMu.Lock()
	defer b.evMu.Unlock()
	if b.set == nil {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, nil
		}
	}
	var out []gpu.Event
	deadline := b.now().Add(wait)
	for {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		slice := time.Duration(0)
		if len(out) == 0 {
			slice = min(max(deadline.Sub(b.now()), 0), maxWaitSlice)
		}
		e, ret := b.set.Wait(uint32(slice.Milliseconds()))
		switch ret {
		case nvml.SUCCESS:
			if ev, ok := b.event(e); ok {
				out = append(out, ev)
			}
			continue
		case nvml.ERROR_TIMEOUT:
		default:
			// ERROR_GPU_IS_LOST and friends: report what we have; the
			// kernel log still carries the XID.
			b.log.Warn("nvml event wait failed", "err", ret.Error())
			return out, nil
		}
		if len(out) > 0 || !b.now().Before(deadline) {
			return out, nil
		}
	}
}

func (b *Backend) event(e nvml.EventData) (gpu.Event, bool) {
	ev := gpu.Event{Time: b.now()}
	if e.Device != nil {
		if u, ret := e.Device.GetUUID(); ret == nvml.SUCCESS {
			ev.UUID = u
		}
	}
	switch {
	case e.EventType&nvml.EventTypeXidCriticalError != 0:
		ev.Kind, ev.XID = gpu.EventXID, int(e.EventData)
	case e.EventType&nvml.EventTypeDoubleBitEccError != 0:
		ev.Kind = gpu.EventECCDBE
	case e.EventType&nvml.EventTypeSingleBitEccError != 0:
		ev.Kind = gpu.EventECCSBE
	default:
		return gpu.Event{}, false
	}
	return ev, true
}

// Close frees the event set and GPM samples and shuts NVML down.
func (b *Backend) Close() error {
	b.evMu.Lock()
	if b.set != nil {
		b.set.Free()
		b.set = nil
	}
	b.evMu.Unlock()
	b.mu.Lock()
	for _, st := range b.gpm {
		if st.supported {
			st.prev.Free()
			st.cur.Free()
		}
	}
	b.gpm = map[string]*gpmState{}
	b.mu.Unlock()
	if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %s", ret.Error())
	}
	return nil
}

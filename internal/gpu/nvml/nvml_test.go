//go:build linux && cgo

package nvml

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/gpu"
)

var returnType = reflect.TypeFor[nvml.Return]()

// unsupported sets every nil XxxFunc of a moq mock (a pointer to
// mock.Device, mock.Interface...) to return zero values and
// ERROR_NOT_SUPPORTED, as NVML does for a reading a GPU lacks. Unset moq
// funcs panic; this lets tests set only what they exercise.
func unsupported(m any) {
	rv := reflect.ValueOf(m).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		if f.Kind() != reflect.Func || !f.CanSet() || !f.IsNil() {
			continue
		}
		ft := f.Type()
		f.Set(reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, ft.NumOut())
			for j := range out {
				if ft.Out(j) == returnType {
					out[j] = reflect.ValueOf(nvml.ERROR_NOT_SUPPORTED)
				} else {
					out[j] = reflect.Zero(ft.Out(j))
				}
			}
			return out
		}))
	}
}

// prepare fills the unset funcs of a mock server and its devices.
func prepare(srv *server.Server) *server.Server {
	unsupported(&srv.Interface)
	for _, d := range srv.Devices {
		unsupported(&d.(*server.Device).Device)
	}
	return srv
}

func dev(srv *server.Server, i int) *server.Device { return srv.Devices[i].(*server.Device) }

func testLogger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func open(t *testing.T, lib nvml.Interface) *Backend {
	t.Helper()
	b, err := New(WithLibrary(lib), WithLogger(testLogger(t)), WithClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestNewWithoutLibraryIsUnavailable(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	_, err := New(WithLibrary(lib))
	if !errors.Is(err, gpu.ErrUnavailable) {
		t.Fatalf("New = %v, want gpu.ErrUnavailable", err)
	}
	lib.InitFunc = func() nvml.Return { return nvml.ERROR_NO_PERMISSION }
	_, err = New(WithLibrary(lib))
	if err == nil || errors.Is(err, gpu.ErrUnavailable) {
		t.Fatalf("New with no permission = %v, want a plain error", err)
	}
}

func TestDevicesMapsNamesToCatalogIDs(t *testing.T) {
	tests := map[string]struct {
		srv       *server.Server
		name      string // overrides the mock's name when set
		wantModel string
		wantArch  string
		wantCC    string
		wantMem   int64
	}{
		"H100 SXM as NVML names it": {
			srv: dgxh100.New(), wantModel: "h100-sxm-80gb", wantArch: "Hopper", wantCC: "9.0", wantMem: 80 << 30,
		},
		"A100 mock name is unknown so the model is the name": {
			srv: dgxa100.New(), wantModel: "Mock NVIDIA A100-SXM4-40GB", wantArch: "Ampere", wantCC: "8.0", wantMem: 40 << 30,
		},
		"A100 SXM4 40GB": {
			srv: dgxa100.New(), name: "NVIDIA A100-SXM4-40GB", wantModel: "a100-sxm-40gb", wantArch: "Ampere", wantCC: "8.0", wantMem: 40 << 30,
		},
		"memory words after the name are dropped": {
			srv: dgxh100.New(), name: "NVIDIA B200 180GB HBM3e", wantModel: "b200-hgx", wantArch: "Hopper", wantCC: "9.0", wantMem: 80 << 30,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := prepare(tc.srv)
			for i := range srv.Devices {
				d := dev(srv, i)
				if tc.name != "" {
					d.GetNameFunc = func() (string, nvml.Return) { return tc.name, nvml.SUCCESS }
				}
			}
			devs, err := open(t, srv).Devices(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(devs) != 8 {
				t.Fatalf("got %d devices, want 8", len(devs))
			}
			for i, d := range devs {
				if d.Index != i || d.UUID != dev(srv, i).UUID {
					t.Errorf("device %d: index %d uuid %s, want %d %s", i, d.Index, d.UUID, i, dev(srv, i).UUID)
				}
				if d.Model != tc.wantModel || d.Architecture != tc.wantArch || d.ComputeCapability.String() != tc.wantCC || d.MemoryBytes != tc.wantMem {
					t.Errorf("device %d = model %q arch %q cc %q mem %d, want %q %q %q %d",
						i, d.Model, d.Architecture, d.ComputeCapability, d.MemoryBytes, tc.wantModel, tc.wantArch, tc.wantCC, tc.wantMem)
				}
				if d.MIGMode || d.NVLinkPeers != nil || d.NVLinkDomain != "" || d.Serial != "" {
					t.Errorf("device %d: unexpected mig/nvlink/serial: %+v", i, d)
				}
			}
		})
	}
}

func busIDBytes(s string) [32]int8 {
	var b [32]int8
	for i := range len(s) {
		b[i] = int8(s[i])
	}
	return b
}

func TestDevicesNVLinkPeersAndDomain(t *testing.T) {
	srv := prepare(dgxh100.New())
	bus := func(i int) string {
		return []string{"00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"}[i]
	}
	srv.Devices = srv.Devices[:4]
	for i := range 4 {
		d := dev(srv, i)
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{BusId: busIDBytes(bus(i))}, nvml.SUCCESS }
		d.GetSerialFunc = func() (string, nvml.Return) { return "165422" + string(rune('0'+i)), nvml.SUCCESS }
	}
	// GPUs 0 and 1 have a direct link (its remote end written the short
	// way); 2 and 3 reach each other through NVSwitch (P2P only).
	dev(srv, 0).GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		if l < 2 {
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	dev(srv, 0).GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
		if l == 0 {
			return nvml.PciInfo{BusId: busIDBytes("0000:2a:00.0")}, nvml.SUCCESS
		}
		return nvml.PciInfo{BusId: busIDBytes("0000:c5:00.0")}, nvml.SUCCESS // an NVSwitch
	}
	for _, i := range []int{2, 3} {
		dev(srv, i).GetP2PStatusFunc = func(o nvml.Device, c nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			if other := o.(*server.Device).Index; c == nvml.P2P_CAPS_INDEX_NVLINK && (other == 2 || other == 3) {
				return nvml.P2P_STATUS_OK, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
	}
	// GPU 3 is registered with a fabric manager.
	dev(srv, 3).GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
		return nvml.GpuFabricInfo{ClusterUuid: [16]uint8{0xab, 1: 0xcd}, CliqueId: 7, State: nvml.GPU_FABRIC_STATE_COMPLETED}, nvml.SUCCESS
	}
	devs, err := open(t, srv).Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	type link struct {
		Bus, Serial string
		Peers       []int
		Domain      string
	}
	var got []link
	for _, d := range devs {
		got = append(got, link{d.PCIBusID, d.Serial, d.NVLinkPeers, d.NVLinkDomain})
	}
	want := []link{
		{bus(0), "1654220", []int{1}, "nvlink:" + devs[0].UUID},
		{bus(1), "1654221", []int{0}, "nvlink:" + devs[0].UUID},
		{bus(2), "1654222", []int{3}, "nvlink:" + devs[2].UUID},
		{bus(3), "1654223", []int{2}, "fabric:abcd0000-0000-0000-0000-000000000000/7"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
}

func TestDevicesListsMIGInstances(t *testing.T) {
	srv := prepare(dgxh100.New())
	d := dev(srv, 0)
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	migs := map[int]*mock.Device{}
	for i, spec := range []struct {
		slices uint32
		mib    uint64
		gi     int
	}{{3, 40448, 2}, {1, 9984, 9}, {1, 9984, 10}, {2, 20096, 5}} {
		m := &mock.Device{
			GetUUIDFunc: func() (string, nvml.Return) { return "MIG-" + string(rune('a'+i)), nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: spec.mib << 20}, nvml.SUCCESS
			},
			GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
				return nvml.DeviceAttributes{GpuInstanceSliceCount: spec.slices, MemorySizeMB: spec.mib}, nvml.SUCCESS
			},
			GetGpuInstanceIdFunc: func() (int, nvml.Return) { return spec.gi, nvml.SUCCESS },
		}
		unsupported(m) // GetMemoryInfo_v2 unsupported: falls back to v1
		migs[i] = m
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if m, ok := migs[i]; ok {
			return m, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	devs, err := open(t, srv).Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []gpu.MIGInstance{
		{UUID: "MIG-a", Profile: "3g.40gb", MemoryBytes: 40448 << 20, GPUInstanceID: 2},
		{UUID: "MIG-b", Profile: "1g.10gb", MemoryBytes: 9984 << 20, GPUInstanceID: 9},
		{UUID: "MIG-c", Profile: "1g.10gb", MemoryBytes: 9984 << 20, GPUInstanceID: 10},
		{UUID: "MIG-d", Profile: "2g.20gb", MemoryBytes: 20096 << 20, GPUInstanceID: 5},
	}
	if !devs[0].MIGMode {
		t.Error("device 0 not in MIG mode")
	}
	if diff := cmp.Diff(want, devs[0].MIG); diff != "" {
		t.Errorf("MIG (-want +got):\n%s", diff)
	}
	if devs[1].MIGMode || devs[1].MIG != nil {
		t.Errorf("device 1 = %+v, want no MIG", devs[1])
	}
	// Each instance's memory is read from its own handle.
	for i, m := range migs {
		m.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 9984 << 20, Used: uint64(i) << 30, Free: 9984<<20 - uint64(i)<<30}, nvml.SUCCESS
		}
	}
	samples, err := open(t, srv).Sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wantSamples := []gpu.MIGSample{
		{UUID: "MIG-a", MemoryUsedBytes: i64(0), MemoryFreeBytes: i64(9984 << 20)},
		{UUID: "MIG-b", MemoryUsedBytes: i64(1 << 30), MemoryFreeBytes: i64(9984<<20 - 1<<30)},
		{UUID: "MIG-c", MemoryUsedBytes: i64(2 << 30), MemoryFreeBytes: i64(9984<<20 - 2<<30)},
		{UUID: "MIG-d", MemoryUsedBytes: i64(3 << 30), MemoryFreeBytes: i64(9984<<20 - 3<<30)},
	}
	if diff := cmp.Diff(wantSamples, samples[0].MIG); diff != "" {
		t.Errorf("MIG samples (-want +got):\n%s", diff)
	}
	if samples[1].MIG != nil {
		t.Errorf("GPU 1 has MIG samples: %+v", samples[1].MIG)
	}
}

func TestVersions(t *testing.T) {
	srv := prepare(dgxh100.New())
	srv.Devices = srv.Devices[:2]
	d := dev(srv, 0)
	d.GetVbiosVersionFunc = func() (string, nvml.Return) { return "96.00.89.00.01", nvml.SUCCESS }
	d.GetInforomImageVersionFunc = func() (string, nvml.Return) { return "G520.0200.00.05", nvml.SUCCESS }
	d.GetGspFirmwareVersionFunc = func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS }
	b := open(t, srv)
	got, err := b.Versions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := gpu.Versions{
		Driver: "550.54.15", CUDA: "12.4", NVML: "12.550.54.15", // v1 CUDA call: the mock has no _v2
		VBIOS:       map[string]string{d.UUID: "96.00.89.00.01"},
		InfoROM:     map[string]string{d.UUID: "G520.0200.00.05"},
		GSPFirmware: map[string]string{d.UUID: "550.54.15"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("versions (-want +got):\n%s", diff)
	}
	srv.SystemGetCudaDriverVersion_v2Func = func() (int, nvml.Return) { return 12080, nvml.SUCCESS }
	if got, _ := b.Versions(t.Context()); got.CUDA != "12.8" {
		t.Errorf("CUDA = %q, want 12.8", got.CUDA)
	}
}

func u64(v uint64) *uint64   { return &v }
func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }
func intp(v int) *int        { return &v }
func boolp(v bool) *bool     { return &v }
func fieldU64(v uint64) [8]byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return b
}
func fieldU32(v uint32) [8]byte {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return b
}

// fullDevice makes device d of srv answer every reading the backend makes.
func fullDevice(d *server.Device) {
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 97, Memory: 41}, nvml.SUCCESS }
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		return nvml.Memory_v2{Total: 80 << 30, Used: 60 << 30, Free: 20 << 30}, nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 612_500, nvml.SUCCESS }
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 123_456_789, nvml.SUCCESS }
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 71, nvml.SUCCESS }
	d.GetFieldValuesFunc = func(fv []nvml.FieldValue) nvml.Return {
		for i := range fv {
			switch {
			case fv[i].FieldId == nvml.FI_DEV_MEMORY_TEMP:
				fv[i].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
				fv[i].Value = fieldU32(78)
			case fv[i].FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX && fv[i].ScopeId == math.MaxUint32:
				fv[i].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
				fv[i].Value = fieldU64(5_000_000)
			case fv[i].FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX && fv[i].ScopeId == math.MaxUint32:
				fv[i].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
				fv[i].Value = fieldU64(4_000_000)
			default:
				fv[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				continue
			}
			fv[i].NvmlReturn = uint32(nvml.SUCCESS)
		}
		return nvml.SUCCESS
	}
	d.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
		if c == nvml.PCIE_UTIL_TX_BYTES {
			return 1000, nvml.SUCCESS
		}
		return 2000, nvml.SUCCESS
	}
	d.GetEncoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return 0, 167000, nvml.SUCCESS }
	d.GetDecoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return 12, 167000, nvml.SUCCESS }
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		if c == nvml.CLOCK_SM {
			return 1980, nvml.SUCCESS
		}
		return 2619, nvml.SUCCESS
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return gpu.ClockEventSWPowerCap, nvml.SUCCESS }
	d.GetViolationStatusFunc = func(p nvml.PerfPolicyType) (nvml.ViolationTime, nvml.Return) {
		if p == nvml.PERF_POLICY_POWER {
			return nvml.ViolationTime{ViolationTime: 5e9}, nvml.SUCCESS
		}
		return nvml.ViolationTime{ViolationTime: 0}, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		return uint64(1 + int(t)*10 + int(c)*100), nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 2, 1, true, false, nvml.SUCCESS }
	d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 4, nvml.SUCCESS }
	d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 8, nvml.SUCCESS }
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return 3, nvml.SUCCESS }
	d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		switch {
		case l >= 18:
			return 0, nvml.ERROR_INVALID_ARGUMENT
		case l == 5:
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkErrorCounterFunc = func(l int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
		if c == nvml.NVLINK_ERROR_DL_ECC_DATA {
			return 1000, nvml.SUCCESS // not one of the counters added
		}
		return 1, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 60 << 30, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}}, nvml.SUCCESS
	}
}

func TestSampleReadsEverything(t *testing.T) {
	srv := prepare(dgxh100.New())
	srv.Devices = srv.Devices[:1]
	fullDevice(dev(srv, 0))
	got, err := open(t, srv).Sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []gpu.Sample{{
		UUID: dev(srv, 0).UUID, Time: t0,
		Utilization: f64(0.97), MemoryUtilization: f64(0.41),
		MemoryUsedBytes: i64(60 << 30), MemoryFreeBytes: i64(20 << 30),
		PowerWatts: f64(612.5), PowerLimitWatts: f64(700), EnergyMillijoules: u64(123_456_789),
		TemperatureC: f64(71), MemoryTemperatureC: f64(78),
		SMClockMHz: f64(1980), MemoryClockMHz: f64(2619),
		ClockEventReasons: u64(gpu.ClockEventSWPowerCap), PowerViolationNs: u64(5e9), ThermalViolationNs: u64(0),
		EncoderUtilization: f64(0), DecoderUtilization: f64(0.12),
		PCIeTxBytesPerSecond: f64(1000 * 1024), PCIeRxBytesPerSecond: f64(2000 * 1024),
		NVLinkTxBytes: u64(5_000_000 * 1024), NVLinkRxBytes: u64(4_000_000 * 1024),
		Counters: gpu.Counters{
			ECCCorrectedVolatile: u64(1), ECCUncorrectedVolatile: u64(11), ECCCorrectedAggregate: u64(101), ECCUncorrectedAggregate: u64(111),
			RemappedRowsCorrectable: u64(2), RemappedRowsUncorrectable: u64(1), RowRemapPending: boolp(true), RowRemapFailure: boolp(false),
			PCIeGen: intp(4), PCIeWidth: intp(8), PCIeMaxGen: intp(5), PCIeMaxWidth: intp(16), PCIeReplayCount: u64(3),
			NVLinkLinksUp: intp(17), NVLinkLinksTotal: intp(18), NVLinkErrors: u64(18 * 4),
		},
		Processes: []gpu.Process{{PID: 4242, UsedBytes: 60 << 30}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sample (-want +got):\n%s", diff)
	}
}

func TestSampleAbsentIsNilNotZero(t *testing.T) {
	srv := prepare(dgxa100.New())
	srv.Devices = srv.Devices[:3]
	// GPU 0 idles: zero utilization and a zero power reading are zeros.
	dev(srv, 0).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.SUCCESS }
	dev(srv, 0).GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.SUCCESS }
	// GPU 1 cannot read power; GPU 2 fails outright.
	dev(srv, 1).GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	dev(srv, 2).GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	b := open(t, srv)
	for range 2 { // GPM needs two samples; A100 has none either way
		got, err := b.Sample(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if got[0].Utilization == nil || *got[0].Utilization != 0 || got[0].PowerWatts == nil || *got[0].PowerWatts != 0 {
			t.Errorf("idle GPU: utilization %v power %v, want present zeros", got[0].Utilization, got[0].PowerWatts)
		}
		for i, s := range got {
			if s.SMActivity != nil || s.SMOccupancy != nil || s.TensorActivity != nil || s.DRAMActivity != nil {
				t.Errorf("A100 %d has GPM metrics: %+v", i, s)
			}
			if i > 0 && s.PowerWatts != nil {
				t.Errorf("GPU %d power = %v, want nil", i, *s.PowerWatts)
			}
			if s.TemperatureC != nil || s.NVLinkLinksTotal != nil || s.RemappedRowsCorrectable != nil || s.MemoryUsedBytes == nil {
				t.Errorf("GPU %d: unsupported readings present or memory missing: %+v", i, s)
			}
		}
	}
}

func TestSampleGPMOnHopper(t *testing.T) {
	srv := prepare(dgxh100.New())
	srv.Devices = srv.Devices[:1]
	d := dev(srv, 0)
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{IsSupportedDevice: 1}, nvml.SUCCESS }
	d.GpmSampleGetFunc = func(nvml.GpmSample) nvml.Return { return nvml.SUCCESS }
	var allocated, freed int
	srv.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		allocated++
		return &mock.GpmSample{FreeFunc: func() nvml.Return { freed++; return nvml.SUCCESS }}, nvml.SUCCESS
	}
	percent := map[nvml.GpmMetricId]float64{
		nvml.GPM_METRIC_SM_UTIL: 90, nvml.GPM_METRIC_SM_OCCUPANCY: 45,
		nvml.GPM_METRIC_ANY_TENSOR_UTIL: 60, nvml.GPM_METRIC_DRAM_BW_UTIL: 30,
	}
	srv.GpmMetricsGetFunc = func(m *nvml.GpmMetricsGetType) nvml.Return {
		if m.Sample1 == m.Sample2 {
			t.Error("GPM diff of a sample with itself")
		}
		for i := range m.NumMetrics {
			id := nvml.GpmMetricId(m.Metrics[i].MetricId)
			if id == nvml.GPM_METRIC_SM_OCCUPANCY {
				m.Metrics[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				continue
			}
			m.Metrics[i].Value = percent[id]
		}
		return nvml.SUCCESS
	}
	b := open(t, srv)
	first, err := b.Sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if first[0].SMActivity != nil {
		t.Errorf("first sample SM activity = %v, want nil (no interval yet)", *first[0].SMActivity)
	}
	for range 3 {
		got, err := b.Sample(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		type gpm struct{ SM, Occ, Tensor, DRAM *float64 }
		want := gpm{f64(0.9), nil, f64(0.6), f64(0.3)}
		if diff := cmp.Diff(want, gpm{got[0].SMActivity, got[0].SMOccupancy, got[0].TensorActivity, got[0].DRAMActivity}); diff != "" {
			t.Errorf("GPM (-want +got):\n%s", diff)
		}
	}
	if n := len(d.GpmSampleGetCalls()); n != 4 {
		t.Errorf("GpmSampleGet called %d times in 4 samples, want 4", n)
	}
	b.Close()
	if allocated != 2 || freed != 2 {
		t.Errorf("allocated %d freed %d GPM samples, want 2 and 2", allocated, freed)
	}
}

func TestEvents(t *testing.T) {
	srv := prepare(dgxh100.New())
	srv.Devices = srv.Devices[:3]
	for i := range 3 {
		dev(srv, i).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeClock, nvml.SUCCESS
		}
		dev(srv, i).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	// GPU 2 refuses: it is skipped, not fatal.
	dev(srv, 2).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	queue := []nvml.EventData{
		{Device: dev(srv, 0), EventType: nvml.EventTypeXidCriticalError, EventData: 79},
		{Device: dev(srv, 1), EventType: nvml.EventTypeDoubleBitEccError},
		{Device: dev(srv, 1), EventType: nvml.EventTypeSingleBitEccError},
	}
	set := &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			if len(queue) == 0 {
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			e := queue[0]
			queue = queue[1:]
			return e, nvml.SUCCESS
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	b := open(t, srv)
	for i := range 2 {
		calls := dev(srv, i).RegisterEventsCalls()
		if len(calls) != 1 || calls[0].V != nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError {
			t.Errorf("GPU %d registered %+v, want the supported subset of the mask", i, calls)
		}
	}
	got, err := b.Events(t.Context(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []gpu.Event{
		{UUID: dev(srv, 0).UUID, Time: t0, Kind: gpu.EventXID, XID: 79},
		{UUID: dev(srv, 1).UUID, Time: t0, Kind: gpu.EventECCDBE},
		{UUID: dev(srv, 1).UUID, Time: t0, Kind: gpu.EventECCSBE},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if got, err := b.Events(t.Context(), 0); err != nil || got != nil {
		t.Errorf("Events on an empty queue = %v, %v; want nothing", got, err)
	}
}

func TestEventsWithoutEventSetWaitsAndReturnsNothing(t *testing.T) {
	srv := prepare(dgxh100.New()) // EventSetCreate unsupported
	b := open(t, srv)
	got, err := b.Events(t.Context(), 10*time.Millisecond)
	if err != nil || got != nil {
		t.Errorf("Events = %v, %v; want nothing", got, err)
	}
}

func TestDumpWritesSnapshotJSON(t *testing.T) {
	srv := prepare(dgxh100.New())
	srv.Devices = srv.Devices[:2]
	fullDevice(dev(srv, 0))
	var buf bytes.Buffer
	if err := DumpBackend(t.Context(), &buf, open(t, srv), 0); err != nil {
		t.Fatal(err)
	}
	var snap gpu.Snapshot
	if err := json.Unmarshal(buf.Bytes(), &snap); err != nil {
		t.Fatalf("dump is not a snapshot: %v\n%s", err, buf.String())
	}
	if len(snap.Devices) != 2 || len(snap.Samples) != 2 || snap.Versions.Driver != "550.54.15" {
		t.Errorf("snapshot = %+v", snap)
	}
	// Absent readings are JSON nulls, present zeros are zeros.
	if !strings.Contains(buf.String(), `"sm_activity": null`) || !strings.Contains(buf.String(), `"thermal_violation_ns": 0`) {
		t.Errorf("dump lacks null/zero distinction:\n%s", buf.String())
	}
}

// TestDevicesVirtualization: NVML's virtualization mode is read per
// device; a driver that does not support the call leaves it empty.
func TestDevicesVirtualization(t *testing.T) {
	srv := prepare(dgxh100.New())
	srv.Devices = srv.Devices[:4]
	modes := []nvml.GpuVirtualizationMode{nvml.GPU_VIRTUALIZATION_MODE_NONE, nvml.GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
		nvml.GPU_VIRTUALIZATION_MODE_VGPU, nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU}
	for i, m := range modes {
		dev(srv, i).GetVirtualizationModeFunc = func() (nvml.GpuVirtualizationMode, nvml.Return) { return m, nvml.SUCCESS }
	}
	devs, err := open(t, srv).Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"", "passthrough", "vgpu", "vgpu-host"} {
		if devs[i].Virtualization != want {
			t.Errorf("device %d: virtualization %q, want %q", i, devs[i].Virtualization, want)
		}
	}
	unsupported := prepare(dgxh100.New())
	devs, err = open(t, unsupported).Devices(t.Context())
	if err != nil || devs[0].Virtualization != "" {
		t.Errorf("unsupported call: %q, %v", devs[0].Virtualization, err)
	}
}

package agent

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// testView is a node with a Hopper GPU (GPM present) running team-a's
// attempt and an L4 (no GPM, no HBM temperature) that saw XID 13.
func testView() metricsView {
	return metricsView{
		node: "n1", hostname: "n1", driver: "550.54.15",
		devices: []gpu.Device{
			{Index: 0, UUID: "GPU-h", Name: "NVIDIA H100 80GB HBM3", Model: "h100-sxm-80gb", PCIBusID: "00000000:18:00.0", MemoryBytes: 80 << 30},
			{Index: 1, UUID: "GPU-l", Name: "NVIDIA L4", Model: "l4", PCIBusID: "00000000:2A:00.0", MemoryBytes: 24 << 30},
		},
		inventory: []gpufleet.NodeGPU{{Index: 0, UUID: "GPU-h", Health: gpufleet.Healthy}, {Index: 1, UUID: "GPU-l", Health: gpufleet.Degraded, Reason: "XID 13"}},
		latest: map[string]gpu.Sample{
			"GPU-h": {UUID: "GPU-h", Utilization: ptr(1.0), SMActivity: ptr(0.9), TensorActivity: ptr(0.6), DRAMActivity: ptr(0.3),
				MemoryUsedBytes: ptr(int64(60 << 30)), MemoryFreeBytes: ptr(int64(20 << 30)), PowerWatts: ptr(650.0),
				EnergyMillijoules: ptr(uint64(123_456_789)), TemperatureC: ptr(71.0), MemoryTemperatureC: ptr(80.0),
				SMClockMHz: ptr(1980.0), ClockEventReasons: ptr(gpu.ClockEventSWPowerCap), Counters: gpu.Counters{ECCUncorrectedVolatile: ptr(uint64(0))},
				EncoderUtilization: ptr(0.0), DecoderUtilization: ptr(0.25), PCIeTxBytesPerSecond: ptr(1e9), PCIeRxBytesPerSecond: ptr(2e9),
				NVLinkTxBytes: ptr(uint64(3e12)), NVLinkRxBytes: ptr(uint64(2e12))},
			"GPU-l": {UUID: "GPU-l", Utilization: ptr(0.0), MemoryUsedBytes: ptr(int64(0)), PowerWatts: ptr(16.0), TemperatureC: ptr(35.0)},
		},
		latestAt: time.Now(), sampleOK: true, sampleDur: 3 * time.Millisecond,
		nvlinkRate: map[string][2]float64{"GPU-h": {1.5e11, 1.4e11}},
		holders:    map[string]Holder{"GPU-h": {Team: "team-a", Job: "j-7", Priority: "training"}},
		xidCount:   map[string]map[int]float64{"GPU-l": {13: 1}},
		lastXID:    map[string]int{"GPU-l": 13},
		beats:      10, lastOK: time.Now(),
		attempts:  map[gpufleet.AttemptState]int{gpufleet.AttemptRunning: 1},
		allocated: map[string]float64{"GPU-h": 1},
	}
}

func gather(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, req)
	return rec.Body.String()
}

func TestNativeMetricsAbsentNotZero(t *testing.T) {
	v := testView()
	text := gather(t, NativeCollector(func() metricsView { return v }))
	mustHave := []string{
		`gpufleet_gpu_sm_active_ratio{gpu="0",job="j-7",model="h100-sxm-80gb",node="n1",priority="training",team="team-a",uuid="GPU-h"} 0.9`,
		`gpufleet_gpu_utilization_ratio{gpu="1",job="",model="l4",node="n1",priority="",team="",uuid="GPU-l"} 0`, // a real zero stays
		`gpufleet_gpu_energy_joules_total{gpu="0",job="j-7",model="h100-sxm-80gb",node="n1",priority="training",team="team-a",uuid="GPU-h"} 123456.789`,
		`gpufleet_gpu_sm_clock_hertz{gpu="0",job="j-7",model="h100-sxm-80gb",node="n1",priority="training",team="team-a",uuid="GPU-h"} 1.98e+09`,
		`gpufleet_gpu_memory_used_bytes{gpu="0",job="j-7",model="h100-sxm-80gb",node="n1",priority="training",team="team-a",uuid="GPU-h"} 6.442450944e+10`,
		`gpufleet_gpu_clock_event_active{gpu="0",job="j-7",model="h100-sxm-80gb",node="n1",priority="training",reason="sw_power_cap",team="team-a",uuid="GPU-h"} 1`,
		`gpufleet_gpu_xid_errors_total{gpu="1",job="",model="l4",node="n1",priority="",team="",uuid="GPU-l",xid="13"} 1`,
		`gpufleet_gpu_health{gpu="1",health="degraded",job="",model="l4",node="n1",priority="",team="",uuid="GPU-l"} 1`,
		`gpufleet_agent_scrape_success{node="n1"} 1`,
	}
	for _, s := range mustHave {
		if !strings.Contains(text, s) {
			t.Errorf("missing %s", s)
		}
	}
	// The L4 reports no GPM, HBM temperature or energy: those series are
	// absent for it, never 0.
	for _, name := range []string{"gpufleet_gpu_sm_active_ratio", "gpufleet_gpu_memory_temperature_celsius", "gpufleet_gpu_energy_joules_total",
		"gpufleet_gpu_tensor_active_ratio", "gpufleet_gpu_ecc_errors_total"} {
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, name+"{") && strings.Contains(line, `uuid="GPU-l"`) {
				t.Errorf("absent reading exported: %s", line)
			}
		}
	}
	if n := strings.Count(text, "\ngpufleet_gpu_sm_active_ratio{"); n != 1 {
		t.Errorf("%d sm_active series, want 1 (the H100's)", n)
	}
}

func TestDCGMMetricsUnitsAndLabels(t *testing.T) {
	v := testView()
	text := gather(t, DCGMCollector(func() metricsView { return v }))
	// One hostname label, Hostname as dcgm-exporter spells it; GPU_I_*
	// empty (absent once scraped) on a whole GPU.
	labels := `DCGM_FI_DRIVER_VERSION="550.54.15",GPU_I_ID="",GPU_I_PROFILE="",Hostname="n1",UUID="GPU-h",device="nvidia0",gpu="0",hpc_job="j-7",modelName="NVIDIA H100 80GB HBM3",pci_bus_id="00000000:18:00.0"`
	for _, s := range []string{
		`DCGM_FI_DEV_GPU_UTIL{` + labels + `} 100`,
		`DCGM_FI_DEV_FB_USED{` + labels + `} 61440`,
		`DCGM_FI_DEV_FB_FREE{` + labels + `} 20480`,
		`DCGM_FI_DEV_POWER_USAGE{` + labels + `} 650`,
		`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{` + labels + `} 1.23456789e+08`,
		`DCGM_FI_PROF_SM_ACTIVE{` + labels + `} 0.9`,
		`DCGM_FI_DEV_SM_CLOCK{` + labels + `} 1980`,
		`DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{` + labels + `} 0`,
		`DCGM_FI_DEV_ENC_UTIL{` + labels + `} 0`,
		`DCGM_FI_DEV_DEC_UTIL{` + labels + `} 25`,
		`DCGM_FI_PROF_PCIE_TX_BYTES{` + labels + `} 1e+09`,
		`DCGM_FI_PROF_PCIE_RX_BYTES{` + labels + `} 2e+09`,
		`DCGM_FI_PROF_NVLINK_TX_BYTES{` + labels + `} 1.5e+11`,
		`DCGM_FI_PROF_NVLINK_RX_BYTES{` + labels + `} 1.4e+11`,
	} {
		if !strings.Contains(text, s) {
			t.Errorf("missing %s", s)
		}
	}
	if !strings.Contains(text, `DCGM_FI_DEV_XID_ERRORS{`+labels+`} 0`) || !regexp.MustCompile(`DCGM_FI_DEV_XID_ERRORS\{[^}]*UUID="GPU-l"[^}]*\} 13`).MatchString(text) {
		t.Error("XID gauge: want 0 for the H100 (none yet) and 13 for the L4")
	}
	if strings.Contains(text, "hostname=") {
		t.Error("a second hostname label")
	}
	if strings.Contains(text, `DCGM_FI_PROF_SM_ACTIVE{DCGM_FI_DRIVER_VERSION="550.54.15",GPU_I_ID="",GPU_I_PROFILE="",Hostname="n1",UUID="GPU-l"`) {
		t.Error("SM activity exported for a GPU without GPM")
	}
}

// dcgmAllowedLints are the promtool lints the dcgm-exporter-compatible set
// may raise: its names and units are dcgm-exporter's, not Prometheus
// conventions (the reason the native set exists).
var dcgmAllowedLints = []string{
	`counter metrics should have "_total" suffix`,
	`label names should be written in 'snake_case' not 'camelCase'`, // modelName
}

// promtool finds promtool, installing Debian's prometheus package when
// possible (the test runs as root in CI).
func promtool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if _, err := exec.LookPath("apt-get"); err == nil {
		out, err := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "prometheus").CombinedOutput()
		if p, lerr := exec.LookPath("promtool"); lerr == nil {
			return p
		}
		t.Logf("apt-get install prometheus: %v\n%s", err, out)
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("promtool not available: scripts/test installs it (apt-get install prometheus)")
	}
	t.Skip("promtool not available (apt-get install prometheus)")
	return ""
}

// lint runs promtool check metrics and returns its problem lines.
func lint(t *testing.T, bin, text string) []string {
	t.Helper()
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, _ := cmd.CombinedOutput()
	var problems []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			problems = append(problems, l)
		}
	}
	return problems
}

func TestPromtoolCheckMetrics(t *testing.T) {
	bin := promtool(t)
	v := testView()
	native := gather(t, NativeCollector(func() metricsView { return v }))
	if problems := lint(t, bin, native); len(problems) > 0 {
		t.Errorf("promtool on the native set:\n%s", strings.Join(problems, "\n"))
	}
	dcgmText := gather(t, DCGMCollector(func() metricsView { return v }))
	dcgmProblems := lint(t, bin, dcgmText)
	t.Logf("allowed promtool lints on the DCGM set:\n%s", strings.Join(dcgmProblems, "\n"))
	for _, p := range dcgmProblems {
		if !slices.ContainsFunc(dcgmAllowedLints, func(a string) bool { return strings.Contains(p, a) }) {
			t.Errorf("promtool on the DCGM set: %s (not one of the allowed dcgm naming lints)", p)
		}
	}
}

func TestMIGInstanceSeries(t *testing.T) {
	v := testView()
	v.devices[0].MIGMode = true
	v.devices[0].MIG = []gpu.MIGInstance{
		{UUID: "MIG-a", Profile: "3g.40gb", MemoryBytes: 40 << 30, GPUInstanceID: 2},
		{UUID: "MIG-b", Profile: "1g.10gb", MemoryBytes: 10 << 30, GPUInstanceID: 9},
	}
	s := v.latest["GPU-h"]
	s.MIG = []gpu.MIGSample{{UUID: "MIG-a", MemoryUsedBytes: ptr(int64(30 << 30)), MemoryFreeBytes: ptr(int64(10 << 30))},
		{UUID: "MIG-b", MemoryUsedBytes: ptr(int64(0)), MemoryFreeBytes: ptr(int64(10 << 30))}}
	v.latest["GPU-h"] = s
	v.holders = map[string]Holder{"GPU-h": {Team: "team-b", Job: "j-9", Priority: "inference"}, "MIG-a": {Team: "team-b", Job: "j-9", Priority: "inference"}}
	v.allocated = map[string]float64{"GPU-h": 3.0 / 7, "MIG-a": 1}

	native := gather(t, NativeCollector(func() metricsView { return v }))
	for _, want := range []string{
		`gpufleet_mig_memory_used_bytes{gpu="0",gpu_instance_id="2",gpu_instance_profile="3g.40gb",job="j-9",mig_uuid="MIG-a",model="h100-sxm-80gb",node="n1",priority="inference",team="team-b",uuid="GPU-h"} 3.221225472e+10`,
		`gpufleet_mig_allocated_ratio{gpu="0",gpu_instance_id="2",gpu_instance_profile="3g.40gb",job="j-9",mig_uuid="MIG-a",model="h100-sxm-80gb",node="n1",priority="inference",team="team-b",uuid="GPU-h"} 1`,
		`gpufleet_mig_allocated_ratio{gpu="0",gpu_instance_id="9",gpu_instance_profile="1g.10gb",job="",mig_uuid="MIG-b",model="h100-sxm-80gb",node="n1",priority="",team="",uuid="GPU-h"} 0`,
		`gpufleet_mig_memory_total_bytes{gpu="0",gpu_instance_id="9",gpu_instance_profile="1g.10gb",job="",mig_uuid="MIG-b",model="h100-sxm-80gb",node="n1",priority="",team="",uuid="GPU-h"} 1.073741824e+10`,
		`gpufleet_gpu_nvlink_transmit_bytes_total{gpu="0",job="j-9",model="h100-sxm-80gb",node="n1",priority="inference",team="team-b",uuid="GPU-h"} 3e+12`,
	} {
		if !strings.Contains(native, want) {
			t.Errorf("native set lacks %s", want)
		}
	}
	dcgmText := gather(t, DCGMCollector(func() metricsView { return v }))
	for _, want := range []string{
		`DCGM_FI_DEV_FB_USED{DCGM_FI_DRIVER_VERSION="550.54.15",GPU_I_ID="2",GPU_I_PROFILE="3g.40gb",Hostname="n1",UUID="GPU-h",device="nvidia0",gpu="0",hpc_job="j-9",modelName="NVIDIA H100 80GB HBM3",pci_bus_id="00000000:18:00.0"} 30720`,
		`DCGM_FI_DEV_FB_FREE{DCGM_FI_DRIVER_VERSION="550.54.15",GPU_I_ID="9",GPU_I_PROFILE="1g.10gb",Hostname="n1",UUID="GPU-h",device="nvidia0",gpu="0",hpc_job="",modelName="NVIDIA H100 80GB HBM3",pci_bus_id="00000000:18:00.0"} 10240`,
	} {
		if !strings.Contains(dcgmText, want) {
			t.Errorf("DCGM set lacks %s", want)
		}
	}
}

func TestNVLinkRates(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	at := func(sec int, tx, rx uint64) gpu.Sample {
		return gpu.Sample{Time: t0.Add(time.Duration(sec) * time.Second), NVLinkTxBytes: &tx, NVLinkRxBytes: &rx}
	}
	for name, tc := range map[string]struct {
		prev, cur gpu.Sample
		want      [2]float64
		ok        bool
	}{
		"rate over the interval": {at(0, 100, 50), at(10, 1100, 550), [2]float64{100, 50}, true},
		"driver reload resets":   {at(0, 1000, 1000), at(10, 5, 5), [2]float64{}, false},
		"same time":              {at(0, 1, 1), at(0, 2, 2), [2]float64{}, false},
		"no counters":            {gpu.Sample{Time: t0}, gpu.Sample{Time: t0.Add(time.Second)}, [2]float64{}, false},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := nvlinkRates(map[string]gpu.Sample{"g": tc.prev}, map[string]gpu.Sample{"g": tc.cur})["g"]
			if ok != tc.ok || got != tc.want {
				t.Errorf("rate = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

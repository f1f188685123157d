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
				SMClockMHz: ptr(1980.0), ClockEventReasons: ptr(gpu.ClockEventSWPowerCap), Counters: gpu.Counters{ECCUncorrectedVolatile: ptr(uint64(0))}},
			"GPU-l": {UUID: "GPU-l", Utilization: ptr(0.0), MemoryUsedBytes: ptr(int64(0)), PowerWatts: ptr(16.0), TemperatureC: ptr(35.0)},
		},
		latestAt: time.Now(), sampleOK: true, sampleDur: 3 * time.Millisecond,
		holders:  map[string]Holder{"GPU-h": {Team: "team-a", Job: "j-7", Priority: "training"}},
		xidCount: map[string]map[int]float64{"GPU-l": {13: 1}},
		lastXID:  map[string]int{"GPU-l": 13},
		beats:    10, lastOK: time.Now(),
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
	labels := `DCGM_FI_DRIVER_VERSION="550.54.15",Hostname="n1",UUID="GPU-h",device="nvidia0",gpu="0",hostname="n1",hpc_job="j-7",modelName="NVIDIA H100 80GB HBM3",pci_bus_id="00000000:18:00.0"`
	for _, s := range []string{
		`DCGM_FI_DEV_GPU_UTIL{` + labels + `} 100`,
		`DCGM_FI_DEV_FB_USED{` + labels + `} 61440`,
		`DCGM_FI_DEV_FB_FREE{` + labels + `} 20480`,
		`DCGM_FI_DEV_POWER_USAGE{` + labels + `} 650`,
		`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{` + labels + `} 1.23456789e+08`,
		`DCGM_FI_PROF_SM_ACTIVE{` + labels + `} 0.9`,
		`DCGM_FI_DEV_SM_CLOCK{` + labels + `} 1980`,
		`DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{` + labels + `} 0`,
	} {
		if !strings.Contains(text, s) {
			t.Errorf("missing %s", s)
		}
	}
	if !strings.Contains(text, `DCGM_FI_DEV_XID_ERRORS{`+labels+`} 0`) || !regexp.MustCompile(`DCGM_FI_DEV_XID_ERRORS\{[^}]*UUID="GPU-l"[^}]*\} 13`).MatchString(text) {
		t.Error("XID gauge: want 0 for the H100 (none yet) and 13 for the L4")
	}
	if strings.Contains(text, `DCGM_FI_PROF_SM_ACTIVE{DCGM_FI_DRIVER_VERSION="550.54.15",Hostname="n1",UUID="GPU-l"`) {
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

package bench_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

func TestParseTests(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []bench.Test
		bad  bool
	}{
		{in: "", want: nil}, // every test of the level
		{in: "all", want: nil},
		{in: "memory,stress", want: []bench.Test{bench.Memory, bench.Stress}},
		{in: "p2p, COPY,copy", want: []bench.Test{bench.Copy, bench.P2P}},
		{in: "gemm,nope", bad: true},
		{in: ",", bad: true},
	} {
		got, err := bench.ParseTests(tc.in)
		if tc.bad {
			if !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "tests") {
				t.Errorf("ParseTests(%q) = %v, want an invalid-tests error", tc.in, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseTests(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseGPUsAndGates(t *testing.T) {
	if g, err := bench.ParseGPUs("3,1,3", 8); err != nil || !slices.Equal(g, []int{1, 3}) {
		t.Errorf("ParseGPUs = %v, %v", g, err)
	}
	for _, bad := range []string{"8", "-1", "x", "1,,2"} {
		if _, err := bench.ParseGPUs(bad, 8); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParseGPUs(%q) = %v, want invalid", bad, err)
		}
	}
	g, err := bench.ParseGates("copy=0.8, gemm=0.95")
	if err != nil || g.For(bench.Copy) != 0.8 || g.For(bench.GEMM) != 0.95 || g.For(bench.P2P) != bench.DefaultGate {
		t.Errorf("ParseGates = %v, %v", g, err)
	}
	if g, err := bench.ParseGates("0.7"); err != nil || g.For(bench.AllReduce) != 0.7 {
		t.Errorf("ParseGates(0.7) = %v, %v", g, err)
	}
	for _, bad := range []string{"0", "1.5", "copy=", "nope=0.9", "NaN", "copy=0.9,x"} {
		if _, err := bench.ParseGates(bad); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParseGates(%q) = %v, want invalid", bad, err)
		}
	}
}

// simFigures benches a simulated node of 8 H100 with the given faults.
func simFigures(t *testing.T, node string, faults map[int]simgpu.Fault, o bench.Options) []bench.Result {
	t.Helper()
	be, err := simgpu.New([]simgpu.Spec{{Model: "h100-sxm-80gb", Count: 8}}, simgpu.WithNodeName(node))
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range faults {
		if err := be.Inject(i, f); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := be.Measure(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []bench.Result
	for _, f := range bench.Summarize(catalog.Default(), ms) {
		out = append(out, bench.Result{Figure: f, Node: node, At: time.Unix(0, 0)})
	}
	return out
}

// TestSimulatedFleetJudgement runs every microbenchmark on simulated
// nodes, one with slow memory on GPU 3, a power brake on GPU 4 and every
// NVLink of GPU 5 down, and checks that the fleet rule flags exactly those
// figures, and that the healthy figures sit where real H100s measure.
func TestSimulatedFleetJudgement(t *testing.T) {
	healthy := simFigures(t, "n0", nil, bench.Options{})
	sick := simFigures(t, "n1", map[int]simgpu.Fault{
		3: {Kind: simgpu.FaultSlowMemory},
		4: {Kind: simgpu.FaultPowerBrake},
		5: {Kind: simgpu.FaultNVLinkDown, Links: 18},
	}, bench.Options{})
	fleet := append(slices.Clone(healthy), sick...)

	// Healthy figures against the spec.
	for _, r := range healthy {
		if r.Ratio == nil {
			t.Errorf("%s gpu %d: no spec", r.Name, r.GPU)
			continue
		}
		lo, hi := 0.75, 0.95
		switch r.Name {
		case "gemm-fp8", "gemm-int8":
			lo, hi = 0.6, 0.75
		case "gemm-fp64":
			lo, hi = 1.6, 1.8 // DGEMM on the FP64 tensor cores; the catalog lists the vector rate
		case "gemm-fp32", "gemm-tf32":
			lo, hi = 0.7, 0.8
		}
		if *r.Ratio < lo || *r.Ratio > hi {
			t.Errorf("%s gpu %d: ratio %.2f, want %.2f-%.2f", r.Name, r.GPU, *r.Ratio, lo, hi)
		}
		runs := 20
		if r.Test == bench.P2P && r.Peer == nil {
			runs = 14 // the median of its 7 peers, both directions
		}
		if r.Runs != runs || r.Spread <= 0 || r.Spread > 0.05 {
			t.Errorf("%s gpu %d: %d runs, spread %.3f", r.Name, r.GPU, r.Runs, r.Spread)
		}
	}
	var flagged []string
	for _, s := range bench.Judge(figures(sick), fleet, bench.Gates{}) {
		flagged = append(flagged, s.Figure.Name+"@"+string(rune('0'+s.Figure.GPU)))
		if !strings.Contains(s.Evidence, "fleet median") || !strings.Contains(s.Evidence, "h100-sxm-80gb") {
			t.Errorf("evidence %q", s.Evidence)
		}
	}
	slices.Sort(flagged)
	want := []string{"copy@3", "gemm-bf16@4", "gemm-fp16@4", "gemm-fp32@4", "gemm-fp64@4", "gemm-fp8@4", "gemm-int8@4", "gemm-tf32@4", "p2p@5"}
	if !slices.Equal(flagged, want) {
		t.Errorf("flagged %v\nwant    %v", flagged, want)
	}
	// The healthy node judged against the same fleet: nothing.
	if s := bench.Judge(figures(healthy), fleet, bench.Gates{}); len(s) != 0 {
		t.Errorf("healthy node flagged: %v", s[0].Evidence)
	}
	// A lower gate lets the slow memory (0.6) through.
	if s := bench.Judge(figures(sick), fleet, bench.Gates{bench.Copy: 0.5}); slices.ContainsFunc(s, func(s bench.Shortfall) bool { return s.Figure.Name == "copy" }) {
		t.Error("copy flagged under a 0.5 gate")
	}
}

func TestCompareNeedsPeers(t *testing.T) {
	one := simFigures(t, "solo", nil, bench.Options{GPUs: []int{0, 1}, Tests: []bench.Test{bench.Copy}, Quick: true})
	c := bench.Compare(one[0].Figure, one, bench.Gates{})
	if c.Peers != 1 || c.Fraction != nil || c.Degraded {
		t.Errorf("one peer: %+v, want no verdict", c)
	}
	if one[0].Runs != 5 {
		t.Errorf("quick runs %d", one[0].Runs)
	}
}

func TestLatest(t *testing.T) {
	a := bench.Result{Figure: bench.Figure{Measurement: bench.Measurement{Name: "copy", UUID: "u"}, Value: 1}, At: time.Unix(10, 0)}
	b := a
	b.Value, b.At = 2, time.Unix(20, 0)
	c := a
	c.UUID = "v"
	got := bench.Latest([]bench.Result{b, a, c})
	if len(got) != 2 || got[0].Value != 2 || got[1].UUID != "v" {
		t.Errorf("Latest = %+v", got)
	}
}

func figures(rs []bench.Result) []bench.Figure {
	var out []bench.Figure
	for _, r := range rs {
		out = append(out, r.Figure)
	}
	return out
}

// TestBaselineMatchesNaiveMedian: the leave-one-out median from one
// sorted group equals the median of the other GPUs computed directly.
func TestBaselineMatchesNaiveMedian(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n < 12; n++ {
		var fleet []bench.Result
		for i := range n {
			v := float64(1 + rng.IntN(5)) // repeats on purpose
			fleet = append(fleet, bench.Result{Figure: bench.Figure{Measurement: bench.Measurement{Name: "copy", Test: bench.Copy, Model: "m", GPUs: 1,
				UUID: fmt.Sprintf("u%d", i)}, Value: v}})
		}
		base := bench.NewBaseline(fleet)
		for _, r := range append(fleet, bench.Result{Figure: bench.Figure{Measurement: bench.Measurement{Name: "copy", Test: bench.Copy, Model: "m", GPUs: 1, UUID: "new"}, Value: 2}}) {
			var others []float64
			for _, o := range fleet {
				if o.UUID != r.UUID {
					others = append(others, o.Value)
				}
			}
			c := base.Compare(r.Figure, bench.Gates{})
			if c.Peers != len(others) || (len(others) > 0 && c.Median != bench.Median(others)) {
				t.Fatalf("n=%d %s: got median %g of %d, want %g of %d", n, r.UUID, c.Median, c.Peers, bench.Median(others), len(others))
			}
		}
	}
}

func f64(v float64) *float64 { return &v }

// TestWorkloadReport: rows in order, cost and energy per unit, the bound
// from the activity counters, the planner's ratio, and notes where the
// job printed nothing or the GPU has no counters.
func TestWorkloadReport(t *testing.T) {
	w := bench.Workload{ID: "wb-1", Metric: `tok/s=([0-9.]+)`, Unit: "tokens", GPUs: 2}
	runs := []bench.WorkloadRun{
		{GPUModel: "h100", State: "succeeded", Done: true, GPUs: 2, Throughput: f64(2000), Seconds: 100, EnergyJoules: 100000,
			SMActivity: f64(0.9), TensorActivity: f64(0.7), DRAMActivity: f64(0.3), PricePerHourUSD: f64(7.2), Predicted: f64(2500)},
		{GPUModel: "h200", State: "succeeded", Done: true, GPUs: 2, Throughput: f64(3000), Seconds: 100, EnergyJoules: 90000,
			SMActivity: f64(0.5), TensorActivity: f64(0.1), DRAMActivity: f64(0.8)},
		{GPUModel: "h20", State: "succeeded", Done: true, GPUs: 2, Throughput: f64(100), Seconds: 100, EnergyJoules: 9000,
			SMActivity: f64(0.2), TensorActivity: f64(0.05), DRAMActivity: f64(0.1)},
		{GPUModel: "a100", State: "succeeded", Done: true, GPUs: 2},
		{GPUModel: "l4", State: "running", GPUs: 2, Throughput: f64(10)},
	}
	rep := bench.Report(w, runs)
	if rep.Done {
		t.Error("done with a job running")
	}
	type row struct {
		bound, note   string
		usd, jpu, rat string
	}
	s := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.3g", *v)
	}
	var got []row
	for _, r := range rep.Rows {
		got = append(got, row{r.Bound, r.Note, s(r.USDPerMillion), s(r.JoulesPerUnit), s(r.Ratio)})
	}
	want := []row{
		// $7.2/h x 2 GPUs / 3600 / 2000 tokens/s x 1e6; 1000 W / 2000 tokens/s.
		{"compute", "tensor pipes active 70%, DRAM 30%", "2", "0.5", "0.8"},
		{"memory", "DRAM active 80%, tensor pipes 10%", "-", "0.3", "-"},
		{"neither", "SMs active 20% of the time, DRAM 10%, tensor pipes 5%: the GPU waits on the host, input or launches", "-", "0.9", "-"},
		{"unknown", "no SM, tensor and DRAM activity counters on this GPU model (GPM needs Hopper or newer); the job printed no line matching tok/s=([0-9.]+)", "-", "-", "-"},
		{"unknown", "no SM, tensor and DRAM activity counters on this GPU model (GPM needs Hopper or newer)", "-", "-", "-"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows", len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d (%s):\n got %+v\nwant %+v", i, runs[i].GPUModel, got[i], want[i])
		}
	}
}

// TestCalibrationFromFigures: the planner's calibration is the median of
// each GPU model's copy and product shares of spec.
func TestCalibrationFromFigures(t *testing.T) {
	rs := append(simFigures(t, "n0", nil, bench.Options{Quick: true}), simFigures(t, "n1", map[int]simgpu.Fault{2: {Kind: simgpu.FaultSlowMemory}}, bench.Options{Quick: true})...)
	cal := bench.Calibration(rs)
	c, ok := cal["h100-sxm-80gb"]
	if !ok || len(cal) != 1 || c.GPUs != 16 {
		t.Fatalf("calibration %+v", cal)
	}
	if math.Abs(c.Memory-simgpu.CopyEfficiency) > 0.01 || math.Abs(c.Compute[gpufleet.BF16]-simgpu.TensorGEMMEfficiency) > 0.01 ||
		math.Abs(c.Compute[gpufleet.FP8]-simgpu.LowPrecisionGEMMEfficiency) > 0.01 {
		t.Errorf("calibration %+v: one slow card must not move the medians", c)
	}
}

// TestLevels: each level runs its tests (quick the five, medium adds the
// memory patterns, long the stress), medium and long the full sizes and
// every p2p pair; a list of tests overrides the level's.
func TestLevels(t *testing.T) {
	for _, tc := range []struct {
		o     bench.Options
		tests []bench.Test
		runs  int
		pairs int // of 8 GPUs
	}{
		{bench.Options{Quick: true}, []bench.Test{bench.Copy, bench.GEMM, bench.H2D, bench.P2P, bench.AllReduce}, 5, 16},
		{bench.Options{Level: bench.LevelQuick}, []bench.Test{bench.Copy, bench.GEMM, bench.H2D, bench.P2P, bench.AllReduce}, 5, 16},
		{bench.Options{}, []bench.Test{bench.Copy, bench.GEMM, bench.H2D, bench.P2P, bench.AllReduce}, 20, 56},
		{bench.Options{Level: bench.LevelMedium}, []bench.Test{bench.Copy, bench.GEMM, bench.H2D, bench.P2P, bench.AllReduce, bench.Memory}, 20, 56},
		{bench.Options{Level: bench.LevelLong}, bench.Tests(), 20, 56},
		{bench.Options{Level: bench.LevelQuick, Tests: []bench.Test{bench.Memory}}, []bench.Test{bench.Memory}, 5, 16},
	} {
		var got []bench.Test
		for _, x := range bench.Tests() {
			if tc.o.Wants(x) {
				got = append(got, x)
			}
		}
		if !slices.Equal(got, tc.tests) || tc.o.Runs() != tc.runs || len(tc.o.Pairs(8)) != tc.pairs {
			t.Errorf("%+v: tests %v, runs %d, pairs %d; want %v, %d, %d", tc.o, got, tc.o.Runs(), len(tc.o.Pairs(8)), tc.tests, tc.runs, tc.pairs)
		}
	}
	for in, want := range map[string]bench.Level{"": bench.LevelQuick, "Medium": bench.LevelMedium, "long": bench.LevelLong} {
		if l, err := bench.ParseLevel(in); err != nil || l != want {
			t.Errorf("ParseLevel(%q) = %s, %v", in, l, err)
		}
	}
	if _, err := bench.ParseLevel("xlong"); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "level") {
		t.Errorf("ParseLevel(xlong): %v", err)
	}
}

// TestLevelsOnSimulatedNodes: medium adds the memory patterns, long the
// sustained stress. An uncorrectable ECC fault fails the memory test and
// the stress whatever their rates; a power brake and a thermal runaway
// fail the stress by its throttle reasons and also halve its rate, which
// the fleet median catches too; slow memory shows in the memory test's
// rate. Healthy cards pass at every level.
func TestLevelsOnSimulatedNodes(t *testing.T) {
	healthy := simFigures(t, "n0", nil, bench.Options{Level: bench.LevelLong})
	for _, r := range healthy {
		if why := r.Failed(); why != "" {
			t.Errorf("healthy %s gpu %d failed: %s", r.Name, r.GPU, why)
		}
	}
	medium := simFigures(t, "n2", nil, bench.Options{Level: bench.LevelMedium})
	if !slices.ContainsFunc(medium, func(r bench.Result) bool { return r.Test == bench.Memory }) ||
		slices.ContainsFunc(medium, func(r bench.Result) bool { return r.Test == bench.Stress }) {
		t.Errorf("medium ran %v; want memory patterns and no stress", names(medium))
	}
	sick := simFigures(t, "n1", map[int]simgpu.Fault{
		1: {Kind: simgpu.FaultECCDoubleBit},
		2: {Kind: simgpu.FaultPowerBrake},
		3: {Kind: simgpu.FaultSlowMemory},
		4: {Kind: simgpu.FaultThermalRunaway},
	}, bench.Options{Level: bench.LevelLong})
	got := map[string]string{}
	for _, s := range bench.Judge(figures(sick), append(slices.Clone(healthy), sick...), bench.Gates{}) {
		if s.Figure.Test == bench.Memory || s.Figure.Test == bench.Stress {
			got[fmt.Sprintf("%s@%d", s.Figure.Name, s.Figure.GPU)] = s.Reason
		}
	}
	for k, want := range map[string]string{
		"memory@1":      "memory failed: 4 cells read back wrong",
		"stress-bf16@1": "stress-bf16 failed: an XID or uncorrectable ECC error while it ran",
		"stress-bf16@2": "stress-bf16 failed: throttled (hw_power_brake, hw_slowdown)",
		"memory@3":      "memory at 0.", // about 0.60 of the fleet median (runs are noisy)
		"stress-bf16@4": "stress-bf16 failed: throttled (hw_slowdown, hw_thermal, sw_thermal)",
	} {
		if !strings.HasPrefix(got[k], want) {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
		delete(got, k)
	}
	if len(got) > 0 {
		t.Errorf("flagged beyond the faults: %v", got)
	}
}

func names(rs []bench.Result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return slices.Compact(out)
}

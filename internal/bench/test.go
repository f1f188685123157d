package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// Test names a microbenchmark.
type Test string

// The microbenchmarks, in the order they run.
const (
	// Copy is a large device-to-device copy; its figure counts bytes read
	// plus bytes written.
	Copy Test = "copy"
	// GEMM is a dense matrix product per precision the card runs natively.
	GEMM Test = "gemm"
	// H2D is host-to-device and device-to-host copies from pinned memory
	// (figures h2d and d2h).
	H2D Test = "h2d"
	// P2P is GPU-to-GPU copies for every local pair.
	P2P Test = "p2p"
	// AllReduce is an all-reduce across the node's GPUs, as bus bandwidth.
	AllReduce Test = "allreduce"
	// Memory writes MemoryPatterns over most of the GPU's memory and reads
	// them back: its figure is the pattern pass's bandwidth, and a cell
	// that reads back wrong is an error (levels medium and long).
	Memory Test = "memory"
	// Stress keeps matrix products running for StressSeconds with power,
	// temperature and throttle reasons watched: its figure is the rate
	// sustained, and throttling or an error fails it (level long).
	Stress Test = "stress"
)

// Tests returns every test in run order.
func Tests() []Test { return []Test{Copy, GEMM, H2D, P2P, AllReduce, Memory, Stress} }

// ParseTests reads a comma-separated list of tests ("copy,gemm"); empty
// or "all" is nil: every test of the level. The result is in run order,
// without repeats.
func ParseTests(s string) ([]Test, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "all") {
		return nil, nil
	}
	want := map[Test]bool{}
	for _, f := range strings.Split(s, ",") {
		t := Test(strings.ToLower(strings.TrimSpace(f)))
		if !slices.Contains(Tests(), t) {
			return nil, fmt.Errorf("%w: tests: %s: expected a comma-separated list of copy, gemm, h2d, p2p, allreduce, memory, stress", gpufleet.ErrInvalid, gpufleet.Quote(f))
		}
		want[t] = true
	}
	var out []Test
	for _, t := range Tests() {
		if want[t] {
			out = append(out, t)
		}
	}
	return out, nil
}

// ParseGPUs reads a GPU selection: "all" or empty (nil: every GPU) or a
// comma-separated list of indexes ("0,1"), each below max.
func ParseGPUs(s string, max int) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "all") {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || i < 0 || i >= max {
			return nil, fmt.Errorf("%w: gpus: %s: expected all or GPU indexes from 0 to %d, comma-separated", gpufleet.ErrInvalid, gpufleet.Quote(f), max-1)
		}
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Options says what to measure.
type Options struct {
	// GPUs are the indexes to measure; nil means every GPU.
	GPUs []int
	// Tests to run; nil means every test of the level.
	Tests []Test
	// Quick is the short set the agent runs (when a node joins, when it
	// is validated, as a rollout gate): smaller sizes and fewer runs, under
	// a minute on an eight-GPU node. It is LevelQuick; without it and
	// without a Level, the full set of the quick level's tests runs.
	Quick bool
	// Level, when set, says which tests run and how long (LevelQuick sets
	// Quick).
	Level Level
}

// level is the level o runs at: its Level, else quick (Quick or not:
// without a level the full set runs the quick level's tests).
func (o Options) level() Level {
	if o.Level != "" {
		return o.Level
	}
	return LevelQuick
}

// short reports whether o runs the small sizes and few runs of the quick
// set.
func (o Options) short() bool { return o.Quick || o.Level == LevelQuick }

// Wants reports whether o runs test t: one of those asked for, or with
// none asked for, one of the level's.
func (o Options) Wants(t Test) bool {
	if len(o.Tests) > 0 {
		return slices.Contains(o.Tests, t)
	}
	return slices.Contains(o.level().tests(), t)
}

// Selects reports whether o measures the GPU at index i.
func (o Options) Selects(i int) bool { return len(o.GPUs) == 0 || slices.Contains(o.GPUs, i) }

// Pairs are the ordered GPU pairs (indexes into a list of n GPUs) the p2p
// test copies between: every pair, or with Quick each GPU to its two ring
// neighbours, which exposes a slow link on any GPU in 2n copies instead
// of n(n-1).
func (o Options) Pairs(n int) [][2]int {
	var out [][2]int
	for i := range n {
		for j := range n {
			if i == j {
				continue
			}
			if o.short() && n > 3 && j != (i+1)%n && j != (i+n-1)%n {
				continue
			}
			out = append(out, [2]int{i, j})
		}
	}
	return out
}

// Runs is how many timed runs each figure takes (after warm-up).
func (o Options) Runs() int {
	if o.short() {
		return 5
	}
	return 20
}

// Unit is what a figure counts per second.
type Unit string

// Units.
const (
	BytesPerS Unit = "B/s"
	FLOPPerS  Unit = "FLOP/s"
	OPPerS    Unit = "OP/s" // int8
)

// Measurement is what a backend measured for one figure: the rate of each
// timed run, and the result check for products.
type Measurement struct {
	// Name is the figure: copy, gemm-<precision>, h2d, d2h, p2p, allreduce.
	Name      string             `json:"name"`
	Test      Test               `json:"test"`
	Precision gpufleet.Precision `json:"precision,omitempty"`
	// GPU is the index of the GPU measured; for allreduce the lowest index
	// taking part.
	GPU  int    `json:"gpu"`
	UUID string `json:"uuid"`
	// Model is the catalog id of the GPU.
	Model string `json:"model"`
	// Peer is the destination GPU of a p2p copy.
	Peer *int `json:"peer,omitempty"`
	// GPUs is how many GPUs an allreduce spans (1 otherwise).
	GPUs int `json:"gpus"`
	// Nodes is how many nodes an all-reduce across nodes spans (absent
	// for one node's own tests); Group is that run's id and Members its
	// nodes in rank order (GroupRun).
	Nodes   int      `json:"nodes,omitempty"`
	Group   string   `json:"group,omitempty"`
	Members []string `json:"members,omitempty"`
	// Fabric is what an all-reduce across nodes crossed between them.
	Fabric Fabric `json:"fabric,omitempty"`
	// Size says what one run moved or computed ("4 GiB", "8192x8192x8192").
	Size string `json:"size"`
	Unit Unit   `json:"unit"`
	// Rates holds each timed run's rate, in Unit.
	Rates []float64 `json:"rates"`
	// Check says how the result compared with a reference (products:
	// relative error against float64 on sampled elements), empty when the
	// test has nothing to check beyond the copy's bytes.
	Check string `json:"check,omitempty"`
	// Errors counts what the runs found wrong: cells that read back
	// another value (memory), XIDs and new uncorrectable ECC errors while
	// it ran (stress). Any fails the figure, whatever its rate.
	Errors int64 `json:"errors,omitempty"`
	// Watch is what the stress saw of the GPU while it ran.
	Watch *Watch `json:"watch,omitempty"`
}

// Watch is what a sustained test saw of a GPU while it ran: the hottest
// and mean power readings, and every clock-throttle reason that was
// active at some sample, as NVML names them (hw_slowdown,
// hw_power_brake, hw_thermal, sw_thermal; sw_power_cap is the normal
// state of a GPU at full load and is not a failure).
type Watch struct {
	MaxTempC  float64  `json:"max_temp_c"`
	MeanWatts float64  `json:"mean_watts"`
	Throttle  []string `json:"throttle,omitempty"`
}

// failingThrottle are the throttle reasons that fail a sustained test:
// the GPU slowed itself for heat or an external signal, not for its own
// power cap.
var failingThrottle = []string{"hw_slowdown", "hw_power_brake", "hw_thermal", "sw_thermal"}

// Failed says why a measurement fails whatever its rate ("" when it does
// not): errors during the runs, or a throttle reason that is a failure.
func (m Measurement) Failed() string {
	var why []string
	if m.Errors > 0 {
		switch {
		case m.Test == Memory:
			why = append(why, fmt.Sprintf("%d cells read back wrong", m.Errors))
		case m.Errors == 1:
			why = append(why, "an XID or uncorrectable ECC error while it ran")
		default:
			why = append(why, fmt.Sprintf("%d XID or uncorrectable ECC errors while it ran", m.Errors))
		}
	}
	if m.Watch != nil {
		var bad []string
		for _, r := range m.Watch.Throttle {
			if slices.Contains(failingThrottle, r) {
				bad = append(bad, r)
			}
		}
		if len(bad) > 0 {
			why = append(why, fmt.Sprintf("throttled (%s) at up to %.0f C", strings.Join(bad, ", "), m.Watch.MaxTempC))
		}
	}
	return strings.Join(why, "; ")
}

// Backend measures GPUs. The simulated GPUs and the CUDA libraries
// implement it.
type Backend interface {
	// Measure runs the tests o asks for and returns one measurement per
	// figure; progress, when not nil, hears a line per step.
	Measure(ctx context.Context, o Options, progress func(string)) ([]Measurement, error)
}

// GEMMName is the figure name of a product in precision p.
func GEMMName(p gpufleet.Precision) string { return "gemm-" + string(p) }

// GEMMUnit is the unit of a product in precision p.
func GEMMUnit(p gpufleet.Precision) Unit {
	if p == gpufleet.INT8 {
		return OPPerS
	}
	return FLOPPerS
}

package simgpu

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/gpu"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// stepClock is a clock tests move by hand.
type stepClock struct{ t time.Time }

func (c *stepClock) now() time.Time       { return c.t }
func (c *stepClock) step(d time.Duration) { c.t = c.t.Add(d) }
func (c *stepClock) since() time.Duration { return c.t.Sub(t0) }
func newClock() *stepClock                { return &stepClock{t: t0} }

func newSim(t *testing.T, clk *stepClock, specs ...Spec) *Backend {
	t.Helper()
	b, err := New(specs, WithClock(clk.now), WithNodeName("node-a"), WithSeed(7))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func uuids(t *testing.T, b *Backend) []string {
	t.Helper()
	devs, err := b.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range devs {
		out = append(out, d.UUID)
	}
	return out
}

func fmtF(p *float64, format string) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf(format, *p)
}

func fmtU(p *uint64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func reasonsString(r *uint64) string {
	if r == nil {
		return "-"
	}
	if *r == 0 {
		return "none"
	}
	names := []struct {
		bit  uint64
		name string
	}{
		{gpu.ClockEventGPUIdle, "idle"}, {gpu.ClockEventAppClocksSetting, "app"}, {gpu.ClockEventSWPowerCap, "sw-power"},
		{gpu.ClockEventHWSlowdown, "hw-slow"}, {gpu.ClockEventSyncBoost, "sync"}, {gpu.ClockEventSWThermalSlowdown, "sw-thermal"},
		{gpu.ClockEventHWThermalSlowdown, "hw-thermal"}, {gpu.ClockEventHWPowerBrake, "power-brake"},
	}
	var parts []string
	for _, n := range names {
		if *r&n.bit != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, "+")
}

// line is one golden row for one sample.
func line(at time.Duration, s gpu.Sample) string {
	return fmt.Sprintf("t=%4.0fs util=%s sm=%s tensor=%s dram=%s power=%sW energy=%smJ temp=%sC hbm=%sC smclk=%s memclk=%s reasons=%s thermviol=%s\n",
		at.Seconds(), fmtF(s.Utilization, "%.2f"), fmtF(s.SMActivity, "%.3f"), fmtF(s.TensorActivity, "%.3f"), fmtF(s.DRAMActivity, "%.3f"),
		fmtF(s.PowerWatts, "%6.1f"), fmtU(s.EnergyMillijoules), fmtF(s.TemperatureC, "%.0f"), fmtF(s.MemoryTemperatureC, "%.0f"),
		fmtF(s.SMClockMHz, "%.0f"), fmtF(s.MemoryClockMHz, "%.0f"), reasonsString(s.ClockEventReasons), fmtU(s.ThermalViolationNs))
}

func sampleOne(t *testing.T, b *Backend, i int) gpu.Sample {
	t.Helper()
	ss, err := b.Sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return ss[i]
}

// scenarios are the golden time series. Each returns its text; the test
// runs each twice and demands identical output.
var scenarios = map[string]func(t *testing.T) string{
	// An H100 idles for 10 s, then runs a compute load to 120 s.
	"h100_idle_to_compute": func(t *testing.T) string {
		clk := newClock()
		b := newSim(t, clk, Spec{Model: "h100-sxm-80gb", Count: 1})
		var out strings.Builder
		for s := 0; s <= 120; s++ {
			if s == 10 {
				if err := b.SetLoad(uuids(t, b)[0], LoadCompute, 1); err != nil {
					t.Fatal(err)
				}
			}
			out.WriteString(line(clk.since(), sampleOne(t, b, 0)))
			clk.step(time.Second)
		}
		return out.String()
	},
	// A computing H100 loses its cooling at 60 s and is repaired at 300 s.
	"h100_thermal_runaway": func(t *testing.T) string {
		clk := newClock()
		b := newSim(t, clk, Spec{Model: "h100-sxm-80gb", Count: 1})
		if err := b.SetLoad(uuids(t, b)[0], LoadCompute, 1); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		for s := 0; s <= 420; s += 5 {
			switch s {
			case 60:
				if err := b.Inject(0, Fault{Kind: FaultThermalRunaway}); err != nil {
					t.Fatal(err)
				}
				out.WriteString("# inject thermal-runaway\n")
			case 300:
				if err := b.Clear(0); err != nil {
					t.Fatal(err)
				}
				out.WriteString("# clear\n")
			}
			out.WriteString(line(clk.since(), sampleOne(t, b, 0)))
			clk.step(5 * time.Second)
		}
		return out.String()
	},
	// An A100 under a memory-bound load: no GPM metrics, as on hardware.
	"a100_memory_load_gpm_absent": func(t *testing.T) string {
		clk := newClock()
		b := newSim(t, clk, Spec{Model: "a100-sxm-80gb", Count: 1})
		if err := b.SetLoad(uuids(t, b)[0], LoadMemory, 1); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		for s := 0; s <= 120; s += 10 {
			out.WriteString(line(clk.since(), sampleOne(t, b, 0)))
			clk.step(10 * time.Second)
		}
		return out.String()
	},
	// GPU 1 of two falls off the bus at 3 s and comes back (Clear) at 6 s.
	"xid79_removes_gpu": func(t *testing.T) string {
		clk := newClock()
		b := newSim(t, clk, Spec{Model: "h100-sxm-80gb", Count: 2})
		var out strings.Builder
		for s := 0; s <= 8; s++ {
			switch s {
			case 3:
				if err := b.Inject(1, Fault{Kind: FaultXID, XID: 79}); err != nil {
					t.Fatal(err)
				}
				out.WriteString("# inject xid:79 on gpu 1\n")
			case 6:
				if err := b.Clear(1); err != nil {
					t.Fatal(err)
				}
				out.WriteString("# clear gpu 1\n")
			}
			devs, _ := b.Devices(t.Context())
			samples, _ := b.Sample(t.Context())
			events, _ := b.Events(t.Context(), 0)
			fmt.Fprintf(&out, "t=%ds devices=%d samples=%d", s, len(devs), len(samples))
			for _, d := range devs {
				fmt.Fprintf(&out, " [%d %s peers=%v]", d.Index, d.UUID, d.NVLinkPeers)
			}
			for _, e := range events {
				fmt.Fprintf(&out, " event=%s/%s/%d@%s", e.UUID, e.Kind, e.XID, e.Time.Sub(t0))
			}
			out.WriteString("\n")
			clk.step(time.Second)
		}
		return out.String()
	},
}

func TestGolden(t *testing.T) {
	for name, run := range scenarios {
		t.Run(name, func(t *testing.T) {
			got := run(t)
			if again := run(t); again != got {
				t.Fatal("two runs of the scenario differ")
			}
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(want, []byte(got)) {
				t.Errorf("%s differs from the golden file (run with -update after checking):\n%s", path, lineDiff(string(want), got))
			}
		})
	}
}

// lineDiff shows the first lines that differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 5; i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			fmt.Fprintf(&out, "line %d:\n- %s\n+ %s\n", i+1, a, b)
			shown++
		}
	}
	return out.String()
}

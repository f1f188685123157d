package bench_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/bench"
)

// FuzzParsers: the flag vocabularies never panic, and gates round-trip.
func FuzzParsers(f *testing.F) {
	for _, s := range []string{"", "all", "copy,gemm", "0.85", "copy=0.9,gemm=0.8", "0,1,7", "p2p,,", "copy=1e309", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		bench.ParseTests(s)
		bench.ParseGPUs(s, 8)
		g, err := bench.ParseGates(s)
		if err != nil {
			return
		}
		back, err := bench.ParseGates(g.String())
		if err != nil {
			t.Fatalf("gates %q do not parse back: %v", g.String(), err)
		}
		for _, test := range bench.Tests() {
			if back.For(test) != g.For(test) || !(g.For(test) > 0 && g.For(test) <= 1) {
				t.Fatalf("gate %s: %g then %g", test, g.For(test), back.For(test))
			}
		}
	})
}

// FuzzReportToJudgement is the path from an agent's report bytes to the
// fleet's verdict: what passes validation summarizes and judges without
// panicking, into finite figures.
func FuzzReportToJudgement(f *testing.F) {
	f.Add(`[{"name":"copy","test":"copy","gpu":0,"uuid":"GPU-a","model":"h100-sxm-80gb","gpus":1,"size":"1 GiB","unit":"B/s","rates":[3e12,3.1e12]},
	{"name":"p2p","test":"p2p","gpu":0,"peer":1,"uuid":"GPU-a","model":"h100-sxm-80gb","gpus":1,"size":"1 GiB","unit":"B/s","rates":[3.8e11]},
	{"name":"gemm-bf16","test":"gemm","precision":"bf16","gpu":1,"uuid":"GPU-b","model":"nope","gpus":1,"size":"","unit":"FLOP/s","rates":[7e14]}]`)
	f.Add(`[{"name":"allreduce","test":"allreduce","gpu":0,"uuid":"u","model":"l4","gpus":4,"size":"x","unit":"B/s","rates":[1,1e18]}]`)
	cat := catalog.Default()
	f.Fuzz(func(t *testing.T, raw string) {
		var ms []bench.Measurement
		if json.Unmarshal([]byte(raw), &ms) != nil || bench.ValidateMeasurements("m", ms) != nil {
			return
		}
		figs := bench.Summarize(cat, ms)
		if _, err := json.Marshal(figs); err != nil {
			t.Fatalf("figures do not encode (a stored result must): %v", err)
		}
		var fleet []bench.Result
		for _, fg := range figs {
			if math.IsNaN(fg.Value) || math.IsInf(fg.Value, 0) || fg.Value <= 0 {
				t.Fatalf("figure %s value %g", fg.Name, fg.Value)
			}
			fleet = append(fleet, bench.Result{Figure: fg, Node: "n", At: time.Unix(0, 0)})
		}
		for _, s := range bench.Judge(figs, fleet, bench.Gates{}) {
			if s.Comparison.Fraction == nil || *s.Comparison.Fraction >= s.Comparison.Gate {
				t.Fatalf("shortfall above its gate: %+v", s.Comparison)
			}
		}
		bench.Calibration(fleet)
	})
}

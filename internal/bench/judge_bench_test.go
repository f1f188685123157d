package bench_test

import (
	"fmt"
	"testing"

	"github.com/gpufleet/gpufleet/internal/bench"
)

// fleetOf is the newest copy and bf16 figures of n GPUs of one model.
func fleetOf(n int) []bench.Result {
	var out []bench.Result
	for i := range n {
		for _, name := range []string{"copy", "gemm-bf16"} {
			out = append(out, bench.Result{Figure: bench.Figure{Measurement: bench.Measurement{Name: name, Test: bench.Copy,
				Model: "h100-sxm-80gb", GPUs: 1, UUID: fmt.Sprintf("GPU-%d", i)}, Value: 3e12 * (1 + float64(i%97)/1000)}})
		}
	}
	return out
}

// naiveJudge is the direct way: for each figure, gather the other GPUs'
// values and take their median (what Compare did before Baseline).
func naiveJudge(fleet []bench.Result) int {
	bad := 0
	for _, f := range fleet {
		var vals []float64
		for _, r := range fleet {
			if r.Name == f.Name && r.Model == f.Model && r.UUID != f.UUID {
				vals = append(vals, r.Value)
			}
		}
		if f.Value < 0.9*bench.Median(vals) {
			bad++
		}
	}
	return bad
}

// BenchmarkJudgeFleet judges every GPU of a fleet against its model's
// median, as the server does for /metrics and gpufleet bench results:
// naive (a scan and a sort per figure) against Baseline (one sort per
// group), at 1,000 and 10,000 GPUs.
func BenchmarkJudgeFleet(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		fleet := fleetOf(n)
		figs := make([]bench.Figure, len(fleet))
		for i, r := range fleet {
			figs[i] = r.Figure
		}
		b.Run(fmt.Sprintf("naive/gpus=%d", n), func(b *testing.B) {
			if n > 1000 && testing.Short() {
				b.Skip("minutes per op")
			}
			for b.Loop() {
				naiveJudge(fleet)
			}
		})
		b.Run(fmt.Sprintf("baseline/gpus=%d", n), func(b *testing.B) {
			for b.Loop() {
				bench.Judge(figs, fleet, bench.Gates{})
			}
		})
	}
}

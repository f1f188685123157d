package planner

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
)

// TestCalibration: a measured memory share replaces memEfficiency (a
// batch-1 decode is memory-bound, so its throughput moves by the ratio),
// a measured product rate moves the compute-bound prefill, the candidate
// says so, a model without a calibration is untouched, and a share out
// of range is refused.
func TestCalibration(t *testing.T) {
	cfg, err := model.Builtin("llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	h100, _ := catalog.Default().Lookup("h100-sxm-80gb")
	a100, _ := catalog.Default().Lookup("a100-sxm-80gb")
	run := func(cal map[string]Calibration) (*Candidate, *Candidate) {
		t.Helper()
		p, err := Run(Request{Model: cfg, GPUCount: 1, Batch: 1, Calibration: cal}, []catalog.GPU{h100, a100})
		if err != nil {
			t.Fatal(err)
		}
		var h, a *Candidate
		for i := range p.Candidates {
			switch p.Candidates[i].GPU {
			case h100.ID:
				h = &p.Candidates[i]
			case a100.ID:
				a = &p.Candidates[i]
			}
		}
		return h, a
	}
	bh, ba := run(nil)
	ch, ca := run(map[string]Calibration{h100.ID: {Memory: 0.72, Compute: map[gpufleet.Precision]float64{gpufleet.BF16: 0.60}, GPUs: 8}})
	if got, want := *ch.TimePerOutputTokenS / *bh.TimePerOutputTokenS, 0.80/0.72; math.Abs(got-want) > 0.03 {
		t.Errorf("decode step with 0.72 of bandwidth: %.3fx the built-in, want about %.3fx", got, want)
	}
	if *ch.BatchPrefillS <= *bh.BatchPrefillS {
		t.Errorf("prefill with bf16 products at 0.60 of peak: %g s, built-in %g s", *ch.BatchPrefillS, *bh.BatchPrefillS)
	}
	if note := strings.Join(ch.Notes, "\n"); !strings.Contains(note, "calibrated from the fleet's benchmarks (median of 8 GPUs): memory bandwidth at 0.72 of datasheet (built-in 0.80), bf16 matrix products at 0.60 of peak") {
		t.Errorf("notes lack the calibration: %q", ch.Notes)
	}
	if *ca.OutputTokensPerS != *ba.OutputTokensPerS || strings.Contains(strings.Join(ca.Notes, "\n"), "calibrated") {
		t.Errorf("an uncalibrated model changed: %g vs %g, %q", *ca.OutputTokensPerS, *ba.OutputTokensPerS, ca.Notes)
	}
	for _, bad := range []Calibration{{Memory: -0.1}, {Memory: 3}, {Compute: map[gpufleet.Precision]float64{gpufleet.FP8: math.NaN()}}} {
		if _, err := Run(Request{Model: cfg, Calibration: map[string]Calibration{"h100-sxm-80gb": bad}}, []catalog.GPU{h100}); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("calibration %+v: %v, want invalid", bad, err)
		}
	}
}

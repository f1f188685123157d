package planner

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
)

// TestOverhead: a model that runs virtualized is estimated that much
// slower, in inference and training, and says so; the others are not.
func TestOverhead(t *testing.T) {
	cfg, err := model.Builtin("llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	h100, _ := catalog.Default().Lookup("h100-sxm-80gb")
	a100, _ := catalog.Default().Lookup("a100-sxm-80gb")
	for _, mode := range []Mode{Inference, Training} {
		run := func(o map[string]float64) map[string]*Candidate {
			t.Helper()
			r := Request{Model: cfg, Mode: mode, GPUCount: 8, Batch: 1, Overhead: o}
			if mode == Training {
				r.Batch = 0
			}
			p, err := Run(r, []catalog.GPU{h100, a100})
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]*Candidate{}
			for i := range p.Candidates {
				out[p.Candidates[i].GPU] = &p.Candidates[i]
			}
			return out
		}
		speed := func(c *Candidate) float64 {
			if mode == Training {
				return *c.TrainingTokensPerS
			}
			return *c.OutputTokensPerS
		}
		base, virt := run(nil), run(map[string]float64{h100.ID: 0.05})
		// Compute and memory run 5% slower; the interconnect's and the
		// engine's fixed times do not.
		if got := speed(virt[h100.ID]) / speed(base[h100.ID]); got < 0.95-1e-3 || got > 0.97 {
			t.Errorf("%s on a 5%% mechanism: %.3fx the bare-metal throughput, want 0.95x to 0.97x", mode, got)
		}
		if !strings.Contains(strings.Join(virt[h100.ID].Notes, "\n"), "5% overhead") {
			t.Errorf("%s: notes lack the overhead: %q", mode, virt[h100.ID].Notes)
		}
		if speed(virt[a100.ID]) != speed(base[a100.ID]) {
			t.Errorf("%s: a bare-metal model changed", mode)
		}
	}
	if _, err := Run(Request{Model: cfg, Overhead: map[string]float64{h100.ID: 1}}, []catalog.GPU{h100}); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("overhead 1: %v, want invalid", err)
	}
}

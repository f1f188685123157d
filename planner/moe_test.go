package planner

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// TestExpertParallelInference checks the inference layouts of a mixture
// of experts: whole experts over EP GPUs hold EP/TP times less expert
// memory per GPU than experts sliced over TP, and an expert-parallel group
// spanning replicas exchanges tokens all-to-all.
func TestExpertParallelInference(t *testing.T) {
	cfg := loadModel(t, "mixtral-8x7b-v0.1")
	g, _ := catalog.Default().Lookup("h100-sxm-80gb")
	s := newShape(cfg)
	sliced := s.inferenceWeights(FormatBF16, layout{tp: 4, pp: 1, dp: 2, ep: 1})
	whole := s.inferenceWeights(FormatBF16, layout{tp: 4, pp: 1, dp: 2, ep: 8})
	dense := (s.blockParams - s.expertParams) * 2 / 4
	if got, want := whole-dense, (sliced-dense)/2; got < want*0.99 || got > want*1.01 {
		t.Errorf("expert memory per GPU with ep 8 over tp 4: %.3g, want half of ep 1's (%.3g)", got, want)
	}

	r := Request{Model: cfg, Mode: Inference, GPUs: []catalog.GPU{g}, GPUCount: 8, TP: 4, EP: 8, Batch: 64}
	p, err := Run(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Candidates[0]
	if c.EP != 8 || c.DP != 2 || !strings.Contains(c.Layout("x"), "ep8") {
		t.Fatalf("layout %s (ep %d, dp %d); want ep 8 over two replicas of tp 4", c.Layout("x"), c.EP, c.DP)
	}
	if !slices.ContainsFunc(c.Notes, func(n string) bool { return strings.Contains(n, "all-to-all") }) {
		t.Errorf("notes %q do not mention the all-to-all exchange", c.Notes)
	}
	// Without a degree asked for, the search tries experts sliced and whole.
	r.EP = 0
	rr, _ := r.withDefaults()
	if got := s.expertDegrees(rr, 4, 2); !slices.Equal(got, []int{1, 4, 8}) {
		t.Errorf("expert degrees for tp 4, dp 2: %v, want [1 4 8]", got)
	}
}

// TestExpertParallelValidation checks that an expert-parallel degree is
// refused, naming the field, where it cannot apply.
func TestExpertParallelValidation(t *testing.T) {
	llama := loadModel(t, "llama-3.1-8b")
	mixtral := loadModel(t, "mixtral-8x7b-v0.1")
	tests := map[string]Request{
		"a dense model":                       {Model: llama, Mode: Inference, EP: 2},
		"a degree not dividing the experts":   {Model: mixtral, Mode: Inference, EP: 16},
		"inference ep not a multiple of tp":   {Model: mixtral, Mode: Inference, TP: 4, EP: 2},
		"ep not dividing the GPUs":            {Model: mixtral, Mode: Training, GPUCount: 12, EP: 8},
		"a degree beyond the control plane's": {Model: mixtral, Mode: Training, EP: 1 << 30},
	}
	for name, r := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Run(r, catalog.Default().All())
			if !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "ep") {
				t.Fatalf("err = %v, want an invalid-request error naming ep", err)
			}
		})
	}
}

// TestPublishedTrainingLayoutsFit checks that the layouts two large
// published runs used are expressible and fit with the recompute the
// planner chooses: DeepSeek-V3 on 2048 H800 (PP16, EP64, no TP;
// arXiv:2412.19437 section 3.2) and Llama 3 405B on 8192 H100 (TP8 PP16
// DP64; arXiv:2407.21783 Table 4). Neither fits with selective recompute
// alone, and both come out compute-bound rather than waiting on the
// network, at no less than 300 model TFLOP/s per GPU.
func TestPublishedTrainingLayoutsFit(t *testing.T) {
	tests := map[string]struct {
		model, gpu string
		r          Request
	}{
		"deepseek-v3":  {"deepseek-v3", "h800-sxm-80gb", Request{Precision: FormatFP8, GPUCount: 2048, TP: 1, PP: 16, DP: 128, EP: 64, Seq: 4096, GlobalBatch: 15360}},
		"llama 3 405b": {"llama-3.1-405b", "h100-sxm-80gb", Request{GPUCount: 8192, TP: 8, PP: 16, DP: 64, Seq: 8192, GlobalBatch: 2048}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g, _ := catalog.Default().Lookup(tc.gpu)
			r := tc.r
			r.Model, r.Mode, r.GPUs, r.MicroBatch, r.ZeRO = loadModel(t, tc.model), Training, []catalog.GPU{g}, 1, 1
			p, err := Run(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := p.Candidates[0]
			if !c.Fits || c.Recompute == nil || *c.Recompute != RecomputeFull || c.EP != max(1, r.EP) {
				t.Fatalf("fits %v, recompute %v, ep %d; want the source's layout to fit with full recompute", c.Fits, c.Recompute, c.EP)
			}
			if tflops := *c.MFU * support(g, r.Precision).peak / 1e12; *c.Bound != BoundCompute || tflops < 300 {
				t.Errorf("bound %s, %.0f model TFLOP/s per GPU; the published runs reached 380-432", *c.Bound, tflops)
			}
			r.Recompute = RecomputeSelective
			if p, _ := Run(r, nil); p.Candidates[0].Fits {
				t.Errorf("fits with selective recompute too: the test no longer shows the choice")
			}
		})
	}
}

// TestGroupedGEMMEfficiency checks the routed experts' efficiency curve:
// rising with the tokens each expert multiplies, below a dense GEMM's, and
// at the points the constant was read from (DeepGEMM's masked layout:
// 0.71 at 256 tokens per expert, 0.95 at 1024) within 0.1.
func TestGroupedGEMMEfficiency(t *testing.T) {
	prev := 0.0
	for m := 1.0; m <= 1<<16; m *= 2 {
		e := groupedGEMMEfficiency(m)
		if e <= prev || e >= 1 {
			t.Fatalf("efficiency at %g tokens per expert = %g after %g: want rising, below 1", m, e, prev)
		}
		prev = e
	}
	for m, want := range map[float64]float64{256: 0.71, 1024: 0.95} {
		if got := groupedGEMMEfficiency(m); got < want-0.1 || got > want+0.1 {
			t.Errorf("efficiency at %g tokens per expert = %.2f, DeepGEMM measured %.2f", m, got, want)
		}
	}
}

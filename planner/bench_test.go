package planner

import (
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
)

// BenchmarkPlanWholeCatalog plans one model against every GPU of the
// catalog with every candidate layout: a dense model, and a mixture of
// experts whose expert-parallel degrees the search also tries. Goal:
// < 50 ms per plan.
func BenchmarkPlanWholeCatalog(b *testing.B) {
	cases := map[string]Request{
		"inference-smallest-count":    {Mode: Inference},
		"inference-64-gpus":           {Mode: Inference, GPUCount: 64},
		"training-1024-gpus":          {Mode: Training, GPUCount: 1024, ZeRO: 1},
		"training-smallest-count":     {Mode: Training, ZeRO: 3},
		"moe-inference-64-gpus":       {Mode: Inference, GPUCount: 64},
		"moe-inference-640-gpus":      {Mode: Inference, GPUCount: 640},
		"moe-training-1024-gpus":      {Mode: Training, GPUCount: 1024, ZeRO: 1},
		"moe-training-smallest-count": {Mode: Training, ZeRO: 3},
	}
	all := catalog.Default().All()
	for name, r := range cases {
		b.Run(name, func(b *testing.B) {
			m := "llama-3.1-70b"
			if strings.HasPrefix(name, "moe-") {
				m = "mixtral-8x7b-v0.1"
			}
			cfg, err := model.Builtin(m)
			if err != nil {
				b.Fatal(err)
			}
			r.Model = cfg
			for b.Loop() {
				if _, err := Run(r, all); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

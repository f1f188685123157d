package planner

import (
	"testing"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
)

// BenchmarkPlanWholeCatalog plans one model against every GPU of the
// catalog with every candidate layout. Goal: < 50 ms per plan.
func BenchmarkPlanWholeCatalog(b *testing.B) {
	cases := map[string]Request{
		"inference-smallest-count": {Mode: Inference},
		"inference-64-gpus":        {Mode: Inference, GPUCount: 64},
		"training-1024-gpus":       {Mode: Training, GPUCount: 1024, ZeRO: 1},
		"training-smallest-count":  {Mode: Training, ZeRO: 3},
	}
	cfg, err := model.Builtin("llama-3.1-70b")
	if err != nil {
		b.Fatal(err)
	}
	all := catalog.Default().All()
	for name, r := range cases {
		b.Run(name, func(b *testing.B) {
			r.Model = cfg
			for b.Loop() {
				if _, err := Run(r, all); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

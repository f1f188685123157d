package planner_test

import (
	"fmt"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
	"github.com/gpufleet/gpufleet/planner"
)

// Plan Llama 3.1 70B in FP8 on two kinds of GPU and read the answer.
func Example() {
	cfg, _ := model.Builtin("llama-3.1-70b")
	h100, _ := catalog.Default().Lookup("H100")
	a100, _ := catalog.Default().Lookup("NVIDIA A100-SXM4-80GB")
	plan, err := planner.Run(planner.Request{
		Model:     cfg,
		Precision: planner.FormatFP8,
		GPUs:      []catalog.GPU{h100, a100},
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range plan.Candidates {
		fmt.Printf("%s: %d GPU(s), fits %v, native fp8 %v, decode %s-bound\n",
			c.GPU, c.GPUs, c.Fits, c.PrecisionNative, *c.Bound)
	}
	fmt.Println("recommended:", plan.Recommendation.GPU, plan.Recommendation.Scaling)
	// Output:
	// h100-sxm-80gb: 2 GPU(s), fits true, native fp8 true, decode memory-bound
	// a100-sxm-80gb: 1 GPU(s), fits true, native fp8 false, decode memory-bound
	// recommended: h100-sxm-80gb vertical
}

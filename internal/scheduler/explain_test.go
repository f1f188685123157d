package scheduler_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// TestExplain checks the submit-time explanation as data: the nodes each
// filter left out and the dimension that ran out, not the words.
func TestExplain(t *testing.T) {
	in := scheduler.Input{Now: schedtest.T0, Models: schedtest.Models(), Config: must(scheduler.PolicyConfig("gpufleet")),
		Nodes: []scheduler.Node{
			schedtest.MakeNode("b1", "h100-sxm-80gb", 4).Domains(0).Label("virtualization", "bare-metal").Obj(),
			schedtest.MakeNode("v1", "h100-sxm-80gb", 4).Domains(0).Label("virtualization", "vgpu:H100-80C").Label("pool", "x").Obj(),
			schedtest.MakeNode("v2", "h100-sxm-80gb", 4).Domains(0).Label("virtualization", "vgpu:H100-80C").Label("pool", "x").Obj(),
			schedtest.MakeNode("l1", "l4", 4).Domains(0).Obj(),
		},
	}
	one := gpufleet.OverheadLimit(0.01)
	onePct := 0.01
	tests := map[string]struct {
		res  gpufleet.Resources
		want *gpufleet.Explanation // nil: feasible
	}{
		"fits": {res: gpufleet.Resources{GPUs: 4}},
		"overhead, not the selector": {res: gpufleet.Resources{GPUs: 1, NodeSelector: map[string]string{"pool": "x"}, Overhead: &one},
			want: &gpufleet.Explanation{Code: scheduler.ReasonIsolation, NodesEvaluated: 4, Never: true,
				NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterSelector, Nodes: 2}, {Code: gpufleet.FilterOverhead, Nodes: 2}},
				Isolation: &gpufleet.IsolationShortfall{OverheadMax: &onePct,
					Mechanisms: []gpufleet.MechanismShortfall{{Name: "vgpu:H100-80C/exclusive", Isolation: gpufleet.IsolationSoft, Overhead: 0.05}}}}},
		"selector nobody carries": {res: gpufleet.Resources{GPUs: 1, NodeSelector: map[string]string{"pool": "y"}},
			want: &gpufleet.Explanation{Code: scheduler.ReasonUnplaceable, NodesEvaluated: 4, Selector: "pool=y",
				NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterSelector, Nodes: 4}}}},
		"memory above every model": {res: gpufleet.Resources{GPUs: 1, GPUMemoryMinBytes: 200 << 30},
			want: &gpufleet.Explanation{Code: scheduler.ReasonUnplaceable, NodesEvaluated: 4, NoModel: &gpufleet.ModelTerms{GPUMemoryMinBytes: 200 << 30},
				NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterMemory, Nodes: 4}}}},
		"l4 without memory for it": {res: gpufleet.Resources{GPUs: 1, GPUMemoryMinBytes: 40 << 30, NodeSelector: map[string]string{"pool": "z"}},
			want: &gpufleet.Explanation{Code: scheduler.ReasonUnplaceable, NodesEvaluated: 4, Selector: "pool=z",
				NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterMemory, Nodes: 1}, {Code: gpufleet.FilterSelector, Nodes: 3}}}},
		"more than one node holds": {res: gpufleet.Resources{GPUs: 8, Nodes: 1, GPUModels: []string{"h100-sxm-80gb"}},
			want: &gpufleet.Explanation{Code: scheduler.ReasonUnplaceable, NodesEvaluated: 4, Never: true,
				Exhausted: gpufleet.DimGPUs, Need: 8, Most: 4,
				NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterModel, Nodes: 1}, {Code: gpufleet.FilterCapacity, Nodes: 3}}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, reason := scheduler.Explain(in, scheduler.Job{ID: "j", Team: "a", Priority: gpufleet.Training, Resources: tc.res, Submitted: schedtest.T0})
			if got != nil {
				if reason != got.String() {
					t.Errorf("reason %q is not the explanation's sentence %q", reason, got.String())
				}
				got.Detail = "" // words, not counts
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Explain (-want +got):\n%s", diff)
			}
		})
	}
}

package scheduler_test

import (
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

func TestFeasible(t *testing.T) {
	in := scheduler.Input{Now: schedtest.T0, Models: schedtest.Models(), Config: must(scheduler.PolicyConfig("gpufleet")),
		Nodes: []scheduler.Node{
			schedtest.MakeNode("h1", "h100-sxm-80gb", 8).Label("rack", "r1").Obj(),
			schedtest.MakeNode("h2", "h100-sxm-80gb", 8).Label("rack", "r2").State(scheduler.Cordoned).Obj(),
			schedtest.MakeNode("l1", "l4", 4).Domains(0).Obj(),
		},
		Teams: []scheduler.Team{{Name: "capped", Quota: map[string]int{"l4": 2}, BorrowingLimit: 0, Weight: 1}},
	}
	tests := map[string]struct {
		team     string
		res      gpufleet.Resources
		wantCode string
		want     string
	}{
		"fits":                        {res: gpufleet.Resources{GPUs: 8}},
		"a cordoned node counts":      {res: gpufleet.Resources{GPUs: 16, Nodes: 2}},
		"selector of a cordoned node": {res: gpufleet.Resources{GPUs: 1, NodeSelector: map[string]string{"rack": "r2"}}},
		"more than the fleet":         {res: gpufleet.Resources{GPUs: 64}, wantCode: scheduler.ReasonUnplaceable, want: "needs 64 GPUs over as few nodes as possible; matching nodes hold 20"},
		"model not in the fleet":      {res: gpufleet.Resources{GPUs: 1, GPUModels: []string{"b200-hgx"}}, wantCode: scheduler.ReasonUnplaceable, want: "no GPU model in the fleet matches gpu_models [b200-hgx]"},
		"memory above every model":    {res: gpufleet.Resources{GPUs: 1, GPUMemoryMinBytes: 200 << 30}, wantCode: scheduler.ReasonUnplaceable, want: "gpu_memory_min_bytes"},
		"selector nobody carries":     {res: gpufleet.Resources{GPUs: 1, NodeSelector: map[string]string{"rack": "r12"}}, wantCode: scheduler.ReasonUnplaceable, want: "node_selector rack=r12"},
		"beyond quota and borrowing":  {team: "capped", res: gpufleet.Resources{GPUs: 4, GPUModels: []string{"l4"}}, wantCode: scheduler.ReasonQuotaExceeded, want: "borrowing limit"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			team := tc.team
			if team == "" {
				team = "a"
			}
			code, reason := scheduler.Feasible(in, scheduler.Job{ID: "j", Team: team, Priority: gpufleet.Training, Resources: tc.res, Submitted: schedtest.T0})
			if code != tc.wantCode || !strings.Contains(reason, tc.want) {
				t.Errorf("Feasible = %q %q, want %q containing %q", code, reason, tc.wantCode, tc.want)
			}
		})
	}
	if in.Nodes[1].State != scheduler.Cordoned {
		t.Error("Feasible changed its input's nodes")
	}
}

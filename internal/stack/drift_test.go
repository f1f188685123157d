package stack

import (
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
)

func TestDrift(t *testing.T) {
	h100 := []gpufleet.ComputeCapability{cc("9.0")}
	node := func(name, driver string, domains ...string) DriftNode {
		v := gpufleet.StackVersions{gpufleet.StackDriver: driver, gpufleet.StackCUDA: "12.4"}
		return DriftNode{Name: name, Versions: v, GPUModels: []string{"h100-sxm-80gb"}, CCs: h100, Domains: domains}
	}
	prod := gpufleet.Stack{Name: "prod-550", Versions: map[string]string{"driver": "550.54.15", "cuda": "12.4"}, State: gpufleet.StackValidated,
		Validated: []gpufleet.StackValidation{{GPUModel: "h100-sxm-80gb"}}}
	tests := map[string]struct {
		nodes  []DriftNode
		stacks []gpufleet.Stack
		gangs  [][]string
		want   map[string]string // node -> words in its first reason; absent: no drift
	}{
		"a uniform fleet, no validated stack": {nodes: []DriftNode{node("a", "550.54.15", "nvl0"), node("b", "550.54.15", "nvl0")}},
		"a node off the validated stack": {
			nodes: []DriftNode{node("a", "550.54.15"), node("b", "555.42.02")}, stacks: []gpufleet.Stack{prod},
			want: map[string]string{"b": "runs no stack validated for h100-sxm-80gb (validated: prod-550)"}},
		"a retired stack validates nothing": {
			nodes: []DriftNode{node("b", "555.42.02")}, stacks: []gpufleet.Stack{{Name: "old", Versions: prod.Versions, State: gpufleet.StackRetired, Validated: prod.Validated}}},
		"an NVLink domain on two drivers": {
			nodes: []DriftNode{node("a", "550.54.15", "nvl0"), node("b", "550.54.15", "nvl0"), node("c", "555.42.02", "nvl0"), node("d", "555.42.02", "nvl1")},
			want: map[string]string{"a": "NVLink domain nvl0 run different drivers: 550.54.15 on a, b; 555.42.02 on c",
				"b": "NVLink domain nvl0", "c": "NVLink domain nvl0"}},
		"a gang on two drivers": {
			nodes: []DriftNode{node("a", "550.54.15"), node("b", "555.42.02"), node("c", "555.42.02")}, gangs: [][]string{{"a", "b"}},
			want: map[string]string{"a": "a running multi-node job's nodes run different drivers", "b": "a running multi-node job's nodes"}},
		"an incompatible stack": {
			nodes: []DriftNode{{Name: "a", Versions: gpufleet.StackVersions{gpufleet.StackDriver: "535.104.05", gpufleet.StackCUDAToolkit: "13.0"}, CCs: h100}},
			want:  map[string]string{"a": "incompatible stack: CUDA toolkit 13.0 needs driver 580"}},
		"a known-bad NCCL": {
			nodes: []DriftNode{{Name: "a", Versions: gpufleet.StackVersions{gpufleet.StackNCCL: "2.18.1"}, CCs: h100}},
			want:  map[string]string{"a": "known-bad version: nccl 2.18.1: LL128"}},
		"a risk that is not a defect is not drift": {
			nodes: []DriftNode{{Name: "a", Versions: gpufleet.StackVersions{gpufleet.StackDriver: "535.104.05", gpufleet.StackCUDAToolkit: "12.4"}, CCs: h100}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Drift(tc.nodes, tc.stacks, tc.gangs)
			if len(got) != len(tc.want) {
				t.Fatalf("drift %q, want nodes %v", got, tc.want)
			}
			for n, words := range tc.want {
				if len(got[n]) == 0 || !strings.Contains(got[n][0], words) {
					t.Errorf("node %s: %q, want a reason containing %q", n, got[n], words)
				}
			}
		})
	}
}

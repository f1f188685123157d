package api

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
)

func TestNodeTargets(t *testing.T) {
	nodes := []gpufleet.Node{
		{Name: "n1", State: gpufleet.NodeReady, Health: gpufleet.Healthy, MetricsURL: "http://10.0.0.5:9400/metrics",
			Labels: map[string]string{"rack": "r1", "virtualization": "vgpu:A100-4C", "9lives": "x", "k8s.io/zone": "a"},
			GPUs:   []gpufleet.NodeGPU{{Model: "h100-sxm-80gb"}}},
		{Name: "n2", State: gpufleet.NodeDown, MetricsURL: ""},
		{Name: "n3", MetricsURL: "not a url"},
		{Name: "n4", State: gpufleet.NodeDraining, MetricsURL: "https://n4.example:9443"},
	}
	want := []SDTarget{
		{Targets: []string{"10.0.0.5:9400"}, Labels: map[string]string{"node": "n1", "__scheme__": "http", "__metrics_path__": "/metrics",
			"__meta_gpufleet_node": "n1", "__meta_gpufleet_state": "ready", "__meta_gpufleet_health": "healthy", "__meta_gpufleet_gpu_model": "h100-sxm-80gb",
			"__meta_gpufleet_label_rack": "r1", "__meta_gpufleet_label_virtualization": "vgpu:A100-4C", "__meta_gpufleet_label__9lives": "x",
			"__meta_gpufleet_label_k8s_io_zone": "a"}},
		{Targets: []string{"n4.example:9443"}, Labels: map[string]string{"node": "n4", "__scheme__": "https", "__metrics_path__": "/metrics",
			"__meta_gpufleet_node": "n4", "__meta_gpufleet_state": "draining"}},
	}
	if diff := cmp.Diff(want, NodeTargets(nodes)); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
}

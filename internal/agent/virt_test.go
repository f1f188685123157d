package agent

import (
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// TestDetectVirtualization: what the driver says wins, and a label the
// agent sends always parses.
func TestDetectVirtualization(t *testing.T) {
	tests := []struct {
		name    string
		backend string
		devs    []gpu.Device
		want    string
	}{
		{"sim", "sim", []gpu.Device{{Virtualization: "passthrough"}}, "bare-metal"},
		{"guest vgpu with type", "nvml", []gpu.Device{{Name: "GRID A100-4C", Virtualization: "vgpu"}}, "vgpu:A100-4C"},
		{"mig-backed vgpu", "nvml", []gpu.Device{{Name: "NVIDIA A100-3-20C", Virtualization: "vgpu"}}, "vgpu:A100-3-20C"},
		{"vgpu without a type", "nvml", []gpu.Device{{Name: "NVIDIA vGPU", Virtualization: "vgpu"}}, "vgpu"},
		{"vgpu host", "nvml", []gpu.Device{{Name: "NVIDIA H100 80GB HBM3", Virtualization: "vgpu-host"}}, "vgpu"},
		{"passthrough", "nvml", []gpu.Device{{Name: "NVIDIA H100 80GB HBM3"}, {Name: "NVIDIA H100 80GB HBM3", Virtualization: "passthrough"}}, "passthrough"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := detectVirtualization(tc.backend, tc.devs)
			if got != tc.want {
				t.Errorf("detectVirtualization = %q, want %q", got, tc.want)
			}
			if _, err := gpufleet.ParseVirtualization(got); err != nil {
				t.Errorf("label %q does not parse: %v", got, err)
			}
		})
	}
}

package agent

import (
	"fmt"
	"slices"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// severeXIDs make a GPU unhealthy: memory errors (48 DBE, 63/64 row
// remapping, 94/95 contained/uncontained ECC), NVLink (74), fallen off the
// bus (79), GSP/RM failures (119, 120) and 92 (high SBE rate). Other XIDs
// (13, 31, 43: usually the application's fault) make it degraded.
var severeXIDs = []int{48, 63, 64, 74, 79, 92, 94, 95, 119, 120}

// eventHealth is what one hardware event says about its GPU. This is the
// agent's first-pass rule; the server's health rules engine refines it.
func eventHealth(e gpu.Event) (gpufleet.Health, string) {
	switch e.Kind {
	case gpu.EventECCDBE:
		return gpufleet.Unhealthy, "double-bit ECC error"
	case gpu.EventECCSBE:
		return gpufleet.Healthy, ""
	case gpu.EventXID:
		if slices.Contains(severeXIDs, e.XID) {
			return gpufleet.Unhealthy, fmt.Sprintf("XID %d", e.XID)
		}
		return gpufleet.Degraded, fmt.Sprintf("XID %d", e.XID)
	}
	return gpufleet.Healthy, ""
}

// healthRank orders health from best to worst.
func healthRank(h gpufleet.Health) int {
	switch h {
	case gpufleet.Degraded:
		return 1
	case gpufleet.Unhealthy:
		return 2
	}
	return 0
}

// gpuHealth is one GPU's condition as the agent knows it.
type gpuHealth struct {
	Health gpufleet.Health
	Reason string
}

// worse returns the worse of a and b (a on ties).
func worse(a, b gpuHealth) gpuHealth {
	if healthRank(b.Health) > healthRank(a.Health) {
		return b
	}
	return a
}

// nodeHealth is the worst of the GPUs' health, with the reason naming the
// GPU ("gpu 3: XID 79"); indexes are in inventory order.
func nodeHealth(gpus []gpufleet.NodeGPU) (gpufleet.Health, string) {
	h, reason := gpufleet.Healthy, ""
	for _, g := range gpus {
		if healthRank(g.Health) > healthRank(h) {
			h, reason = g.Health, fmt.Sprintf("gpu %d: %s", g.Index, g.Reason)
		}
	}
	return h, reason
}

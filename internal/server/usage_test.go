package server

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/store"
)

// TestAccountPerNode: each node of a multi-node attempt reports its own
// totals; the usage counted is what each node added, summed, whatever the
// order of the reports.
func TestAccountPerNode(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	s := &Server{attempts: map[string]attemptInfo{"a-1": {team: "t", model: "h100-sxm-80gb"}},
		accounted: map[acctKey]api.AttemptReport{}, pendingUsage: map[usageKey]store.UsageRow{}}
	beat := func(node string, gs float64) {
		s.account(node, api.AttemptReport{AttemptID: "a-1", GPUSeconds: gs, EnergyJoules: gs * 700}, now)
	}
	beat("n1", 80)
	beat("n2", 80)
	beat("n1", 160)
	beat("n2", 120)
	beat("n2", 120) // a resent report adds nothing
	var got store.UsageRow
	for _, r := range s.pendingUsage {
		got.GPUSeconds += r.GPUSeconds
		got.EnergyJoules += r.EnergyJoules
	}
	if got.GPUSeconds != 280 || got.EnergyJoules != 280*700 {
		t.Errorf("usage %g GPU-s, %g J; want 160 + 120 = 280 GPU-s and 196000 J", got.GPUSeconds, got.EnergyJoules)
	}
}

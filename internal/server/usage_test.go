package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/store"
)

// usageSink is a usageStore that refuses while fail is set.
type usageSink struct {
	fail bool
	rows []store.UsageRow
}

func (u *usageSink) AddUsage(_ context.Context, rows []store.UsageRow) error {
	if u.fail {
		return errors.New("store down")
	}
	u.rows = append(u.rows, rows...)
	return nil
}

// TestAccountPerNode: each node of a multi-node attempt reports its own
// totals; the usage counted is what each node added, summed, whatever the
// order of the reports; a flush the store refuses loses nothing.
func TestAccountPerNode(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	sink := &usageSink{fail: true}
	a := newAccounting(sink, 1.2)
	a.setAttempts(map[string]attemptInfo{"a-1": {team: "t", model: "h100-sxm-80gb"}})
	beat := func(node string, gs float64) {
		a.account(node, []api.AttemptReport{{AttemptID: "a-1", GPUSeconds: gs, EnergyJoules: gs * 700}}, now)
	}
	beat("n1", 80)
	beat("n2", 80)
	if err := a.flush(t.Context()); err == nil {
		t.Fatal("flush to a failing store: no error")
	}
	beat("n1", 160)
	beat("n2", 120)
	beat("n2", 120) // a resent report adds nothing
	a.account("n3", []api.AttemptReport{{AttemptID: "a-unknown", GPUSeconds: 50}}, now)
	sink.fail = false
	if err := a.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	var got store.UsageRow
	for _, r := range sink.rows {
		got.GPUSeconds += r.GPUSeconds
		got.EnergyJoules += r.EnergyJoules
		if r.FacilityJoules != nil {
			got.FacilityJoules = addFloat(got.FacilityJoules, *r.FacilityJoules)
		}
	}
	if got.GPUSeconds != 280 || got.EnergyJoules != 280*700 {
		t.Errorf("usage %g GPU-s, %g J; want 160 + 120 = 280 GPU-s and 196000 J", got.GPUSeconds, got.EnergyJoules)
	}
	if got.FacilityJoules == nil || *got.FacilityJoules != 280*700*1.2 {
		t.Errorf("facility energy %v, want 280 x 700 x PUE 1.2", got.FacilityJoules)
	}
	// An attempt no longer running is forgotten, with what was counted of it.
	a.setAttempts(map[string]attemptInfo{})
	if len(a.accounted) != 0 {
		t.Errorf("counted totals of ended attempts kept: %v", a.accounted)
	}
}

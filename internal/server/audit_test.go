package server

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/capacity"
	"github.com/gpufleet/gpufleet/internal/store"
)

// TestAuditReadsTheStore: the audit's snapshot is the store's: an attempt
// whose GPUs' rollups idle is a finding sized by them, the counts reach
// /metrics, and a member may not audit.
func TestAuditReadsTheStore(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("a", nil)
	f.register("n1", "h100-sxm-80gb", 2)
	j := f.submit(a, api.SubmitRequest{Name: "notebook", Priority: gpufleet.Interactive, Resources: gpufleet.Resources{GPUs: 2}})
	f.cycle()
	j = f.job(j.ID)
	if len(j.Attempts) == 0 {
		t.Fatalf("job did not start: %+v", j)
	}
	start := j.Attempts[0].StartedAt.Truncate(time.Minute)
	low := 0.01
	var rows []store.RollupRow
	for m := range 30 {
		for _, g := range j.Attempts[0].GPUs {
			r := store.RollupRow{GPU: g, Minute: start.Add(time.Duration(m) * time.Minute), Node: "n1", Model: "h100-sxm-80gb", Team: "a",
				Samples: 6, AllocatedS: 60, IdleAllocatedS: 60}
			r.Effective.Add(&low)
			rows = append(rows, r)
		}
	}
	if err := f.st.AddRollups(ctx, rows); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(31 * time.Minute)
	if _, err := f.srv.Audit(ctx, a, api.AuditQuery{SinceDays: 30}); err == nil {
		t.Fatal("a member audited the fleet")
	}
	rep, err := f.srv.Audit(ctx, f.admin, api.AuditQuery{SinceDays: 30})
	if err != nil {
		t.Fatal(err)
	}
	var idle *audit.Finding
	for i := range rep.Findings {
		if rep.Findings[i].Check == "idle-allocated" {
			idle = &rep.Findings[i]
		}
	}
	if idle == nil || idle.Subject.Name != j.ID || idle.Subject.Title != "notebook" || idle.Severity != audit.High || *idle.GPUHours != 1 {
		t.Fatalf("idle finding %+v in %+v", idle, rep.Findings)
	}
	// The capacity decisions are computed once an hour, not per audit.
	first := f.srv.capFacts.at
	f.clk.Advance(30 * time.Minute)
	if _, err := f.srv.Audit(ctx, f.admin, api.AuditQuery{SinceDays: 30}); err != nil {
		t.Fatal(err)
	}
	if f.srv.capFacts.at != first {
		t.Errorf("capacity decisions recomputed after 30 minutes")
	}
	f.clk.Advance(31 * time.Minute)
	if _, err := f.srv.Audit(ctx, f.admin, api.AuditQuery{SinceDays: 30}); err != nil {
		t.Fatal(err)
	}
	if !f.srv.capFacts.at.After(first) {
		t.Errorf("capacity decisions not recomputed after an hour")
	}
	rec := httptest.NewRecorder()
	f.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`gpufleet_audit_findings{check="idle-allocated",severity="high"} 1`,
		`gpufleet_nodes{health="healthy",state="ready"} 1`, `gpufleet_nodes{health="unhealthy",state="draining"} 0`,
		`gpufleet_queue_oldest_wait_seconds{priority="production"} 0`, `gpufleet_gpus_allocated{gpu_model="h100-sxm-80gb"} 2`,
		`gpufleet_jobs{priority="interactive",state="scheduled"} 1`, `gpufleet_jobs{priority="batch",state="queued"} 0`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The fleet joined minutes ago: its lifecycle is judged on those
	// minutes, and nothing is retired for having been idle 30 days.
	lr, err := f.srv.Lifecycle(ctx, f.admin, api.LifecycleQuery{HorizonMonths: 36, SinceDays: 30, EnergyUSDPerKWh: capacity.DefaultEnergyUSDPerKWh,
		DepreciationYears: capacity.DefaultDepreciationYears, RepairHours: capacity.DefaultRepairHours})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range lr.Models {
		if m.Decision == capacity.Retire {
			t.Errorf("a fleet an hour and a half old retires %s: %v", m.GPUModel, m.Reasons)
		}
	}
}

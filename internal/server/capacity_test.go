package server

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/capacity"
)

// history is finished jobs of 42 days up to the fixture's today: on the
// H100 nodes demand that grows from a quarter of their GPU-hours to
// three quarters, eight-GPU training runs and one-GPU notebooks; on the
// L4 node a few notebooks.
func history(f *fixture) []gpufleet.Job {
	rng := rand.New(rand.NewPCG(1, 2))
	end := f.clk.Now().UTC().Truncate(24 * time.Hour)
	var jobs []gpufleet.Job
	add := func(day time.Time, node string, gpus int, hours float64, class gpufleet.Priority) float64 {
		submit := day.Add(time.Duration((8 + 10*rng.Float64()) * float64(time.Hour)))
		start, finish := submit.Add(10*time.Minute), submit.Add(10*time.Minute+time.Duration(hours*float64(time.Hour)))
		code := 0
		jobs = append(jobs, gpufleet.Job{Team: "team-a", Name: "hist", State: gpufleet.JobSucceeded, Priority: class,
			Resources: gpufleet.Resources{GPUs: gpus}, Command: []string{"true"}, SubmittedAt: submit, StartedAt: &start, FinishedAt: &finish,
			Attempts: []gpufleet.Attempt{{State: gpufleet.AttemptSucceeded, Node: node, Nodes: []gpufleet.AttemptNode{{Name: node}},
				StartedAt: &start, FinishedAt: &finish, ExitCode: &code, Fraction: 1, GPUSeconds: float64(gpus) * hours * 3600}}})
		return float64(gpus) * hours
	}
	for d := range 42 {
		day := end.AddDate(0, 0, d-42)
		want := 16 * 24 * (0.25 + 0.5*float64(d)/42)
		for got := 0.0; got < want; {
			if rng.IntN(3) == 0 {
				got += add(day, []string{"h1", "h2"}[rng.IntN(2)], 1, 1+rng.Float64(), gpufleet.Interactive)
			} else {
				got += add(day, []string{"h1", "h2"}[rng.IntN(2)], 8, 2+4*rng.Float64(), gpufleet.Training)
			}
		}
		add(day, "l1", 1, 0.5, gpufleet.Interactive)
	}
	return jobs
}

// TestProcureAndLifecycle: from a store with six weeks of history, growing
// H100 demand orders H100 nodes by a date the lead time sets, checked by
// the replay; the nearly idle L4 is retired; members may ask neither.
func TestProcureAndLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	f.registerLabelled("h1", "h100-sxm-80gb", 8, map[string]string{capacity.PurchasedLabel: "2024-03-01"})
	f.registerLabelled("h2", "h100-sxm-80gb", 8, map[string]string{capacity.PurchasedLabel: "2024-03"})
	f.registerLabelled("l1", "l4", 4, map[string]string{capacity.PurchasedLabel: "2023-07"})
	member := f.team("team-a", nil)
	if err := f.st.ImportHistory(ctx, history(f), "test"); err != nil {
		t.Fatal(err)
	}
	q := api.ProcureQuery{HorizonDays: 56, Target: capacity.DefaultTarget, Quantile: 0.8, LeadTimeDays: map[string]int{"h100-sxm-80gb": 30}}
	if _, err := f.srv.Procure(ctx, member, q); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("a member asked what to order: %v", err)
	}
	resp, err := f.srv.Procure(ctx, f.admin, q)
	if err != nil {
		t.Fatal(err)
	}
	var h100 *api.ProcureModel
	for i, m := range resp.Models {
		if m.Recommendation.GPUModel == "h100-sxm-80gb" {
			h100 = &resp.Models[i]
		}
	}
	if h100 == nil {
		t.Fatalf("no H100 decision: %+v skipped %v", resp.Models, resp.Skipped)
	}
	rec := h100.Recommendation
	if rec.Action != capacity.Order || rec.Nodes < 1 || rec.With == nil || !rec.With.Meets || rec.Without == nil || rec.Without.Meets {
		t.Fatalf("H100: %+v", rec)
	}
	if rec.LeadTimeDays != 30 || !rec.OrderBy.Equal(rec.Crossing.AddDate(0, 0, -30)) {
		t.Errorf("order by %s for a crossing on %s and a 30-day lead time", rec.OrderBy, rec.Crossing)
	}
	if h100.PoolJobs == 0 || len(h100.History.Values) != 42 || h100.CapacityGPUHoursPerDay != 16*24 {
		t.Errorf("pool %d, history %d days, capacity %g", h100.PoolJobs, len(h100.History.Values), h100.CapacityGPUHoursPerDay)
	}
	for _, bad := range []api.ProcureQuery{
		{GPUModel: "no-such-gpu", HorizonDays: 56, Target: capacity.DefaultTarget, Quantile: 0.8},
		{GPUModel: "a100-sxm-80gb", HorizonDays: 56, Target: capacity.DefaultTarget, Quantile: 0.8}, // not in the fleet
		{HorizonDays: 56, Target: capacity.DefaultTarget, Quantile: 0.8, LeadTimeDays: map[string]int{"nope": 3}},
	} {
		if _, err := f.srv.Procure(ctx, f.admin, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}

	lq := api.LifecycleQuery{HorizonMonths: 36, SinceDays: 30, EnergyUSDPerKWh: 0.1, DepreciationYears: 5, RepairHours: 48}
	if _, err := f.srv.Lifecycle(ctx, member, lq); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("a member asked for the lifecycle: %v", err)
	}
	rep, err := f.srv.Lifecycle(ctx, f.admin, lq)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]capacity.ModelLifecycle{}
	for _, m := range rep.Models {
		got[m.GPUModel] = m
	}
	if l4 := got["l4"]; l4.Decision != capacity.Retire || l4.GPUs != 4 || l4.AgeYears == nil {
		t.Errorf("L4: %+v", l4)
	}
	h := got["h100-sxm-80gb"]
	if h.GPUs != 16 || h.AgeYears == nil || h.Purchased.Format(time.DateOnly) != "2024-03-01" || !(h.Allocation > 0.3 && h.Allocation < 0.8) || h.BookValueUSD == nil {
		t.Errorf("H100: %+v", h)
	}
	lq.Prices = map[string]float64{"nope": 1}
	if _, err := f.srv.Lifecycle(ctx, f.admin, lq); err == nil {
		t.Error("a price for an unknown model is accepted")
	}
}

func TestPurchasedLabelIsValidated(t *testing.T) {
	f := newFixture(t)
	jt, err := f.srv.CreateJoinToken(t.Context(), f.admin, api.JoinTokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.srv.Register(t.Context(), jt.Token, api.RegisterRequest{ProtocolVersion: 1, Node: "x1",
		Labels: map[string]string{capacity.PurchasedLabel: "last spring"}})
	if !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("a node with purchased=last spring registered: %v", err)
	}
}

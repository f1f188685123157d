package server

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/power"
)

// TestEnergyPerUnitOfWork: a job's work counter reaches its agent; the
// work it reports gives energy per unit in the usage report; a namesake
// that prefers efficient is placed by what the earlier runs measured; a
// rack's PUE prices the energy counted on its nodes.
func TestEnergyPerUnitOfWork(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	l4, h100 := f.node("n1", "l4", 8), f.node("n2", "h100-sxm-80gb", 8)
	pue := 1.5
	if _, err := f.srv.PutRack(ctx, f.admin, api.PutRackRequest{Rack: gpufleet.Rack{Name: "h100-rack", PowerBudgetWatts: 100000, PUE: &pue, Nodes: []string{"n2"}}}); err != nil {
		t.Fatal(err)
	}
	counter := &gpufleet.WorkCounter{Metric: `tokens=(\d+)`, Unit: "tokens"}
	// run places the next job on node, runs it and reports energy and work.
	run := func(node api.Principal, name string, energy, work float64) {
		t.Helper()
		f.cycle()                                     // leads
		for _, n := range []api.Principal{l4, h100} { // both alive
			if _, err := f.srv.Heartbeat(ctx, n, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: n.Node}); err != nil {
				t.Fatal(err)
			}
		}
		f.cycle()
		hb, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: node.Node})
		if err != nil || len(hb.Start) != 1 {
			t.Fatalf("%s: want one start on %s: %+v, %v", name, node.Node, hb, err)
		}
		as := hb.Start[0]
		if as.Work == nil || as.Work.Metric != counter.Metric {
			t.Fatalf("%s: the assignment carries work counter %+v, want the job's", name, as.Work)
		}
		report := func(r api.AttemptReport) {
			r.AttemptID, r.JobID = as.AttemptID, as.JobID
			if _, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: node.Node, Attempts: []api.AttemptReport{r}}); err != nil {
				t.Fatal(err)
			}
		}
		report(api.AttemptReport{State: gpufleet.AttemptRunning})
		f.clk.Advance(time.Minute)
		zero := 0
		report(api.AttemptReport{State: gpufleet.AttemptSucceeded, ExitCode: &zero, GPUSeconds: 60, EnergyJoules: energy, Work: &work})
	}
	submit := func(models ...string) gpufleet.Job {
		return f.submit(a, api.SubmitRequest{Name: "decode", Work: counter,
			Resources: gpufleet.Resources{GPUs: 1, Prefer: gpufleet.Efficient, GPUModels: models}})
	}

	// Nothing measured: by peak per watt, the L4 (121 TFLOPS at 72 W)
	// before the H100 (989 at 700 W).
	if j := submit(); j.Resources.JoulesPerUnit != nil {
		t.Fatalf("first run: joules per unit %v, want none (nothing measured, no model described)", j.Resources.JoulesPerUnit)
	}
	run(l4, "first", 9000, 10000) // 0.9 J/token
	j2 := submit("h100-sxm-80gb")
	if got := j2.Resources.JoulesPerUnit; len(got) != 1 || got["l4"] != 0.9 {
		t.Fatalf("second run: joules per unit %v, want the L4's measured 0.9", got)
	}
	run(h100, "second", 3000, 10000) // 0.3 J/token: decode is memory-bound
	j3 := submit()
	if got := j3.Resources.JoulesPerUnit; len(got) != 2 || got["l4"] != 0.9 || got["h100-sxm-80gb"] != 0.3 {
		t.Fatalf("third run: joules per unit %v, want both measured", got)
	}
	run(h100, "third", 3000, 10000) // by the measurements, on the H100

	rep, err := f.srv.Usage(ctx, a, api.UsageQuery{By: api.EnergyByJob})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Energy) != 3 {
		t.Fatalf("by job: %d rows, want 3", len(rep.Energy))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, e := range rep.Energy {
		onH100 := e.GPUEnergyKWh < power.KWh(5000)
		wantPUE, wantPer := power.DefaultPUE, 0.9
		if onH100 {
			wantPUE, wantPer = pue, 0.3
		}
		if e.Work == nil || *e.Work != 10000 || e.WorkUnit != "tokens" || e.JoulesPerUnit == nil || !near(*e.JoulesPerUnit, wantPer) {
			t.Errorf("job %s: work %v %q, %v J/unit; want 10000 tokens at %g", e.Job, e.Work, e.WorkUnit, e.JoulesPerUnit, wantPer)
		}
		if !near(e.FacilityEnergyKWh, e.GPUEnergyKWh*wantPUE) {
			t.Errorf("job %s: facility %g kWh for %g kWh of GPU energy, want PUE %g", e.Job, e.FacilityEnergyKWh, e.GPUEnergyKWh, wantPUE)
		}
	}
	rep, err = f.srv.Usage(ctx, a, api.UsageQuery{By: api.EnergyByModel})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rep.Energy {
		want := power.KWh(9000) * power.DefaultPUE
		if e.Model == "h100-sxm-80gb" {
			want = power.KWh(6000) * pue
		}
		if !near(e.FacilityEnergyKWh, want) {
			t.Errorf("%s: facility %g kWh, want %g (the rack's PUE where it gives one)", e.Model, e.FacilityEnergyKWh, want)
		}
	}
}

// TestPreferEfficientTakesThePlannersFigures: a job that describes its
// model and prefers efficient, with nothing measured, carries the
// planner's joules per token for each GPU model that holds it.
func TestPreferEfficientTakesThePlannersFigures(t *testing.T) {
	f := newFixture(t)
	a := f.team("team-a", nil)
	f.node("n1", "l4", 8)
	f.node("n2", "h100-sxm-80gb", 8)
	j := f.submit(a, api.SubmitRequest{Name: "serve", Model: &api.ModelRequest{Name: "llama-3.1-8b"},
		Resources: gpufleet.Resources{Prefer: gpufleet.Efficient}})
	got := j.Resources.JoulesPerUnit
	if len(got) != 2 || !(got["l4"] > 0) || !(got["h100-sxm-80gb"] > 0) {
		t.Fatalf("joules per unit %v, want the planner's figure on both models", got)
	}
}

// TestPlanComparesTheFleet: without GPU models a plan compares those of
// the fleet the team may use, with the fleet's counts; named models are
// taken as given; an empty fleet falls back to the catalog.
func TestPlanComparesTheFleet(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	q := api.PlanQuery{Model: api.ModelRequest{Name: "llama-3.1-8b"}}
	if resp, err := f.srv.Plan(ctx, f.admin, q); err != nil || resp.Scope != "catalog" || len(resp.Compared) < 10 {
		t.Fatalf("empty fleet: %s, %d models, %v; want the catalog", resp.Scope, len(resp.Compared), err)
	}
	f.node("n1", "l4", 8)
	f.node("n2", "h100-sxm-80gb", 8)
	if _, err := f.srv.PutClass(ctx, f.admin, gpufleet.Class{Name: "small", Models: []string{"l4"}}); err != nil {
		t.Fatal(err)
	}
	a := f.team("team-a", map[string]int{"small": 8})
	zero := 0
	if _, err := f.srv.PutTeam(ctx, f.admin, api.TeamRequest{Name: "team-a", Quota: map[string]int{"small": 8}, BorrowingLimit: &zero}); err != nil {
		t.Fatal(err)
	}
	resp, err := f.srv.Plan(ctx, f.admin, q)
	if err != nil || resp.Scope != "fleet" || strings.Join(resp.Compared, ",") != "h100-sxm-80gb,l4" || resp.Available["l4"] != 8 {
		t.Errorf("admin: %s %v %v (%v); want the fleet's h100-sxm-80gb and l4", resp.Scope, resp.Compared, resp.Available, err)
	}
	resp, err = f.srv.Plan(ctx, a, q)
	if err != nil || resp.Scope != "fleet" || strings.Join(resp.Compared, ",") != "l4" {
		t.Errorf("team-a (quota on l4 only, no borrowing): %s %v (%v); want l4", resp.Scope, resp.Compared, err)
	}
	q.GPUModels = []string{"h200-sxm-141gb"}
	if resp, err := f.srv.Plan(ctx, a, q); err != nil || resp.Scope != "given" || strings.Join(resp.Compared, ",") != "h200-sxm-141gb" {
		t.Errorf("named: %s %v (%v)", resp.Scope, resp.Compared, err)
	}
	q.Team = "team-b"
	if _, err := f.srv.Plan(ctx, a, q); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("team-a planning as team-b: %v, want not found", err)
	}
}

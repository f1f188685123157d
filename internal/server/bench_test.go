package server

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
)

// copyRun is a copy measurement of one fixture GPU at rate bytes/s.
func copyRun(node string, gpu int, rate float64) bench.Measurement {
	return bench.Measurement{Name: "copy", Test: bench.Copy, GPU: gpu, UUID: "GPU-" + node + "-" + string(rune('a'+gpu)),
		Model: "h100-sxm-80gb", GPUs: 1, Size: "1 GiB", Unit: bench.BytesPerS, Rates: []float64{rate, rate * 1.01, rate * 0.99}}
}

// benchNode cordons a node, orders a bench, checks the order reaches the
// agent, reports ms and checks the order is gone.
func (f *fixture) benchNode(p api.Principal, ms ...bench.Measurement) {
	f.t.Helper()
	ctx := f.t.Context()
	if _, err := f.srv.NodeAction(ctx, f.admin, p.Node, api.Cordon); err != nil {
		f.t.Fatal(err)
	}
	o, err := f.srv.OrderBench(ctx, f.admin, p.Node, api.BenchRequest{Tests: []bench.Test{bench.Copy}})
	if err != nil {
		f.t.Fatal(err)
	}
	hb, err := f.srv.Heartbeat(ctx, p, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if err != nil || len(hb.Bench) != 1 || hb.Bench[0].ID != o.ID || !hb.Bench[0].Quick {
		f.t.Fatalf("bench order not relayed: %+v %v", hb.Bench, err)
	}
	rep := api.BenchReport{ID: o.ID, Measurements: ms}
	for range 2 { // resent: recorded once
		if _, err := f.srv.Heartbeat(ctx, p, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Bench: []api.BenchReport{rep}}); err != nil {
			f.t.Fatal(err)
		}
	}
	hb, _ = f.srv.Heartbeat(ctx, p, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if len(hb.Bench) != 0 {
		f.t.Fatalf("bench order still relayed after its report: %+v", hb.Bench)
	}
}

// TestBenchJudgesAgainstTheFleetAndGatesValidation: figures come back
// from bench orders, a GPU a tenth under its model's fleet median is
// degraded with the evidence, a GPU claimed by another node is ignored,
// validation fails under the gate and passes once the card measures
// well, which clears the condition; /metrics carries the figures.
func TestBenchJudgesAgainstTheFleetAndGatesValidation(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	n1, n2, n3 := f.node("n1", "h100-sxm-80gb", 2), f.node("n2", "h100-sxm-80gb", 2), f.node("n3", "h100-sxm-80gb", 2)
	f.cycle()
	if _, err := f.srv.OrderBench(ctx, f.admin, "n1", api.BenchRequest{}); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "cordon") {
		t.Fatalf("bench on a ready node: %v, want an invalid error saying to cordon it", err)
	}
	if _, err := f.srv.OrderBench(ctx, f.team("team-a", nil), "n1", api.BenchRequest{}); !errors.Is(err, api.ErrForbidden) {
		t.Fatalf("bench ordered by a member: %v", err)
	}
	f.benchNode(n1, copyRun("n1", 0, 3.0e12), copyRun("n1", 1, 3.02e12))
	// n2 also claims n3's GPU 1 at a rate that would move its median.
	intruder := copyRun("n3", 1, 9e12)
	f.benchNode(n2, copyRun("n2", 0, 2.99e12), copyRun("n2", 1, 3.01e12), intruder)
	f.benchNode(n3, copyRun("n3", 0, 3.0e12), copyRun("n3", 1, 1.8e12))
	f.srv.Heartbeat(ctx, n3, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})

	n, _ := f.srv.Node(ctx, f.admin, "n3")
	if n.Health != gpufleet.Degraded || n.GPUs[1].Health != gpufleet.Degraded || !strings.Contains(n.GPUs[1].Reason, "copy at 0.60 of the fleet median") ||
		n.GPUs[0].Health != gpufleet.Healthy {
		t.Fatalf("n3 after a slow copy on gpu 1: %s %+v", n.Health, n.GPUs)
	}
	list, err := f.srv.BenchResults(ctx, f.team("team-b", nil), api.BenchQuery{Node: "n3"})
	if err != nil || len(list.Results) != 2 || list.Gates["copy"] != bench.DefaultGate {
		t.Fatalf("n3 results: %+v %v", list, err)
	}
	if c := list.Results[1].Fleet; c == nil || !c.Degraded || c.Peers != 5 || c.Median != 3.0e12 {
		t.Errorf("gpu 1 against the fleet: %+v (the intruding figure must not count)", c)
	}
	if c := list.Results[0].Fleet; c == nil || c.Degraded {
		t.Errorf("gpu 0 against the fleet: %+v", c)
	}
	all, _ := f.srv.BenchResults(ctx, f.admin, api.BenchQuery{History: true})
	if len(all.Results) != 6 {
		t.Errorf("%d results stored, want 6 (the intruder dropped, resends once)", len(all.Results))
	}

	rec := httptest.NewRecorder()
	f.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`gpufleet_gpu_bench_bytes_per_second{figure="copy",gpu="1",model="h100-sxm-80gb",node="n3"} 1.8e+12`,
		`gpufleet_gpu_bench_fleet_ratio{figure="copy",gpu="1",model="h100-sxm-80gb",node="n3"} 0.6`,
		`gpufleet_gpu_bench_spec_ratio{figure="copy",gpu="0",model="h100-sxm-80gb",node="n1"}`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Repair and validate: the quick set is still slow, so the gate fails.
	validate := func(rate float64) gpufleet.Node {
		t.Helper()
		if _, err := f.srv.NodeAction(ctx, f.admin, "n3", api.Drain); err != nil {
			t.Fatal(err)
		}
		f.cycle()
		if _, err := f.srv.NodeAction(ctx, f.admin, "n3", api.Repaired); err != nil {
			t.Fatal(err)
		}
		f.cycle()
		hb, _ := f.srv.Heartbeat(ctx, n3, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
		if len(hb.Validate) != 1 {
			t.Fatalf("no validation order: %+v", hb)
		}
		res := api.ValidationResult{ID: hb.Validate[0].ID, Passed: true, Detail: "2 gpus ok",
			Bench: &api.BenchReport{ID: hb.Validate[0].ID, Measurements: []bench.Measurement{copyRun("n3", 0, 3.01e12), copyRun("n3", 1, rate)}}}
		f.srv.Heartbeat(ctx, n3, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Validations: []api.ValidationResult{res}})
		f.srv.Heartbeat(ctx, n3, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
		n, _ := f.srv.Node(ctx, f.admin, "n3")
		return n
	}
	n = validate(1.7e12)
	if n.State != gpufleet.NodeRepairing || !strings.Contains(n.StateReason, "benchmark under the gate: GPU 1: copy measured 1.7 TB/s, 0.56 of the h100-sxm-80gb fleet median") {
		t.Fatalf("validation with a slow copy: %s (%s)", n.State, n.StateReason)
	}
	n = validate(3.03e12)
	if n.State != gpufleet.NodeReady || n.Health != gpufleet.Healthy || n.GPUs[1].Health != gpufleet.Healthy {
		t.Fatalf("validation with a good copy: %s %s %+v", n.State, n.Health, n.GPUs)
	}
	hist, _ := f.srv.BenchResults(ctx, f.admin, api.BenchQuery{Node: "n3", History: true})
	var triggers []string
	for _, r := range hist.Results {
		triggers = append(triggers, string(r.Trigger))
	}
	if !slices.Contains(triggers, "validation") || !slices.Contains(triggers, "manual") {
		t.Errorf("history triggers %v", triggers)
	}
}

// TestBenchReportsAreValidatedAtTheEdge: a report with a NaN rate, an
// unknown test or too many measurements is refused naming the field.
func TestBenchReportsAreValidatedAtTheEdge(t *testing.T) {
	good := copyRun("n1", 0, 3e12)
	for name, tc := range map[string]struct {
		m    func(*bench.Measurement)
		want string
	}{
		"nan rate":     {func(m *bench.Measurement) { m.Rates = []float64{1, nanValue()} }, "bench[0].measurements[0].rates[1]"},
		"unknown test": {func(m *bench.Measurement) { m.Test = "fft" }, "bench[0].measurements[0].test"},
		"no runs":      {func(m *bench.Measurement) { m.Rates = nil }, "bench[0].measurements[0].rates"},
		"peer is self": {func(m *bench.Measurement) { m.Peer = &m.GPU }, "bench[0].measurements[0].peer"},
		"bad unit":     {func(m *bench.Measurement) { m.Unit = "GB/s" }, "bench[0].measurements[0].unit"},
	} {
		m := good
		m.Rates = slices.Clone(good.Rates)
		tc.m(&m)
		r := api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Bench: []api.BenchReport{{ID: "b-1", Measurements: []bench.Measurement{m}}}}
		if err := r.Validate(); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an invalid error naming %s", name, err, tc.want)
		}
	}
	many := make([]bench.Measurement, bench.MaxMeasurements+1)
	for i := range many {
		many[i] = good
	}
	r := api.RegisterRequest{ProtocolVersion: api.ProtocolVersion, Node: "n1", Bench: &api.BenchReport{ID: "join", Measurements: many}}
	if err := r.Validate(); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "bench.measurements") {
		t.Errorf("too many measurements: %v", err)
	}
}

func nanValue() float64 { var z float64; return z / z }

// TestWorkloadBench: one job per GPU model, pinned and labelled; a model
// the fleet lacks cancels what was submitted; another team sees nothing;
// the report joins the printed throughput with the attempt's energy and
// the catalog price.
func TestWorkloadBench(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a, b := f.team("team-a", nil), f.team("team-b", nil)
	h := f.node("h", "h100-sxm-80gb", 1)
	x := f.node("x", "a100-sxm-80gb", 1)
	req := api.WorkloadBenchRequest{GPUModels: []string{"H100 SXM5 80GB", "a100-sxm-80gb"}, Job: gpufleet.JobRequest{
		Command: []string{"./bench.sh"}, Resources: gpufleet.Resources{GPUs: 1},
		Work: &gpufleet.WorkCounter{Metric: `tok/s=([0-9.]+)`, Unit: "tokens"}}}

	noWork := req
	noWork.Job.Work = nil
	if _, err := f.srv.StartWorkloadBench(ctx, a, noWork); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "job.work") {
		t.Errorf("without a work counter: %v", err)
	}
	missing := req
	missing.GPUModels = []string{"h100-sxm-80gb", "l4"}
	before := f.jobCount()
	if _, err := f.srv.StartWorkloadBench(ctx, a, missing); err == nil || !strings.Contains(err.Error(), "gpu model l4") {
		t.Fatalf("a model the fleet lacks: %v", err)
	}
	js, _ := f.srv.Jobs(ctx, f.admin, api.JobQuery{All: true})
	for _, j := range js.Jobs {
		if !j.CancelRequested && !j.State.Terminal() {
			t.Errorf("job %s of the failed workload bench left %s", j.ID, j.State)
		}
	}
	if f.jobCount() != before+1 {
		t.Errorf("jobs %d -> %d", before, f.jobCount())
	}

	rep, err := f.srv.StartWorkloadBench(ctx, a, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Jobs) != 2 || rep.GPUModels[0] != "h100-sxm-80gb" || rep.Done || rep.Unit != "tokens" {
		t.Fatalf("report at start: %+v", rep)
	}
	for i, wj := range rep.Jobs {
		j := f.job(wj.JobID)
		if !slices.Equal(j.Resources.GPUModels, []string{rep.GPUModels[i]}) || j.Env[BenchGPUModelEnv] != rep.GPUModels[i] || j.Team != "team-a" {
			t.Errorf("job %d: models %v env %v team %s", i, j.Resources.GPUModels, j.Env, j.Team)
		}
	}
	if _, err := f.srv.WorkloadBench(ctx, b, rep.ID); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("another team reads the workload bench: %v", err)
	}
	if l, _ := f.srv.WorkloadBenches(ctx, b); len(l) != 0 {
		t.Errorf("another team lists %d workload benches", len(l))
	}

	// Run both: 100 s each, printing 1000 and 600 tokens/s.
	f.cycle()
	starts := map[string]api.Assignment{}
	for _, p := range []api.Principal{h, x} {
		hb, _ := f.srv.Heartbeat(ctx, p, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
		if len(hb.Start) != 1 {
			t.Fatalf("%s starts %+v", p.Node, hb.Start)
		}
		starts[p.Node] = hb.Start[0]
		as := hb.Start[0]
		run := []api.AttemptReport{{AttemptID: as.AttemptID, JobID: as.JobID, State: gpufleet.AttemptRunning}}
		for range 3 {
			// The minute rollups hold idle seconds too: SM 0.4 of a minute
			// the attempt held for 0.8 of its time.
			f.srv.Heartbeat(ctx, p, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run,
				Samples: []api.GPUSample{{UUID: as.GPUs[0], SMActivity: ptr(0.4), TensorActivity: ptr(0.1), DRAMActivity: ptr(0.3), Utilization: ptr(1.0)}}})
			f.clk.Advance(time.Second)
		}
	}
	f.clk.Advance(100 * time.Second)
	for p, tput := range map[api.Principal]float64{h: 1000, x: 600} {
		as := starts[p.Node]
		code := 0
		f.srv.Heartbeat(ctx, p, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion,
			Attempts: []api.AttemptReport{{AttemptID: as.AttemptID, JobID: as.JobID, State: gpufleet.AttemptSucceeded, ExitCode: &code,
				GPUSeconds: 100, EffectiveGPUSeconds: 80, EnergyJoules: 50000, Work: &tput}}})
	}
	f.cycle()
	rep, err = f.srv.WorkloadBench(ctx, a, rep.ID)
	if err != nil || !rep.Done || len(rep.Rows) != 2 {
		t.Fatalf("report after the runs: %+v %v", rep, err)
	}
	r := rep.Rows[0]
	// $6.88 per GPU-hour at 1000 tokens/s: 6.88 / 3600 / 1000 * 1e6.
	got := fmt.Sprintf("%s %s %.0f $%.3f %.2f J %.0f W sm %.2f tensor %.2f dram %.2f %s", r.GPUModel, r.State, *r.Throughput, *r.USDPerMillion,
		*r.JoulesPerUnit, *r.PowerWatts, *r.SMActivity, *r.TensorActivity, *r.DRAMActivity, r.Bound)
	if want := "h100-sxm-80gb succeeded 1000 $1.911 0.50 J 500 W sm 0.80 tensor 0.20 dram 0.60 memory"; got != want {
		t.Errorf("h100 row:\n got %s\nwant %s", got, want)
	}
	if rep.Rows[1].GPUModel != "a100-sxm-80gb" || *rep.Rows[1].Throughput != 600 {
		t.Errorf("a100 row: %+v", rep.Rows[1])
	}
}

// TestRepairedRebenchesABenchOnlyDegradedGPU: a GPU degraded only by its
// benchmark figures (no error), on a cordoned node, is re-checked when the
// node is marked repaired: the validation's bench decides, and a pass
// returns the node to ready and the GPU to healthy without a manual bench.
// A node in service is refused (cordon first), and one degraded by an
// error still needs the repair path.
func TestRepairedRebenchesABenchOnlyDegradedGPU(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	n1, n2 := f.node("n1", "h100-sxm-80gb", 2), f.node("n2", "h100-sxm-80gb", 2)
	f.cycle()
	f.benchNode(n1, copyRun("n1", 0, 3.0e12), copyRun("n1", 1, 3.02e12))
	f.benchNode(n2, copyRun("n2", 0, 3.0e12), copyRun("n2", 1, 1.8e12))
	f.srv.Heartbeat(ctx, n2, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if n, _ := f.srv.Node(ctx, f.admin, "n2"); n.State != gpufleet.NodeCordoned || n.GPUs[1].Health != gpufleet.Degraded {
		t.Fatalf("n2 after a slow copy: %s, gpu 1 %s", n.State, n.GPUs[1].Health)
	}
	if _, err := f.srv.NodeAction(ctx, f.admin, "n2", api.Uncordon); err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.NodeAction(ctx, f.admin, "n2", api.Repaired); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "cordon it first") {
		t.Fatalf("repaired on a node in service: %v", err)
	}
	if _, err := f.srv.NodeAction(ctx, f.admin, "n2", api.Cordon); err != nil {
		t.Fatal(err)
	}
	n, err := f.srv.NodeAction(ctx, f.admin, "n2", api.Repaired)
	if err != nil || n.State != gpufleet.NodeValidating || !strings.Contains(n.StateReason, "only findings are benchmark figures") {
		t.Fatalf("repaired on a cordoned bench-degraded node: %v, %s (%s)", err, n.State, n.StateReason)
	}
	f.cycle()
	hb, _ := f.srv.Heartbeat(ctx, n2, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if len(hb.Validate) != 1 {
		t.Fatalf("no validation order: %+v", hb.Validate)
	}
	res := api.ValidationResult{ID: hb.Validate[0].ID, Passed: true, Detail: "2 gpus ok",
		Bench: &api.BenchReport{ID: hb.Validate[0].ID, Measurements: []bench.Measurement{copyRun("n2", 0, 3.01e12), copyRun("n2", 1, 3.0e12)}}}
	f.srv.Heartbeat(ctx, n2, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Validations: []api.ValidationResult{res}})
	f.srv.Heartbeat(ctx, n2, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if n, _ = f.srv.Node(ctx, f.admin, "n2"); n.State != gpufleet.NodeReady || n.Health != gpufleet.Healthy || n.GPUs[1].Health != gpufleet.Healthy {
		t.Fatalf("after a passing bench: %s %s, gpu 1 %s", n.State, n.Health, n.GPUs[1].Health)
	}
	// A healthy cordoned node has nothing to repair.
	if _, err := f.srv.NodeAction(ctx, f.admin, "n1", api.Repaired); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "no GPU in repair") {
		t.Errorf("repaired on a healthy cordoned node: %v", err)
	}
}

// TestBenchOrderLevels: a bench order carries its level to the agent (a
// long one runs the full sizes), and an unknown level is refused naming
// the field.
func TestBenchOrderLevels(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	n1 := f.node("n1", "h100-sxm-80gb", 2)
	f.cycle()
	if _, err := f.srv.NodeAction(ctx, f.admin, "n1", api.Cordon); err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.OrderBench(ctx, f.admin, "n1", api.BenchRequest{Level: "xlong"}); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "level") {
		t.Fatalf("level xlong: %v", err)
	}
	for _, l := range []bench.Level{bench.LevelQuick, bench.LevelLong} {
		o, err := f.srv.OrderBench(ctx, f.admin, "n1", api.BenchRequest{Level: l})
		if err != nil {
			t.Fatal(err)
		}
		hb, _ := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
		i := slices.IndexFunc(hb.Bench, func(b api.BenchOrder) bool { return b.ID == o.ID })
		if i < 0 || hb.Bench[i].Level != l || hb.Bench[i].Quick != (l == bench.LevelQuick) {
			t.Errorf("level %s: order relayed as %+v", l, hb.Bench)
		}
	}
}

// TestScheduledRebench: with a bench schedule, the leader cordons idle
// nodes whose figures are older than the schedule's every (here: never
// measured), no more than its rate an hour, orders their benches once the
// cycle committed, records the figures as scheduled and returns the nodes
// to ready; a node running work is never taken.
func TestScheduledRebench(t *testing.T) {
	sched, err := bench.ParseSchedule("every=1d,rate=2/h")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, func(c *Config) { c.BenchSchedule = &sched })
	ctx := t.Context()
	nodes := map[string]api.Principal{"n1": f.node("n1", "h100-sxm-80gb", 2), "n2": f.node("n2", "h100-sxm-80gb", 2), "n3": f.node("n3", "h100-sxm-80gb", 2)}
	beat := func(name string, req api.HeartbeatRequest) api.HeartbeatResponse {
		t.Helper()
		req.ProtocolVersion = api.ProtocolVersion
		hb, err := f.srv.Heartbeat(ctx, nodes[name], req)
		if err != nil {
			t.Fatal(err)
		}
		return hb
	}
	f.cycle() // leads
	for n := range nodes {
		beat(n, api.HeartbeatRequest{})
	}
	f.cycle()
	held := func() []string {
		var out []string
		for name := range nodes {
			n, _ := f.srv.Node(ctx, f.admin, name)
			if n.State == gpufleet.NodeCordoned && n.StateCause == gpufleet.CauseBench {
				out = append(out, name)
				if !strings.Contains(n.StateReason, "scheduled re-bench") {
					t.Errorf("%s: reason %q", name, n.StateReason)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	taken := held()
	if !slices.Equal(taken, []string{"n1", "n2"}) {
		t.Fatalf("cordoned for the schedule: %v; want two of the three idle nodes (two an hour), by name", taken)
	}
	for _, name := range taken {
		hb := beat(name, api.HeartbeatRequest{})
		if len(hb.Bench) != 1 || hb.Bench[0].Level != bench.LevelQuick {
			t.Fatalf("%s: bench orders %+v", name, hb.Bench)
		}
		rep := api.BenchReport{ID: hb.Bench[0].ID, Measurements: []bench.Measurement{copyRun(name, 0, 3.0e12), copyRun(name, 1, 3.01e12)}}
		beat(name, api.HeartbeatRequest{Bench: []api.BenchReport{rep}})
	}
	f.cycle()
	if h := held(); len(h) != 0 {
		t.Errorf("still held after their figures: %v (n3 waits for the rate)", h)
	}
	for _, name := range taken {
		if n, _ := f.srv.Node(ctx, f.admin, name); n.State != gpufleet.NodeReady {
			t.Errorf("%s after its figures: %s (%s)", name, n.State, n.StateReason)
		}
	}
	hist, _ := f.srv.BenchResults(ctx, f.admin, api.BenchQuery{Node: "n1", History: true})
	if len(hist.Results) == 0 || hist.Results[0].Trigger != bench.TriggerScheduled {
		t.Errorf("figures of a scheduled re-bench: %+v", hist.Results)
	}

	// n3 is due; with the hour's rate back, running work keeps it.
	f.srv.rebench.mu.Lock()
	f.srv.rebench.started = nil
	f.srv.rebench.mu.Unlock()
	all, _ := f.st.Nodes(ctx)
	running := []gpufleet.Job{{ID: "j-1", State: gpufleet.JobRunning, Attempts: []gpufleet.Attempt{{ID: "a-1", State: gpufleet.AttemptRunning,
		Node: "n3", Nodes: []gpufleet.AttemptNode{{Name: "n3", GPUs: []string{"GPU-n3-a"}}}}}}}
	due, err := f.srv.stepRebench(ctx, running, &nodeMoves{nodes: all}, f.clk.Now())
	if err != nil || len(due) != 0 {
		t.Fatalf("with work on n3: %v, %v; want nothing taken", due, err)
	}
	due, err = f.srv.stepRebench(ctx, nil, &nodeMoves{nodes: all}, f.clk.Now())
	if err != nil || !slices.Equal(due, []string{"n3"}) {
		t.Errorf("idle n3: %v, %v", due, err)
	}
}

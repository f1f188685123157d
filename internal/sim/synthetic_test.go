package sim

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// syntheticTrace writes the synthetic power trace (traces/synthetic/README.md):
// jobs jobs arriving over days days, gangs of them 32-GPU gangs over 4
// nodes, the rest 1, 2, 4 or 8 GPUs, from a PCG seeded with seed.
func syntheticTrace(seed uint64, jobs, gangs int, days float64) []byte {
	rng := rand.New(rand.NewPCG(seed, 0x35))
	var b bytes.Buffer
	b.WriteString("id,submit_s,duration_s,gpus,nodes,team,priority\n")
	isGang := make([]bool, jobs)
	for _, i := range rng.Perm(jobs)[:gangs] {
		isGang[i] = true
	}
	teams := []string{"vision", "speech", "llm", "recsys"}
	span := days * 86400
	t := 0.0
	for i := range jobs {
		// Poisson arrivals at the mean rate that spreads jobs over span.
		t += rng.ExpFloat64() * span / float64(jobs)
		gpus, nodes := 0, 0
		var dur float64
		prio := "training"
		if isGang[i] {
			gpus, nodes = 32, 4
			dur = 1800 * math.Exp(0.8*rng.NormFloat64()) // median 30 min
		} else {
			switch p := rng.Float64(); {
			case p < 0.40:
				gpus = 1
			case p < 0.65:
				gpus = 2
			case p < 0.85:
				gpus = 4
			default:
				gpus = 8
			}
			dur = 2400 * math.Exp(1.0*rng.NormFloat64()) // median 40 min
			switch p := rng.Float64(); {
			case p < 0.10:
				prio = "production"
			case p < 0.30:
				prio = "batch"
			}
		}
		dur = math.Round(min(max(dur, 60), 48*3600))
		fmt.Fprintf(&b, "s%04d,%.0f,%.0f,%d,%d,%s,%s\n", i+1, t, dur, gpus, nodes, teams[rng.IntN(len(teams))], prio)
	}
	return b.Bytes()
}

// TestSyntheticTraces checks the committed synthetic traces are what the
// generator makes; -update rewrites them.
func TestSyntheticTraces(t *testing.T) {
	for _, tc := range []struct {
		file string
		seed uint64
	}{
		{"h100-power.csv", 1},         // tuned on
		{"h100-power-heldout.csv", 2}, // held out: never tuned on
		// Held out for the enforcement policies (power caps, the stop
		// policy): never used before 2026-12-07's replays of them.
		{"h100-power-heldout-3.csv", 3},
		{"h100-power-heldout-4.csv", 4},
	} {
		path := filepath.Join("..", "..", "traces", "synthetic", tc.file)
		got := syntheticTrace(tc.seed, 3000, 328, 10)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./internal/sim -run TestSyntheticTraces -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the generator's output; run go test ./internal/sim -run TestSyntheticTraces -update", path)
		}
	}
}

// TestNoisyDrawsStayUnderBudget: on a small synthetic trace (H100 racks
// of two nodes at 80 % of their rating, 32-GPU gangs among small jobs)
// with draws varying per job (DrawNoise 0.2), no rack spends a minute
// over its budget, since a job's GPUs count their limit until measured a
// telemetry lag after it starts, and every job starts, the gangs too
// (they spread over racks). Without the lag (the scheduler sees a
// placed job's draw at once) the budget still holds, sooner.
func TestNoisyDrawsStayUnderBudget(t *testing.T) {
	cluster := `{"node_groups": [{"name": "h100", "count": 16, "gpu": "h100-sxm-80gb", "gpus_per_node": 8, "nvlink_domain_gpus": 8, "nodes_per_rack": 2}]}`
	trace := string(syntheticTrace(7, 300, 33, 1))
	pc, _ := scheduler.PolicyConfig("gpufleet")
	pc.ETA = false
	for _, tc := range []struct {
		name string
		lag  float64
	}{{"lag 60 s", 0}, {"lag 5 min", 300}, {"no lag", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(mustTrace(t, trace), mustCluster(t, cluster), Config{Policy: pc, RackBudget: 0.8, DrawNoise: 0.2,
				TelemetryLag: tc.lag, PeakMargin: 0.1, RackReserve: 0.05, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			r := res.Report
			if r.RackPower == nil || r.RackPower.MinutesOverBudget != 0 {
				t.Errorf("rack power %+v: want 0 minutes over budget", r.RackPower)
			}
			if r.NeverStarted != 0 || r.Completed != 300 {
				t.Errorf("%d never started (%v), %d completed: want every job done", r.NeverStarted, r.NeverStartedBySize, r.Completed)
			}
		})
	}
}

// TestPowerCapsHoldSwingingDraws: when draws rise past what a job was
// measured at (DrawSwing), a peak margin no longer keeps racks under
// their budget unless the GPUs are capped at their charge (PowerCaps,
// NVML's power limit): with caps, no minute over budget.
func TestPowerCapsHoldSwingingDraws(t *testing.T) {
	cluster := `{"node_groups": [{"name": "h100", "count": 16, "gpu": "h100-sxm-80gb", "gpus_per_node": 8, "nvlink_domain_gpus": 8, "nodes_per_rack": 2}]}`
	trace := string(syntheticTrace(7, 600, 60, 1))
	pc, _ := scheduler.PolicyConfig("gpufleet")
	pc.ETA = false
	run := func(caps bool) Report {
		res, err := Run(mustTrace(t, trace), mustCluster(t, cluster), Config{Policy: pc, RackBudget: 0.8, DrawNoise: 0.2,
			DrawSwing: 0.4, PowerCaps: caps, PeakMargin: 0.1, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return res.Report
	}
	uncapped, capped := run(false), run(true)
	if uncapped.RackPower.MinutesOverBudget == 0 {
		t.Errorf("uncapped swinging draws: 0 minutes over budget; the test no longer shows what caps are for")
	}
	if capped.RackPower.MinutesOverBudget != 0 || capped.NeverStarted != 0 {
		t.Errorf("capped: %.1f minutes over budget, %d never started: want 0 and 0", capped.RackPower.MinutesOverBudget, capped.NeverStarted)
	}
}

// TestUnmeasuredJobsCountTheirLimit: a telemetry lag longer than any job
// runs means no job is ever measured, so every running GPU counts its
// TDP: the replay decides exactly as one that charges the limit always
// (PeakMargin < 0). A short lag lets measured jobs make room.
func TestUnmeasuredJobsCountTheirLimit(t *testing.T) {
	cluster := `{"node_groups": [{"name": "h100", "count": 8, "gpu": "h100-sxm-80gb", "gpus_per_node": 8, "nvlink_domain_gpus": 8, "nodes_per_rack": 2}]}`
	trace := string(syntheticTrace(3, 200, 10, 0.5))
	pc, _ := scheduler.PolicyConfig("gpufleet")
	pc.ETA = false
	run := func(lag, margin float64) Report {
		res, err := Run(mustTrace(t, trace), mustCluster(t, cluster), Config{Policy: pc, RackBudget: 0.8, DrawNoise: 0.2,
			TelemetryLag: lag, PeakMargin: margin, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		r := res.Report
		r.SimWallS = 0
		return r
	}
	never, limit, short := run(1e9, 0.1), run(60, -1), run(60, 0.1)
	if *never.AvgJCTS != *limit.AvgJCTS || never.Cycles != limit.Cycles || never.WaitReasons[scheduler.ReasonRackPower] != limit.WaitReasons[scheduler.ReasonRackPower] {
		t.Errorf("never measured: avg JCT %v, %d cycles; always the limit: %v, %d: want the same replay", *never.AvgJCTS, never.Cycles, *limit.AvgJCTS, limit.Cycles)
	}
	if *short.AvgJCTS >= *never.AvgJCTS {
		t.Errorf("measured after 60 s: avg JCT %v, not below never measured %v", *short.AvgJCTS, *never.AvgJCTS)
	}
	for _, r := range []Report{never, limit, short} {
		if r.RackPower.MinutesOverBudget != 0 || r.NeverStarted != 0 {
			t.Errorf("%.1f minutes over budget, %d never started: want 0 and 0", r.RackPower.MinutesOverBudget, r.NeverStarted)
		}
	}
}

// TestOverBudgetStopCutsMinutesOver: where caps cannot hold swinging
// draws (DrawSwing, no PowerCaps), the stop policy (Policy.OverBudget =
// stop, the server's --over-budget stop) stops jobs of a rack that stays
// over its projected budget, and its racks spend fewer minutes over their
// budget than with the alert alone; every job still finishes, at a cost
// in stops (rack_power, counted as over_budget_stops).
func TestOverBudgetStopCutsMinutesOver(t *testing.T) {
	cluster := `{"node_groups": [{"name": "h100", "count": 16, "gpu": "h100-sxm-80gb", "gpus_per_node": 8, "nvlink_domain_gpus": 8, "nodes_per_rack": 2}]}`
	trace := string(syntheticTrace(7, 600, 60, 1))
	run := func(policy scheduler.OverBudgetPolicy) Report {
		pc, _ := scheduler.PolicyConfig("gpufleet")
		pc.ETA = false
		pc.OverBudget, pc.OverBudgetAfter = policy, scheduler.DefaultOverBudgetAfter
		res, err := Run(mustTrace(t, trace), mustCluster(t, cluster), Config{Policy: pc, RackBudget: 0.8, DrawNoise: 0.2,
			DrawSwing: 0.4, PeakMargin: 0.1, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return res.Report
	}
	alert, stop := run(scheduler.OverBudgetAlert), run(scheduler.OverBudgetStop)
	if alert.RackPower.MinutesOverBudget == 0 || alert.RackPower.OverBudgetStops != 0 {
		t.Errorf("alert only: %.1f minutes over budget, %d stops: want some minutes and no stop", alert.RackPower.MinutesOverBudget, alert.RackPower.OverBudgetStops)
	}
	if stop.RackPower.MinutesOverBudget >= alert.RackPower.MinutesOverBudget {
		t.Errorf("stop policy: %.1f minutes over budget, not fewer than the alert's %.1f", stop.RackPower.MinutesOverBudget, alert.RackPower.MinutesOverBudget)
	}
	if stop.RackPower.OverBudgetStops == 0 || stop.Stops[string(scheduler.StopRackPower)] != stop.RackPower.OverBudgetStops {
		t.Errorf("stop policy: %d over-budget stops, stops %v: want some, all rack_power", stop.RackPower.OverBudgetStops, stop.Stops)
	}
	if stop.NeverStarted != 0 || stop.Completed != 600 {
		t.Errorf("stop policy: %d never started, %d completed: want every job done", stop.NeverStarted, stop.Completed)
	}
}

package scheduler_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// extremeResources draws a request at the edges of what validation takes:
// the largest counts and sizes, the finest time-slice share, MIG profiles
// no GPU has, models and classes that do not exist, selectors no node
// carries. Every draw passes gpufleet.Resources.Validate.
func extremeResources(t *rapid.T) gpufleet.Resources {
	gpus := rapid.SampledFrom([]int{1, 2, 7, 8, 9, 63, 64, 65, 255, 256, 257, 1 << 16, gpufleet.MaxFleetGPUs - 1, gpufleet.MaxFleetGPUs}).Draw(t, "gpus")
	r := gpufleet.Resources{GPUs: gpus}
	switch rapid.IntRange(0, 4).Draw(t, "nodes") {
	case 1:
		r.Nodes = 1
	case 2:
		if gpus%2 == 0 {
			r.Nodes = 2
		}
	case 3:
		if gpus <= gpufleet.MaxFleetNodes {
			r.Nodes = gpus
		}
	case 4:
		if gpus%gpufleet.MaxFleetNodes == 0 {
			r.Nodes = gpufleet.MaxFleetNodes
		}
	}
	if r.Nodes <= 1 {
		switch rapid.IntRange(0, 4).Draw(t, "sharing") {
		case 1:
			r.Sharing = gpufleet.Sharing{Kind: gpufleet.MIG, Profile: rapid.SampledFrom([]string{"1g.10gb", "7g.80gb", "8g.9999gb", "1g.24gb+me"}).Draw(t, "profile")}
		case 2:
			r.Sharing = gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: rapid.SampledFrom([]float64{0.001, 0.0015, 0.333, 0.999, 1}).Draw(t, "frac")}
		}
	}
	r.GPUMemoryMinBytes = rapid.SampledFrom([]gpufleet.Bytes{0, 1, 80 << 30, gpufleet.MaxGPUMemory}).Draw(t, "mem")
	r.MinComputeCapability = rapid.SampledFrom([]gpufleet.ComputeCapability{{}, {Major: 1}, {Major: 9}, {Major: 99, Minor: 9}}).Draw(t, "cc")
	r.Precision = rapid.SampledFrom(append([]gpufleet.Precision{""}, gpufleet.Precisions()...)).Draw(t, "precision")
	r.Interconnect = rapid.SampledFrom([]gpufleet.Interconnect{"", gpufleet.AnyInterconnect, gpufleet.NVLink}).Draw(t, "interconnect")
	r.Prefer = rapid.SampledFrom([]gpufleet.Preference{"", gpufleet.Cheapest, gpufleet.Fastest}).Draw(t, "prefer")
	if rapid.Bool().Draw(t, "allow") {
		r.GPUModels = rapid.SliceOfN(rapid.SampledFrom(append(propModels, "h1000", "fast", "NVIDIA H100 80GB HBM3")), 1, 3).Draw(t, "models")
	}
	if rapid.IntRange(0, 3).Draw(t, "select") == 0 {
		r.NodeSelector = map[string]string{rapid.SampledFrom([]string{"rack", "zone", "x"}).Draw(t, "key"): rapid.SampledFrom([]string{"r0", "r1", "r12", ""}).Draw(t, "value")}
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("generator drew an invalid request: %v", err)
	}
	return r
}

// extremeInput draws a fleet (a node of 256 GPUs among them), teams at
// the edges of their limits, and running and queued jobs with extreme
// requests, estimates, grace periods and submit times.
func extremeInput(t *rapid.T) scheduler.Input {
	now := schedtest.T0.Add(400 * 24 * time.Hour)
	in := scheduler.Input{Now: now, Models: schedtest.Models(), Nodes: genFleet(t), Classes: map[string][]string{"fast": {"h100-sxm-80gb"}}}
	if rapid.Bool().Draw(t, "bigNode") {
		in.Nodes = append(in.Nodes, schedtest.MakeNode("wide", "h100-sxm-80gb", gpufleet.MaxNodeGPUs).Domains(72).Rack("r1").Obj())
	}
	for _, name := range []string{"a", "b", "c"} {
		team := scheduler.Team{Name: name,
			Weight:         rapid.SampledFrom([]float64{gpufleet.MinTeamWeight, 1, gpufleet.MaxTeamWeight}).Draw(t, "weight"),
			BorrowingLimit: rapid.SampledFrom([]int{-1, 0, 1, gpufleet.MaxFleetGPUs}).Draw(t, "borrow"),
			Quota:          map[string]int{rapid.SampledFrom(append(propModels, "fast")).Draw(t, "qclass"): rapid.SampledFrom([]int{0, 1, gpufleet.MaxFleetGPUs}).Draw(t, "quota")},
			Usage:          rapid.SampledFrom([]float64{0, 1, 1e9, 1e18}).Draw(t, "usage")}
		in.Teams = append(in.Teams, team)
	}
	cfg := genConfig(t)
	cfg.MaxPlacementsPerCycle = rapid.SampledFrom([]int{0, 1, 1000}).Draw(t, "maxPlace")
	if rapid.Bool().Draw(t, "spare") {
		cfg.Spare = map[string]int{"h100-sxm-80gb": rapid.SampledFrom([]int{1, gpufleet.MaxFleetGPUs}).Draw(t, "spareN")}
	}
	in.Config = cfg
	n := rapid.IntRange(1, 20).Draw(t, "jobs")
	for i := range n {
		j := scheduler.Job{ID: fmt.Sprintf("q%02d", i), Team: rapid.SampledFrom([]string{"a", "b", "c", "nobody"}).Draw(t, "team"),
			Priority:  rapid.SampledFrom(gpufleet.Priorities()).Draw(t, "prio"),
			Resources: extremeResources(t),
			Submitted: now.Add(-time.Duration(rapid.SampledFrom([]int64{0, 1, int64(gpufleet.MaxDuration)}).Draw(t, "age"))),
			Estimate:  time.Duration(rapid.SampledFrom([]int64{0, 1, int64(time.Second), int64(gpufleet.MaxDuration)}).Draw(t, "est")),
		}
		if rapid.Bool().Draw(t, "preemptible") {
			j.Preemptible, j.Grace = true, time.Duration(rapid.SampledFrom([]int64{0, int64(gpufleet.MaxGrace)}).Draw(t, "grace"))
		}
		j.Requeued = rapid.IntRange(0, 4).Draw(t, "requeued") == 0
		in.Jobs = append(in.Jobs, j)
	}
	// Let the scheduler place some of them, then run them since long ago.
	out := scheduler.Schedule(in)
	for _, s := range out.Starts {
		for i := range in.Jobs {
			if in.Jobs[i].ID == s.Job && rapid.Bool().Draw(t, "keep") {
				in.Jobs[i].Placement = s.Placement
				in.Jobs[i].Started = now.Add(-time.Duration(rapid.SampledFrom([]int64{0, int64(time.Hour), int64(gpufleet.MaxDuration)}).Draw(t, "ran")))
			}
		}
	}
	return in
}

// TestScheduleNeverPanicsOnExtremeValidInput: no Input that passes
// validation stops the scheduler, and its decisions keep the invariants.
// A panic here would stop the leader for every cycle after it.
func TestScheduleNeverPanicsOnExtremeValidInput(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := extremeInput(t)
		out := scheduler.Schedule(in)
		checkOutput(t, in, out)
		for _, p := range out.Pending {
			if p.EstimatedStart != nil && (p.EstimatedStart.Before(in.Now) || p.EstimatedStart.Year() > in.Now.Year()+1000) {
				t.Fatalf("job %s: estimated start %s from now %s", p.Job, p.EstimatedStart, in.Now)
			}
		}
	})
}

// TestScheduleRefusesOutOfRangeRows: a stored row beyond the limits (one
// that skipped validation) fails with invalid_request, never narrowed.
func TestScheduleRefusesOutOfRangeRows(t *testing.T) {
	for name, r := range map[string]gpufleet.Resources{
		"2^31 gpus": {GPUs: 1 << 31}, "2^32 gpus": {GPUs: 1 << 32}, "2^32+1 gpus": {GPUs: 1<<32 + 1},
		"negative gpus": {GPUs: math.MinInt64}, "2^31 nodes": {GPUs: 1 << 31, Nodes: 1 << 31},
	} {
		t.Run(name, func(t *testing.T) {
			in := scheduler.Input{Now: schedtest.T0, Models: schedtest.Models(),
				Nodes:  []scheduler.Node{schedtest.MakeNode("n1", "h100-sxm-80gb", 8).Obj()},
				Jobs:   []scheduler.Job{{ID: "poison", Team: "a", Priority: gpufleet.Batch, Resources: r, Submitted: schedtest.T0}},
				Config: must(scheduler.PolicyConfig("gpufleet"))}
			out := scheduler.Schedule(in)
			if len(out.Starts) != 0 || len(out.Pending) != 0 || len(out.Fails) != 1 || out.Fails[0].Code != scheduler.FailInvalid {
				t.Fatalf("starts %v, pending %+v, fails %+v", out.Starts, out.Pending, out.Fails)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

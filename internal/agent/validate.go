package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/gpu"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// startValidation runs a return-to-service check once per order id, in the
// background; the result goes out with the next heartbeats until the server
// stops asking.
func (a *Agent) startValidation(ctx context.Context, o api.ValidationOrder) {
	a.mu.Lock()
	if _, ok := a.validations[o.ID]; ok {
		a.mu.Unlock()
		return
	}
	a.validations[o.ID] = nil
	a.mu.Unlock()
	a.log.Info("validating gpus before they return to service", "order", o.ID, "gpus", o.GPUs)
	go func() {
		res := a.validate(ctx, o)
		a.mu.Lock()
		a.validations[o.ID] = &res
		a.mu.Unlock()
		a.log.Info("validation done", "order", o.ID, "passed", res.Passed, "detail", res.Detail)
	}()
}

// validate is the return-to-service check (docs/RELIABILITY.md): the same
// check on every backend, over fresh samples taken after a settling wait,
// then the quick microbenchmarks (docs/BENCH.md), which the server judges
// against the fleet:
//   - every GPU asked for is discovered (none fell off the bus);
//   - on simulated GPUs, no injected fault is still in place;
//   - no uncorrectable ECC error since the driver loaded (volatile count),
//     no pending page retirement or row remap, no row-remap failure;
//   - every NVLink link that exists is up, and the PCIe link runs at its
//     full width (the generation drops at idle by design, so it is not
//     checked);
//   - no thermal slowdown, HW slowdown or power brake;
//   - no XID raised while the check ran.
func (a *Agent) validate(ctx context.Context, o api.ValidationOrder) api.ValidationResult {
	res := api.ValidationResult{ID: o.ID}
	fail := func(format string, args ...any) api.ValidationResult {
		res.Detail = fmt.Sprintf(format, args...)
		return res
	}
	if err := a.rediscover(ctx); err != nil {
		return fail("discovery failed: %v", err)
	}
	a.mu.Lock()
	targets := map[string]int{} // UUID -> index
	for _, g := range a.inventory {
		if len(o.GPUs) == 0 || slices.Contains(o.GPUs, g.UUID) {
			targets[g.UUID] = g.Index
		}
	}
	xidsBefore := a.xidTotals(targets)
	a.mu.Unlock()
	if len(targets) == 0 {
		return fail("none of the gpus to validate is in this node's inventory")
	}
	// Settle: two sample intervals, so the evidence read below is fresh.
	select {
	case <-ctx.Done():
		return fail("agent stopping")
	case <-time.After(2 * a.cfg.SampleInterval):
	}
	devs, err := a.be.Devices(ctx)
	if err != nil {
		return fail("discovery failed: %v", err)
	}
	samples, err := a.be.Sample(ctx)
	if err != nil {
		return fail("reading the gpus failed: %v", err)
	}
	byUUID := map[string]gpu.Sample{}
	for _, s := range samples {
		byUUID[s.UUID] = s
	}
	var problems []string
	for _, uuid := range slices.Sorted(func(yield func(string) bool) {
		for u := range targets {
			if !yield(u) {
				return
			}
		}
	}) {
		idx := targets[uuid]
		if !slices.ContainsFunc(devs, func(d gpu.Device) bool { return d.UUID == uuid }) {
			problems = append(problems, fmt.Sprintf("gpu %d is missing from discovery", idx))
			continue
		}
		if a.faults != nil {
			if fs, err := a.faults.Faults(idx); err == nil {
				var names []string
				for _, f := range fs {
					// Slow memory leaves no evidence but the benchmark,
					// as on a real card: the gate below judges it.
					if f.Kind != simgpu.FaultSlowMemory {
						names = append(names, f.String())
					}
				}
				if len(names) > 0 {
					problems = append(problems, fmt.Sprintf("gpu %d still has injected faults: %s", idx, strings.Join(names, ", ")))
					continue
				}
			}
		}
		s, ok := byUUID[uuid]
		if !ok {
			problems = append(problems, fmt.Sprintf("gpu %d gave no sample", idx))
			continue
		}
		problems = append(problems, sampleProblems(idx, s)...)
	}
	a.mu.Lock()
	after := a.xidTotals(targets)
	a.mu.Unlock()
	for uuid, n := range after {
		if n > xidsBefore[uuid] {
			problems = append(problems, fmt.Sprintf("gpu %d raised an XID during the check", targets[uuid]))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return fail("%s", strings.Join(problems, "; "))
	}
	res.Passed = true
	res.Detail = fmt.Sprintf("%d gpus: discovered, no uncorrectable ECC, no pending remap or retirement, links up, no throttling, no XID", len(targets))
	// The quick microbenchmarks: the server judges them against the
	// fleet and fails the validation under the gate.
	if a.cfg.Bench != nil {
		uuids := slices.Sorted(func(yield func(string) bool) {
			for u := range targets {
				if !yield(u) {
					return
				}
			}
		})
		bo := api.BenchOrder{ID: o.ID, GPUs: uuids, Quick: true}
		if len(o.Tests) > 0 { // the quick set and the tests that hold the node back
			bo.Tests = append(bench.LevelTests(bench.LevelQuick), o.Tests...)
		}
		rep := a.runBench(ctx, bo)
		res.Bench = &rep
		if len(rep.Measurements) == 0 {
			res.Detail += "; benchmarks not run: " + rep.Detail
		} else {
			res.Detail += fmt.Sprintf("; %d benchmark figures measured", len(rep.Measurements))
		}
	}
	return res
}

// xidTotals counts each target GPU's XIDs so far; a.mu must be held.
func (a *Agent) xidTotals(targets map[string]int) map[string]float64 {
	out := map[string]float64{}
	for uuid := range targets {
		for _, n := range a.xidCount[uuid] {
			out[uuid] += n
		}
	}
	return out
}

// sampleProblems lists what in one sample keeps a GPU out of service.
func sampleProblems(idx int, s gpu.Sample) []string {
	var out []string
	add := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("gpu %d: ", idx)+fmt.Sprintf(format, args...))
	}
	if s.ECCUncorrectedVolatile != nil && *s.ECCUncorrectedVolatile > 0 {
		add("%d uncorrectable ECC errors since the driver loaded", *s.ECCUncorrectedVolatile)
	}
	if s.RowRemapFailure != nil && *s.RowRemapFailure {
		add("row remapping failed (no spare rows): replace the GPU")
	}
	if s.RowRemapPending != nil && *s.RowRemapPending {
		add("a row remap is pending: reset the GPU")
	}
	if s.RetiredPagesPending != nil && *s.RetiredPagesPending {
		add("a page retirement is pending: reset the GPU")
	}
	if s.NVLinkLinksUp != nil && s.NVLinkLinksTotal != nil && *s.NVLinkLinksUp < *s.NVLinkLinksTotal {
		add("%d of %d NVLink links are down", *s.NVLinkLinksTotal-*s.NVLinkLinksUp, *s.NVLinkLinksTotal)
	}
	if s.PCIeWidth != nil && s.PCIeMaxWidth != nil && *s.PCIeWidth < *s.PCIeMaxWidth {
		add("PCIe link at x%d of x%d", *s.PCIeWidth, *s.PCIeMaxWidth)
	}
	if s.ClockEventReasons != nil {
		for _, t := range throttleNames {
			bad := t.bit == gpu.ClockEventHWSlowdown || t.bit == gpu.ClockEventSWThermalSlowdown ||
				t.bit == gpu.ClockEventHWThermalSlowdown || t.bit == gpu.ClockEventHWPowerBrake
			if bad && *s.ClockEventReasons&t.bit != 0 {
				add("clocks held down (%s)", t.name)
			}
		}
	}
	return out
}

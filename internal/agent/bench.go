package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// BenchOpener opens the microbenchmark backend the first time the agent
// needs it (the CUDA libraries on a real node, the simulated GPUs
// otherwise); an error is reported with each bench, not fatal.
type BenchOpener func() (bench.Backend, error)

// runBench runs the microbenchmarks of order o on the GPUs it names
// (every GPU when none) that hold no attempt. It never fails: what could
// not be measured is said in the report's detail.
func (a *Agent) runBench(ctx context.Context, o api.BenchOrder) api.BenchReport {
	rep := api.BenchReport{ID: o.ID}
	if a.cfg.Bench == nil {
		rep.Detail = "benchmarks are off on this agent (--bench off)"
		return rep
	}
	if o.Rendezvous != nil || o.Group != nil {
		return a.runGroupBench(ctx, o)
	}
	busy := map[string]bool{}
	for _, h := range a.runner.Holds() {
		busy[h.GPU] = true
	}
	var idx []int
	var skipped []string
	a.mu.Lock()
	for _, d := range a.devices {
		switch {
		case len(o.GPUs) > 0 && !slices.Contains(o.GPUs, d.UUID):
		case busy[d.UUID] || slices.ContainsFunc(d.MIG, func(m gpu.MIGInstance) bool { return busy[m.UUID] }):
			skipped = append(skipped, fmt.Sprintf("gpu %d holds an attempt", d.Index))
		default:
			idx = append(idx, d.Index)
		}
	}
	a.mu.Unlock()
	if len(idx) == 0 {
		rep.Detail = "no idle gpu to measure"
		if len(skipped) > 0 {
			rep.Detail += ": " + strings.Join(skipped, "; ")
		}
		return rep
	}
	be, err := a.cfg.Bench()
	if err != nil {
		rep.Detail = fmt.Sprintf("benchmarks unavailable: %v", err)
		return rep
	}
	opts := bench.Options{GPUs: idx, Tests: o.Tests, Quick: o.Quick, Level: o.Level}
	ms, err := be.Measure(ctx, opts, func(line string) {
		if strings.Contains(line, "skipped") || strings.Contains(line, "not measured") {
			skipped = append(skipped, line)
		}
		a.log.Debug("bench", "order", o.ID, "step", line)
	})
	if err != nil {
		skipped = append(skipped, fmt.Sprintf("benchmark failed: %v", err))
	}
	rep.Measurements = ms
	rep.Detail = clip(strings.Join(skipped, "; "), maxBenchDetail)
	return rep
}

// runGroupBench runs rank 0's rendezvous or this node's part of an
// all-reduce across nodes. Every GPU of the node takes part, so a GPU
// that holds an attempt fails the part rather than shrinking it.
func (a *Agent) runGroupBench(ctx context.Context, o api.BenchOrder) api.BenchReport {
	rep := api.BenchReport{ID: o.ID}
	be, err := a.cfg.Bench()
	if err != nil {
		rep.Detail = fmt.Sprintf("benchmarks unavailable: %v", err)
		return rep
	}
	gb, ok := be.(bench.GroupBackend)
	if !ok {
		rep.Detail = "this agent's benchmark backend runs no all-reduce across nodes"
		return rep
	}
	if o.Rendezvous != nil {
		if rep.Token, err = gb.GroupToken(ctx); err != nil {
			rep.Detail = fmt.Sprintf("opening the rendezvous: %v", err)
		}
		return rep
	}
	busy := map[string]bool{}
	for _, h := range a.runner.Holds() {
		busy[h.GPU] = true
	}
	var idx, held []int
	a.mu.Lock()
	for _, d := range a.devices {
		idx = append(idx, d.Index)
		if busy[d.UUID] || slices.ContainsFunc(d.MIG, func(m gpu.MIGInstance) bool { return busy[m.UUID] }) {
			held = append(held, d.Index)
		}
	}
	a.mu.Unlock()
	if len(held) > 0 {
		rep.Detail = fmt.Sprintf("gpus %v hold attempts: every GPU of the node takes part", held)
		return rep
	}
	m, err := gb.MeasureGroup(ctx, *o.Group, bench.Options{GPUs: idx, Quick: o.Quick, Level: o.Level}, func(line string) {
		a.log.Debug("bench", "order", o.ID, "step", line)
	})
	if err != nil {
		rep.Detail = clip(fmt.Sprintf("all-reduce across nodes failed: %v", err), maxBenchDetail)
		return rep
	}
	rep.Measurements = []bench.Measurement{m}
	return rep
}

// maxBenchDetail keeps a report's detail under the API's bound.
const maxBenchDetail = 4000

// clip cuts s to at most n bytes on a rune boundary, as valid UTF-8: a
// detail the server refuses would lose the whole heartbeat.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// startBench runs a bench order once per id, in the background; the
// report goes out with the next heartbeats until the server stops asking.
func (a *Agent) startBench(ctx context.Context, o api.BenchOrder) {
	a.mu.Lock()
	if _, ok := a.benches[o.ID]; ok {
		a.mu.Unlock()
		return
	}
	a.benches[o.ID] = nil
	a.mu.Unlock()
	a.log.Info("running microbenchmarks", "order", o.ID, "gpus", len(o.GPUs), "quick", o.Quick)
	go func() {
		rep := a.runBench(ctx, o)
		a.mu.Lock()
		a.benches[o.ID] = &rep
		a.mu.Unlock()
		a.log.Info("microbenchmarks done", "order", o.ID, "measurements", len(rep.Measurements), "detail", rep.Detail)
	}()
}

// finished lists the results of orders that ended (nil while one runs),
// in id order: validations and bench reports alike.
func finished[T any](m map[string]*T) []T {
	var out []T
	for _, id := range slices.Sorted(maps.Keys(m)) {
		if r := m[id]; r != nil {
			out = append(out, *r)
		}
	}
	return out
}

// forget drops the finished results whose orders the server no longer
// sends (asked are the ids it sends now).
func forget[T any](m map[string]*T, asked []string) {
	for id, r := range m {
		if r != nil && !slices.Contains(asked, id) {
			delete(m, id)
		}
	}
}

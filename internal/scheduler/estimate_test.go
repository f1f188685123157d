package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
)

func TestRunEstimates(t *testing.T) {
	h := time.Hour
	var runs []RunSample
	for _, d := range []time.Duration{2 * h, 4 * h, 3 * h, 9 * h} {
		runs = KeepRun(runs, RunSample{Team: "a", Workload: "train", GPUs: 8, Ran: d})
	}
	runs = KeepRun(runs, RunSample{Team: "a", Workload: "train", GPUs: 8, Ran: 0}) // no run: not kept
	runs = KeepRun(runs, RunSample{Team: "b", GPUs: 1, Ran: 10 * time.Minute})
	runs = KeepRun(runs, RunSample{Team: "b", GPUs: 1, Ran: 20 * time.Minute})
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		q    float64
		j    Job
		want gpufleet.RunEstimate
	}{
		{"given", 0, Job{Team: "a", Estimate: 30 * time.Minute, Resources: gpufleet.Resources{GPUs: 8}},
			gpufleet.RunEstimate{Seconds: 1800, From: gpufleet.EstimateGiven}},
		{"workload median", 0, Job{Team: "a", Workload: "train", Resources: gpufleet.Resources{GPUs: 8}},
			gpufleet.RunEstimate{Seconds: 3 * 3600, From: gpufleet.EstimateWorkload, Runs: 4}},
		{"workload p90", 0.9, Job{Team: "a", Workload: "train", Resources: gpufleet.Resources{GPUs: 8}},
			gpufleet.RunEstimate{Seconds: 9 * 3600, From: gpufleet.EstimateWorkload, Runs: 4}},
		{"another size class: the team's", 0, Job{Team: "b", Workload: "x", Resources: gpufleet.Resources{GPUs: 1}},
			gpufleet.RunEstimate{Seconds: 600, From: gpufleet.EstimateTeamSize, Runs: 2}},
		{"another team: the fleet's", 0, Job{Team: "c", Resources: gpufleet.Resources{GPUs: 1}},
			gpufleet.RunEstimate{Seconds: 600, From: gpufleet.EstimateSize, Runs: 2}},
		{"capped by its time limit", 0, Job{Team: "a", Workload: "train", TimeLimit: h, Resources: gpufleet.Resources{GPUs: 8}},
			gpufleet.RunEstimate{Seconds: 3600, From: gpufleet.EstimateWorkload, Runs: 4}},
		{"no history: time limit", 0, Job{Team: "a", TimeLimit: h, Resources: gpufleet.Resources{GPUs: 4}},
			gpufleet.RunEstimate{Seconds: 3600, From: gpufleet.EstimateTimeLimit}},
		{"no history: the class's default", 0, Job{Team: "a", Priority: gpufleet.Production, Resources: gpufleet.Resources{GPUs: 4}},
			gpufleet.RunEstimate{Seconds: 24 * 3600, From: gpufleet.EstimateDefault}},
		{"earlier runs count", 0, Job{Team: "a", Workload: "train", Attained: 8 * h, Resources: gpufleet.Resources{GPUs: 8}},
			gpufleet.RunEstimate{Seconds: 2 * 3600, From: gpufleet.EstimateWorkload, Runs: 4}},
		{"running within its history", 0, Job{Team: "a", Workload: "train", Started: now.Add(-2 * h),
			Placement: []Placement{{Node: "n1"}}, Resources: gpufleet.Resources{GPUs: 8}},
			gpufleet.RunEstimate{Seconds: 3 * 3600, From: gpufleet.EstimateWorkload, Runs: 4}},
		{"running past its history: as long again", 0, Job{Team: "a", Workload: "train", Started: now.Add(-5 * h),
			Placement: []Placement{{Node: "n1"}}, Resources: gpufleet.Resources{GPUs: 8}},
			gpufleet.RunEstimate{Seconds: 10 * 3600, From: gpufleet.EstimateWorkload, Runs: 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{EstimateQuantile: c.q, DefaultEstimate: 4 * h,
				PriorityEstimates: map[gpufleet.Priority]time.Duration{gpufleet.Production: 24 * h}}.withDefaults()
			s := &sched{cfg: cfg, now: now, runs: indexRuns(runs, cfg.EstimateQuantile, cfg.EstimateMinRuns)}
			if got := s.runEstimate(&c.j); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestKeepRunBounds(t *testing.T) {
	var runs []RunSample
	for i := range RunHistory + 10 {
		runs = KeepRun(runs, RunSample{Team: "a", GPUs: 1, Ran: time.Duration(i+1) * time.Second})
	}
	if len(runs) != RunHistory || runs[0].Ran != 11*time.Second {
		t.Fatalf("kept %d, oldest %s", len(runs), runs[0].Ran)
	}
}

func TestEstimateConfigValidates(t *testing.T) {
	for _, c := range []Config{{EstimateQuantile: 1.5}, {EstimateQuantile: -0.1}, {EstimateMinRuns: -1},
		{PriorityEstimates: map[gpufleet.Priority]time.Duration{gpufleet.Batch: -time.Hour}}} {
		base, _ := PolicyConfig("gpufleet")
		base.EstimateQuantile, base.EstimateMinRuns, base.PriorityEstimates = c.EstimateQuantile, c.EstimateMinRuns, c.PriorityEstimates
		if base.Validate() == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
}

// BenchmarkIndexRuns is the estimates' per-cycle cost at a full history
// (RunHistory runs of 2,000 workloads over 50 teams).
func BenchmarkIndexRuns(b *testing.B) {
	var runs []RunSample
	for i := range RunHistory {
		runs = KeepRun(runs, RunSample{Team: fmt.Sprintf("t%d", i%50), Workload: fmt.Sprintf("w%d", i%2000), GPUs: 1 << (i % 4),
			Ran: time.Duration(i%7200+60) * time.Second})
	}
	b.ReportAllocs()
	for b.Loop() {
		indexRuns(runs, DefaultEstimateQuantile, DefaultEstimateMinRuns)
	}
}

// TestRunIndexCache: with a Cache and a RunsVersion the index is built
// once per version and equals a fresh build; a new version rebuilds it,
// and so does a change of the quantile.
func TestRunIndexCache(t *testing.T) {
	runs := []RunSample{{Team: "a", Workload: "w", GPUs: 1, Ran: time.Minute}, {Team: "a", Workload: "w", GPUs: 1, Ran: 3 * time.Minute}}
	in := &Input{Runs: runs, RunsVersion: 1, Cache: &FleetCache{}}
	s := &sched{cfg: Config{}.withDefaults()}
	first := s.runIndexFor(in)
	fresh := indexRuns(runs, s.cfg.EstimateQuantile, s.cfg.EstimateMinRuns)
	if len(first) != len(fresh) || first[runKey{from: gpufleet.EstimateWorkload, team: "a", workload: "w"}] != fresh[runKey{from: gpufleet.EstimateWorkload, team: "a", workload: "w"}] {
		t.Fatalf("cached %v, fresh %v", first, fresh)
	}
	in.Runs = append(slices.Clone(runs), RunSample{Team: "a", Workload: "w", GPUs: 1, Ran: time.Hour})
	if got := s.runIndexFor(in); got[runKey{from: gpufleet.EstimateSize}].Runs != 2 {
		t.Errorf("same version: %v, want the cached index of 2 runs", got)
	}
	in.RunsVersion = 2
	if got := s.runIndexFor(in); got[runKey{from: gpufleet.EstimateSize}].Runs != 3 {
		t.Errorf("new version: %v, want 3 runs", got)
	}
	s.cfg.EstimateQuantile = 1
	if got := s.runIndexFor(in); got[runKey{from: gpufleet.EstimateSize}].Seconds != 3600 {
		t.Errorf("new quantile: %v, want the longest run", got)
	}
}

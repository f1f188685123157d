package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// sameDecisions compares two outputs but for the count of searches run,
// which the cache key changes.
var sameDecisions = cmpopts.IgnoreFields(scheduler.Stats{}, "PreemptionSearches")

// scheduleBothWays runs in through the preemption index and through the
// scan of every node it replaced (with failures cached per team), both
// with no bound on searches and every reason in full.
func scheduleBothWays(in scheduler.Input) (indexed, scanned scheduler.Output) {
	in.Config.MaxPreemptionSearches = 0
	in.Config.ReasonDepth = 0
	indexed = scheduler.Schedule(in)
	restore := scheduler.ScanAllVictimNodes()
	defer restore()
	return indexed, scheduler.Schedule(in)
}

// TestPropertyPreemptionIndex: on random fleets, teams, running work and
// queues, under every policy, the preemption index and its cache of
// failed searches decide exactly what a scan of every node with
// preemptible work decides.
func TestPropertyPreemptionIndex(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		indexed, scanned := scheduleBothWays(in)
		if diff := cmp.Diff(scanned, indexed, sameDecisions); diff != "" {
			t.Fatalf("index and scan differ (-scan +index):\n%s", diff)
		}
	})
}

// genPreemptInput draws a fleet filled with lower-class work, much of it
// preemptible, some of it stopping already, on teams within and beyond
// their quotas, and a queue of higher-class jobs that do not fit: every
// draw searches for victims.
func genPreemptInput(t *rapid.T) scheduler.Input {
	in := scheduler.Input{Now: schedtest.T0.Add(2 * time.Hour), Models: schedtest.Models(), Nodes: genFleet(t)}
	for _, name := range []string{"a", "b", "c"} {
		in.Teams = append(in.Teams, scheduler.Team{Name: name, Weight: 1, BorrowingLimit: rapid.IntRange(-1, 8).Draw(t, "borrow"),
			Quota: map[string]int{rapid.SampledFrom(propModels).Draw(t, "qmodel"): rapid.IntRange(0, 16).Draw(t, "quota")}})
	}
	low := []gpufleet.Priority{gpufleet.Training, gpufleet.Batch}
	var running []scheduler.Job
	for i := range rapid.IntRange(4, 30).Draw(t, "running") {
		j := genJob(t, fmt.Sprintf("r%d", i))
		j.Priority = rapid.SampledFrom(low).Draw(t, "lowprio")
		j.Preemptible = rapid.IntRange(0, 3).Draw(t, "notpreemptible") > 0
		running = append(running, j)
	}
	warm := in
	warm.Now = schedtest.T0.Add(time.Hour)
	warm.Jobs = running
	warm.Config, _ = scheduler.PolicyConfig("gpufleet")
	warm.Config.Preemption = false
	out := scheduler.Schedule(warm)
	starts := map[string]scheduler.Start{}
	for _, st := range out.Starts {
		starts[st.Job] = st
	}
	for _, j := range running {
		st, ok := starts[j.ID]
		if !ok {
			continue
		}
		j.Started, j.Placement = warm.Now.Add(time.Duration(rapid.IntRange(0, 3000).Draw(t, "since"))*time.Second), st.Placement
		if rapid.IntRange(0, 5).Draw(t, "stopping") == 0 {
			j.StopAt, j.StopCode = in.Now.Add(time.Duration(rapid.IntRange(1, 60).Draw(t, "left"))*time.Second), gpufleet.StopPreemptedPriority
		}
		in.Jobs = append(in.Jobs, j)
	}
	high := []gpufleet.Priority{gpufleet.Production, gpufleet.Interactive, gpufleet.Training}
	for i := range rapid.IntRange(1, 15).Draw(t, "pending") {
		j := genJob(t, fmt.Sprintf("q%d", i))
		j.Priority = rapid.SampledFrom(high).Draw(t, "highprio")
		in.Jobs = append(in.Jobs, j)
	}
	// LAS ranks jobs by class and queue (more ranks than classes): the
	// index must hold them too.
	in.Config, _ = scheduler.PolicyConfig(rapid.SampledFrom([]string{"gpufleet", "las"}).Draw(t, "policy"))
	if len(in.Config.LASThresholds) > 0 {
		for i := range in.Jobs {
			in.Jobs[i].Attained = time.Duration(rapid.IntRange(0, 4).Draw(t, "attained")) * 3000 * time.Second
		}
	}
	in.Config.Quotas = rapid.Bool().Draw(t, "quotas")
	in.Config.Backfill = rapid.Bool().Draw(t, "backfill")
	in.Config.Packing = rapid.SampledFrom([]string{scheduler.PackFirstFit, scheduler.PackBestFit, scheduler.PackTopology}).Draw(t, "packing")
	return in
}

// TestPropertyPreemptionIndexBusy is TestPropertyPreemptionIndex on full
// fleets and queues of higher-class jobs (genPreemptInput).
func TestPropertyPreemptionIndexBusy(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genPreemptInput(t)
		indexed, scanned := scheduleBothWays(in)
		if diff := cmp.Diff(scanned, indexed, sameDecisions); diff != "" {
			t.Fatalf("index and scan differ (-scan +index):\n%s", diff)
		}
	})
}

// TestPreemptionIndexLarge compares the index with the scan on generated
// fleets of a few hundred nodes, with and without quotas, over two cycles
// (the second sees the first's victims stopping).
func TestPreemptionIndexLarge(t *testing.T) {
	tests := map[string]struct {
		spec   schedtest.LargeSpec
		quotas bool
	}{
		"quotas":    {schedtest.LargeSpec{Nodes: 300, Pending: 3000, Teams: 6, Seed: 3}, true},
		"no quotas": {schedtest.LargeSpec{Nodes: 300, Pending: 3000, Teams: 6, Seed: 4}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := schedtest.Large(tc.spec)
			cfg, err := scheduler.PolicyConfig("gpufleet")
			if err != nil {
				t.Fatal(err)
			}
			cfg.Quotas = tc.quotas
			in.Config = cfg
			for cycle := range 2 {
				indexed, scanned := scheduleBothWays(in)
				if diff := cmp.Diff(scanned, indexed, sameDecisions); diff != "" {
					t.Fatalf("cycle %d: index and scan differ (-scan +index):\n%s", cycle+1, diff)
				}
				t.Logf("cycle %d: %d preempted, %d searches (scan, failures per team: %d)", cycle+1,
					indexed.Stats.Preempted, indexed.Stats.PreemptionSearches, scanned.Stats.PreemptionSearches)
				if indexed.Stats.Preempted == 0 && cycle == 0 {
					t.Errorf("cycle 1 preempted nothing: the comparison proves little")
				}
				in = scheduler.Apply(in, indexed, in.Now.Add(10e9))
			}
		})
	}
}

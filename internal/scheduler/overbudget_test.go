package scheduler_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// TestOverBudgetStops is the stop policy's decision: which job a rack
// over its budget loses, and when none.
func TestOverBudgetStops(t *testing.T) {
	on := func(gpus ...string) scheduler.Placement { return scheduler.Placement{Node: "n1", GPUs: gpus} }
	old := schedtest.MakeJob("old", "t", 2).Preemptible(time.Minute).Running(0, on("n1-g0", "n1-g1")).Obj()
	newer := schedtest.MakeJob("newer", "t", 2).Preemptible(time.Minute).Running(10*time.Minute, on("n1-g2", "n1-g3")).Obj()
	prod := schedtest.MakeJob("prod", "t", 2).Priority(gpufleet.Production).Running(20*time.Minute, on("n1-g4", "n1-g5")).Obj()
	fixed := schedtest.MakeJob("fixed", "t", 2).Running(30*time.Minute, on("n1-g6", "n1-g7")).Obj()
	stopping := newer
	stopping.StopAt, stopping.StopCode = schedtest.T0.Add(time.Hour), gpufleet.StopRackPower

	tests := map[string]struct {
		policy     scheduler.OverBudgetPolicy
		over       time.Duration
		draw       gpufleet.Watts
		jobs       []scheduler.Job
		wantStops  []string
		wantAlerts []string
	}{
		"over for less than the allowed time: no stop": {
			policy: scheduler.OverBudgetStop, over: time.Minute, draw: 11000, jobs: []scheduler.Job{old, newer},
		},
		"over longer: the newest preemptible job stops": {
			policy: scheduler.OverBudgetStop, over: 3 * time.Minute, draw: 11000, jobs: []scheduler.Job{old, newer, prod, fixed},
			wantStops: []string{"newer"},
		},
		"over exactly the allowed time: it stops": {
			policy: scheduler.OverBudgetStop, over: 2 * time.Minute, draw: 11000, jobs: []scheduler.Job{old},
			wantStops: []string{"old"},
		},
		"at the budget is not over": {
			policy: scheduler.OverBudgetStop, over: 3 * time.Minute, draw: 10000, jobs: []scheduler.Job{old},
		},
		"only production and non-preemptible jobs: none stops, an alert": {
			policy: scheduler.OverBudgetStop, over: 3 * time.Minute, draw: 11000, jobs: []scheduler.Job{prod, fixed},
			wantAlerts: []string{"r1"},
		},
		"a stop under way: it waits for it": {
			policy: scheduler.OverBudgetStop, over: 3 * time.Minute, draw: 11000, jobs: []scheduler.Job{old, stopping},
		},
		"the alert policy stops nothing": {
			policy: scheduler.OverBudgetAlert, over: time.Hour, draw: 11000, jobs: []scheduler.Job{old, newer},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := scheduler.PolicyConfig("gpufleet")
			if err != nil {
				t.Fatal(err)
			}
			cfg.OverBudget, cfg.OverBudgetAfter = tc.policy, 2*time.Minute
			in := scheduler.Input{Now: schedtest.T0.Add(40 * time.Minute), Config: cfg, Models: schedtest.Models(),
				Nodes: []scheduler.Node{schedtest.MakeNode("n1", "h100-sxm-80gb", 8).Rack("r1").Obj()},
				Racks: []scheduler.Rack{{Name: "r1", BudgetWatts: 10000, DrawWatts: tc.draw, OverBudgetFor: tc.over}},
				Jobs:  tc.jobs}
			out := scheduler.Schedule(in)
			var stops, alerts []string
			for _, s := range out.Stops {
				if s.Code != scheduler.StopRackPower {
					t.Errorf("stop %s with code %s", s.Job, s.Code)
				}
				if s.Grace != time.Minute {
					t.Errorf("stop %s with grace %s, want the job's 1m", s.Job, s.Grace)
				}
				stops = append(stops, s.Job)
			}
			for _, a := range out.PowerAlerts {
				alerts = append(alerts, a.Rack)
			}
			if diff := cmp.Diff(tc.wantStops, stops); diff != "" {
				t.Errorf("stops (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAlerts, alerts); diff != "" {
				t.Errorf("alerts (-want +got):\n%s", diff)
			}
			if tc.policy == scheduler.OverBudgetStop && tc.over < 2*time.Minute && tc.draw > 10000 {
				if want := in.Now.Add(2*time.Minute - tc.over); !out.Recheck.Equal(want) && (out.Recheck.IsZero() || out.Recheck.After(want)) {
					t.Errorf("recheck %s, want at most %s", out.Recheck, want)
				}
			}
		})
	}
}

func TestParseOverBudgetPolicy(t *testing.T) {
	for in, want := range map[string]scheduler.OverBudgetPolicy{"alert": scheduler.OverBudgetAlert, " Stop ": scheduler.OverBudgetStop} {
		if got, err := scheduler.ParseOverBudgetPolicy(in); err != nil || got != want {
			t.Errorf("ParseOverBudgetPolicy(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := scheduler.ParseOverBudgetPolicy("kill"); err == nil {
		t.Error("ParseOverBudgetPolicy(kill) = nil error")
	}
}

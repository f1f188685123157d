package server

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// TestHeartbeatCarriesPowerCaps: with --power-caps on, a heartbeat's
// answer caps each GPU a measured job holds at its charge (its peak plus
// the margin), fixed when first given; never an unmeasured or a free GPU,
// and nothing with caps off. On a node that can cap, a capped GPU is
// charged its cap in its rack's projection, however its peak moves.
func TestHeartbeatCarriesPowerCaps(t *testing.T) {
	for name, tc := range map[string]struct {
		caps     bool
		label    string
		wantCaps bool
	}{
		"caps on, a node that can cap":    {caps: true, label: "true", wantCaps: true},
		"caps on, a node that cannot cap": {caps: true, label: "false", wantCaps: true},
		"caps off":                        {caps: false, label: "true"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixtureWith(t, func(c *Config) { c.PowerCaps = tc.caps })
			ctx := t.Context()
			a := f.team("team-a", nil)
			node, err := f.srv.Authenticate(ctx, f.registerLabelled("n1", "h100-sxm-80gb", 8, map[string]string{gpufleet.PowerCapsLabel: tc.label}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.srv.PutRack(ctx, f.admin, api.PutRackRequest{Rack: gpufleet.Rack{Name: "r1", PowerBudgetWatts: 20000, Nodes: []string{"n1"}}}); err != nil {
				t.Fatal(err)
			}
			job := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 2}})
			f.cycle()
			hb, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
			if err != nil || len(hb.Start) != 1 {
				t.Fatalf("starts %+v, %v", hb.Start, err)
			}
			run := api.AttemptReport{AttemptID: hb.Start[0].AttemptID, JobID: job.ID, State: gpufleet.AttemptRunning}
			held := hb.Start[0].GPUs
			watts := 300.0
			beat := func() api.HeartbeatResponse {
				var samples []api.GPUSample
				for i := range 8 {
					w := 70.0
					u := "GPU-n1-" + string(rune('a'+i))
					if u == held[0] || u == held[1] {
						w = watts
					}
					samples = append(samples, api.GPUSample{UUID: u, PowerWatts: &w})
				}
				hb, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: []api.AttemptReport{run}, Samples: samples})
				if err != nil {
					t.Fatal(err)
				}
				return hb
			}
			if hb := beat(); len(hb.PowerCaps) != 0 {
				t.Errorf("unmeasured job: caps %+v, want none", hb.PowerCaps)
			}
			for range 3 { // past the settle time: measured at 300 W
				f.clk.Advance(time.Minute)
				hb = beat()
			}
			var want []api.PowerCap
			if tc.wantCaps {
				want = []api.PowerCap{{GPU: held[0], Watts: 330}, {GPU: held[1], Watts: 330}}
			}
			if diff := cmp.Diff(want, hb.PowerCaps); diff != "" {
				t.Errorf("caps of a measured job (-want +got):\n%s", diff)
			}
			// The draw rises past the peak the cap was given at: the cap stays
			// where it was, and a node that enforces it is charged it.
			watts = 325
			f.clk.Advance(time.Minute)
			hb = beat()
			if diff := cmp.Diff(want, hb.PowerCaps); diff != "" {
				t.Errorf("caps after the draw rose (-want +got):\n%s", diff)
			}
			f.clk.Advance(time.Second)
			f.cycle()
			racks, err := f.srv.Racks(ctx, a)
			if err != nil || len(racks) != 1 || racks[0].DrawWatts == nil {
				t.Fatalf("racks %+v, %v", racks, err)
			}
			// 4.6 kW host + 6 x 70 W idle + 2 held GPUs.
			perGPU := 357.5 // uncapped: the new peak 325 W + 10 %
			if tc.caps && tc.label == "true" {
				perGPU = 330 // capped: the cap
			}
			if got, want := float64(*racks[0].DrawWatts), 4600+6*70+2*perGPU; got != want {
				t.Errorf("projected draw %v W, want %v", got, want)
			}
		})
	}
}

// TestOverBudgetStopInTheLeaderCycle: with --over-budget stop, a rack
// whose projected draw stays over its budget longer than
// --over-budget-after (kept in the leader's memory across cycles) loses
// its most recently started preemptible job: its agent is told to stop it
// with reason code rack_power, naming the rack, the draw and the budget.
// Before that time nothing stops.
func TestOverBudgetStopInTheLeaderCycle(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) {
		c.OverBudget, c.OverBudgetAfter = scheduler.OverBudgetStop, 20*time.Second
	})
	ctx := t.Context()
	a := f.team("team-a", nil)
	node := f.node("n1", "h100-sxm-80gb", 8)
	// 4.6 kW host + 8 x 70 W idle = 5.16 kW; each 1-GPU job adds 630 W
	// until measured, then 330 W (300 W + 10 %).
	if _, err := f.srv.PutRack(ctx, f.admin, api.PutRackRequest{Rack: gpufleet.Rack{Name: "r1", PowerBudgetWatts: 6100, Nodes: []string{"n1"}}}); err != nil {
		t.Fatal(err)
	}
	draw := map[string]float64{}
	var runs []api.AttemptReport
	beat := func() api.HeartbeatResponse {
		var samples []api.GPUSample
		for i := range 8 {
			u := "GPU-n1-" + string(rune('a'+i))
			w, ok := draw[u]
			if !ok {
				w = 70
			}
			samples = append(samples, api.GPUSample{UUID: u, PowerWatts: &w})
		}
		hb, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: runs, Samples: samples})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range hb.Start {
			runs = append(runs, api.AttemptReport{AttemptID: s.AttemptID, JobID: s.JobID, State: gpufleet.AttemptRunning})
			for _, g := range s.GPUs {
				draw[g] = 300
			}
		}
		return hb
	}
	step := func(d time.Duration) api.HeartbeatResponse {
		var hb api.HeartbeatResponse
		for range int(d / (2 * time.Second)) {
			f.clk.Advance(2 * time.Second)
			hb = beat()
			f.cycle()
			if len(hb.Stop) > 0 {
				return hb
			}
		}
		return beat()
	}
	first := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Preemptible: true})
	f.cycle()
	beat()
	step(3 * time.Minute) // measured
	second := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Preemptible: true})
	f.cycle()
	beat()
	step(3 * time.Minute)
	if len(runs) != 2 {
		t.Fatalf("running %+v: want both jobs", runs)
	}
	// Both draw their TDP now: 5.02 kW + 2 x 700 W = 6.42 kW, over 6.1 kW.
	for g := range draw {
		draw[g] = 700
	}
	if hb := step(16 * time.Second); len(hb.Stop) != 0 {
		t.Fatalf("stops %+v after 16 s over: want none before 20 s", hb.Stop)
	}
	hb := step(20 * time.Second)
	rec := httptest.NewRecorder()
	f.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `gpufleet_rack_over_budget_seconds{rack="r1"} 2`) {
		t.Errorf("/metrics lacks r1's 20-odd seconds over budget:\n%s", grepLines(rec.Body.String(), "over_budget"))
	}
	if len(hb.Stop) != 1 || hb.Stop[0].AttemptID != runs[1].AttemptID || hb.Stop[0].ReasonCode != string(gpufleet.StopRackPower) ||
		!strings.Contains(hb.Stop[0].Reason, "rack r1") || !strings.Contains(hb.Stop[0].Reason, "6.1kW budget") {
		t.Fatalf("stops %+v: want the second job (%s) stopped with rack_power naming r1 and its budget", hb.Stop, second.ID)
	}
	if j := f.job(first.ID); j.State != gpufleet.JobRunning {
		t.Errorf("first job %s: want it running", j.State)
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}

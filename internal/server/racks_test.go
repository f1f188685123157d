package server

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// TestRackAtItsBudgetWaitsForPower: an H100 node in a rack of 8 kW (its
// rating is 10.2 kW: 8 x 700 W and 4.6 kW of host): a 4-GPU job fits
// (5.2 kW idle and host + 4 x 630 W), a second one would take the rack
// to about 10.2 kW, so it waits with reason rack_power naming the rack;
// once the first ends, it starts.
func TestRackAtItsBudgetWaitsForPower(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	node := f.node("n1", "h100-sxm-80gb", 8)
	if _, err := f.srv.PutRack(ctx, f.admin, gpufleet.Rack{Name: "r1", PowerBudgetWatts: 8000, Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.PutRack(ctx, a, gpufleet.Rack{Name: "r2", PowerBudgetWatts: 1}); err == nil {
		t.Error("a member created a rack")
	}
	beat := func(reps ...api.AttemptReport) api.HeartbeatResponse {
		hb, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: reps})
		if err != nil {
			t.Fatal(err)
		}
		return hb
	}
	first := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4}})
	f.cycle()
	hb := beat()
	if len(hb.Start) != 1 || hb.Start[0].JobID != first.ID {
		t.Fatalf("starts %+v, want the first job", hb.Start)
	}
	run := api.AttemptReport{AttemptID: hb.Start[0].AttemptID, JobID: first.ID, State: gpufleet.AttemptRunning}
	beat(run)
	second := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4}})
	f.clk.Advance(time.Second)
	f.cycle()
	q := f.job(second.ID).Queue
	if q == nil || q.ReasonCode != scheduler.ReasonRackPower || !strings.Contains(q.Reason, "rack r1") || !strings.Contains(q.Reason, "8kW budget") {
		t.Fatalf("second job's queue entry %+v, want rack_power naming rack r1 and its 8kW budget", q)
	}
	racks, err := f.srv.Racks(ctx, a)
	if err != nil || len(racks) != 1 || racks[0].DrawWatts == nil || *racks[0].DrawWatts < 7000 || racks[0].RatedWatts != 10200 {
		t.Fatalf("racks %+v, %v: want r1 drawing about 7.7 kW of 10.2 kW rated", racks, err)
	}
	rec := httptest.NewRecorder()
	f.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`gpufleet_rack_power_watts{kind="budget",rack="r1"} 8000`, `gpufleet_rack_power_watts{kind="rated",rack="r1"} 10200`,
		`gpufleet_rack_power_watts{kind="projected",rack="r1"} 7`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	beat(api.AttemptReport{AttemptID: run.AttemptID, JobID: first.ID, State: gpufleet.AttemptSucceeded})
	f.clk.Advance(time.Second)
	f.cycle()
	if hb := beat(); len(hb.Start) != 1 || hb.Start[0].JobID != second.ID {
		t.Fatalf("starts after the first job ended: %+v, want the second job", hb.Start)
	}
}

// TestMeasuredJobIsChargedItsPeak: a running job's GPUs count their TDP
// until readings taken a settle time after it started arrive, then their
// peak plus the margin, which makes room for a second job.
func TestMeasuredJobIsChargedItsPeak(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	node := f.node("n1", "h100-sxm-80gb", 8)
	// 9 kW: 4.6 kW host + 8 x 70 W idle + 4 x 630 W for the first job
	// (7.68 kW); a second 4-GPU job needs 2.52 kW more.
	if _, err := f.srv.PutRack(ctx, f.admin, gpufleet.Rack{Name: "r1", PowerBudgetWatts: 9000, Nodes: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	first := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4}})
	f.cycle()
	hb, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if err != nil || len(hb.Start) != 1 {
		t.Fatalf("starts %+v, %v: want the first job", hb.Start, err)
	}
	run := api.AttemptReport{AttemptID: hb.Start[0].AttemptID, JobID: first.ID, State: gpufleet.AttemptRunning}
	var samples []api.GPUSample
	for _, u := range hb.Start[0].GPUs {
		w := 300.0
		samples = append(samples, api.GPUSample{UUID: u, PowerWatts: &w})
	}
	beat := func() {
		if _, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: []api.AttemptReport{run}, Samples: samples}); err != nil {
			t.Fatal(err)
		}
	}
	beat()
	second := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4}})
	f.clk.Advance(time.Second)
	f.cycle()
	if q := f.job(second.ID).Queue; q == nil || q.ReasonCode != scheduler.ReasonRackPower {
		t.Fatalf("second job's queue entry %+v: want rack_power while the first is unmeasured (charged 700 W a GPU)", q)
	}
	// Past the settle time the readings count: 4 x 330 W (300 W + 10 %).
	for range 3 {
		f.clk.Advance(time.Minute)
		beat()
	}
	f.cycle()
	if q := f.job(second.ID).Queue; q != nil {
		t.Fatalf("second job still queued (%s): want it started once the first was measured", q.Reason)
	}
}

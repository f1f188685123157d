package server

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// TestUsageIdleNeverAboveGPUHours: idle-allocated time comes from the
// rollups and GPU-hours from the attempts' reports; when the rollups saw
// more idle time than the attempt reported holding (a short attempt, its
// GPUs held from placement, its last report behind), the report's idle
// GPU-hours stop at its GPU-hours, per model and in the team's total.
func TestUsageIdleNeverAboveGPUHours(t *testing.T) {
	f := newFixture(t)
	f.srv.cfg.Heartbeat, f.srv.cfg.HeartbeatGrace, f.srv.cfg.FenceAfter = 20*time.Second, time.Minute, 2*time.Minute
	ctx := t.Context()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 1)
	j := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Priority: "training", Estimate: gpufleet.Duration(time.Hour)})
	f.cycle()
	hb, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if err != nil || len(hb.Start) != 1 {
		t.Fatalf("start: %+v %v", hb, err)
	}
	from := f.clk.Now().Truncate(time.Minute)
	// Three idle intervals (60 s idle in the rollups), while the attempt
	// reports 30 GPU-seconds held.
	run := []api.AttemptReport{{AttemptID: hb.Start[0].AttemptID, JobID: j.ID, State: gpufleet.AttemptRunning}}
	for i := range 3 {
		run[0].GPUSeconds = float64(10 * (i + 1))
		if _, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run,
			Samples: []api.GPUSample{{UUID: hb.Start[0].GPUs[0], Utilization: ptr(0.0)}}}); err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(20 * time.Second)
	}
	rep, err := f.srv.Usage(ctx, a, api.UsageQuery{From: from, To: f.clk.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Teams) != 1 || len(rep.Teams[0].Models) != 1 {
		t.Fatalf("usage: %+v", rep)
	}
	u, m := rep.Teams[0], rep.Teams[0].Models[0]
	if m.GPUHours != 30.0/3600 || m.IdleAllocatedGPUHour != m.GPUHours || u.IdleAllocatedGPUHour > u.GPUHours {
		t.Errorf("GPU-hours %g, idle %g (team %g of %g): want idle at most the GPU-hours, %g", m.GPUHours, m.IdleAllocatedGPUHour,
			u.IdleAllocatedGPUHour, u.GPUHours, 30.0/3600)
	}
}

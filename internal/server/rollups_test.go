package server

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

func ptr[T any](v T) *T { return &v }

// TestRollupsAggregatePerGPUMinute feeds heartbeats with samples and checks
// what the rollup and usage reports say: means per minute, energy from the
// counter's deltas, who held the GPU, idle allocated time priced from the
// catalog, members' view, and retention.
func TestRollupsAggregatePerGPUMinute(t *testing.T) {
	f := newFixture(t)
	// Heartbeats 20 s apart: keep the node alive between them.
	f.srv.cfg.Heartbeat, f.srv.cfg.HeartbeatGrace, f.srv.cfg.FenceAfter = 20*time.Second, time.Minute, 2*time.Minute
	ctx := t.Context()
	a := f.team("team-a", nil)
	b := f.team("team-b", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 2)
	j := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Priority: "training", Estimate: gpufleet.Duration(time.Hour)})
	f.cycle()
	hb, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if err != nil || len(hb.Start) != 1 {
		t.Fatalf("start: %+v %v", hb, err)
	}
	held := hb.Start[0].GPUs[0]
	free := "GPU-n1-a"
	if held == free {
		free = "GPU-n1-b"
	}
	run := []api.AttemptReport{{AttemptID: hb.Start[0].AttemptID, JobID: j.ID, State: gpufleet.AttemptRunning}}
	start := f.clk.Now().Truncate(time.Minute).Add(time.Minute)
	f.clk.Advance(start.Sub(f.clk.Now()))
	// Minute 1: the held GPU is busy (util 0.8 then 0.6, no SM activity
	// reading), draws 500 W; minute 2: it idles at 1%.
	beat := func(util float64, energy float64, xids ...int) {
		t.Helper()
		run[0].GPUSeconds += 20 // the agent's held time: one GPU, one interval
		_, err := f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run, Samples: []api.GPUSample{
			{UUID: held, Utilization: ptr(util), PowerWatts: ptr(500.0), EnergyJoulesTotal: ptr(energy),
				MemoryUsedBytes: ptr(int64(util * 1e9)), TemperatureC: ptr(40 + 40*util), XIDs: xids},
			{UUID: free, Utilization: ptr(0.0), SMActivity: ptr(0.0), PowerWatts: ptr(70.0)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(20 * time.Second)
	}
	beat(0.8, 1000)
	beat(0.6, 11000, 13)
	beat(0.8, 21000)
	beat(0.01, 31000)
	beat(0.01, 41000)
	f.cycle() // flushes the closed minute

	got, err := f.srv.Rollups(ctx, f.admin, api.RollupQuery{Node: "n1", GPU: held, From: start, To: start.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("rollups: %+v", got)
	}
	want := api.GPURollup{Node: "n1", GPU: held, Model: "h100-sxm-80gb", Minute: start, Team: "team-a", Samples: 3,
		Utilization: ptr(2.2 / 3), EffectiveUtilization: ptr(2.2 / 3), PowerWatts: ptr(500.0), EnergyJoules: 20000,
		MemoryUsedBytesMax: ptr(int64(8e8)), TemperatureCMax: ptr(72.0)}
	if diff := cmp.Diff(want, got[0], cmp.Comparer(func(x, y float64) bool { return x-y < 1e-9 && y-x < 1e-9 })); diff != "" {
		t.Errorf("first minute (-want +got):\n%s", diff)
	}
	if got[1].Samples != 2 || got[1].EnergyJoules != 20000 || *got[1].EffectiveUtilization != 0.01 {
		t.Errorf("second minute: %+v", got[1])
	}

	// The job's rollups are its GPU's; a member of another team gets
	// not found, and sees no holder on the node's rollups.
	jr, err := f.srv.Rollups(ctx, a, api.RollupQuery{JobID: j.ID, From: start})
	if err != nil || len(jr) != 2 || jr[0].GPU != held || jr[0].Team != "team-a" {
		t.Errorf("job rollups: %+v %v", jr, err)
	}
	if _, err := f.srv.Rollups(ctx, b, api.RollupQuery{JobID: j.ID}); err == nil {
		t.Error("team-b read team-a's job rollups")
	}
	br, err := f.srv.Rollups(ctx, b, api.RollupQuery{Node: "n1", From: start})
	if err != nil || len(br) != 4 {
		t.Fatalf("team-b node rollups: %+v %v", br, err)
	}
	for _, r := range br {
		if r.Team != "" {
			t.Errorf("team-b sees the holder of %s: %q", r.GPU, r.Team)
		}
	}
	if _, err := f.srv.Rollups(ctx, f.admin, api.RollupQuery{Node: "n1", JobID: j.ID}); err == nil {
		t.Error("node and job together were accepted")
	}

	// Live view: the allocated GPU shows its holder to its team only, and
	// the XID it raised.
	for _, tc := range []struct {
		p    api.Principal
		team string
	}{{a, "team-a"}, {b, ""}} {
		n, err := f.srv.Node(ctx, tc.p, "n1")
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range n.GPUs {
			if g.UUID != held {
				if g.Live == nil || g.Live.Allocated || *g.Live.EffectiveUtilization != 0 {
					t.Errorf("free GPU live: %+v", g.Live)
				}
				continue
			}
			if g.Live == nil || !g.Live.Allocated || g.Live.Team != tc.team || !cmp.Equal(g.Live.RecentXIDs, []int{13}) {
				t.Errorf("held GPU live as %s: %+v", tc.p.Team, g.Live)
			}
		}
	}

	// Usage: the two idle heartbeat intervals of the second minute (40 s)
	// are idle allocated time, priced at the catalog's H100 price.
	rep, err := f.srv.Usage(ctx, a, api.UsageQuery{From: start, To: start.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Teams) != 1 || len(rep.Teams[0].Models) != 1 {
		t.Fatalf("usage: %+v", rep)
	}
	u := rep.Teams[0]
	h100, err := f.srv.cat.Lookup("h100-sxm-80gb")
	if err != nil {
		t.Fatal(err)
	}
	price := *h100.PricePerHourUSD
	if math.Abs(u.IdleAllocatedGPUHour-40.0/3600) > 1e-9 || math.Abs(u.IdleAllocatedUSD-price*40/3600) > 1e-9 || u.Models[0].Model != "h100-sxm-80gb" {
		t.Errorf("idle allocated: %+v", u)
	}

	// Retention: rollups older than it go at the next prune.
	f.clk.Advance(f.srv.cfg.RollupRetention + time.Hour)
	f.cycle()
	left, err := f.srv.Rollups(ctx, f.admin, api.RollupQuery{Node: "n1", From: start, To: f.clk.Now()})
	if err != nil || len(left) != 0 {
		t.Errorf("after retention: %d rollups, %v", len(left), err)
	}
}

package scheduler_test

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// TestChargedAtTheLimitUntilMeasured: a running job's GPUs count their
// limit in their rack's draw until they have been measured under it, then
// their measured peak plus the margin, so a second job that fits only
// beside the measured draw waits for the measurement, not for the first
// job's end. The scheduler's power input is built as the server and the
// simulator build it (power.SchedulerRacks).
func TestChargedAtTheLimitUntilMeasured(t *testing.T) {
	models := schedtest.Models()
	h := models["h100-sxm-80gb"]
	w := func(v float64) *float64 { return &v }
	cfg, err := scheduler.PolicyConfig("gpufleet")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		margin float64
		peak   *float64 // the first job's GPUs' measured peak; nil: not measured yet
		starts bool
	}{
		{"not measured: charged 700 W a GPU", power.DefaultPeakMargin, nil, false},
		{"measured at 300 W: charged 330 W", power.DefaultPeakMargin, w(300), true},
		{"measured at 500 W: charged 550 W", power.DefaultPeakMargin, w(500), false},
		{"measured, the operator charges the limit", -1, w(300), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := schedtest.MakeNode("n1", h.ID, 8).Rack("r1").Obj()
			var gpus []string
			nr := power.NodeReading{HostWatts: float64(power.HostOverhead(h, 8))}
			for i, g := range node.GPUs {
				r := power.GPUReading{Model: h}
				if i < 4 {
					gpus = append(gpus, g.ID)
					r.Held, r.Class, r.PeakWatts = true, gpufleet.Training, tc.peak
					r.Watts = tc.peak
				}
				nr.GPUs = append(nr.GPUs, r)
			}
			// 9 kW: the host's 4.6 kW, 8 x 70 W idle and the first job's 4
			// GPUs charged; the second needs 4 x 630 W more.
			racks, draw, _ := power.SchedulerRacks([]power.RackInput{{Name: "r1", BudgetWatts: 9000, Nodes: []power.NodeReading{nr}}},
				models, power.Charging{PeakMargin: tc.margin})
			in := scheduler.Input{
				Now:    schedtest.T0.Add(time.Minute),
				Config: cfg,
				Models: models,
				Nodes:  []scheduler.Node{node},
				Teams:  []scheduler.Team{{Name: "t", Weight: 1, BorrowingLimit: -1}},
				Jobs: []scheduler.Job{
					schedtest.MakeJob("first", "t", 4).Estimate(time.Hour).Running(0, scheduler.Placement{Node: "n1", GPUs: gpus, Fraction: 1}).Obj(),
					schedtest.MakeJob("second", "t", 4).Estimate(time.Hour).Submitted(time.Second).Obj(),
				},
				Racks:   racks,
				GPUDraw: draw,
			}
			out := scheduler.Schedule(in)
			started := len(out.Starts) == 1 && out.Starts[0].Job == "second"
			if started != tc.starts {
				t.Fatalf("second job started %v, want %v (rack drawing %.0f W of 9000; pending %+v)", started, tc.starts, racks[0].DrawWatts, out.Pending)
			}
			if !started && (len(out.Pending) != 1 || out.Pending[0].ReasonCode != scheduler.ReasonRackPower) {
				t.Errorf("pending %+v, want the second job waiting with rack_power", out.Pending)
			}
		})
	}
}

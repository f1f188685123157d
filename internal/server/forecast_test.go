package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// TestForecastFromTheStore: a member's forecast reads its own team's
// daily demand from the store (each job's estimate while it waits), never
// another team's, and needs three weeks of it.
func TestForecastFromTheStore(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a, b := f.team("team-a", nil), f.team("team-b", nil)
	f.node("n1", "h100-sxm-80gb", 8)
	f.clk.Advance(time.Duration(24-f.clk.Now().Hour()) * time.Hour) // midnight
	submitDays := func(days int) {
		for d := range days {
			f.clk.Advance(time.Hour)
			// team-a: 2 GPUs for 3 h on weekdays, 1 h at weekends.
			est := 3 * time.Hour
			if wd := f.clk.Now().Weekday(); wd == time.Saturday || wd == time.Sunday {
				est = time.Hour
			}
			f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 2}, Estimate: gpufleet.Duration(est), Preemptible: true})
			f.submit(b, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8}, Estimate: gpufleet.Duration(10 * time.Hour), Preemptible: true})
			f.clk.Advance(23 * time.Hour)
			_ = d
		}
	}
	submitDays(10)
	if _, err := f.srv.Forecast(ctx, a, api.ForecastQuery{HorizonDays: 7}); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "at least 21") {
		t.Fatalf("ten days of history: %v", err)
	}
	submitDays(25)
	fc, err := f.srv.Forecast(ctx, a, api.ForecastQuery{HorizonDays: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(fc.History.Values) != 35 || len(fc.Forecast.Mean) != 7 || fc.CapacityGPUHoursPerDay != 8*24 {
		t.Fatalf("history %d days, forecast %d, capacity %g", len(fc.History.Values), len(fc.Forecast.Mean), fc.CapacityGPUHoursPerDay)
	}
	for i, v := range fc.History.Values {
		if v != 6 && v != 2 {
			t.Fatalf("day %d: %g GPU-hours, want team-a's 6 or 2 (never team-b's)", i, v)
		}
	}
	for j, m := range fc.Forecast.Mean {
		wd := fc.Forecast.Start.AddDate(0, 0, j).Weekday()
		want := 6.0
		if wd == time.Saturday || wd == time.Sunday {
			want = 2
		}
		if m < want-1 || m > want+1 {
			t.Errorf("%s: %.1f, want about %g", wd, m, want)
		}
	}
	if _, err := f.srv.Forecast(ctx, a, api.ForecastQuery{Team: "team-b", HorizonDays: 7}); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("team-a asks for team-b's demand: %v", err)
	}
	all, err := f.srv.Forecast(ctx, f.admin, api.ForecastQuery{HorizonDays: 7})
	if err != nil || all.History.Values[3] != 6+80 && all.History.Values[3] != 2+80 {
		t.Errorf("the admin's whole fleet: %v %v", all.History.Values, err)
	}
	if _, err := f.srv.Forecast(ctx, a, api.ForecastQuery{GPUModel: "no-such-gpu", HorizonDays: 7}); err == nil {
		t.Error("an unknown gpu model is accepted")
	}
}

// TestForecastPerModel: without a model, the forecast gives each GPU model
// of the fleet its own series against its own capacity (the summed series
// stays, for reference): H100 demand near its capacity must not hide
// behind idle L4s.
func TestForecastPerModel(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	f.node("n1", "h100-sxm-80gb", 8)
	f.node("n2", "l4", 4)
	f.clk.Advance(time.Duration(24-f.clk.Now().Hour()) * time.Hour) // midnight
	for range 28 {
		f.clk.Advance(time.Hour)
		f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8, GPUModels: []string{"h100-sxm-80gb"}}, Estimate: gpufleet.Duration(20 * time.Hour), Preemptible: true})
		f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"l4"}}, Estimate: gpufleet.Duration(time.Hour), Preemptible: true})
		f.clk.Advance(23 * time.Hour)
	}
	fc, err := f.srv.Forecast(ctx, f.admin, api.ForecastQuery{HorizonDays: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(fc.Models) != 2 || fc.Models[0].GPUModel != "h100-sxm-80gb" || fc.Models[1].GPUModel != "l4" {
		t.Fatalf("models %+v", fc.Models)
	}
	h100, l4 := fc.Models[0], fc.Models[1]
	if h100.CapacityGPUHoursPerDay != 192 || l4.CapacityGPUHoursPerDay != 96 || fc.CapacityGPUHoursPerDay != 288 {
		t.Errorf("capacities %g, %g, all %g; want 192, 96, 288", h100.CapacityGPUHoursPerDay, l4.CapacityGPUHoursPerDay, fc.CapacityGPUHoursPerDay)
	}
	for _, c := range []struct {
		m    api.ModelForecast
		want float64
	}{{h100, 160}, {l4, 1}} {
		if c.m.Error != "" || len(c.m.Forecast.Mean) != 7 || c.m.Forecast.Mean[0] < c.want*0.8 || c.m.Forecast.Mean[0] > c.want*1.2 {
			t.Errorf("%s: %v, first day %v; want about %g GPU-hours", c.m.GPUModel, c.m.Error, c.m.Forecast.Mean, c.want)
		}
	}
	one, err := f.srv.Forecast(ctx, f.admin, api.ForecastQuery{GPUModel: "l4", HorizonDays: 7})
	if err != nil || len(one.Models) != 0 || one.CapacityGPUHoursPerDay != 96 {
		t.Errorf("one model: %+v, %v", one.Models, err)
	}
}

package simgpu

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// TestPowerLimitClipsTheDraw: a power limit below what the load draws
// clips the draw to it, sets sw_power_cap while it does, shows in the
// sample's PowerLimitWatts, slows the clocks and counts power violation
// time; back at the default the draw is the load's again.
func TestPowerLimitClipsTheDraw(t *testing.T) {
	clk := newClock()
	b := newSim(t, clk, Spec{Model: "h100-sxm-80gb", Count: 2})
	if err := b.SetLoad(uuids(t, b)[0], LoadCompute, 1); err != nil {
		t.Fatal(err)
	}
	clk.step(10 * time.Second)
	free := sampleOne(t, b, 0)
	if *free.ClockEventReasons&gpu.ClockEventSWPowerCap != 0 || *free.PowerLimitWatts != 700 {
		t.Fatalf("uncapped: reasons %#x, limit %v: want no sw_power_cap at 700 W", *free.ClockEventReasons, *free.PowerLimitWatts)
	}
	if err := b.SetPowerLimit(t.Context(), 0, 400); err != nil {
		t.Fatal(err)
	}
	clk.step(10 * time.Second)
	capped := sampleOne(t, b, 0)
	if *capped.PowerWatts > 400 || *capped.PowerWatts < 390 {
		t.Errorf("capped at 400 W: draws %v W", *capped.PowerWatts)
	}
	if *capped.ClockEventReasons&gpu.ClockEventSWPowerCap == 0 {
		t.Errorf("capped: reasons %#x lack sw_power_cap", *capped.ClockEventReasons)
	}
	if *capped.PowerLimitWatts != 400 || *capped.SMClockMHz >= *free.SMClockMHz {
		t.Errorf("capped: limit %v W, SM clock %v MHz (uncapped %v): want 400 W and slower clocks", *capped.PowerLimitWatts, *capped.SMClockMHz, *free.SMClockMHz)
	}
	if *capped.PowerViolationNs < uint64(9*time.Second) {
		t.Errorf("capped 10 s: power violation %d ns", *capped.PowerViolationNs)
	}
	other := sampleOne(t, b, 1)
	if *other.PowerLimitWatts != 700 {
		t.Errorf("the other GPU's limit %v W: want its default", *other.PowerLimitWatts)
	}
	l, err := b.PowerLimits(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(gpu.PowerLimits{MinWatts: 175, MaxWatts: 700, DefaultWatts: 700, CurrentWatts: 400}, l); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}
	if err := b.SetPowerLimit(t.Context(), 0, l.DefaultWatts); err != nil {
		t.Fatal(err)
	}
	clk.step(10 * time.Second)
	if back := sampleOne(t, b, 0); *back.ClockEventReasons&gpu.ClockEventSWPowerCap != 0 || *back.PowerWatts < 600 {
		t.Errorf("back at the default: draws %v W, reasons %#x", *back.PowerWatts, *back.ClockEventReasons)
	}
	// An idle GPU under a limit above its draw is not clipped.
	if err := b.SetPowerLimit(t.Context(), 1, 200); err != nil {
		t.Fatal(err)
	}
	clk.step(time.Second)
	if idle := sampleOne(t, b, 1); *idle.ClockEventReasons&gpu.ClockEventSWPowerCap != 0 {
		t.Errorf("idle under a 200 W limit: reasons %#x", *idle.ClockEventReasons)
	}
}

func TestPowerLimitErrors(t *testing.T) {
	clk := newClock()
	b := newSim(t, clk, Spec{Model: "h100-sxm-80gb", Count: 1})
	for name, tc := range map[string]struct {
		index int
		watts float64
		want  error
	}{
		"below the minimum": {0, 100, gpufleet.ErrInvalid},
		"above the maximum": {0, 701, gpufleet.ErrInvalid},
		"no such gpu":       {3, 300, gpufleet.ErrNotFound},
	} {
		if err := b.SetPowerLimit(t.Context(), tc.index, tc.watts); !errors.Is(err, tc.want) {
			t.Errorf("%s: SetPowerLimit = %v, want %v", name, err, tc.want)
		}
	}
	refusing, err := New([]Spec{{Model: "h100-sxm-80gb", Count: 1}}, WithClock(clk.now), WithoutPowerCaps())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := refusing.PowerLimits(t.Context(), 0); !errors.Is(err, gpu.ErrNoPowerCaps) {
		t.Errorf("WithoutPowerCaps: PowerLimits = %v, want ErrNoPowerCaps", err)
	}
	if err := refusing.SetPowerLimit(t.Context(), 0, 400); !errors.Is(err, gpu.ErrNoPowerCaps) {
		t.Errorf("WithoutPowerCaps: SetPowerLimit = %v, want ErrNoPowerCaps", err)
	}
}

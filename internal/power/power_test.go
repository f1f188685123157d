package power

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

func gpu(t *testing.T, id string) catalog.GPU {
	t.Helper()
	g, err := catalog.Default().Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestRatedNode(t *testing.T) {
	for _, tc := range []struct {
		id    string
		gpus  int
		want  gpufleet.Watts
		units int
	}{
		// DGX H100: 10.2 kW for the system, whatever the GPUs' share.
		{"h100-sxm-80gb", 8, 10200, 8},
		{"a100-sxm-80gb", 8, 6500, 6},
		// Not an 8-GPU board: the GPUs' TDPs and the assumed 500 W.
		{"h100-sxm-80gb", 4, 4*700 + 500, 4},
		{"l4", 2, 2*72 + 500, 2},
	} {
		g := gpu(t, tc.id)
		if got := RatedNode(g, tc.gpus); got != tc.want {
			t.Errorf("RatedNode(%s, %d) = %v, want %v", tc.id, tc.gpus, got, tc.want)
		}
		if got := NodeUnits(g, tc.gpus); got != tc.units {
			t.Errorf("NodeUnits(%s, %d) = %d, want %d", tc.id, tc.gpus, got, tc.units)
		}
		if s := HostOverheadSource(g, tc.gpus); s == "" {
			t.Errorf("HostOverheadSource(%s, %d) is empty", tc.id, tc.gpus)
		}
	}
}

func TestIdle(t *testing.T) {
	h := gpu(t, "h100-sxm-80gb")
	if h.IdleWatts != nil && Idle(h) != *h.IdleWatts {
		t.Errorf("Idle = %v, want the catalog's %v", Idle(h), *h.IdleWatts)
	}
	noIdle := h
	noIdle.IdleWatts = nil
	if got := Idle(noIdle); math.Abs(got-70) > 1e-9 {
		t.Errorf("Idle without a figure = %v, want a tenth of 700 W", got)
	}
	noTDP := catalog.GPU{ID: "x"}
	if TDP(noTDP) != 0 || Idle(noTDP) != 0 {
		t.Errorf("a GPU without a TDP draws %v/%v, want 0", TDP(noTDP), Idle(noTDP))
	}
}

func TestProjectRack(t *testing.T) {
	h := gpu(t, "h100-sxm-80gb")
	w := func(v float64) *float64 { return &v }
	nodes := []NodeReading{{HostWatts: 4600, GPUs: []GPUReading{
		{Model: h, Watts: w(500), PeakWatts: w(520), Held: true, Class: gpufleet.Batch}, // measured: its peak + 10 %
		{Model: h, Watts: w(100), Held: true, Class: gpufleet.Production},               // just started: its limit
		{Model: h, Watts: w(80)}, // idle, measured
		{Model: h},               // idle, not measured
	}}}
	want := 4600 + 520*1.1 + 700 + 80 + Idle(h)
	if got := float64(ProjectRack(nodes, Charging{PeakMargin: DefaultPeakMargin})); math.Abs(got-want) > 1e-9 {
		t.Errorf("ProjectRack = %v, want %v", got, want)
	}
}

// TestCharge: a held GPU counts its limit until measured under its job,
// then its peak with the margin, never above the limit nor below what it
// draws now.
func TestCharge(t *testing.T) {
	h := gpu(t, "h100-sxm-80gb")
	w := func(v float64) *float64 { return &v }
	c := Charging{PeakMargin: 0.1}
	for _, tc := range []struct {
		name string
		c    Charging
		g    GPUReading
		want float64
	}{
		{"free, not measured: idle", c, GPUReading{Model: h}, 70},
		{"free, measured", c, GPUReading{Model: h, Watts: w(90)}, 90},
		{"held, not measured: TDP", c, GPUReading{Model: h, Held: true}, 700},
		{"held, read before its job ran: TDP", c, GPUReading{Model: h, Held: true, Watts: w(80)}, 700},
		{"held, power limit set: the limit", c, GPUReading{Model: h, Held: true, LimitWatts: 500}, 500},
		{"held, measured: peak + margin", c, GPUReading{Model: h, Held: true, Watts: w(400), PeakWatts: w(450)}, 495},
		{"held, measured near the limit: the limit", c, GPUReading{Model: h, Held: true, Watts: w(680), PeakWatts: w(690)}, 700},
		{"held, drawing over its charge: the draw", c, GPUReading{Model: h, Held: true, Watts: w(600), PeakWatts: w(300)}, 600},
		{"held, measured, negative margin: the limit", Charging{PeakMargin: -1}, GPUReading{Model: h, Held: true, Watts: w(400), PeakWatts: w(400)}, 700},
		{"held, tiny peak: at least idle", c, GPUReading{Model: h, Held: true, Watts: w(10), PeakWatts: w(10)}, 70},
		{"held, capped: the cap, whatever the peak", c, GPUReading{Model: h, Held: true, Watts: w(480), PeakWatts: w(480), CapWatts: 450}, 480},
		{"held, capped, drawing under it: the cap", c, GPUReading{Model: h, Held: true, Watts: w(400), PeakWatts: w(445), CapWatts: 450}, 450},
		{"held, capped above the limit: the limit", c, GPUReading{Model: h, Held: true, CapWatts: 800}, 700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Charge(tc.g); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("Charge = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCap(t *testing.T) {
	h := gpu(t, "h100-sxm-80gb")
	w := func(v float64) *float64 { return &v }
	c := Charging{PeakMargin: 0.1}
	for name, tc := range map[string]struct {
		c      Charging
		g      GPUReading
		want   float64
		wantOK bool
	}{
		"free: none":                           {c, GPUReading{Model: h, Watts: w(90), PeakWatts: w(90)}, 0, false},
		"held, not measured: none":             {c, GPUReading{Model: h, Held: true, Watts: w(400)}, 0, false},
		"measured: peak + margin":              {c, GPUReading{Model: h, Held: true, Watts: w(600), PeakWatts: w(450)}, 495, true},
		"measured near the limit: the limit":   {c, GPUReading{Model: h, Held: true, PeakWatts: w(690)}, 700, true},
		"tiny peak: at least idle":             {c, GPUReading{Model: h, Held: true, PeakWatts: w(10)}, 70, true},
		"negative margin: none (the limit)":    {Charging{PeakMargin: -1}, GPUReading{Model: h, Held: true, PeakWatts: w(400)}, 0, false},
		"a lower limit in force: at most that": {c, GPUReading{Model: h, Held: true, PeakWatts: w(450), LimitWatts: 480}, 480, true},
	} {
		got, ok := tc.c.Cap(tc.g)
		if ok != tc.wantOK || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: Cap = %v, %v; want %v, %v", name, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestSchedulerRacks(t *testing.T) {
	h := gpu(t, "h100-sxm-80gb")
	node := NodeReading{HostWatts: 4600, GPUs: []GPUReading{{Model: h, Held: true}, {Model: h}}}
	racks := []RackInput{
		{Name: "r1", BudgetWatts: 6000, ProductionReserveW: 500, Nodes: []NodeReading{node}},
		{Name: "r2", Nodes: []NodeReading{node}}, // no budget: projected, not given
	}
	in, draw, projected := SchedulerRacks(racks, map[string]catalog.GPU{h.ID: h}, Charging{PeakMargin: 0.1})
	want := 4600.0 + 700 + 70
	if len(in) != 1 || in[0].Name != "r1" || in[0].BudgetWatts != 6000 || in[0].ProductionReserveWatts != 500 || math.Abs(float64(in[0].DrawWatts)-want) > 1e-9 {
		t.Errorf("racks = %+v, want r1 of 6 kW, 500 W reserved, drawing %v", in, want)
	}
	if len(projected) != 2 || math.Abs(float64(projected[1])-want) > 1e-9 {
		t.Errorf("projected = %v", projected)
	}
	if got := draw[h.ID][gpufleet.Batch]; got != 630 {
		t.Errorf("a placed H100 adds %v, want TDP - idle = 630", got)
	}
}

func TestFitRack(t *testing.T) {
	h := gpu(t, "h100-sxm-80gb")
	for _, tc := range []struct {
		name      string
		f         Facility
		nodes     int
		expected  float64
		rated     int
		exp       int
		by        string
		racks     int
		throttles bool
	}{
		// 17.3 kW holds one 10.2 kW DGX H100; at 450 W per GPU (8.2 kW) two.
		{"power", Facility{Power: 17300}, 4, 450, 1, 2, "power", 4, false},
		{"cooling binds", Facility{Power: 40000, Cooling: 20000}, 3, 0, 1, 1, "cooling", 3, false},
		{"space binds", Facility{Power: 100000, Units: 42}, 10, 0, 5, 5, "space", 2, false},
		{"too little", Facility{Power: 8000}, 2, 0, 0, 0, "power", 0, true},
		{"no limits", Facility{}, 2, 0, -1, -1, "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fit := FitRack(tc.f, h, 8, tc.nodes, tc.expected)
			if fit.PerRackRated != tc.rated || fit.PerRackExpected != tc.exp || fit.LimitedBy != tc.by || fit.Racks != tc.racks || fit.Throttles != tc.throttles {
				t.Errorf("FitRack = %+v", fit)
			}
			if fit.TotalRated != gpufleet.Watts(tc.nodes)*10200 {
				t.Errorf("TotalRated = %v", fit.TotalRated)
			}
		})
	}
	// The expected draw never goes above the rating.
	if fit := FitRack(Facility{}, h, 8, 1, 5000); fit.ExpectedNodeWatts != fit.RatedNodeWatts {
		t.Errorf("expected %v above rated %v", fit.ExpectedNodeWatts, fit.RatedNodeWatts)
	}
}

func TestEnergy(t *testing.T) {
	if got := KWh(3.6e6); got != 1 {
		t.Errorf("KWh = %v", got)
	}
	if got := FacilityJoules(100, 1.5); got != 150 {
		t.Errorf("FacilityJoules = %v", got)
	}
	if got := FacilityJoules(100, 0.5); got != 100 {
		t.Errorf("a PUE under 1 gave %v", got)
	}
}

func TestIntensity(t *testing.T) {
	in, err := ParseIntensity(strings.NewReader("hour,g_co2e_per_kwh,source\n2026-01-01T01:00:00Z,100,x\n2026-01-01T00:30:00Z,300,y\n"), 500)
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time { t, _ := time.Parse(time.RFC3339, s); return t }
	for _, tc := range []struct {
		t    string
		want float64
	}{
		{"2026-01-01T00:59:00Z", 300}, {"2026-01-01T01:10:00Z", 100}, {"2026-01-01T02:00:00Z", 500},
	} {
		if got := in.At(at(tc.t)); got != tc.want {
			t.Errorf("At(%s) = %v, want %v", tc.t, got, tc.want)
		}
	}
	// 2 kWh over 00:30-01:30: half at 300, half at 100.
	if got := in.CO2e(7.2e6, at("2026-01-01T00:30:00Z"), at("2026-01-01T01:30:00Z")); math.Abs(got-400) > 1e-9 {
		t.Errorf("CO2e = %v, want 400 g", got)
	}
	if got := (Intensity{Constant: 480}).CO2e(3.6e6, at("2026-01-01T00:00:00Z"), at("2026-01-02T00:00:00Z")); got != 480 {
		t.Errorf("constant CO2e = %v", got)
	}
}

func TestParseIntensityRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "no header"},
		{"time,g\n", "expected columns hour and g_co2e_per_kwh"},
		{"hour,g_co2e_per_kwh\nyesterday,10\n", "line 2: hour"},
		{"hour,g_co2e_per_kwh\n2026-01-01T00:00:00Z,-1\n", "line 2: g_co2e_per_kwh"},
		{"hour,g_co2e_per_kwh\n2026-01-01T00:00:00Z,NaN\n", "g_co2e_per_kwh"},
		{"hour,g_co2e_per_kwh\n2026-01-01T00:00:00Z,1e9\n", "g_co2e_per_kwh"},
		{"hour,g_co2e_per_kwh\n2026-01-01T00:00:00Z,1\n2026-01-01T00:10:00Z,2\n", "line 3: hour 2026-01-01T00:00:00Z given twice"},
		{"hour,g_co2e_per_kwh\n2026-01-01T00:00:00Z\n", "line 2"},
	} {
		_, err := ParseIntensity(strings.NewReader(tc.in), 480)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseIntensity(%q) = %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParseIntensity(f *testing.F) {
	f.Add("hour,g_co2e_per_kwh\n2026-01-01T00:00:00Z,120\n2026-01-01T01:00:00+02:00,80\n")
	f.Add("g_co2e_per_kwh,hour\n1,2026-01-01T00:00:00Z\n")
	f.Fuzz(func(t *testing.T, s string) {
		in, err := ParseIntensity(strings.NewReader(s), DefaultIntensity)
		if err != nil {
			return
		}
		for _, h := range in.hours {
			if h.g < 0 || h.g > MaxIntensity || math.IsNaN(h.g) {
				t.Fatalf("accepted intensity %v", h.g)
			}
			if got := in.At(h.at.Add(30 * time.Minute)); got != h.g {
				t.Fatalf("At(%v) = %v, want %v", h.at, got, h.g)
			}
		}
		g := in.CO2e(3.6e6, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC))
		if math.IsNaN(g) || g < 0 || g > MaxIntensity {
			t.Fatalf("CO2e of a kWh = %v", g)
		}
	})
}

func TestAccount(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2026, 3, d, 0, 0, 0, 0, time.UTC) } // 2026-03-02 is a Monday
	kwh := 3.6e6
	uses := []Use{
		{Key: "a", From: day(2), To: day(3), GPUSeconds: 3600, Joules: kwh},
		{Key: "a", From: day(9), To: day(10), GPUSeconds: 3600, Joules: kwh, PUE: 1.2},
		{Key: "b", From: day(3), To: day(4), GPUSeconds: 7200, Joules: 2 * kwh},
	}
	in := Intensity{Constant: 500}
	for _, tc := range []struct {
		p    Period
		want []EnergyRow
	}{
		{PeriodAll, []EnergyRow{
			{Key: "a", GPUSeconds: 7200, GPUJoules: 2 * kwh, FacilityJoules: 2.7 * kwh, CO2eGrams: 1350},
			{Key: "b", GPUSeconds: 7200, GPUJoules: 2 * kwh, FacilityJoules: 3 * kwh, CO2eGrams: 1500},
		}},
		{PeriodWeek, []EnergyRow{
			{Key: "a", PeriodStart: day(2), GPUSeconds: 3600, GPUJoules: kwh, FacilityJoules: 1.5 * kwh, CO2eGrams: 750},
			{Key: "b", PeriodStart: day(2), GPUSeconds: 7200, GPUJoules: 2 * kwh, FacilityJoules: 3 * kwh, CO2eGrams: 1500},
			{Key: "a", PeriodStart: day(9), GPUSeconds: 3600, GPUJoules: kwh, FacilityJoules: 1.2 * kwh, CO2eGrams: 600},
		}},
	} {
		got := Account(uses, tc.p, 1.5, in)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %d rows, want %d: %+v", tc.p, len(got), len(tc.want), got)
		}
		for i := range got {
			g, w := got[i], tc.want[i]
			if g.Key != w.Key || !g.PeriodStart.Equal(w.PeriodStart) || g.GPUSeconds != w.GPUSeconds ||
				math.Abs(g.FacilityJoules-w.FacilityJoules) > 1e-6 || math.Abs(g.CO2eGrams-w.CO2eGrams) > 1e-6 {
				t.Errorf("%s row %d = %+v, want %+v", tc.p, i, g, w)
			}
		}
	}
	if w := (EnergyRow{GPUSeconds: 3600, GPUJoules: kwh}).AvgGPUWatts(); w != 1000 {
		t.Errorf("AvgGPUWatts = %v", w)
	}
}

func TestPeriod(t *testing.T) {
	at := time.Date(2026, 3, 5, 13, 0, 0, 0, time.FixedZone("x", 3600)) // Thursday
	for _, tc := range []struct {
		s    string
		want time.Time
	}{
		{"", time.Time{}}, {"day", time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)},
		{"week", time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)}, {"month", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)},
	} {
		p, err := ParsePeriod(tc.s)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Start(at); !got.Equal(tc.want) {
			t.Errorf("%q.Start = %v, want %v", tc.s, got, tc.want)
		}
	}
	if _, err := ParsePeriod("fortnight"); err == nil || !strings.Contains(err.Error(), "period") {
		t.Errorf("ParsePeriod(fortnight) = %v", err)
	}
}

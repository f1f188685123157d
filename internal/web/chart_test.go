package web

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

func TestLineChartGapsAndScale(t *testing.T) {
	from := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	to := from.Add(10 * time.Minute)
	pts := []point{
		{from, 0}, {from.Add(time.Minute), 1}, // one segment
		{from.Add(6 * time.Minute), 0.5}, // after a 5-minute gap: a lone point
		{from.Add(7 * time.Minute), math.NaN()},
		{from.Add(8 * time.Minute), 2}, // above the axis: clamped to the top
	}
	c := buildLineChart("t", "d", from, to, 1, fmtNum1, []seriesData{{Name: "GPU 0", Points: pts}, {Name: "GPU 1"}}, 150*time.Second)
	if c.Empty != "" {
		t.Fatalf("empty chart: %s", c.Empty)
	}
	segs := c.Lines[0].Segments
	if len(segs) != 3 {
		t.Fatalf("segments %q, want 3 (a gap and a missing reading split the line)", segs)
	}
	if got := segs[0]; got != "58.0,170.0 114.8,10.0" {
		t.Errorf("first segment %q", got)
	}
	if !strings.HasPrefix(segs[2], "512.4,10.0") {
		t.Errorf("clamped point %q, want y at the top (10.0)", segs[2])
	}
	if len(c.XTicks) != 5 || c.XTicks[4].Anchor != "end" || c.XTicks[0].Label != "10:00" {
		t.Errorf("x ticks %+v", c.XTicks)
	}
	if len(c.Legend) != 2 || c.Legend[1].Name != "GPU 1" {
		t.Errorf("legend %+v", c.Legend)
	}
	if e := buildLineChart("t", "d", from, to, 1, fmtNum1, []seriesData{{Name: "x"}}, time.Minute); e.Empty == "" {
		t.Error("a chart without points is not marked empty")
	}
}

func fmtNum1(v float64) string { return fmtNum(v, 1) }

func TestDownsample(t *testing.T) {
	var pts []point
	for i := range 1000 {
		pts = append(pts, point{time.Unix(int64(i), 0), float64(i % 2)})
	}
	out := downsample(pts, 100)
	if len(out) != 100 {
		t.Fatalf("%d points, want 100", len(out))
	}
	for _, p := range out {
		if p.V != 0.5 {
			t.Fatalf("bucket mean %v, want 0.5", p.V)
		}
	}
}

func TestBarChart(t *testing.T) {
	c := buildBarChart("m", "d", []barPart{{"a", "#000"}, {"b", "#111"}},
		[]barInput{{Label: "x", Values: []float64{30, 10}, Marker: 80, Note: "40/80"}, {Label: "y", Values: []float64{0, 100}}}, "cap", fmtNum1, barAxis{})
	if len(c.Rows) != 2 || len(c.Rows[0].Segs) != 2 || len(c.Rows[1].Segs) != 1 {
		t.Fatalf("rows %+v", c.Rows)
	}
	r := c.Rows[0]
	// The scale is the largest total (100): 30 of it is 30% of the 370-unit bar area.
	if r.Segs[0].X != 150 || r.Segs[0].W != 111 || !r.HasMarker || r.MarkerX != 446 {
		t.Errorf("row 0 geometry %+v", r)
	}
	if !c.HasMarker || len(c.Legend) != 2 || c.XTicks[len(c.XTicks)-1].Label != "100" {
		t.Errorf("legend or ticks: %+v %+v", c.Legend, c.XTicks)
	}
	if e := buildBarChart("m", "d", nil, nil, "", fmtNum1, barAxis{}); e.Empty == "" {
		t.Error("no bars, not empty")
	}
}

func TestUtilClassAndEta(t *testing.T) {
	for v, want := range map[float64]string{0: "u0", 0.19: "u0", 0.2: "u1", 0.55: "u2", 0.7: "u3", 1: "u4", 1.2: "u4"} {
		if got := utilClass(&v); got != want {
			t.Errorf("utilClass(%v) = %s, want %s", v, got, want)
		}
	}
	if utilClass(nil) != "unk" {
		t.Error("no reading is not unk")
	}
	now := time.Now()
	soon := now.Add(90 * time.Minute)
	if got, title := etaText(gpufleet.QueueEntry{EstimatedStart: &soon, ReasonCode: "quota"}, now); got != "in 1h30m" || !strings.Contains(title, "not calibrated yet") {
		t.Errorf("eta %q (%s)", got, title)
	}
	later, low, high := now.Add(5*time.Hour), 0.2, 0.7
	if got, title := etaText(gpufleet.QueueEntry{EstimatedStart: &soon, EstimatedStartP90: &later, ETAConfidence: &high}, now); got != "in 1h30m (90% by 5h)" ||
		!strings.Contains(title, "70% of similar recent jobs") {
		t.Errorf("eta range %q (%s)", got, title)
	}
	if got, _ := etaText(gpufleet.QueueEntry{EstimatedStart: &soon, EstimatedStartP90: &later, ETAConfidence: &low}, now); !strings.HasSuffix(got, ", uncertain") {
		t.Errorf("a low-confidence eta %q does not say so", got)
	}
	run := &gpufleet.RunEstimate{Seconds: 60, From: gpufleet.EstimateWorkload, Runs: 2}
	if _, title := etaText(gpufleet.QueueEntry{EstimatedStart: &soon, Estimate: run}, now); !strings.Contains(title, "planned on a run of 1m from 2 runs of its workload") {
		t.Errorf("title %q: want the run estimate and its source", title)
	}
	if got, _ := etaText(gpufleet.QueueEntry{ReasonCode: "unplaceable"}, now); got != "never, as submitted" {
		t.Errorf("eta %q", got)
	}
	if got := shellJoin([]string{"sh", "-c", "echo 'hi'; sleep 1"}); got != `sh -c 'echo '\''hi'\''; sleep 1'` {
		t.Errorf("shellJoin: %s", got)
	}
}

// TestRackDraw: a rack's draw per minute is its GPUs' power plus the host
// overhead of each node that reported in the minute, over its budget;
// racks without a budget are not charted.
func TestRackDraw(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	w := func(v float64) *float64 { return &v }
	racks := []gpufleet.Rack{
		{Name: "r1", PowerBudgetWatts: 4000, Members: []string{"n1", "n2"}},
		{Name: "unbudgeted", Members: []string{"n1"}},
	}
	nodes := []gpufleet.Node{{Name: "n1"}, {Name: "n2"}}
	byNode := map[string][]api.GPURollup{
		"n1": {{Minute: t0, PowerWatts: w(700)}, {Minute: t0, PowerWatts: w(300)}, {Minute: t0.Add(time.Minute), PowerWatts: w(700)},
			{Minute: t0.Add(time.Minute), PowerWatts: nil}}, // a GPU without a power reading adds nothing
		"n2": {{Minute: t0, PowerWatts: w(500)}}, // silent in the second minute
	}
	host := func(n gpufleet.Node) float64 { return map[string]float64{"n1": 1000, "n2": 500}[n.Name] }
	got, top := rackDraw(racks, nodes, byNode, host)
	want := []seriesData{{Name: "r1", Points: []point{
		{T: t0, V: (700 + 300 + 1000 + 500 + 500) / 4000.0},
		{T: t0.Add(time.Minute), V: (700 + 1000) / 4000.0},
	}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rack draw (-want +got):\n%s", diff)
	}
	if top != 0.75 {
		t.Errorf("top %g, want 0.75", top)
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		hi       float64
		target   int
		step     float64
		top      float64
		decimals int
		labels   string
	}{
		{0.074, 5, 0.02, 0.08, 2, "0.00 0.02 0.04 0.06 0.08"}, // not 0.0, 0.074, 0.1
		{0.06, 5, 0.02, 0.06, 2, "0.00 0.02 0.04 0.06"},
		{1, 5, 0.2, 1, 1, "0.0 0.2 0.4 0.6 0.8 1.0"},
		{7.3, 5, 2, 8, 0, "0 2 4 6 8"},
		{100, 5, 20, 100, 0, "0 20 40 60 80 100"},
		{101, 5, 50, 150, 0, "0 50 100 150"},
		{2400, 5, 500, 2500, 0, "0 500 1000 1500 2000 2500"},
		{0.0004, 4, 0.0001, 0.0004, 4, "0.0000 0.0001 0.0002 0.0003 0.0004"},
		{0, 5, 0.2, 1, 1, "0.0 0.2 0.4 0.6 0.8 1.0"}, // nothing to show: 0 to 1
		{math.NaN(), 5, 0.2, 1, 1, "0.0 0.2 0.4 0.6 0.8 1.0"},
	} {
		got := niceTicks(tc.hi, tc.target)
		if math.Abs(got.Step-tc.step) > 1e-12 || math.Abs(got.Top-tc.top) > 1e-12 || got.Decimals != tc.decimals {
			t.Errorf("niceTicks(%g, %d) = %+v, want step %g top %g decimals %d", tc.hi, tc.target, got, tc.step, tc.top, tc.decimals)
			continue
		}
		var labels []string
		for _, v := range got.Ticks() {
			labels = append(labels, got.Label(v, ""))
		}
		if l := strings.Join(labels, " "); l != tc.labels {
			t.Errorf("niceTicks(%g) labels %q, want %q", tc.hi, l, tc.labels)
		}
	}
}

func TestColumnUnits(t *testing.T) {
	for _, tc := range []struct {
		name string
		col  columnUnit
		vals []float64
		want []string
	}{
		// One unit per column, picked from its largest value, and the
		// same decimals in every row.
		{"energy kWh", energyColumn(3.6e7), []float64{3.6e7, 5e5, 900, 0}, []string{"10.0 kWh", "0.1 kWh", "0.0 kWh", "0.0 kWh"}},
		{"energy Wh", energyColumn(900), []float64{900, 36}, []string{"0.250 Wh", "0.010 Wh"}},
		{"energy 100s of Wh", energyColumn(1.8e6), []float64{1.8e6, 3600}, []string{"500 Wh", "1 Wh"}},
		{"energy MWh", energyColumn(7.2e9), []float64{7.2e9, 3.6e8}, []string{"2.00 MWh", "0.10 MWh"}},
		{"energy none", energyColumn(0), []float64{0}, []string{"0.0 Wh"}},
		{"hours small", hoursColumn(0.074), []float64{0.074, 0.0601, 0.06}, []string{"0.074", "0.060", "0.060"}},
		{"hours", hoursColumn(10.06), []float64{10.06, 2.06, 0.06}, []string{"10.1", "2.1", "0.1"}},
		{"hours big", hoursColumn(1234.6), []float64{1234.6, 0.2}, []string{"1235", "0"}},
		{"hours single", hoursColumn(3.5), []float64{3.5, -0.001}, []string{"3.50", "0.00"}},
	} {
		for i, v := range tc.vals {
			if got := tc.col.Format(v); got != tc.want[i] {
				t.Errorf("%s: Format(%g) = %q, want %q", tc.name, v, got, tc.want[i])
			}
		}
	}
}

// TestSeriesColoursNeverRepeat: however many series a chart draws, no two
// share a colour, and the first eight are the palette.
func TestSeriesColoursNeverRepeat(t *testing.T) {
	for _, n := range []int{0, 1, 8, 9, 16, 64} {
		cs := seriesColours(n)
		if len(cs) != n {
			t.Fatalf("seriesColours(%d): %d colours", n, len(cs))
		}
		seen := map[string]int{}
		for i, c := range cs {
			if j, ok := seen[c]; ok {
				t.Errorf("seriesColours(%d): %s at %d and %d", n, c, j, i)
			}
			seen[c] = i
			if i < len(palette) && c != palette[i] {
				t.Errorf("seriesColours(%d)[%d] = %s, want the palette's %s", n, i, c, palette[i])
			}
		}
	}
	if got := hslHex(0, 1, 0.5); got != "#ff0000" {
		t.Errorf("hslHex red = %s", got)
	}
}

// TestBandChart: 16 series draw as one mean line and one min-max band
// (two legend entries), and the mean and range are the series'.
func TestBandChart(t *testing.T) {
	from := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	var series []seriesData
	for g := range 16 {
		s := seriesData{Name: fmt.Sprintf("n GPU %d", g)}
		for m := range 10 {
			s.Points = append(s.Points, point{from.Add(time.Duration(m) * time.Minute), bigJobUtil(g)})
		}
		series = append(series, s)
	}
	sp := spreadOf(series)
	if len(sp.Mean) != 10 || math.Abs(sp.Mean[3].V-0.6) > 1e-9 || sp.Min[3].V != bigJobUtil(0) || sp.Max[3].V != bigJobUtil(15) {
		t.Fatalf("spread at 10:03: mean %v min %v max %v, want 0.6, 0.3, 0.9", sp.Mean[3], sp.Min[3], sp.Max[3])
	}
	c := buildBandChart("u", "d", from, from.Add(10*time.Minute), 1, fmtNum1, series, 150*time.Second)
	if len(c.Lines) != 1 || len(c.Bands) != 1 || len(c.Legend) != 2 || c.Legend[0].Name != "mean of 16 GPUs" {
		t.Fatalf("lines %d, bands %d, legend %+v: want one mean line and one band", len(c.Lines), len(c.Bands), c.Legend)
	}
	if c.Lines[0].Color == c.Bands[0].Color {
		t.Error("the band has the line's colour")
	}
	// The mean (0.6) sits at 60% of the plot's height: y = 170 - 0.6*160.
	if !strings.HasPrefix(c.Lines[0].Segments[0], "58.0,74.0 ") {
		t.Errorf("mean line %q, want y 74.0", c.Lines[0].Segments[0])
	}
	if len(c.Bands[0].Polygons) != 1 || !strings.Contains(c.Bands[0].Polygons[0], "58.0,26.0") || !strings.Contains(c.Bands[0].Polygons[0], "58.0,122.0") {
		t.Errorf("band %q, want the range 0.3 (y 122) to 0.9 (y 26)", c.Bands[0].Polygons)
	}
	multiples := buildSmallMultiples(from, from.Add(10*time.Minute), 1, fmtNum1, series, 150*time.Second)
	seen := map[string]bool{}
	for i, m := range multiples {
		if m.Title != series[i].Name || len(m.Lines) != 1 || len(m.Legend) != 0 || seen[m.Lines[0].Color] {
			t.Errorf("small multiple %d: %q, %d lines, colour %s (repeated: %v)", i, m.Title, len(m.Lines), m.Lines[0].Color, seen[m.Lines[0].Color])
		}
		seen[m.Lines[0].Color] = true
	}
}

// TestShortSeriesDrawMarkers: a series of fewer than three readings is
// drawn as markers, never as a line between two minutes.
func TestShortSeriesDrawMarkers(t *testing.T) {
	from := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	two := seriesData{Name: "GPU 0", Points: []point{{from.Add(2 * time.Minute), 0.2}, {from.Add(3 * time.Minute), 0.8}}}
	c := buildLineChart("t", "d", from, from.Add(10*time.Minute), 1, fmtNum1, []seriesData{two}, 150*time.Second)
	if l := c.Lines[0]; len(l.Segments) != 0 || len(l.Dots) != 2 || l.Dots[0] != (dot{X: 171.6, Y: 138}) {
		t.Errorf("two readings: segments %q dots %+v, want two markers and no line", l.Segments, l.Dots)
	}
	b := buildBandChart("t", "d", from, from.Add(10*time.Minute), 1, fmtNum1, []seriesData{two, {Name: "GPU 1", Points: two.Points[:1]}}, 150*time.Second)
	if len(b.Lines[0].Dots) != 2 || len(b.Lines[0].Segments) != 0 || len(b.Bands[0].Polygons) != 2 {
		t.Errorf("short band: %+v %+v, want two mean markers with a range bar each", b.Lines[0], b.Bands)
	}
}

func TestGPUsCharted(t *testing.T) {
	for _, c := range []struct {
		charted, held int
		want          string
	}{{2, 2, "2 GPUs"}, {16, 8, "the 16 GPUs its attempts held, 8 at a time"}, {3, 0, "3 GPUs"}} {
		if got := gpusCharted(c.charted, c.held); got != c.want {
			t.Errorf("gpusCharted(%d, %d) = %q, want %q", c.charted, c.held, got, c.want)
		}
	}
}

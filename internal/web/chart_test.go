package web

import (
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
		[]barInput{{Label: "x", Values: []float64{30, 10}, Marker: 80, Note: "40/80"}, {Label: "y", Values: []float64{0, 100}}}, "cap", fmtNum1)
	if len(c.Rows) != 2 || len(c.Rows[0].Segs) != 2 || len(c.Rows[1].Segs) != 1 {
		t.Fatalf("rows %+v", c.Rows)
	}
	r := c.Rows[0]
	// The scale is the largest total (100): 30 of it is 30% of the 370-unit bar area.
	if r.Segs[0].X != 150 || r.Segs[0].W != 111 || !r.HasMarker || r.MarkerX != 446 {
		t.Errorf("row 0 geometry %+v", r)
	}
	if !c.HasMarker || len(c.Legend) != 2 || c.XTicks[4].Label != "100.0" {
		t.Errorf("legend or ticks: %+v %+v", c.Legend, c.XTicks)
	}
	if e := buildBarChart("m", "d", nil, nil, "", fmtNum1); e.Empty == "" {
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
	if got, title := etaText(gpufleet.QueueEntry{EstimatedStart: &soon, ReasonCode: "quota"}, now); got != "in 1h 30m" || !strings.Contains(title, "not calibrated yet") {
		t.Errorf("eta %q (%s)", got, title)
	}
	later, low, high := now.Add(5*time.Hour), 0.2, 0.7
	if got, title := etaText(gpufleet.QueueEntry{EstimatedStart: &soon, EstimatedStartP90: &later, ETAConfidence: &high}, now); got != "in 1h 30m (90% by 5h 00m)" ||
		!strings.Contains(title, "70% of similar recent jobs") {
		t.Errorf("eta range %q (%s)", got, title)
	}
	if got, _ := etaText(gpufleet.QueueEntry{EstimatedStart: &soon, EstimatedStartP90: &later, ETAConfidence: &low}, now); !strings.HasSuffix(got, ", uncertain") {
		t.Errorf("a low-confidence eta %q does not say so", got)
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

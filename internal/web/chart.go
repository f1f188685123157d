package web

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Charts are computed here, as geometry, and drawn as inline SVG by the
// "linechart" and "barchart" templates, so every label goes through
// html/template's escaping.

// palette is the series colours: distinct on white and for the common
// colour-vision deficiencies (Okabe-Ito, with black last).
var palette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#8c6d1f", "#000000"}

// seriesColours returns n colours, no two alike: the palette first, then
// hues a golden angle apart at alternating lightness, so a chart never
// repeats a colour however many series it draws. Deterministic.
func seriesColours(n int) []string {
	out := make([]string, 0, n)
	seen := map[string]bool{}
	for i := 0; len(out) < n; i++ {
		var c string
		if i < len(palette) {
			c = palette[i]
		} else {
			k := i - len(palette)
			c = hslHex(math.Mod(20+137.508*float64(k), 360), 0.65, []float64{0.38, 0.52, 0.30}[k%3])
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// hslHex writes a colour given as hue (degrees), saturation and lightness
// (0 to 1) as #rrggbb.
func hslHex(h, s, l float64) string {
	c := (1 - math.Abs(2*l-1)) * s
	x := c * (1 - math.Abs(math.Mod(h/60, 2)-1))
	m := l - c/2
	var r, g, b float64
	switch {
	case h < 60:
		r, g = c, x
	case h < 120:
		r, g = x, c
	case h < 180:
		g, b = c, x
	case h < 240:
		g, b = x, c
	case h < 300:
		r, b = x, c
	default:
		r, b = c, x
	}
	to := func(v float64) int { return int(math.Round((v + m) * 255)) }
	return fmt.Sprintf("#%02x%02x%02x", to(r), to(g), to(b))
}

// point is one sample of a series.
type point struct {
	T time.Time
	V float64
}

// seriesData is one named series, oldest point first.
type seriesData struct {
	Name   string
	Points []point
}

// tick is an axis tick: its position, its label and the label's
// text-anchor (the last x tick ends at its position, so it is not cut).
type tick struct {
	Pos    float64
	Label  string
	Anchor string
}

func tickAnchor(i, last int) string {
	if i == last {
		return "end"
	}
	return "middle"
}

// legendItem is one entry of a chart's legend: a swatch at (X, Y) and
// its text at (TX, TY).
type legendItem struct {
	X, Y, TX, TY float64
	Color        string
	Name         string
}

func newLegendItem(x, y float64, color, name string) legendItem {
	return legendItem{X: r1(x), Y: r1(y - 10), TX: r1(x + 16), TY: r1(y), Color: color, Name: name}
}

// r1 rounds a coordinate to one decimal, to keep the SVG small.
func r1(v float64) float64 { return math.Round(v*10) / 10 }

// line is one series as polyline segments (a gap in the data starts a new
// segment).
type line struct {
	Name     string
	Color    string
	Segments []string // SVG points attributes
	// Dots are markers at the points of a series too short to draw as a
	// line (fewer than minLinePoints readings): two minute rollups joined
	// by a line would draw a trend that was never measured.
	Dots []dot
}

// dot is a marker at a point of a series.
type dot struct{ X, Y float64 }

// band is a shaded range (a series' minimum to maximum) as SVG polygons.
type band struct {
	Name     string
	Color    string
	Polygons []string // SVG points attributes
}

// minLinePoints is the fewest readings a series needs to be drawn as a
// line; shorter ones are drawn as markers.
const minLinePoints = 3

// lineChart is a time series chart's geometry.
type lineChart struct {
	Title, Desc    string
	W, H           float64
	X0, Y0, X1, Y1 float64 // plot area
	XTicks, YTicks []tick
	// YLabelX is where the y tick labels end; XLabelY the x tick labels' baseline.
	YLabelX, XLabelY float64
	Bands            []band
	Lines            []line
	Legend           []legendItem
	// Empty, when set, replaces the plot with this message.
	Empty string

	from, to time.Time
	ymax     float64
}

// xOf and yOf map a time and a value into the plot area (clamped).
func (c *lineChart) xOf(t time.Time) float64 {
	span := c.to.Sub(c.from).Seconds()
	return c.X0 + (c.X1-c.X0)*math.Min(1, math.Max(0, t.Sub(c.from).Seconds()/span))
}

func (c *lineChart) yOf(v float64) float64 {
	return c.Y1 - (c.Y1-c.Y0)*math.Min(1, math.Max(0, v/c.ymax))
}

// Chart sizes. The SVGs scale to their container; these set the aspect.
const (
	chartW      = 640.0
	chartPlotH  = 160.0
	chartLeft   = 58.0
	chartRight  = 14.0
	chartTop    = 10.0
	chartXAxisH = 24.0
	legendRowH  = 18.0
	maxPoints   = 240
)

// buildLineChart lays out series over [from, to] and [0, ymax]; yfmt
// labels the y ticks. Points further apart than gap leave a gap.
func buildLineChart(title, desc string, from, to time.Time, ymax float64, yfmt func(float64) string, series []seriesData, gap time.Duration) lineChart {
	c := lineChart{Title: title, Desc: desc, W: chartW, X0: chartLeft, Y0: chartTop, X1: chartW - chartRight, Y1: chartTop + chartPlotH}
	c.YLabelX, c.XLabelY = c.X0-6, c.Y1+16
	nonEmpty := 0
	for _, s := range series {
		if len(s.Points) > 0 {
			nonEmpty++
		}
	}
	longest := 0
	for _, s := range series {
		longest = max(longest, len([]rune(s.Name)))
	}
	colW := min(300, max(90, 6.5*float64(longest)+30))
	perRow := max(1, int((c.X1-c.X0)/colW))
	rows := (len(series) + perRow - 1) / perRow
	c.H = c.Y1 + chartXAxisH + float64(rows)*legendRowH + 4
	if nonEmpty == 0 || !to.After(from) {
		c.Empty = "No samples in this window yet."
		c.H = c.Y1 + chartXAxisH
		return c
	}
	if ymax <= 0 {
		ymax = 1
	}
	c.from, c.to, c.ymax = from, to, ymax
	for i := 0; i <= 4; i++ {
		t := from.Add(time.Duration(float64(i) / 4 * float64(to.Sub(from))))
		c.XTicks = append(c.XTicks, tick{Pos: r1(c.xOf(t)), Label: t.UTC().Format("15:04"), Anchor: tickAnchor(i, 4)})
		v := ymax * float64(i) / 4
		c.YTicks = append(c.YTicks, tick{Pos: r1(c.yOf(v)), Label: yfmt(v)})
	}
	colours := seriesColours(len(series))
	for i, s := range series {
		l := line{Name: s.Name, Color: colours[i]}
		pts := downsample(s.Points, maxPoints)
		if valid(pts) < minLinePoints {
			for _, p := range pts {
				if !math.IsNaN(p.V) {
					l.Dots = append(l.Dots, dot{X: r1(c.xOf(p.T)), Y: r1(c.yOf(p.V))})
				}
			}
		} else {
			for _, run := range runs(pts, gap) {
				seg := make([]string, 0, len(run)+1)
				for _, p := range run {
					seg = append(seg, coord(c.xOf(p.T), c.yOf(p.V)))
				}
				if len(seg) == 1 { // a lone sample: a short stroke so it shows
					seg = append(seg, nudge(seg[0]))
				}
				l.Segments = append(l.Segments, strings.Join(seg, " "))
			}
		}
		c.Lines = append(c.Lines, l)
		c.Legend = append(c.Legend, newLegendItem(c.X0+float64(i%perRow)*colW,
			c.Y1+chartXAxisH+float64(i/perRow)*legendRowH+12, l.Color, s.Name))
	}
	return c
}

// valid counts the points with a reading.
func valid(pts []point) int {
	n := 0
	for _, p := range pts {
		if !math.IsNaN(p.V) {
			n++
		}
	}
	return n
}

// runs splits points into runs of readings: a missing reading or two
// points further apart than gap end a run.
func runs(pts []point, gap time.Duration) [][]point {
	var out [][]point
	var cur []point
	for _, p := range pts {
		if math.IsNaN(p.V) || (len(cur) > 0 && p.T.Sub(cur[len(cur)-1].T) > gap) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
		}
		if !math.IsNaN(p.V) {
			cur = append(cur, p)
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// spread is series summed up per timestamp: the mean of the readings and
// their minimum and maximum (NaN where no series has a reading).
type spread struct {
	Mean, Min, Max []point
}

// spreadOf aligns series on their timestamps and summarises each.
func spreadOf(series []seriesData) spread {
	type acc struct {
		sum, lo, hi float64
		n           int
	}
	by := map[time.Time]*acc{}
	var times []time.Time
	for _, s := range series {
		for _, p := range s.Points {
			a := by[p.T]
			if a == nil {
				a = &acc{lo: math.Inf(1), hi: math.Inf(-1)}
				by[p.T] = a
				times = append(times, p.T)
			}
			if !math.IsNaN(p.V) {
				a.sum += p.V
				a.n++
				a.lo, a.hi = math.Min(a.lo, p.V), math.Max(a.hi, p.V)
			}
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	var sp spread
	for _, t := range times {
		a := by[t]
		mean, lo, hi := math.NaN(), math.NaN(), math.NaN()
		if a.n > 0 {
			mean, lo, hi = a.sum/float64(a.n), a.lo, a.hi
		}
		sp.Mean = append(sp.Mean, point{T: t, V: mean})
		sp.Min = append(sp.Min, point{T: t, V: lo})
		sp.Max = append(sp.Max, point{T: t, V: hi})
	}
	return sp
}

// bandColour is the min-max band's fill: the mean line's colour, light.
const bandColour = "#a6cde8"

// buildBandChart draws many series as one: their mean as a line and
// their minimum-to-maximum range as a band around it, so a 16-GPU job
// reads as one shape with its spread. One series is drawn as it is.
func buildBandChart(title, desc string, from, to time.Time, ymax float64, yfmt func(float64) string, series []seriesData, gap time.Duration) lineChart {
	if len(series) <= 1 {
		return buildLineChart(title, desc, from, to, ymax, yfmt, series, gap)
	}
	sp := spreadOf(series)
	mean := seriesData{Name: fmt.Sprintf("mean of %d GPUs", len(series)), Points: sp.Mean}
	rng := seriesData{Name: "lowest to highest GPU"}
	c := buildLineChart(title, desc, from, to, ymax, yfmt, []seriesData{mean, rng}, gap)
	if c.Empty != "" {
		return c
	}
	c.Lines = c.Lines[:1] // the range is drawn as a band, not a line
	c.Legend[1].Color = bandColour
	b := band{Name: rng.Name, Color: bandColour}
	lo := map[time.Time]float64{}
	for _, p := range downsample(sp.Min, maxPoints) {
		lo[p.T] = p.V
	}
	hi := downsample(sp.Max, maxPoints)
	short := valid(hi) < minLinePoints
	for _, run := range runs(hi, gap) {
		if short || len(run) == 1 { // a range at a marker: a narrow bar
			for _, p := range run {
				x, y0, y1 := c.xOf(p.T), c.yOf(lo[p.T]), c.yOf(p.V)
				b.Polygons = append(b.Polygons, strings.Join([]string{coord(x-3, y1), coord(x+3, y1), coord(x+3, y0), coord(x-3, y0)}, " "))
			}
			continue
		}
		pts := make([]string, 0, 2*len(run))
		for _, p := range run {
			pts = append(pts, coord(c.xOf(p.T), c.yOf(p.V)))
		}
		for i := len(run) - 1; i >= 0; i-- {
			pts = append(pts, coord(c.xOf(run[i].T), c.yOf(lo[run[i].T])))
		}
		b.Polygons = append(b.Polygons, strings.Join(pts, " "))
	}
	c.Bands = []band{b}
	return c
}

// buildSmallMultiples draws each series on its own small chart, titled
// with its name, each in its own colour: the per-GPU view of a job.
func buildSmallMultiples(from, to time.Time, ymax float64, yfmt func(float64) string, series []seriesData, gap time.Duration) []lineChart {
	colours := seriesColours(len(series))
	out := make([]lineChart, 0, len(series))
	for i, s := range series {
		c := buildLineChart(s.Name, s.Name+", per minute.", from, to, ymax, yfmt, []seriesData{s}, gap)
		if c.Empty == "" {
			c.Lines[0].Color = colours[i]
			c.Legend = nil
			c.H = c.Y1 + chartXAxisH
		}
		out = append(out, c)
	}
	return out
}

func coord(x, y float64) string {
	return strconv.FormatFloat(x, 'f', 1, 64) + "," + strconv.FormatFloat(y, 'f', 1, 64)
}

// nudge returns a point 2 units right of "x,y".
func nudge(xy string) string {
	xs, ys, _ := strings.Cut(xy, ",")
	x, _ := strconv.ParseFloat(xs, 64)
	y, _ := strconv.ParseFloat(ys, 64)
	return coord(x+2, y)
}

// downsample averages consecutive points into at most n buckets.
func downsample(pts []point, n int) []point {
	if len(pts) <= n {
		return pts
	}
	out := make([]point, 0, n)
	per := float64(len(pts)) / float64(n)
	for i := range n {
		lo, hi := int(float64(i)*per), int(float64(i+1)*per)
		hi = min(max(hi, lo+1), len(pts))
		var sum float64
		cnt := 0
		for _, p := range pts[lo:hi] {
			if !math.IsNaN(p.V) {
				sum += p.V
				cnt++
			}
		}
		v := math.NaN()
		if cnt > 0 {
			v = sum / float64(cnt)
		}
		out = append(out, point{T: pts[(lo+hi-1)/2].T, V: v})
	}
	return out
}

// barPart names one stacked part of a bar chart.
type barPart struct {
	Name  string
	Color string
}

// barInput is one bar: its label, the value of each part (in barPart
// order), an optional marker (a capacity) and a note at its end.
type barInput struct {
	Label  string
	Values []float64
	Marker float64 // <= 0: none
	Note   string
}

// barSeg is one drawn part of a bar.
type barSeg struct {
	X, W  float64
	Color string
	Title string
}

// barRow is one drawn bar: its rectangles from Y to Y+BarH, its label
// ending at LabelX, an optional marker line from MarkTop to MarkBottom,
// and a note after the bars.
type barRow struct {
	Y, LabelX, TextY    float64
	Label               string
	Segs                []barSeg
	HasMarker           bool
	MarkerX             float64
	MarkTop, MarkBottom float64
	Note                string
	NoteX               float64
}

// barChart is a horizontal stacked bar chart's geometry.
type barChart struct {
	Title, Desc string
	W, H        float64
	BarH        float64
	// Ticks: grid lines from TickTop to AxisY, labels at TickTextY.
	XTicks                    []tick
	TickTop, AxisY, TickTextY float64
	Rows                      []barRow
	Legend                    []legendItem
	// The marker's legend entry: a line at MarkerLegendX, text after it.
	HasMarker                        bool
	MarkerName                       string
	MarkerLegendX, MarkerLegendTextX float64
	MarkerLegendTop, MarkerLegendBot float64
	MarkerLegendTextY                float64
	Empty                            string
}

// niceScale is an axis from 0 to Top in steps of Step (1, 2 or 5 times a
// power of ten), with the decimals Step needs: every tick label of the
// axis is written with the same number of decimals.
type niceScale struct {
	Step, Top float64
	Decimals  int
}

// niceTicks picks a scale for values from 0 to hi in about target
// intervals: the smallest step of 1, 2 or 5 times a power of ten that
// covers hi in target steps or fewer, and hi rounded up to a step.
func niceTicks(hi float64, target int) niceScale {
	if target < 1 {
		target = 4
	}
	if !(hi > 0) || math.IsInf(hi, 0) {
		hi = 1
	}
	raw := hi / float64(target)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw*(1-1e-9) {
			step = m * mag
			break
		}
	}
	top := math.Ceil(hi/step-1e-9) * step
	dec := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	return niceScale{Step: step, Top: top, Decimals: dec}
}

// Ticks lists the scale's tick values, 0 to Top.
func (s niceScale) Ticks() []float64 {
	n := int(math.Round(s.Top / s.Step))
	out := make([]float64, 0, n+1)
	for i := 0; i <= n; i++ {
		out = append(out, float64(i)*s.Step)
	}
	return out
}

// Label writes v with the scale's decimals and the unit after it.
func (s niceScale) Label(v float64, unit string) string {
	return strconv.FormatFloat(v, 'f', s.Decimals, 64) + unit
}

// barAxis is how a bar chart's ticks are written: values are divided by
// Scale (0 counts as 1) and followed by Unit (" h", " GiB").
type barAxis struct {
	Scale float64
	Unit  string
}

// buildBarChart lays out one stacked bar per input, scaled to the largest
// total or marker rounded up to a nice tick; xfmt writes the values in
// the bars' titles, ax the tick labels.
func buildBarChart(title, desc string, parts []barPart, in []barInput, markerName string, xfmt func(float64) string, ax barAxis) barChart {
	const labelW, noteW, rowH, barH, legendH = 150.0, 120.0, 26.0, 16.0, 22.0
	c := barChart{Title: title, Desc: desc, W: chartW, BarH: barH, MarkerName: markerName}
	x0, x1 := labelW, chartW-noteW
	if len(in) == 0 {
		c.Empty = "Nothing to chart."
		c.H = 40
		return c
	}
	// Legend first, on top.
	x := 4.0
	for _, p := range parts {
		c.Legend = append(c.Legend, newLegendItem(x, 14, p.Color, p.Name))
		x += 16 + 6.5*float64(len(p.Name)) + 16
	}
	if markerName != "" {
		c.HasMarker, c.MarkerLegendX, c.MarkerLegendTextX = true, r1(x+1), r1(x+8)
		c.MarkerLegendTop, c.MarkerLegendBot, c.MarkerLegendTextY = 2, 16, 14
	}
	top := legendH + 8
	xmax := 0.0
	for _, b := range in {
		t := 0.0
		for _, v := range b.Values {
			t += math.Max(0, v)
		}
		xmax = math.Max(xmax, math.Max(t, b.Marker))
	}
	scale := ax.Scale
	if scale <= 0 {
		scale = 1
	}
	nice := niceTicks(xmax/scale, 5)
	xmax = nice.Top * scale
	xOf := func(v float64) float64 { return r1(x0 + (x1-x0)*v/xmax) }
	for i, b := range in {
		y := top + float64(i)*rowH
		r := barRow{Y: y, LabelX: x0 - 8, TextY: y + barH - 4, Label: b.Label, Note: b.Note, NoteX: x1 + 6,
			MarkTop: y - 3, MarkBottom: y + barH + 3}
		acc := 0.0
		for j, v := range b.Values {
			if v <= 0 || j >= len(parts) {
				continue
			}
			r.Segs = append(r.Segs, barSeg{X: xOf(acc), W: math.Max(0.5, xOf(acc+v)-xOf(acc)), Color: parts[j].Color,
				Title: b.Label + ": " + parts[j].Name + " " + xfmt(v)})
			acc += v
		}
		if b.Marker > 0 {
			r.HasMarker, r.MarkerX = true, xOf(b.Marker)
		}
		c.Rows = append(c.Rows, r)
	}
	c.AxisY = top + float64(len(in))*rowH
	c.TickTop = top - 4
	c.TickTextY = c.AxisY + 14
	ticks := nice.Ticks()
	for i, v := range ticks {
		c.XTicks = append(c.XTicks, tick{Pos: xOf(v * scale), Label: nice.Label(v, ax.Unit), Anchor: tickAnchor(i, len(ticks)-1)})
	}
	c.H = c.AxisY + 22
	return c
}

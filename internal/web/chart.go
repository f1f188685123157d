package web

import (
	"math"
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

func colour(i int) string { return palette[i%len(palette)] }

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
}

// lineChart is a time series chart's geometry.
type lineChart struct {
	Title, Desc    string
	W, H           float64
	X0, Y0, X1, Y1 float64 // plot area
	XTicks, YTicks []tick
	// YLabelX is where the y tick labels end; XLabelY the x tick labels' baseline.
	YLabelX, XLabelY float64
	Lines            []line
	Legend           []legendItem
	// Empty, when set, replaces the plot with this message.
	Empty string
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
	span := to.Sub(from).Seconds()
	xOf := func(t time.Time) float64 {
		return c.X0 + (c.X1-c.X0)*math.Min(1, math.Max(0, t.Sub(from).Seconds()/span))
	}
	yOf := func(v float64) float64 {
		return c.Y1 - (c.Y1-c.Y0)*math.Min(1, math.Max(0, v/ymax))
	}
	for i := 0; i <= 4; i++ {
		t := from.Add(time.Duration(float64(i) / 4 * float64(to.Sub(from))))
		c.XTicks = append(c.XTicks, tick{Pos: r1(xOf(t)), Label: t.UTC().Format("15:04"), Anchor: tickAnchor(i, 4)})
		v := ymax * float64(i) / 4
		c.YTicks = append(c.YTicks, tick{Pos: r1(yOf(v)), Label: yfmt(v)})
	}
	for i, s := range series {
		l := line{Name: s.Name, Color: colour(i)}
		var seg []string
		var prev time.Time
		flush := func() {
			if len(seg) == 1 { // a lone sample: a short stroke so it shows
				seg = append(seg, nudge(seg[0]))
			}
			if len(seg) > 0 {
				l.Segments = append(l.Segments, strings.Join(seg, " "))
			}
			seg = nil
		}
		for _, p := range downsample(s.Points, maxPoints) {
			if math.IsNaN(p.V) {
				flush()
				continue
			}
			if !prev.IsZero() && p.T.Sub(prev) > gap {
				flush()
			}
			prev = p.T
			seg = append(seg, coord(xOf(p.T), yOf(p.V)))
		}
		flush()
		c.Lines = append(c.Lines, l)
		c.Legend = append(c.Legend, newLegendItem(c.X0+float64(i%perRow)*colW,
			c.Y1+chartXAxisH+float64(i/perRow)*legendRowH+12, l.Color, s.Name))
	}
	return c
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

// buildBarChart lays out one stacked bar per input, scaled to the largest
// total or marker; xfmt labels the ticks and the notes.
func buildBarChart(title, desc string, parts []barPart, in []barInput, markerName string, xfmt func(float64) string) barChart {
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
	if xmax <= 0 {
		xmax = 1
	}
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
	for i := 0; i <= 4; i++ {
		v := xmax * float64(i) / 4
		c.XTicks = append(c.XTicks, tick{Pos: xOf(v), Label: xfmt(v), Anchor: tickAnchor(i, 4)})
	}
	c.H = c.AxisY + 22
	return c
}

package forecast

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"strings"
	"time"
)

// Mark is a date drawn on a plot as a vertical line: the order-by date
// of a purchase, the day it arrives.
type Mark struct {
	Day   time.Time
	Label string
}

// WriteSVG draws a history and its forecast as a self-contained SVG: the
// daily demand, the forecast's mean with its 80% and 95% bands, when
// capacity is positive the capacity line (GPU-hours a day), and the
// marks that fall within the plotted days.
func WriteSVG(w io.Writer, title string, hist Series, f Forecast, capacity float64, marks ...Mark) error {
	const (
		W, H         = 900, 360
		left, top    = 70, 40
		plotW, plotH = 780, 260
	)
	days := len(hist.Values) + len(f.Mean)
	if days == 0 {
		return fmt.Errorf("nothing to plot")
	}
	top95 := capacity
	for _, v := range hist.Values {
		top95 = max(top95, v)
	}
	for _, v := range f.Hi95 {
		top95 = max(top95, v)
	}
	top95 = max(top95*1.05, 1)
	x := func(i int) float64 { return left + float64(i)/float64(max(days-1, 1))*plotW }
	y := func(v float64) float64 { return top + plotH - v/top95*plotH }
	bw := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12" role="img" aria-label="%s">`+"\n",
		W, H, W, H, html.EscapeString(title))
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="22" font-size="15">%s</text>`+"\n", left, html.EscapeString(title))
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n",
		left, top, left, top+plotH, left, top+plotH, left+plotW, top+plotH)
	for i := 0; i <= 4; i++ {
		v := top95 * float64(i) / 4
		p(`<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, y(v)+4, v)
	}
	p(`<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">GPU-hours a day</text>`+"\n", top+plotH/2, top+plotH/2)
	for i := 0; i <= 4; i++ {
		d := (days - 1) * i / 4
		p(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(d), top+plotH+18, hist.Start.AddDate(0, 0, d).Format(time.DateOnly))
	}
	n := len(hist.Values)
	band := func(lo, hi []float64, fill string) {
		var pts strings.Builder
		for j := range hi {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(n+j), y(hi[j]))
		}
		for j := len(lo) - 1; j >= 0; j-- {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(n+j), y(lo[j]))
		}
		p(`<polygon fill="%s" stroke="none" points="%s"/>`+"\n", fill, strings.TrimSpace(pts.String()))
	}
	if len(f.Mean) > 0 {
		band(f.Lo95, f.Hi95, "#c6dbef")
		band(f.Lo80, f.Hi80, "#9ecae1")
	}
	line := func(start int, vs []float64, stroke, dash string) {
		var pts strings.Builder
		for j, v := range vs {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(start+j), y(v))
		}
		p(`<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>`+"\n", stroke, dash, strings.TrimSpace(pts.String()))
	}
	line(0, hist.Values, "#333", "")
	if len(f.Mean) > 0 {
		line(n, f.Mean, "#08519c", ` stroke-dasharray="5 3"`)
	}
	legend := "history (black), forecast (dashed), 80% and 95% intervals (bands)"
	if capacity > 0 {
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#d62728" stroke-width="1.2"/>`+"\n", left, y(capacity), left+plotW, y(capacity))
		legend += fmt.Sprintf(", capacity %.0f GPU-hours a day (red)", capacity)
	}
	for _, m := range marks {
		d := int(m.Day.Sub(hist.Start).Hours() / 24)
		if d < 0 || d >= days {
			legend += fmt.Sprintf("; %s %s (before the plot)", m.Label, m.Day.Format(time.DateOnly))
			continue
		}
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e6550d" stroke-width="1.2" stroke-dasharray="3 3"/>`+"\n", x(d), top, x(d), top+plotH)
		p(`<text x="%.1f" y="%d" fill="#e6550d">%s</text>`+"\n", x(d)+4, top+12, html.EscapeString(m.Label+" "+m.Day.Format(time.DateOnly)))
	}
	p(`<text x="%d" y="%d">%s</text>`+"\n", left, H-10, html.EscapeString(legend))
	p("</svg>\n")
	return bw.Flush()
}

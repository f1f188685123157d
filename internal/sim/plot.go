package sim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// WriteSVG draws a result as a self-contained SVG: GPU allocation over time
// (left) and the CDF of first-start waits on a log axis (right).
func WriteSVG(w io.Writer, res *Result) error {
	const (
		W, H          = 1000, 380
		panelW        = 420
		top, plotH    = 50, 260
		leftA, leftB  = 60, 560
		maxPolyPoints = 2000
	)
	bw := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	r := res.Report
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="22" font-size="15">%s</text>`+"\n", leftA, html.EscapeString(fmt.Sprintf("%s on %s: %d jobs, %d completed, allocation %.1f%%", r.Policy, r.Trace, r.Jobs, r.Completed, 100*r.GPUAllocationRatio)))

	// Left: allocation ratio over time, in days or hours.
	axes(bw, leftA, top, panelW, plotH)
	tl := res.Timeline
	capGPUs := float64(max(r.CapacityGPUs, 1))
	if len(tl) > 0 {
		t0, t1 := tl[0].T, tl[len(tl)-1].T
		span := max(t1-t0, 1)
		unit, uname := 3600.0, "hours"
		if span > 5*86400 {
			unit, uname = 86400, "days"
		}
		step := max(1, len(tl)/maxPolyPoints)
		var pts strings.Builder
		prevY := -1.0
		for i := 0; i < len(tl); i += step {
			s := tl[i]
			x := float64(leftA) + (s.T-t0)/span*panelW
			y := float64(top+plotH) - s.Allocated/capGPUs*plotH
			if prevY >= 0 {
				fmt.Fprintf(&pts, "%.1f,%.1f ", x, prevY) // step
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
			prevY = y
		}
		p(`<polyline fill="none" stroke="#1f77b4" stroke-width="1.2" points="%s"/>`+"\n", strings.TrimSpace(pts.String()))
		for i := 0; i <= 4; i++ {
			v := t0 + span*float64(i)/4
			x := float64(leftA) + float64(i)/4*panelW
			p(`<text x="%.1f" y="%d" text-anchor="middle">%.3g</text>`+"\n", x, top+plotH+16, (v-t0)/unit)
		}
		p(`<text x="%d" y="%d" text-anchor="middle">time (%s)</text>`+"\n", leftA+panelW/2, top+plotH+34, uname)
	}
	for i := 0; i <= 4; i++ {
		y := float64(top+plotH) - float64(i)/4*plotH
		p(`<text x="%d" y="%.1f" text-anchor="end">%d%%</text>`+"\n", leftA-6, y+4, i*25)
	}
	p(`<text x="%d" y="%d" text-anchor="middle">GPUs allocated (of %d)</text>`+"\n", leftA+panelW/2, top-8, r.CapacityGPUs)

	// Right: CDF of waits, log10 seconds from 1 s.
	axes(bw, leftB, top, panelW, plotH)
	p(`<text x="%d" y="%d" text-anchor="middle">CDF of wait before first start</text>`+"\n", leftB+panelW/2, top-8)
	waits := res.Waits
	maxW := 1.0
	if n := len(waits); n > 0 {
		maxW = max(waits[n-1], 10)
	}
	decades := math.Ceil(math.Log10(maxW + 1))
	xOf := func(s float64) float64 { return float64(leftB) + math.Log10(s+1)/decades*panelW }
	if n := len(waits); n > 0 {
		var pts strings.Builder
		step := max(1, n/maxPolyPoints)
		for i := 0; i < n; i += step {
			fmt.Fprintf(&pts, "%.1f,%.1f ", xOf(waits[i]), float64(top+plotH)-float64(i+1)/float64(n)*plotH)
		}
		fmt.Fprintf(&pts, "%.1f,%d", xOf(waits[n-1]), top)
		p(`<polyline fill="none" stroke="#d62728" stroke-width="1.5" points="%s"/>`+"\n", pts.String())
	}
	for d := 0; d <= int(decades); d++ {
		x := float64(leftB) + float64(d)/decades*panelW
		p(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, top+plotH+16, decadeLabel(d))
	}
	for i := 0; i <= 4; i++ {
		y := float64(top+plotH) - float64(i)/4*plotH
		p(`<text x="%d" y="%.1f" text-anchor="end">%.2f</text>`+"\n", leftB-6, y+4, float64(i)/4)
	}
	p(`<text x="%d" y="%d" text-anchor="middle">wait (log scale)</text>`+"\n", leftB+panelW/2, top+plotH+34)
	p("</svg>\n")
	return bw.Flush()
}

func axes(w io.Writer, x, y, width, height int) {
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x, y, width, height)
	for i := 1; i < 4; i++ {
		yy := y + height*i/4
		fmt.Fprintf(w, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#eee"/>`+"\n", x, yy, x+width, yy)
	}
}

func decadeLabel(d int) string {
	s := math.Pow(10, float64(d))
	switch {
	case s < 60:
		return fmt.Sprintf("%gs", s)
	case s < 3600:
		return fmt.Sprintf("%.0fm", s/60)
	case s < 86400:
		return fmt.Sprintf("%.1fh", s/3600)
	}
	return fmt.Sprintf("%.0fd", s/86400)
}

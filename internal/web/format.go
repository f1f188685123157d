package web

import (
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// funcs are the template helpers. They format values; none builds markup.
var funcs = template.FuncMap{
	"pct":      fmtPct,
	"bytes":    fmtBytes,
	"watts":    fmtWatts,
	"celsius":  fmtCelsius,
	"energy":   fmtEnergy,
	"hours":    fmtHours,
	"usd":      fmtUSD,
	"dur":      gpufleet.FormatDuration,
	"secs":     fmtSecondsPtr,
	"clock":    fmtClock,
	"clockptr": fmtClockPtr,
	"join":     strings.Join,
	"ints":     fmtInts,
	"short":    shortID,
	"num":      fmtNum,
	"numptr":   fmtNumPtr,
	"intptr":   fmtIntPtr,
	"list":     func(v ...string) []string { return v },
	"secs3":    func(ms int64) string { return gpufleet.FormatDuration(time.Duration(ms) * time.Millisecond) },
	"healthClass": func(h string) string {
		switch h {
		case "healthy", "ready", "", "none", "keep", "low", "ok",
			// rollouts, their nodes and stacks going as they should
			"running", "pending", "baking", "complete", "done", "candidate", "validated", "rendezvous":
			return "ok"
		case "degraded", "cordoned", "draining", "validating", "repairing", "order", "redeploy", "replace", "no-recommendation",
			"medium", "findings", "not-measured",
			"paused", "waiting_for_jobs", "updating", "rolling_back", "rolled_back", "aborted", "retired", "risk":
			return "warn"
		}
		return "bad"
	},
}

// dash is what a missing value shows.
const dash = "—"

func fmtPct(v *float64) string {
	if v == nil {
		return dash
	}
	return strconv.FormatFloat(*v*100, 'f', 0, 64) + "%"
}

func fmtBytes(v any) string {
	var b float64
	switch x := v.(type) {
	case int64:
		b = float64(x)
	case *int64:
		if x == nil {
			return dash
		}
		b = float64(*x)
	case int:
		b = float64(x)
	case float64:
		b = x
	default:
		return dash
	}
	const gib = 1 << 30
	switch {
	case b >= 1<<40:
		return strconv.FormatFloat(b/(1<<40), 'f', 1, 64) + " TiB"
	case b >= 100*gib:
		return strconv.FormatFloat(b/gib, 'f', 0, 64) + " GiB"
	case b >= gib:
		return strconv.FormatFloat(b/gib, 'f', 1, 64) + " GiB"
	case b >= 1<<20:
		return strconv.FormatFloat(b/(1<<20), 'f', 0, 64) + " MiB"
	case b >= 1<<10:
		return strconv.FormatFloat(b/(1<<10), 'f', 0, 64) + " KiB"
	}
	return strconv.FormatFloat(b, 'f', 0, 64) + " B"
}

func fmtWatts(v any) string {
	var w float64
	switch x := v.(type) {
	case *float64:
		if x == nil {
			return dash
		}
		w = *x
	case float64:
		w = x
	default:
		return dash
	}
	if w >= 10000 {
		return strconv.FormatFloat(w/1000, 'f', 1, 64) + " kW"
	}
	return strconv.FormatFloat(w, 'f', 0, 64) + " W"
}

func fmtCelsius(v *float64) string {
	if v == nil {
		return dash
	}
	return strconv.FormatFloat(*v, 'f', 0, 64) + " °C"
}

// fmtEnergy writes one energy in the unit energyColumn picks for it (Wh
// under 1 kWh, kWh under 1 MWh, else MWh), with about three significant
// digits: a short job's "5.56 Wh", not "0.000 kWh".
func fmtEnergy(j float64) string { return energyColumn(j).Format(j) }

func fmtHours(h float64) string {
	if h != 0 && math.Abs(h) < 0.1 {
		return strconv.FormatFloat(h, 'f', 3, 64)
	}
	return strconv.FormatFloat(h, 'f', 1, 64)
}

func fmtUSD(v float64) string {
	return "$" + strconv.FormatFloat(v, 'f', 2, 64)
}

func fmtNum(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

func fmtNumPtr(v *float64, prec int) string {
	if v == nil {
		return dash
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}

func fmtIntPtr(v *int) string {
	if v == nil {
		return dash
	}
	return strconv.Itoa(*v)
}

// fmtSecondsPtr writes optional seconds as a duration.
func fmtSecondsPtr(v *float64) string {
	if v == nil {
		return dash
	}
	return gpufleet.FormatDuration(time.Duration(*v * float64(time.Second)))
}

// fmtClock writes a time in UTC, to the second, with the date when it is
// not today.
func fmtClock(t time.Time) string {
	if t.IsZero() {
		return dash
	}
	t = t.UTC()
	if t.Format("2006-01-02") == time.Now().UTC().Format("2006-01-02") {
		return t.Format("15:04:05") + " UTC"
	}
	return t.Format("2006-01-02 15:04") + " UTC"
}

func fmtClockPtr(t *time.Time) string {
	if t == nil {
		return dash
	}
	return fmtClock(*t)
}

func fmtInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// shortID shortens a long id (a GPU UUID) for a table cell; the full one
// goes in a title.
func shortID(s string) string {
	if len(s) <= 16 {
		return s
	}
	return s[:12] + "…"
}

// columnUnit is the one unit a table column writes all its values in,
// with the decimals its largest value needs: a column never mixes units,
// and its rows line up.
type columnUnit struct {
	Name     string  // "kWh"; empty for a bare number
	Per      float64 // base units (J, h) per one of Name
	Decimals int
}

// Format writes v (in base units) in the column's unit.
func (u columnUnit) Format(v float64) string {
	s := strconv.FormatFloat(v/u.Per, 'f', u.Decimals, 64)
	if s == "-"+strconv.FormatFloat(0, 'f', u.Decimals, 64) {
		s = s[1:]
	}
	if u.Name == "" {
		return s
	}
	return s + " " + u.Name
}

// decimalsFor is how many decimals show about three significant digits
// of a column whose largest value is top (in the column's unit).
func decimalsFor(top float64) int {
	switch top = math.Abs(top); {
	case top == 0:
		return 1
	case top < 1:
		return 3
	case top < 10:
		return 2
	case top < 100:
		return 1
	}
	return 0
}

// energyColumn picks an energy column's unit from its largest value in
// joules: Wh under 1 kWh, kWh under 1 MWh, else MWh.
func energyColumn(maxJ float64) columnUnit {
	u := columnUnit{Name: "Wh", Per: 3600}
	switch m := math.Abs(maxJ); {
	case m >= 3.6e9:
		u = columnUnit{Name: "MWh", Per: 3.6e9}
	case m >= 3.6e6:
		u = columnUnit{Name: "kWh", Per: 3.6e6}
	}
	u.Decimals = decimalsFor(maxJ / u.Per)
	return u
}

// hoursColumn is an hours column's format (a bare number of hours) from
// its largest value.
func hoursColumn(maxH float64) columnUnit {
	return columnUnit{Per: 1, Decimals: decimalsFor(maxH)}
}

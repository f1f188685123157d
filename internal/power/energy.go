package power

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// DefaultPUE is the facility's power usage effectiveness (facility energy
// over IT energy) where none is set: the 2023 global average of the
// Uptime Institute Global Data Center Survey, 1.58.
const DefaultPUE = 1.58

// DefaultIntensity is the grid's carbon intensity, in grams of CO2e per
// kWh, where none is set: the world average of 2023 in Ember's Global
// Electricity Review 2024, 480 g/kWh.
const DefaultIntensity = 480.0

// FacilityJoules is the facility energy behind an IT energy at a PUE (at least
// 1; below it the PUE is taken as 1).
func FacilityJoules(itJoules, pue float64) float64 { return itJoules * max(pue, 1) }

// KWh converts joules to kilowatt-hours.
func KWh(joules float64) float64 { return joules / 3.6e6 }

// Intensity is a grid's carbon intensity: a constant, or hourly values
// (a time series file) with the constant for the hours it lacks.
type Intensity struct {
	Constant float64 // g CO2e per kWh
	hours    []hourValue
}

type hourValue struct {
	at time.Time // the hour's start, UTC
	g  float64
}

// Hourly says an hourly file gives some hours.
func (in Intensity) Hourly() bool { return len(in.hours) > 0 }

// At is the intensity in the hour of t.
func (in Intensity) At(t time.Time) float64 {
	h := t.UTC().Truncate(time.Hour)
	i, ok := slices.BinarySearchFunc(in.hours, h, func(v hourValue, t time.Time) int { return v.at.Compare(t) })
	if ok {
		return in.hours[i].g
	}
	return in.Constant
}

// CO2e is the grams of CO2e of energy (joules) used over [from, to),
// spread evenly over the hours it spans.
func (in Intensity) CO2e(joules float64, from, to time.Time) float64 {
	if len(in.hours) == 0 || !to.After(from) {
		return KWh(joules) * in.At(from)
	}
	total := to.Sub(from).Seconds()
	g := 0.0
	for t := from; t.Before(to); {
		next := t.UTC().Truncate(time.Hour).Add(time.Hour)
		if next.After(to) {
			next = to
		}
		g += KWh(joules*next.Sub(t).Seconds()/total) * in.At(t)
		t = next
	}
	return g
}

// MaxIntensity bounds an intensity value: ten times the dirtiest grid's.
const MaxIntensity = 10000.0

// ParseIntensity reads an hourly intensity file: CSV with a header
// "hour,g_co2e_per_kwh" (more columns are ignored), the hour in RFC 3339
// (truncated to the hour), one row per hour, fallback is the intensity for
// the hours the file lacks.
func ParseIntensity(r io.Reader, fallback float64) (Intensity, error) {
	in := Intensity{Constant: fallback}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return in, fmt.Errorf("%w: intensity file: no header: %v", gpufleet.ErrInvalid, err)
	}
	hc, gc := -1, -1
	for i, h := range header {
		switch strings.TrimSpace(h) {
		case "hour":
			hc = i
		case "g_co2e_per_kwh":
			gc = i
		}
	}
	if hc < 0 || gc < 0 {
		return in, fmt.Errorf("%w: intensity file: header %s: expected columns hour and g_co2e_per_kwh", gpufleet.ErrInvalid,
			gpufleet.Quote(strings.Join(header, ",")))
	}
	seen := map[time.Time]bool{}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return in, fmt.Errorf("%w: intensity file line %d: %v", gpufleet.ErrInvalid, line, err)
		}
		if len(rec) <= max(hc, gc) {
			return in, fmt.Errorf("%w: intensity file line %d: %d fields", gpufleet.ErrInvalid, line, len(rec))
		}
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(rec[hc]))
		if err != nil || t.UTC().Year() < 1 || t.UTC().Year() > 9999 {
			return in, fmt.Errorf("%w: intensity file line %d: hour %s: expected an RFC 3339 time", gpufleet.ErrInvalid, line, gpufleet.Quote(rec[hc]))
		}
		g, err := strconv.ParseFloat(strings.TrimSpace(rec[gc]), 64)
		if err != nil || math.IsNaN(g) || g < 0 || g > MaxIntensity {
			return in, fmt.Errorf("%w: intensity file line %d: g_co2e_per_kwh %s: expected 0 to %g", gpufleet.ErrInvalid, line, gpufleet.Quote(rec[gc]), MaxIntensity)
		}
		h := t.UTC().Truncate(time.Hour)
		if seen[h] {
			return in, fmt.Errorf("%w: intensity file line %d: hour %s given twice", gpufleet.ErrInvalid, line, h.Format(time.RFC3339))
		}
		seen[h] = true
		in.hours = append(in.hours, hourValue{h, g})
	}
	slices.SortFunc(in.hours, func(a, b hourValue) int { return a.at.Compare(b.at) })
	return in, nil
}

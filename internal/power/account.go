package power

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Period is the length of an energy report's buckets.
type Period string

// Periods.
const (
	PeriodAll   Period = "all" // one bucket for the whole report
	PeriodDay   Period = "day"
	PeriodWeek  Period = "week" // ISO weeks, from Monday 00:00 UTC
	PeriodMonth Period = "month"
)

// ParsePeriod reads a period; "" is PeriodAll.
func ParsePeriod(s string) (Period, error) {
	switch p := Period(strings.TrimSpace(s)); p {
	case "":
		return PeriodAll, nil
	case PeriodAll, PeriodDay, PeriodWeek, PeriodMonth:
		return p, nil
	}
	return "", fmt.Errorf("%w: period %s: expected day, week, month or all", gpufleet.ErrInvalid, gpufleet.Quote(s))
}

// Start is the start of the bucket holding t (UTC); the zero time for
// PeriodAll.
func (p Period) Start(t time.Time) time.Time {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch p {
	case PeriodDay:
		return day
	case PeriodWeek:
		return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	case PeriodMonth:
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}

// Use is GPU energy some work used over [From, To): a team's day on a
// GPU model, or a job's attempt. Key is what the report groups it by.
type Use struct {
	Key        string
	From, To   time.Time
	GPUSeconds float64
	Joules     float64
	// PUE is the facility's where the use ran; 0 takes Account's default.
	PUE float64
	// Work is the units of work the use reported, nil when none.
	Work *float64
}

// EnergyRow is one key's energy in one period.
type EnergyRow struct {
	Key string
	// PeriodStart is the bucket's start (zero for PeriodAll).
	PeriodStart time.Time
	GPUSeconds  float64
	// GPUJoules is what the GPUs drew; FacilityJoules that times the PUE;
	// CO2eGrams the facility energy at the grid's intensity.
	GPUJoules, FacilityJoules, CO2eGrams float64
	// Work sums the uses' work; nil when none reported any.
	Work *float64
}

// JoulesPerUnit is the GPU energy per unit of work: every use's energy
// (attempts that reported no work, a preempted one say, included) over
// the work reported; nil without work.
func (r EnergyRow) JoulesPerUnit() *float64 {
	if r.Work == nil || *r.Work <= 0 {
		return nil
	}
	v := r.GPUJoules / *r.Work
	return &v
}

// AvgGPUWatts is the mean draw of one GPU over the row's GPU time.
func (r EnergyRow) AvgGPUWatts() float64 {
	if r.GPUSeconds <= 0 {
		return 0
	}
	return r.GPUJoules / r.GPUSeconds
}

// Account groups uses by key and period: GPU energy, facility energy at
// each use's PUE (pue where it has none) and CO2e at the grid's intensity
// over the use's span. A use counts in the period of its start. Rows come
// in period order, then by key.
func Account(uses []Use, p Period, pue float64, in Intensity) []EnergyRow {
	type k struct {
		key string
		at  time.Time
	}
	rows := map[k]*EnergyRow{}
	for _, u := range uses {
		at := p.Start(u.From)
		r := rows[k{u.Key, at}]
		if r == nil {
			r = &EnergyRow{Key: u.Key, PeriodStart: at}
			rows[k{u.Key, at}] = r
		}
		f := FacilityJoules(u.Joules, cmp.Or(u.PUE, pue))
		r.GPUSeconds += u.GPUSeconds
		r.GPUJoules += u.Joules
		r.FacilityJoules += f
		r.CO2eGrams += in.CO2e(f, u.From, u.To)
		if u.Work != nil {
			w := *u.Work
			if r.Work != nil {
				w += *r.Work
			}
			r.Work = &w
		}
	}
	out := make([]EnergyRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b EnergyRow) int {
		return cmp.Or(a.PeriodStart.Compare(b.PeriodStart), strings.Compare(a.Key, b.Key))
	})
	return out
}

package web

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/capacity"
	"github.com/gpufleet/gpufleet/internal/forecast"
)

// capacityView is the Capacity page: for an admin, every GPU model's
// demand forecast with its procurement decision (plot with the order-by
// date, the replays) and the lifecycle table; for a member, its team's
// demand forecast (docs/CAPACITY.md).
type capacityView struct {
	Admin     bool
	Err       string
	Models    []procureCard
	Skipped   []string
	Lifecycle []lifecycleRow
	Unit      string
	// Team is a member's own forecast.
	Team *plotCard
}

type plotCard struct {
	Title, Alt string
	Plot       template.URL // an SVG as a data: URL
}

type procureCard struct {
	plotCard
	GPUModel, Action, Nodes, Crossing, OrderBy, Lead, Chance, Without, With string
	Reasons                                                                 []string
}

type lifecycleRow struct {
	GPUModel, GPUs, Age, Book, Alloc, Failures, Energy, Cost, Candidate, CandCost, BreakEven, Decision, Software string
	Reasons                                                                                                      []string
}

func (u *UI) capacityPage(r *http.Request, v *viewer) (view, error) {
	cv := capacityView{Admin: v.P.IsAdmin()}
	out := view{page: "capacity", title: "Capacity", nav: "capacity", data: &cv}
	if !cv.Admin {
		fs, ok := u.svc.(api.ForecastService)
		if !ok {
			cv.Err = "This server makes no forecasts."
			return out, nil
		}
		fc, err := fs.Forecast(r.Context(), v.P, api.ForecastQuery{HorizonDays: 28})
		if errors.Is(err, gpufleet.ErrInvalid) {
			cv.Err = err.Error()
			return out, nil
		}
		if err != nil {
			return view{}, fmt.Errorf("forecast: %w", err)
		}
		card, err := plot("Your team's GPU demand", fc.History, fc.Forecast, 0)
		if err != nil {
			return view{}, err
		}
		cv.Team = &card
		return out, nil
	}
	cs, ok := u.svc.(api.CapacityService)
	if !ok {
		cv.Err = "This server plans no capacity."
		return out, nil
	}
	pr, err := cs.Procure(r.Context(), v.P, api.ProcureQuery{HorizonDays: 180, Target: capacity.DefaultTarget, Quantile: 0.8})
	if err != nil {
		return view{}, fmt.Errorf("procure: %w", err)
	}
	for _, m := range pr.Models {
		rec := m.Recommendation
		pc, err := plot("GPU demand: "+rec.GPUModel, m.History, m.Forecast, m.CapacityGPUHoursPerDay, rec.Marks()...)
		if err != nil {
			return view{}, err
		}
		card := procureCard{plotCard: pc, GPUModel: rec.GPUModel, Action: string(rec.Action), Nodes: dash, Crossing: optDate(rec.Crossing),
			OrderBy: optDate(rec.OrderBy), Lead: fmt.Sprintf("%d days", rec.LeadTimeDays), Chance: dash, Without: dash, With: dash, Reasons: rec.Reasons}
		if rec.Action == capacity.Order {
			card.Nodes = fmt.Sprintf("%d (%d GPUs)", rec.Nodes, rec.GPUs)
		}
		if rec.Crossing != nil {
			card.Chance = fmt.Sprintf("%.0f%%", 100*rec.Probability)
		}
		if rec.Without != nil {
			card.Without = replayText(*rec.Without)
		}
		if rec.With != nil {
			card.With = replayText(*rec.With)
		}
		cv.Models = append(cv.Models, card)
	}
	for _, k := range slices.Sorted(maps.Keys(pr.Skipped)) {
		cv.Skipped = append(cv.Skipped, k+": "+pr.Skipped[k])
	}
	lc, err := cs.Lifecycle(r.Context(), v.P, api.LifecycleQuery{HorizonMonths: 36, SinceDays: 30, EnergyUSDPerKWh: capacity.DefaultEnergyUSDPerKWh,
		DepreciationYears: capacity.DefaultDepreciationYears, RepairHours: capacity.DefaultRepairHours})
	if err != nil {
		return view{}, fmt.Errorf("lifecycle: %w", err)
	}
	cv.Unit = lc.Unit
	for _, m := range lc.Models {
		row := lifecycleRow{GPUModel: m.GPUModel, GPUs: fmt.Sprint(m.GPUs), Age: dash, Book: dash, Alloc: fmt.Sprintf("%.0f%%", 100*m.Allocation),
			Failures: m.Failures.String(), Energy: fmt.Sprintf("$%.0f", m.EnergyUSDPerGPUMonth), Cost: fmt.Sprintf("$%.3f", m.CostPerUnitUSD),
			Candidate: dash, CandCost: dash, BreakEven: dash, Decision: string(m.Decision), Software: m.Software, Reasons: m.Reasons}
		if m.AgeYears != nil {
			row.Age = fmt.Sprintf("%.1f y", *m.AgeYears)
		}
		if m.BookValueUSD != nil {
			row.Book = fmt.Sprintf("$%.0f", *m.BookValueUSD)
		}
		if c := m.Candidate; c != nil {
			row.Candidate, row.CandCost, row.BreakEven = fmt.Sprintf("%s (%.1f×)", c.GPUModel, c.Speedup), fmt.Sprintf("$%.3f", c.CostPerUnitUSD), "never"
			if c.BreakEvenMonth != nil {
				row.BreakEven = fmt.Sprintf("month %d", *c.BreakEvenMonth)
			}
		}
		cv.Lifecycle = append(cv.Lifecycle, row)
	}
	return out, nil
}

// plot draws a forecast as an SVG data: URL for an img element.
func plot(title string, h forecast.Series, fc forecast.Forecast, capacity float64, marks ...forecast.Mark) (plotCard, error) {
	var buf bytes.Buffer
	if err := forecast.WriteSVG(&buf, title, h, fc, capacity, marks...); err != nil {
		return plotCard{}, err
	}
	alt := fmt.Sprintf("%s: %d days of history from %s and a %d-day forecast with 80%% and 95%% intervals", title, len(h.Values), h.Start.Format(time.DateOnly), len(fc.Mean))
	if capacity > 0 {
		alt += fmt.Sprintf("; capacity %.0f GPU-hours a day", capacity)
	}
	for _, m := range marks {
		alt += fmt.Sprintf("; %s %s", m.Label, m.Day.Format(time.DateOnly))
	}
	// Our own SVG, base64 encoded: a data: URL the page's policy allows
	// for images, never markup inlined into the page.
	return plotCard{Title: title, Alt: alt, Plot: template.URL("data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString(buf.Bytes()))}, nil
}

func replayText(r capacity.Replay) string {
	return fmt.Sprintf("%d GPUs: p90 wait %s, allocation %.0f%%", r.GPUs, gpufleet.FormatDuration(time.Duration(r.WaitP90S*float64(time.Second))), 100*r.Allocation)
}

func optDate(t *time.Time) string {
	if t == nil {
		return dash
	}
	return t.Format(time.DateOnly)
}

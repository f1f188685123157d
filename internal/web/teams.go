package web

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// period is a reporting window of the teams page.
type period struct {
	Key, Label string
}

// periods are the windows the teams page offers; the first is the default.
var periods = []period{{"month", "This month"}, {"today", "Today"}, {"7d", "Last 7 days"}, {"30d", "Last 30 days"}}

// periodRange turns a period key into its window ending now.
func periodRange(key string, now time.Time) (period, time.Time) {
	switch key {
	case "today":
		return periods[1], time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, now.Location())
	case "7d":
		return periods[2], now.Add(-7 * 24 * time.Hour)
	case "30d":
		return periods[3], now.Add(-30 * 24 * time.Hour)
	}
	return periods[0], time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, now.Location())
}

// classRow is one GPU class of a team.
type classRow struct {
	Class                    string
	Models                   string
	Quota, Used, Borrowed    int
	HasQuota                 bool
	GPUHours, EffectiveHours float64
	IdleHours, IdleUSD       float64
	EnergyJ                  float64
}

// teamCard is one team on the teams page.
type teamCard struct {
	Name           string
	Weight         float64
	BorrowingLimit string
	Rows           []classRow
	Total          classRow
}

// energyRow is one team's energy over the period.
type energyRow struct {
	Team                    string
	GPUJ, FacilityJ, CO2eKg float64
	AvgW                    float64
}

// teamsView is the teams page.
type teamsView struct {
	Periods  []period
	Period   period
	From, To string
	Teams    []teamCard
	Chart    barChart
	// Energy is each team's energy and CO2e; EnergyChart the facility
	// energy per day by team; PUE and Intensity what they use.
	Energy      []energyRow
	EnergyChart barChart
	PUE         float64
	Intensity   string
}

func (u *UI) teamsPage(r *http.Request, v *viewer) (view, error) {
	ctx := r.Context()
	now := u.now()
	per, from := periodRange(r.URL.Query().Get("period"), now)
	teams, err := u.svc.Teams(ctx, v.P)
	if err != nil {
		return view{}, fmt.Errorf("teams: %w", err)
	}
	classes, err := u.svc.Classes(ctx, v.P)
	if err != nil {
		return view{}, fmt.Errorf("classes: %w", err)
	}
	rep, err := u.svc.Usage(ctx, v.P, api.UsageQuery{From: from, To: now, By: api.EnergyByTeam, Period: "day"})
	if err != nil {
		return view{}, fmt.Errorf("usage: %w", err)
	}
	usage := map[string]api.TeamUsage{}
	for _, t := range rep.Teams {
		usage[t.Team] = t
	}
	tv := teamsView{Periods: periods, Period: per, From: fmtClock(from), To: fmtClock(now)}
	slices.SortFunc(teams, func(a, b gpufleet.Team) int { return strings.Compare(a.Name, b.Name) })
	var bars []barInput
	for _, t := range teams {
		card := newTeamCard(t, usage[t.Name], classes)
		tv.Teams = append(tv.Teams, card)
		tot := card.Total
		bars = append(bars, barInput{Label: t.Name,
			Values: []float64{tot.EffectiveHours, tot.IdleHours, max(0, tot.GPUHours-tot.EffectiveHours-tot.IdleHours)},
			Note:   fmtHours(tot.GPUHours) + " GPU-h"})
	}
	tv.Chart = buildBarChart("GPU-hours by team, "+strings.ToLower(per.Label),
		"Each team's GPU-hours, split into effective GPU-hours, idle-allocated GPU-hours and the rest.",
		[]barPart{{"effective", "#0072b2"}, {"idle allocated", "#e69f00"}, {"other allocated", "#b8c4d0"}},
		bars, "", func(x float64) string { return fmtHours(x) + " h" })
	tv.energy(rep, per)
	return view{page: "teams", title: "Teams", nav: "teams", live: "/ui/teams?period=" + per.Key, data: tv}, nil
}

// teamColors are the energy chart's team colours (Okabe-Ito), reused
// past eight teams.
var teamColors = []string{"#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000"}

// energy fills the energy table and the chart of facility energy per day
// from the report's daily energy rows by team.
func (tv *teamsView) energy(rep api.UsageReport, per period) {
	tv.PUE = rep.PUE
	tv.Intensity = fmt.Sprintf("%g g CO2e/kWh", rep.GridIntensity)
	if rep.GridIntensityHourly {
		tv.Intensity = "the hourly grid intensity file (else " + tv.Intensity + ")"
	}
	byTeam := map[string]*energyRow{}
	byDay := map[time.Time]map[string]float64{}
	gpuS := map[string]float64{}
	for _, e := range rep.Energy {
		r := byTeam[e.Team]
		if r == nil {
			r = &energyRow{Team: e.Team}
			byTeam[e.Team] = r
		}
		r.GPUJ += e.GPUEnergyKWh * 3.6e6
		r.FacilityJ += e.FacilityEnergyKWh * 3.6e6
		r.CO2eKg += e.CO2eKg
		gpuS[e.Team] += e.GPUHours * 3600
		if e.PeriodStart != nil {
			if byDay[*e.PeriodStart] == nil {
				byDay[*e.PeriodStart] = map[string]float64{}
			}
			byDay[*e.PeriodStart][e.Team] += e.FacilityEnergyKWh
		}
	}
	teams := slices.Sorted(maps.Keys(byTeam))
	var parts []barPart
	for i, t := range teams {
		r := byTeam[t]
		if gpuS[t] > 0 {
			r.AvgW = r.GPUJ / gpuS[t]
		}
		tv.Energy = append(tv.Energy, *r)
		parts = append(parts, barPart{t, teamColors[i%len(teamColors)]})
	}
	var bars []barInput
	for _, d := range slices.SortedFunc(maps.Keys(byDay), func(a, b time.Time) int { return a.Compare(b) }) {
		b := barInput{Label: d.UTC().Format("Mon 2 Jan")}
		total := 0.0
		for _, t := range teams {
			b.Values = append(b.Values, byDay[d][t])
			total += byDay[d][t]
		}
		b.Note = fmtEnergy(total * 3.6e6)
		bars = append(bars, b)
	}
	tv.EnergyChart = buildBarChart("Facility energy per day by team, "+strings.ToLower(per.Label),
		"Each day's facility energy (the GPUs' energy times the PUE), split by team.",
		parts, bars, "", func(x float64) string { return fmtEnergy(x * 3.6e6) })
}

// classOf maps a model to its quota class the way the scheduler does: a
// class named by the model first, else the first class (by name) that
// lists it, else the model itself (no quota).
func classOf(model string, classes []gpufleet.Class, quota map[string]int) string {
	for c := range quota {
		if strings.EqualFold(c, model) {
			return c
		}
	}
	sorted := slices.Clone(classes)
	slices.SortFunc(sorted, func(a, b gpufleet.Class) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range sorted {
		if strings.EqualFold(c.Name, model) {
			return c.Name
		}
		for _, m := range c.Models {
			if strings.EqualFold(m, model) {
				return c.Name
			}
		}
	}
	return model
}

// newTeamCard folds a team's quota (per class), use now (per model) and
// accounting (per model) into one row per class.
func newTeamCard(t gpufleet.Team, use api.TeamUsage, classes []gpufleet.Class) teamCard {
	card := teamCard{Name: t.Name, Weight: t.Weight, BorrowingLimit: "no limit"}
	if t.BorrowingLimit >= 0 {
		card.BorrowingLimit = fmt.Sprintf("%d GPUs", t.BorrowingLimit)
	}
	rows := map[string]*classRow{}
	models := map[string]map[string]bool{}
	row := func(class string) *classRow {
		r := rows[class]
		if r == nil {
			r = &classRow{Class: class}
			rows[class] = r
			models[class] = map[string]bool{}
		}
		return r
	}
	for c, q := range t.Quota {
		r := row(c)
		r.Quota, r.HasQuota = q, true
	}
	for m, n := range t.Used {
		c := classOf(m, classes, t.Quota)
		row(c).Used += n
		models[c][m] = true
	}
	for _, mu := range use.Models {
		c := classOf(mu.Model, classes, t.Quota)
		r := row(c)
		models[c][mu.Model] = true
		r.GPUHours += mu.GPUHours
		r.EffectiveHours += mu.EffectiveGPUHours
		r.IdleHours += mu.IdleAllocatedGPUHour
		r.IdleUSD += mu.IdleAllocatedUSD
		r.EnergyJ += mu.EnergyJoules
	}
	for _, c := range slices.Sorted(maps.Keys(rows)) {
		r := rows[c]
		r.Borrowed = max(0, r.Used-r.Quota)
		if ms := slices.Sorted(maps.Keys(models[c])); len(ms) > 0 && !(len(ms) == 1 && ms[0] == c) {
			r.Models = strings.Join(ms, ", ")
		}
		card.Rows = append(card.Rows, *r)
		card.Total.Quota += r.Quota
		card.Total.Used += r.Used
		card.Total.Borrowed += r.Borrowed
	}
	// The team totals come from the report itself: it may count usage on
	// models the per-model list leaves out.
	card.Total.GPUHours, card.Total.EffectiveHours = use.GPUHours, use.EffectiveGPUHours
	card.Total.IdleHours, card.Total.IdleUSD, card.Total.EnergyJ = use.IdleAllocatedGPUHour, use.IdleAllocatedUSD, use.EnergyJoules
	return card
}

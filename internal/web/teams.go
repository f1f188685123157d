package web

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
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
	// The cells as written: quota ("—" without one), hours and energy in
	// their column's one unit and decimals.
	QuotaText, GPUHoursText, EffectiveText, IdleText, EnergyText string
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
	// GPUText and FacilityText are the energies in their column's unit.
	GPUText, FacilityText string
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
	top := 0.0
	for _, t := range teams {
		card := newTeamCard(t, usage[t.Name], classes)
		tv.Teams = append(tv.Teams, card)
		top = max(top, card.Total.GPUHours)
	}
	hours := hoursColumn(top)
	for _, card := range tv.Teams {
		tot := card.Total
		bars = append(bars, barInput{Label: card.Name,
			Values: []float64{tot.EffectiveHours, tot.IdleHours, max(0, tot.GPUHours-tot.EffectiveHours-tot.IdleHours)},
			Note:   hours.Format(tot.GPUHours) + " GPU-h"})
	}
	tv.Chart = buildBarChart("GPU-hours by team, "+strings.ToLower(per.Label),
		"Each team's GPU-hours, split into effective GPU-hours, idle-allocated GPU-hours and the rest.",
		[]barPart{{"effective", "#0072b2"}, {"idle allocated", "#e69f00"}, {"other allocated", "#b8c4d0"}},
		bars, "", func(x float64) string { return hours.Format(x) + " h" }, barAxis{Unit: " h"})
	tv.energy(rep, per)
	return view{page: "teams", title: "Teams", nav: "teams", live: "/ui/teams?period=" + per.Key, data: tv}, nil
}

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
	var maxGPU, maxFacility float64
	colours := seriesColours(len(teams))
	for i, t := range teams {
		r := byTeam[t]
		if gpuS[t] > 0 {
			r.AvgW = r.GPUJ / gpuS[t]
		}
		maxGPU, maxFacility = max(maxGPU, r.GPUJ), max(maxFacility, r.FacilityJ)
		parts = append(parts, barPart{t, colours[i]})
	}
	gpuCol, facCol := energyColumn(maxGPU), energyColumn(maxFacility)
	for _, t := range teams {
		r := byTeam[t]
		r.GPUText, r.FacilityText = gpuCol.Format(r.GPUJ), facCol.Format(r.FacilityJ)
		tv.Energy = append(tv.Energy, *r)
	}
	var bars []barInput
	maxDay := 0.0
	for _, d := range slices.SortedFunc(maps.Keys(byDay), func(a, b time.Time) int { return a.Compare(b) }) {
		b := barInput{Label: d.UTC().Format("Mon 2 Jan")}
		total := 0.0
		for _, t := range teams {
			b.Values = append(b.Values, byDay[d][t])
			total += byDay[d][t]
		}
		maxDay = max(maxDay, total)
		bars = append(bars, b)
	}
	dayCol := energyColumn(maxDay * 3.6e6)
	for i := range bars {
		total := 0.0
		for _, v := range bars[i].Values {
			total += v
		}
		bars[i].Note = dayCol.Format(total * 3.6e6)
	}
	tv.EnergyChart = buildBarChart("Facility energy per day by team, "+strings.ToLower(per.Label),
		"Each day's facility energy (the GPUs' energy times the PUE), split by team.",
		parts, bars, "", func(x float64) string { return dayCol.Format(x * 3.6e6) }, barAxis{Scale: dayCol.Per / 3.6e6, Unit: " " + dayCol.Name})
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
		card.Total.Quota += r.Quota // 0 for a class without a quota
		card.Total.Used += r.Used
		card.Total.Borrowed += r.Borrowed
	}
	// The team totals come from the report itself: it may count usage on
	// models the per-model list leaves out.
	card.Total.GPUHours, card.Total.EffectiveHours = use.GPUHours, use.EffectiveGPUHours
	card.Total.IdleHours, card.Total.IdleUSD, card.Total.EnergyJ = use.IdleAllocatedGPUHour, use.IdleAllocatedUSD, use.EnergyJoules
	card.format()
	return card
}

// format writes the card's cells: a quota, or "—" for a class without
// one (and for the total when no class has one, since a sum of no quotas
// is not a quota of 0); the hours columns all in one number of decimals
// (so idle never reads above the GPU-hours it is part of), and the
// energy column in one unit picked from its largest value.
func (c *teamCard) format() {
	topH, topJ := c.Total.GPUHours, c.Total.EnergyJ
	for _, r := range c.Rows {
		topH, topJ = max(topH, r.GPUHours), max(topJ, r.EnergyJ)
	}
	hours, energy := hoursColumn(topH), energyColumn(topJ)
	cell := func(r *classRow) {
		r.QuotaText = dash
		if r.HasQuota {
			r.QuotaText = strconv.Itoa(r.Quota)
		}
		r.GPUHoursText, r.EffectiveText, r.IdleText = hours.Format(r.GPUHours), hours.Format(r.EffectiveHours), hours.Format(r.IdleHours)
		r.EnergyText = energy.Format(r.EnergyJ)
	}
	for i := range c.Rows {
		cell(&c.Rows[i])
		c.Total.HasQuota = c.Total.HasQuota || c.Rows[i].HasQuota
	}
	cell(&c.Total)
}

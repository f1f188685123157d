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

// teamsView is the teams page.
type teamsView struct {
	Periods  []period
	Period   period
	From, To string
	Teams    []teamCard
	Chart    barChart
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
	rep, err := u.svc.Usage(ctx, v.P, api.UsageQuery{From: from, To: now})
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
	return view{page: "teams", title: "Teams", nav: "teams", live: "/ui/teams?period=" + per.Key, data: tv}, nil
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

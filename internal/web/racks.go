package web

import (
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/power"
)

// rackWindow is how far back the fleet page charts the racks' draw.
const rackWindow = time.Hour

// rackChartEntry caches one principal's rack chart for a minute: it is
// built from per-minute rollups.
type rackChartEntry struct {
	at    time.Time
	chart lineChart
}

// rackChart charts each rack's draw over the last hour as a share of its
// budget: its GPUs' measured draw (the minute rollups) plus the host
// overhead of each node that reported, with the budget at 100 %.
func (u *UI) rackChart(r *http.Request, v *viewer, racks []gpufleet.Rack, nodes []gpufleet.Node) lineChart {
	now := u.now()
	key := v.P.TokenID
	u.energyMu.Lock()
	e, ok := u.rackCharts[key]
	u.energyMu.Unlock()
	if ok && now.Sub(e.at) < time.Minute {
		return e.chart
	}
	from := now.Add(-rackWindow)
	byNode := map[string][]api.GPURollup{}
	for _, r0 := range racks {
		for _, m := range r0.Members {
			if _, done := byNode[m]; done {
				continue
			}
			rs, err := u.svc.Rollups(r.Context(), v.P, api.RollupQuery{Node: m, From: from, To: now})
			if err != nil {
				u.log.LogAttrs(r.Context(), slog.LevelDebug, "rack chart: rollups", slog.String("node", m), slog.Any("err", err))
			}
			byNode[m] = rs
		}
	}
	series, top := rackDraw(racks, nodes, byNode, func(n gpufleet.Node) float64 {
		if len(n.GPUs) == 0 {
			return 0
		}
		g, err := u.cat.Lookup(n.GPUs[0].Model)
		if err != nil {
			return float64(power.DefaultHostOverhead)
		}
		return float64(power.HostOverhead(g, len(n.GPUs)))
	})
	if len(series) > 0 {
		budget := seriesData{Name: "budget"}
		for t := from; !t.After(now); t = t.Add(time.Minute) { // points closer than the chart's gap
			budget.Points = append(budget.Points, point{T: t, V: 1})
		}
		series = append(series, budget)
	}
	c := buildLineChart("Rack draw against budget", "Each rack's draw per minute over the last hour: its GPUs' measured draw plus its hosts' overhead at load, as a share of its power budget; the budget is 100%.",
		from, now, math.Max(1.2, math.Ceil(top*10)/10), func(x float64) string { return strconv.Itoa(int(math.Round(x*100))) + "%" }, series, 150*time.Second)
	u.energyMu.Lock()
	if len(u.rackCharts) > maxSessions {
		clear(u.rackCharts)
	}
	u.rackCharts[key] = rackChartEntry{at: now, chart: c}
	u.energyMu.Unlock()
	return c
}

// rackDraw is, per rack with a budget, its draw per minute as a share of
// the budget: the members' GPU power (minute means) plus host(node) for
// each member that reported in the minute. It returns the largest share.
func rackDraw(racks []gpufleet.Rack, nodes []gpufleet.Node, byNode map[string][]api.GPURollup, host func(gpufleet.Node) float64) ([]seriesData, float64) {
	node := map[string]gpufleet.Node{}
	for _, n := range nodes {
		node[n.Name] = n
	}
	var out []seriesData
	top := 0.0
	for _, r := range racks {
		if r.PowerBudgetWatts <= 0 {
			continue
		}
		watts := map[time.Time]float64{}
		for _, m := range r.Members {
			seen := map[time.Time]bool{}
			for _, x := range byNode[m] {
				if x.PowerWatts == nil {
					continue
				}
				watts[x.Minute] += *x.PowerWatts
				if !seen[x.Minute] {
					seen[x.Minute] = true
					watts[x.Minute] += host(node[m])
				}
			}
		}
		s := seriesData{Name: r.Name}
		for _, t := range slices.SortedFunc(maps.Keys(watts), time.Time.Compare) {
			f := watts[t] / float64(r.PowerBudgetWatts)
			top = math.Max(top, f)
			s.Points = append(s.Points, point{T: t, V: f})
		}
		out = append(out, s)
	}
	return out, top
}

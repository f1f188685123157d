package web

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// utilBuckets are the fleet grid's colour classes, by effective
// utilization; the legend lists them.
var utilBuckets = []struct {
	Class, Label string
	Below        float64
}{
	{"u0", "0–20%", 0.2},
	{"u1", "20–40%", 0.4},
	{"u2", "40–60%", 0.6},
	{"u3", "60–80%", 0.8},
	{"u4", "80–100%", 2},
}

// utilClass is the colour class of an effective utilization.
func utilClass(v *float64) string {
	if v == nil {
		return "unk"
	}
	for _, b := range utilBuckets {
		if *v < b.Below {
			return b.Class
		}
	}
	return "u4"
}

// gpuCell is one GPU of the fleet grid.
type gpuCell struct {
	Node      string
	Index     int
	UUID      string
	Model     string
	Class     string // utilization colour
	Pct       string
	Allocated bool
	Idle      bool // allocated at under api.IdleThreshold effective utilization
	Team      string
	MIG       int
	Health    string
	State     string
	Label     string // the accessible description (also the tooltip)
}

// gpuGroup is the GPUs of one NVLink domain (or the PCIe-only ones).
type gpuGroup struct {
	Label string
	Cells []gpuCell
}

// fleetNode is one node card of the grid.
type fleetNode struct {
	Name, State, Health, Reason string
	Summary                     string
	Groups                      []gpuGroup
}

// fleetTotals are the fleet's headline numbers (over the filtered GPUs).
type fleetTotals struct {
	GPUs, Allocated, Idle, Unhealthy int
	EffUtil                          *float64
	PowerW                           float64
	HavePower                        bool
	EnergyToday                      string
}

// rackRow is one rack of the fleet page: its projected draw against its
// budget, and its GPUs throttling for power or heat.
type rackRow struct {
	Name                string
	Budget, Draw, Rated string
	UsedPct             int // projected draw over budget, percent (0 without a budget)
	Near, Over          bool
	Nodes, GPUs         int
	Throttling          int
	ThrottlingExplained string
}

// powerThrottle are the clock-event reasons (the agent's names) that
// mean a GPU runs slower for power or heat.
var powerThrottle = []string{"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake"}

// nearBudget is the share of its budget from which a rack shows as near.
const nearBudget = 0.9

// rackRows is the fleet page's racks.
func rackRows(racks []gpufleet.Rack, nodes []gpufleet.Node) []rackRow {
	byName := map[string]gpufleet.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	var out []rackRow
	for _, r := range racks {
		row := rackRow{Name: r.Name, Budget: r.PowerBudgetWatts.Human(), Rated: r.RatedWatts.Human(), Draw: dash, Nodes: len(r.Members)}
		if r.DrawWatts != nil {
			row.Draw = r.DrawWatts.Human()
			if r.PowerBudgetWatts > 0 {
				f := float64(*r.DrawWatts / r.PowerBudgetWatts)
				row.UsedPct, row.Near, row.Over = int(math.Round(100*f)), f >= nearBudget, f > 1
			}
		}
		reasons := map[string]int{}
		for _, m := range r.Members {
			for _, g := range byName[m].GPUs {
				row.GPUs++
				if g.Live == nil {
					continue
				}
				hit := false
				for _, t := range g.Live.ThrottleReasons {
					if slices.Contains(powerThrottle, t) {
						reasons[t]++
						hit = true
					}
				}
				if hit {
					row.Throttling++
				}
			}
		}
		var parts []string
		for _, t := range slices.Sorted(maps.Keys(reasons)) {
			parts = append(parts, fmt.Sprintf("%s on %d", t, reasons[t]))
		}
		row.ThrottlingExplained = strings.Join(parts, ", ")
		out = append(out, row)
	}
	return out
}

// fleetView is the fleet page.
type fleetView struct {
	Models, Teams []string
	Model, Team   string
	Racks         []rackRow
	RackChart     *lineChart
	Nodes         []fleetNode
	Totals        fleetTotals
	Buckets       any
}

func (u *UI) fleetPage(r *http.Request, v *viewer) (view, error) {
	ctx := r.Context()
	nodes, err := u.svc.Nodes(ctx, v.P)
	if err != nil {
		return view{}, fmt.Errorf("nodes: %w", err)
	}
	teams, err := u.svc.Teams(ctx, v.P)
	if err != nil {
		return view{}, fmt.Errorf("teams: %w", err)
	}
	q := r.URL.Query()
	fv := fleetView{Model: q.Get("model"), Team: q.Get("team"), Buckets: utilBuckets}
	models := map[string]bool{}
	for _, t := range teams {
		fv.Teams = append(fv.Teams, t.Name)
	}
	slices.Sort(fv.Teams)
	if !slices.Contains(fv.Teams, fv.Team) { // only a team the viewer may see
		fv.Team = ""
	}
	slices.SortFunc(nodes, func(a, b gpufleet.Node) int { return strings.Compare(a.Name, b.Name) })
	var effSum float64
	effN := 0
	for _, n := range nodes {
		fn := fleetNode{Name: n.Name, State: string(n.State), Health: string(n.Health), Reason: n.Reason}
		byDomain := map[string][]gpuCell{}
		var domains []string
		count := map[string]int{}
		for _, g := range n.GPUs {
			models[g.Model] = true
			if fv.Model != "" && g.Model != fv.Model {
				continue
			}
			c := newCell(n, g)
			if fv.Team != "" && c.Team != fv.Team {
				continue
			}
			count[g.Model]++
			if _, ok := byDomain[g.NVLinkDomain]; !ok {
				domains = append(domains, g.NVLinkDomain)
			}
			byDomain[g.NVLinkDomain] = append(byDomain[g.NVLinkDomain], c)
			t := &fv.Totals
			t.GPUs++
			if c.Allocated {
				t.Allocated++
			}
			if c.Idle {
				t.Idle++
			}
			if g.Health == gpufleet.Unhealthy {
				t.Unhealthy++
			}
			if g.Live != nil && g.Live.EffectiveUtilization != nil {
				effSum += *g.Live.EffectiveUtilization
				effN++
			}
			if g.Live != nil && g.Live.PowerWatts != nil {
				t.PowerW += *g.Live.PowerWatts
				t.HavePower = true
			}
		}
		if len(domains) == 0 {
			continue
		}
		for _, d := range domains {
			label := "PCIe"
			if d != "" {
				label = "NVLink domain " + shortDomain(d)
			}
			cells := byDomain[d]
			slices.SortFunc(cells, func(a, b gpuCell) int { return cmp.Compare(a.Index, b.Index) })
			fn.Groups = append(fn.Groups, gpuGroup{Label: label, Cells: cells})
		}
		var parts []string
		for _, m := range slices.Sorted(maps.Keys(count)) {
			parts = append(parts, strconv.Itoa(count[m])+"× "+m)
		}
		fn.Summary = strings.Join(parts, ", ")
		fv.Nodes = append(fv.Nodes, fn)
	}
	fv.Models = slices.Sorted(maps.Keys(models))
	if effN > 0 {
		e := effSum / float64(effN)
		fv.Totals.EffUtil = &e
	}
	fv.Totals.EnergyToday = u.energyToday(r, v, nodes)
	racks, err := u.svc.Racks(ctx, v.P)
	if err != nil {
		return view{}, fmt.Errorf("racks: %w", err)
	}
	fv.Racks = rackRows(racks, nodes)
	if slices.ContainsFunc(racks, func(r gpufleet.Rack) bool { return r.PowerBudgetWatts > 0 }) {
		c := u.rackChart(r, v, racks, nodes)
		fv.RackChart = &c
	}
	live := "/ui/fleet"
	if qs := filterQuery(fv.Model, fv.Team); qs != "" {
		live += "?" + qs
	}
	return view{page: "fleet", title: "Fleet", nav: "fleet", live: live, data: fv}, nil
}

// shortDomain shortens an NVLink domain id ("nvlink:GPU-68b372de-...")
// to its first eight significant characters.
func shortDomain(d string) string {
	s := strings.TrimPrefix(strings.TrimPrefix(d, "nvlink:"), "GPU-")
	if len(s) > 8 {
		s = s[:8]
	}
	return s
}

func filterQuery(model, team string) string {
	q := url.Values{}
	if model != "" {
		q.Set("model", model)
	}
	if team != "" {
		q.Set("team", team)
	}
	return q.Encode()
}

// newCell describes one GPU for the grid.
func newCell(n gpufleet.Node, g gpufleet.NodeGPU) gpuCell {
	c := gpuCell{Node: n.Name, Index: g.Index, UUID: g.UUID, Model: g.Model, MIG: len(g.MIGInstances),
		Health: string(g.Health), State: string(g.State), Class: "unk", Pct: dash}
	if g.Health == "" {
		c.Health = string(gpufleet.Healthy)
	}
	var eff *float64
	if l := g.Live; l != nil {
		eff = l.EffectiveUtilization
		c.Allocated, c.Team = l.Allocated, l.Team
		c.Class, c.Pct = utilClass(eff), fmtPct(eff)
		c.Idle = l.Allocated && (eff == nil || *eff < api.IdleThreshold)
	}
	if n.State == gpufleet.NodeDown {
		c.Class, c.Pct = "unk", dash
	}
	parts := []string{fmt.Sprintf("%s GPU %d, %s", n.Name, g.Index, g.Model)}
	if eff != nil {
		parts = append(parts, fmtPct(eff)+" effective utilization")
	} else {
		parts = append(parts, "no utilization reading")
	}
	switch {
	case c.Allocated && c.Team != "":
		parts = append(parts, "allocated to "+c.Team)
	case c.Allocated:
		parts = append(parts, "allocated")
	default:
		parts = append(parts, "free")
	}
	if c.Idle {
		parts = append(parts, "allocated but idle")
	}
	if c.MIG > 0 {
		parts = append(parts, fmt.Sprintf("MIG with %d instances", c.MIG))
	}
	h := c.Health
	if g.Reason != "" {
		h += " (" + g.Reason + ")"
	}
	parts = append(parts, h)
	if g.State != "" && g.State != gpufleet.NodeReady {
		parts = append(parts, string(g.State))
	}
	if g.Live != nil && len(g.Live.RecentXIDs) > 0 {
		parts = append(parts, "recent XIDs "+fmtInts(g.Live.RecentXIDs))
	}
	c.Label = strings.Join(parts, "; ")
	return c
}

// energyEntry caches one principal's fleet energy since midnight: the
// rollups are per minute, so reading them more often gains nothing.
type energyEntry struct {
	at    time.Time
	day   string
	value string
}

// energyToday sums the per-GPU rollups of the visible nodes since local
// midnight, cached for a minute per principal.
func (u *UI) energyToday(r *http.Request, v *viewer, nodes []gpufleet.Node) string {
	now := u.now()
	day := now.Format("2006-01-02")
	key := v.P.TokenID
	u.energyMu.Lock()
	e, ok := u.energy[key]
	u.energyMu.Unlock()
	if ok && e.day == day && now.Sub(e.at) < time.Minute {
		return e.value
	}
	from := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, now.Location())
	total := 0.0
	for _, n := range nodes {
		rs, err := u.svc.Rollups(r.Context(), v.P, api.RollupQuery{Node: n.Name, From: from, To: now})
		if err != nil {
			u.log.LogAttrs(r.Context(), slog.LevelDebug, "energy today: rollups", slog.String("node", n.Name), slog.Any("err", err))
			return dash
		}
		for _, x := range rs {
			total += x.EnergyJoules
		}
	}
	val := fmtEnergy(total)
	u.energyMu.Lock()
	if len(u.energy) > maxSessions {
		clear(u.energy)
	}
	u.energy[key] = energyEntry{at: now, day: day, value: val}
	u.energyMu.Unlock()
	return val
}

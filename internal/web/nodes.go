package web

import (
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
	"github.com/gpufleet/gpufleet/internal/bench"
)

// nodeRow is one node of the nodes page.
type nodeRow struct {
	Name, State, Health, Reason string
	Heartbeat                   string
	Stale                       bool
	GPUs                        string
	Driver, CUDA, Firmware      string
	MaxTemp                     *float64
	Power                       float64
	HavePower                   bool
	XIDs                        string
	Actions                     []nodeActionLink
	StateReason                 string
	// Isolation counts the GPUs by what whole-GPU or MIG work gets on
	// them (gpufleet.IsolationSummary).
	Isolation string
}

// nodeActionLink is an admin action button (to its confirmation page).
type nodeActionLink struct {
	Label, Href, Aria string
}

// nodesView is the nodes page.
type nodesView struct {
	Nodes []nodeRow
}

// nodeActions are the actions the dashboard offers, in button order.
var nodeActions = []api.NodeAction{api.Cordon, api.Uncordon, api.Drain, api.Repaired}

// actionsFor lists the actions that make sense for a node's state.
func actionsFor(n gpufleet.Node) []nodeActionLink {
	var out []nodeActionLink
	gpuInRepair := slices.ContainsFunc(n.GPUs, func(g gpufleet.NodeGPU) bool { return g.State == gpufleet.NodeRepairing })
	for _, a := range nodeActions {
		switch {
		case a == api.Cordon && n.State != gpufleet.NodeReady,
			a == api.Uncordon && n.State != gpufleet.NodeCordoned && n.State != gpufleet.NodeDraining,
			a == api.Drain && (n.State == gpufleet.NodeDraining || n.State == gpufleet.NodeRepairing || n.State == gpufleet.NodeValidating),
			a == api.Repaired && n.State != gpufleet.NodeRepairing && !gpuInRepair:
			continue
		}
		label := strings.ToUpper(string(a[:1])) + string(a[1:])
		out = append(out, nodeActionLink{Label: label, Href: "/nodes/" + url.PathEscape(n.Name) + "/" + string(a),
			Aria: label + " node " + n.Name})
	}
	return out
}

func newNodeRow(n gpufleet.Node, admin bool) nodeRow {
	row := nodeRow{Name: n.Name, State: string(n.State), Health: string(n.Health), Reason: n.HealthReason, StateReason: n.StateReason, Heartbeat: dash,
		Driver: orDash(n.Versions["driver"]), CUDA: orDash(n.Versions["cuda"]), Firmware: orDash(n.Versions["vbios"]),
		Isolation: gpufleet.IsolationSummary(n)}
	if row.Health == "" {
		row.Health = string(gpufleet.Healthy)
	}
	if n.HeartbeatAgeS != nil {
		row.Heartbeat = gpufleet.FormatDuration(time.Duration(*n.HeartbeatAgeS*float64(time.Second))) + " ago"
		row.Stale = *n.HeartbeatAgeS > 10
	}
	count := map[string]int{}
	var models []string
	xids := map[int]bool{}
	for _, g := range n.GPUs {
		if count[g.Model] == 0 {
			models = append(models, g.Model)
		}
		count[g.Model]++
		if l := g.Live; l != nil {
			if l.TemperatureC != nil && (row.MaxTemp == nil || *l.TemperatureC > *row.MaxTemp) {
				t := *l.TemperatureC
				row.MaxTemp = &t
			}
			if l.PowerWatts != nil {
				row.Power += *l.PowerWatts
				row.HavePower = true
			}
			for _, x := range l.RecentXIDs {
				xids[x] = true
			}
		}
	}
	var parts []string
	for _, m := range models {
		parts = append(parts, strconv.Itoa(count[m])+"× "+m)
	}
	row.GPUs = strings.Join(parts, ", ")
	if len(xids) > 0 {
		var xs []int
		for x := range xids {
			xs = append(xs, x)
		}
		slices.Sort(xs)
		row.XIDs = fmtInts(xs)
	}
	if admin {
		row.Actions = actionsFor(n)
	}
	return row
}

func orDash(s string) string {
	if s == "" {
		return dash
	}
	return s
}

func (u *UI) nodesPage(r *http.Request, v *viewer) (view, error) {
	nodes, err := u.svc.Nodes(r.Context(), v.P)
	if err != nil {
		return view{}, fmt.Errorf("nodes: %w", err)
	}
	slices.SortFunc(nodes, func(a, b gpufleet.Node) int { return strings.Compare(a.Name, b.Name) })
	var nv nodesView
	for _, n := range nodes {
		nv.Nodes = append(nv.Nodes, newNodeRow(n, v.Admin()))
	}
	return view{page: "nodes", title: "Nodes", nav: "nodes", live: "/ui/nodes", data: nv}, nil
}

// gpuRow is one GPU of a node's page.
type gpuRow struct {
	Index                       int
	UUID, Model, State, Health  string
	Reason, StateReason         string
	Util, SM, Eff               *float64
	MemUsed                     *int64
	MemTotal                    int64
	Power, Temp                 *float64
	Allocated                   bool
	Team                        string
	XIDs, Throttle              string
	MIG                         []gpufleet.MIGInstance
	UtilClass, EffText, Summary string
	// Mechanism is what whole-GPU or MIG work gets on the GPU, with its
	// isolation and overhead; MechanismTitle says it in full.
	Mechanism, Isolation, MechanismTitle string
}

// nodeView is one node's page.
type nodeView struct {
	Row      nodeRow
	Labels   []specRow
	Versions []specRow
	GPUs     []gpuRow
	// Bench are the node's newest benchmark figures against their model's
	// fleet median (each GPU's own figures, and the all-reduce).
	Bench    []benchRow
	BenchErr string
	Util     lineChart
	Power    lineChart
	// ChartsLive is the charts' fragment URL; ChartsPollMS its interval.
	ChartsLive   string
	ChartsPollMS int
}

func (u *UI) nodePage(r *http.Request, v *viewer) (view, error) { return u.node(r, v, true) }

// nodeFragment is the node page's live region, without the charts.
func (u *UI) nodeFragment(r *http.Request, v *viewer) (view, error) { return u.node(r, v, false) }

// nodeChartsFragment is the node page's charts alone.
func (u *UI) nodeChartsFragment(r *http.Request, v *viewer) (view, error) {
	vw, err := u.node(r, v, true)
	vw.tmpl = "charts"
	return vw, err
}

// node builds a node's page, with its charts when asked.
func (u *UI) node(r *http.Request, v *viewer, charts bool) (view, error) {
	ctx := r.Context()
	name := r.PathValue("name")
	n, err := u.svc.Node(ctx, v.P, name)
	if err != nil {
		return view{}, fmt.Errorf("node %s: %w", name, err)
	}
	nv := nodeView{Row: newNodeRow(n, v.Admin()), ChartsLive: "/ui/nodes/" + url.PathEscape(n.Name) + "/charts", ChartsPollMS: chartPollMS}
	for _, k := range slices.Sorted(maps.Keys(n.Labels)) {
		nv.Labels = append(nv.Labels, specRow{k, n.Labels[k]})
	}
	for _, k := range slices.Sorted(maps.Keys(n.Versions)) {
		nv.Versions = append(nv.Versions, specRow{k, n.Versions[k]})
	}
	names := map[string]string{}
	for _, g := range n.GPUs {
		names[g.UUID] = fmt.Sprintf("GPU %d", g.Index)
		gr := gpuRow{Index: g.Index, UUID: g.UUID, Model: g.Model, State: string(g.State), Health: string(g.Health),
			Reason: g.Reason, StateReason: g.StateReason, MemTotal: g.MemoryBytes, MIG: g.MIGInstances, UtilClass: "unk"}
		m := gpufleet.GPUMechanism(gpufleet.NodeVirtualization(n.Labels), g)
		gr.Mechanism, gr.Isolation, gr.MechanismTitle = m.Name, m.Short(), m.Describe()
		if l := g.Live; l != nil {
			gr.Util, gr.SM, gr.Eff, gr.MemUsed, gr.Power, gr.Temp = l.Utilization, l.SMActivity, l.EffectiveUtilization, l.MemoryUsedBytes, l.PowerWatts, l.TemperatureC
			gr.Allocated, gr.Team = l.Allocated, l.Team
			gr.XIDs, gr.Throttle = fmtInts(l.RecentXIDs), strings.Join(l.ThrottleReasons, ", ")
			gr.UtilClass = utilClass(l.EffectiveUtilization)
		}
		nv.GPUs = append(nv.GPUs, gr)
	}
	nv.Bench, nv.BenchErr = u.benchRows(r, v, n.Name)
	if !charts {
		return view{page: "node", title: "Node " + n.Name, nav: "nodes", live: "/ui/nodes/" + url.PathEscape(n.Name), data: nv}, nil
	}
	now := u.now()
	from := now.Add(-time.Hour)
	rs, err := u.svc.Rollups(ctx, v.P, api.RollupQuery{Node: n.Name, From: from, To: now})
	if err != nil {
		u.log.LogAttrs(ctx, slog.LevelWarn, "node rollups", slog.String("node", n.Name), slog.Any("err", err))
		nv.Util = lineChart{W: chartW, H: 40, Empty: "Utilization history is unavailable."}
		nv.Power = lineChart{W: chartW, H: 40, Empty: "Power history is unavailable."}
	} else {
		util, power, pmax := nodeSeries(rs, names)
		nv.Util = buildLineChart("Effective utilization per GPU, last hour", "Per-minute effective utilization of each GPU of "+n.Name+".",
			from, now, 1, func(x float64) string { return strconv.Itoa(int(math.Round(x*100))) + "%" }, util, 150*time.Second)
		nv.Power = buildLineChart("Power per GPU, last hour", "Per-minute mean power of each GPU of "+n.Name+".",
			from, now, pmax, func(x float64) string { return strconv.Itoa(int(math.Round(x))) + " W" }, power, 150*time.Second)
	}
	return view{page: "node", title: "Node " + n.Name, nav: "nodes", live: "/ui/nodes/" + url.PathEscape(n.Name), data: nv}, nil
}

// benchRow is one benchmark figure of a node against the fleet.
type benchRow struct {
	Where, Figure, Measured, Spec, Ratio, Median, OfMedian, Verdict, When, Why string
	Bad                                                                        bool
}

// benchRows reads a node's newest benchmark figures with their fleet
// comparisons; the GPU-to-GPU pairs are left out (each GPU's p2p figure is
// their median).
func (u *UI) benchRows(r *http.Request, v *viewer, node string) ([]benchRow, string) {
	bs, ok := u.svc.(api.BenchService)
	if !ok {
		return nil, "This server runs no benchmarks."
	}
	list, err := bs.BenchResults(r.Context(), v.P, api.BenchQuery{Node: node})
	if err != nil {
		u.log.LogAttrs(r.Context(), slog.LevelWarn, "node bench results", slog.String("node", node), slog.Any("err", err))
		return nil, "Benchmark figures are unavailable."
	}
	var out []benchRow
	for _, res := range list.Results {
		if !bench.Judged(res.Figure) {
			continue
		}
		row := benchRow{Where: "GPU " + strconv.Itoa(res.GPU), Figure: res.Name, Measured: bench.Human(res.Value, res.Unit),
			Spec: "—", Ratio: "—", Median: "—", OfMedian: "—", Verdict: "no baseline", When: res.At.UTC().Format("2006-01-02 15:04"), Why: string(res.Trigger)}
		peers := "GPUs"
		switch {
		case res.Nodes > 1:
			row.Where, peers = fmt.Sprintf("%d GPUs, %d nodes", res.GPUs, res.Nodes), "runs"
		case res.Test == bench.AllReduce:
			row.Where = fmt.Sprintf("%d GPUs", res.GPUs)
		}
		if res.Spec != nil && res.Ratio != nil {
			row.Spec, row.Ratio = bench.Human(*res.Spec, res.Unit), strconv.FormatFloat(*res.Ratio, 'f', 2, 64)
		}
		if c := res.Fleet; c != nil && c.Peers > 0 {
			row.Median = fmt.Sprintf("%s (%d %s)", bench.Human(c.Median, res.Unit), c.Peers, peers)
			if c.Fraction != nil {
				row.OfMedian = strconv.FormatFloat(*c.Fraction, 'f', 2, 64)
				row.Verdict, row.Bad = "ok", c.Degraded
				if c.Degraded {
					row.Verdict = fmt.Sprintf("under the %.2f gate", c.Gate)
				}
			}
		}
		if why := res.Failed(); why != "" {
			row.Verdict, row.Bad = "failed: "+why, true
		}
		out = append(out, row)
	}
	return out, ""
}

// nodeSeries splits a node's rollups into utilization and power series
// per GPU, in GPU name order.
func nodeSeries(rs []api.GPURollup, names map[string]string) (util, power []seriesData, pmax float64) {
	idx := map[string]int{}
	var order []string
	for _, x := range rs {
		if _, ok := idx[x.GPU]; !ok {
			idx[x.GPU] = len(order)
			order = append(order, x.GPU)
		}
	}
	slices.SortFunc(order, func(a, b string) int { return compareNatural(labelOf(names, a), labelOf(names, b)) })
	for i, g := range order {
		idx[g] = i
		util = append(util, seriesData{Name: labelOf(names, g)})
		power = append(power, seriesData{Name: labelOf(names, g)})
	}
	for _, x := range rs {
		i := idx[x.GPU]
		uv, pv := math.NaN(), math.NaN()
		if x.EffectiveUtilization != nil {
			uv = *x.EffectiveUtilization
		}
		if x.PowerWatts != nil {
			pv = *x.PowerWatts
			pmax = math.Max(pmax, pv)
		}
		util[i].Points = append(util[i].Points, point{T: x.Minute, V: uv})
		power[i].Points = append(power[i].Points, point{T: x.Minute, V: pv})
	}
	pmax = math.Max(100, math.Ceil(pmax/100)*100)
	return util, power, pmax
}

func labelOf(names map[string]string, uuid string) string {
	if n := names[uuid]; n != "" {
		return n
	}
	return shortID(uuid)
}

// compareNatural orders "GPU 2" before "GPU 10".
func compareNatural(a, b string) int {
	ap, an := splitNum(a)
	bp, bn := splitNum(b)
	if ap != bp {
		return strings.Compare(ap, bp)
	}
	return an - bn
}

func splitNum(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, _ := strconv.Atoi(s[i:])
	return s[:i], n
}

// actionText words each node action for its confirmation page.
var actionText = map[api.NodeAction]string{
	api.Cordon:   "No new work is placed on the node; what runs there keeps running.",
	api.Uncordon: "The node returns to ready and takes new work.",
	api.Drain:    "The node is cordoned and its running attempts are stopped (checkpoint signal, then the grace period); their jobs go back to the queue without using their retries.",
	api.Repaired: "The node (or its GPUs in repair) goes to validating: its agent checks the GPUs, and it returns to ready only if the check passes.",
}

func parseNodeAction(s string) (api.NodeAction, error) {
	a := api.NodeAction(s)
	if _, ok := actionText[a]; !ok {
		return "", fmt.Errorf("%w: node action %q", gpufleet.ErrNotFound, s)
	}
	return a, nil
}

func (u *UI) nodeActionConfirm(r *http.Request, v *viewer) (view, error) {
	a, err := parseNodeAction(r.PathValue("action"))
	if err != nil {
		return view{}, err
	}
	n, err := u.svc.Node(r.Context(), v.P, r.PathValue("name"))
	if err != nil {
		return view{}, fmt.Errorf("node: %w", err)
	}
	if !v.Admin() {
		return view{}, fmt.Errorf("%w: node actions need an admin token", api.ErrForbidden)
	}
	label := strings.ToUpper(string(a[:1])) + string(a[1:])
	cd := confirmData{Heading: label + " node " + n.Name + "?", Message: actionText[a],
		Action: "/nodes/" + url.PathEscape(n.Name) + "/" + string(a), Button: label + " " + n.Name,
		Back: "/nodes/" + url.PathEscape(n.Name), Danger: a == api.Drain}
	return view{page: "confirm", title: label + " " + n.Name, nav: "nodes", data: cd}, nil
}

func (u *UI) nodeAction(_ http.ResponseWriter, r *http.Request, v *viewer) (string, error) {
	a, err := parseNodeAction(r.PathValue("action"))
	if err != nil {
		return "", err
	}
	n, err := u.svc.NodeAction(r.Context(), v.P, r.PathValue("name"), a)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", a, r.PathValue("name"), err)
	}
	u.log.LogAttrs(r.Context(), slog.LevelInfo, "node action", slog.String("node", n.Name), slog.String("action", string(a)), slog.String("by", v.P.TokenID))
	return "/nodes/" + url.PathEscape(n.Name) + "?done=" + string(a), nil
}

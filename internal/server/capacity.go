package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/capacity"
	"github.com/gpufleet/gpufleet/internal/forecast"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

var _ api.CapacityService = (*Server)(nil)

// allJobs reads every stored job (a team's when team is set).
func (s *Server) allJobs(ctx context.Context, team string) ([]gpufleet.Job, error) {
	var jobs []gpufleet.Job
	for after := ""; ; {
		page, next, err := s.st.ListJobs(ctx, store.JobFilter{Team: team, After: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, page...)
		if next == "" {
			return jobs, nil
		}
		after = next
	}
}

// nodeModels maps each node to its GPUs' model (the first GPU's).
func nodeModels(nodes []gpufleet.Node) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		if len(n.GPUs) > 0 {
			out[n.Name] = n.GPUs[0].Model
		}
	}
	return out
}

// Procure decides, per GPU model of the fleet (or the one named), whether
// and what to order (capacity.Procure), replaying with the server's own
// scheduling policy.
func (s *Server) Procure(ctx context.Context, p api.Principal, q api.ProcureQuery) (api.ProcureResponse, error) {
	if err := requireAdmin(p); err != nil {
		return api.ProcureResponse{}, err
	}
	for m := range q.LeadTimeDays {
		if _, err := s.cat.Lookup(m); err != nil {
			return api.ProcureResponse{}, fmt.Errorf("lead_time: %w", err)
		}
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return api.ProcureResponse{}, err
	}
	jobs, err := s.allJobs(ctx, "")
	if err != nil {
		return api.ProcureResponse{}, err
	}
	now := s.now()
	today := now.UTC().Truncate(24 * time.Hour)
	byNode := nodeModels(nodes)
	fleets := modelFleets(nodes, s.cat)
	if q.GPUModel != "" {
		g, err := s.cat.Lookup(q.GPUModel)
		if err != nil {
			return api.ProcureResponse{}, fmt.Errorf("gpu_model: %w", err)
		}
		f, ok := fleets[g.ID]
		if !ok {
			return api.ProcureResponse{}, fmt.Errorf("%w: gpu_model %s: the fleet has no %s nodes", gpufleet.ErrNotFound, gpufleet.Quote(q.GPUModel), g.ID)
		}
		fleets = map[string]capacity.ModelFleet{g.ID: f}
	}
	policy, err := scheduler.PolicyConfig(s.cfg.Policy)
	if err != nil {
		return api.ProcureResponse{}, err
	}
	out := api.ProcureResponse{At: now, Models: []api.ProcureModel{}, Skipped: map[string]string{}}
	for _, model := range slices.Sorted(maps.Keys(fleets)) {
		if err := ctx.Err(); err != nil {
			return api.ProcureResponse{}, err
		}
		g, err := s.cat.Lookup(model)
		if err != nil {
			out.Skipped[model] = err.Error()
			continue
		}
		lead, source := g.LeadTime()
		if d, ok := q.LeadTimeDays[model]; ok {
			lead, source = d, "set in the request"
		}
		hist := capacity.DemandHistory(jobs, now, func(j gpufleet.Job) bool { return capacity.JobModel(j, byNode) == model })
		pool := capacity.Pool(jobs, model, byNode)
		if len(pool) == 0 {
			out.Skipped[model] = "no finished jobs on it to replay"
			continue
		}
		rec, fc, err := capacity.Procure(capacity.ProcureInput{Today: today, Fleet: fleets[model], History: hist, Pool: pool,
			HorizonDays: q.HorizonDays, LeadTimeDays: lead, LeadTimeSource: source, Target: q.Target, Quantile: q.Quantile,
			Catalog: s.cat, Policy: policy, Seed: 1})
		if errors.Is(err, forecast.ErrShort) {
			out.Skipped[model] = fmt.Sprintf("%d days of demand since its first job: a forecast needs at least %d", len(hist.Values), forecast.MinDays)
			continue
		}
		if err != nil {
			return api.ProcureResponse{}, fmt.Errorf("%s: %w", model, err)
		}
		out.Models = append(out.Models, api.ProcureModel{Recommendation: rec, History: hist, Forecast: fc,
			CapacityGPUHoursPerDay: 24 * float64(fleets[model].GPUs()), PoolJobs: len(pool)})
	}
	return out, nil
}

// modelFleets groups the fleet's nodes by GPU model: their count, their
// sizes as they are, their most common GPU count (what an order buys),
// and the NVLink domain of the model (within a node).
func modelFleets(nodes []gpufleet.Node, cat *catalog.Catalog) map[string]capacity.ModelFleet {
	sizes := map[string]map[int]int{}
	for _, n := range nodes {
		if len(n.GPUs) == 0 {
			continue
		}
		m := n.GPUs[0].Model
		if sizes[m] == nil {
			sizes[m] = map[int]int{}
		}
		sizes[m][len(n.GPUs)]++
	}
	out := map[string]capacity.ModelFleet{}
	for m, by := range sizes {
		f := capacity.ModelFleet{Model: m}
		for _, size := range slices.Sorted(maps.Keys(by)) {
			count := by[size]
			f.Nodes += count
			f.Sizes = append(f.Sizes, capacity.NodeSize{GPUs: size, Nodes: count})
			if count > by[f.GPUsPerNode] || (count == by[f.GPUsPerNode] && size > f.GPUsPerNode) {
				f.GPUsPerNode = size
			}
		}
		if g, err := cat.Lookup(m); err == nil && g.DomainSize > 1 {
			f.NVLinkDomainGPUs = min(g.DomainSize, f.GPUsPerNode)
		}
		out[m] = f
	}
	return out
}

// lifecycleMixDays is how far back the rollups that give a model's draw
// and its mix of memory-bound work are read (at most).
const lifecycleMixDays = 7

// Lifecycle prices every GPU model of the fleet against newer ones
// (capacity.Lifecycle) from what the store recorded over q.SinceDays:
// the GPU-hours jobs held, the GPUs that turned unhealthy, the rollups'
// draw and DRAM against tensor activity, and the bench medians.
func (s *Server) Lifecycle(ctx context.Context, p api.Principal, q api.LifecycleQuery) (capacity.LifecycleReport, error) {
	if err := requireAdmin(p); err != nil {
		return capacity.LifecycleReport{}, err
	}
	prices := map[string]float64{}
	for m, v := range q.Prices {
		g, err := s.cat.Lookup(m)
		if err != nil {
			return capacity.LifecycleReport{}, fmt.Errorf("price: %w", err)
		}
		prices[g.ID] = v
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return capacity.LifecycleReport{}, err
	}
	now := s.now()
	since := now.Add(-time.Duration(q.SinceDays) * 24 * time.Hour)
	use := map[string]*capacity.ModelUse{}
	gpuModel := map[string]string{}
	for _, n := range nodes {
		var bought *time.Time
		if v, ok := n.Labels[capacity.PurchasedLabel]; ok {
			if t, err := capacity.ParsePurchased(v); err == nil {
				bought = &t
			}
		}
		for _, g := range n.GPUs {
			u := use[g.Model]
			if u == nil {
				u = &capacity.ModelUse{Model: g.Model, PeriodDays: float64(q.SinceDays), MemoryBoundShare: -1}
				use[g.Model] = u
			}
			u.GPUs++
			gpuModel[g.UUID] = g.Model
		}
		if bought != nil && len(n.GPUs) > 0 {
			u := use[n.GPUs[0].Model]
			u.Purchased = append(u.Purchased, *bought)
		}
	}
	byNode := nodeModels(nodes)
	jobs, err := s.allJobs(ctx, "")
	if err != nil {
		return capacity.LifecycleReport{}, err
	}
	first := map[string]time.Time{} // per model, its first attempt in the period
	for _, j := range jobs {
		for _, a := range j.Attempts {
			if u := use[byNode[a.Node]]; u != nil && a.StartedAt != nil && !a.StartedAt.Before(since) {
				u.GPUHours += a.GPUSeconds / 3600
				if f, ok := first[u.Model]; !ok || a.StartedAt.Before(f) {
					first[u.Model] = *a.StartedAt
				}
			}
		}
	}
	evs, err := s.eventsSince(ctx, since)
	if err != nil {
		return capacity.LifecycleReport{}, err
	}
	countFailures(evs, gpuModel, use)
	youngFleet(evs, nodes, first, now, use)
	if err := s.mixAndDraw(ctx, now, q.SinceDays, use); err != nil {
		return capacity.LifecycleReport{}, err
	}
	latest, err := s.st.BenchResults(ctx, store.BenchFilter{Latest: true})
	if err != nil {
		return capacity.LifecycleReport{}, err
	}
	eff := map[string]capacity.Efficiency{}
	for m, c := range bench.Calibration(latest) {
		if g, err := s.cat.Lookup(m); err == nil {
			eff[m] = capacity.Efficiency{Memory: c.Memory, Compute: c.Compute[capacity.RatePrecision(g)]}
		}
	}
	in := capacity.LifecycleInput{Now: now, HorizonMonths: q.HorizonMonths, Bench: eff, Catalog: s.cat, Prices: prices,
		EnergyUSDPerKWh: q.EnergyUSDPerKWh, PUE: s.cfg.PUE, DepreciationYears: q.DepreciationYears, RepairHours: q.RepairHours}
	for _, m := range slices.Sorted(maps.Keys(use)) {
		in.Use = append(in.Use, *use[m])
	}
	return capacity.Lifecycle(in)
}

// countFailures adds to each model the GPUs of it that turned unhealthy
// in the events given.
func countFailures(evs []gpufleet.Event, gpuModel map[string]string, use map[string]*capacity.ModelUse) {
	for _, e := range evs {
		if e.Kind == "gpu."+string(gpufleet.Unhealthy) {
			if u := use[gpuModel[e.Object]]; u != nil {
				u.Failures++
			}
		}
	}
}

// youngFleet shortens a model's period to the time it has been in the
// fleet when every node of it registered inside the period: from its
// first registration, or its first attempt when work ran on it earlier (a
// history imported before the nodes joined). A model a few hours old is
// then judged on those hours, and on too few days for a retirement.
func youngFleet(evs []gpufleet.Event, nodes []gpufleet.Node, first map[string]time.Time, now time.Time, use map[string]*capacity.ModelUse) {
	joined := map[string]time.Time{}
	for _, e := range evs {
		if _, ok := joined[e.Object]; e.Kind == "node.registered" && !ok {
			joined[e.Object] = e.At
		}
	}
	since := map[string]time.Time{}
	old := map[string]bool{}
	for _, n := range nodes {
		if len(n.GPUs) == 0 {
			continue
		}
		m := n.GPUs[0].Model
		at, ok := joined[n.Name]
		if !ok {
			old[m] = true
			continue
		}
		if f, seen := since[m]; !seen || at.Before(f) {
			since[m] = at
		}
	}
	for m, at := range since {
		u := use[m]
		if u == nil || old[m] {
			continue
		}
		if f, ok := first[m]; ok && f.Before(at) {
			at = f
		}
		u.PeriodDays = min(u.PeriodDays, max(now.Sub(at).Hours()/24, 1.0/24))
	}
}

// mixAndDraw sets each model's mean draw and the share of its held time
// that was memory-bound (DRAM activity above tensor activity) from the
// last days of rollups.
func (s *Server) mixAndDraw(ctx context.Context, now time.Time, days int, use map[string]*capacity.ModelUse) error {
	rows, err := s.st.Rollups(ctx, store.RollupFilter{From: now.Add(-time.Duration(min(days, lifecycleMixDays)) * 24 * time.Hour), To: now})
	if err != nil {
		return err
	}
	type acc struct{ watts, wattsN, mem, held float64 }
	by := map[string]*acc{}
	for _, r := range rows {
		a := by[r.Model]
		if a == nil {
			a = &acc{}
			by[r.Model] = a
		}
		if r.PowerWatts.N > 0 {
			a.watts += r.PowerWatts.Sum
			a.wattsN += float64(r.PowerWatts.N)
		}
		if r.AllocatedS > 0 && r.DRAMActivity.N > 0 && r.TensorActivity.N > 0 {
			a.held += r.AllocatedS
			if r.DRAMActivity.Sum/float64(r.DRAMActivity.N) > r.TensorActivity.Sum/float64(r.TensorActivity.N) {
				a.mem += r.AllocatedS
			}
		}
	}
	for m, a := range by {
		u := use[m]
		if u == nil {
			continue
		}
		if a.wattsN > 0 {
			u.Watts = a.watts / a.wattsN
		}
		if a.held > 0 {
			u.MemoryBoundShare = a.mem / a.held
		}
	}
	return nil
}

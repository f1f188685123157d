package power

import (
	"maps"
	"slices"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// DefaultPeakMargin is how far above its measured peak a held GPU is
// charged once measured (Charging.PeakMargin): a tenth. A choice, not a
// measurement of real jobs, stated as such in docs/POWER.md; where the
// node enforces the charge as a power limit the margin only costs
// headroom, never the budget.
const DefaultPeakMargin = 0.10

// Charging says what a GPU a job holds counts for in its rack's projected
// draw. Until the GPU has been measured under its job it counts its power
// limit (what it can draw); once measured, its measured peak times 1 +
// PeakMargin, never more than the limit and never less than what it draws
// now. A negative PeakMargin charges the limit always.
type Charging struct {
	PeakMargin float64
}

// Limit is the most a GPU can draw: the power limit in force where the
// reading has one, else its TDP.
func (g GPUReading) Limit() float64 {
	if g.LimitWatts > 0 {
		return g.LimitWatts
	}
	return TDP(g.Model)
}

// Charge is what one GPU counts for in its rack's projected draw: for a
// held GPU, its limit until it was measured under its job, then its peak
// with the margin (at most the limit); for a free one its latest reading,
// else its idle draw. The latest reading is a floor either way: a rack
// never counts less than it was seen to draw.
func (c Charging) Charge(g GPUReading) float64 {
	now := Idle(g.Model)
	if g.Watts != nil {
		now = *g.Watts
	}
	if !g.Held {
		return now
	}
	charge := g.Limit()
	switch {
	case g.CapWatts > 0:
		charge = min(charge, g.CapWatts)
	case g.PeakWatts != nil && c.PeakMargin >= 0:
		charge = min(charge, *g.PeakWatts*(1+c.PeakMargin))
	}
	return max(charge, now, Idle(g.Model))
}

// Cap is the power cap a held GPU gets once measured under its job, where
// the node can set one (gpufleet serve --power-caps on): its charge as a
// measured GPU, its peak with the margin, at most its limit and at least
// its idle draw, but not raised by what it draws now, so that a cap holds
// the draw where the rack counted it. A caller fixes the cap once, when
// the GPU is first measured, and charges it from then on
// (GPUReading.CapWatts): a cap that followed the peak would rise with the
// margin each time the job pressed against it. ok is false for a GPU not
// held or not measured yet, and with a negative PeakMargin (every held GPU
// is charged its limit, which needs no cap).
func (c Charging) Cap(g GPUReading) (watts float64, ok bool) {
	if !g.Held || g.PeakWatts == nil || c.PeakMargin < 0 {
		return 0, false
	}
	return max(min(g.Limit(), *g.PeakWatts*(1+c.PeakMargin)), Idle(g.Model)), true
}

// PlacementDraw is, per model and class, what a GPU a placement takes
// adds to its rack above the idle draw the rack already counts: its TDP
// (its limit) less its idle draw, since a job just placed has not been
// measured (scheduler.GPUDraw). Models without a TDP are left out (the
// scheduler then counts nothing for them).
func PlacementDraw(models map[string]catalog.GPU, classes []gpufleet.Priority) scheduler.GPUDraw {
	out := scheduler.GPUDraw{}
	for _, id := range slices.Sorted(maps.Keys(models)) {
		g := models[id]
		if TDP(g) <= 0 {
			continue
		}
		m := map[gpufleet.Priority]float64{}
		for _, cl := range classes {
			m[cl] = max(TDP(g)-Idle(g), 0)
		}
		out[id] = m
	}
	return out
}

// IdleRack is what a rack's nodes draw with no job: host overheads and
// every GPU at its idle figure.
func IdleRack(nodes []NodeReading) gpufleet.Watts {
	w := 0.0
	for _, n := range nodes {
		w += n.HostWatts
		for _, g := range n.GPUs {
			w += Idle(g.Model)
		}
	}
	return gpufleet.Watts(w)
}

// RackInput is one rack as a caller (the server's leader, the simulator)
// sees it: its budget, the part of it reserved for production work, and
// its members' readings.
type RackInput struct {
	Name                            string
	BudgetWatts, ProductionReserveW gpufleet.Watts
	Nodes                           []NodeReading
}

// SchedulerRacks is the scheduler's power input from the racks: each rack
// with a budget and its projected draw (ProjectRack), and what a placed
// GPU adds (PlacementDraw). The server and the simulator both build
// scheduler.Input.Racks and GPUDraw with it, so a replay judges power as
// the leader does. projected holds every rack's projected draw, budget or
// not, in the order given.
func SchedulerRacks(racks []RackInput, models map[string]catalog.GPU, c Charging) (in []scheduler.Rack, draw scheduler.GPUDraw, projected []gpufleet.Watts) {
	projected = make([]gpufleet.Watts, len(racks))
	for i, r := range racks {
		projected[i] = ProjectRack(r.Nodes, c)
		if r.BudgetWatts <= 0 {
			continue
		}
		in = append(in, scheduler.Rack{Name: r.Name, BudgetWatts: r.BudgetWatts,
			ProductionReserveWatts: r.ProductionReserveW, DrawWatts: projected[i], IdleWatts: IdleRack(r.Nodes)})
	}
	return in, PlacementDraw(models, gpufleet.Priorities()), projected
}

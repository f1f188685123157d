package sim

import (
	"math"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// The simulator's power model (Config.RackBudget): every rack (the nodes
// of a group's Node.Rack) has a budget, a fraction of its rated draw (its
// GPUs at TDP and each node's host overhead, power.RatedNode). A running
// job's GPUs draw the TDP (the prior holds) or, with Config.DrawNoise, the
// TDP times a factor drawn once per job, capped at the TDP (a GPU does not
// draw past its power limit). Idle GPUs draw their idle figure. Each
// cycle the scheduler gets every rack's measured draw (scheduler.Rack) and
// what a placed GPU adds, learned from the draws seen so far with the TDP
// as the prior (power.Learner), as the server learns it from telemetry.
// The report counts the minutes any rack spent over its budget.

// rackPower is the simulator's racks.
type rackPower struct {
	names   []string
	index   map[string]int
	budget  []float64
	rated   []float64
	nodeOf  []int // rack of each node, -1 without one
	learner power.Learner
	// over is the rack-seconds spent over budget; overMax the largest
	// excess seen, in watts.
	over, overMax float64
	draw          []float64 // each rack's draw since the last cycle
}

// newRackPower builds the racks when cfg.RackBudget is set.
func (e *engine) newRackPower() *rackPower {
	if e.cfg.RackBudget <= 0 {
		return nil
	}
	rp := &rackPower{index: map[string]int{}, nodeOf: make([]int, len(e.nodes))}
	for i, n := range e.nodes {
		rp.nodeOf[i] = -1
		if n.Rack == "" || len(n.GPUs) == 0 {
			continue
		}
		r, ok := rp.index[n.Rack]
		if !ok {
			r = len(rp.names)
			rp.index[n.Rack] = r
			rp.names = append(rp.names, n.Rack)
			rp.rated = append(rp.rated, 0)
		}
		rp.nodeOf[i] = r
		rp.rated[r] += float64(power.RatedNode(e.models[n.GPUs[0].Model], len(n.GPUs)))
	}
	rp.budget = make([]float64, len(rp.names))
	for r := range rp.budget {
		rp.budget[r] = e.cfg.RackBudget * rp.rated[r]
	}
	rp.draw = make([]float64, len(rp.names))
	return rp
}

// jobDraw is what one GPU of a job draws on model m: the TDP times the
// job's factor, capped at the TDP.
func (e *engine) jobDraw(js *jobState, m string) float64 {
	tdp := power.TDP(e.models[m])
	return min(tdp*js.drawFactor, tdp)
}

// measure is every rack's draw now: host overheads, running jobs' GPUs at
// their draw, the rest idle. It feeds the learner with the running jobs'
// draws.
func (e *engine) measure() []float64 {
	rp := e.power
	draw := make([]float64, len(rp.names))
	busy := make([][]float64, len(e.nodes))
	for _, js := range e.running {
		for i, g := range js.gpus {
			if busy[g.node] == nil {
				busy[g.node] = make([]float64, len(e.nodes[g.node].GPUs))
			}
			m := e.nodes[g.node].GPUs[g.gpu].Model
			w := e.jobDraw(js, m) * js.fractions[i]
			busy[g.node][g.gpu] += w
			rp.learner.Observe(m, js.j.Class, e.jobDraw(js, m))
		}
	}
	for ni, n := range e.nodes {
		r := rp.nodeOf[ni]
		if r < 0 {
			continue
		}
		draw[r] += float64(power.HostOverhead(e.models[n.GPUs[0].Model], len(n.GPUs)))
		for gi, g := range n.GPUs {
			idle := power.Idle(e.models[g.Model])
			if busy[ni] != nil && busy[ni][gi] > 0 {
				draw[r] += max(busy[ni][gi], idle)
			} else {
				draw[r] += idle
			}
		}
	}
	return draw
}

// powerInput gives the scheduler the racks' budgets, their measured draw
// and the learned draw per model and class.
func (e *engine) powerInput(in *scheduler.Input) {
	rp := e.power
	if rp == nil {
		return
	}
	draw := e.measure()
	rp.draw = draw
	in.Racks = make([]scheduler.Rack, len(rp.names))
	for r, name := range rp.names {
		in.Racks[r] = scheduler.Rack{Name: name, BudgetWatts: rp.budget[r], DrawWatts: draw[r]}
	}
	in.GPUDraw = scheduler.GPUDraw(rp.learner.Add(e.models, gpufleet.Priorities()))
}

// powerAdvance integrates the time racks spent over budget over dt
// seconds, at the draw after the last cycle.
func (e *engine) powerAdvance(dt float64) {
	rp := e.power
	if rp == nil || dt <= 0 {
		return
	}
	for r, d := range rp.draw {
		if d > rp.budget[r]+1e-6 {
			rp.over += dt
			rp.overMax = max(rp.overMax, d-rp.budget[r])
		}
	}
}

// powerAfter re-measures the racks after a cycle's decisions, for the
// time that follows.
func (e *engine) powerAfter() {
	if e.power != nil {
		e.power.draw = e.measure()
	}
}

// RackPower is the power section of a report (Config.RackBudget).
type RackPower struct {
	// BudgetFraction is each rack's budget as a share of its rated draw.
	BudgetFraction float64 `json:"budget_fraction"`
	DrawNoise      float64 `json:"draw_noise"`
	Racks          int     `json:"racks"`
	// RatedWatts and BudgetWatts are summed over the racks.
	RatedWatts  float64 `json:"rated_watts"`
	BudgetWatts float64 `json:"budget_watts"`
	// MinutesOverBudget is the rack-minutes any rack drew more than its
	// budget; MaxOverWatts the largest excess.
	MinutesOverBudget float64 `json:"minutes_over_budget"`
	MaxOverWatts      float64 `json:"max_over_watts"`
}

func (e *engine) powerReport() *RackPower {
	rp := e.power
	if rp == nil {
		return nil
	}
	out := &RackPower{BudgetFraction: e.cfg.RackBudget, DrawNoise: e.cfg.DrawNoise, Racks: len(rp.names),
		MinutesOverBudget: rp.over / 60, MaxOverWatts: rp.overMax}
	for r := range rp.names {
		out.RatedWatts += rp.rated[r]
		out.BudgetWatts += rp.budget[r]
	}
	out.RatedWatts, out.BudgetWatts = math.Round(out.RatedWatts), math.Round(out.BudgetWatts)
	return out
}

// drawFactor draws a job's draw factor: 1 (the TDP) without noise, else a
// lognormal factor around 0.75 of the TDP (capped at 1 where it is used).
func (e *engine) drawFactor() float64 {
	if e.cfg.DrawNoise <= 0 {
		return 1
	}
	return 0.75 * math.Exp(e.cfg.DrawNoise*e.drawRNG.NormFloat64())
}

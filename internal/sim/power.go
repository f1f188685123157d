package sim

import (
	"math"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"

	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// The simulator's power model (Config.RackBudget): every rack (the nodes
// of a group's Node.Rack) has a budget, a fraction of its rated draw (its
// GPUs at TDP and each node's host overhead, power.RatedNode), less
// Config.RackReserve of it for production work. A running job's GPUs draw
// the TDP or, with Config.DrawNoise, the TDP times a factor drawn once per
// job, capped at the TDP (a GPU does not draw past its power limit). Idle
// GPUs draw their idle figure.
//
// Each cycle the scheduler gets what the server's leader gives it, built
// by the same function (power.SchedulerRacks): every rack's projected
// draw, where a job's GPUs count their limit until they are measured,
// Config.TelemetryLag after the job started (readings arrive late), and
// then their measured draw with Config.PeakMargin; a placement adds a
// GPU's TDP less its idle draw. The report counts the minutes any rack's
// true draw spent over its budget.

// DefaultTelemetryLag is how late the simulated scheduler sees a job's
// draw, in seconds: a minute, the server's settle time before a holder's
// readings count (two heartbeats, at least a minute).
const DefaultTelemetryLag = 60

// rackPower is the simulator's racks.
type rackPower struct {
	names  []string
	index  map[string]int
	budget []float64
	rated  []float64
	nodeOf []int // rack of each node, -1 without one
	// over is the rack-seconds spent over budget; overMax the largest
	// excess seen, in watts.
	over, overMax float64
	draw          []float64 // each rack's true draw since the last cycle
	lag           float64
	jobs          map[*jobState]*jobPower
	// overSince is when each rack's projected draw went over its budget,
	// as the server's leader keeps it (Config.Policy.OverBudget); absent
	// while it is under.
	overSince map[string]float64
}

// newRackPower builds the racks when cfg.RackBudget is set.
func (e *engine) newRackPower() *rackPower {
	if e.cfg.RackBudget <= 0 {
		return nil
	}
	rp := &rackPower{index: map[string]int{}, nodeOf: make([]int, len(e.nodes)), lag: e.cfg.TelemetryLag, jobs: map[*jobState]*jobPower{},
		overSince: map[string]float64{}}
	if rp.lag == 0 {
		rp.lag = DefaultTelemetryLag
	}
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

// period is the telemetry period draws swing and are read at, in seconds.
func (rp *rackPower) period() float64 {
	return max(rp.lag, DefaultTelemetryLag)
}

// demand is what GPU i of a running job would draw in telemetry period
// k: jobDraw, moved by Config.DrawSwing, at most the TDP.
func (e *engine) demand(js *jobState, i int, m string, k int64) float64 {
	w := e.jobDraw(js, m)
	if sw := e.cfg.DrawSwing; sw > 0 {
		w *= 1 + sw*(2*swingUnit(js.j.ID, i, k)-1)
	}
	return min(w, power.TDP(e.models[m]))
}

// swingUnit is a uniform number in [0, 1) fixed by a job, a GPU of it and
// a period, so that draws do not depend on the order of events.
func swingUnit(id string, i int, k int64) float64 {
	h := uint64(14695981039346656037)
	for _, b := range []byte(id) {
		h = (h ^ uint64(b)) * 1099511628211
	}
	h ^= uint64(i)*0x9e3779b97f4a7c15 ^ uint64(k)*0xbf58476d1ce4e5b9
	h ^= h >> 31
	h *= 0x94d049bb133111eb
	h ^= h >> 29
	return float64(h>>11) / (1 << 53)
}

// jobPower is what the racks know of a running job's GPUs: the peak of
// the readings folded so far (through period upTo) and, with power caps,
// the limit each GPU was capped at once measured.
type jobPower struct {
	start float64
	upTo  int64
	peak  []float64
	caps  []float64 // 0 until measured
}

// jobPowerOf is js's record for its current run.
func (e *engine) jobPowerOf(js *jobState) *jobPower {
	rp := e.power
	jp := rp.jobs[js]
	if jp == nil || jp.start != js.start {
		jp = &jobPower{start: js.start, upTo: int64(math.Floor(js.start/rp.period())) - 1,
			peak: make([]float64, len(js.gpus)), caps: make([]float64, len(js.gpus))}
		rp.jobs[js] = jp
	}
	return jp
}

// measured reports whether js's draw has been read by now (TelemetryLag
// after its start).
func (e *engine) measured(js *jobState) bool {
	return e.power.lag < 0 || e.now >= js.start+e.power.lag
}

// fold reads js's GPUs up to now: the readings of the periods the lag
// lets the scheduler see join their peak, and, with power caps, a GPU
// measured for the first time is capped at its charge.
func (e *engine) fold(js *jobState) *jobPower {
	rp := e.power
	jp := e.jobPowerOf(js)
	if !e.measured(js) {
		return jp
	}
	seen := int64(math.Floor((e.now - max(rp.lag, 0)) / rp.period()))
	if e.cfg.DrawSwing <= 0 && jp.upTo < seen {
		jp.upTo = seen - 1 // constant draws: one period reads them all
	}
	for k := jp.upTo + 1; k <= seen; k++ {
		for i, g := range js.gpus {
			m := e.nodes[g.node].GPUs[g.gpu].Model
			jp.peak[i] = max(jp.peak[i], e.gpuDraw(js, jp, i, m, k))
		}
	}
	jp.upTo = max(jp.upTo, seen)
	if e.cfg.PowerCaps {
		for i, g := range js.gpus {
			if jp.caps[i] == 0 {
				md := e.models[e.nodes[g.node].GPUs[g.gpu].Model]
				jp.caps[i], _ = power.Charging{PeakMargin: e.cfg.PeakMargin}.Cap(power.GPUReading{Model: md, Held: true, PeakWatts: &jp.peak[i]})
			}
		}
	}
	return jp
}

// gpuDraw is what GPU i of js draws in period k: its demand, clipped to
// its power cap once it has one.
func (e *engine) gpuDraw(js *jobState, jp *jobPower, i int, m string, k int64) float64 {
	w := e.demand(js, i, m, k)
	if jp != nil && jp.caps[i] > 0 {
		w = min(w, jp.caps[i])
	}
	return w
}

// gpuLoad is one GPU's running work: what its jobs draw on it now (each
// its share), what the scheduler has read of it (the jobs' peaks) and
// whether every job on it has been measured.
type gpuLoad struct {
	watts, peak float64
	held        bool
	measured    bool
	// capW is the caps of its jobs (each its share) and capped whether
	// every job on it has one (Config.PowerCaps).
	capW   float64
	capped bool
}

// loads is each node's GPUs' running work at time t.
func (e *engine) loads(t float64) [][]gpuLoad {
	busy := make([][]gpuLoad, len(e.nodes))
	k := int64(math.Floor(t / e.power.period()))
	for _, js := range e.running {
		jp := e.jobPowerOf(js)
		measured := e.measured(js)
		for i, g := range js.gpus {
			if busy[g.node] == nil {
				busy[g.node] = make([]gpuLoad, len(e.nodes[g.node].GPUs))
				for k := range busy[g.node] {
					busy[g.node][k].measured, busy[g.node][k].capped = true, true
				}
			}
			l := &busy[g.node][g.gpu]
			l.watts += e.gpuDraw(js, jp, i, e.nodes[g.node].GPUs[g.gpu].Model, k) * js.fractions[i]
			l.peak += jp.peak[i] * js.fractions[i]
			l.held = true
			l.measured = l.measured && measured
			l.capW += jp.caps[i] * js.fractions[i]
			l.capped = l.capped && jp.caps[i] > 0
		}
	}
	return busy
}

// measure is every rack's true draw now: host overheads, running jobs'
// GPUs at their draw, the rest idle.
func (e *engine) measure() []float64 { return e.measureAt(e.now) }

// measureAt is every rack's true draw at time t (of the current run's
// telemetry period).
func (e *engine) measureAt(t float64) []float64 {
	rp := e.power
	draw := make([]float64, len(rp.names))
	busy := e.loads(t)
	for ni, n := range e.nodes {
		r := rp.nodeOf[ni]
		if r < 0 {
			continue
		}
		draw[r] += float64(power.HostOverhead(e.models[n.GPUs[0].Model], len(n.GPUs)))
		for gi, g := range n.GPUs {
			idle := power.Idle(e.models[g.Model])
			if busy[ni] != nil && busy[ni][gi].held {
				draw[r] += max(busy[ni][gi].watts, idle)
			} else {
				draw[r] += idle
			}
		}
	}
	return draw
}

// readings is every rack as the leader would see it: its budget and its
// nodes' GPUs, a running job's GPUs with the reading of their draw once
// it has arrived (TelemetryLag after the job started).
func (e *engine) readings() []power.RackInput {
	rp := e.power
	out := make([]power.RackInput, len(rp.names))
	for r, name := range rp.names {
		out[r] = power.RackInput{Name: name, BudgetWatts: gpufleet.Watts(rp.budget[r]), ProductionReserveW: gpufleet.Watts(e.cfg.RackReserve * rp.budget[r])}
	}
	for js := range rp.jobs {
		if js.start != rp.jobs[js].start || !slices.Contains(e.running, js) {
			delete(rp.jobs, js) // ended or restarted
		}
	}
	for _, js := range e.running {
		e.fold(js)
	}
	busy := e.loads(e.now)
	for ni, n := range e.nodes {
		r := rp.nodeOf[ni]
		if r < 0 {
			continue
		}
		nr := power.NodeReading{HostWatts: float64(power.HostOverhead(e.models[n.GPUs[0].Model], len(n.GPUs)))}
		for gi, g := range n.GPUs {
			gr := power.GPUReading{Model: e.models[g.Model]}
			if busy[ni] != nil && busy[ni][gi].held {
				gr.Held = true
				if l := busy[ni][gi]; l.measured {
					peak := max(l.peak, power.Idle(gr.Model))
					gr.PeakWatts = &peak
					if e.cfg.DrawSwing == 0 {
						gr.Watts = &peak // constant draws: the latest reading is the peak
					}
					if l.capped {
						gr.CapWatts = l.capW // charged its cap, as the leader charges a capped GPU
					}
				}
			}
			nr.GPUs = append(nr.GPUs, gr)
		}
		out[r].Nodes = append(out[r].Nodes, nr)
	}
	return out
}

// powerInput gives the scheduler the racks' budgets, their projected draw
// and what a placed GPU adds, as the server does (power.SchedulerRacks).
func (e *engine) powerInput(in *scheduler.Input) {
	rp := e.power
	if rp == nil {
		return
	}
	rp.draw = e.measure()
	in.Racks, in.GPUDraw, _ = power.SchedulerRacks(e.readings(), e.models, power.Charging{PeakMargin: e.cfg.PeakMargin})
	for i := range in.Racks {
		in.Racks[i].OverBudgetFor = e.overBudgetFor(in.Racks[i])
	}
}

// overBudgetFor is how long rack r's projected draw has been over its
// budget, kept across cycles as the server's leader keeps it: from the
// first cycle that saw it over to now; 0 while under.
func (e *engine) overBudgetFor(r scheduler.Rack) time.Duration {
	rp := e.power
	if r.DrawWatts <= r.BudgetWatts {
		delete(rp.overSince, r.Name)
		return 0
	}
	since, ok := rp.overSince[r.Name]
	if !ok {
		since = e.now
		rp.overSince[r.Name] = since
	}
	return time.Duration((e.now - since) * float64(time.Second))
}

// powerWake asks for a cycle at the next telemetry period while jobs run,
// with the stop policy and draws that move (Config.DrawSwing): the
// projection changes with each period's readings, not only at events, and
// the leader, which cycles every few seconds, would see a rack go over
// then.
func (e *engine) powerWake() {
	if e.power == nil || e.cfg.Policy.OverBudget != scheduler.OverBudgetStop || e.cfg.DrawSwing <= 0 || len(e.running) == 0 {
		return
	}
	p := e.power.period()
	if t := (math.Floor(e.now/p) + 1) * p; t < e.wakeAt {
		e.wakeAt = t
		e.push(event{t: t, kind: evWake})
	}
}

// powerAdvance integrates the time racks spent over budget over dt
// seconds, at the draw after the last cycle; with Config.DrawSwing, draws
// change every telemetry period and are integrated period by period.
func (e *engine) powerAdvance(dt float64) {
	rp := e.power
	if rp == nil || dt <= 0 {
		return
	}
	over := func(draw []float64, dt float64) {
		for r, d := range draw {
			if d > rp.budget[r]+1e-6 {
				rp.over += dt
				rp.overMax = max(rp.overMax, d-rp.budget[r])
			}
		}
	}
	if e.cfg.DrawSwing <= 0 || len(e.running) == 0 {
		over(rp.draw, dt)
		return
	}
	p := rp.period()
	for t, end := e.now, e.now+dt; t < end; {
		next := min((math.Floor(t/p)+1)*p, end)
		over(e.measureAt(t), next-t)
		t = next
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
	// ReserveFraction is the share of each budget reserved for production;
	// TelemetryLagS how late draws are seen; PeakMargin the charge above a
	// measured draw.
	ReserveFraction float64 `json:"reserve_fraction,omitempty"`
	// DrawSwing and PowerCaps are Config's.
	DrawSwing     float64 `json:"draw_swing,omitempty"`
	PowerCaps     bool    `json:"power_caps,omitempty"`
	TelemetryLagS float64 `json:"telemetry_lag_s"`
	PeakMargin    float64 `json:"peak_margin"`
	Racks         int     `json:"racks"`
	// RatedWatts and BudgetWatts are summed over the racks.
	RatedWatts  float64 `json:"rated_watts"`
	BudgetWatts float64 `json:"budget_watts"`
	// MinutesOverBudget is the rack-minutes any rack drew more than its
	// budget; MaxOverWatts the largest excess.
	MinutesOverBudget float64 `json:"minutes_over_budget"`
	MaxOverWatts      float64 `json:"max_over_watts"`
	// OverBudget is the stop policy (Config.Policy.OverBudget: alert or
	// stop) and OverBudgetStops the jobs it stopped (rack_power).
	OverBudget      string `json:"over_budget,omitempty"`
	OverBudgetStops int    `json:"over_budget_stops"`
}

func (e *engine) powerReport() *RackPower {
	rp := e.power
	if rp == nil {
		return nil
	}
	out := &RackPower{BudgetFraction: e.cfg.RackBudget, DrawNoise: e.cfg.DrawNoise, Racks: len(rp.names),
		ReserveFraction: e.cfg.RackReserve, DrawSwing: e.cfg.DrawSwing, PowerCaps: e.cfg.PowerCaps, TelemetryLagS: max(rp.lag, 0), PeakMargin: e.cfg.PeakMargin,
		MinutesOverBudget: rp.over / 60, MaxOverWatts: rp.overMax,
		OverBudget: e.cfg.Policy.OverBudget.String(), OverBudgetStops: e.stopCodes[string(scheduler.StopRackPower)]}
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

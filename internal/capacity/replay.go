package capacity

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/forecast"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/sim"
)

// PoolJob is a job of the history that replays sample from: its shape,
// not its time.
type PoolJob struct {
	GPUs    int               `json:"gpus"`
	Seconds float64           `json:"seconds"` // run time
	Class   gpufleet.Priority `json:"class"`
	Team    string            `json:"team"`
	// DaySeconds is when in its UTC day it was submitted.
	DaySeconds float64 `json:"day_seconds"`
}

// GPUHours is what the job asks for.
func (p PoolJob) GPUHours() float64 { return float64(p.GPUs) * p.Seconds / 3600 }

// ModelFleet is a GPU model's part of the fleet: Nodes nodes, of the
// sizes in Sizes as they are (none: all of GPUsPerNode GPUs). An order
// buys nodes of GPUsPerNode GPUs, the fleet's most common size.
type ModelFleet struct {
	Model            string     `json:"gpu_model"`
	Nodes            int        `json:"nodes"`
	GPUsPerNode      int        `json:"gpus_per_node"`
	NVLinkDomainGPUs int        `json:"nvlink_domain_gpus,omitempty"`
	Sizes            []NodeSize `json:"sizes,omitempty"`
}

// NodeSize is how many of a model's nodes hold GPUs GPUs.
type NodeSize struct {
	GPUs  int `json:"gpus"`
	Nodes int `json:"nodes"`
}

// GPUs is the fleet's GPU count: its nodes' GPUs as they are.
func (m ModelFleet) GPUs() int {
	if len(m.Sizes) == 0 {
		return m.Nodes * m.GPUsPerNode
	}
	n := 0
	for _, s := range m.Sizes {
		n += s.GPUs * s.Nodes
	}
	return n
}

// sizesValid reports whether Sizes, when given, count Nodes nodes of at
// least one GPU each.
func (m ModelFleet) sizesValid() bool {
	if len(m.Sizes) == 0 {
		return true
	}
	n := 0
	for _, s := range m.Sizes {
		if s.GPUs < 1 || s.Nodes < 0 || s.GPUs > gpufleet.MaxNodeGPUs {
			return false
		}
		n += s.Nodes
	}
	return n == m.Nodes
}

// groups is the fleet with extra nodes of GPUsPerNode added, as the
// simulator's node groups.
func (m ModelFleet) groups(extra int) []sim.NodeGroup {
	sizes := m.Sizes
	if len(sizes) == 0 {
		sizes = []NodeSize{{GPUs: m.GPUsPerNode, Nodes: m.Nodes}}
	}
	var out []sim.NodeGroup
	add := func(name string, gpus, nodes int) {
		if nodes > 0 {
			out = append(out, sim.NodeGroup{Name: name, Count: nodes, GPU: m.Model, GPUsPerNode: gpus,
				NVLinkDomainGPUs: min(m.NVLinkDomainGPUs, gpus)})
		}
	}
	for _, s := range sizes {
		add(fmt.Sprintf("replay-%d", s.GPUs), s.GPUs, s.Nodes)
	}
	add("ordered", m.GPUsPerNode, extra)
	return out
}

// Replay is one week of forecast demand replayed through the scheduler
// in the simulator on a fleet, and what it showed.
type Replay struct {
	WeekStart time.Time `json:"week_start"`
	Nodes     int       `json:"nodes"`
	GPUs      int       `json:"gpus"`
	// Jobs is the jobs submitted in the scored week (a week of warm-up
	// before it fills the queue the week starts with), GPUHours what they
	// asked for, and Allocation the share of the GPUs held over the week,
	// each the mean of the samplings.
	Jobs     int     `json:"jobs"`
	GPUHours float64 `json:"gpu_hours_asked"`
	// Allocation is the share of the GPUs held by jobs over the week.
	Allocation float64 `json:"allocation"`
	// WaitP50S and WaitP90S are the week's jobs' queue waits (of the
	// target's class when it names one); a job that had not started when
	// the replay ended counts what it had waited.
	WaitP50S float64 `json:"wait_p50_s"`
	WaitP90S float64 `json:"wait_p90_s"`
	// WaitS is the target's percentile of the waits (WaitP90S for a p90
	// target).
	WaitS float64 `json:"wait_s"`
	// Waited is how many jobs' waits the percentiles are of (all three
	// samplings).
	Waited int  `json:"waited"`
	Meets  bool `json:"meets_target"`
}

// maxReplayJobs bounds the jobs one replay samples: beyond it a week of
// demand is made of jobs too small for a replay to be worth its time.
const maxReplayJobs = 200_000

// replayer replays weeks of a demand series on a model's fleet.
type replayer struct {
	cat    *catalog.Catalog
	policy scheduler.Config
	model  ModelFleet
	pool   []PoolJob
	target Target
	seed   uint64
	// start is day 0 of the forecast; before it, days are the history's.
	start   time.Time
	history forecast.Series
	fc      forecast.Forecast
	// quantile is the forecast quantile replayed.
	quantile float64
}

// demand is the GPU-hours asked on day d from the start: the forecast's
// quantile, or before the start the history's.
func (r *replayer) demand(d int) float64 {
	if d < 0 {
		if k := len(r.history.Values) + d; k >= 0 {
			return r.history.Values[k]
		}
		return 0
	}
	return r.fc.Quantile(d, r.quantile)
}

// warmDays is the days replayed before a scored week, so that the week
// starts with the queue its demand leaves.
const warmDays = 7

// replaySamples is how many independent samplings of a week's demand a
// replay pools: one week's p90 over a few dozen jobs moves a lot from one
// draw to the next.
const replaySamples = 3

// week replays the week starting on forecast day d0 with extra nodes
// added to the model's fleet, pooling replaySamples samplings of its
// demand: the waits of all of them, their mean allocation, jobs and
// GPU-hours.
func (r *replayer) week(d0, extra int) (Replay, error) {
	nodes := r.model.Nodes + extra
	out := Replay{WeekStart: r.start.AddDate(0, 0, d0), Nodes: nodes, GPUs: r.model.GPUs() + extra*r.model.GPUsPerNode}
	if nodes == 0 {
		return out, nil
	}
	cl, err := sim.BuildCluster(sim.ClusterSpec{NodeGroups: r.model.groups(extra)}, r.cat)
	if err != nil {
		return Replay{}, err
	}
	var waits []float64
	jobs := 0
	for k := range uint64(replaySamples) {
		w, n, hours, alloc, err := r.once(cl, d0, r.seed+k*0x9e3779b9)
		if err != nil {
			return Replay{}, err
		}
		waits = append(waits, w...)
		jobs += n
		out.GPUHours += hours / replaySamples
		out.Allocation += alloc / float64(out.GPUs) / replaySamples
	}
	out.Jobs = (jobs + replaySamples/2) / replaySamples
	out.Waited = len(waits)
	slices.Sort(waits)
	out.WaitP50S, out.WaitP90S = percentile(waits, 50), percentile(waits, 90)
	pct := r.target.Percentile
	if pct == 0 {
		pct = 90
	}
	out.WaitS = percentile(waits, pct)
	switch r.target.Metric {
	case Allocation:
		out.Meets = out.Allocation < r.target.Limit
	default:
		out.Meets = out.WaitS < r.target.Limit
	}
	return out, nil
}

// once replays one sampling (seed) of the week from forecast day d0 after
// its warm-up: the waits of the week's jobs (of the target's class), how
// many jobs and GPU-hours it asked for, and the GPUs allocated on average.
func (r *replayer) once(cl *sim.Cluster, d0 int, seed uint64) (waits []float64, jobs int, hours, alloc float64, err error) {
	tr := &sim.Trace{Name: "forecast", Format: "forecast"}
	scoredFrom := 0
	for day := d0 - warmDays; day < d0+7; day++ {
		if day == d0 {
			scoredFrom = len(tr.Jobs)
		}
		js, h, err := r.sample(seed, day, d0-warmDays)
		if err != nil {
			return nil, 0, 0, 0, err
		}
		if day >= d0 {
			hours += h
		}
		tr.Jobs = append(tr.Jobs, js...)
		if len(tr.Jobs) > maxReplayJobs {
			return nil, 0, 0, 0, fmt.Errorf("%w: replay of %s: more than %d jobs in two weeks of demand", gpufleet.ErrInvalid, r.model.Model, maxReplayJobs)
		}
	}
	if len(tr.Jobs) == 0 {
		return nil, 0, 0, 0, nil
	}
	// Job results count from the first arrival, the timeline from the
	// start of the warm-up.
	t0 := tr.Jobs[0].Submit
	res, err := sim.Run(tr, cl, sim.Config{Policy: r.policy, Seed: seed, RestartOverhead: sim.DefaultRestartOverhead,
		Epoch: r.start.AddDate(0, 0, d0-warmDays)})
	if err != nil {
		return nil, 0, 0, 0, fmt.Errorf("replay of %s: %w", r.model.Model, err)
	}
	from, to := float64(warmDays*86400), float64((warmDays+7)*86400)
	end := max(to, lastTime(res))
	for _, j := range res.Jobs[scoredFrom:] {
		if r.target.Class != "" && j.Class != string(r.target.Class) {
			continue
		}
		if j.FirstStartS >= 0 {
			waits = append(waits, j.FirstStartS-j.SubmitS)
		} else {
			waits = append(waits, end-(j.SubmitS+t0))
		}
	}
	return waits, len(tr.Jobs) - scoredFrom, hours, allocated(res.Timeline, from, to), nil
}

// sample draws the jobs of demand day d (relative to the forecast's
// start) from the pool until they ask for that day's GPU-hours, submitted
// in seconds from the start of day base. Each day
// draws from its own seeded sequence, so that more demand on a day only
// adds jobs to it, and every replay of the day sees the same ones.
func (r *replayer) sample(seed uint64, d, base int) ([]sim.Job, float64, error) {
	want := r.demand(d)
	if want <= 0 || len(r.pool) == 0 {
		return nil, 0, nil
	}
	rng := rand.New(rand.NewPCG(seed, uint64(d+warmDays)))
	dayS := float64((d - base) * 86400)
	var jobs []sim.Job
	got := 0.0
	for got < want {
		p := r.pool[rng.IntN(len(r.pool))]
		jobs = append(jobs, sim.Job{
			ID: fmt.Sprintf("d%d-%d", d, len(jobs)), Team: p.Team, Class: p.Class,
			Submit: dayS + p.DaySeconds, GPUs: p.GPUs, GPUModels: []string{r.model.Model}, Duration: max(p.Seconds, 1),
			Sharing: gpufleet.Sharing{Kind: gpufleet.Exclusive},
		})
		got += p.GPUHours()
		if len(jobs) > maxReplayJobs {
			return nil, 0, fmt.Errorf("%w: replay of %s: more than %d jobs on one day", gpufleet.ErrInvalid, r.model.Model, maxReplayJobs)
		}
	}
	slices.SortStableFunc(jobs, func(a, b sim.Job) int {
		switch {
		case a.Submit < b.Submit:
			return -1
		case a.Submit > b.Submit:
			return 1
		}
		return 0
	})
	return jobs, got, nil
}

// allocated is the time-average of the allocated GPUs over [from, to)
// seconds of the timeline (a step function; before its first sample
// nothing is allocated).
func allocated(tl []sim.Sample, from, to float64) float64 {
	sum, prevT, prevA := 0.0, from, 0.0
	for _, s := range tl {
		if s.T > from {
			sum += prevA * (min(s.T, to) - prevT)
			prevT = min(s.T, to)
		}
		prevA = s.Allocated
		if s.T >= to {
			break
		}
	}
	if prevT < to {
		sum += prevA * (to - prevT)
	}
	return sum / (to - from)
}

// lastTime is when the replay's last job ended (or the last sample).
func lastTime(res *sim.Result) float64 {
	if n := len(res.Timeline); n > 0 {
		return res.Timeline[n-1].T
	}
	return 0
}

// percentile is the nearest-rank p-th percentile of sorted values; 0 for
// none.
func percentile(sorted []float64, p int) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted)+99)/100 - 1
	return sorted[max(i, 0)]
}

// missChance is the chance that the week from forecast day d0 misses the
// target with today's fleet: one less the lowest forecast quantile of
// demand (to the nearest 5%) whose replay misses it. Replays of more
// demand only add jobs, so the misses grow with the quantile.
func (r *replayer) missChance(d0 int) (float64, error) {
	keep := r.quantile
	defer func() { r.quantile = keep }()
	// lo meets (or is below the grid), hi misses.
	lo, hi := 0, int(math.Round(keep*20))
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		r.quantile = float64(mid) / 20
		rp, err := r.week(d0, 0)
		if err != nil {
			return 0, err
		}
		if rp.Meets {
			lo = mid
		} else {
			hi = mid
		}
	}
	return 1 - float64(hi)/20, nil
}

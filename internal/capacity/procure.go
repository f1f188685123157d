package capacity

import (
	"fmt"
	"math"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/forecast"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// ProcureInput is what a procurement decision for one GPU model reads.
type ProcureInput struct {
	// Today is the first forecast day (a UTC midnight).
	Today time.Time
	Fleet ModelFleet
	// History is the model's daily demand up to yesterday; Pool the jobs
	// replays sample from (the model's jobs of the history).
	History forecast.Series
	Pool    []PoolJob
	// HorizonDays is how far ahead to look.
	HorizonDays int
	// LeadTimeDays is the days from an order to GPUs in service, and
	// LeadTimeSource where the figure comes from.
	LeadTimeDays   int
	LeadTimeSource string
	Target         Target
	// Quantile is the demand planned for: 0.8 plans for the forecast's
	// 80th percentile of each day.
	Quantile float64
	Catalog  *catalog.Catalog
	Policy   scheduler.Config
	Seed     uint64
}

// Validate checks the input's ranges.
func (in ProcureInput) Validate() error {
	switch {
	case in.Fleet.Model == "" || in.Fleet.GPUsPerNode < 1 || in.Fleet.Nodes < 0 || !in.Fleet.sizesValid():
		return fmt.Errorf("%w: fleet: a GPU model with nodes of at least one GPU", gpufleet.ErrInvalid)
	case in.HorizonDays < 7 || in.HorizonDays > MaxHorizonDays:
		return fmt.Errorf("%w: horizon %d days: expected 7 to %d", gpufleet.ErrInvalid, in.HorizonDays, MaxHorizonDays)
	case in.LeadTimeDays < 0 || in.LeadTimeDays > catalog.MaxLeadTimeDays:
		return fmt.Errorf("%w: lead time %d days: expected 0 to %d", gpufleet.ErrInvalid, in.LeadTimeDays, catalog.MaxLeadTimeDays)
	case !(in.Quantile >= 0.5 && in.Quantile < 1):
		return fmt.Errorf("%w: quantile %g: expected 0.5 to below 1", gpufleet.ErrInvalid, in.Quantile)
	case in.Target.Metric != Allocation && in.Target.Metric != Wait:
		return fmt.Errorf("%w: target: no metric", gpufleet.ErrInvalid)
	}
	return in.History.Validate()
}

// MaxHorizonDays bounds a procurement horizon: two years.
const MaxHorizonDays = 730

// Action is what a procurement decision says to do.
type Action string

// The actions.
const (
	// Order: the forecast misses the target within the horizon, and the
	// replay shows that the proposed purchase meets it.
	Order Action = "order"
	// Nothing: the replay of the horizon's busiest week meets the target
	// with the fleet as it is.
	Nothing Action = "none"
	// NoPlan: the forecast misses the target, but no purchase up to the
	// search's bound met it in the replay: no recommendation is made.
	NoPlan Action = "no-recommendation"
)

// Recommendation is a procurement decision for one GPU model, with the
// replays that check it.
type Recommendation struct {
	GPUModel string `json:"gpu_model"`
	Action   Action `json:"action"`
	Target   Target `json:"target"`
	// TargetText is the target as ParseTarget reads it.
	TargetText string  `json:"target_text"`
	Quantile   float64 `json:"quantile"`
	// Nodes and GPUs are what to order (Order).
	Nodes int `json:"nodes"`
	GPUs  int `json:"gpus"`
	// Crossing is the start of the first forecast week whose replay misses
	// the target with today's fleet; OrderBy is Crossing less the lead
	// time, LateDays how far that is behind Today (0 when on time).
	Crossing *time.Time `json:"crossing"`
	OrderBy  *time.Time `json:"order_by"`
	LateDays int        `json:"late_days"`
	// Probability is the chance that the crossing week misses the target
	// with today's fleet: one less the lowest forecast quantile of its
	// demand (to 5%) whose replay misses it.
	Probability    float64 `json:"probability"`
	LeadTimeDays   int     `json:"lead_time_days"`
	LeadTimeSource string  `json:"lead_time_source"`
	// Without and With are the replays of the deciding week (the busiest
	// after the crossing, or of the horizon) with today's fleet and with
	// the purchase.
	Without *Replay    `json:"without"`
	With    *Replay    `json:"with"`
	Weeks   []Replay   `json:"weeks"` // today's fleet, week by week up to the crossing
	Reasons []string   `json:"reasons"`
	Fleet   ModelFleet `json:"fleet"`
}

// serviceShare is the allocation a wait target is sized from before the
// replay decides: a queue at this utilisation keeps waits short for most
// workloads (sizing only; the replay is the check).
const serviceShare = 0.85

// Procure decides, for one GPU model, whether and what to order. It
// forecasts the model's demand (forecast.HoltWinters), replays each
// forecast week at the planned quantile through the scheduler on today's
// fleet until one misses the target, and if one does, finds the fewest
// nodes that make the crossing week and the busiest week meet it in the
// replay. A purchase is recommended only when the replay shows it meets
// the target.
func Procure(in ProcureInput) (Recommendation, forecast.Forecast, error) {
	if err := in.Validate(); err != nil {
		return Recommendation{}, forecast.Forecast{}, err
	}
	fc, err := forecast.HoltWinters(in.History, in.HorizonDays)
	if err != nil {
		return Recommendation{}, forecast.Forecast{}, err
	}
	rec := Recommendation{GPUModel: in.Fleet.Model, Target: in.Target, TargetText: in.Target.String(), Quantile: in.Quantile,
		LeadTimeDays: in.LeadTimeDays, LeadTimeSource: in.LeadTimeSource, Fleet: in.Fleet}
	r := &replayer{cat: in.Catalog, policy: in.Policy, model: in.Fleet, pool: in.Pool, target: in.Target, seed: in.Seed,
		start: in.Today, history: in.History, fc: fc, quantile: in.Quantile}
	weeks := in.HorizonDays / 7
	weekSum := func(w int) float64 {
		s := 0.0
		for d := 7 * w; d < 7*w+7; d++ {
			s += r.demand(d)
		}
		return s
	}
	busiest := func(from int) int {
		b := from
		for w := from; w < weeks; w++ {
			if weekSum(w) > weekSum(b) {
				b = w
			}
		}
		return b
	}
	cross := -1
	for w := range weeks {
		rp, err := r.week(7*w, 0)
		if err != nil {
			return Recommendation{}, fc, err
		}
		rec.Weeks = append(rec.Weeks, rp)
		if !rp.Meets {
			cross = w
			break
		}
	}
	if cross < 0 {
		b := busiest(0)
		rp := rec.Weeks[b]
		rec.Action, rec.Without = Nothing, &rp
		rec.Reasons = append(rec.Reasons, fmt.Sprintf("the busiest forecast week (from %s, %.0f GPU-hours at the %s) meets %s with today's %d GPUs in the replay: %s",
			rp.WeekStart.Format(time.DateOnly), rp.GPUHours, quantileWord(in.Quantile), rec.TargetText, rp.GPUs, describe(rp, in.Target)))
		return rec, fc, nil
	}
	crossing := in.Today.AddDate(0, 0, 7*cross)
	orderBy := crossing.AddDate(0, 0, -in.LeadTimeDays)
	rec.Crossing, rec.OrderBy = &crossing, &orderBy
	if orderBy.Before(in.Today) {
		rec.LateDays = int(in.Today.Sub(orderBy) / (24 * time.Hour))
	}
	if rec.Probability, err = r.missChance(7 * cross); err != nil {
		return Recommendation{}, fc, err
	}

	b := busiest(cross)
	without, err := r.week(7*b, 0)
	if err != nil {
		return Recommendation{}, fc, err
	}
	rec.Without = &without
	check := func(n int) (Replay, bool, error) {
		worst := Replay{}
		for _, w := range uniq(cross, b) {
			rp, err := r.week(7*w, n)
			if err != nil || !rp.Meets {
				return rp, false, err
			}
			if w == b {
				worst = rp
			}
		}
		return worst, true, nil
	}
	// The fewest nodes that pass: double from the sizing estimate until
	// one passes, then bisect (more nodes never serve the same jobs
	// worse).
	limit := maxOrderNodes(in.Fleet)
	lo, hi := 0, min(max(sizing(in.Fleet, weekSum(b), in.Target), 1), limit)
	var best Replay
	for {
		rp, ok, err := check(hi)
		if err != nil {
			return Recommendation{}, fc, err
		}
		if ok {
			best = rp
			break
		}
		if hi == limit {
			rec.Action = NoPlan
			rec.Reasons = append(rec.Reasons, fmt.Sprintf("from the week of %s the forecast misses %s, and even %d more nodes do not meet it in the replay of the week of %s (%s): no purchase of this model is recommended; look at the jobs' shape (sizes, run times) and the target",
				crossing.Format(time.DateOnly), rec.TargetText, limit, rp.WeekStart.Format(time.DateOnly), describe(rp, in.Target)))
			return rec, fc, nil
		}
		lo, hi = hi, min(2*hi, limit)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		rp, ok, err := check(mid)
		if err != nil {
			return Recommendation{}, fc, err
		}
		if ok {
			hi, best = mid, rp
		} else {
			lo = mid
		}
	}
	rec.Action, rec.Nodes, rec.GPUs, rec.With = Order, hi, hi*in.Fleet.GPUsPerNode, &best
	when := "order by " + orderBy.Format(time.DateOnly)
	if rec.LateDays > 0 {
		when = fmt.Sprintf("order now: the order-by date %s passed %d days ago, so the fleet misses the target until the GPUs arrive", orderBy.Format(time.DateOnly), rec.LateDays)
	}
	rec.Reasons = append(rec.Reasons,
		fmt.Sprintf("the forecast (%s of each day's demand) misses %s from the week of %s with today's %d GPUs: %s",
			quantileWord(in.Quantile), rec.TargetText, crossing.Format(time.DateOnly), in.Fleet.GPUs(), describe(rec.Weeks[cross], in.Target)),
		fmt.Sprintf("with %d more %s (%d GPUs) the busiest week (from %s, %.0f GPU-hours) meets it in the replay: %s; without them: %s",
			hi, plural(hi, "node"), rec.GPUs, best.WeekStart.Format(time.DateOnly), best.GPUHours, describe(best, in.Target), describe(without, in.Target)),
		fmt.Sprintf("lead time %d days (%s): %s", in.LeadTimeDays, in.LeadTimeSource, when))
	return rec, fc, nil
}

// sizing is the first guess of the nodes to add: enough that the week's
// demand fits at the target's allocation.
func sizing(f ModelFleet, weekGPUHours float64, t Target) int {
	share := serviceShare
	if t.Metric == Allocation {
		share = t.Limit
	}
	need := weekGPUHours/(7*24*share) - float64(f.GPUs())
	return int(math.Ceil(need / float64(f.GPUsPerNode)))
}

// maxOrderNodes bounds the search: four times the fleet and 64 nodes more.
func maxOrderNodes(f ModelFleet) int {
	return min(4*f.Nodes+64, gpufleet.MaxFleetNodes-f.Nodes)
}

// describe says what a replay showed, in the target's terms.
func describe(rp Replay, t Target) string {
	class := "all jobs"
	if t.Class != "" {
		class = string(t.Class) + " jobs"
	}
	pct := t.Percentile
	if pct == 0 {
		pct = 90
	}
	wait := fmt.Sprintf("p%d wait of %s %s", pct, class, WaitText(rp.WaitS))
	if rp.Waited == 0 {
		wait = "no " + class
	}
	return fmt.Sprintf("%d jobs on %d GPUs, allocation %.0f%%, %s", rp.Jobs, rp.GPUs, 100*rp.Allocation, wait)
}

func quantileWord(q float64) string { return fmt.Sprintf("%.0fth percentile", 100*q) }

func uniq(a, b int) []int {
	if a == b {
		return []int{a}
	}
	return []int{a, b}
}

// Marks are the dates a plot of the decision shows: the order-by date
// and the week the target is first missed.
func (r Recommendation) Marks() []forecast.Mark {
	var ms []forecast.Mark
	if r.OrderBy != nil {
		ms = append(ms, forecast.Mark{Day: *r.OrderBy, Label: "order by"})
	}
	if r.Crossing != nil {
		ms = append(ms, forecast.Mark{Day: *r.Crossing, Label: "target missed"})
	}
	return ms
}

// WaitText writes a wait for people: 40s, 12m, 3.5h, 2.1d.
func WaitText(s float64) string {
	switch {
	case s < 60:
		return fmt.Sprintf("%.0fs", s)
	case s < 3600:
		return fmt.Sprintf("%.0fm", s/60)
	case s < 2*86400:
		return fmt.Sprintf("%.1fh", s/3600)
	}
	return fmt.Sprintf("%.1fd", s/86400)
}

// plural writes a noun for n things.
func plural(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}

package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// OverBudgetPolicy is what the cycle does about a rack whose projected
// draw stays over its power budget (Config.OverBudget): where power caps
// cannot hold the budget, an alert only, or a stop.
type OverBudgetPolicy string

// The over-budget policies.
const (
	// OverBudgetAlert reports an over-budget rack (the projection, the
	// metrics) and stops nothing; the empty policy means the same.
	OverBudgetAlert OverBudgetPolicy = "alert"
	// OverBudgetStop stops, once a rack has been over its budget for
	// Config.OverBudgetAfter, the most recently started preemptible job
	// with GPUs there (StopRackPower, with its grace), one job per rack
	// per cycle; a rack where only production or non-preemptible jobs run
	// gets a PowerAlert instead.
	OverBudgetStop OverBudgetPolicy = "stop"
)

// ParseOverBudgetPolicy reads --over-budget: alert or stop.
func ParseOverBudgetPolicy(s string) (OverBudgetPolicy, error) {
	switch p := OverBudgetPolicy(strings.ToLower(strings.TrimSpace(s))); p {
	case OverBudgetAlert, OverBudgetStop:
		return p, nil
	}
	return "", &gpufleet.ValueError{Field: "over-budget policy", Value: gpufleet.Quote(s), Want: "expected alert or stop"}
}

// String is the policy's name; the empty policy is alert.
func (p OverBudgetPolicy) String() string {
	if p == "" {
		return string(OverBudgetAlert)
	}
	return string(p)
}

// DefaultOverBudgetAfter is how long a rack must stay over its budget
// before the stop policy acts, unless the operator says otherwise
// (--over-budget-after): two minutes, a few heartbeats, so that one late
// reading or a job's brief spike stops nothing, while a draw that has
// really risen is acted on well within the minutes a breaker's margin
// and a facility's thermal mass allow. A choice, not a measurement.
const DefaultOverBudgetAfter = 2 * time.Minute

// PowerAlert is a rack over its budget for Config.OverBudgetAfter that
// the stop policy could not bring down: only jobs it may not stop run
// there.
type PowerAlert struct {
	Rack        string         `json:"rack"`
	DrawWatts   gpufleet.Watts `json:"draw_watts"`
	BudgetWatts gpufleet.Watts `json:"budget_watts"`
	// OverFor is how long the rack has been over its budget.
	OverFor time.Duration `json:"over_for"`
	Reason  string        `json:"reason"` // in words
}

// rackPowerStops decides the cycle's over-budget stops (Config.OverBudget
// = OverBudgetStop): for each rack over its budget for at least
// Config.OverBudgetAfter, the running job with GPUs there that started
// last (ties: the greatest id) among those it may stop (preemptible, not
// production, not stopping already, not chosen for another rack this
// cycle). A rack where a job is stopping already waits for that stop to
// take its draw off. jobs are the running jobs, by id. It returns the
// stops' reasons by job id, and an alert for each rack where no job may
// be stopped.
func rackPowerStops(cfg Config, racks []Rack, nodes []Node, jobs []*Job) (map[string]string, []PowerAlert) {
	if cfg.OverBudget != OverBudgetStop || len(racks) == 0 {
		return nil, nil
	}
	rackOf := make(map[string]string, len(nodes))
	for i := range nodes {
		if nodes[i].Rack != "" {
			rackOf[nodes[i].Name] = nodes[i].Rack
		}
	}
	in := func(j *Job, rack string) bool {
		for _, p := range j.Placement {
			if rackOf[p.Node] == rack {
				return true
			}
		}
		return false
	}
	var stops map[string]string
	var alerts []PowerAlert
	for _, r := range racks {
		if r.BudgetWatts <= 0 || r.DrawWatts <= r.BudgetWatts || r.OverBudgetFor < cfg.OverBudgetAfter {
			continue
		}
		var pick *Job
		stopping, held := false, false
		for _, j := range jobs {
			if !in(j, r.Name) {
				continue
			}
			held = true
			if !j.StopAt.IsZero() {
				stopping = true
				break
			}
			if !j.Preemptible || j.Priority == gpufleet.Production || stops[j.ID] != "" {
				continue
			}
			if pick == nil || j.Started.After(pick.Started) || j.Started.Equal(pick.Started) && j.ID > pick.ID {
				pick = j
			}
		}
		over := fmt.Sprintf("rack %s has drawn %s over its %s budget for %s (--over-budget-after %s)",
			r.Name, r.DrawWatts.Human(), r.BudgetWatts.Human(), gpufleet.FormatDuration(r.OverBudgetFor), gpufleet.FormatDuration(cfg.OverBudgetAfter))
		switch {
		case stopping:
			// A stop under way takes its draw off when its grace ends.
		case pick != nil:
			if stops == nil {
				stops = map[string]string{}
			}
			stops[pick.ID] = over + ": the most recently started preemptible job there is stopped"
		default:
			why := "no job runs there: its idle draw is over the budget"
			if held {
				why = "only production or non-preemptible jobs run there, and none is stopped"
			}
			alerts = append(alerts, PowerAlert{Rack: r.Name, DrawWatts: r.DrawWatts, BudgetWatts: r.BudgetWatts,
				OverFor: r.OverBudgetFor, Reason: over + ": " + why})
		}
	}
	return stops, alerts
}

// overBudgetRecheck is when the stop policy may act on a rack over its
// budget for less than Config.OverBudgetAfter: the earliest moment one of
// them reaches it (zero: none).
func overBudgetRecheck(cfg Config, racks []Rack, now time.Time) time.Time {
	if cfg.OverBudget != OverBudgetStop {
		return time.Time{}
	}
	var at time.Time
	for _, r := range racks {
		if r.BudgetWatts <= 0 || r.DrawWatts <= r.BudgetWatts || r.OverBudgetFor >= cfg.OverBudgetAfter {
			continue
		}
		if t := now.Add(cfg.OverBudgetAfter - r.OverBudgetFor); at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
}

package scheduler

import (
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet"
)

// StopUpgrade is the code of a stop that moves a job to a faster model.
const StopUpgrade = gpufleet.StopUpgrade

// upgradeMinSaving is the least an upgrade must save, whatever
// RestartCost says (a server configured with none).
const upgradeMinSaving = time.Minute

// upgradeSpeedup is how much faster the model a job moves to must be than
// its own (by the roofline ratio of slowdownOn): a V100 over a P100 is
// 1.23, under slowerMin, but saves a 24-day job five days.
const upgradeSpeedup = 1.2

// upgrade moves running jobs off models far slower than the fastest they
// may use (Config.UpgradeGain). It runs after the cycle's placements, so
// it takes only GPUs no queued job could start on now; it searches as a
// queued job of the same request would, in the cycle's backfill mode, so
// a reservation holds. A job moves only to a model at least
// upgradeSpeedup times faster than its own, and only when what it saves
// pays its restart UpgradeGain times over. The GPUs it will take are held
// for the rest of the cycle (its estimate there, after its grace), so two
// jobs never count on the same ones and the ETAs see them taken. A job at
// a preemption bound (protected) stays: a move is an interruption too.
func (s *sched) upgrade() {
	if s.cfg.UpgradeGain <= 0 || !s.cfg.Preemption || !s.cfg.HeterogeneityPreference {
		return // without the preference no shape knows its models' slowdowns
	}
	restart := s.cfg.RestartCost
	need := max(time.Duration(s.cfg.UpgradeGain*float64(restart)), upgradeMinSaving)
	for _, v := range s.running {
		// The cheap tests first: a huge cycle has hundreds of thousands
		// of running jobs, few of which ask for the fastest model.
		if v.stopping || v.victim || v.protected || !v.job.Preemptible || len(v.g.allocs) == 0 ||
			v.job.Resources.Prefer != gpufleet.Fastest || v.g.allocs[0].inst >= 0 {
			continue
		}
		left := v.job.Started.Add(s.estimateOf(v.job)).Sub(s.now)
		if left <= need {
			continue
		}
		sh := s.shapeOf(&v.job.Resources)
		if sh.invalid != "" || sh.kind != gpufleet.Exclusive || len(sh.models) < 2 || sh.slower == nil {
			continue // only a job that asks for the fastest model has its models' slowdowns
		}
		a := v.g.allocs[0]
		cur := s.f.nodes[a.node].gpus[a.gpu].model
		if sh.slower[cur] < upgradeSpeedup {
			continue // on one of its fastest models already
		}
		// Searched as the job would be if it were queued now: its slower
		// models wait (slowerWait), so a fit is on a faster one.
		tmp := *v.job
		tmp.Placement, tmp.Started, tmp.StopAt, tmp.StopCode, tmp.Queued = nil, time.Time{}, time.Time{}, "", s.now
		best := left
		for _, m := range sh.models {
			best = min(best, time.Duration(float64(left)*sh.slower[m]/sh.slower[cur]))
		}
		tmp.Estimate = best
		p := &pjob{job: &tmp, idx: -1, rank: v.rank, team: v.team, shape: sh, est: best, submit: tmp.Submitted.UnixNano(),
			prod: tmp.Priority == gpufleet.Production}
		if p.static = s.staticWhy(p); p.static != nil {
			continue
		}
		if s.cfg.Quotas {
			p.demand = s.charge(sh, sh.models[0])
			for _, m := range sh.models {
				if c := s.f.models[m].class; c >= 0 && s.teams[p.team].quota[c] > 0 {
					p.classes = append(p.classes, c)
				}
			}
		}
		pl, _, ok := s.tryPlace(p, s.modeFor(p, s.now))
		if !ok || sh.slower[cur] < upgradeSpeedup*sh.slower[pl.model] {
			continue
		}
		there := time.Duration(float64(left) * sh.slower[pl.model] / sh.slower[cur])
		saving := left - there - restart
		if saving < need {
			continue
		}
		grace := s.graceOf(v.job)
		if x := s.f.pidx; x != nil {
			x.removeVictim(v)
		}
		v.victim, v.stopping, v.stopEnd = true, true, s.now.Add(grace)
		v.g.gen++ // its end is its grace's now
		s.events.push(event{at: v.stopEnd, g: v.g, gen: v.g.gen})
		hold := &grant{allocs: pl.allocs, team: v.team, class: s.f.models[pl.model].class, charge: s.charge(sh, pl.model)}
		s.grantWatts(hold, v.job.Priority)
		s.takeGrant(hold)
		s.events.push(event{at: v.stopEnd.Add(there), g: hold, gen: hold.gen})
		s.out.Stops = append(s.out.Stops, Stop{Job: v.job.ID, Code: StopUpgrade, Grace: grace,
			Reason: fmt.Sprintf("moves to %s, which has room: about %s left on %s against %s there, %s saved for a restart of %s; grace %s to checkpoint",
				s.f.models[pl.model].id, gpufleet.FormatDuration(left), s.f.models[cur].id, gpufleet.FormatDuration(there),
				gpufleet.FormatDuration(saving), gpufleet.FormatDuration(restart), grace)})
		s.out.Stats.Upgraded++
	}
}

package scheduler

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// buildTeams interns teams and the quota classes their quotas name.
func (s *sched) buildTeams() {
	classes := map[string]bool{}
	for _, t := range s.in.Teams {
		for c := range t.Quota {
			classes[c] = true
		}
	}
	s.classes = sortedKeys(classes)
	s.teamIdx = map[string]int32{}
	teams := slices.Clone(s.in.Teams)
	slices.SortStableFunc(teams, func(a, b Team) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range teams {
		i := s.team(t.Name)
		ts := &s.teams[i]
		if t.Weight > 0 {
			ts.weight = t.Weight
		}
		ts.usage = t.Usage
		ts.limit = -1
		if t.BorrowingLimit >= 0 {
			ts.limit = int64(t.BorrowingLimit) * unit
		}
		for ci, c := range s.classes {
			ts.quota[ci] = int64(t.Quota[c]) * unit
		}
	}
}

// classOf maps a model to the quota class that covers it: a class named
// by the model's catalog id first, else the first admin-defined class (by
// name) that lists it; -1 when no quota covers the model.
func (s *sched) classOf(model string) int32 {
	for i, c := range s.classes {
		if strings.EqualFold(c, model) {
			return int32(i)
		}
	}
	for i, c := range s.classes {
		for _, id := range s.in.Classes[c] {
			if strings.EqualFold(id, model) {
				return int32(i)
			}
		}
	}
	return -1
}

// admit checks a placement of charge milli-GPUs on model m against the
// team's quota: within quota always; beyond it only within the borrowing
// limit and only out of idle capacity, capacity that teams still under
// their quota are not waiting for.
// With explain, a refusal carries its reason in words.
func (s *sched) admit(t, m int32, charge int64, explain bool) (bool, why) {
	if !s.cfg.Quotas {
		return true, why{}
	}
	c := s.f.models[m].class
	if c < 0 {
		return true, why{}
	}
	ts := &s.teams[t]
	used := ts.used[c] + charge
	if used <= ts.quota[c] {
		return true, why{}
	}
	if ts.limit >= 0 && used-ts.quota[c] > ts.limit {
		if !explain {
			return false, why{code: ReasonQuota, class: c, limit: true}
		}
		return false, why{code: ReasonQuota, class: c, limit: true,
			quota: &[5]int64{ts.used[c], charge, ts.quota[c], max(0, ts.used[c]-ts.quota[c]), ts.limit}}
	}
	if reserve := s.ownersReserve(c, t); s.f.classFree[c]-charge < reserve {
		if !explain {
			return false, why{code: ReasonQuota, class: c}
		}
		return false, why{code: ReasonQuota, class: c,
			quota: &[5]int64{ts.used[c], charge, ts.quota[c], max(0, s.f.classFree[c]), reserve}}
	}
	return true, why{}
}

// ownersReserve is the capacity of class c that other teams under their
// quota have queued work for.
func (s *sched) ownersReserve(c, except int32) int64 {
	var r int64
	for i := range s.teams {
		if int32(i) == except {
			continue
		}
		ts := &s.teams[i]
		if unused := ts.quota[c] - ts.used[c]; unused > 0 {
			r += min(unused, ts.demand[c])
		}
	}
	return r
}

// quotaNever reports a job no quota will ever admit: more than quota plus
// borrowing limit on every model it may use.
func (s *sched) quotaNever(p *pjob) *why {
	if !s.cfg.Quotas {
		return nil
	}
	ts := &s.teams[p.team]
	var first *why
	for _, m := range p.shape.models {
		c := s.f.models[m].class
		ch := s.charge(p.shape, m)
		if c < 0 || ts.limit < 0 || ch <= ts.quota[c]+ts.limit {
			return nil
		}
		if first == nil {
			e := bare(ReasonQuotaExceeded)
			limit := float64(ts.limit) / unit
			e.Exhausted = gpufleet.DimQuota
			e.Quota = &gpufleet.QuotaShortfall{Class: s.classes[c], Asked: float64(ch) / unit, Quota: float64(ts.quota[c]) / unit, Limit: &limit}
			first = exWhy(e)
		}
	}
	return first
}

// markBorrowed flags, per team and class, the most recently started
// running jobs beyond the team's quota: they run on borrowed capacity and
// are the first to give it back.
func (s *sched) markBorrowed() {
	if !s.cfg.Quotas {
		return
	}
	// s.running is in id order: sort by start, then that order, on keys
	// that need no job read.
	type startKey struct {
		t time.Time
		i int32
	}
	keys := make([]startKey, len(s.running))
	for i, r := range s.running {
		keys[i] = startKey{r.job.Started, int32(i)}
	}
	slices.SortFunc(keys, func(a, b startKey) int {
		if c := a.t.Compare(b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	byStart := make([]*rjob, len(keys))
	for i, k := range keys {
		byStart[i] = s.running[k.i]
	}
	cum := make([][]int64, len(s.teams))
	for i := range cum {
		cum[i] = make([]int64, len(s.classes))
	}
	for _, r := range byStart {
		c := r.g.class
		if c < 0 {
			continue
		}
		cum[r.team][c] += r.g.charge
		r.borrowed = cum[r.team][c] > s.teams[r.team].quota[c]
	}
}

package scheduler

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// order sorts the queue into cluster order:
//
//  1. priority class, highest first (when Config.PriorityClasses);
//  2. starving jobs (Config.StarvationSlowdown) first within their class,
//     then requeued jobs (preempted, drained, lost);
//  3. with Config.SizeSlack > 0, a virtual deadline: submit time plus
//     SizeSlack x estimated GPU-seconds, scaled by the team's fair-share
//     factor when Config.FairShare (see fairFactors); earliest first. Short
//     jobs go ahead of long ones, and every job ages: a job is passed only
//     by jobs whose deadline is earlier than its own, so none starves;
//  4. otherwise fair share (when Config.FairShare): each team's jobs carry
//     a virtual start tag, the team's decayed usage plus the GPU-seconds of
//     its earlier queued jobs, divided by its weight; lower tags go first,
//     so teams interleave in proportion to their weights and light users go
//     ahead of heavy ones (start-time fair queueing over Slurm-style
//     decayed usage);
//  5. submit time, then job id.
func (s *sched) order() {
	sized := s.cfg.SizeSlack > 0
	switch {
	case sized && s.cfg.ResponseRatio:
		factor := s.fairFactors()
		now := float64(s.now.UnixNano()) / 1e9
		for _, p := range s.pending {
			est := max(p.est.Seconds(), 1)
			ratio := (max(now-float64(p.submit)/1e9, 0) + est) / est
			if factor != nil {
				ratio /= factor[p.team]
			}
			p.tag = -ratio
		}
	case sized:
		factor := s.fairFactors()
		for _, p := range s.pending {
			slack := s.cfg.SizeSlack * p.est.Seconds()
			if factor != nil {
				slack *= factor[p.team]
			}
			p.tag = float64(p.submit)/1e9 + slack
		}
	case s.cfg.FairShare:
		byTeam := slices.Clone(s.pending)
		slices.SortFunc(byTeam, func(a, b *pjob) int {
			if c := cmp.Compare(a.team, b.team); c != 0 {
				return c
			}
			return submitOrder(a, b)
		})
		vt := make([]float64, len(s.teams))
		for i := range s.teams {
			vt[i] = s.teams[i].usage / s.teams[i].weight
		}
		for _, p := range byTeam {
			p.tag = vt[p.team]
			vt[p.team] += float64(p.job.Resources.GPUs) * p.est.Seconds() / s.teams[p.team].weight
		}
	}
	useTag := sized || s.cfg.FairShare
	for _, p := range s.pending {
		p.starve = s.starving(p)
	}
	slices.SortFunc(s.pending, func(a, b *pjob) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		if a.starve != b.starve {
			if a.starve {
				return -1
			}
			return 1
		}
		if a.job.Requeued != b.job.Requeued {
			if a.job.Requeued {
				return -1
			}
			return 1
		}
		if useTag {
			if c := cmp.Compare(a.tag, b.tag); c != 0 {
				return c
			}
		}
		return submitOrder(a, b)
	})
}

// fairFactors scales each team's deadline slack by its use of the fleet
// against its weight: factor = clamp(sqrt(x / mean x), 1/c, c) with
// x = (decayed usage + 1 GPU-hour) / weight over the teams with queued jobs
// and c = Config.FairShareClamp (2). A team that used twice its share ages
// its jobs about 1.4 times slower, one that used half about 1.4 times
// faster; the clamp keeps every job's wait bounded. nil without fair share.
func (s *sched) fairFactors() []float64 {
	if !s.cfg.FairShare {
		return nil
	}
	active := make([]bool, len(s.teams))
	for _, p := range s.pending {
		active[p.team] = true
	}
	x := make([]float64, len(s.teams))
	sum, n := 0.0, 0
	for i := range s.teams {
		x[i] = (s.teams[i].usage + 3600) / s.teams[i].weight
		if active[i] {
			sum += x[i]
			n++
		}
	}
	f := make([]float64, len(s.teams))
	for i := range f {
		f[i] = 1
		if n > 0 && sum > 0 {
			c := s.cfg.FairShareClamp
			f[i] = min(c, max(1/c, math.Sqrt(x[i]/(sum/float64(n)))))
		}
	}
	return f
}

func submitOrder(a, b *pjob) int {
	if c := cmp.Compare(a.submit, b.submit); c != 0 {
		return c
	}
	return strings.Compare(a.job.ID, b.job.ID)
}

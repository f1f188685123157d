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
//
// Other policies replace 3 and 4: Config.ShortestFirst (estimated
// remaining time, shortest first), Config.Multifactor (Slurm's priority,
// highest first) and Config.LASThresholds (the LAS queue is part of the
// rank, see rankOf; first come first served within a queue).
func (s *sched) order() {
	sized := s.cfg.SizeSlack > 0
	useTag := sized || s.cfg.FairShare || s.cfg.ShortestFirst || s.cfg.Multifactor != nil
	switch {
	case s.cfg.ShortestFirst:
		for _, p := range s.pending {
			p.tag = p.est.Seconds()
		}
	case s.cfg.Multifactor != nil:
		s.multifactor()
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

// multifactor tags each queued job with minus its Slurm multifactor
// priority (see Multifactor), so that the highest goes first.
func (s *sched) multifactor() {
	mf := s.cfg.Multifactor
	var usage, weight float64
	for i := range s.teams {
		usage += s.teams[i].usage
		weight += s.teams[i].weight
	}
	var fleetGPUs int
	for m := range s.f.models {
		fleetGPUs += s.f.models[m].gpus
	}
	now := s.now.UnixNano()
	for _, p := range s.pending {
		eligible := p.submit
		if !p.job.Queued.IsZero() {
			eligible = p.job.Queued.UnixNano()
		}
		age := 1.0
		if mf.MaxAge > 0 {
			age = min(1, max(0, float64(now-eligible)/float64(mf.MaxAge)))
		}
		fs := 1.0
		if t := &s.teams[p.team]; usage > 0 && weight > 0 && t.weight > 0 {
			fs = math.Exp2(-(t.usage / usage) / (t.weight / weight))
		}
		size := 0.0
		if fleetGPUs > 0 {
			size = min(1, float64(p.job.Resources.GPUs)/float64(fleetGPUs))
		}
		if mf.FavorSmall {
			size = 1 - size
		}
		p.tag = -(mf.AgeWeight*age + mf.FairShareWeight*fs + mf.JobSizeWeight*size)
	}
}

func submitOrder(a, b *pjob) int {
	if c := cmp.Compare(a.submit, b.submit); c != 0 {
		return c
	}
	return strings.Compare(a.job.ID, b.job.ID)
}

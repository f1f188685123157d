package scheduler

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// order puts the queued jobs in cluster order, returning their indices
// in it:
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
func (s *sched) order(qs []queued) []int32 {
	sized := s.cfg.SizeSlack > 0
	switch {
	case s.cfg.ShortestFirst:
		for i := range qs {
			qs[i].tag = qs[i].est.Seconds()
		}
	case s.cfg.Multifactor != nil:
		s.multifactor(qs)
	case sized && s.cfg.ResponseRatio:
		factor := s.fairFactors(qs)
		now := float64(s.now.UnixNano()) / 1e9
		for i := range qs {
			q := &qs[i]
			est := max(q.est.Seconds(), 1)
			ratio := (max(now-float64(q.submit)/1e9, 0) + est) / est
			if factor != nil {
				ratio /= factor[q.team]
			}
			q.tag = -ratio
		}
	case sized:
		factor := s.fairFactors(qs)
		for i := range qs {
			q := &qs[i]
			slack := s.cfg.SizeSlack * q.est.Seconds()
			if factor != nil {
				slack *= factor[q.team]
			}
			q.tag = float64(q.submit)/1e9 + slack
		}
	case s.cfg.FairShare:
		byTeam := make([]int32, len(qs))
		for i := range byTeam {
			byTeam[i] = int32(i)
		}
		slices.SortFunc(byTeam, func(a, b int32) int {
			if c := cmp.Compare(qs[a].team, qs[b].team); c != 0 {
				return c
			}
			if c := cmp.Compare(qs[a].submit, qs[b].submit); c != 0 {
				return c
			}
			return strings.Compare(qs[a].job.ID, qs[b].job.ID)
		})
		vt := make([]float64, len(s.teams))
		for i := range s.teams {
			vt[i] = s.teams[i].usage / s.teams[i].weight
		}
		for _, i := range byTeam {
			q := &qs[i]
			q.tag = vt[q.team]
			vt[q.team] += float64(q.job.Resources.GPUs) * q.est.Seconds() / s.teams[q.team].weight
		}
	}
	useTag := sized || s.cfg.FairShare || s.cfg.ShortestFirst || s.cfg.Multifactor != nil
	// Sort compact keys: the comparison then reads no job but for ties of
	// everything up to the id.
	keys := make([]orderKey, len(qs))
	for i := range qs {
		q := &qs[i]
		q.starve = s.starvingAt(q.est, q.job.Submitted)
		k := orderKey{rank: q.rank, submit: q.submit, i: int32(i)}
		if !q.starve {
			k.flags |= 2
		}
		if !q.job.Requeued {
			k.flags |= 1
		}
		if useTag {
			k.tag = q.tag
		}
		keys[i] = k
	}
	slices.SortFunc(keys, func(a, b orderKey) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		if c := cmp.Compare(a.flags, b.flags); c != 0 {
			return c
		}
		if c := cmp.Compare(a.tag, b.tag); c != 0 {
			return c
		}
		if c := cmp.Compare(a.submit, b.submit); c != 0 {
			return c
		}
		if c := strings.Compare(qs[a.i].job.ID, qs[b.i].job.ID); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	perm := make([]int32, len(keys))
	for i, k := range keys {
		perm[i] = k.i
	}
	return perm
}

// queued is a queued job as read from the input, before it takes its
// place in the cluster order (order), with what the order needs.
type queued struct {
	job    *Job
	shape  *shape
	team   int32
	rank   int32
	est    time.Duration
	submit int64 // Unix nanoseconds
	tag    float64
	starve bool
	prod   bool // production class
}

// orderKey is what the cluster order compares of a queued job: its class
// rank, whether it is starving (flags bit 1 clear) and requeued (bit 0
// clear), its tag, its submit time, then its id and, for jobs with the
// same id, its place in the input.
type orderKey struct {
	rank   int32
	flags  uint8
	tag    float64
	submit int64
	i      int32
}

// fairFactors scales each team's deadline slack by its use of the fleet
// against its weight: factor = clamp(sqrt(x / mean x), 1/c, c) with
// x = (decayed usage + 1 GPU-hour) / weight over the teams with queued jobs
// and c = Config.FairShareClamp (2). A team that used twice its share ages
// its jobs about 1.4 times slower, one that used half about 1.4 times
// faster; the clamp keeps every job's wait bounded. nil without fair share.
func (s *sched) fairFactors(qs []queued) []float64 {
	if !s.cfg.FairShare {
		return nil
	}
	active := make([]bool, len(s.teams))
	for i := range qs {
		active[qs[i].team] = true
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
func (s *sched) multifactor(qs []queued) {
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
	for i := range qs {
		q := &qs[i]
		eligible := q.submit
		if !q.job.Queued.IsZero() {
			eligible = q.job.Queued.UnixNano()
		}
		age := 1.0
		if mf.MaxAge > 0 {
			age = min(1, max(0, float64(now-eligible)/float64(mf.MaxAge)))
		}
		fs := 1.0
		if t := &s.teams[q.team]; usage > 0 && weight > 0 && t.weight > 0 {
			fs = math.Exp2(-(t.usage / usage) / (t.weight / weight))
		}
		size := 0.0
		if fleetGPUs > 0 {
			size = min(1, float64(q.job.Resources.GPUs)/float64(fleetGPUs))
		}
		if mf.FavorSmall {
			size = 1 - size
		}
		q.tag = -(mf.AgeWeight*age + mf.FairShareWeight*fs + mf.JobSizeWeight*size)
	}
}

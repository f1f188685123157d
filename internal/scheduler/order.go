package scheduler

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
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
// highest first), Config.LASThresholds (the LAS queue is part of the
// rank, see rankOf; first come first served within a queue),
// Config.DominantShare (DRF's progressive filling, dominantShares) and
// Config.FinishTimeFair (Themis' rho, finishTimeFair).
func (s *sched) order(qs []queued) []int32 {
	sized := s.cfg.SizeSlack > 0
	switch {
	case s.cfg.ShortestFirst:
		for i := range qs {
			qs[i].tag = qs[i].est.Seconds()
		}
	case s.cfg.Multifactor != nil:
		s.multifactor(qs)
	case s.cfg.DominantShare:
		s.dominantShares(qs)
	case s.cfg.FinishTimeFair:
		s.finishTimeFair(qs)
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
		byTeam := byTeamSubmit(qs)
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
	useTag := sized || s.cfg.FairShare || s.cfg.ShortestFirst || s.cfg.Multifactor != nil || s.cfg.DominantShare || s.cfg.FinishTimeFair
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
	fleetGPUs := s.fleetGPUs()
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
			size = min(1, float64(q.job.Resources.GPUs)/fleetGPUs)
		}
		if mf.FavorSmall {
			size = 1 - size
		}
		q.tag = -(mf.AgeWeight*age + mf.FairShareWeight*fs + mf.JobSizeWeight*size)
	}
}

// fleetGPUs is the fleet's GPUs, every model's.
func (s *sched) fleetGPUs() float64 {
	n := 0
	for m := range s.f.models {
		n += s.f.models[m].gpus
	}
	return float64(n)
}

// demandGPUs is what a queued job asks for in whole GPUs: a MIG instance
// or a time-slice share counts its part of a GPU.
func (s *sched) demandGPUs(q *queued) float64 {
	if q.shape.kind == gpufleet.Exclusive || len(q.shape.models) == 0 {
		return float64(q.shape.gpus)
	}
	return float64(s.charge(q.shape, q.shape.models[0])) / unit
}

// heldGPUs is the GPUs each team's running jobs hold now.
func (s *sched) heldGPUs() []float64 {
	held := make([]float64, len(s.teams))
	for _, r := range s.running {
		held[r.team] += runGPUTime(r.job.Placement, time.Second).Seconds()
	}
	return held
}

// dominantShares tags queued jobs by DRF's progressive filling
// (Config.DominantShare): a team's tag is its share of the fleet's GPUs
// held now over its weight, and each of its queued jobs, in submit order,
// adds its GPUs to it, so that sorting by tag serves the team with the
// smallest share next, job by job. The ETA simulation's re-sorts keep the
// cycle's shares (what runs now), not the simulated ones.
func (s *sched) dominantShares(qs []queued) {
	total := max(s.fleetGPUs(), 1)
	share := s.heldGPUs()
	for i := range share {
		share[i] /= total * s.teams[i].weight
	}
	for _, i := range byTeamSubmit(qs) {
		q := &qs[i]
		q.tag = share[q.team]
		share[q.team] += s.demandGPUs(q) / (total * s.teams[q.team].weight)
	}
}

// finishTimeFair tags queued jobs with minus their finish-time fairness
// (Config.FinishTimeFair): rho = T_shared / T_independent, where T_shared
// is the time since submit plus the estimate left, and T_independent the
// job's whole run (its earlier runs and its estimate left) on a 1/N share
// of the fleet, N the teams with queued or running jobs: as long as the
// run where the job fits in that share, longer by the excess where it
// does not. The highest rho, the job furthest behind its fair finish,
// goes first.
func (s *sched) finishTimeFair(qs []queued) {
	active := make([]bool, len(s.teams))
	n := 0
	mark := func(t int32) {
		if !active[t] {
			active[t] = true
			n++
		}
	}
	for i := range qs {
		mark(qs[i].team)
	}
	for _, r := range s.running {
		mark(r.team)
	}
	fair := max(s.fleetGPUs(), 1) / float64(max(n, 1))
	now := float64(s.now.UnixNano()) / 1e9
	for i := range qs {
		q := &qs[i]
		g := max(s.demandGPUs(q), 1e-3)
		left := max(q.est.Seconds(), 1)
		whole := left + q.job.Attained.Seconds()/g
		shared := max(now-float64(q.submit)/1e9, 0) + left
		q.tag = -shared / (whole * max(1, g/fair))
	}
}

// byTeamSubmit is the queued jobs' indices by team, then submit time,
// then id: the order in which a team's jobs take their fair-share tags.
func byTeamSubmit(qs []queued) []int32 {
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
	return byTeam
}

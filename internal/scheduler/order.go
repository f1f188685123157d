package scheduler

import (
	"cmp"
	"slices"
	"strings"
)

// order sorts the queue into cluster order:
//
//  1. priority class, highest first (when Config.PriorityClasses);
//  2. requeued jobs (preempted, drained, lost) first within their class;
//  3. fair share (when Config.FairShare): each team's jobs carry a virtual
//     start tag, the team's decayed usage plus the GPU-seconds of its
//     earlier queued jobs, divided by its weight; lower tags go first, so
//     teams interleave in proportion to their weights and light users go
//     ahead of heavy ones (start-time fair queueing over Slurm-style
//     decayed usage);
//  4. submit time, then job id.
func (s *sched) order() {
	if s.cfg.FairShare {
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
	slices.SortFunc(s.pending, func(a, b *pjob) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		if a.job.Requeued != b.job.Requeued {
			if a.job.Requeued {
				return -1
			}
			return 1
		}
		if s.cfg.FairShare {
			if c := cmp.Compare(a.tag, b.tag); c != 0 {
				return c
			}
		}
		return submitOrder(a, b)
	})
}

func submitOrder(a, b *pjob) int {
	if c := cmp.Compare(a.submit, b.submit); c != 0 {
		return c
	}
	return strings.Compare(a.job.ID, b.job.ID)
}

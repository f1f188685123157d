package scheduler

import (
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Apply advances a snapshot the way the fleet will once the caller has
// carried out a decision: out, made by Schedule(in) at in.Now, applied,
// then time moved to now. Every caller's view of what a decision does is
// this one:
//
//   - a start puts its job on its placement, started at in.Now;
//   - a stop leaves its job on its GPUs, stopping, until its grace ends
//     (StopAt = in.Now + Stop.Grace);
//   - a job whose grace has ended by now leaves its GPUs: a preempted or
//     drained one goes back to the queue (Requeued, Queued at the grace's
//     end; the run's GPU-time adds to Attained; a preempted one counts it
//     in Preemptions and RecentPreemptions, which keeps only the last
//     PreemptionWindow), a timed-out or
//     cancelled one ends (it leaves the snapshot);
//   - a failed job ends.
//
// The simulator and the schedtest harness drive the scheduler with it;
// the server stops at Decided, learning from agents when a run is over
// (docs/ARCHITECTURE.md). Apply with an empty Output only
// moves time: graces that end by now are carried out. It does not change
// in; the result shares nothing with it but Nodes, Models and Classes.
func Apply(in Input, out Output, now time.Time) Input {
	next := Decided(in, out)
	kept := next.Jobs[:0]
	for _, j := range next.Jobs {
		if j.Running() && !j.StopAt.IsZero() && !j.StopAt.After(now) {
			end := AfterRun(j.Retries, j.CancelRequested, RunEnd{State: gpufleet.AttemptStopped, Stop: j.StopCode})
			if end.State != gpufleet.JobQueued {
				continue // timed out, cancelled or invalid: it ends
			}
			j.Attained += runGPUTime(j.Placement, j.StopAt.Sub(j.Started))
			if j.StopCode.IsPreemption() {
				j.Preemptions++
				j.RecentPreemptions = recentSince(j.RecentPreemptions, now.Add(-PreemptionWindow), j.StopAt)
			}
			j.Requeued, j.Queued = j.Requeued || end.Interrupted, j.StopAt
			j.Placement, j.Started, j.StopAt, j.StopCode = nil, time.Time{}, time.Time{}, ""
		}
		kept = append(kept, j)
	}
	next.Jobs = kept
	next.Now = now
	return next
}

// Decided is the fleet the instant a decision is carried out: out, made
// by Schedule(in), applied at in.Now, and no time moved. A start puts its
// job on its placement (Started = in.Now); a stop marks its job stopping
// (StopAt = in.Now + Stop.Grace, StopCode); a failed job leaves. A job
// whose grace has ended stays on its GPUs: whether its run is over is
// for the caller to learn (the server from the agent's report, through
// Ended) or to assume (Apply). The server's view of the fleet between
// cycles is this. It does not change in.
func Decided(in Input, out Output) Input {
	// The decisions are few and the jobs many: index the decisions.
	starts := make(map[string][]Placement, len(out.Starts))
	for _, st := range out.Starts {
		starts[st.Job] = st.Placement
	}
	stops := make(map[string]Stop, len(out.Stops))
	for _, st := range out.Stops {
		stops[st.Job] = st
	}
	failed := make(map[string]bool, len(out.Fails))
	for _, f := range out.Fails {
		failed[f.Job] = true
	}
	kept := make([]Job, 0, len(in.Jobs))
	for _, j := range in.Jobs {
		if len(failed) > 0 && failed[j.ID] {
			continue
		}
		if len(starts) > 0 {
			if pl, ok := starts[j.ID]; ok {
				j.Placement, j.Started = slices.Clone(pl), in.Now
				j.StopAt, j.StopCode, j.Queued = time.Time{}, "", time.Time{}
			}
		}
		if len(stops) > 0 {
			if st, ok := stops[j.ID]; ok && j.Running() && j.StopAt.IsZero() {
				j.StopAt, j.StopCode = in.Now.Add(st.Grace), st.Code
			}
		}
		kept = append(kept, j)
	}
	in.Jobs = kept
	return in
}

// runGPUTime is the GPU-time of a run of length d on placement ps: GPUs
// (time-slice shares count their fraction) times d.
func runGPUTime(ps []Placement, d time.Duration) time.Duration {
	gpus := 0.0
	for _, p := range ps {
		f := p.Fraction
		if f <= 0 || f > 1 {
			f = 1
		}
		gpus += float64(len(p.GPUs)) * f
	}
	return time.Duration(gpus * float64(max(d, 0)))
}

// recentSince returns the times of ts after from, then t: a job's recent
// preemptions, the ones out of the window dropped (in a new slice).
func recentSince(ts []time.Time, from, t time.Time) []time.Time {
	out := make([]time.Time, 0, len(ts)+1)
	for _, x := range ts {
		if x.After(from) {
			out = append(out, x)
		}
	}
	return append(out, t)
}

// NextStopEnd is the earliest moment a stopping job's grace ends, for a
// caller that drives time by events; false when no job is stopping.
func NextStopEnd(in Input) (time.Time, bool) {
	var next time.Time
	for _, j := range in.Jobs {
		if j.Running() && !j.StopAt.IsZero() && (next.IsZero() || j.StopAt.Before(next)) {
			next = j.StopAt
		}
	}
	return next, !next.IsZero()
}

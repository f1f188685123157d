package scheduler

import (
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet"
)

// A job's life after its run ends, and its cancel, are decided here and
// nowhere else: the store persists AfterRun's answer in the transaction
// that records the attempt's end, Apply uses it when a stop's grace ends,
// and the simulator when a run ends or fails. What a stop code means for
// the job is gpufleet.StopCode.Requeues.

// RunEnd is how a job's run (its attempt) ended.
type RunEnd struct {
	// State is the attempt's terminal state: succeeded, failed (the
	// program exited non-zero, or its start failed), stopped (its agent
	// stopped it) or lost (its node went silent, or its agent fenced it).
	State gpufleet.AttemptState
	// ExitCode is the program's, when it exited.
	ExitCode *int
	// Stop is the stop the scheduler decided for the run, if it decided
	// one; empty when the run ended on its own or its node was lost.
	Stop gpufleet.StopCode
}

// Cause says why a job is in the state AfterRun gives it.
type Cause string

// The causes of a job's next state after a run.
const (
	CauseSucceeded   Cause = "succeeded"         // the run exited 0: the job succeeds
	CauseCancelled   Cause = "cancelled"         // its cancel was requested: it ends cancelled
	CauseRetry       Cause = "retry"             // the run failed and the job has a retry left: it queues again
	CauseNoRetries   Cause = "retries_exhausted" // the run failed with no retry left: the job fails
	CauseStopped     Cause = "stopped"           // the scheduler stopped it for good (time limit, invalid request): it fails
	CauseInterrupted Cause = "interrupted"       // preempted, drained or lost: it queues again, no retry used
)

// Next is a job's next state after a run ended.
type Next struct {
	State gpufleet.JobState // queued, succeeded, failed or cancelled
	Cause Cause
	// Retries is the job's retry budget after the run: Used grows by one
	// for a failed run (CauseRetry, CauseNoRetries).
	Retries gpufleet.Retries
	// Interrupted is set when the run's end counts as an interruption
	// (CauseInterrupted): the job goes to the front of its class.
	Interrupted bool
	// Stop is the stop that ended the job for good (CauseStopped).
	Stop gpufleet.StopCode
}

// AfterRun decides what becomes of a job whose run ended as e, with its
// retry budget r and whether its cancel was requested:
//
//   - a run that succeeded ends the job succeeded (even when a cancel was
//     requested: the work is done);
//   - any other end of a job whose cancel was requested ends it cancelled;
//   - a failed run uses a retry: the job queues again while Used <= Max,
//     else it fails;
//   - a run the scheduler stopped with a code that does not requeue (time
//     limit, cancel, invalid request, or a code the core does not know)
//     ends the job failed, without a retry, as Slurm's TIMEOUT does;
//   - a run stopped with a code that requeues, or stopped or lost without
//     a stop decided (its node went silent, its agent fenced it), queues
//     the job again as an interruption: no retry is used.
func AfterRun(r gpufleet.Retries, cancelRequested bool, e RunEnd) Next {
	switch {
	case e.State == gpufleet.AttemptSucceeded:
		return Next{State: gpufleet.JobSucceeded, Cause: CauseSucceeded, Retries: r}
	case cancelRequested:
		return Next{State: gpufleet.JobCancelled, Cause: CauseCancelled, Retries: r}
	case e.State == gpufleet.AttemptFailed:
		r.Used++
		if r.Used <= r.Max {
			return Next{State: gpufleet.JobQueued, Cause: CauseRetry, Retries: r}
		}
		return Next{State: gpufleet.JobFailed, Cause: CauseNoRetries, Retries: r}
	case e.Stop != "" && !e.Stop.Requeues():
		return Next{State: gpufleet.JobFailed, Cause: CauseStopped, Retries: r, Stop: e.Stop}
	}
	return Next{State: gpufleet.JobQueued, Cause: CauseInterrupted, Retries: r, Interrupted: true}
}

// Describe says in words what became of the job after attempt ended
// (the job event's detail).
func (n Next) Describe(attempt string, e RunEnd) string {
	switch n.Cause {
	case CauseRetry:
		return fmt.Sprintf("attempt %s failed%s; retry %d of %d", attempt, exitText(e.ExitCode), n.Retries.Used, n.Retries.Max)
	case CauseNoRetries:
		return fmt.Sprintf("attempt %s failed%s; no retries left (max %d)", attempt, exitText(e.ExitCode), n.Retries.Max)
	case CauseCancelled:
		return "attempt " + attempt + " " + string(e.State)
	case CauseStopped:
		return fmt.Sprintf("attempt %s stopped for good (%s)", attempt, n.Stop)
	case CauseInterrupted:
		if e.Stop != "" {
			return fmt.Sprintf("attempt %s %s (%s)", attempt, e.State, e.Stop)
		}
		return "attempt " + attempt + " " + string(e.State)
	}
	return "attempt " + attempt + " succeeded"
}

func exitText(code *int) string {
	if code == nil {
		return ""
	}
	return " (exit " + gpufleet.ExitText(*code) + ")"
}

// CancelAction is what a cancel request does to a job.
type CancelAction int

// The cancel actions.
const (
	// CancelNothing: the job has ended, or its cancel was requested
	// already.
	CancelNothing CancelAction = iota
	// CancelNow: the job is queued, nothing runs: it ends cancelled at
	// once.
	CancelNow
	// CancelStop: the job has a run: the cancel is recorded and the next
	// cycle stops the run with StopCancel and the job's grace; AfterRun
	// then ends it cancelled.
	CancelStop
)

// Cancel decides what cancelling a job in state s does.
func Cancel(s gpufleet.JobState, alreadyRequested bool) CancelAction {
	switch {
	case s.Terminal() || alreadyRequested:
		return CancelNothing
	case s == gpufleet.JobQueued:
		return CancelNow
	}
	return CancelStop
}

// End is a run that ended in a snapshot (Ended): the job and how.
type End struct {
	Job string
	RunEnd
}

// Ended advances a snapshot by runs that ended at now, as AfterRun
// decides: a job that queues again leaves its GPUs (Queued = now; an
// interruption sets Requeued, its run's GPU-time adds to Attained), a job
// that ends leaves the snapshot. It returns the snapshot and each end's
// Next, in the order of ends; an end naming a job that is not running is
// skipped (its Next is zero). It does not change in.
func Ended(in Input, ends []End, now time.Time) (Input, []Next) {
	idx := make(map[string]int, len(ends))
	for i, e := range ends {
		idx[e.Job] = i
	}
	next := make([]Next, len(ends))
	kept := make([]Job, 0, len(in.Jobs))
	for _, j := range in.Jobs {
		i, ok := idx[j.ID]
		if !ok || !j.Running() {
			kept = append(kept, j)
			continue
		}
		n := AfterRun(j.Retries, j.CancelRequested, ends[i].RunEnd)
		next[i] = n
		if n.State != gpufleet.JobQueued {
			continue
		}
		j.Attained += runGPUTime(j.Placement, now.Sub(j.Started))
		j.Retries, j.Requeued, j.Queued = n.Retries, j.Requeued || n.Interrupted, now
		j.Placement, j.Started, j.StopAt, j.StopCode = nil, time.Time{}, time.Time{}, ""
		kept = append(kept, j)
	}
	in.Jobs = kept
	return in, next
}

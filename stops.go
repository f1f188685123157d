package gpufleet

// Stop reason codes: why a running attempt was stopped, as the scheduler
// decides it (scheduler.Stop.Code) and as attempts, jobs, events and the
// agent's stop orders carry it (reason_code). One list for every package:
// the scheduler decides, the store records what each means for the job.
const (
	StopPreemptedPriority   = "preempted_priority"   // for a job of a higher class; requeues
	StopPreemptedReclaim    = "preempted_reclaim"    // borrowed capacity returned to its owner; requeues
	StopPreemptedStarvation = "preempted_starvation" // for a starving job; requeues
	StopDrain               = "drain"                // the node or GPU drains; requeues
	StopNodeLost            = "node_lost"            // the node went silent and its agent fenced the run; requeues
	StopTimeLimit           = "time_limit"           // the run reached the job's time limit; the job ends
	StopCancelled           = "cancelled"            // the job was cancelled; it ends
	StopInvalidRequest      = "invalid_request"      // the stored request is invalid; the job ends
)

// StopRequeues reports whether a job whose run was stopped with this code
// goes back to the queue once the run has stopped (preemptions, drains,
// lost nodes) rather than ending (time limit, cancel, invalid request).
// The job's retries are not used either way.
func StopRequeues(code string) bool {
	switch code {
	case StopTimeLimit, StopCancelled, StopInvalidRequest:
		return false
	}
	return true
}

package gpufleet

import (
	"fmt"
	"strconv"
)

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

// ExitText writes an attempt's exit code for people, naming the signal
// of a code above 128 (the shell's 128+N): 143 is SIGTERM, the signal a
// stop sends first (a job's stop_signal, such as SIGUSR1 = 138, ends a
// program that does not handle it); 137 is SIGKILL, sent when the grace
// ends.
func ExitText(code int) string {
	names := map[int]string{
		1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 9: "SIGKILL: killed after the grace, or out of memory",
		10: "SIGUSR1: a stop signal the program does not handle", 11: "SIGSEGV", 15: "SIGTERM: stopped, not handled",
	}
	if code > 128 && code < 128+65 {
		if n, ok := names[code-128]; ok {
			return fmt.Sprintf("%d (%s)", code, n)
		}
		return fmt.Sprintf("%d (signal %d)", code, code-128)
	}
	return strconv.Itoa(code)
}

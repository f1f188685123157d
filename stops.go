package gpufleet

import (
	"fmt"
	"slices"
	"strconv"
)

// StopCode says why a running attempt was stopped, as the scheduler
// decides it (scheduler.Stop.Code) and as attempts, jobs, events and the
// agent's stop orders carry it (reason_code). One list for every package:
// the scheduler decides, and what each code means for the job (requeue
// or end) is StopCode.Requeues, read by the core's transition alone.
type StopCode string

// The stop codes.
const (
	StopPreemptedPriority   StopCode = "preempted_priority"   // for a job of a higher class; requeues
	StopPreemptedReclaim    StopCode = "preempted_reclaim"    // borrowed capacity returned to its owner; requeues
	StopPreemptedStarvation StopCode = "preempted_starvation" // for a starving job; requeues
	StopDrain               StopCode = "drain"                // the node or GPU drains; requeues
	StopNodeLost            StopCode = "node_lost"            // the node went silent and its agent fenced the run; requeues
	StopTimeLimit           StopCode = "time_limit"           // the run reached the job's time limit; the job ends
	StopCancelled           StopCode = "cancelled"            // the job was cancelled; it ends
	StopInvalidRequest      StopCode = "invalid_request"      // the stored request is invalid; the job ends
	// StopRackPower stops a run because its rack's projected draw has
	// stayed over the rack's power budget longer than the operator allows
	// (gpufleet serve --over-budget stop); requeues. It is no preemption:
	// it is for the rack's sake, not another job's, and it counts against
	// no preemption bound, since a bound must not keep a rack over.
	StopRackPower StopCode = "rack_power"
	// StopUpgrade stops a run to move it to a faster GPU model that came
	// free (the scheduler's UpgradeGain); requeues. It is no preemption:
	// no other job needs the GPUs, and it counts against no bound.
	StopUpgrade StopCode = "upgrade"
)

// stopCodes is every code with whether it requeues.
var stopCodes = map[StopCode]bool{
	StopPreemptedPriority: true, StopPreemptedReclaim: true, StopPreemptedStarvation: true,
	StopDrain: true, StopNodeLost: true, StopRackPower: true, StopUpgrade: true,
	StopTimeLimit: false, StopCancelled: false, StopInvalidRequest: false,
}

// StopCodes lists the stop codes, sorted.
func StopCodes() []StopCode {
	out := make([]StopCode, 0, len(stopCodes))
	for c := range stopCodes {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// ParseStopCode reads a stop code; an empty or unknown one is an error
// wrapping ErrInvalid.
func ParseStopCode(s string) (StopCode, error) {
	c := StopCode(s)
	if _, ok := stopCodes[c]; !ok {
		return "", fmt.Errorf("%w: stop code %q: expected one of %v", ErrInvalid, s, StopCodes())
	}
	return c, nil
}

// Known reports whether c is one of the stop codes.
func (c StopCode) Known() bool {
	_, ok := stopCodes[c]
	return ok
}

// Requeues reports whether a job whose run was stopped with this code
// goes back to the queue once the run has stopped (preemptions, drains,
// lost nodes) rather than ending (time limit, cancel, invalid request).
// The job's retries are not used either way. An unknown code does not
// requeue: nothing the core did not decide brings a job back.
func (c StopCode) Requeues() bool { return stopCodes[c] }

// IsPreemption reports whether c stops a run for another job's sake (a
// preempted_* code); false for every other code, unknown ones included.
func (c StopCode) IsPreemption() bool {
	switch c {
	case StopPreemptedPriority, StopPreemptedReclaim, StopPreemptedStarvation:
		return true
	}
	return false
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

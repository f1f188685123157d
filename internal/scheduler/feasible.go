package scheduler

import (
	"time"

	"github.com/gpufleet/gpufleet"
)

// Feasible says why no state of in's fleet could ever run j as it asks:
// the reason code (ReasonUnplaceable, or ReasonQuotaExceeded when the
// team's quota and borrowing limit never allow it) and the sentence, the
// same a pending job would show; both empty when some state could. Node
// and GPU states are ignored, since a cordoned, draining or silent node may
// return; in.Jobs is ignored, since running work ends. The server asks it
// at submit, to refuse what could never run (a 422) rather than queue it
// silently.
func Feasible(in Input, j Job) (code, reason string) {
	e, reason := Explain(in, j)
	if e == nil {
		return "", ""
	}
	return e.Code, reason
}

// Explain is Feasible with the reason as data: the explanation (nil when
// some state could run j) and its sentence, the same a pending job would
// show. The server sends the explanation in a submission's 422.
func Explain(in Input, j Job) (*gpufleet.Explanation, string) {
	j.Placement, j.Started = nil, time.Time{}
	in.Jobs = []Job{j}
	in.Config.ETA = false
	s := newSched(&in, true) // it places nothing: no copy of the fleet
	s.explain = true
	if len(s.pending) == 0 {
		return nil, "" // failed as invalid: the caller's validation says why
	}
	w := s.pending[0].static
	if w == nil {
		return nil, ""
	}
	return s.explained(*w, false)
}

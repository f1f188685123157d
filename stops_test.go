package gpufleet

import (
	"errors"
	"testing"
)

func TestStopCode(t *testing.T) {
	for _, tc := range []struct {
		code               StopCode
		known, requeues, p bool
	}{
		{StopPreemptedPriority, true, true, true},
		{StopPreemptedReclaim, true, true, true},
		{StopPreemptedStarvation, true, true, true},
		{StopDrain, true, true, false},
		{StopNodeLost, true, true, false},
		{StopTimeLimit, true, false, false},
		{StopCancelled, true, false, false},
		{StopInvalidRequest, true, false, false},
		{StopRackPower, true, true, false},
		{StopUpgrade, true, true, false},
		{"preempted_by_magic", false, false, false}, // a prefix alone means nothing
		{"", false, false, false},
	} {
		if got := tc.code.Known(); got != tc.known {
			t.Errorf("%q.Known() = %v, want %v", tc.code, got, tc.known)
		}
		if got := tc.code.Requeues(); got != tc.requeues {
			t.Errorf("%q.Requeues() = %v, want %v", tc.code, got, tc.requeues)
		}
		if got := tc.code.IsPreemption(); got != tc.p {
			t.Errorf("%q.IsPreemption() = %v, want %v", tc.code, got, tc.p)
		}
		c, err := ParseStopCode(string(tc.code))
		if tc.known != (err == nil) || (err == nil && c != tc.code) {
			t.Errorf("ParseStopCode(%q) = %q, %v", tc.code, c, err)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseStopCode(%q): %v does not wrap ErrInvalid", tc.code, err)
		}
	}
	if n := len(StopCodes()); n != 10 {
		t.Errorf("StopCodes() has %d codes, want 10", n)
	}
}

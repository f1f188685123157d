package gpufleet

import "testing"

// TestRetriesString: what a job's retries read as, never "1 of 0 used".
func TestRetriesString(t *testing.T) {
	for r, want := range map[Retries]string{
		{Max: 0, Used: 0}: "none allowed",
		{Max: 0, Used: 1}: "none allowed: it failed on its first failure",
		{Max: 2, Used: 1}: "1 of 2 used",
		{Max: 2, Used: 3}: "all 2 used, then it failed",
	} {
		if got := r.String(); got != want {
			t.Errorf("%+v: %q, want %q", r, got, want)
		}
	}
}

func TestExitText(t *testing.T) {
	for code, want := range map[int]string{0: "0", 1: "1", 138: "138 (SIGUSR1: a stop signal the program does not handle)",
		143: "143 (SIGTERM: stopped, not handled)", 137: "137 (SIGKILL: killed after the grace, or out of memory)", 159: "159 (signal 31)", 255: "255"} {
		if got := ExitText(code); got != want {
			t.Errorf("ExitText(%d) = %q, want %q", code, got, want)
		}
	}
}

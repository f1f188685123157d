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

package planner

import (
	"errors"
	"testing"

	"github.com/gpufleet/gpufleet"
)

func TestParseModeAndBatch(t *testing.T) {
	for s, want := range map[string]Mode{"inference": Inference, " Training ": Training} {
		if got, err := ParseMode(s); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "serve", "train"} {
		if _, err := ParseMode(s); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParseMode(%q): %v, want ErrInvalid", s, err)
		}
	}
	for _, tc := range []struct {
		s   string
		n   int
		max bool
		ok  bool
	}{{"", 0, false, true}, {"max", 0, true, true}, {"MAX", 0, true, true}, {"64", 64, false, true},
		{"0", 0, false, false}, {"-1", 0, false, false}, {"lots", 0, false, false}, {"99999999999", 0, false, false}} {
		n, m, err := ParseBatch(tc.s)
		if (err == nil) != tc.ok || n != tc.n || m != tc.max {
			t.Errorf("ParseBatch(%q) = %d, %v, %v", tc.s, n, m, err)
		}
	}
}

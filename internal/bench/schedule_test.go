package bench_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/bench"
)

func TestParseSchedule(t *testing.T) {
	s, err := bench.ParseSchedule("every=7d,window=22:00-04:00,rate=2/h,level=medium")
	if err != nil || s.Every != 7*24*time.Hour || s.From != 22*60 || s.To != 4*60 || s.PerHour != 2 || s.Level != bench.LevelMedium {
		t.Fatalf("%+v, %v", s, err)
	}
	if back, err := bench.ParseSchedule(s.String()); err != nil || back != s {
		t.Errorf("%q reads back %+v, %v", s.String(), back, err)
	}
	if d, err := bench.ParseSchedule("every=12h"); err != nil || d.PerHour != 1 || d.Level != bench.LevelQuick || !d.Open(time.Now()) {
		t.Errorf("defaults: %+v, %v", d, err)
	}
	for _, bad := range []string{"", "window=02:00-06:00", "every=10m", "every=7d,rate=0/h", "every=7d,rate=2", "every=7d,window=2-6",
		"every=7d,level=xlong", "every=7d,every=1d", "every=7d,when=now", "every"} {
		if _, err := bench.ParseSchedule(bad); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("%q: %v, want refused", bad, err)
		}
	}
}

// TestScheduleDue: only inside the window, only idle nodes whose figures
// are older than every, oldest first, at most the hourly rate counting
// the past hour's starts.
func TestScheduleDue(t *testing.T) {
	s, _ := bench.ParseSchedule("every=7d,window=22:00-04:00,rate=2/h")
	night := time.Date(2026, 12, 7, 23, 30, 0, 0, time.UTC)
	day := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	old, older, fresh := night.Add(-8*24*time.Hour), night.Add(-30*24*time.Hour), night.Add(-24*time.Hour)
	cands := []bench.Candidate{
		{Node: "a", Idle: true, LastBench: old},
		{Node: "b", Idle: false, LastBench: older}, // runs work
		{Node: "c", Idle: true, LastBench: fresh},  // measured yesterday
		{Node: "d", Idle: true, LastBench: older},
		{Node: "e", Idle: true}, // never measured
		{Node: "f", Idle: true, LastBench: old},
	}
	for _, tc := range []struct {
		name    string
		now     time.Time
		started []time.Time
		want    []string
	}{
		{"in the window, oldest first, two an hour", night, nil, []string{"e", "d"}},
		{"one started 30 minutes ago", night, []time.Time{night.Add(-30 * time.Minute)}, []string{"e"}},
		{"two started within the hour", night, []time.Time{night.Add(-10 * time.Minute), night.Add(-50 * time.Minute)}, nil},
		{"a start over an hour ago does not count", night, []time.Time{night.Add(-61 * time.Minute)}, []string{"e", "d"}},
		{"outside the window", day, nil, nil},
		{"after midnight, still in the window", night.Add(3 * time.Hour), nil, []string{"e", "d"}},
	} {
		if got := s.Due(cands, tc.started, tc.now); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

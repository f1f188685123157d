package capacity

import (
	"testing"

	"github.com/gpufleet/gpufleet"
)

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]Target{
		"allocation<85%":          {Metric: Allocation, Limit: 0.85},
		"allocation<0.9":          {Metric: Allocation, Limit: 0.9},
		"p90-wait<4h":             {Metric: Wait, Percentile: 90, Limit: 4 * 3600},
		"p50-wait:training<2d":    {Metric: Wait, Percentile: 50, Class: gpufleet.Training, Limit: 2 * 86400},
		"p99-wait:production<30s": {Metric: Wait, Percentile: 99, Class: gpufleet.Production, Limit: 30},
	} {
		got, err := ParseTarget(in)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v, want %+v", in, got, err, want)
			continue
		}
		if again, err := ParseTarget(got.String()); err != nil || again != got {
			t.Errorf("%s: String %s reads back as %+v %v", in, got.String(), again, err)
		}
	}
	for _, bad := range []string{"", "allocation", "allocation<0", "allocation<120%", "p0-wait<4h", "p100-wait<4h", "p90-wait<0s", "p90-wait:vip<4h", "p90-queue<4h", "wait<4h", "p90-wait<-4h"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"allocation<85%", "p90-wait:training<4h", "p1-wait<1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseTarget(s)
		if err != nil {
			return
		}
		again, err := ParseTarget(v.String())
		if err != nil || again != v {
			t.Errorf("%q: %+v writes %q, which reads back as %+v, %v", s, v, v.String(), again, err)
		}
	})
}

package sim

import (
	"math"
	"testing"
)

func TestPercentileNearestRank(t *testing.T) {
	tests := map[string]struct {
		xs   []float64
		p    float64
		want *float64
	}{
		"empty is null":             {xs: nil, p: 50, want: nil},
		"one value":                 {xs: []float64{7}, p: 99, want: f(7)},
		"median of four is second":  {xs: []float64{1, 2, 3, 4}, p: 50, want: f(2)},
		"p95 of twenty is 19th":     {xs: seq(20), p: 95, want: f(19)},
		"p99 of a hundred is 99th":  {xs: seq(100), p: 99, want: f(99)},
		"p100 is the max":           {xs: seq(10), p: 100, want: f(10)},
		"p0 clamps to the smallest": {xs: seq(10), p: 0, want: f(1)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := percentile(tc.xs, tc.p)
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tc.xs, tc.p, deref(got), deref(tc.want))
			}
		})
	}
}

func TestJain(t *testing.T) {
	tests := map[string]struct {
		xs   []float64
		want float64
	}{
		"equal slowdowns are perfectly fair": {xs: []float64{2, 2, 2}, want: 1},
		"one of four takes all":              {xs: []float64{1, 0, 0, 0}, want: 0.25},
		"textbook pair 1 and 3":              {xs: []float64{1, 3}, want: 16.0 / 20},
		"single team":                        {xs: []float64{5}, want: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := *jain(tc.xs); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("jain(%v) = %v, want %v", tc.xs, got, tc.want)
			}
		})
	}
	if jain(nil) != nil {
		t.Errorf("jain of no teams must be null")
	}
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

package capacity

import (
	"encoding/json"
	"math"
	"testing"
)

// TestPoissonRate checks the exact interval against published values of
// the Garwood limits for counts 0, 1, 5 and 20 (95 %, e.g. the table in
// Ulm, "A simple method to calculate the confidence interval of a
// standardized mortality ratio", Am J Epidemiol 131, 1990).
func TestPoissonRate(t *testing.T) {
	for _, c := range []struct {
		k         int
		low, high float64
	}{{0, 0, 3.689}, {1, 0.0253, 5.572}, {5, 1.624, 11.668}, {20, 12.217, 30.888}} {
		r := PoissonRate(c.k, 1)
		if math.Abs(r.Low-c.low) > 1e-3 || math.Abs(r.High-c.high) > 1e-3 || r.Value != float64(c.k) {
			t.Errorf("k=%d: %+v, want [%g, %g]", c.k, r, c.low, c.high)
		}
	}
	if r := PoissonRate(2, 0.5); r.Value != 4 || math.Abs(r.High-2*7.225) > 1e-2 {
		t.Errorf("rate per exposure: %+v", r)
	}
	if r := PoissonRate(3, 0); r.High != 0 || r.Value != 0 || r.String() != "-" {
		t.Errorf("no exposure: %+v, want no evidence", r)
	}
	if _, err := json.Marshal(PoissonRate(1, 0)); err != nil {
		t.Errorf("no exposure does not encode: %v", err)
	}
}

package scheduler

import (
	"math"
	"testing"

	"github.com/gpufleet/gpufleet/catalog"
)

func TestSlowdownOn(t *testing.T) {
	c := catalog.Default()
	get := func(id string) catalog.GPU {
		g, err := c.Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	v100, p100, k80, h100 := get("v100-sxm2-16gb"), get("p100-pcie-16gb"), get("k80"), get("h100-sxm-80gb")
	opaque := catalog.GPU{ID: "G1", Name: "G1"}
	for _, tc := range []struct {
		name       string
		fast, slow catalog.GPU
		want       float64
	}{
		// min(FP32 15.7/2.8 = 5.6, bandwidth 900/240 = 3.75); Gavel measured 4.2.
		{"v100 over k80: bandwidth bound", v100, k80, 900.0 / 240},
		// min(FP32 15.7/9.3 = 1.69, bandwidth 900/732 = 1.23); Gavel measured 1.25.
		{"v100 over p100: bandwidth bound", v100, p100, 900.0 / 732},
		{"same model", h100, h100, 1},
		{"faster model counts as 1", k80, v100, 1},
		{"opaque model: no figures", v100, opaque, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := slowdownOn(&tc.fast, &tc.slow); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("slowdownOn = %v, want %v", got, tc.want)
			}
		})
	}
}

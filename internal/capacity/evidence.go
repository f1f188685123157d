package capacity

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// Rate is a count of events over an exposure (failures over GPU-years)
// with its two-sided 95 % interval: what the sample supports, not only
// what it shows.
type Rate struct {
	Count    int     `json:"count"`
	Exposure float64 `json:"exposure"`
	Value    float64 `json:"value"`
	Low      float64 `json:"low"`
	High     float64 `json:"high"`
}

// PoissonRate is count over exposure with the exact (Garwood) Poisson
// interval: the rates whose Poisson counts put count at their 2.5 % and
// 97.5 % tails, from the Gamma quantiles (Garwood, "Fiducial limits for
// the Poisson distribution", Biometrika 28, 1936). No exposure is no
// evidence: every figure is 0, Exposure too (JSON has no infinity), and
// String says "-".
func PoissonRate(count int, exposure float64) Rate {
	r := Rate{Count: count}
	if !(exposure > 0) || count < 0 {
		return r
	}
	r.Exposure = exposure
	k := float64(count)
	r.Value = k / exposure
	if count > 0 {
		r.Low = distuv.Gamma{Alpha: k, Beta: 1}.Quantile(0.025) / exposure
	}
	r.High = distuv.Gamma{Alpha: k + 1, Beta: 1}.Quantile(0.975) / exposure
	return r
}

// scaled is the rate the same observed value would have with f times the
// exposure (and so f times the count): how much more history would
// narrow the interval.
func (r Rate) scaled(f float64) Rate {
	n := int(math.Round(float64(r.Count) * f))
	return PoissonRate(n, r.Exposure*f)
}

// String is the rate with its interval for a table cell, "0.50
// (0.06-1.81)"; "-" without exposure.
func (r Rate) String() string {
	if !(r.Exposure > 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f (%.2f-%.2f)", r.Value, r.Low, r.High)
}

package capacity

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/catalog"
)

func lifecycleInput(use ...ModelUse) LifecycleInput {
	return LifecycleInput{Now: today, HorizonMonths: 36, Use: use, Catalog: catalog.Default(),
		EnergyUSDPerKWh: DefaultEnergyUSDPerKWh, PUE: 1.58, DepreciationYears: DefaultDepreciationYears, RepairHours: DefaultRepairHours}
}

func bought(s ...string) []time.Time {
	var out []time.Time
	for _, d := range s {
		t, err := ParsePurchased(d)
		if err != nil {
			panic(err)
		}
		out = append(out, t)
	}
	return out
}

// fleet is a mixed fleet of five generations.
var fleet = []ModelUse{
	{Model: "k80", GPUs: 16, Purchased: bought("2016-03", "2016-03", "2016-05"), PeriodDays: 60, GPUHours: 16 * 24 * 60 * 0.4, Failures: 3, MemoryBoundShare: -1},
	{Model: "v100-sxm2-32gb", GPUs: 16, Purchased: bought("2019-05"), PeriodDays: 60, GPUHours: 16 * 24 * 60 * 0.5, MemoryBoundShare: 0.6},
	{Model: "p100-pcie-16gb", GPUs: 8, Purchased: bought("2017-08"), PeriodDays: 120, GPUHours: 8 * 24 * 120 * 0.9, MemoryBoundShare: 0.8},
	{Model: "a100-sxm-80gb", GPUs: 16, Purchased: bought("2021-09"), PeriodDays: 60, GPUHours: 16 * 24 * 60 * 0.7, MemoryBoundShare: 0.5},
	{Model: "l4", GPUs: 8, Purchased: bought("2023-06"), PeriodDays: 60, GPUHours: 8 * 24 * 60 * 0.02, MemoryBoundShare: 0.8},
	{Model: "h100-sxm-80gb", GPUs: 16, Purchased: bought("2023-11-20"), PeriodDays: 60, GPUHours: 16 * 24 * 60 * 0.8, MemoryBoundShare: 0.3},
}

// TestLifecycleGolden: the whole report for a fixed fleet, and the
// decision each rule makes on it.
func TestLifecycleGolden(t *testing.T) {
	in := lifecycleInput(fleet...)
	in.Bench = map[string]Efficiency{"h100-sxm-80gb": {Memory: 0.9, Compute: 0.8}, "a100-sxm-80gb": {Memory: 0.6, Compute: 0.8}}
	rep, err := Lifecycle(in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Decision{
		"k80":            Replace,  // pays for itself within months out of its power bill
		"v100-sxm2-32gb": Redeploy, // CUDA 13 dropped Volta
		"p100-pcie-16gb": Redeploy, // compute-bound work pays to move, memory-bound does not
		"a100-sxm-80gb":  Keep,
		"h100-sxm-80gb":  Keep,
		"l4":             Retire, // 2% allocated
	}
	for _, m := range rep.Models {
		if m.Decision != want[m.GPUModel] {
			t.Errorf("%s: %s, want %s: %v", m.GPUModel, m.Decision, want[m.GPUModel], m.Reasons)
		}
		if len(m.Reasons) == 0 {
			t.Errorf("%s: no reasons", m.GPUModel)
		}
	}
	golden(t, "lifecycle.json", rep)
}

// TestLifecycleNeedsEvidence: no verdict from twenty minutes of data (the
// dev fleet with two injected faults came out "replace all 16 H100s",
// 547.88 failures a GPU-year), nor where the failure rate's interval holds
// rates that decide differently: the 8 P100s with no failure in 60 days
// could still fail often enough for replacing them to pay; 120 days
// settle it.
func TestLifecycleNeedsEvidence(t *testing.T) {
	minutes := 20.0 / (24 * 60)
	for _, c := range []struct {
		name string
		use  ModelUse
		want Decision
		says string
	}{
		{"twenty minutes", ModelUse{Model: "h100-sxm-80gb", GPUs: 16, PeriodDays: minutes, GPUHours: 16 * 24 * minutes * 0.8, Failures: 2, MemoryBoundShare: 0.3},
			NotEnoughHistory, "not enough history: 0.0 days (0 GPU-days), need 7 days before a verdict"},
		{"sixty days, the interval undecided", ModelUse{Model: "p100-pcie-16gb", GPUs: 8, PeriodDays: 60, GPUHours: 8 * 24 * 60 * 0.9, MemoryBoundShare: 0.8},
			NotEnoughHistory, "0 failures in 480 GPU-days, 0.00 a GPU-year (95% interval 0.00 to 2.81): redeploy at the low end, replace at the high end; about 960 GPU-days at this rate would settle it"},
		{"120 days", ModelUse{Model: "p100-pcie-16gb", GPUs: 8, PeriodDays: 120, GPUHours: 8 * 24 * 120 * 0.9, MemoryBoundShare: 0.8},
			Redeploy, "for compute-bound work"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := Lifecycle(lifecycleInput(c.use))
			if err != nil {
				t.Fatal(err)
			}
			m := rep.Models[0]
			if m.Decision != c.want || len(m.Reasons) == 0 || !strings.Contains(m.Reasons[0], c.says) {
				t.Errorf("%s %v, want %s saying %q", m.Decision, m.Reasons, c.want, c.says)
			}
		})
	}
}

// TestLifecycleLongerHorizonNeverKeepsMore: a replacement that pays off
// within a horizon still pays off within a longer one.
func TestLifecycleLongerHorizonNeverKeepsMore(t *testing.T) {
	prev := map[string]Decision{}
	for _, months := range []int{6, 12, 36, 60, 120} {
		in := lifecycleInput(fleet...)
		in.HorizonMonths = months
		rep, err := Lifecycle(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range rep.Models {
			if prev[m.GPUModel] == Replace && m.Decision != Replace {
				t.Errorf("%s: replace within a shorter horizon, %s within %d months", m.GPUModel, m.Decision, months)
			}
			prev[m.GPUModel] = m.Decision
		}
	}
}

func TestLifecycleRefuses(t *testing.T) {
	for name, edit := range map[string]func(*LifecycleInput){
		"horizon 0":        func(in *LifecycleInput) { in.HorizonMonths = 0 },
		"negative energy":  func(in *LifecycleInput) { in.EnergyUSDPerKWh = -1 },
		"PUE under 1":      func(in *LifecycleInput) { in.PUE = 0.9 },
		"zero life":        func(in *LifecycleInput) { in.DepreciationYears = 0 },
		"free GPU":         func(in *LifecycleInput) { in.Prices = map[string]float64{"h100-sxm-80gb": 0} },
		"unknown model":    func(in *LifecycleInput) { in.Use = []ModelUse{{Model: "nope", GPUs: 1}} },
		"NaN repair hours": func(in *LifecycleInput) { in.RepairHours = math.NaN() },
	} {
		in := lifecycleInput(fleet...)
		edit(&in)
		if _, err := Lifecycle(in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParsePurchased(t *testing.T) {
	for in, want := range map[string]string{"2023-04-17": "2023-04-17", "2023-04": "2023-04-01"} {
		got, err := ParsePurchased(in)
		if err != nil || got.Format(time.DateOnly) != want {
			t.Errorf("%s: %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "2023", "17/04/2023", "1999-01", "2023-13", "2023-04-17T00:00:00Z"} {
		if _, err := ParsePurchased(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func FuzzParsePurchased(f *testing.F) {
	for _, s := range []string{"2023-04-17", "2023-04", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParsePurchased(s)
		if err == nil && (d.Year() < 2000 || d.Year() > 2100) {
			t.Errorf("%q: %v outside the range", s, d)
		}
	})
}

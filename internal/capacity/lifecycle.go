package capacity

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/stack"
)

// PurchasedLabel is the node label that records when a node's GPUs were
// bought: "2023-04-17" or "2023-04".
const PurchasedLabel = "purchased"

// ParsePurchased reads a purchase date: YYYY-MM-DD, or YYYY-MM (the first
// of the month).
func ParsePurchased(s string) (time.Time, error) {
	for _, layout := range []string{time.DateOnly, "2006-01"} {
		if t, err := time.Parse(layout, s); err == nil {
			if t.Year() < 2000 || t.Year() > 2100 {
				break
			}
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: label %s=%s: expected a purchase date YYYY-MM-DD or YYYY-MM (2000 to 2100)", gpufleet.ErrInvalid, PurchasedLabel, gpufleet.Quote(s))
}

// ReferenceModel is the GPU whose hour of work is the unit costs are
// compared in: an H100 SXM hour of the fleet's own mix.
const ReferenceModel = "h100-sxm-80gb"

// Lifecycle defaults, each a flag of gpufleet lifecycle.
const (
	// DefaultDepreciationYears is the straight-line life of a GPU server:
	// the shorter end of the 5 to 6 years the hyperscalers book servers
	// over in their annual reports.
	DefaultDepreciationYears = 5.0
	// DefaultEnergyUSDPerKWh is a round price between the US industrial
	// and commercial averages (about 8 and 13 cents, EIA Electric Power
	// Monthly, 2024).
	DefaultEnergyUSDPerKWh = 0.10
	// DefaultRepairHours is what a GPU failure takes out of service: the
	// drain, the repair or swap, and the validation (an assumption).
	DefaultRepairHours = 48.0
	// idleShare is the allocation under which a model is retired: nobody
	// uses it enough to pay for its power and space.
	idleShare = 0.05
)

// ModelUse is what the fleet recorded for one GPU model over a period.
type ModelUse struct {
	Model string
	GPUs  int
	// Purchased is each node's purchase date where its label gives one.
	Purchased []time.Time
	// PeriodDays is the period observed; GPUHours what jobs held in it.
	PeriodDays float64
	GPUHours   float64
	// Failures counts its GPUs turning unhealthy in the period.
	Failures int
	// Watts is the measured mean draw of its GPUs (0: unknown).
	Watts float64
	// MemoryBoundShare is the share of its held time whose DRAM activity
	// exceeded its tensor activity; negative when nothing measured it.
	MemoryBoundShare float64
}

// Efficiency is the share of its catalog figures a model's benches
// measured (bench.Calibration's medians): the device copy's of memory
// bandwidth, the dense product's of peak at its rate precision (0: not
// measured).
type Efficiency struct {
	Memory, Compute float64
}

// LifecycleInput is what Lifecycle reads.
type LifecycleInput struct {
	Now           time.Time
	HorizonMonths int
	Use           []ModelUse
	// Bench is the fleet's measured efficiency by catalog id, where
	// measured.
	Bench   map[string]Efficiency
	Catalog *catalog.Catalog
	// Prices are purchase prices per GPU in USD by catalog id, over the
	// catalog's (gpufleet lifecycle --price-file).
	Prices            map[string]float64
	EnergyUSDPerKWh   float64
	PUE               float64
	DepreciationYears float64
	RepairHours       float64
}

// Validate checks the input's ranges.
func (in LifecycleInput) Validate() error {
	switch {
	case in.HorizonMonths < 1 || in.HorizonMonths > 120:
		return fmt.Errorf("%w: horizon %d months: expected 1 to 120", gpufleet.ErrInvalid, in.HorizonMonths)
	case !(in.EnergyUSDPerKWh >= 0 && in.EnergyUSDPerKWh <= 10):
		return fmt.Errorf("%w: energy price %g USD/kWh: expected 0 to 10", gpufleet.ErrInvalid, in.EnergyUSDPerKWh)
	case !(in.PUE >= 1 && in.PUE <= 5):
		return fmt.Errorf("%w: PUE %g: expected 1 to 5", gpufleet.ErrInvalid, in.PUE)
	case !(in.DepreciationYears >= 1 && in.DepreciationYears <= 20):
		return fmt.Errorf("%w: depreciation %g years: expected 1 to 20", gpufleet.ErrInvalid, in.DepreciationYears)
	case !(in.RepairHours >= 0 && in.RepairHours <= 24*365):
		return fmt.Errorf("%w: repair %g hours: expected 0 to 8760", gpufleet.ErrInvalid, in.RepairHours)
	}
	for id, p := range in.Prices {
		if !(p > 0 && p < 1e9) {
			return fmt.Errorf("%w: price of %s: %g: expected a positive price in USD", gpufleet.ErrInvalid, id, p)
		}
	}
	return nil
}

// Decision is what to do with a generation.
type Decision string

// The decisions.
const (
	Keep     Decision = "keep"
	Redeploy Decision = "redeploy"
	Replace  Decision = "replace"
	Retire   Decision = "retire"
	// NotEnoughHistory is no verdict: the history is too short, or the
	// failure rate's interval holds rates that call for different ones.
	NotEnoughHistory Decision = "not_enough_history"
)

// MinHistoryDays is the shortest history a lifecycle verdict is given on:
// a week, so that allocation is not one afternoon's.
const MinHistoryDays = 7

// Candidate is a newer model priced against one in the fleet.
type Candidate struct {
	GPUModel string `json:"gpu_model"`
	// Speedup is the candidate's rate on the fleet's mix over the fleet
	// model's, and on compute-bound and memory-bound work alone.
	Speedup        float64 `json:"speedup"`
	ComputeSpeedup float64 `json:"compute_speedup"`
	MemorySpeedup  float64 `json:"memory_speedup"`
	PriceUSD       float64 `json:"price_usd"`
	// CostPerUnitUSD is its cost of a reference unit of work with its
	// purchase written off over the depreciation life, plus energy.
	CostPerUnitUSD float64 `json:"cost_per_unit_usd"`
	// BreakEvenMonth is the month in which replacing the fleet model's
	// capacity with it has paid for itself out of the running costs it
	// saves (what the old GPUs would sell for is not counted); null when
	// it never does within the horizon. MemoryBreakEvenMonth and ComputeBreakEvenMonth
	// are the same on memory-bound and compute-bound work alone.
	BreakEvenMonth        *int `json:"break_even_month"`
	ComputeBreakEvenMonth *int `json:"compute_break_even_month"`
	MemoryBreakEvenMonth  *int `json:"memory_break_even_month"`
}

// ModelLifecycle is the lifecycle view of one GPU model of the fleet.
type ModelLifecycle struct {
	GPUModel     string     `json:"gpu_model"`
	Architecture string     `json:"architecture"`
	LaunchYear   int        `json:"launch_year"`
	GPUs         int        `json:"gpus"`
	Purchased    *time.Time `json:"purchased"`
	AgeYears     *float64   `json:"age_years"`
	PriceUSD     *float64   `json:"price_usd"`
	// BookValueUSD is the fleet's GPUs of this model at straight-line
	// depreciation; DepreciationUSDPerMonth what they lose a month while
	// inside their life.
	BookValueUSD            *float64 `json:"book_value_usd"`
	DepreciationUSDPerMonth *float64 `json:"depreciation_usd_per_month"`
	Allocation              float64  `json:"allocation"`
	FailuresPerGPUYear      float64  `json:"failures_per_gpu_year"`
	// Failures is the failure count over GPU-years with its 95 % interval
	// (PoissonRate); GPUDays the history's GPUs times days.
	Failures             Rate    `json:"failures"`
	GPUDays              float64 `json:"gpu_days"`
	Watts                float64 `json:"watts"`
	EnergyUSDPerGPUMonth float64 `json:"energy_usd_per_gpu_month"`
	// MemoryBoundShare is the mix costs are computed on (0.5 when
	// unmeasured, said in Reasons).
	MemoryBoundShare float64 `json:"memory_bound_share"`
	// RunningUSDPerGPUMonth is energy plus failures (the capacity a
	// repair takes out, at the model's cloud price); CostPerUnitUSD that
	// per reference unit of work (its purchase is spent: it does not count
	// in keeping it).
	RunningUSDPerGPUMonth float64 `json:"running_usd_per_gpu_month"`
	CostPerUnitUSD        float64 `json:"cost_per_unit_usd"`
	// Software says what newer CUDA no longer runs on it; "" when all do.
	Software   string      `json:"software,omitempty"`
	Decision   Decision    `json:"decision"`
	Candidate  *Candidate  `json:"candidate"` // the best newer model
	Candidates []Candidate `json:"candidates"`
	Reasons    []string    `json:"reasons"`
}

// LifecycleReport is Lifecycle's answer.
type LifecycleReport struct {
	At                time.Time        `json:"at"`
	HorizonMonths     int              `json:"horizon_months"`
	Unit              string           `json:"unit"`
	EnergyUSDPerKWh   float64          `json:"energy_usd_per_kwh"`
	PUE               float64          `json:"pue"`
	DepreciationYears float64          `json:"depreciation_years"`
	RepairHours       float64          `json:"repair_hours"`
	Models            []ModelLifecycle `json:"models"`
}

// Lifecycle prices every GPU model of the fleet against the newer models
// of the catalog with a purchase price, on the fleet's own mix of
// compute-bound and memory-bound work, and decides per model: retire
// (unused, or no longer run by current CUDA and not worth replacing),
// replace (a newer model pays for itself within the horizon out of the
// running costs it saves), redeploy (it pays off only for compute-bound
// work: keep this model for memory-bound work such as small inference),
// or keep.
func Lifecycle(in LifecycleInput) (LifecycleReport, error) {
	if err := in.Validate(); err != nil {
		return LifecycleReport{}, err
	}
	ref, err := in.Catalog.Lookup(ReferenceModel)
	if err != nil {
		return LifecycleReport{}, err
	}
	rep := LifecycleReport{At: in.Now, HorizonMonths: in.HorizonMonths, Unit: "one " + ref.Name + " GPU-hour of the fleet's mix",
		EnergyUSDPerKWh: in.EnergyUSDPerKWh, PUE: in.PUE, DepreciationYears: in.DepreciationYears, RepairHours: in.RepairHours}
	for _, u := range in.Use {
		g, err := in.Catalog.Lookup(u.Model)
		if err != nil {
			return LifecycleReport{}, fmt.Errorf("use of %s: %w", u.Model, err)
		}
		rep.Models = append(rep.Models, in.model(u, g, ref))
	}
	slices.SortFunc(rep.Models, func(a, b ModelLifecycle) int {
		return cmp.Or(cmp.Compare(a.LaunchYear, b.LaunchYear), strings.Compare(a.GPUModel, b.GPUModel))
	})
	return rep, nil
}

const hoursPerMonth = 730

// model is the lifecycle view of one model, with a verdict only where the
// evidence supports it: a history of at least MinHistoryDays, and the same
// verdict at both ends of the failure rate's 95 % interval. Otherwise the
// decision is NotEnoughHistory, saying what the ends would decide and how
// much history at the observed rate would settle it.
func (in LifecycleInput) model(u ModelUse, g, ref catalog.GPU) ModelLifecycle {
	var fail Rate
	if u.GPUs > 0 && u.PeriodDays > 0 {
		fail = PoissonRate(u.Failures, float64(u.GPUs)*u.PeriodDays/365.25)
	} else {
		fail = PoissonRate(u.Failures, 0)
	}
	m := in.modelAt(u, g, ref, fail.Value)
	m.Failures, m.GPUDays = fail, float64(u.GPUs)*u.PeriodDays
	at := func(r Rate) Decision { return in.modelAt(u, g, ref, r.Low).Decision }
	atHigh := func(r Rate) Decision { return in.modelAt(u, g, ref, r.High).Decision }
	switch {
	case u.PeriodDays < MinHistoryDays:
		m.Reasons = append([]string{fmt.Sprintf("not enough history: %.1f days (%.0f GPU-days), need %d days before a verdict; at what it shows so far it would be %s",
			u.PeriodDays, m.GPUDays, MinHistoryDays, m.Decision)}, m.Reasons...)
		m.Decision = NotEnoughHistory
	case at(fail) != atHigh(fail):
		need := ""
		for f := 2.0; f <= 1024; f *= 2 {
			if r := fail.scaled(f); at(r) == atHigh(r) {
				need = fmt.Sprintf("; about %.0f GPU-days at this rate would settle it", m.GPUDays*f)
				break
			}
		}
		m.Reasons = append([]string{fmt.Sprintf("not enough history: %d failures in %.0f GPU-days, %.2f a GPU-year (95%% interval %.2f to %.2f): %s at the low end, %s at the high end%s",
			fail.Count, m.GPUDays, fail.Value, fail.Low, fail.High, at(fail), atHigh(fail), need)}, m.Reasons...)
		m.Decision = NotEnoughHistory
	}
	return m
}

// modelAt is the lifecycle view of one model with failures at perYear a
// GPU, and the verdict the rules give at that rate.
func (in LifecycleInput) modelAt(u ModelUse, g, ref catalog.GPU, perYear float64) ModelLifecycle {
	m := ModelLifecycle{GPUModel: g.ID, Architecture: g.Architecture, LaunchYear: g.LaunchYear, GPUs: u.GPUs, MemoryBoundShare: u.MemoryBoundShare}
	var reasons []string
	if m.MemoryBoundShare < 0 || m.MemoryBoundShare > 1 {
		m.MemoryBoundShare = 0.5
		reasons = append(reasons, "no DRAM and tensor activity recorded: costs assume half the work is memory-bound")
	}
	if len(u.Purchased) > 0 {
		ds := slices.SortedFunc(slices.Values(u.Purchased), func(a, b time.Time) int { return a.Compare(b) })
		p := ds[len(ds)/2]
		age := in.Now.Sub(p).Hours() / (24 * 365.25)
		m.Purchased, m.AgeYears = &p, &age
	}
	if p, ok := in.price(g); ok {
		m.PriceUSD = &p
		if m.AgeYears != nil {
			left := max(1-*m.AgeYears/in.DepreciationYears, 0)
			book := p * left * float64(u.GPUs)
			dep := 0.0
			if left > 0 {
				dep = p * float64(u.GPUs) / (12 * in.DepreciationYears)
			}
			m.BookValueUSD, m.DepreciationUSDPerMonth = &book, &dep
		}
	}
	if u.PeriodDays > 0 && u.GPUs > 0 {
		m.Allocation = u.GPUHours / (float64(u.GPUs) * 24 * u.PeriodDays)
	}
	m.FailuresPerGPUYear = perYear
	m.Watts = u.Watts
	if m.Watts <= 0 {
		m.Watts = drawAt(g, m.Allocation)
	}
	m.EnergyUSDPerGPUMonth = in.energy(m.Watts)
	m.RunningUSDPerGPUMonth = m.EnergyUSDPerGPUMonth + in.failureCost(g, m.FailuresPerGPUYear)
	rate := func(x catalog.GPU, share float64) float64 {
		// The reference at its catalog figures: a unit is the same work
		// whatever the fleet measures.
		return workRate(x, ref, share, in.efficiency(x.ID))
	}
	self := rate(g, m.MemoryBoundShare)
	m.CostPerUnitUSD = m.RunningUSDPerGPUMonth / hoursPerMonth / self
	if _, ok := in.Bench[g.ID]; ok {
		reasons = append(reasons, "its rates are its bench medians' share of the catalog's figures; models the fleet has not measured run at the median share the fleet's benches show")
	}
	m.Software = softwareNote(g)

	for _, c := range in.Catalog.All() {
		// A replacement is newer, of the same vendor (the same software),
		// holds what the old card holds, and is licensed for a data centre
		// (GeForce's driver licence excludes data centre deployment).
		if c.LaunchYear <= g.LaunchYear || c.Vendor != g.Vendor || c.MemoryBytes < g.MemoryBytes || strings.Contains(c.Name, "GeForce") {
			continue
		}
		price, ok := in.price(c)
		if !ok {
			continue
		}
		cand := Candidate{GPUModel: c.ID, PriceUSD: price,
			Speedup:        rate(c, m.MemoryBoundShare) / self,
			ComputeSpeedup: rate(c, 0) / rate(g, 0),
			MemorySpeedup:  rate(c, 1) / rate(g, 1)}
		if math.IsNaN(cand.Speedup) || math.IsInf(cand.Speedup, 0) || cand.Speedup <= 0 {
			continue
		}
		cAlloc := m.Allocation / cand.Speedup
		cRun := in.energy(drawAt(c, min(cAlloc, 1)))
		cand.CostPerUnitUSD = (price/(in.DepreciationYears*12) + cRun) / hoursPerMonth / rate(c, m.MemoryBoundShare)
		be := func(speedup float64) *int {
			return breakEven(price/speedup, m.RunningUSDPerGPUMonth-in.energy(drawAt(c, min(m.Allocation/speedup, 1)))/speedup, in.HorizonMonths)
		}
		cand.BreakEvenMonth, cand.ComputeBreakEvenMonth, cand.MemoryBreakEvenMonth = be(cand.Speedup), be(cand.ComputeSpeedup), be(cand.MemorySpeedup)
		m.Candidates = append(m.Candidates, cand)
	}
	slices.SortFunc(m.Candidates, func(a, b Candidate) int {
		return cmp.Or(cmpMonth(a.BreakEvenMonth, b.BreakEvenMonth), cmp.Compare(a.CostPerUnitUSD, b.CostPerUnitUSD), strings.Compare(a.GPUModel, b.GPUModel))
	})
	if len(m.Candidates) > 0 {
		m.Candidate = &m.Candidates[0]
	}
	var why []string
	m.Decision, why = in.decide(m, u)
	if m.Software != "" && !strings.HasPrefix(why[0], m.Software) {
		why = append(why, m.Software)
	}
	m.Reasons = append(why, reasons...)
	return m
}

// decide applies the rules in order and says why, with the numbers.
func (in LifecycleInput) decide(m ModelLifecycle, u ModelUse) (d Decision, why []string) {
	c := m.Candidate
	add := func(f string, a ...any) { why = append(why, fmt.Sprintf(f, a...)) }
	switch {
	case u.PeriodDays >= 7 && m.Allocation < idleShare:
		add("jobs held %.1f%% of its GPU time over %.0f days: its power (%.0f USD a GPU a month) and rack space buy little", 100*m.Allocation, u.PeriodDays, m.EnergyUSDPerGPUMonth)
		return Retire, why
	case c != nil && c.BreakEvenMonth != nil:
		add("%s does its work %.1fx as fast (%.1fx compute-bound, %.1fx memory-bound) at %.3f USD per unit against %.3f to keep running this one; replacing it pays for itself in month %d",
			c.GPUModel, c.Speedup, c.ComputeSpeedup, c.MemorySpeedup, c.CostPerUnitUSD, m.CostPerUnitUSD, *c.BreakEvenMonth)
		return Replace, why
	case c != nil && c.ComputeBreakEvenMonth != nil:
		add("for compute-bound work %s pays for itself in month %d (%.1fx), for memory-bound work not within %d months (%.1fx): move compute-bound work off it and keep it for memory-bound work such as small-model inference",
			c.GPUModel, *c.ComputeBreakEvenMonth, c.ComputeSpeedup, in.HorizonMonths, c.MemorySpeedup)
		return Redeploy, why
	case m.Software != "":
		add("%s; no newer model pays for itself within %d months: keep it for work on stacks that still support it, or retire it as those go", m.Software, in.HorizonMonths)
		return Redeploy, why
	case c != nil:
		add("running it costs %.3f USD per unit; the best newer model, %s, costs %.3f with its purchase and does not pay for itself within %d months", m.CostPerUnitUSD, c.GPUModel, c.CostPerUnitUSD, in.HorizonMonths)
	default:
		add("no newer model of its vendor has a purchase price (catalog or --price-file) to compare against")
	}
	return Keep, why
}

// breakEven is the first month whose savings add up to the outlay; nil
// when it never comes within the horizon.
func breakEven(outlay, savingPerMonth float64, horizon int) *int {
	if outlay <= 0 {
		one := 1
		return &one
	}
	if !(savingPerMonth > 0) {
		return nil
	}
	n := int(math.Ceil(outlay / savingPerMonth))
	if n > horizon {
		return nil
	}
	return &n
}

func cmpMonth(a, b *int) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return cmp.Compare(*a, *b)
}

// price is a model's purchase price per GPU: the price file's, else the
// catalog's.
func (in LifecycleInput) price(g catalog.GPU) (float64, bool) {
	if p, ok := in.Prices[g.ID]; ok {
		return p, true
	}
	if g.PurchasePriceUSD != nil {
		return *g.PurchasePriceUSD, true
	}
	return 0, false
}

// energy is a month of a GPU drawing watts, at the facility's PUE.
func (in LifecycleInput) energy(watts float64) float64 {
	return watts / 1000 * in.PUE * hoursPerMonth * in.EnergyUSDPerKWh
}

// failureCost is a month of a GPU's failures: the hours each takes out of
// service, priced at what renting the capacity costs.
func (in LifecycleInput) failureCost(g catalog.GPU, perYear float64) float64 {
	if g.PricePerHourUSD == nil {
		return 0
	}
	return perYear / 12 * in.RepairHours * *g.PricePerHourUSD
}

// drawAt is a GPU's mean draw held busy a share of the time: idle, and
// three quarters of its TDP when busy (the simulator's prior).
func drawAt(g catalog.GPU, busy float64) float64 {
	tdp, idle := 0.0, 0.0
	if g.TDPWatts != nil {
		tdp = *g.TDPWatts
	}
	if g.IdleWatts != nil {
		idle = *g.IdleWatts
	}
	return idle + busy*max(0.75*tdp-idle, 0)
}

// workRate is the reference units of work a GPU does in an hour on a mix
// with memShare memory-bound, at the share eff of its catalog figures:
// time per unit adds the memory-bound part at the reference's bandwidth
// over the GPU's and the compute-bound part at the reference's dense rate
// over the GPU's.
func workRate(g, ref catalog.GPU, memShare float64, eff Efficiency) float64 {
	bw, fl := g.MemoryBandwidthBytesPerS*eff.Memory, denseRate(g)*eff.Compute
	if bw <= 0 || fl <= 0 {
		return 0
	}
	t := memShare*ref.MemoryBandwidthBytesPerS/bw + (1-memShare)*denseRate(ref)/fl
	return 1 / t
}

// efficiency is a model's measured efficiency, or where it has none the
// median over the models the fleet measured (1, the catalog's figures,
// where it measured none).
func (in LifecycleInput) efficiency(id string) Efficiency {
	var mem, comp []float64
	for _, e := range in.Bench {
		if e.Memory > 0 {
			mem = append(mem, e.Memory)
		}
		if e.Compute > 0 {
			comp = append(comp, e.Compute)
		}
	}
	e := in.Bench[id]
	if e.Memory <= 0 {
		e.Memory = median(mem)
	}
	if e.Compute <= 0 {
		e.Compute = median(comp)
	}
	return e
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 1
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// RatePrecision is the precision a GPU's work rate is priced at: the
// widest-used training precision it runs natively (bf16, else fp16,
// else fp32); "" when it has none of them.
func RatePrecision(g catalog.GPU) gpufleet.Precision {
	for _, p := range []gpufleet.Precision{gpufleet.BF16, gpufleet.FP16, gpufleet.FP32} {
		if g.PeakFLOPS[p] != nil {
			return p
		}
	}
	return ""
}

// denseRate is a GPU's dense rate at its RatePrecision.
func denseRate(g catalog.GPU) float64 {
	if v := g.PeakFLOPS[RatePrecision(g)]; v != nil {
		return *v
	}
	return 0
}

// softwareNote says which CUDA release dropped the GPU's architecture.
func softwareNote(g catalog.GPU) string {
	s, ok := stack.Dropped(g.ComputeCapability)
	if !ok {
		return ""
	}
	return s
}

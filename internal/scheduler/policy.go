package scheduler

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Packing policies for Config.Packing.
const (
	PackFirstFit = "first-fit" // the first node (in the fleet's node order) that fits
	PackBestFit  = "best-fit"  // the node left with the fewest free GPUs
	PackTopology = "topology"  // NVLink domain, rack and fragmentation scoring
)

// DefaultGrace is every policy's Config.DefaultGrace.
const DefaultGrace = 30 * time.Second

// Stop reason codes besides the preemptions' (PreemptPriority,
// PreemptReclaim, PreemptStarvation): the root package's vocabulary.
const (
	StopDrain     = gpufleet.StopDrain     // the node or GPU is draining; the job requeues
	StopTimeLimit = gpufleet.StopTimeLimit // the run reached the job's time limit; the job ends
	StopCancel    = gpufleet.StopCancelled // the job was cancelled; it ends
	// StopNodeLost stops, with no grace, a running job on a node that has
	// been silent for Config.LostAfter: its agent has fenced the run by
	// then (Node.LastSeen). The job requeues.
	StopNodeLost = gpufleet.StopNodeLost
	// StopInvalid stops a running job whose request the caller found
	// invalid (Job.Invalid); it ends.
	StopInvalid = gpufleet.StopInvalidRequest
	// StopRackPower stops the most recently started preemptible job of a
	// rack over its power budget for Config.OverBudgetAfter, with
	// Config.OverBudget = OverBudgetStop. The job requeues.
	StopRackPower = gpufleet.StopRackPower
)

// FailInvalid is the reason code of a Fail: a request the scheduler cannot
// take (an invalid shape, or Job.Invalid).
const FailInvalid = string(gpufleet.StopInvalidRequest)

// DefaultSizeSlack is gpufleet's Config.SizeSlack: a job's deadline is its
// submit time plus its estimated run time, the moment its slowdown would
// reach 2.
const DefaultSizeSlack = 1.0

// DefaultStarvationSlowdown is gpufleet's Config.StarvationSlowdown.
const DefaultStarvationSlowdown = 20.0

// DefaultUpgradeGain is gpufleet's Config.UpgradeGain: chosen on Philly's
// tuning half against 0 (off), 4, 10 and 50 (docs/PERFORMANCE.md#upgrades).
const DefaultUpgradeGain = 20.0

// DefaultMaxPreemptionSearches is every policy's Config.MaxPreemptionSearches.
// The 5,000-node benchmark (BenchmarkScheduleLargeFleet) runs 599 searches
// in its cycle, well under it, so its decisions are an unbounded cycle's;
// at 50,000 nodes and 500,000 queued jobs about 200,000 jobs would search
// and the bound keeps the cycle's preemptions near 2,000 instead of
// 26,000 (docs/SCHEDULER.md#preemption-at-scale).
const DefaultMaxPreemptionSearches = 2048

// DefaultReasonDepth is every policy's Config.ReasonDepth: the first
// thousand pending jobs, and the first thousand of each team, have their
// reasons in full.
const DefaultReasonDepth = 1000

// Defaults of the tuning knobs of Config; a zero field means its default.
// Where each comes from, and the sweep that checks them on data they were
// not tuned on, is in docs/SCHEDULER.md#constants.
const (
	DefaultStarvationMinRun      = 6 * time.Hour
	DefaultStarvationLeftFactor  = 10.0
	DefaultStarvationGainFactor  = 4.0
	DefaultStarvationOrderMargin = 4.0
	DefaultStarvationMaxReleases = 512
	DefaultStarvationMaxTries    = 8
	DefaultPreemptSearchNodes    = 32
	DefaultTopologyScanNodes     = 64
	DefaultFairShareClamp        = 2.0
)

// withDefaults fills the tuning knobs left zero.
func (c Config) withDefaults() Config {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.StarvationLeftFactor, DefaultStarvationLeftFactor)
	def(&c.StarvationGainFactor, DefaultStarvationGainFactor)
	def(&c.StarvationOrderMargin, DefaultStarvationOrderMargin)
	def(&c.FairShareClamp, DefaultFairShareClamp)
	defInt(&c.StarvationMaxReleases, DefaultStarvationMaxReleases)
	defInt(&c.StarvationMaxTries, DefaultStarvationMaxTries)
	defInt(&c.PreemptSearchNodes, DefaultPreemptSearchNodes)
	defInt(&c.TopologyScanNodes, DefaultTopologyScanNodes)
	def(&c.EstimateQuantile, DefaultEstimateQuantile)
	defInt(&c.EstimateMinRuns, DefaultEstimateMinRuns)
	return c
}

// maxPreemptNodes is Config.PreemptSearchNodes.
func (s *sched) maxPreemptNodes() int { return s.cfg.PreemptSearchNodes }

// SlurmMultifactor is the slurm policy's priority: the weights of the
// configuration example in Slurm's multifactor documentation
// (PriorityWeightAge=1000, PriorityWeightFairshare=10000,
// PriorityWeightJobSize=1000, PriorityMaxAge=14-0, PriorityFavorSmall=NO;
// its PriorityDecayHalfLife=14-0 is the policy's UsageHalfLife).
var SlurmMultifactor = Multifactor{AgeWeight: 1000, FairShareWeight: 10000, JobSizeWeight: 1000, MaxAge: 14 * 24 * time.Hour}

// DefaultLASThresholds are the las policy's queue thresholds in GPU-time:
// the defaults of Tiresias' simulator (3,250 and 7,200 GPU-seconds, three
// queues; SymbioticLab/Tiresias simulator/jobs.py).
var DefaultLASThresholds = []time.Duration{3250 * time.Second, 7200 * time.Second}

// ErrUnknownPolicy is returned by PolicyConfig for a name it does not know.
var ErrUnknownPolicy = errors.New("unknown scheduling policy")

// policies are the built-in policies: each is only a Config, so adding one
// is adding an entry here.
var policies = map[string]Config{
	// fifo: one queue by submit time, first-fit, stop at the first job that
	// does not fit; no priorities, backfill, quotas or preemption.
	"fifo": {Name: "fifo", StrictOrder: true, Packing: PackFirstFit},
	// bestfit: fifo order, best-fit packing.
	"bestfit": {Name: "bestfit", StrictOrder: true, Packing: PackBestFit},
	// backfill: Slurm-like priority classes with EASY backfill.
	"backfill": {Name: "backfill", PriorityClasses: true, Backfill: true, Packing: PackBestFit},
	// hetero-easy: backfill plus the heterogeneity preference (prefer:
	// fastest honoured, with the slower-model wait): Gavel-style
	// heterogeneity awareness (Narayanan et al., OSDI 2020) on FCFS with
	// EASY backfill.
	"hetero-easy": {Name: "hetero-easy", PriorityClasses: true, Backfill: true, Packing: PackBestFit, HeterogeneityPreference: true},
	// hrrn: hetero-easy ordered by highest response ratio next (Brinch
	// Hansen 1971), on the same estimates gpufleet gets; no fair share, no
	// quotas, no preemption.
	"hrrn": {Name: "hrrn", PriorityClasses: true, Backfill: true, Packing: PackBestFit, HeterogeneityPreference: true,
		SizeSlack: DefaultSizeSlack, ResponseRatio: true},
	// srtf: hetero-easy ordered by shortest estimated remaining time (SRTF
	// as a queue order, without preemption).
	"srtf": {Name: "srtf", PriorityClasses: true, Backfill: true, Packing: PackBestFit, HeterogeneityPreference: true,
		ShortestFirst: true},
	// slurm: Slurm's multifactor priority (age, fair share, job size) with
	// EASY backfill, weights and half-life as the configuration example of
	// https://slurm.schedmd.com/priority_multifactor.html.
	"slurm": {Name: "slurm", PriorityClasses: true, Backfill: true, Packing: PackBestFit,
		Multifactor: &SlurmMultifactor, UsageHalfLife: 14 * 24 * time.Hour},
	// drf: hetero-easy ordered by dominant resource fairness across teams
	// (Ghodsi et al., NSDI 2011): the team holding the smallest weighted
	// share of the fleet now goes next (progressive filling).
	"drf": {Name: "drf", PriorityClasses: true, Backfill: true, Packing: PackBestFit, HeterogeneityPreference: true,
		DominantShare: true},
	// themis: hetero-easy ordered by finish-time fairness, after Themis
	// (Mahajan et al., NSDI 2020): the job whose finish time in the shared
	// fleet is furthest behind its time on a 1/N share alone goes first.
	"themis": {Name: "themis", PriorityClasses: true, Backfill: true, Packing: PackBestFit, HeterogeneityPreference: true,
		FinishTimeFair: true},
	// gandiva-fair: hetero-easy with Gandiva-fair's ticket-based share
	// (Chaudhary et al., EuroSys 2020): stride scheduling across teams, a
	// team's tickets its weight, its pass the GPU-time it has received
	// (no decay: the whole history counts) plus what its earlier queued
	// jobs will take. Its time slicing, migration and trading of GPU
	// models between users are not built.
	"gandiva-fair": {Name: "gandiva-fair", PriorityClasses: true, Backfill: true, Packing: PackBestFit, HeterogeneityPreference: true,
		FairShare: true},
	// las: Tiresias' discretized 2D-LAS (Gu et al., NSDI 2019) with
	// preemption of jobs in later queues; no run-time estimate is read
	// (no backfill reservation), jobs that fit start in queue order.
	"las": {Name: "las", PriorityClasses: true, Preemption: true, Packing: PackBestFit, LASThresholds: DefaultLASThresholds},
	// gpufleet: everything.
	"gpufleet": {Name: "gpufleet", PriorityClasses: true, Backfill: true, FairShare: true, Quotas: true,
		Preemption: true, Packing: PackTopology, HeterogeneityPreference: true, UsageHalfLife: 7 * 24 * time.Hour,
		SizeSlack: DefaultSizeSlack, ResponseRatio: true,
		StarvationSlowdown: DefaultStarvationSlowdown, StarvationMinRun: DefaultStarvationMinRun, RestartCost: time.Minute, UpgradeGain: DefaultUpgradeGain},
}

// DefaultArrivalWindow is every policy's Config.ArrivalWindow: a day, so
// the ETA expects a day's rhythm of arrivals.
const DefaultArrivalWindow = 24 * time.Hour

// Policies lists the built-in policy names.
func Policies() []string { return sortedKeys(policies) }

// PolicyConfig returns the Config of a built-in policy (Policies). Every
// feature of gpufleet can be switched off in the returned Config for an
// ablation; the Config is the caller's to change (nothing is shared).
func PolicyConfig(name string) (Config, error) {
	c, ok := policies[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return Config{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownPolicy, name, strings.Join(Policies(), ", "))
	}
	c.Priorities = slices.Clone(gpufleet.Priorities())
	c.LASThresholds = slices.Clone(c.LASThresholds)
	if c.Multifactor != nil {
		mf := *c.Multifactor
		c.Multifactor = &mf
	}
	c.ETA = true
	c.ArrivalWindow = DefaultArrivalWindow
	c.DefaultEstimate = 4 * time.Hour
	c.DefaultGrace = DefaultGrace
	c.MaxPreemptionSearches = DefaultMaxPreemptionSearches
	c.ReasonDepth = DefaultReasonDepth
	return c.withDefaults(), nil
}

// Validate reports a Config the scheduler cannot run.
func (c Config) Validate() error {
	switch c.Packing {
	case "", PackFirstFit, PackBestFit, PackTopology:
	default:
		return fmt.Errorf("packing %q: want %s, %s or %s", c.Packing, PackFirstFit, PackBestFit, PackTopology)
	}
	seen := map[gpufleet.Priority]bool{}
	for _, p := range c.Priorities {
		if seen[p] {
			return fmt.Errorf("priority class %q listed twice", p)
		}
		seen[p] = true
	}
	if c.MaxPlacementsPerCycle < 0 {
		return fmt.Errorf("max placements per cycle %d is negative", c.MaxPlacementsPerCycle)
	}
	if c.MaxPreemptionSearches < 0 {
		return fmt.Errorf("max preemption searches %d is negative", c.MaxPreemptionSearches)
	}
	if c.ReasonDepth < 0 {
		return fmt.Errorf("reason depth %d is negative", c.ReasonDepth)
	}
	switch c.OverBudget {
	case "", OverBudgetAlert, OverBudgetStop:
	default:
		return fmt.Errorf("over-budget policy %q: want %s or %s", c.OverBudget, OverBudgetAlert, OverBudgetStop)
	}
	if c.OverBudgetAfter < 0 {
		return fmt.Errorf("over-budget after %s is negative", c.OverBudgetAfter)
	}
	if c.ArrivalWindow < 0 {
		return fmt.Errorf("arrival window %s is negative", c.ArrivalWindow)
	}
	if c.SizeSlack < 0 || math.IsNaN(c.SizeSlack) || math.IsInf(c.SizeSlack, 0) {
		return fmt.Errorf("size slack %g: want a finite value >= 0", c.SizeSlack)
	}
	if c.UpgradeGain < 0 || math.IsNaN(c.UpgradeGain) || math.IsInf(c.UpgradeGain, 0) {
		return fmt.Errorf("upgrade gain %g: want a finite value >= 0", c.UpgradeGain)
	}
	if c.StarvationSlowdown < 0 || math.IsNaN(c.StarvationSlowdown) || math.IsInf(c.StarvationSlowdown, 0) {
		return fmt.Errorf("starvation slowdown %g: want a finite value >= 0", c.StarvationSlowdown)
	}
	orders := 0
	for _, on := range []bool{c.SizeSlack > 0, c.ShortestFirst, len(c.LASThresholds) > 0, c.Multifactor != nil, c.DominantShare, c.FinishTimeFair} {
		if on {
			orders++
		}
	}
	if orders > 1 {
		return errors.New("size slack, shortest first, LAS thresholds, multifactor, dominant share and finish-time fairness are queue orders: choose one")
	}
	for i, t := range c.LASThresholds {
		if t <= 0 || i > 0 && t <= c.LASThresholds[i-1] {
			return fmt.Errorf("LAS thresholds %v: want positive and ascending", c.LASThresholds)
		}
	}
	if mf := c.Multifactor; mf != nil {
		for _, w := range []float64{mf.AgeWeight, mf.FairShareWeight, mf.JobSizeWeight} {
			if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
				return fmt.Errorf("multifactor weight %g: want a finite value >= 0", w)
			}
		}
		if mf.MaxAge < 0 {
			return fmt.Errorf("multifactor max age %s is negative", mf.MaxAge)
		}
	}
	if c.StarvationMinRun < 0 || c.RestartCost < 0 {
		return fmt.Errorf("starvation min run %s and restart cost %s: want durations >= 0", c.StarvationMinRun, c.RestartCost)
	}
	if c.DefaultEstimate < 0 {
		return fmt.Errorf("default estimate %s is negative", c.DefaultEstimate)
	}
	for p, d := range c.PriorityEstimates {
		if d < 0 {
			return fmt.Errorf("default estimate of %s %s is negative", p, d)
		}
	}
	if !(c.EstimateQuantile >= 0 && c.EstimateQuantile <= 1) || c.EstimateMinRuns < 0 {
		return fmt.Errorf("estimate quantile %g and min runs %d: want a quantile in [0, 1] and a count >= 0 (0: the defaults)",
			c.EstimateQuantile, c.EstimateMinRuns)
	}
	for _, k := range []struct {
		name string
		v    float64
	}{{"starvation left factor", c.StarvationLeftFactor}, {"starvation gain factor", c.StarvationGainFactor},
		{"starvation order margin", c.StarvationOrderMargin}} {
		if k.v < 0 || math.IsNaN(k.v) || math.IsInf(k.v, 0) {
			return fmt.Errorf("%s %g: want a finite value >= 0 (0: the default)", k.name, k.v)
		}
	}
	if c.FairShareClamp != 0 && !(c.FairShareClamp >= 1 && !math.IsInf(c.FairShareClamp, 0)) {
		return fmt.Errorf("fair-share clamp %g: want a finite value >= 1 (0: the default)", c.FairShareClamp)
	}
	if c.StarvationMaxReleases < 0 || c.StarvationMaxTries < 0 || c.PreemptSearchNodes < 0 || c.TopologyScanNodes < 0 {
		return fmt.Errorf("starvation max releases %d, max tries %d, preempt search nodes %d and topology scan nodes %d: want counts >= 0 (0: the default)",
			c.StarvationMaxReleases, c.StarvationMaxTries, c.PreemptSearchNodes, c.TopologyScanNodes)
	}
	return nil
}

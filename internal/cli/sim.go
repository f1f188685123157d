package cli

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/agent"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/sim"
)

// simFlags are the flags of `sim`.
type simFlags struct {
	trace, format, nodes, cluster, policy, plot string
	jobsOut                                     string
	estimates                                   string
	demandOut                                   string
	estimateError, timeScale, fill, scalingEff  float64
	rackBudget, drawNoise                       float64
	rackReserve, peakMargin, drawSwing          float64
	powerCaps                                   bool
	overBudget, overBudgetAfter                 string
	telemetryLag                                string
	seed                                        uint64
	skipBad, keepInvalid                        bool
	ablate                                      []string
	mtbf, repair, loadPeriod, halfLife          string
	restartOverhead, drainMTBF, grace           string
	timeLimitFactor                             float64
	window                                      string
	set                                         []string
}

// knobs are the policy's tuning knobs `sim --set` changes (a sweep).
var knobs = map[string]func(c *scheduler.Config, v string) error{
	"starvation-slowdown":     floatKnob(func(c *scheduler.Config) *float64 { return &c.StarvationSlowdown }),
	"starvation-left-factor":  floatKnob(func(c *scheduler.Config) *float64 { return &c.StarvationLeftFactor }),
	"starvation-gain-factor":  floatKnob(func(c *scheduler.Config) *float64 { return &c.StarvationGainFactor }),
	"upgrade-gain":            floatKnob(func(c *scheduler.Config) *float64 { return &c.UpgradeGain }),
	"starvation-order-margin": floatKnob(func(c *scheduler.Config) *float64 { return &c.StarvationOrderMargin }),
	"fair-share-clamp":        floatKnob(func(c *scheduler.Config) *float64 { return &c.FairShareClamp }),
	"starvation-min-run":      durationKnob(func(c *scheduler.Config) *time.Duration { return &c.StarvationMinRun }),
	"starvation-max-releases": intKnob(func(c *scheduler.Config) *int { return &c.StarvationMaxReleases }),
	"starvation-max-tries":    intKnob(func(c *scheduler.Config) *int { return &c.StarvationMaxTries }),
	"preempt-search-nodes":    intKnob(func(c *scheduler.Config) *int { return &c.PreemptSearchNodes }),
	"topology-scan-nodes":     intKnob(func(c *scheduler.Config) *int { return &c.TopologyScanNodes }),
	"max-preemptions":         intKnob(func(c *scheduler.Config) *int { return &c.MaxPreemptionsPerJob }),
	"max-preemptions-per-day": intKnob(func(c *scheduler.Config) *int { return &c.MaxPreemptionsPerDay }),
	"eta-arrival-window":      durationKnob(func(c *scheduler.Config) *time.Duration { return &c.ArrivalWindow }),
	"estimate-quantile":       floatKnob(func(c *scheduler.Config) *float64 { return &c.EstimateQuantile }),
	"estimate-min-runs":       intKnob(func(c *scheduler.Config) *int { return &c.EstimateMinRuns }),
	"default-estimate":        durationKnob(func(c *scheduler.Config) *time.Duration { return &c.DefaultEstimate }),
}

func floatKnob(field func(*scheduler.Config) *float64) func(*scheduler.Config, string) error {
	return func(c *scheduler.Config, v string) (err error) {
		*field(c), err = strconv.ParseFloat(v, 64)
		return err
	}
}

func intKnob(field func(*scheduler.Config) *int) func(*scheduler.Config, string) error {
	return func(c *scheduler.Config, v string) (err error) {
		*field(c), err = strconv.Atoi(v)
		return err
	}
}

func durationKnob(field func(*scheduler.Config) *time.Duration) func(*scheduler.Config, string) error {
	return func(c *scheduler.Config, v string) (err error) {
		*field(c), err = gpufleet.ParseDuration(v)
		return err
	}
}

func knobNames() []string { return sortedKeys(knobs) }

// ablations turn one gpufleet feature off.
var ablations = map[string]func(*scheduler.Config){
	"priorities":    func(c *scheduler.Config) { c.PriorityClasses = false },
	"backfill":      func(c *scheduler.Config) { c.Backfill = false },
	"fairshare":     func(c *scheduler.Config) { c.FairShare = false },
	"quotas":        func(c *scheduler.Config) { c.Quotas = false },
	"preemption":    func(c *scheduler.Config) { c.Preemption = false },
	"topology":      func(c *scheduler.Config) { c.Packing = scheduler.PackBestFit },
	"packing":       func(c *scheduler.Config) { c.Packing = scheduler.PackFirstFit },
	"heterogeneity": func(c *scheduler.Config) { c.HeterogeneityPreference = false },
	"size":          func(c *scheduler.Config) { c.SizeSlack = 0 },
	"starvation":    func(c *scheduler.Config) { c.StarvationSlowdown = 0 },
	"eta":           func(c *scheduler.Config) { c.ETA = false },
	"upgrade":       func(c *scheduler.Config) { c.UpgradeGain = 0 },
}

func newSimCmd(e *env) *cobra.Command {
	var sf simFlags
	cmd := &cobra.Command{
		Use:   "sim --trace FILE --format FORMAT [--nodes FILE | --cluster FILE] --policy POLICY [flags]",
		Short: "Replay a GPU cluster trace through the scheduler with a virtual clock",
		Long: `Replay a real or synthetic GPU cluster trace through the same scheduler the
server runs, on a simulated fleet, with virtual time. Reports job completion
time and wait percentiles (overall, per class and per team), GPU allocation,
fragmentation, Jain's fairness over teams, ETA accuracy, every stop by
reason code (preemptions, drains, time limits, cancels), why jobs waited,
and scheduler speed. Stopped jobs keep their GPUs through their grace, as
on a real fleet.

Formats: openb (Alibaba 2023 pods; --nodes for its node list), philly-gavel
(Philly via Gavel, per-GPU-type durations), dlrm (Alibaba 2025 inference
instances) and csv (submit_s, duration_s, gpus, nodes, team, priority,
gpu_model, sharing, estimate_s, preemptible, grace_s, time_limit_s,
cancel_s, duration_s_<model>). Gzip files
are read transparently. The fleet comes from --nodes (openb) or --cluster
(YAML or JSON node_groups and teams). See docs/SIMULATOR.md.`,
		Example: `  gpufleet sim --trace traces/philly-gavel/philly_gavel.csv.gz --format philly-gavel \
      --cluster traces/clusters/philly.yaml --policy gpufleet
  gpufleet sim --trace traces/alibaba-openb-2023/openb_pod_list_gpuspec33.csv --format openb \
      --nodes traces/alibaba-openb-2023/openb_node_list_all_node.csv --policy bestfit -o json
  gpufleet sim --trace jobs.csv --format csv --cluster cluster.yaml --policy fifo \
      --estimate-error 0.5 --seed 7 --plot fifo.svg`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runSim(e, &sf) },
	}
	fs := cmd.Flags()
	fs.StringVar(&sf.trace, "trace", "", "trace file (gzip detected)")
	fs.StringVar(&sf.format, "format", "", "trace format: "+strings.Join(sim.Formats, ", "))
	fs.StringVar(&sf.nodes, "nodes", "", "openb node list (openb_node_list_all_node.csv)")
	fs.StringVar(&sf.cluster, "cluster", "", "cluster spec, YAML or JSON: node_groups and teams")
	fs.StringVar(&sf.policy, "policy", "gpufleet", "scheduling policy: "+strings.Join(scheduler.Policies(), ", "))
	fs.Float64Var(&sf.estimateError, "estimate-error", 0, "sigma of the lognormal noise on users' run-time estimates (0 = exact)")
	fs.StringVar(&sf.estimates, "estimates", "user", "where jobs' run-time estimates come from: user (the trace's, or the true run time with --estimate-error noise), history (none given: the scheduler learns them from similar jobs' finished runs, as gpufleet serve does) or none (none given and no history: the policy's default for every job)")
	fs.Float64Var(&sf.rackBudget, "rack-budget", 0, "give every rack a power budget of this fraction of its rated draw (0 = none; racks from the cluster's nodes_per_rack)")
	fs.Float64Var(&sf.drawNoise, "draw-noise", 0, "sigma of the lognormal factor on each job's draw around 0.75 of the TDP (0 = every busy GPU draws its TDP)")
	fs.Float64Var(&sf.rackReserve, "rack-reserve", 0, "reserve this share of every rack's budget for production work (the racks' --production-reserve)")
	fs.Float64Var(&sf.peakMargin, "peak-margin", power.DefaultPeakMargin, "charge a running job's measured GPUs their draw times 1 + this (negative: always their TDP)")
	fs.Float64Var(&sf.drawSwing, "draw-swing", 0, "move each busy GPU's draw every telemetry period by up to this share, up or down (0 = constant per job)")
	fs.BoolVar(&sf.powerCaps, "power-caps", false, "model power limits: a measured GPU's draw is clipped to the charge it was measured at (NVML power management limit)")
	fs.StringVar(&sf.overBudget, "over-budget", "alert", "what a rack over its power budget gets where caps do not hold it: alert (the report only) or stop (its most recently started preemptible job, as gpufleet serve --over-budget stop)")
	fs.StringVar(&sf.overBudgetAfter, "over-budget-after", "2m", "with --over-budget stop: how long a rack's projected draw must stay over its budget before a stop")
	fs.StringVar(&sf.telemetryLag, "telemetry-lag", "", "how late the scheduler sees a job's draw; its GPUs count their TDP until then, e.g. 2m (default 60s; 0 for none)")
	fs.Uint64Var(&sf.seed, "seed", 1, "seed of every random draw, and of the node order that breaks placement ties")
	fs.Float64Var(&sf.timeScale, "time-scale", 1, "divide arrival times by this (2 = arrivals twice as fast)")
	fs.BoolVar(&sf.skipBad, "skip-bad-lines", false, "count malformed trace rows instead of stopping at the first")
	fs.BoolVar(&sf.keepInvalid, "keep-invalid", false, "keep rows whose request the validation refuses as jobs the scheduler fails (invalid_request), as the server fails a stored row that no longer validates")
	fs.StringSliceVar(&sf.ablate, "ablate", nil, "turn a policy feature off (repeatable): "+strings.Join(ablationNames(), ", "))
	fs.StringVar(&sf.plot, "plot", "", "write an SVG plot (allocation over time, wait CDF) to FILE")
	fs.StringVar(&sf.jobsOut, "jobs-out", "", "write every job's outcome (submit, start, finish, run time, slowdown, stops, model) to FILE as CSV")
	fs.StringVar(&sf.demandOut, "demand-out", "", "write the daily demand (GPU-hours asked for by the jobs submitted each day, per GPU model, served or not) to FILE as CSV, for gpufleet forecast")
	fs.Float64Var(&sf.fill, "fill", 0, "FGD experiment: jobs never end and arrive one per second, sampled from the trace, until they ask for X times the cluster's GPUs")
	fs.StringVar(&sf.mtbf, "mtbf", "", "node mean time between failures, e.g. 30d (default: no failures)")
	fs.StringVar(&sf.repair, "repair", "4h", "time a failed node stays down")
	fs.StringVar(&sf.restartOverhead, "restart-overhead", strconv.FormatFloat(sim.DefaultRestartOverhead, 'f', -1, 64)+"s",
		"time a preempted, drained or failed job needs to resume from its checkpoint, besides its grace (0 = free restarts)")
	fs.StringVar(&sf.window, "window", "", "replay only the jobs arriving in START,END from the trace's first arrival, e.g. 0,30d (a time split)")
	fs.StringSliceVar(&sf.set, "set", nil, "set a policy knob, KNOB=VALUE (repeatable): "+strings.Join(knobNames(), ", "))
	fs.StringVar(&sf.drainMTBF, "drain-mtbf", "", "node mean time between health drains, e.g. 14d: the scheduler stops the node's jobs with their grace, then the node is down for --repair (default: no drains)")
	fs.Float64Var(&sf.timeLimitFactor, "time-limit-factor", 0, "give jobs without a time limit one of X times their user's estimate; runs that outlast it are stopped and end (0 = none)")
	fs.StringVar(&sf.grace, "grace", "", "grace of a stop for jobs that give none (default: the policy's, 30s)")
	fs.StringVar(&sf.loadPeriod, "load-period", "", "report the offered load per period of this length, e.g. 50d")
	fs.StringVar(&sf.halfLife, "usage-half-life", "", "override the policy's usage half-life, e.g. 24h")
	fs.Float64Var(&sf.scalingEff, "scaling-efficiency", sim.DefaultScalingEfficiency, "philly-gavel: parallel efficiency where the trace has only single-GPU times")
	_ = cmd.RegisterFlagCompletionFunc("format", fixedCompletion(sim.Formats...))
	_ = cmd.RegisterFlagCompletionFunc("policy", fixedCompletion(scheduler.Policies()...))
	_ = cmd.RegisterFlagCompletionFunc("ablate", fixedCompletion(ablationNames()...))
	return cmd
}

func ablationNames() []string {
	var out []string
	for k := range ablations {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// parseSimDuration reads a duration flag with gpufleet.ParseDuration
// ("90s", "4h", "50d"), in seconds; empty is 0.
func parseSimDuration(flag, s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	d, err := gpufleet.ParseDuration(s)
	if err != nil {
		return 0, gpufleet.InField("--"+flag, err)
	}
	return d.Seconds(), nil
}

func runSim(e *env, sf *simFlags) error {
	if sf.trace == "" {
		return usageErr("--trace: required")
	}
	if !slices.Contains(sim.Formats, sf.format) {
		return usageErr("--format %q: expected one of %s", sf.format, strings.Join(sim.Formats, ", "))
	}
	if (sf.nodes == "") == (sf.cluster == "") {
		return usageErr("give exactly one of --nodes (openb node list) and --cluster (spec file)")
	}
	if !(sf.rackBudget >= 0 && sf.rackBudget <= 10) || !(sf.drawNoise >= 0 && sf.drawNoise <= 5) {
		return usageErr("--rack-budget %v, --draw-noise %v: expected 0 to 10 and 0 to 5", sf.rackBudget, sf.drawNoise)
	}
	if !(sf.rackReserve >= 0 && sf.rackReserve <= 1) || !(sf.peakMargin <= 10) || !(sf.drawSwing >= 0 && sf.drawSwing <= 1) {
		return usageErr("--rack-reserve %v, --peak-margin %v, --draw-swing %v: expected 0 to 1, at most 10, 0 to 1", sf.rackReserve, sf.peakMargin, sf.drawSwing)
	}
	estimates, ok := map[string]string{"user": sim.EstimatesUser, "history": sim.EstimatesHistory, "none": sim.EstimatesNone}[sf.estimates]
	if !ok {
		return usageErr("--estimates %q: expected user, history or none", sf.estimates)
	}
	if sf.timeScale <= 0 || sf.estimateError < 0 || sf.fill < 0 || sf.timeLimitFactor < 0 {
		return usageErr("--time-scale must be positive; --estimate-error, --fill and --time-limit-factor must not be negative")
	}
	// Fail before a long replay, not after it.
	for flag, path := range map[string]string{"--jobs-out": sf.jobsOut, "--demand-out": sf.demandOut} {
		if path == "" {
			continue
		}
		if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
			return usageErr("%s %q: its directory does not exist", flag, path)
		}
	}
	policy, err := scheduler.PolicyConfig(sf.policy)
	if err != nil {
		return usageErr("--policy: %v", err)
	}
	for _, kv := range sf.set {
		k, v, _ := strings.Cut(kv, "=")
		set, ok := knobs[k]
		if !ok {
			return usageErr("--set %q: expected KNOB=VALUE with KNOB one of %s", kv, strings.Join(knobNames(), ", "))
		}
		if err := set(&policy, v); err != nil {
			return usageErr("--set %s: %v", kv, err)
		}
		policy.Name += "+" + kv
	}
	if err := policy.Validate(); err != nil {
		return usageErr("--set: %v", err)
	}
	for _, a := range sf.ablate {
		off, ok := ablations[a]
		if !ok {
			return usageErr("--ablate %q: expected one of %s", a, strings.Join(ablationNames(), ", "))
		}
		off(&policy)
		policy.Name += "-" + a
	}
	if policy.OverBudget, err = scheduler.ParseOverBudgetPolicy(sf.overBudget); err != nil {
		return usageErr("--over-budget: %v", err)
	}
	after, err := parseSimDuration("over-budget-after", sf.overBudgetAfter)
	if err != nil {
		return err
	}
	policy.OverBudgetAfter = time.Duration(after * float64(time.Second))
	policy.Seed = sf.seed // placement ties too: a replicate with another seed varies them
	cfg := sim.Config{Policy: policy, EstimateError: sf.estimateError, Estimates: estimates, Seed: sf.seed, TimeScale: sf.timeScale, Fill: sf.fill,
		RackBudget: sf.rackBudget, DrawNoise: sf.drawNoise, RackReserve: sf.rackReserve, PeakMargin: sf.peakMargin,
		DrawSwing: sf.drawSwing, PowerCaps: sf.powerCaps,
		TimeLimitFactor: sf.timeLimitFactor}
	switch lag, err := parseSimDuration("telemetry-lag", sf.telemetryLag); {
	case err != nil:
		return err
	case sf.telemetryLag != "" && lag == 0:
		cfg.TelemetryLag = -1 // none
	default:
		cfg.TelemetryLag = lag
	}
	if cfg.NodeMTBF, err = parseSimDuration("mtbf", sf.mtbf); err != nil {
		return err
	}
	if cfg.DrainMTBF, err = parseSimDuration("drain-mtbf", sf.drainMTBF); err != nil {
		return err
	}
	if sf.grace != "" {
		g, err := parseSimDuration("grace", sf.grace)
		if err != nil {
			return err
		}
		if g > gpufleet.MaxGrace.Seconds() {
			return usageErr("--grace %s: expected at most %s", sf.grace, gpufleet.MaxGrace)
		}
		cfg.Policy.DefaultGrace = time.Duration(g * 1e9)
	}
	if cfg.RestartOverhead, err = parseSimDuration("restart-overhead", sf.restartOverhead); err != nil {
		return err
	}
	if sf.window != "" {
		a, b, ok := strings.Cut(sf.window, ",")
		if !ok {
			return usageErr("--window %q: expected START,END, e.g. 0,30d", sf.window)
		}
		if cfg.WindowStart, err = parseSimDuration("window", a); err != nil {
			return err
		}
		if cfg.WindowEnd, err = parseSimDuration("window", b); err != nil {
			return err
		}
		if cfg.WindowEnd <= cfg.WindowStart {
			return usageErr("--window %q: END must come after START", sf.window)
		}
	}
	if cfg.RestartOverhead > 0 {
		// The scheduler weighs the restart cost the replay charges.
		cfg.Policy.RestartCost = time.Duration(cfg.RestartOverhead * 1e9)
	}
	if cfg.RepairTime, err = parseSimDuration("repair", sf.repair); err != nil {
		return err
	}
	if cfg.LoadPeriod, err = parseSimDuration("load-period", sf.loadPeriod); err != nil {
		return err
	}
	if sf.halfLife != "" {
		h, err := parseSimDuration("usage-half-life", sf.halfLife)
		if err != nil {
			return err
		}
		cfg.Policy.UsageHalfLife = time.Duration(h * 1e9)
	}

	cat, err := e.loadCatalog()
	if err != nil {
		return err
	}
	tr, err := readSimTrace(sf)
	if err != nil {
		return err
	}
	var spec sim.ClusterSpec
	if sf.nodes != "" {
		f, err := os.Open(sf.nodes)
		if err != nil {
			return fmt.Errorf("--nodes: %w", err)
		}
		spec, _, err = sim.ParseOpenbNodes(f, sim.ReadOptions{Name: filepath.Base(sf.nodes)})
		f.Close()
		if err != nil {
			return fmt.Errorf("--nodes: %w", err)
		}
	} else {
		f, err := os.Open(sf.cluster)
		if err != nil {
			return fmt.Errorf("--cluster: %w", err)
		}
		spec, err = sim.ParseClusterSpec(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("--cluster %s: %w", sf.cluster, err)
		}
	}
	cl, err := sim.BuildCluster(spec, cat)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}

	cfg.Clock = time.Now
	start, last := time.Now(), time.Now()
	cfg.Progress = func(p sim.Progress) {
		if now := time.Now(); now.Sub(last) >= 2*time.Second {
			last = now
			fmt.Fprintf(e.stderr, "sim: %s: %d/%d jobs arrived, %d completed, %d queued, %d running, virtual day %.1f, %.0fs\n",
				policy.Name, p.Arrived, p.Jobs, p.Completed, p.Pending, p.Running, p.VirtualS/86400, now.Sub(start).Seconds())
		}
	}
	res, err := sim.Run(tr, cl, cfg)
	if err != nil {
		return err
	}
	if sf.plot != "" {
		f, err := os.Create(sf.plot)
		if err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
		if err := sim.WriteSVG(f, res); err != nil {
			f.Close()
			return fmt.Errorf("--plot: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	if sf.jobsOut != "" {
		var buf bytes.Buffer
		if err := sim.WriteJobsCSV(&buf, res.Jobs); err != nil {
			return fmt.Errorf("--jobs-out: %w", err)
		}
		if err := agent.WriteFileAtomic(sf.jobsOut, buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("--jobs-out: %w", err)
		}
	}
	if sf.demandOut != "" {
		var buf bytes.Buffer
		if err := sim.WriteDemandCSV(&buf, tr, res.Jobs, sim.DefaultEpoch); err != nil {
			return fmt.Errorf("--demand-out: %w", err)
		}
		if err := agent.WriteFileAtomic(sf.demandOut, buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("--demand-out: %w", err)
		}
	}
	if e.output == outputJSON {
		return writeJSON(e.stdout, res.Report)
	}
	return printSimReport(e, &res.Report)
}

func readSimTrace(sf *simFlags) (*sim.Trace, error) {
	f, err := os.Open(sf.trace)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	defer f.Close()
	return sim.Read(f, sf.format, sim.ReadOptions{Name: filepath.Base(sf.trace), SkipBadLines: sf.skipBad, KeepInvalid: sf.keepInvalid, ScalingEfficiency: sf.scalingEff})
}

func printSimReport(e *env, r *sim.Report) error {
	w := e.stdout
	fmt.Fprintf(w, "policy %s, trace %s (%s): %d jobs, %d completed, %d unfinished, %d skipped, %d bad lines",
		r.Policy, r.Trace, r.Format, r.Jobs, r.Completed, r.Unfinished, r.Skipped, r.BadLines)
	if r.InvalidRows > 0 {
		fmt.Fprintf(w, ", %d invalid rows kept", r.InvalidRows)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "cluster %d GPUs: allocation %s, fragmentation %.1f GPUs, unallocated at end %.1f\n",
		r.CapacityGPUs, pct(&r.GPUAllocationRatio), r.FragmentationGPUs, r.UnallocatedGPUs)
	fmt.Fprintf(w, "makespan %s, preemptions %d, failures %d, drains %d, retries %d (of %d failed runs), Jain fairness %s, ETA error median %s p90 %s (%d jobs)\n",
		days(&r.MakespanS), r.Preemptions, r.Failures, r.Drains, r.Retries, r.FailedRuns, num(r.JainFairness, 3),
		secs(r.ETAMedianAbsErrorS), secs(r.ETAP90AbsErrorS), r.ETAJobs)
	if len(r.Stops) > 0 || len(r.Ended) > 0 {
		fmt.Fprintf(w, "stops %s; ended unfinished %s\n", counts(r.Stops), counts(r.Ended))
		fmt.Fprintf(w, "most stops of one job %d (%d preemptions); %d jobs stopped 10 times or more\n",
			r.MaxJobStops, r.MaxJobPreemptions, r.JobsStopped10)
	}
	if len(r.WaitReasons) > 0 {
		fmt.Fprintf(w, "waited at submission: %s\n", counts(r.WaitReasons))
	}
	if p := r.RackPower; p != nil {
		fmt.Fprintf(w, "racks %d: budget %.0f%% of rated (%s of %s), %.1f rack-minutes over budget (most %s)\n", p.Racks, p.BudgetFraction*100,
			gpufleet.Watts(p.BudgetWatts), gpufleet.Watts(p.RatedWatts), p.MinutesOverBudget, gpufleet.Watts(math.Round(p.MaxOverWatts)))
	}
	fmt.Fprintf(w, "%d cycles, %d decisions in %.2f s wall (%.0f decisions/s)\n", r.Cycles, r.Decisions, r.SimWallS, r.DecisionsPerS)
	if l := r.OfferedLoad; l != nil {
		fmt.Fprintf(w, "offered load %.2f (in %s-GPU seconds over %.0f reference GPUs)\n", l.Overall, dash(l.RefModel), l.CapacityRefGPUs)
		for _, p := range l.Periods {
			fmt.Fprintf(w, "  day %.0f-%.0f: %.2f (%d jobs)\n", p.StartS/86400, p.EndS/86400, p.Load, p.Jobs)
		}
	}
	fmt.Fprintln(w)
	t := newTable(w, "GROUP", "JOBS", "DONE", "AVG JCT", "P50 JCT", "P95 JCT", "P99 JCT", "AVG WAIT", "P50 WAIT", "P95 WAIT", "P99 WAIT", "SLOWDOWN")
	row := func(name string, l sim.Latency) {
		t.row(name, strconv.Itoa(l.Jobs), strconv.Itoa(l.Completed), secs(l.AvgJCTS), secs(l.P50JCTS), secs(l.P95JCTS), secs(l.P99JCTS),
			secs(l.AvgWaitS), secs(l.P50WaitS), secs(l.P95WaitS), secs(l.P99WaitS), num(l.AvgSlowdown, 2))
	}
	row("all", r.Latency)
	for _, k := range sortedKeys(r.ByClass) {
		row("class "+k, r.ByClass[k])
	}
	if e.output == outputWide || len(r.ByTeam) <= 20 {
		for _, k := range sortedKeys(r.ByTeam) {
			row("team "+k, r.ByTeam[k])
		}
	} else {
		t.row(fmt.Sprintf("(%d teams: -o wide or -o json)", len(r.ByTeam)))
	}
	if err := t.flush(); err != nil {
		return err
	}
	return printETAScore(w, r.ETAScore)
}

// printETAScore prints how the ETAs shown at submission held, by class:
// the share of jobs within max(1 h, 25 %) of each predictor, the share
// that started by gpufleet's p90, and gpufleet's median relative error.
func printETAScore(w io.Writer, sc *sim.ETAScore) error {
	if sc == nil {
		return nil
	}
	fmt.Fprintln(w, "\nETA at submission: share within max(1h, 25%) of the prediction (gpufleet median, simulation alone, starts now, median recent wait), share started by gpufleet's p90")
	t := newTable(w, "CLASS", "JOBS", "GPUFLEET", "BY P90", "MEDIAN REL ERR", "SIMULATION", "STARTS NOW", "MEDIAN RECENT")
	share := func(c sim.ETAClass, p string) string { return pct(c.Predictors[p].Within) }
	row := func(name string, c sim.ETAClass) {
		g := c.Predictors["gpufleet"]
		t.row(name, strconv.Itoa(c.Jobs), share(c, "gpufleet"), pct(g.BeforeP90), num(g.MedianRelError, 2),
			share(c, "simulation"), share(c, "starts_now"), share(c, "median_recent_wait"))
	}
	for _, k := range []string{"all", "1", "2-4", "5-8", "9+"} {
		if c, ok := sc.BySize[k]; ok {
			name := "gpus " + k
			if k == "all" {
				name = "all"
			}
			row(name, c)
		}
	}
	for _, k := range []string{"<1h", "1h-10h", "10h-10d", ">=10d"} {
		if c, ok := sc.ByRunTime[k]; ok {
			row("run "+k, c)
		}
	}
	for _, k := range []string{"first", "second"} {
		if c, ok := sc.ByHalf[k]; ok {
			row("submitted, "+k+" half", c)
		}
	}
	return t.flush()
}

// counts writes a tally as "drain 3, time_limit 1", or "none".
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

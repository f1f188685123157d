package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/bench/cuda"
	"github.com/gpufleet/gpufleet/internal/gpu"
	"github.com/gpufleet/gpufleet/internal/gpu/nvml"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// benchFlags are the flags of `gpufleet bench` on a node.
type benchFlags struct {
	gpus, tests, backend, simGPUs, cudaLibDir, level string
	simFaults                                        []string
	quick                                            bool
}

// newBenchCmd is `gpufleet bench`: microbenchmarks on this node, and the
// fleet's benchmark commands (docs/BENCH.md).
func newBenchCmd(e *env) *cobra.Command {
	c := &clientEnv{env: e, now: time.Now}
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [--gpus all|0,1] [--tests copy,gemm,h2d,p2p,allreduce,memory,stress] [--quick | --level quick|medium|long] [-o json]",
		Short: "Measure this node's GPUs (memory, matrix products, host and GPU-to-GPU copies, all-reduce) against the catalog spec",
		Long: `Measure this node's GPUs and print each figure as measured (the median of
timed runs after a warm-up), its run-to-run spread, the catalog's spec and
the ratio:

  copy          device-to-device copy, bytes read plus written
  gemm-PREC     dense matrix product per precision the card runs natively,
                on random data, checked against a float64 reference
  h2d, d2h      host-to-device and device-to-host copies from pinned memory
  p2p           GPU-to-GPU copies for every local pair (ring neighbours
                with --quick), and per GPU the median over its pairs
  allreduce     NCCL all-reduce bus bandwidth across the selected GPUs

--backend cuda (the default) loads the CUDA driver, cuBLASLt and NCCL at
run time (--cuda-lib-dir names where they are) and exits non-zero, saying
what is missing, where they are not. --backend sim answers from simulated
GPUs (--sim-gpus, --sim-fault) with the efficiencies real cards reach.

In the fleet, agents run the quick set when a node joins and when it is
validated; gpufleet bench results compares every GPU with its model's
fleet median, gpufleet bench allreduce runs NCCL's all-reduce across
several nodes, and gpufleet bench workload runs your own job on several GPU
models. docs/BENCH.md explains each figure and the method.`,
		Example: `  gpufleet bench --quick
  gpufleet bench --gpus 0,1 --tests gemm -o json
  gpufleet bench --backend sim --sim-gpus h100-sxm-80gb:8 --sim-fault 3:slow-memory`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runLocalBench(cmd.Context(), e, f) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.gpus, "gpus", "all", "GPUs to measure: all, or indexes such as 0,1")
	fs.StringVar(&f.tests, "tests", "all", "tests to run: all, or a comma-separated list of copy, gemm, h2d, p2p, allreduce")
	fs.BoolVar(&f.quick, "quick", false, "the quick set the agent runs: smaller sizes, 5 runs, ring p2p pairs (under a minute); --level quick")
	fs.StringVar(&f.level, "level", "", "quick, medium (full sizes, every p2p pair, memory patterns) or long (and sustained stress), as DCGM diag's levels")
	fs.StringVar(&f.backend, "backend", "cuda", "cuda (real GPUs through the CUDA libraries) or sim (simulated GPUs)")
	fs.StringVar(&f.cudaLibDir, "cuda-lib-dir", "", "directory holding libcuda.so.1, libcublasLt.so and libnccl.so.2 (default: the loader's search path)")
	fs.StringVar(&f.simGPUs, "sim-gpus", "h100-sxm-80gb:8", "with --backend sim: the simulated GPUs, as gpufleet agent --sim-gpus")
	fs.StringArrayVar(&f.simFaults, "sim-fault", nil, "with --backend sim: INDEX:FAULT injected before measuring (3:slow-memory, 1:power-brake, 5:nvlink-down:18); repeatable")
	cmd.AddCommand(newBenchRunCmd(c), newBenchAllReduceCmd(c), newBenchResultsCmd(c), newBenchWorkloadCmd(c), newBenchWorkloadsCmd(c))
	return cmd
}

// benchReport is what `gpufleet bench -o json` prints.
type benchReport struct {
	Node    string         `json:"node"`
	Backend string         `json:"backend"`
	Figures []bench.Figure `json:"figures"`
	Skipped []string       `json:"skipped,omitempty"`
}

func runLocalBench(ctx context.Context, e *env, f benchFlags) error {
	tests, err := bench.ParseTests(f.tests)
	if err != nil {
		return fmt.Errorf("--tests: %w", err)
	}
	cat, err := e.loadCatalog()
	if err != nil {
		return err
	}
	var (
		be      bench.Backend
		devices int
	)
	switch f.backend {
	case "sim":
		specs, err := parseSimGPUs(f.simGPUs)
		if err != nil {
			return err
		}
		host, _ := os.Hostname()
		sim, err := simgpu.New(specs, simgpu.WithNodeName(host), simgpu.WithCatalog(cat))
		if err != nil {
			return fmt.Errorf("--sim-gpus: %w", err)
		}
		devs, _ := sim.Devices(ctx)
		devices = len(devs)
		for _, s := range f.simFaults {
			idx, spec, ok := strings.Cut(s, ":")
			i, err := strconv.Atoi(idx)
			if !ok || err != nil {
				return usageErr("--sim-fault %s: expected INDEX:FAULT, such as 3:slow-memory", gpufleet.Quote(s))
			}
			fault, err := simgpu.ParseFault(spec)
			if err != nil {
				return fmt.Errorf("--sim-fault: %w", err)
			}
			if err := sim.Inject(i, fault); err != nil {
				return fmt.Errorf("--sim-fault %s: %w", s, err)
			}
		}
		be = sim
	case "cuda":
		// NVML names the GPUs as the rest of gpufleet does (index, UUID,
		// catalog model); without it CUDA's own names are used.
		var devs []gpu.Device
		if nb, err := nvml.New(nvml.WithCatalog(cat), nvml.WithLogger(slog.New(slog.DiscardHandler))); err == nil {
			devs, _ = nb.Devices(ctx)
			_ = nb.Close()
		}
		cb, err := cuda.Open(f.cudaLibDir, devs)
		if err != nil {
			return fmt.Errorf("--backend cuda: %w (no NVIDIA driver or CUDA libraries here? --cuda-lib-dir names where they are; --backend sim simulates GPUs)", err)
		}
		defer cb.Close()
		be = cb
		devices = gpufleet.MaxNodeGPUs
		if len(devs) > 0 {
			devices = len(devs)
		}
	default:
		return usageErr("--backend %s: expected cuda or sim", gpufleet.Quote(f.backend))
	}
	gpus, err := bench.ParseGPUs(f.gpus, devices)
	if err != nil {
		return fmt.Errorf("--gpus: %w", err)
	}
	var skipped []string
	// A failure (a product that failed its check, a call that erred) is
	// reported after the figures that were measured, with a non-zero exit.
	opts := bench.Options{GPUs: gpus, Tests: tests, Quick: f.quick}
	if f.level != "" {
		if opts.Level, err = bench.ParseLevel(f.level); err != nil {
			return usageErr("--level: %v", err)
		}
		opts.Quick = opts.Level == bench.LevelQuick
	}
	ms, measureErr := be.Measure(ctx, opts, func(line string) {
		if strings.Contains(line, "skipped") || strings.Contains(line, "not measured") {
			skipped = append(skipped, line)
		}
		fmt.Fprintln(e.stderr, line)
	})
	if measureErr != nil && len(ms) == 0 {
		return measureErr
	}
	host, _ := os.Hostname()
	rep := benchReport{Node: host, Backend: f.backend, Figures: bench.Summarize(cat, ms), Skipped: skipped}
	if len(rep.Figures) == 0 {
		return fmt.Errorf("%w: nothing was measured: %s", gpufleet.ErrUnavailable, strings.Join(skipped, "; "))
	}
	// A figure that failed (memory cells read back wrong, a throttled or
	// erring stress) fails the command, after the figures.
	var failed []string
	for _, fig := range rep.Figures {
		if why := fig.Failed(); why != "" {
			failed = append(failed, fmt.Sprintf("gpu %s %s: %s", figureWhere(fig), fig.Name, why))
		}
	}
	if len(failed) > 0 {
		measureErr = errors.Join(measureErr, fmt.Errorf("%s failed: %s", pluralFigures(len(failed)), strings.Join(failed, "; ")))
	}
	if e.output == outputJSON {
		if err := writeJSON(e.stdout, rep); err != nil {
			return err
		}
		return measureErr
	}
	t := newTable(e.stdout, "GPU", "FIGURE", "MEASURED", "SPREAD", "SPEC", "RATIO", "SIZE", "RESULT")
	for _, fig := range rep.Figures {
		result := "ok"
		if why := fig.Failed(); why != "" {
			result = "FAILED: " + why
		}
		t.row(figureWhere(fig), fig.Name, bench.Human(fig.Value, fig.Unit), pct(&fig.Spread), specText(fig), num(fig.Ratio, 2), fig.Size, result)
	}
	if err := t.flush(); err != nil {
		return err
	}
	return measureErr
}

// pluralFigures is n figures, in words.
func pluralFigures(n int) string {
	if n == 1 {
		return "1 figure"
	}
	return fmt.Sprintf("%d figures", n)
}

// figureWhere is a figure's GPU column: "3", "3->5" for a pair, "0-7"
// for an all-reduce.
func figureWhere(f bench.Figure) string {
	switch {
	case f.Peer != nil:
		return fmt.Sprintf("%d->%d", f.GPU, *f.Peer)
	case f.Nodes > 1:
		return fmt.Sprintf("%d GPUs, %d nodes", f.GPUs, f.Nodes)
	case f.Test == bench.AllReduce:
		return fmt.Sprintf("%d GPUs", f.GPUs)
	}
	return strconv.Itoa(f.GPU)
}

func specText(f bench.Figure) string {
	if f.Spec == nil {
		return "-"
	}
	return bench.Human(*f.Spec, f.Unit)
}

// newBenchRunCmd is `gpufleet bench run NODE`: the server relays a bench
// order to a cordoned node's agent and the figures come back judged.
func newBenchRunCmd(c *clientEnv) *cobra.Command {
	var (
		gpus, tests, level string
		full, wait         bool
		timeout            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run NODE [--level quick|medium|long] [--gpus 0,1] [--tests ...] [--wait]",
		Short: "Run the microbenchmarks on a cordoned node's idle GPUs through its agent, and show them against the fleet (admin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			node := args[0]
			req := api.BenchRequest{Full: full}
			l, err := bench.ParseLevel(level)
			if err != nil {
				return usageErr("--level: %v", err)
			}
			if level != "" {
				req.Level = l
			}
			if req.Tests, err = bench.ParseTests(tests); err != nil {
				return fmt.Errorf("--tests: %w", err)
			}
			if req.GPUs, err = bench.ParseGPUs(gpus, gpufleet.MaxNodeGPUs); err != nil {
				return fmt.Errorf("--gpus: %w", err)
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			o, err := cl.OrderBench(cmd.Context(), node, req)
			if err != nil {
				return err
			}
			if !wait {
				if c.output == outputJSON {
					return writeJSON(c.stdout, o)
				}
				fmt.Fprintf(c.stdout, "bench %s queued on %s; gpufleet bench results --node %s shows the figures\n", o.ID, node, node)
				return nil
			}
			fmt.Fprintf(c.stderr, "bench %s queued on %s; waiting for its figures\n", o.ID, node)
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			for {
				list, err := cl.BenchResults(ctx, api.BenchQuery{Node: node, History: true, Limit: 4096})
				if err != nil {
					return err
				}
				list.Results = slices.DeleteFunc(list.Results, func(r bench.Result) bool { return r.Order != o.ID })
				if len(list.Results) > 0 {
					// Judged against the fleet as the listing does.
					latest, err := cl.BenchResults(ctx, api.BenchQuery{Node: node})
					if err != nil {
						return err
					}
					latest.Results = slices.DeleteFunc(latest.Results, func(r bench.Result) bool { return r.Order != o.ID })
					return c.printBenchResults(latest)
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("%w: no figures from %s within %s (is its agent running and the node cordoned?)", gpufleet.ErrUnavailable, node, timeout)
				case <-time.After(time.Second):
				}
			}
		},
	}
	cmd.Flags().StringVar(&gpus, "gpus", "all", "GPUs to measure: all, or indexes such as 0,1")
	cmd.Flags().StringVar(&tests, "tests", "all", "tests to run: all (the level's), or copy, gemm, h2d, p2p, allreduce, memory, stress")
	cmd.Flags().StringVar(&level, "level", "", "quick (the agent's set, the default), medium (full sizes, every p2p pair, memory patterns) or long (medium and 5 min of sustained stress, power and temperature watched), as DCGM diag's levels (docs/BENCH.md#levels)")
	cmd.Flags().BoolVar(&full, "full", false, "the full sizes of the quick level's tests (--level medium adds the memory patterns)")
	cmd.Flags().BoolVar(&wait, "wait", true, "wait for the figures and print them")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long --wait waits")
	return cmd
}

// newBenchResultsCmd is `gpufleet bench results`.
func newBenchResultsCmd(c *clientEnv) *cobra.Command {
	var q api.BenchQuery
	cmd := &cobra.Command{
		Use:   "results [--node N] [--gpu-model M] [--history]",
		Short: "Benchmark figures per GPU against the spec and its model's fleet median",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			list, err := cl.BenchResults(cmd.Context(), q)
			if err != nil {
				return err
			}
			return c.printBenchResults(list)
		},
	}
	cmd.Flags().StringVar(&q.Node, "node", "", "only this node")
	cmd.Flags().StringVar(&q.GPUModel, "gpu-model", "", "only GPUs of this catalog model")
	cmd.Flags().BoolVar(&q.History, "history", false, "every figure ever measured, not only each GPU's newest")
	cmd.Flags().IntVar(&q.Limit, "limit", 0, "at most this many figures, newest first (0: all)")
	return cmd
}

func (c *clientEnv) printBenchResults(list api.BenchResultList) error {
	if c.output == outputJSON {
		return writeJSON(c.stdout, list)
	}
	if len(list.Results) == 0 {
		fmt.Fprintln(c.stdout, "no benchmark figures yet (agents measure when a node joins and when it is validated; gpufleet bench run NODE)")
		return nil
	}
	t := newTable(c.stdout, "NODE", "GPU", "MODEL", "FIGURE", "MEASURED", "SPEC", "RATIO", "FLEET MEDIAN", "OF MEDIAN", "VERDICT", "WHEN", "WHY")
	for _, r := range list.Results {
		median, frac, verdict := judgement(r.Figure, r.Fleet)
		t.row(r.Node, figureWhere(r.Figure), r.Model, r.Name, bench.Human(r.Value, r.Unit), specText(r.Figure), num(r.Ratio, 2),
			median, frac, verdict, r.At.Local().Format("2006-01-02 15:04:05"), string(r.Trigger))
	}
	return t.flush()
}

// judgement is a figure's fleet median (with its peers), its fraction of
// it and the verdict, as the tables show them.
func judgement(f bench.Figure, c *bench.Comparison) (median, frac, verdict string) {
	median, frac, verdict = "-", "-", "-"
	if c == nil {
		return
	}
	if c.Peers > 0 {
		median = fmt.Sprintf("%s (%d)", bench.Human(c.Median, f.Unit), c.Peers)
	}
	frac = num(c.Fraction, 2)
	switch {
	case f.Failed() != "":
		verdict = "FAILED: " + f.Failed()
	case c.Fraction == nil:
		verdict = "no baseline"
	case c.Degraded:
		verdict = fmt.Sprintf("DEGRADED (< %.2f)", c.Gate)
	default:
		verdict = "ok"
	}
	return
}

// newBenchAllReduceCmd is `gpufleet bench allreduce`: NCCL's all-reduce
// across cordoned nodes, every GPU a rank, judged against the fleet's
// other runs of the same shape.
func newBenchAllReduceCmd(c *clientEnv) *cobra.Command {
	var (
		rack, domain, level string
		wait                bool
		timeout             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "allreduce (NODE NODE... | --rack R | --nvlink-domain D) [--level quick|medium] [--wait]",
		Short: "Run an all-reduce across cordoned nodes, every GPU a rank, and judge it against the fleet's runs of the same shape (admin)",
		Long: `Run an all-reduce across nodes, as nccl-tests' all_reduce_perf across hosts:
every GPU of every node is a rank, over the network between nodes or the
NVLink fabric of a multi-node NVLink domain. The nodes must be cordoned (or in
repair), of one GPU model and size. The figure (bus bandwidth) is stored on
every member and judged against the median of the other runs of the same
shape (nodes x GPUs, fabric, model); under the gate every member turns
degraded. Measure pairs of nodes to find which one is slow
(docs/BENCH.md#across-nodes).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.AllReduceBenchRequest{Nodes: args, Rack: rack, NVLinkDomain: domain}
			if level != "" {
				l, err := bench.ParseLevel(level)
				if err != nil {
					return usageErr("--level: %v", err)
				}
				req.Level = l
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			rep, err := cl.StartAllReduceBench(cmd.Context(), req)
			if err != nil {
				return err
			}
			if !wait {
				if c.output == outputJSON {
					return writeJSON(c.stdout, rep)
				}
				fmt.Fprintf(c.stdout, "all-reduce %s across %s started; gpufleet bench results shows its figure\n", rep.ID, strings.Join(rep.Nodes, ", "))
				return nil
			}
			fmt.Fprintf(c.stderr, "all-reduce %s across %d nodes (%s) started; waiting for every member\n", rep.ID, len(rep.Nodes), strings.Join(rep.Nodes, ", "))
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			for rep.State == bench.GroupRendezvous || rep.State == bench.GroupRunning {
				select {
				case <-ctx.Done():
					return fmt.Errorf("%w: all-reduce %s still %s after %s (%d of %d members reported): gpufleet bench results shows it once done",
						gpufleet.ErrUnavailable, rep.ID, rep.State, timeout, len(rep.Reported), len(rep.Nodes))
				case <-time.After(500 * time.Millisecond):
				}
				if rep, err = cl.AllReduceBench(ctx, rep.ID); err != nil {
					return err
				}
			}
			if c.output == outputJSON {
				if err := writeJSON(c.stdout, rep); err != nil {
					return err
				}
			} else if err := c.printAllReduce(rep); err != nil {
				return err
			}
			if rep.State == bench.GroupFailed {
				return fmt.Errorf("all-reduce %s failed: %s", rep.ID, rep.Detail)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rack, "rack", "", "every node of this rack")
	cmd.Flags().StringVar(&domain, "nvlink-domain", "", "every node of this NVLink domain (over its NVLink fabric)")
	cmd.Flags().StringVar(&level, "level", "", "quick (small sizes, 5 runs; the default) or medium (full sizes, 20 runs)")
	cmd.Flags().BoolVar(&wait, "wait", true, "wait for the figure and print it")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long --wait waits")
	return cmd
}

// printAllReduce is the table of one all-reduce across nodes.
func (c *clientEnv) printAllReduce(rep bench.GroupReport) error {
	t := newTable(c.stdout, "ID", "STATE", "NODES", "GPU MODEL", "SHAPE", "FABRIC", "BUSBW", "FLEET MEDIAN", "OF MEDIAN", "VERDICT")
	busbw, median, frac, verdict := "-", "-", "-", rep.Detail
	if rep.Figure != nil {
		busbw = bench.Human(rep.Figure.Value, rep.Figure.Unit)
		median, frac, verdict = judgement(*rep.Figure, rep.Fleet)
	}
	t.row(rep.ID, string(rep.State), strings.Join(rep.Nodes, ","), rep.GPUModel, fmt.Sprintf("%dx%d", len(rep.Nodes), rep.GPUsPerNode),
		string(rep.Fabric), busbw, median, frac, verdict)
	return t.flush()
}

// newBenchWorkloadCmd is `gpufleet bench workload`: the user's command on
// several GPU models, through the scheduler, compared.
func newBenchWorkloadCmd(c *clientEnv) *cobra.Command {
	var (
		models, metric, unit, modelName, team, precision, simLoad string
		env                                                       []string
		gpus                                                      int
		noWait                                                    bool
		timeLimit, timeout                                        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "workload --gpu-models M1,M2,... [--gpus N] --metric 'REGEX' [--unit tokens] [--model NAME] -- COMMAND [ARGS...]",
		Short: "Run your own command on several GPU models and compare throughput, cost per unit, energy per unit and what bounds it",
		Long: `Submit the same command as a job to each GPU model through the scheduler.
The command prints its throughput; --metric is a regular expression whose
first group is that number, in --unit per second (the largest value it
printed counts). Each job's figure is joined with its GPUs' telemetry (SM,
tensor and DRAM activity, power, energy) and priced at the catalog's rate;
with --model the planner's prediction for the same model stands beside it.
The report is stored (gpufleet bench workloads ID) and shown in the
dashboard.

While a job waits, it says why and when it should start. It gives up,
printing the report so far and what to do, when a job can never start on
this fleet (that job is cancelled; exit 4) or when --timeout passes with
jobs still waiting (they stay queued; exit 1). Ctrl-C leaves the jobs
running.`,
		Example: `  gpufleet bench workload --gpu-models a100-sxm-80gb,h100-sxm-80gb,l4 --gpus 1 \
      --metric 'throughput: ([0-9.]+) tokens/s' --unit tokens --model llama-3-8b -- python serve_bench.py`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 {
				return usageErr("put the command after --, as in gpufleet bench workload --gpu-models l4 --metric 'tok/s=([0-9.]+)' -- ./bench.sh")
			}
			if metric == "" {
				return usageErr("--metric: required: a regular expression whose first group is the throughput the command prints")
			}
			req := api.WorkloadBenchRequest{GPUModels: splitComma(models), Job: gpufleet.JobRequest{
				Team: team, Command: args, Resources: gpufleet.Resources{GPUs: gpus},
				Work: &gpufleet.WorkCounter{Metric: metric, Unit: unit}}}
			var err error
			if req.Job.Env, err = parseKV(env); err != nil {
				return fmt.Errorf("--env: %w", err)
			}
			req.Job.SimLoad = gpufleet.SimLoad(simLoad)
			if timeLimit > 0 {
				req.Job.TimeLimit = gpufleet.Duration(timeLimit)
			}
			if modelName != "" {
				req.Job.Model = &gpufleet.ModelRequest{Name: modelName, Precision: precision}
			}
			if len(req.GPUModels) == 0 {
				return usageErr("--gpu-models: required: the catalog models to compare, comma-separated")
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			rep, err := cl.StartWorkloadBench(cmd.Context(), req)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stderr, "workload bench %s: %d jobs queued\n", rep.ID, len(rep.Jobs))
			if !noWait {
				var gaveUp error
				if rep, gaveUp = c.waitWorkload(cmd.Context(), cl, rep, timeout); gaveUp != nil {
					if cmd.Context().Err() == nil {
						if err := c.printWorkload(rep); err != nil {
							return err
						}
					}
					return gaveUp
				}
			}
			return c.printWorkload(rep)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&models, "gpu-models", "", "catalog GPU models to compare, comma-separated")
	fs.IntVar(&gpus, "gpus", 1, "GPUs per job")
	fs.StringVar(&metric, "metric", "", "regular expression whose first group is the throughput the command prints, per second")
	fs.StringVar(&unit, "unit", "units", "what the throughput counts (tokens, samples, images)")
	fs.StringVar(&modelName, "model", "", "the model the command runs (a planner name such as llama-3-8b), for the planner's prediction")
	fs.StringVar(&precision, "precision", "", "with --model: its weights' precision (default bf16)")
	fs.StringVar(&team, "team", "", "team to run as (admins must name one)")
	durationFlag(fs, &timeLimit, "time-limit", 0, "each job's time limit")
	fs.StringArrayVar(&env, "env", nil, "KEY=VALUE in each job's environment (repeatable); BENCH_GPU_MODEL is set to the model it runs on")
	fs.StringVar(&simLoad, "sim-load", "", "on simulated GPUs: the load the job puts on them (compute, memory, idle)")
	fs.BoolVar(&noWait, "no-wait", false, "print the queued report and return instead of waiting for the jobs")
	durationFlag(fs, &timeout, "timeout", 30*time.Minute, "give up waiting after this long, leaving the jobs queued (0: wait for ever)")
	return cmd
}

// waitWorkload polls a workload bench until every job ended, saying on
// stderr when a job's state changes and, for a job that waits, why and
// until when (its queue entry, or the node that has not started it yet),
// whenever that changes. Interrupted, it says what it was waiting for and
// that the jobs go on. It gives up on a job that can never start on the
// fleet (cancelling it, then returning an unsatisfiable error once the
// others ended) and, after timeout (0: never), on every job still
// waiting, saying why each waits and what to do.
func (c *clientEnv) waitWorkload(ctx context.Context, cl *api.Client, rep bench.WorkloadReport, timeout time.Duration) (bench.WorkloadReport, error) {
	seen, why, words, gaveUp := map[string]string{}, map[string]string{}, map[string]string{}, map[string]bool{}
	var never []string
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		var waiting []string
		for _, r := range rep.Rows {
			if seen[r.GPUModel] != r.State {
				seen[r.GPUModel] = r.State
				fmt.Fprintf(c.stderr, "  %s: job %s %s\n", r.GPUModel, r.JobID, r.State)
			}
			if st := gpufleet.JobState(r.State); st == gpufleet.JobQueued || st == gpufleet.JobScheduled {
				// Said again only when the reason's kind changes: its
				// figures (a rack's draw) move every poll.
				key, w, q := c.waitingFor(ctx, cl, r.JobID, st)
				if w != "" && key != why[r.GPUModel] {
					fmt.Fprintf(c.stderr, "  %s: job %s %s\n", r.GPUModel, r.JobID, w)
					why[r.GPUModel] = key
				}
				if w != "" {
					words[r.GPUModel] = w
				}
				if q != nil && q.Explanation.CanNeverStart() {
					if gaveUp[r.JobID] {
						continue // its cancel is on its way
					}
					if _, err := cl.CancelJob(ctx, r.JobID); err == nil {
						gaveUp[r.JobID] = true
						never = append(never, fmt.Sprintf("%s (job %s, cancelled): %s: add capacity of %s, or leave it out of --gpu-models", r.GPUModel, r.JobID, q.Reason, r.GPUModel))
						fmt.Fprintf(c.stderr, "  %s: job %s can never start on this fleet: cancelled\n", r.GPUModel, r.JobID)
					}
					continue
				}
				waiting = append(waiting, fmt.Sprintf("%s (%s, %s)", r.GPUModel, r.JobID, r.State))
			}
		}
		if rep.Done || (len(waiting) == 0 && len(never) > 0 && !running(rep)) {
			if len(never) > 0 {
				return rep, fmt.Errorf("%w: workload bench %s gave up on %s", gpufleet.ErrUnsatisfiable, rep.ID, strings.Join(never, "; "))
			}
			return rep, nil
		}
		select {
		case <-deadline:
			var lines []string
			for _, r := range rep.Rows {
				if st := gpufleet.JobState(r.State); st == gpufleet.JobQueued || st == gpufleet.JobScheduled {
					lines = append(lines, fmt.Sprintf("%s (job %s) %s", r.GPUModel, r.JobID, orDash(words[r.GPUModel])))
				}
			}
			err := fmt.Errorf("workload bench %s: gave up after %s with jobs still waiting: %s; they stay queued: gpufleet bench workloads %s shows the report once they ran, gpufleet cancel JOB drops one, --timeout 0 waits for ever",
				rep.ID, gpufleet.FormatDuration(timeout), strings.Join(lines, "; "), rep.ID)
			if len(never) > 0 {
				err = fmt.Errorf("%w; it also gave up on %s", err, strings.Join(never, "; "))
			}
			return rep, err
		case <-ctx.Done():
			if len(waiting) == 0 {
				waiting = []string{"the last figures"}
			}
			return rep, fmt.Errorf("interrupted while waiting for %s; the jobs go on: gpufleet bench workloads %s shows the report: %w",
				strings.Join(waiting, ", "), rep.ID, ctx.Err())
		case <-time.After(2 * time.Second):
		}
		next, err := cl.WorkloadBench(ctx, rep.ID)
		if err != nil {
			return rep, err
		}
		rep = next
	}
}

// waitingFor says why a workload bench's job has not started, with a key
// that changes only with the kind of reason: a queued job's reason and
// estimated start, a scheduled one's node that has not started it yet;
// "" when the job cannot be read (the next poll tries again).
func (c *clientEnv) waitingFor(ctx context.Context, cl *api.Client, id string, st gpufleet.JobState) (key, words string, q *gpufleet.QueueEntry) {
	j, err := cl.Job(ctx, id)
	if err != nil {
		return "", "", nil
	}
	if st == gpufleet.JobScheduled {
		for _, a := range j.Attempts {
			if !a.State.Terminal() {
				return "scheduled " + a.Node, fmt.Sprintf("placed on %s, waiting for its agent to start it", a.Node), nil
			}
		}
		return "", "", nil
	}
	if q := j.Queue; q != nil {
		return "queued " + q.ReasonCode, fmt.Sprintf("waits: %s (starts %s)", orDash(q.Reason), c.eta(*q)), q
	}
	return "", "", nil
}

// running reports whether any job of the report is placed or running.
func running(rep bench.WorkloadReport) bool {
	return slices.ContainsFunc(rep.Rows, func(r bench.WorkloadRow) bool {
		st := gpufleet.JobState(r.State)
		return st == gpufleet.JobScheduled || st == gpufleet.JobRunning
	})
}

func (c *clientEnv) printWorkload(rep bench.WorkloadReport) error {
	if c.output == outputJSON {
		return writeJSON(c.stdout, rep)
	}
	unit := rep.Unit
	fmt.Fprintf(c.stdout, "workload bench %s: %s on %d GPU(s) each; throughput from %s\n", rep.ID, strings.Join(rep.Command, " "), rep.GPUs, gpufleet.Quote(rep.Metric))
	t := newTable(c.stdout, "GPU MODEL", "STATE", unit+"/s", "$/M "+unit, "J/"+strings.TrimSuffix(unit, "s"), "SM", "TENSOR", "DRAM", "W/GPU", "BOUND", "PLANNER", "MEASURED/PLANNER")
	for _, r := range rep.Rows {
		t.row(r.GPUModel, r.State, num(r.Throughput, 1), money(r.USDPerMillion), num(r.JoulesPerUnit, 3), pct(r.SMActivity), pct(r.TensorActivity),
			pct(r.DRAMActivity), num(r.PowerWatts, 0), r.Bound, num(r.Predicted, 1), num(r.Ratio, 2))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		if r.Note != "" {
			fmt.Fprintf(c.stdout, "  %s: %s\n", r.GPUModel, r.Note)
		}
	}
	return nil
}

// newBenchWorkloadsCmd is `gpufleet bench workloads [ID]`.
func newBenchWorkloadsCmd(c *clientEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "workloads [ID]",
		Short: "List workload benches, or show one's report",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				rep, err := cl.WorkloadBench(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return c.printWorkload(rep)
			}
			all, err := cl.WorkloadBenches(cmd.Context())
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, api.WorkloadBenchList{Workloads: all})
			}
			t := newTable(c.stdout, "ID", "TEAM", "CREATED", "GPU MODELS", "DONE", "COMMAND")
			for _, w := range all {
				t.row(w.ID, w.Team, w.CreatedAt.Local().Format("2006-01-02 15:04"), strings.Join(w.GPUModels, ","), strconv.FormatBool(w.Done), strings.Join(w.Command, " "))
			}
			return t.flush()
		},
	}
}

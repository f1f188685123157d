package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/model"
	"github.com/gpufleet/gpufleet/planner"
)

// planFlags are the flags of `plan`, shared with `submit --model`.
type planFlags struct {
	model, mode, gpu, precision, kvPrecision, batch   string
	optimizer, recompute, tokens                      string
	gpus, inputTokens, outputTokens, seq              int
	microBatch, globalBatch, zero, tp, pp, dp, cp, ep int
	latencyTargetMS                                   float64
	fp32GradAccum                                     bool
	engine, memoryHeadroom, scenario                  string
	maxModelLen, maxNumBatchedTokens, maxNumSeqs      int
	tpotTargetMS, ttftTargetMS                        float64
	// Facility check (plan only).
	rackPower, rackCooling string
	rackUnits              int
	// checkpointIndex is a safetensors index or file (plan only).
	checkpointIndex string
}

func (p *planFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&p.model, "model", "", "model: a config.json path or a built-in name ("+strings.Join(model.BuiltinNames(), ", ")+")")
	fs.StringVar(&p.mode, "mode", "inference", "inference or training")
	fs.StringVar(&p.gpu, "gpu", "", "candidate GPU ids, comma-separated (default: the whole catalog)")
	fs.IntVar(&p.gpus, "gpus", 0, "total GPUs per candidate (default: the smallest count that fits)")
	fs.StringVar(&p.precision, "precision", "bf16", "weight (inference) or compute (training) precision: fp32, bf16, fp16, fp8, int8, int4, fp4")
	fs.StringVar(&p.kvPrecision, "kv-precision", "bf16", "KV-cache precision: bf16, fp16, fp8, int8")
	fs.StringVar(&p.batch, "batch", "", "concurrent sequences per replica, or max (default: the largest that fits, at most 256)")
	fs.IntVar(&p.inputTokens, "input-tokens", 1024, "prompt tokens per sequence")
	fs.IntVar(&p.outputTokens, "output-tokens", 256, "generated tokens per sequence")
	fs.IntVar(&p.seq, "seq", 4096, "training sequence length")
	fs.IntVar(&p.microBatch, "micro-batch", 1, "training sequences per micro-batch")
	fs.IntVar(&p.globalBatch, "global-batch", 1024, "training sequences per optimizer step")
	fs.StringVar(&p.tokens, "tokens", "1T", "tokens to train on (1T, 300B, 2e12)")
	fs.StringVar(&p.optimizer, "optimizer", "adamw", "adamw, adamw-8bit or sgd")
	fs.BoolVar(&p.fp32GradAccum, "fp32-grad-accum", false, "keep fp32 gradients (Megatron's default): 18 bytes per parameter with adamw")
	fs.IntVar(&p.zero, "zero", 0, "ZeRO stage 0-3")
	fs.StringVar(&p.recompute, "recompute", "auto", "activation recompute: none, selective, full, or auto (selective where it fits, else full)")
	fs.IntVar(&p.tp, "tp", 0, "tensor parallelism (default: chosen)")
	fs.IntVar(&p.pp, "pp", 0, "pipeline parallelism (default: chosen)")
	fs.IntVar(&p.dp, "dp", 0, "data parallelism, replicas (default: chosen)")
	fs.IntVar(&p.ep, "ep", 0, "expert parallelism of a mixture of experts: training, experts split over tp x ep GPUs (ep divides dp); inference, whole experts over ep GPUs, a multiple of tp (default: chosen)")
	fs.IntVar(&p.cp, "cp", 0, "context parallelism of a training run: each sequence split over this many GPUs (default: chosen for sequences of 8192 tokens or more)")
	fs.Float64Var(&p.latencyTargetMS, "latency-target-ms", 0, "rank by the cheapest candidate whose time per output token meets this")
	fs.StringVar(&p.scenario, "scenario", "", "offline (the largest batch that fits: throughput) or server (the largest batch meeting --tpot-target-ms and --ttft-target-ms)")
	fs.Float64Var(&p.tpotTargetMS, "tpot-target-ms", 0, "time per output token the plan must meet (server scenario; the same as --latency-target-ms)")
	fs.Float64Var(&p.ttftTargetMS, "ttft-target-ms", 0, "time to first token the plan must meet (server scenario)")
	fs.StringVar(&p.engine, "engine", "vllm", "serving engine whose memory rules size the plan: vllm, trtllm or sglang, optionally @ and a release (vllm@0.6; bare: the newest profile)")
	fs.IntVar(&p.maxModelLen, "max-model-len", 0, "the engine's longest sequence (default: the model's max_position_embeddings); the KV cache must hold one, and engines without chunked prefill size their activations on it")
	fs.IntVar(&p.maxNumSeqs, "max-num-seqs", 0, "the engine's max_num_seqs: the most sequences at once, and vLLM's sampler warm-up (default: the engine's)")
	fs.IntVar(&p.maxNumBatchedTokens, "max-num-batched-tokens", 0, "tokens of one forward pass: vLLM's max_num_batched_tokens, TensorRT-LLM's max_num_tokens, SGLang's chunked_prefill_size (default: the engine's)")
	fs.StringVar(&p.memoryHeadroom, "memory-headroom", "", "share of each GPU's memory the engine leaves free, such as 10% or 0.15 (default: the engine's own cap)")
}

// loadModel reads --model as a file when one exists at that path, else as a
// built-in name.
func loadModel(ref string) (*model.Config, error) {
	if ref == "" {
		return nil, usageErr("--model: required (a config.json path or one of %s)", strings.Join(model.BuiltinNames(), ", "))
	}
	data, err := os.ReadFile(ref)
	switch {
	case err == nil:
		name := strings.TrimSuffix(filepath.Base(ref), filepath.Ext(ref))
		if name == "config" {
			name = filepath.Base(filepath.Dir(ref))
		}
		cfg, err := model.Parse(name, data)
		if err != nil {
			return nil, fmt.Errorf("--model %s: %w", ref, err)
		}
		return cfg, nil
	case errors.Is(err, fs.ErrNotExist):
		cfg, berr := model.Builtin(ref)
		if berr != nil {
			return nil, fmt.Errorf("--model %q is neither a file nor a built-in model: %w", ref, berr)
		}
		return cfg, nil
	}
	return nil, fmt.Errorf("--model: %w", err)
}

// spec is the flags as the planner's words.
func (p *planFlags) spec() planner.Spec {
	n := strconv.Itoa
	f := func(v float64) string {
		if v == 0 {
			return ""
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	s := planner.Spec{Mode: p.mode, GPU: p.gpu, GPUs: n(p.gpus), Precision: p.precision, KVPrecision: p.kvPrecision,
		Engine: p.engine, Batch: p.batch, InputTokens: n(p.inputTokens), OutputTokens: n(p.outputTokens),
		Scenario: p.scenario, LatencyTargetMS: f(p.latencyTargetMS), TPOTTargetMS: f(p.tpotTargetMS), TTFTTargetMS: f(p.ttftTargetMS),
		MemoryHeadroom: p.memoryHeadroom, Seq: n(p.seq), MicroBatch: n(p.microBatch), GlobalBatch: n(p.globalBatch),
		Tokens: p.tokens, Optimizer: p.optimizer, FP32GradAccum: p.fp32GradAccum, ZeRO: n(p.zero), Recompute: p.recompute,
		TP: n(p.tp), PP: n(p.pp), DP: n(p.dp), CP: n(p.cp), EP: n(p.ep),
		RackPower: p.rackPower, RackCooling: p.rackCooling, RackUnits: n(p.rackUnits),
		MaxModelLen: n(p.maxModelLen), MaxNumBatchedTokens: n(p.maxNumBatchedTokens), MaxNumSeqs: n(p.maxNumSeqs)}
	return s
}

// flagName names a planner field as its flag.
func flagName(key string) string { return "--" + strings.ReplaceAll(key, "_", "-") }

// request turns the flags into a planner request over the catalog; a
// value the planner's words refuse is a usage error naming its flag.
func (p *planFlags) request(cat *catalog.Catalog) (planner.Request, error) {
	cfg, err := loadModel(p.model)
	if err != nil {
		return planner.Request{}, err
	}
	r, err := p.spec().Request(cfg, cat, flagName)
	return r, flagErr(err)
}

// flagErr makes a value a parser refused (gpufleet.ValueError) a usage
// error: a flag value refused before any request.
func flagErr(err error) error {
	var ve *gpufleet.ValueError
	if errors.As(err, &ve) {
		return &usageError{err}
	}
	return err
}

func newPlanCmd(e *env) *cobra.Command {
	var pf planFlags
	var calibration string
	cmd := &cobra.Command{
		Use:   "plan --model FILE|NAME [--mode inference|training] [flags]",
		Short: "Will this model fit, on which GPUs, how many, how fast, at what cost and energy",
		Long: `Plan a model against the hardware catalog before anything is bought or queued.

For each candidate GPU the planner finds the smallest layout that fits (or the
best one for --gpus N): tensor parallelism inside the NVLink domain first, then
pipeline stages, then data-parallel replicas. It reports the memory per GPU
(weights, KV cache, activations, gradients, optimizer state, runtime
overhead), whether the precision is native, what bounds decode and prefill
(compute, memory or interconnect), throughput, latency, cost and energy, and
ranks candidates by cost per output token (or the cheapest that meets
--latency-target-ms). See docs/PLANNER.md for the model and docs/ACCURACY.md
for how well it predicts published measurements.

With --rack-power, --rack-cooling or --rack-units it also checks the facility:
how many nodes of each candidate a rack holds at rated draw and at the planned
work's expected draw, how many racks the plan needs, and the power and cooling
in total; a note warns when a rack cannot run the hardware at rated
performance. docs/POWER.md has the model and its sources.

A config.json with a quantization_config (FP8, compressed-tensors, AWQ,
GPTQ, bitsandbytes, MXFP4, NVFP4) plans with the weights as the checkpoint
stores them, module by module; --precision then sets only the compute
precision (without it the plan computes in the checkpoint's format). With
--checkpoint-index the weights are the safetensors checkpoint's own bytes.
docs/PLANNER.md, "Checkpoint-exact weights", has the rules.

With --calibration fleet it asks the server (GPUFLEET_SERVER, --context) for
the fleet's newest benchmark figures and plans each GPU model the fleet
measured with its measured memory bandwidth and matrix product rates
instead of the built-in efficiencies, saying so in the candidate's notes
(docs/BENCH.md).`,
		Example: `  gpufleet plan --model llama-3.1-70b
  gpufleet plan --model llama-3.1-8b --gpu l4,a10g,h100-sxm-80gb --batch max
  gpufleet plan --model mixtral-8x7b-v0.1 --precision fp8 --latency-target-ms 30
  gpufleet plan --model llama-3.1-70b --mode training --gpus 64 --zero 1 --tokens 2T
  gpufleet plan --model ./config.json --gpu h100-sxm-80gb -o json
  gpufleet plan --model ./config.json --checkpoint-index ./model.safetensors.index.json --gpu h200-sxm-141gb --gpus 8
  gpufleet plan --model llama-3.1-405b --precision fp8 --rack-power 17.3kW --rack-cooling 20kW --rack-units 42`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, err := e.loadCatalog()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("precision") {
				// Not given: the planner's default, the checkpoint's own
				// format when its config describes one (else bf16).
				pf.precision = ""
			}
			req, err := pf.request(cat)
			if err != nil {
				return err
			}
			if pf.checkpointIndex != "" {
				if req.Checkpoint, err = readCheckpoint(pf.checkpointIndex, req.Model); err != nil {
					return fmt.Errorf("--checkpoint-index %s: %w", pf.checkpointIndex, err)
				}
			}
			switch calibration {
			case "builtin":
			case "fleet":
				c := &clientEnv{env: e, now: time.Now}
				cl, err := c.client(cmd)
				if err != nil {
					return fmt.Errorf("--calibration fleet: %w", err)
				}
				list, err := cl.BenchResults(cmd.Context(), api.BenchQuery{})
				if err != nil {
					return fmt.Errorf("--calibration fleet: %w", err)
				}
				req.Calibration = bench.Calibration(list.Results)
				if len(req.Calibration) == 0 {
					fmt.Fprintln(e.stderr, "gpufleet plan: the fleet has no benchmark figures yet; planning with the built-in efficiencies")
				}
			default:
				return usageErr("--calibration %s: expected builtin or fleet", gpufleet.Quote(calibration))
			}
			plan, err := planner.Run(req, cat.All())
			if err != nil {
				return err
			}
			if e.output == outputJSON {
				return writeJSON(e.stdout, plan)
			}
			return printPlan(e, plan)
		},
	}
	pf.bind(cmd.Flags())
	cmd.Flags().StringVar(&calibration, "calibration", "builtin", "builtin (the planner's sourced efficiencies) or fleet (each GPU model's measured figures from the server's benchmarks)")
	cmd.Flags().StringVar(&pf.rackPower, "rack-power", "", "facility check: a rack's power budget (17.3kW): nodes per rack, racks needed, power in total")
	cmd.Flags().StringVar(&pf.rackCooling, "rack-cooling", "", "facility check: the heat a rack's cooling removes (20kW)")
	cmd.Flags().IntVar(&pf.rackUnits, "rack-units", 0, "facility check: rack units for nodes (42)")
	cmd.Flags().StringVar(&pf.checkpointIndex, "checkpoint-index", "", "the model's model.safetensors.index.json (or one .safetensors file): inference weights from its total_size, placed on the layers from the headers of the shards found next to it")
	_ = cmd.RegisterFlagCompletionFunc("model", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return model.BuiltinNames(), cobra.ShellCompDirectiveDefault
	})
	_ = cmd.RegisterFlagCompletionFunc("mode", fixedCompletion("inference", "training"))
	_ = cmd.RegisterFlagCompletionFunc("optimizer", fixedCompletion("adamw", "adamw-8bit", "sgd"))
	_ = cmd.RegisterFlagCompletionFunc("recompute", fixedCompletion("none", "selective", "full"))
	_ = cmd.RegisterFlagCompletionFunc("precision", fixedCompletion("bf16", "fp16", "fp8", "int8", "int4", "fp4", "fp32"))
	_ = cmd.RegisterFlagCompletionFunc("gpu", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		var ids []string
		for _, g := range catalog.Default().All() {
			ids = append(ids, g.ID)
		}
		return ids, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func fixedCompletion(vals ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return vals, cobra.ShellCompDirectiveNoFileComp
	}
}

func printPlan(e *env, p *planner.Plan) error {
	w := e.stdout
	m := p.Model
	fmt.Fprintf(w, "%s (%s): %s parameters, %s active per token, %d layers, hidden %d, KV cache %s per token (%s)\n\n",
		m.Name, m.ModelType, humanCount(m.ParamsTotal), humanCount(m.ParamsActive), m.Layers, m.HiddenSize,
		fmtBytes(float64(m.KVCacheBytesPerToken)), p.Workload.KVPrecision)
	var t *table
	if p.Mode == planner.Training {
		t = newTable(w, "GPU", "GPUS", "TPxPPxDP", "FITS", "MEM/GPU", "PRECISION", "BOUND", "TOKENS/S", "MFU", "STEP", "TRAIN TIME", "COST", "ENERGY")
	} else {
		t = newTable(w, "GPU", "GPUS", "TPxPPxDP", "FITS", "MEM/GPU", "PRECISION", "DECODE", "PREFILL", "BATCH(MAX)", "TOKENS/S", "TTFT", "TPOT", "$/M TOKENS", "J/TOKEN")
	}
	for _, c := range p.Candidates {
		layout := c.Layout("x")
		mem := fmt.Sprintf("%s/%s", fmtBytes(float64(c.MemoryPerGPU.TotalBytes)), fmtBytes(float64(c.MemoryPerGPU.CapacityBytes)))
		prec := "native"
		if c.PrecisionFallback != nil {
			prec = string(*c.PrecisionFallback)
		}
		fits := "no"
		if c.Fits {
			fits = "yes"
		}
		if p.Mode == planner.Training {
			t.row(c.GPU, strconv.Itoa(c.GPUs), layout, fits, mem, prec, bound(c.Bound),
				num(c.TrainingTokensPerS, 0), pct(c.MFU), secs(c.StepTimeS), days(c.TrainTimeS), fmtUSD(c.TrainCostUSD), joules(c.TrainEnergyJoules))
			continue
		}
		batch := "-"
		if c.Batch != nil && c.MaxBatch != nil {
			batch = fmt.Sprintf("%d(%d)", *c.Batch, *c.MaxBatch)
		}
		t.row(c.GPU, strconv.Itoa(c.GPUs), layout, fits, mem, prec, bound(c.Bound), bound(c.PrefillBound), batch,
			num(c.OutputTokensPerS, 0), secs(c.TimeToFirstTokenS), secs(c.TimePerOutputTokenS), money(c.CostPerMillionTokensUSD), num(c.JoulesPerToken, 2))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if err := printFacility(w, p); err != nil {
		return err
	}
	if r := p.Recommendation; r != nil {
		fmt.Fprintf(w, "\nRecommendation: %d x %s, scale %s.\n  %s.\n", r.GPUs, r.GPU, r.Scaling, r.Reason)
		for _, c := range p.Candidates {
			if c.GPU == r.GPU && len(c.Notes) > 0 {
				fmt.Fprintln(w, "Notes on "+c.GPU+":")
				for _, n := range c.Notes {
					fmt.Fprintln(w, "  - "+n)
				}
			}
		}
	} else {
		fmt.Fprintln(w, "\nNo candidate fits. Try more GPUs (--gpus), a smaller precision (--precision fp8), or a shorter context.")
	}
	fmt.Fprintln(w, "\nMEM/GPU is the most loaded GPU; TTFT and TPOT are time to first token and per output token; -o json has every field and note.")
	return nil
}

// printFacility prints the facility check of the candidates that fit,
// when the plan was given a rack.
func printFacility(w io.Writer, p *planner.Plan) error {
	var t *table
	for _, c := range p.Candidates {
		f := c.Facility
		if !c.Fits || f == nil || f.NodesPerRackRated == nil {
			continue
		}
		if t == nil {
			fmt.Fprintln(w, "\nFacility check (a rack at rated draw, and at the expected draw of this work):")
			t = newTable(w, "GPU", "NODES", "NODE RATED", "NODE EXPECTED", "NODE U", "PER RACK", "LIMITED BY", "RACKS", "POWER RATED", "POWER EXPECTED")
		}
		racks := "-"
		if f.Racks != nil {
			racks = strconv.Itoa(*f.Racks)
		}
		t.row(c.GPU, fmt.Sprintf("%d x %d GPUs", f.Nodes, f.GPUsPerNode), gpufleet.Watts(f.RatedNodeWatts).Human(), gpufleet.Watts(f.ExpectedNodeWatts).Human(),
			strconv.Itoa(f.NodeRackUnits), fmt.Sprintf("%d/%d", *f.NodesPerRackRated, *f.NodesPerRackExpected), f.LimitedBy, racks,
			gpufleet.Watts(f.TotalRatedWatts).Human(), gpufleet.Watts(f.TotalExpectedWatts).Human())
	}
	if t == nil {
		return nil
	}
	return t.flush()
}

func humanCount(n int64) string {
	switch {
	case n >= 1e12:
		return trimFloat(float64(n)/1e12) + "T"
	case n >= 1e9:
		return trimFloat(float64(n)/1e9) + "B"
	case n >= 1e6:
		return trimFloat(float64(n)/1e6) + "M"
	}
	return strconv.FormatInt(n, 10)
}

func bound(b *planner.Bound) string {
	if b == nil {
		return "-"
	}
	return string(*b)
}

func num(v *float64, prec int) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}

func pct(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v*100, 'f', 1, 64) + "%"
}

func money(v *float64) string {
	if v == nil {
		return "-"
	}
	return "$" + strconv.FormatFloat(*v, 'f', 3, 64)
}

func secs(v *float64) string {
	if v == nil {
		return "-"
	}
	s := *v
	switch {
	case s < 1:
		return strconv.FormatFloat(s*1e3, 'f', 1, 64) + " ms"
	case s < 600:
		return strconv.FormatFloat(s, 'f', 2, 64) + " s"
	}
	return days(v)
}

func days(v *float64) string {
	if v == nil {
		return "-"
	}
	s := *v
	switch {
	case s < 3600:
		return strconv.FormatFloat(s/60, 'f', 1, 64) + " min"
	case s < 3*86400:
		return strconv.FormatFloat(s/3600, 'f', 1, 64) + " h"
	}
	return strconv.FormatFloat(s/86400, 'f', 1, 64) + " d"
}

func joules(v *float64) string {
	if v == nil {
		return "-"
	}
	j := *v
	switch {
	case j >= 3.6e9:
		return strconv.FormatFloat(j/3.6e9, 'f', 1, 64) + " MWh"
	case j >= 3.6e6:
		return strconv.FormatFloat(j/3.6e6, 'f', 1, 64) + " kWh"
	}
	return strconv.FormatFloat(j, 'f', 0, 64) + " J"
}

// readCheckpoint reads a safetensors checkpoint for the plan: an index
// (model.safetensors.index.json) and, when every shard it names sits next
// to it, the shards' headers (a real .safetensors file or a header-only
// one: only 8 bytes and the header are read); or one .safetensors file.
func readCheckpoint(path string, cfg *model.Config) (*model.Checkpoint, error) {
	dir := filepath.Dir(path)
	if strings.HasSuffix(path, ".safetensors") {
		tensors, err := readSafetensorsHeader(path)
		if err != nil {
			return nil, err
		}
		idx := &model.SafetensorsIndex{WeightMap: map[string]string{}}
		for _, t := range tensors {
			idx.TotalSize += t.Bytes
			idx.WeightMap[t.Name] = filepath.Base(path)
		}
		if idx.TotalSize == 0 {
			return nil, fmt.Errorf("%w: no tensors", gpufleet.ErrInvalid)
		}
		return model.NewCheckpoint(cfg, idx, tensors)
	}
	data, err := readBounded(path, model.MaxSafetensorsIndex)
	if err != nil {
		return nil, err
	}
	idx, err := model.ParseSafetensorsIndex(data)
	if err != nil {
		return nil, err
	}
	var headers []model.Tensor
	for _, shard := range idx.Shards() {
		t, err := readSafetensorsHeader(filepath.Join(dir, shard))
		if errors.Is(err, fs.ErrNotExist) {
			headers = nil // the total alone
			break
		}
		if err != nil {
			return nil, fmt.Errorf("shard %s: %w", shard, err)
		}
		headers = append(headers, t...)
	}
	return model.NewCheckpoint(cfg, idx, headers)
}

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", gpufleet.ErrInvalid, limit)
	}
	return data, nil
}

// readSafetensorsHeader reads the header of a safetensors file: its
// 8-byte length, then that many bytes, never the tensor data.
func readSafetensorsHeader(path string) ([]model.Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	prefix := make([]byte, 8)
	if _, err := io.ReadFull(f, prefix); err != nil {
		return nil, fmt.Errorf("%w: safetensors header: %v", gpufleet.ErrInvalid, err)
	}
	n, err := model.SafetensorsHeaderLen(prefix)
	if err != nil {
		return nil, err
	}
	data := make([]byte, 8+n)
	copy(data, prefix)
	if _, err := io.ReadFull(f, data[8:]); err != nil {
		return nil, fmt.Errorf("%w: safetensors header: %v", gpufleet.ErrInvalid, err)
	}
	return model.ParseSafetensorsHeader(data)
}

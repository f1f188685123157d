package planner

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
)

// Mode is what the model is planned for.
type Mode string

// Modes.
const (
	Inference Mode = "inference"
	Training  Mode = "training"
)

// ParseMode reads a mode, case-insensitively: inference or training. The
// CLI, the dashboard and admission read a request's mode with it.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case Inference, Training:
		return m, nil
	}
	return "", &gpufleet.ValueError{Field: "mode", Value: gpufleet.Quote(s), Want: "expected inference or training"}
}

// ParseBatch reads a batch as users give it: a positive number of
// concurrent sequences, "max" for the largest batch that fits, or empty
// for the default (0, false).
func ParseBatch(s string) (n int, batchMax bool, err error) {
	switch b := strings.ToLower(strings.TrimSpace(s)); b {
	case "":
		return 0, false, nil
	case "max":
		return 0, true, nil
	default:
		n, err := strconv.Atoi(b)
		if err != nil || n <= 0 || n > maxBatch {
			return 0, false, &gpufleet.ValueError{Field: "batch", Value: gpufleet.Quote(s), Want: fmt.Sprintf("expected 1 to %d or max", maxBatch)}
		}
		return n, false, nil
	}
}

// Format is a numeric format for weights or KV cache. It adds the
// weight-only format int4 to the catalog's compute precisions.
type Format string

// Formats the planner sizes.
const (
	FormatFP32 Format = "fp32"
	FormatBF16 Format = "bf16"
	FormatFP16 Format = "fp16"
	FormatFP8  Format = "fp8"
	FormatINT8 Format = "int8"
	FormatINT4 Format = "int4"
	FormatFP4  Format = "fp4"
)

// ParseFormat reads a format name, case-insensitively.
func ParseFormat(s string) (Format, error) {
	f := Format(strings.ToLower(strings.TrimSpace(s)))
	switch f {
	case FormatFP32, FormatBF16, FormatFP16, FormatFP8, FormatINT8, FormatINT4, FormatFP4:
		return f, nil
	}
	return "", &gpufleet.ValueError{Field: "precision", Value: gpufleet.Quote(s), Want: "expected one of fp32, bf16, fp16, fp8, int8, int4, fp4"}
}

// BytesPerElement is the storage size of one value, including the scales
// of block-quantised 4-bit formats.
func (f Format) BytesPerElement() float64 {
	switch f {
	case FormatFP32:
		return 4
	case FormatFP8, FormatINT8:
		return 1
	case FormatINT4:
		// 4 bits plus a 16-bit scale and a 4-bit zero point per group.
		return (4 + (16.0+4.0)/quantGroupSize) / 8
	case FormatFP4:
		// NVFP4: 4 bits plus one FP8 scale per 16 values.
		return (4 + 8.0/fp4GroupSize) / 8
	}
	return 2
}

// Optimizer is a training optimizer.
type Optimizer string

// Optimizers.
const (
	AdamW     Optimizer = "adamw"      // mixed precision: fp32 master, m and v: 12 bytes/param
	AdamW8bit Optimizer = "adamw-8bit" // 8-bit m and v plus fp32 master: 6 bytes/param
	SGD       Optimizer = "sgd"        // fp32 master plus momentum: 8 bytes/param
)

// Recompute is the activation-recomputation strategy of a training run.
type Recompute string

// Recompute strategies (Korthikanti et al., arXiv:2205.05198).
const (
	RecomputeNone      Recompute = "none"
	RecomputeSelective Recompute = "selective"
	RecomputeFull      Recompute = "full"
	// RecomputeAuto, the default, is selective recompute on each layout
	// where it fits, else full: what practitioners turn on when memory is
	// short (Llama 3 405B and DeepSeek-V3's published layouts need more
	// than selective recompute on 80 GB cards).
	RecomputeAuto Recompute = "auto"
)

// Bounds of a Request beyond which no engine or run goes: a million
// concurrent sequences or sequences per step, 16M-token contexts, and a
// quadrillion training tokens (Llama 3 trained on 15.6T).
const (
	maxBatch          = 1 << 20
	maxTokens         = 1 << 24
	maxTrainingTokens = int64(1e15)
	// maxMemoryHeadroom bounds Request.MemoryHeadroom: a plan for less
	// than a tenth of each GPU is no plan.
	maxMemoryHeadroom = 0.9
	// maxCP bounds the context-parallel degree (Llama 3 405B trained at
	// 131k tokens with CP 16).
	maxCP = 64
	// cpMinSeq is the shortest sequence the planner tries context
	// parallelism for: below it activations rarely need splitting.
	cpMinSeq = 8192
)

// Request is everything the planner needs. Zero values mean "choose" or
// "default" as each field says; Validate fills defaults and rejects nonsense.
type Request struct {
	Model *model.Config
	Mode  Mode
	// GPUs are the candidate hardware; empty means the whole catalog given to Plan.
	GPUs []catalog.GPU
	// GPUCount is the total number of GPUs per candidate; 0 finds the
	// smallest count that fits.
	GPUCount int

	// Precision is the weights' format (inference) or the compute
	// precision (training); default bf16, or in inference the format of
	// most of the checkpoint's weights when the model's config describes
	// its quantisation. Such a checkpoint's weights are counted as stored
	// whatever Precision says, which then sets the compute precision only.
	Precision   Format
	KVPrecision Format // default bf16

	// Inference workload.
	Batch        int  // concurrent sequences per replica; 0 with BatchMax false means the default
	BatchMax     bool // use the largest batch that fits
	InputTokens  int  // prompt length, default 1024
	OutputTokens int  // generated tokens, default 256

	// Training workload.
	Seq           int   // sequence length, default 4096
	MicroBatch    int   // sequences per micro-batch, default 1
	GlobalBatch   int   // sequences per optimizer step, default 1024
	Tokens        int64 // tokens to train on, default 1e12 (a rough pretraining budget)
	Optimizer     Optimizer
	FP32GradAccum bool // keep an fp32 gradient buffer (Megatron's default): 18 bytes/param with AdamW
	ZeRO          int  // 0-3
	Recompute     Recompute

	// Parallelism; 0 lets the planner choose. CP is the context-parallel
	// degree of a training run (each sequence split over CP GPUs); the
	// planner tries it for sequences of 8192 tokens or more. EP is the
	// expert-parallel degree of a mixture of experts: in training it
	// divides DP (experts split over TP x EP GPUs); in inference it is a
	// multiple of TP (whole experts over EP GPUs, tokens exchanged
	// all-to-all when EP spans replicas).
	TP, PP, DP, CP, EP int

	// Engine is the serving engine an inference plan sizes memory for
	// (default vLLM); MemoryHeadroom, when above 0, is the share of each
	// GPU's memory the engine must leave free, replacing its own cap
	// (vLLM's gpu_memory_utilization is 1 - headroom).
	Engine         Engine
	MemoryHeadroom float64
	// MaxModelLen is the engine's max_model_len (0: the model's
	// max_position_embeddings, as vLLM takes it): a request may be no
	// longer, the KV cache must hold one such sequence, and engines that
	// prefill a whole sequence in their profile run size their
	// activations on it. MaxNumBatchedTokens, when above 0, is the
	// tokens of one forward pass (vLLM's max_num_batched_tokens,
	// TensorRT-LLM's max_num_tokens, SGLang's chunked_prefill_size),
	// replacing the engine's default.
	MaxModelLen, MaxNumBatchedTokens int
	// MaxNumSeqs, when above 0, is the engine's max_num_seqs: the most
	// sequences it runs at once, and the batch vLLM warms its sampler up
	// with in the profile run.
	MaxNumSeqs int
	// KVLowEnd plans on the low end of the engine profile's KV cache
	// (Candidate.KVCacheTokensLow): a plan fits only if its batch's
	// sequences fit there (admission's rule).
	KVLowEnd bool

	// prof is the profile of profOf, found once by withDefaults
	// (engineProfile): a copy of the request with another Engine looks
	// its own up.
	prof   *engineProfile
	profOf Engine

	// LatencyTargetS, when > 0, ranks by the cheapest candidate whose time
	// per output token meets it (and sizes the batch to meet it);
	// TTFTTargetS, when > 0, also asks the time to first token to meet
	// it: a latency-bounded (server) scenario.
	LatencyTargetS, TTFTTargetS float64

	// MaxGPUs bounds the search for the smallest count; default 16384.
	MaxGPUs int
	// Rack, when set, is the facility each candidate is checked against
	// (Candidate.Facility).
	Rack Rack

	// Available, when set, caps the GPUs of each catalog id that a
	// candidate may use (what a fleet has); ids absent from it are
	// unlimited.
	Available map[string]int

	// Calibration replaces the built-in efficiencies per GPU model (catalog
	// id) with what the fleet measured (gpufleet plan --calibration
	// fleet); models without one keep the built-in efficiencies.
	Calibration map[string]Calibration

	// Checkpoint, when set, is the model's safetensors checkpoint as read
	// from its index and, where available, its shards' headers (gpufleet
	// plan --checkpoint-index): an inference plan's weights are its bytes,
	// split per GPU by the layout.
	Checkpoint *model.Checkpoint

	// Overhead is, per GPU model (catalog id), the share of throughput the
	// mechanism the work would run under costs (gpufleet.Mechanism: a
	// passthrough VM, a vGPU, time-slicing); the estimates of that model
	// run that much slower. Models absent from it run on bare metal.
	Overhead map[string]float64

	// precisionGiven records, once defaults are filled, whether the
	// caller named the precision (the notes say when it and the
	// checkpoint's format differ).
	precisionGiven bool
}

// engineProfile is the profile of r's engine (profileFor).
func (r Request) engineProfile() engineProfile {
	if r.prof != nil && r.profOf == r.Engine {
		return *r.prof
	}
	p, _ := profileFor(r.Engine)
	return p
}

// modelLen is the max_model_len the engine runs with: the request's, else
// the model's longest context, else the request's own context.
func (r Request) modelLen() int {
	switch {
	case r.MaxModelLen > 0:
		return r.MaxModelLen
	case r.Model != nil && r.Model.MaxPositionEmbeddings > 0:
		return r.Model.MaxPositionEmbeddings
	}
	return r.InputTokens + r.OutputTokens
}

// withDefaults validates r and returns a copy with defaults filled in.
func (r Request) withDefaults() (Request, error) {
	if r.Model == nil {
		return r, fmt.Errorf("%w: model: required", gpufleet.ErrInvalid)
	}
	for name, w := range map[string]float64{"rack-power": r.Rack.PowerWatts, "rack-cooling": r.Rack.CoolingWatts} {
		if !(w >= 0 && w <= float64(gpufleet.MaxWatts)) {
			return r, fmt.Errorf("%w: %s %g W: expected 0 to %s", gpufleet.ErrInvalid, name, w, gpufleet.MaxWatts)
		}
	}
	if r.Rack.Units < 0 || r.Rack.Units > 1000 {
		return r, fmt.Errorf("%w: rack-units %d: expected 0 to 1000", gpufleet.ErrInvalid, r.Rack.Units)
	}
	for _, m := range sortedModels(r.Calibration) {
		if err := r.Calibration[m].validate(m); err != nil {
			return r, err
		}
	}
	for m, o := range r.Overhead {
		if !(o >= 0 && o < 1) {
			return r, fmt.Errorf("%w: overhead %s %g: expected a share from 0 to under 1", gpufleet.ErrInvalid, gpufleet.Quote(m), o)
		}
	}
	switch r.Mode {
	case "":
		r.Mode = Inference
	case Inference, Training:
	default:
		return r, fmt.Errorf("%w: mode %q: expected inference or training", gpufleet.ErrInvalid, r.Mode)
	}
	r.precisionGiven = r.Precision != ""
	if r.Precision == "" {
		// A checkpoint that describes its quantisation plans in its own
		// format (the one of most of its weights); else bf16.
		r.Precision = FormatBF16
		if f := checkpointFormat(r.Model); f != "" && r.Mode != Training {
			r.Precision = f
		}
	}
	if ck := r.Checkpoint; ck != nil {
		if ck.TotalBytes <= 0 || ck.Sized && (len(ck.Dense) != r.Model.NumLayers || len(ck.Experts) != r.Model.NumLayers) {
			return r, fmt.Errorf("%w: checkpoint-index: %d bytes over %d layers does not fit %s's %d layers", gpufleet.ErrInvalid, ck.TotalBytes, len(ck.Dense), r.Model.Name, r.Model.NumLayers)
		}
	}
	e, err := ParseEngine(string(r.Engine))
	if err != nil {
		return r, err
	}
	r.Engine = e
	p, _ := profileFor(e)
	r.prof, r.profOf = &p, e
	if !(r.MemoryHeadroom >= 0 && r.MemoryHeadroom <= maxMemoryHeadroom) {
		return r, fmt.Errorf("%w: memory-headroom %g: expected 0 (the engine's own) to %g of each GPU's memory", gpufleet.ErrInvalid, r.MemoryHeadroom, maxMemoryHeadroom)
	}
	if r.KVPrecision == "" {
		r.KVPrecision = FormatBF16
	}
	if r.Mode == Training {
		switch r.Precision {
		case FormatBF16, FormatFP16, FormatFP8, FormatFP32:
		default:
			return r, fmt.Errorf("%w: precision %q: training runs in bf16, fp16, fp8 or fp32", gpufleet.ErrInvalid, r.Precision)
		}
	}
	switch r.KVPrecision {
	case FormatBF16, FormatFP16, FormatFP8, FormatINT8, FormatFP32:
	default:
		return r, fmt.Errorf("%w: kv-precision %q: expected bf16, fp16, fp8, int8 or fp32", gpufleet.ErrInvalid, r.KVPrecision)
	}
	// Bounds: GPU counts and parallel degrees as the control plane's
	// (gpufleet.MaxFleetGPUs); batches and lengths far beyond any engine's,
	// so that the layout and batch searches stay bounded.
	for _, c := range []struct {
		name string
		v    int
		max  int
	}{{"gpus", r.GPUCount, gpufleet.MaxFleetGPUs}, {"tp", r.TP, gpufleet.MaxFleetGPUs}, {"pp", r.PP, gpufleet.MaxFleetGPUs},
		{"dp", r.DP, gpufleet.MaxFleetGPUs}, {"cp", r.CP, maxCP}, {"ep", r.EP, gpufleet.MaxFleetGPUs}, {"batch", r.Batch, maxBatch}, {"input-tokens", r.InputTokens, maxTokens},
		{"output-tokens", r.OutputTokens, maxTokens}, {"seq", r.Seq, maxTokens}, {"micro-batch", r.MicroBatch, maxBatch},
		{"max-model-len", r.MaxModelLen, maxTokens}, {"max-num-batched-tokens", r.MaxNumBatchedTokens, maxTokens},
		{"max-num-seqs", r.MaxNumSeqs, maxBatch},
		{"global-batch", r.GlobalBatch, maxBatch}} {
		if err := gpufleet.ValidateCount(c.name, c.v, 0, c.max); err != nil {
			return r, err
		}
	}
	if r.Tokens < 0 || r.Tokens > maxTrainingTokens {
		return r, fmt.Errorf("%w: tokens %d: expected 0 to %g", gpufleet.ErrInvalid, r.Tokens, float64(maxTrainingTokens))
	}
	if r.InputTokens == 0 {
		r.InputTokens = 1024
	}
	if r.OutputTokens == 0 {
		r.OutputTokens = 256
	}
	if ctx := r.InputTokens + r.OutputTokens; r.Mode == Inference && r.MaxModelLen > 0 && ctx > r.MaxModelLen {
		return r, fmt.Errorf("%w: max-model-len %d: shorter than the request's %d input and %d output tokens", gpufleet.ErrInvalid, r.MaxModelLen, r.InputTokens, r.OutputTokens)
	}
	if r.Seq == 0 {
		r.Seq = 4096
	}
	if r.MicroBatch == 0 {
		r.MicroBatch = 1
	}
	if r.GlobalBatch == 0 {
		r.GlobalBatch = 1024
	}
	if r.Tokens == 0 {
		r.Tokens = 1e12
	}
	switch r.Optimizer {
	case "":
		r.Optimizer = AdamW
	case AdamW, AdamW8bit, SGD:
	default:
		return r, fmt.Errorf("%w: optimizer %q: expected adamw, adamw-8bit or sgd", gpufleet.ErrInvalid, r.Optimizer)
	}
	if r.ZeRO < 0 || r.ZeRO > 3 {
		return r, fmt.Errorf("%w: zero %d: expected 0, 1, 2 or 3", gpufleet.ErrInvalid, r.ZeRO)
	}
	switch r.Recompute {
	case "":
		r.Recompute = RecomputeAuto
	case RecomputeNone, RecomputeSelective, RecomputeFull, RecomputeAuto:
	default:
		return r, fmt.Errorf("%w: recompute %q: expected auto, none, selective or full", gpufleet.ErrInvalid, r.Recompute)
	}
	if !(r.LatencyTargetS >= 0) || !(r.TTFTTargetS >= 0) {
		return r, fmt.Errorf("%w: latency targets: expected positive numbers", gpufleet.ErrInvalid)
	}
	if r.MaxGPUs == 0 {
		r.MaxGPUs = 16384
	}
	if r.CP > 1 && r.Mode != Training {
		return r, fmt.Errorf("%w: cp %d: context parallelism is planned for training only", gpufleet.ErrInvalid, r.CP)
	}
	if r.CP > 1 && r.Seq%(2*r.CP) != 0 {
		return r, fmt.Errorf("%w: cp %d: the sequence length %d must split into 2 x cp chunks (load-balanced causal attention)", gpufleet.ErrInvalid, r.CP, r.Seq)
	}
	if r.EP > 1 && !r.Model.IsMoE() {
		return r, fmt.Errorf("%w: ep %d: expert parallelism needs a mixture of experts; %s is dense", gpufleet.ErrInvalid, r.EP, r.Model.Name)
	}
	if r.EP > 1 && r.Model.NumExperts%r.EP != 0 {
		return r, fmt.Errorf("%w: ep %d: does not divide the %d experts", gpufleet.ErrInvalid, r.EP, r.Model.NumExperts)
	}
	if r.EP > 1 && r.Mode == Inference && r.TP > 0 && r.EP%r.TP != 0 {
		return r, fmt.Errorf("%w: ep %d: in inference a multiple of tp %d (whole experts over one or more replicas' GPUs)", gpufleet.ErrInvalid, r.EP, r.TP)
	}
	if r.GPUCount > 0 {
		for name, v := range map[string]int{"tp": r.TP, "pp": r.PP, "dp": r.DP, "cp": r.CP, "ep": r.EP} {
			if v > 0 && r.GPUCount%v != 0 {
				return r, fmt.Errorf("%w: %s %d does not divide gpus %d", gpufleet.ErrInvalid, name, v, r.GPUCount)
			}
		}
		if r.TP > 0 && r.PP > 0 && r.DP > 0 && r.TP*r.PP*r.DP*max(r.CP, 1) != r.GPUCount {
			return r, fmt.Errorf("%w: tp x pp x cp x dp = %d, but gpus is %d", gpufleet.ErrInvalid, r.TP*r.PP*r.DP*max(r.CP, 1), r.GPUCount)
		}
	}
	if r.Mode == Training && r.GlobalBatch%r.MicroBatch != 0 {
		return r, fmt.Errorf("%w: global-batch %d is not a multiple of micro-batch %d", gpufleet.ErrInvalid, r.GlobalBatch, r.MicroBatch)
	}
	return r, nil
}

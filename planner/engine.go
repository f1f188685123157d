package planner

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// Engine is the serving engine an inference plan sizes memory for, and
// optionally its release: "vllm", "vllm@0.6.3". Each engine divides a
// GPU's memory its own way, and its releases differ (docs/PLANNER.md
// #engine-memory); a bare name is the newest profile (engineProfiles).
type Engine string

// Engines.
const (
	EngineVLLM   Engine = "vllm"
	EngineTRTLLM Engine = "trtllm"
	EngineSGLang Engine = "sglang"
)

// Family is the engine without its release: vllm of vllm@0.6.
func (e Engine) Family() Engine {
	f, _, _ := strings.Cut(string(e), "@")
	return Engine(f)
}

// Version is the release the engine names, "" for none (the newest).
func (e Engine) Version() string {
	_, v, _ := strings.Cut(string(e), "@")
	return v
}

// ParseEngine reads an engine as users write it: a name (vllm, trtllm or
// tensorrt-llm, sglang) and optionally @ and its release (vllm@0.6,
// vllm@v0.8.5, vllm@0.9.0.2.dev108+g71faa18: the leading numbers count);
// "" is vLLM's newest profile.
func ParseEngine(s string) (Engine, error) {
	bad := func() (Engine, error) {
		return "", &gpufleet.ValueError{Field: "engine", Value: gpufleet.Quote(s),
			Want: "expected vllm, trtllm or sglang, optionally @ and a release such as vllm@0.6"}
	}
	name, ver, hasVer := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "@")
	e := Engine(strings.TrimSpace(name))
	switch e {
	case "":
		if hasVer {
			return bad()
		}
		e = EngineVLLM
	case EngineVLLM, EngineTRTLLM, EngineSGLang:
	case "tensorrt-llm", "trt-llm":
		e = EngineTRTLLM
	default:
		return bad()
	}
	if !hasVer {
		return e, nil
	}
	v, ok := parseRelease(strings.TrimPrefix(strings.TrimSpace(ver), "v"))
	if !ok {
		return bad()
	}
	return e + "@" + Engine(v.String()), nil
}

// release is an engine release's leading numbers: 0.6.3 is {0, 6, 3}.
type release []int

// parseRelease reads the leading dotted numbers of a version (at most
// four, each below 10000); what follows them (a suffix such as
// .dev108+g71faa18 or rc1) is ignored.
func parseRelease(s string) (release, bool) {
	if len(s) > 64 {
		return nil, false
	}
	var out release
	for _, part := range strings.SplitN(s, ".", 5) {
		n, digits := 0, 0
		for digits < len(part) && part[digits] >= '0' && part[digits] <= '9' && digits < 4 {
			n = n*10 + int(part[digits]-'0')
			digits++
		}
		if digits == 0 {
			break
		}
		out = append(out, n)
		if digits < len(part) || len(out) == 4 {
			break
		}
	}
	return out, len(out) > 0
}

func (v release) String() string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ".")
}

// before reports whether v is an older release than w (missing numbers
// count as 0: 0.6 is 0.6.0).
func (v release) before(w release) bool {
	for i := range max(len(v), len(w)) {
		a, b := 0, 0
		if i < len(v) {
			a = v[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return a < b
		}
	}
	return false
}

// Engine memory. Each engine caps what it allocates and keeps the rest of
// the GPU's memory free; the planner never reports a plan that fits above
// the cap. Sources are the engines' own defaults.
const (
	// vllmMemoryUtilization is vLLM's gpu_memory_utilization default:
	// weights, the profile run's peak activations, non-torch allocations
	// and the KV cache share 0.9 of the GPU; the CUDA context and graphs
	// live in the rest (vllm/config: CacheConfig.gpu_memory_utilization;
	// the H100 logs of llm-d-benchmark's empirical-vllm-memory-results add
	// up to 0.9 x 79.18 GiB exactly).
	vllmMemoryUtilization = 0.90
	// vllmNonTorchBytes is what vLLM logs as non-torch memory at TP 1
	// (0.13 GiB for Llama-3.1-8B, Qwen3-0.6B and gpt-oss-20b on H100,
	// llm-d-benchmark) and vllmCommBytes what tensor parallelism adds:
	// NCCL and custom all-reduce buffers (0.54-0.55 GiB in all at TP 2).
	vllmNonTorchBytes = 0.13 * (1 << 30)
	vllmCommBytes     = 0.42 * (1 << 30)
	// vllmSamplerTensors is how many fp32 tensors of max_num_seqs x vocab
	// vLLM's profile run holds at its peak when it warms up the sampler
	// (logits, probabilities, sorted values and int64 indices of top-k and
	// top-p). The peak activations logged for Llama-3.1-8B (4.76 GiB),
	// Qwen3-32B at TP 2 (5.64) and Qwen3-0.6B (5.56) on H100 are 8.1 to
	// 9.3 such tensors beyond the forward pass's workspace; 8 is the low
	// end. It is why a small model's "activations" are GiBs.
	vllmSamplerTensors = 8
	// vLLM's batch defaults (vllm/engine/arg_utils.py get_batch_defaults,
	// `vllm serve`): GPUs of 70 GiB or more other than the A100 run
	// max_num_seqs 1024 and max_num_batched_tokens 8192; others 256 and
	// 2048.
	vllmLargeGPUBytes  = 70 << 30
	vllmLargeMaxSeqs   = 1024
	vllmLargeMaxTokens = 8192
	vllmSmallMaxSeqs   = 256
	vllmSmallMaxTokens = 2048

	// trtllmFreeMemoryFraction is TensorRT-LLM's
	// KvCacheConfig.free_gpu_memory_fraction default: the KV cache takes
	// 0.9 of the memory left after the model, its activation buffers and
	// the runtime.
	trtllmFreeMemoryFraction = 0.90
	// trtllmMaxNumTokens is its max_num_tokens default, which sizes the
	// activation buffers.
	trtllmMaxNumTokens = 8192

	// sglangChunkTokens is SGLang's chunked_prefill_size on GPUs of 25 GB
	// or more (2048 below).
	sglangChunkTokens = 8192
)

// sglangStaticFraction is SGLang's mem_fraction_static default by tensor
// parallel size (sglang/srt/server_args.py, v0.4): weights and the KV
// pool share it; activations, the CUDA context and graphs use the rest.
func sglangStaticFraction(tp int) float64 {
	switch {
	case tp >= 16:
		return 0.79
	case tp >= 8:
		return 0.81
	case tp >= 4:
		return 0.85
	case tp >= 2:
		return 0.87
	}
	return 0.88
}

// Reserve is what the engine keeps on each GPU beside the weights, KV
// cache and activations, in bytes.
type Reserve struct {
	// ContextBytes covers the CUDA context, library workspaces and CUDA
	// graphs; CommBytes the buffers of tensor and pipeline parallel
	// collectives and other non-torch allocations.
	ContextBytes int64 `json:"context_bytes"`
	CommBytes    int64 `json:"comm_bytes"`
	// SamplerBytes is the part of the activations that warms up the
	// sampler (vLLM), included in the activations.
	SamplerBytes int64 `json:"sampler_bytes"`
	// HeadroomBytes is the memory the engine leaves free by its cap
	// (beyond what the context and graphs take of it).
	HeadroomBytes int64 `json:"headroom_bytes"`
	// Cap is the engine's memory fraction in force: vLLM's
	// gpu_memory_utilization, SGLang's mem_fraction_static, or
	// TensorRT-LLM's free_gpu_memory_fraction.
	Cap float64 `json:"cap"`
	// Profile is the engine profile the figures follow ("vLLM 0.9 and
	// later (V1 engine)"); ProfileTokens the tokens of the profile run
	// whose activation peak the engine keeps free of KV cache, and
	// ProfileSizedBy what set them (max_num_batched_tokens by default,
	// or max_model_len where chunked prefill is off).
	Profile        string `json:"profile"`
	ProfileTokens  int    `json:"profile_tokens"`
	ProfileSizedBy string `json:"profile_sized_by"`
}

// engineGPU is an engine on one GPU model: what sizes its memory.
type engineGPU struct {
	engine        Engine // the family
	capacity      int64
	cap           float64 // the engine's memory fraction (see Reserve.Cap)
	chunkTokens   int     // tokens of the profile run's forward pass
	samplerWarmup int     // sequences the sampler is warmed up with (vLLM)
	profile       string
}

// newEngineGPU sets r's engine up on g at tensor parallelism tp, by the
// engine's profile (engineProfiles) and the request's limits: its
// max_num_batched_tokens, else the profile's default for the GPU and
// max_model_len; a memory headroom above 0 replaces the engine's own cap
// by 1 - headroom.
func newEngineGPU(r Request, g catalog.GPU, tp int) engineGPU {
	p := r.engineProfile()
	eg := engineGPU{engine: p.family, capacity: g.MemoryBytes, cap: p.cap, profile: p.label}
	if p.capFor != nil {
		eg.cap = p.capFor(tp)
	}
	if p.maxSeqs != nil {
		eg.samplerWarmup = p.maxSeqs(g)
	}
	eg.chunkTokens, _ = p.tokens(g, r.modelLen(), false)
	if r.MaxNumSeqs > 0 && eg.samplerWarmup > 0 {
		eg.samplerWarmup = r.MaxNumSeqs
	}
	if r.MaxNumBatchedTokens > 0 {
		eg.chunkTokens = r.MaxNumBatchedTokens
	}
	if r.MemoryHeadroom > 0 {
		eg.cap = 1 - r.MemoryHeadroom
	}
	return eg
}

// profileSizedBy says, in words, what set the profile run's tokens of
// r's engine on g (Reserve.ProfileSizedBy): for the plan shown only.
func profileSizedBy(r Request, g catalog.GPU) string {
	p := r.engineProfile()
	if r.MaxNumBatchedTokens > 0 {
		return fmt.Sprintf("%s %d (given)", p.tokensName, r.MaxNumBatchedTokens)
	}
	_, words := p.tokens(g, r.modelLen(), true)
	return words
}

// reserve fills m's overhead and reserve for the engine: the CUDA context
// and collective buffers, and the headroom its cap leaves. m holds the
// weights, KV cache and activations (the sampler's part in samplerBytes).
func (e engineGPU) reserve(m *Memory, l layout, samplerBytes float64) {
	ctx := float64(cudaContextBytes)
	comm := 0.0
	if l.tp*l.pp > 1 {
		comm = ncclBufferBytes
	}
	if e.engine == EngineVLLM {
		comm = vllmNonTorchBytes
		if l.tp*l.pp > 1 {
			comm += vllmCommBytes
		}
	}
	c := float64(e.capacity)
	w, a := float64(m.WeightsBytes), float64(m.ActivationsBytes)
	var headroom float64
	switch e.engine {
	case EngineTRTLLM:
		// The KV cache takes cap of what is free after the rest.
		headroom = (1 - e.cap) * math.Max(c-w-a-ctx-comm, 0)
	case EngineSGLang:
		// The cap is of the memory free before the model loads, after the
		// CUDA context and the collectives' set-up: the KV cache takes
		// what the weights leave of cap x that, and activations and
		// graphs live in the rest (sglang/srt/model_executor,
		// profile_max_num_token: available after the load less
		// (1 - mem_fraction_static) x the pre-load free memory).
		headroom = math.Max((1-e.cap)*(c-ctx-comm)-a, 0)
	default:
		// Under the cap all but the context and graphs, which use the
		// memory the cap leaves.
		headroom = math.Max((1-e.cap)*c-ctx, 0)
	}
	m.OverheadBytes = int64(ctx + comm)
	m.Reserve = Reserve{ContextBytes: int64(ctx), CommBytes: int64(comm), SamplerBytes: int64(samplerBytes),
		HeadroomBytes: int64(headroom), Cap: e.cap, Profile: e.profile, ProfileTokens: e.chunkTokens}
}

// engineCapName is the engine's own name for its memory fraction.
func engineCapName(e Engine) string {
	switch e.Family() {
	case EngineTRTLLM:
		return "free_gpu_memory_fraction"
	case EngineSGLang:
		return "mem_fraction_static"
	}
	return "gpu_memory_utilization"
}

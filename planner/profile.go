package planner

import (
	"fmt"
	"strings"

	"github.com/gpufleet/gpufleet/catalog"
)

// engineProfile is what one engine's releases, from since on, do with a
// GPU's memory: the share they cap themselves at, and how they size the
// profile run whose activation peak they keep free of KV cache. Every
// figure has its source beside it.
type engineProfile struct {
	family Engine
	since  release // the first release it describes
	label  string  // for the notes: "vLLM 0.5-0.7 (V0 engine)"
	// cap is the engine's memory fraction (Reserve.Cap); capFor, when
	// set, gives it by tensor parallel size instead.
	cap    float64
	capFor func(tp int) float64
	// tokens is how many tokens the profile run's forward pass takes on g
	// for a max_model_len of modelLen, and, with words, what set them (the
	// words only for the plan shown: the search asks for the number);
	// tokensName is the engine's own name for the setting.
	tokens     func(g catalog.GPU, modelLen int, words bool) (int, string)
	tokensName string
	// maxSeqs is max_num_seqs on g, the batch the sampler is warmed up
	// with, where the engine does that (nil: it does not).
	maxSeqs func(g catalog.GPU) int
	// kv is how far the profile's KV cache was off on its dev rows
	// (kvRows, docs/ACCURACY.md), as (predicted - measured) / measured:
	// the most over and under, widened to at least kvMinBand each way; a
	// profile without dev rows takes the widest of all (kvUnknown).
	kv     kvBand
	kvRows string
	// slowBefore and slowNote warn of releases before slowBefore whose
	// throughput a published figure puts below the plan's.
	slowBefore release
	slowNote   string
}

// kvBand is a profile's KV error range: over >= 0 >= under.
type kvBand struct{ over, under float64 }

// kvMinBand is the least uncertainty any profile is given: no two of its
// rows are the same deployment.
const kvMinBand = 0.05

// kvUnknown is the band of a profile without dev rows: the widest over-
// and under-prediction of any profile (TensorRT-LLM's +48 %, vLLM V1's
// -8 %).
var kvUnknown = kvBand{over: 0.482, under: -0.080}

// engineProfiles are the profiles known, oldest first within an engine.
var engineProfiles = []engineProfile{
	{
		// The V0 engine (vLLM's default until 0.8.0). Chunked prefill is
		// off unless the model is longer than 32K tokens (vllm/engine/
		// arg_utils.py create_engine_config, `use_long_context`: "Chunked
		// prefill is enabled by default for models with max_model_len >
		// 32K"), when max_num_batched_tokens is 512; otherwise it is
		// max(max_model_len, 2048) (vllm/config.py SchedulerConfig: "If
		// max_model_len is too short, use 2048 as the default value"), and
		// the profile run prefills that many tokens. max_num_seqs is 256
		// (EngineArgs). NVIDIA NIM's vLLM logs show the effect: 435,036 KV
		// tokens at max_model_len 4,096, 53,412 at 32,768 (no chunked
		// prefill) and 456,131 at 131,072 (chunked).
		family: EngineVLLM, since: release{0, 5}, label: "vLLM 0.5-0.7 (V0 engine)", cap: vllmMemoryUtilization,
		tokens: func(_ catalog.GPU, modelLen int, words bool) (int, string) {
			if modelLen > vllmV0LongContext {
				return vllmV0ChunkedTokens, say(words, func() string {
					return fmt.Sprintf("max_num_batched_tokens %d: chunked prefill is on by default above max_model_len %d", vllmV0ChunkedTokens, vllmV0LongContext)
				})
			}
			n := max(modelLen, vllmV0MinBatchedTokens)
			return n, say(words, func() string {
				return fmt.Sprintf("max_num_batched_tokens %d = max(max_model_len %d, %d): chunked prefill is off by default at this length", n, modelLen, vllmV0MinBatchedTokens)
			})
		},
		tokensName: "max_num_batched_tokens",
		maxSeqs:    func(catalog.GPU) int { return vllmSmallMaxSeqs },
		kv:         kvBand{over: 0.05, under: -0.05}, kvRows: "EL001 +3.5 %, EL005 +2.3 %",
		// vLLM's v0.6.0 performance post (blog.vllm.ai/2024/09/05/perf-update):
		// 0.6.0 served 2.7x the throughput of 0.5.3 for Llama 3 8B on one
		// H100 and 1.8x for 70B on four (ShareGPT over its HTTP server),
		// mostly CPU time each decode step left the GPU idle. Offline runs
		// without the server lose less (AMD's MLPerf run on 0.4.3, PM006,
		// is within 18% of the plan), so it is a warning, not a factor.
		slowBefore: release{0, 6},
		slowNote:   "vLLM releases before 0.6.0 served 1.8x (70B on 4 H100s) to 2.7x (8B on one) less throughput than 0.6.0 over their HTTP server, CPU time that left the GPU idle each decode step (vLLM's v0.6.0 performance post); served throughput may be that far below this plan, offline use less",
	},
	{
		// The V1 engine, the default from 0.8.0: chunked prefill always
		// ("V1 always uses chunked prefills", arg_utils.py
		// _set_default_args_v1), `vllm serve` defaults of 2048 batched
		// tokens and 256 sequences on every GPU.
		family: EngineVLLM, since: release{0, 8}, label: "vLLM 0.8 (V1 engine)", cap: vllmMemoryUtilization,
		tokens: func(_ catalog.GPU, _ int, words bool) (int, string) {
			return vllmSmallMaxTokens, say(words, func() string {
				return fmt.Sprintf("max_num_batched_tokens %d (vllm serve's default)", vllmSmallMaxTokens)
			})
		},
		tokensName: "max_num_batched_tokens",
		maxSeqs:    func(catalog.GPU) int { return vllmSmallMaxSeqs },
		kv:         kvUnknown,
	},
	{
		// V1 with defaults by device (arg_utils.py get_batch_defaults,
		// after vLLM PR #17885): GPUs of 70 GiB or more other than the
		// A100 run 8192 batched tokens and 1024 sequences under `vllm
		// serve`, others 2048 and 256.
		family: EngineVLLM, since: release{0, 9}, label: "vLLM 0.9 and later (V1 engine)", cap: vllmMemoryUtilization,
		tokens: func(g catalog.GPU, _ int, words bool) (int, string) {
			if vllmLargeGPU(g) {
				return vllmLargeMaxTokens, say(words, func() string {
					return fmt.Sprintf("max_num_batched_tokens %d (vllm serve's default on GPUs of 70 GiB or more but the A100)", vllmLargeMaxTokens)
				})
			}
			return vllmSmallMaxTokens, say(words, func() string {
				return fmt.Sprintf("max_num_batched_tokens %d (vllm serve's default below 70 GiB and on the A100)", vllmSmallMaxTokens)
			})
		},
		tokensName: "max_num_batched_tokens",
		maxSeqs: func(g catalog.GPU) int {
			if vllmLargeGPU(g) {
				return vllmLargeMaxSeqs
			}
			return vllmSmallMaxSeqs
		},
		kv: kvBand{over: 0.232, under: -0.080}, kvRows: "EL010, EL011, EL013, EL029, PM016, PM017, PM018, PM019, PM037: -8.0 % to +23.2 %",
	},
	{
		// One profile for every release: the LLM API's defaults
		// (BuildConfig.max_num_tokens 8192 sizes the activation buffers;
		// KvCacheConfig.free_gpu_memory_fraction 0.9).
		family: EngineTRTLLM, label: "TensorRT-LLM", cap: trtllmFreeMemoryFraction,
		tokens: func(_ catalog.GPU, _ int, words bool) (int, string) {
			return trtllmMaxNumTokens, say(words, func() string { return fmt.Sprintf("max_num_tokens %d (the build's default)", trtllmMaxNumTokens) })
		},
		tokensName: "max_num_tokens",
		kv:         kvBand{over: 0.482, under: -0.05}, kvRows: "EL007 +48.2 % (a 2023 engine built for 25 sequences of 4K), EL017 +4.1 %",
	},
	{
		// SGLang v0.4 (sglang/srt/server_args.py): mem_fraction_static by
		// tensor parallel size; chunked_prefill_size 8192 on GPUs of 25 GB
		// or more, 2048 below.
		family: EngineSGLang, since: release{0, 4}, label: "SGLang 0.4", capFor: sglangStaticFraction,
		tokens: func(g catalog.GPU, _ int, words bool) (int, string) {
			if g.MemoryBytes < 25e9 {
				return 2048, say(words, func() string { return "chunked_prefill_size 2048 (the default below 25 GB)" })
			}
			return sglangChunkTokens, say(words, func() string {
				return fmt.Sprintf("chunked_prefill_size %d (the default from 25 GB)", sglangChunkTokens)
			})
		},
		tokensName: "chunked_prefill_size",
		kv:         kvUnknown,
	},
}

// say is words() when they are wanted.
func say(want bool, words func() string) string {
	if !want {
		return ""
	}
	return words()
}

// The V0 engine's batching defaults (see engineProfiles).
const (
	vllmV0LongContext      = 32768
	vllmV0ChunkedTokens    = 512
	vllmV0MinBatchedTokens = 2048
)

// vllmLargeGPU is vLLM's test for its larger batch defaults: 70 GiB of
// memory or more, and not an A100.
func vllmLargeGPU(g catalog.GPU) bool {
	return g.MemoryBytes >= vllmLargeGPUBytes && !strings.HasPrefix(g.ID, "a100")
}

// profileFor is the profile of e: its release's, the newest older one for
// a release without its own, the newest for none. note says when the
// profile is not the release's own.
func profileFor(e Engine) (p engineProfile, note string) {
	fam := e.Family()
	v, named := parseRelease(e.Version())
	found := false
	for _, q := range engineProfiles {
		if q.family != fam {
			continue
		}
		if !found || !named || !v.before(q.since) {
			p, found = q, true
		}
	}
	if !found {
		return engineProfiles[len(engineProfiles)-1], ""
	}
	switch {
	case named && v.before(p.since):
		note = fmt.Sprintf("no profile of %s %s: planned with the oldest, %s; older releases count memory differently and may leave less KV cache", fam, v, p.label)
	case named:
		note = fmt.Sprintf("%s %s planned with the %s profile", fam, v, p.label)
	}
	if named && p.slowNote != "" && v.before(p.slowBefore) {
		note += "; " + p.slowNote
	}
	return p, note
}

// kvRange is the KV cache the engine may really allocate, given the
// planner's figure tokens and the profile's band: measured = predicted /
// (1 + error), so the low end divides by 1 + over.
func (p engineProfile) kvRange(tokens int64) (low, high int64) {
	return int64(float64(tokens) / (1 + p.kv.over)), int64(float64(tokens) / (1 + p.kv.under))
}

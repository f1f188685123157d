package planner

import (
	"math"

	"github.com/gpufleet/gpufleet/model"
)

// layout is one way to split a model over GPUs.
type layout struct {
	tp, pp, dp int
	// ep is the expert-parallel degree of a mixture of experts. Training:
	// the routed experts split over tp x ep GPUs, ep dividing dp.
	// Inference: 1 slices every expert over tensor parallelism; above 1,
	// a multiple of tp dividing tp x dp, whole experts over ep GPUs that
	// serve ep/tp replicas' tokens, exchanged all-to-all (vLLM's
	// --enable-expert-parallel, with data-parallel attention beyond one
	// replica).
	ep int
	// cp is the context-parallel degree of a training layout (0 or 1:
	// none): each sequence split over cp GPUs, which exchange keys and
	// values ring-wise in attention.
	cp int
	// vs is the virtual pipeline stages (model chunks) per GPU of an
	// interleaved 1F1B schedule; 0 or 1 means the plain 1F1B schedule.
	vs int
}

// v is the virtual stage count, at least 1.
func (l layout) v() int { return max(1, l.vs) }

func (l layout) gpus() int { return l.tp * l.pp * l.c() * l.dp }

// c is the context-parallel degree, at least 1.
func (l layout) c() int { return max(1, l.cp) }

// expertShards is how many ways an inference layout splits the routed
// experts: whole experts over the expert-parallel group, else slices of
// every expert over tensor parallelism.
func (l layout) expertShards() int {
	if l.ep > 1 {
		return l.ep
	}
	return l.tp
}

// Memory is the per-GPU memory breakdown of the most loaded GPU, in bytes.
// Fields that do not apply to the mode are zero.
type Memory struct {
	WeightsBytes     int64 `json:"weights_bytes"`
	KVCacheBytes     int64 `json:"kv_cache_bytes"`
	ActivationsBytes int64 `json:"activations_bytes"`
	GradientsBytes   int64 `json:"gradients_bytes"`
	OptimizerBytes   int64 `json:"optimizer_bytes"`
	OverheadBytes    int64 `json:"overhead_bytes"`
	TotalBytes       int64 `json:"total_bytes"`
	CapacityBytes    int64 `json:"capacity_bytes"`
	// Reserve breaks down an inference engine's overhead and the headroom
	// its memory cap leaves; zero in training. A value, not a pointer:
	// the batch searches size memory many times per layout.
	Reserve Reserve `json:"reserve"`
}

// fits reports whether the memory fits the GPU: the total and, for an
// inference engine, the headroom its cap keeps free.
func (m Memory) fits() bool {
	return m.TotalBytes+m.Reserve.HeadroomBytes <= m.CapacityBytes
}

func (m *Memory) sum() {
	m.TotalBytes = m.WeightsBytes + m.KVCacheBytes + m.ActivationsBytes + m.GradientsBytes + m.OptimizerBytes + m.OverheadBytes
}

// shape caches what the planner needs of a model.
type shape struct {
	cfg    *model.Config
	params model.Params
	layers int
	// blockParams are the parameters of all transformer blocks; expertParams
	// the routed experts among them; embedParams the input embedding and
	// headParams the output head (the embedding again when tied).
	blockParams, expertParams, embedParams, headParams float64
	// activeBlockParams is what one token touches inside the blocks;
	// routedActiveParams the top-k routed experts among them.
	activeBlockParams, routedActiveParams float64
	// largestLayer is the largest transformer layer's parameter count.
	largestLayer float64
	// wt is the checkpoint's weight bytes by layer for an inference plan
	// whose model describes its quantisation or that carries a
	// safetensors checkpoint; nil when the weights are the precision's.
	wt *weightTable
}

func newShape(cfg *model.Config) shape {
	p := cfg.Params()
	head := float64(p.Head)
	if head == 0 {
		head = float64(p.Embedding) // tied: the same matrix serves as head
	}
	block := float64(p.Total - p.Embedding - p.Head)
	routed := 0.0
	if cfg.IsMoE() && cfg.NumExperts > 0 {
		routed = float64(p.Experts) * float64(cfg.NumExpertsPerToken) / float64(cfg.NumExperts)
	}
	return shape{
		cfg: cfg, params: p, layers: cfg.NumLayers,
		blockParams:        block,
		expertParams:       float64(p.Experts),
		embedParams:        float64(p.Embedding),
		headParams:         head,
		activeBlockParams:  float64(p.ActiveExcludingEmbeddings),
		routedActiveParams: routed,
		largestLayer:       float64(p.LargestLayer),
	}
}

// layersPerStage is the layer count of the most loaded pipeline stage.
func (s shape) layersPerStage(pp int) int { return (s.layers + pp - 1) / pp }

// stageFraction is the share of the blocks that the most loaded stage holds.
func (s shape) stageFraction(pp int) float64 {
	return float64(s.layersPerStage(pp)) / float64(s.layers)
}

// embedOnStage is the embedding and head parameters held by the most
// loaded stage: both with one stage, the larger of the two otherwise.
func (s shape) embedOnStage(pp int) float64 {
	if pp == 1 {
		if s.params.Head == 0 {
			return s.embedParams
		}
		return s.embedParams + s.headParams
	}
	return math.Max(s.embedParams, s.headParams)
}

// kvShard is how many ways tensor parallelism splits the KV cache: by KV
// head, so never more than the KV heads (beyond that they are replicated);
// latent attention caches one shared latent, replicated on every rank.
func (s shape) kvShard(tp int) int {
	if s.cfg.IsMLA() {
		return 1
	}
	return max(1, min(tp, s.cfg.NumKVHeads))
}

// kvBytesPerSeq is the KV cache of one sequence of ctx tokens on the most
// loaded GPU, rounded up to whole paged blocks.
func (s shape) kvBytesPerSeq(ctx int, kv Format, l layout) float64 {
	blocks := (ctx + pagedBlockTokens - 1) / pagedBlockTokens
	full := float64(s.cfg.KVCacheBytes(int64(blocks*pagedBlockTokens), kv.BytesPerElement()))
	return full / float64(s.kvShard(l.tp)) * s.stageFraction(l.pp)
}

// ffnWidth is the MLP width one token passes through in a layer: the dense
// intermediate size, or top-k routed experts plus the shared experts.
func (s shape) ffnWidth() float64 {
	c := s.cfg
	if c.IsMoE() {
		return float64(c.NumExpertsPerToken*c.MoEIntermediateSize + c.SharedExpertIntermediateSize)
	}
	return float64(c.IntermediateSize)
}

// inferenceWeights is the weight memory of the most loaded GPU: the
// checkpoint's bytes when the plan has them (weightTable.perGPU), else
// the format's. Quantised formats apply to the transformer blocks;
// embedding and head stay 16-bit, as GPTQ, AWQ and FP8 checkpoints keep
// them.
func (s shape) inferenceWeights(w Format, l layout) float64 {
	if s.wt != nil {
		return s.wt.perGPU(s, l)
	}
	embB := 2.0
	if w == FormatFP32 {
		embB = 4
	}
	stage := w.BytesPerElement() * s.stageFraction(l.pp)
	dense := (s.blockParams - s.expertParams) * stage
	return (dense+s.embedOnStage(l.pp)*embB)/float64(l.tp) + s.expertParams*stage/float64(l.expertShards())
}

// inferenceActivations is the workspace of one forward pass over a prefill
// chunk of the engine's: the residual stream and the widest of the
// attention and MLP intermediates of one layer; and the sampler's: fp32
// logits for the sampled tokens or, where the engine warms the sampler up
// over its largest batch (vLLM), vllmSamplerTensors tensors of that batch
// by the whole vocabulary, which it returns apart too.
func (s shape) inferenceActivations(batch, input int, l layout, e engineGPU) (total, sampler float64) {
	c := s.cfg
	chunk := e.chunkTokens
	if chunk == 0 {
		chunk = prefillChunkTokens
	}
	// Engines size this workspace for their largest pass (vLLM profiles
	// max_num_batched_tokens, TensorRT-LLM max_num_tokens) and keep it,
	// whatever the batch asks.
	tokens := float64(chunk)
	h := float64(c.HiddenSize)
	tp := float64(l.tp)
	qkv := float64((c.NumHeads + 2*c.NumKVHeads) * c.HeadDim)
	mlpMats := 2.0
	if c.GatedMLP {
		mlpMats = 3
	}
	inter := math.Max(qkv, mlpMats*s.ffnWidth()) / tp
	if c.IsMoE() {
		// A fused MoE layer also holds each token's k expert outputs at
		// full width before it sums them (vLLM's fused_moe
		// intermediate_cache3: tokens x top-k x hidden).
		inter += float64(c.NumExpertsPerToken) * h
	}
	forward := tokens * (2*h + inter) * 2
	if e.samplerWarmup > 0 {
		sampler = float64(e.samplerWarmup) * float64(c.VocabSize) * 4 * vllmSamplerTensors
		return forward + sampler, sampler
	}
	return forward + float64(min(batch, int(tokens)))*float64(c.VocabSize)*4/tp, 0
}

// overhead is the training runtime's fixed cost per GPU plus allocator
// slack.
func overhead(live float64, l layout) float64 {
	o := float64(cudaContextBytes) + allocatorFragmentation*live
	if l.tp*l.pp > 1 {
		o += ncclBufferBytes
	}
	return o
}

// inferenceMemory sizes one GPU serving batch sequences of ctx tokens on
// the engine e: weights, KV cache, activations and the engine's reserve
// (its profile run measures the peak of what it allocates, so no
// allocator slack is added).
func (s shape) inferenceMemory(r Request, batch int, l layout, e engineGPU) Memory {
	ctx := r.InputTokens + r.OutputTokens
	act, sampler := s.inferenceActivations(batch, r.InputTokens, l, e)
	m := Memory{
		WeightsBytes:     int64(s.inferenceWeights(r.Precision, l)),
		KVCacheBytes:     int64(float64(batch) * s.kvBytesPerSeq(ctx, r.KVPrecision, l)),
		ActivationsBytes: int64(act),
		CapacityBytes:    e.capacity,
	}
	e.reserve(&m, l, sampler)
	m.sum()
	return m
}

// kvCacheTokens is the KV cache the engine allocates per replica, in
// tokens: the memory under its cap that weights, activations and its
// reserve leave, in whole paged blocks of a GPU of the layout (what vLLM
// logs as "GPU KV cache size"). 0 when nothing is left.
func (s shape) kvCacheTokens(r Request, l layout, e engineGPU) int64 {
	m := s.inferenceMemory(r, 1, l, e)
	free := m.CapacityBytes - (m.TotalBytes - m.KVCacheBytes) - m.Reserve.HeadroomBytes
	block := s.kvBytesPerSeq(pagedBlockTokens, r.KVPrecision, l) // one paged block
	if free <= 0 || block <= 0 {
		return 0
	}
	return int64(float64(free)/block) * pagedBlockTokens
}

// largest returns the largest n in [1, limit] for which ok holds, 0 when
// ok(1) fails. ok must be monotonic (true up to some n, false after): it
// doubles, then bisects.
func largest(limit int, ok func(int) bool) int {
	if !ok(1) {
		return 0
	}
	lo, hi := 1, 2
	for hi <= limit && ok(hi) {
		lo, hi = hi, hi*2
	}
	hi = min(hi, limit+1)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// maxBatch is the largest batch whose memory fits capacity, 0 when even one
// sequence does not. Memory grows monotonically with batch.
func (s shape) maxBatch(r Request, l layout, e engineGPU) int {
	return largest(1<<22, func(b int) bool { return s.inferenceMemory(r, b, l, e).fits() })
}

// maxContext is the longest context (prompt plus output) that batch
// sequences can hold on the layout, 0 when even a two-token context does
// not fit. Memory grows with the context.
func (s shape) maxContext(r Request, batch int, l layout, e engineGPU) int {
	n := largest(1<<24, func(ctx int) bool {
		rr := r
		rr.InputTokens, rr.OutputTokens = max(1, ctx-1), 1
		return s.inferenceMemory(rr, batch, l, e).fits()
	})
	if n < 2 {
		return 0
	}
	return n
}

// virtualStages is the model chunks per GPU of Megatron's interleaved 1F1B
// schedule that the planner considers for a training layout: with at least
// as many micro-batches as stages and two or more layers per chunk, up to 4
// chunks. Interleaving divides the pipeline bubble by the chunk count at
// the cost of as many more point-to-point transfers and a little more
// activation memory; the planner tries both schedules.
func (s shape) virtualStages(r Request, l layout) int {
	microBatches := max(1, r.GlobalBatch/(r.MicroBatch*l.dp))
	if l.pp <= 1 || microBatches < l.pp {
		return 1
	}
	return max(1, min(4, s.layersPerStage(l.pp)/2))
}

// trainingBytesPerParam returns weights, gradients and optimizer bytes per
// parameter before any ZeRO sharding.
func trainingBytesPerParam(r Request) (w, g, o float64) {
	w, g = 2, 2
	if r.Precision == FormatFP32 {
		w, g = 4, 4
	}
	if r.FP32GradAccum {
		g = 4
	}
	master := 4.0
	if r.Precision == FormatFP32 {
		master = 0 // the weights are the fp32 master copy
	}
	switch r.Optimizer {
	case AdamW8bit:
		o = master + 2
	case SGD:
		o = master + 4
	default:
		o = master + 8
	}
	return w, g, o
}

// trainingParamsPerGPU is the parameters the most loaded GPU holds before
// ZeRO: dense block parameters split by tensor and pipeline parallelism,
// routed experts also split by expert parallelism, plus the stage's
// embedding or head split by tensor parallelism (vocabulary-parallel).
func (s shape) trainingParamsPerGPU(l layout) (dense, experts float64) {
	frac := s.stageFraction(l.pp)
	dense = ((s.blockParams-s.expertParams)*frac + s.embedOnStage(l.pp)) / float64(l.tp)
	experts = s.expertParams * frac / float64(l.tp*l.ep)
	return dense, experts
}

// activationsPerLayer is the activation memory of one transformer layer for
// one micro-batch, after Korthikanti et al. (arXiv:2205.05198), generalised
// to grouped-query attention and gated MLPs, with sequence parallelism
// whenever tensor parallelism is on (everything divides by tp).
func (s shape) activationsPerLayer(seq, mb, tp int, rc Recompute) float64 {
	c := s.cfg
	sb := float64(seq * mb)
	h := float64(c.HiddenSize)
	kvd := float64(c.NumKVHeads * c.HeadDim)
	if c.IsMLA() {
		kvd = float64(c.NumHeads * (c.QKNopeHeadDim + c.QKRopeHeadDim))
	}
	if rc == RecomputeFull {
		return 2 * sb * h / float64(tp) // only the layer input is kept
	}
	// Attention: qkv input 2sbh, Q 2sbh, K and V 2sb*kvd each, out-proj
	// input 2sbh, dropout mask sbh; LayerNorm inputs 4sbh.
	attn := 7*sb*h + 4*sb*kvd + 4*sb*h
	if rc == RecomputeNone {
		// softmax output, its dropout mask and dropout output: 5 a s^2 b.
		attn += 5 * float64(c.NumHeads) * float64(seq) * sb
	}
	mats := 4.0 // GELU input and output, 2 bytes each
	if c.GatedMLP {
		mats = 6 // gate, up and their product
	}
	mlp := 3*sb*h + mats*sb*s.ffnWidth()
	return (attn + mlp) / float64(tp)
}

// trainingMemory sizes the most loaded GPU of a training layout.
func (s shape) trainingMemory(r Request, l layout, capacity int64) Memory {
	wB, gB, oB := trainingBytesPerParam(r)
	dense, experts := s.trainingParamsPerGPU(l)
	// The distributed optimizer shards over the data- and context-parallel
	// ranks, which hold the same parameters.
	shardDense := float64(l.dp * l.c())
	shardExp := float64(max(1, l.dp*l.c()/l.ep))
	shard := func(bytes float64, stage int) float64 {
		if r.ZeRO >= stage {
			return dense*bytes/shardDense + experts*bytes/shardExp
		}
		return (dense + experts) * bytes
	}
	m := Memory{CapacityBytes: capacity}
	m.OptimizerBytes = int64(shard(oB, 1))
	m.GradientsBytes = int64(shard(gB, 2))
	m.WeightsBytes = int64(shard(wB, 3))
	var gathered float64
	if r.ZeRO == 3 && l.dp*l.c() > 1 {
		// The gathered working set, parameters and gradients of the largest
		// layer twice (the one computing and the one prefetched): buffers,
		// not model state, so it counts with the overhead and the model
		// state matches the ZeRO paper's 16 bytes per parameter over the
		// ranks.
		gathered = 2 * (wB + gB) * s.largestLayer / float64(l.tp)
	}

	microBatches := max(1, r.GlobalBatch/(r.MicroBatch*l.dp))
	inFlight := float64(min(l.pp, microBatches))
	seq := r.Seq / l.c() // each context-parallel rank holds its part of every sequence
	perLayer := s.activationsPerLayer(seq, r.MicroBatch, l.tp, r.Recompute)
	act := perLayer * float64(s.layersPerStage(l.pp)) * inFlight
	if v := l.v(); v > 1 {
		// Interleaving keeps a little more in flight on the first stage.
		act *= 1 + float64(l.pp-1)/float64(l.pp*v)
	}
	// The backward pass of a layer holds gradients shaped like that layer's
	// activations; with full recompute the layer's activations are rebuilt
	// first, so one more layer's worth is live.
	oneLayer := s.activationsPerLayer(seq, r.MicroBatch, l.tp, RecomputeSelective)
	act += oneLayer
	if r.Recompute == RecomputeFull {
		act += oneLayer
	}
	if l.pp == 1 {
		// fp32 logits and their gradient for the loss.
		act += 2 * 4 * float64(seq*r.MicroBatch) * float64(s.cfg.VocabSize) / float64(l.tp)
	}
	m.ActivationsBytes = int64(act)
	live := float64(m.WeightsBytes+m.GradientsBytes+m.OptimizerBytes+m.ActivationsBytes) + gathered
	m.OverheadBytes = int64(overhead(live, layout{tp: l.tp, pp: l.pp * l.c() * l.dp}) + gathered)
	m.sum()
	return m
}

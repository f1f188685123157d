package planner

import (
	"math"

	"github.com/gpufleet/gpufleet/catalog"
)

// Bound names what limits a phase.
type Bound string

// Bounds.
const (
	BoundCompute      Bound = "compute"
	BoundMemory       Bound = "memory"
	BoundInterconnect Bound = "interconnect"
)

// phase is the time of one forward pass (a decode step or a prefill) on one
// replica, and what bounds it.
type phase struct {
	timeS      float64
	computeS   float64
	memoryS    float64
	commS      float64
	flops      float64 // per GPU
	bytes      float64 // per GPU
	bound      Bound
	intensity  float64 // FLOP per byte of memory traffic
	ridge      float64 // peak FLOP/s over bandwidth
	tpLinkKind string
	ppLinkKind string
	overheadS  float64
}

func classify(compute, memory, comm float64) Bound {
	switch {
	case comm > compute && comm > memory:
		return BoundInterconnect
	case compute >= memory:
		return BoundCompute
	}
	return BoundMemory
}

// hw is a candidate GPU with its compute support resolved.
type hw struct {
	gpu  catalog.GPU
	sup  computeSupport
	bw   float64 // achieved memory bandwidth
	peak float64 // achieved GEMM throughput
	cal  *Calibration
	// overhead is the share of throughput the mechanism costs (a VM, a
	// vGPU); bw and peak are already net of it.
	overhead float64
}

// slowed is h under a mechanism that costs the share o of its throughput.
func (h hw) slowed(o float64) hw {
	h.bw *= 1 - o
	h.peak *= 1 - o
	h.overhead = o
	return h
}

// newHW is g computing in format f at efficiency eff of its peak, or as
// cal measured it.
func newHW(g catalog.GPU, f Format, eff float64, cal *Calibration) hw {
	s := support(g, f)
	return hw{gpu: g, sup: s, bw: g.MemoryBandwidthBytesPerS * cal.memoryShare(), peak: s.peak * eff * cal.computeScale(s.computeP), cal: cal}
}

// tpLink is the fabric tensor parallelism of size tp runs over.
func tpLink(g catalog.GPU, tp int) link { return groupLink(g, tp) }

// ppLink is the fabric between pipeline stages: inside the domain when the
// whole replica fits there, else the network.
func ppLink(g catalog.GPU, l layout) link {
	if l.pp <= 1 {
		return link{bytesPerS: 1e18, kind: "none"}
	}
	return groupLink(g, l.tp*l.pp)
}

// expertFraction is the expected share of a layer's routed experts that a
// batch of tokens touches: each token picks k of E.
func (s shape) expertFraction(tokens float64) float64 {
	c := s.cfg
	if !c.IsMoE() || c.NumExperts == 0 {
		return 1
	}
	miss := 1 - float64(c.NumExpertsPerToken)/float64(c.NumExperts)
	return 1 - math.Pow(miss, tokens)
}

// moeLoad is what the routed experts cost the busiest GPU of a forward
// pass: the share of its experts' weights it reads, its tokens over the
// mean, and the tokens each of its experts multiplies.
type moeLoad struct{ touched, imbalance, perExpert float64 }

// moe is the routed experts' load for newTok tokens per replica. Sliced
// over tensor parallelism every rank does an equal part; as whole experts
// over an expert-parallel group, the group's tokens (ep/tp replicas') are
// routed to ep ranks, and the busiest receives expertImbalance times the
// mean, touching that much more of its experts.
func (s shape) moe(l layout, newTok float64) moeLoad {
	c := s.cfg
	if !c.IsMoE() || c.NumExperts == 0 {
		return moeLoad{touched: 1, imbalance: 1}
	}
	// One pass multiplies at most a prefill chunk's tokens at once.
	perExpert := func(tok float64) float64 {
		return math.Min(tok, prefillChunkTokens) * float64(c.NumExpertsPerToken) / float64(c.NumExperts)
	}
	if l.ep <= 1 {
		return moeLoad{touched: s.expertFraction(newTok), imbalance: 1, perExpert: perExpert(newTok)}
	}
	group := newTok * float64(l.ep) / float64(l.tp)
	return moeLoad{touched: math.Min(1, s.expertFraction(group)*expertImbalance), imbalance: expertImbalance,
		perExpert: perExpert(group) * expertImbalance}
}

// groupedGEMMEfficiency is the routed experts' grouped GEMMs' throughput
// relative to a dense GEMM's when each expert multiplies perExpert tokens.
func groupedGEMMEfficiency(perExpert float64) float64 {
	return perExpert / (perExpert + moeHalfTokens)
}

// moeLayersPerStage is the MoE layers of the most loaded pipeline stage.
func (s shape) moeLayersPerStage(pp int) float64 {
	c := s.cfg
	if !c.IsMoE() || c.NumLayers == 0 {
		return 0
	}
	moeLayers := float64(s.expertParams) / float64(max(1, s.params.OneExpert)) / float64(max(1, c.NumExperts))
	return math.Ceil(moeLayers * s.stageFraction(pp))
}

// forward times one forward pass of a replica over `tokens` new tokens per
// sequence for `batch` sequences that already hold `ctx` tokens of context.
// Pipeline stages run one after another (latency view).
func (s shape) forward(h hw, r Request, l layout, batch, tokens, ctx int) phase {
	c := s.cfg
	newTok := float64(batch * tokens)
	stage := s.stageFraction(l.pp)
	tp := float64(l.tp)

	// Weight traffic: dense blocks, the experts the batch touches, the head.
	wB := r.Precision.BytesPerElement()
	dense := (s.blockParams - s.expertParams) * wB * stage / tp
	mo := s.moe(l, newTok)
	experts := s.expertParams * wB * stage / float64(l.expertShards()) * mo.touched
	head := s.headParams * 2 / float64(l.pp) / tp // on the last stage
	if s.wt != nil {
		dense, experts, head = s.wt.traffic(s, l, mo.touched)
	}
	weightBytes := dense + experts + head
	// KV traffic: read the context, write the new tokens.
	kvBytes := float64(batch) * (s.kvBytesPerSeq(ctx, r.KVPrecision, l) + s.kvBytesPerSeq(tokens, r.KVPrecision, l))
	actBytes := newTok * float64(c.HiddenSize) * 2 * 4 * float64(s.layersPerStage(l.pp)) / tp
	bytes := weightBytes + kvBytes + actBytes

	// FLOPs: 2 per active parameter per token, logits for the last token of
	// each sequence, attention over the context (causal within new tokens).
	// The routed experts' share runs as grouped GEMMs, on the busiest
	// expert-parallel rank.
	attnDim := float64(c.NumHeads * c.HeadDim)
	if c.IsMLA() {
		attnDim = float64(c.NumHeads * (c.QKNopeHeadDim + c.QKRopeHeadDim + c.VHeadDim) / 2)
	}
	layers := float64(s.layersPerStage(l.pp))
	attnFlops := 4 * layers * attnDim * float64(batch) * (float64(tokens)*float64(ctx) + float64(tokens)*float64(tokens)/2)
	denseFlops := 2*(s.activeBlockParams-s.routedActiveParams)*stage*newTok + 2*s.headParams*float64(batch)/float64(l.pp) + attnFlops
	expertFlops := 2 * s.routedActiveParams * stage * newTok * mo.imbalance
	flops := (denseFlops + expertFlops) / tp

	ph := phase{flops: flops, bytes: bytes}
	if expertFlops > 0 {
		expertFlops /= groupedGEMMEfficiency(mo.perExpert)
	}
	ph.computeS = (denseFlops + expertFlops) / tp / h.peak
	ph.memoryS = bytes / h.bw
	// Tensor parallelism: two all-reduces of the activations per layer;
	// expert parallelism across replicas: the tokens' dispatch to their
	// experts and the results' return, all-to-all (the bytes per rank of
	// an all-gather).
	tl := tpLink(h.gpu, l.tp)
	ph.tpLinkKind = tl.kind
	ph.commS = 2 * layers * allReduceTime(newTok*float64(c.HiddenSize)*2, l.tp, tl)
	if l.ep > l.tp {
		a2a := newTok / tp * float64(c.NumExpertsPerToken) * float64(c.HiddenSize) * 2
		ph.commS += 2 * s.moeLayersPerStage(l.pp) * allGatherTime(a2a, l.ep, groupLink(h.gpu, l.ep))
	}
	ph.overheadS = layers * layerLaunchOverheadS
	stageTime := math.Max(ph.computeS, ph.memoryS) + ph.commS + ph.overheadS

	pl := ppLink(h.gpu, l)
	ph.ppLinkKind = pl.kind
	p2p := 0.0
	if l.pp > 1 {
		p2p = float64(l.pp-1) * (newTok*float64(c.HiddenSize)*2/pl.bytesPerS + pl.alpha)
	}
	ph.timeS = stageTime*float64(l.pp) + p2p
	ph.computeS *= float64(l.pp)
	ph.memoryS *= float64(l.pp)
	ph.commS = ph.commS*float64(l.pp) + p2p
	ph.bound = classify(ph.computeS, ph.memoryS, ph.commS)
	ph.intensity = flops / bytes
	ph.ridge = h.sup.peak / h.gpu.MemoryBandwidthBytesPerS
	return ph
}

// inferenceTimes returns the prefill of a batch, one decode step at the
// average context of the generation, and the end-to-end time of the batch.
func (s shape) inferenceTimes(h hw, r Request, l layout, batch int) (prefill, decode phase, total float64) {
	// Prefill runs in chunks of up to prefillChunkTokens tokens; each extra
	// chunk pays the per-layer fixed costs again.
	chunks := (batch*r.InputTokens + prefillChunkTokens - 1) / prefillChunkTokens
	prefill = s.forward(h, r, l, batch, r.InputTokens, 0)
	prefill.timeS += float64(chunks-1) * float64(s.layers) * layerLaunchOverheadS
	decode = s.forward(h, r, l, batch, 1, r.InputTokens+r.OutputTokens/2)
	total = prefill.timeS + float64(r.OutputTokens)*decode.timeS
	return prefill, decode, total
}

// train times one optimizer step.
type trainStep struct {
	stepS, computeS, bubbleS, tpS, ppS, dpS, epS, cpS float64
	modelFlopsPerStep                                 float64
	// a2aBytes is what each GPU sends all-to-all per step (the experts'
	// dispatch and combine, forward and backward).
	a2aBytes float64
	bound    Bound
}

// trainingFlopsPerToken is the model FLOPs per trained token: 6 per active
// parameter plus attention (PaLM appendix B), without recomputation.
func (s shape) trainingFlopsPerToken(seq int) float64 {
	c := s.cfg
	attnDim := float64(c.NumHeads * c.HeadDim)
	if c.IsMLA() {
		attnDim = float64(c.NumHeads * (c.QKNopeHeadDim + c.QKRopeHeadDim + c.VHeadDim) / 2)
	}
	return 6*(s.activeBlockParams+s.headParams) + 12*float64(c.NumLayers)*attnDim*float64(seq)
}

func (s shape) trainingStep(h hw, r Request, l layout) trainStep {
	c := s.cfg
	tokensPerStep := float64(r.GlobalBatch * r.Seq)
	modelFlops := s.trainingFlopsPerToken(r.Seq) * tokensPerStep
	hwFlops := modelFlops
	if r.Recompute == RecomputeFull {
		hwFlops *= 8.0 / 6.0 // the forward pass runs twice
	}
	n := float64(l.gpus())
	st := trainStep{modelFlopsPerStep: modelFlops}
	st.computeS = hwFlops / n / h.peak
	if r.Precision == FormatFP8 {
		// FP8 training runs the linear layers' matmuls in FP8; attention
		// (softmax(QK^T)V, FlashAttention) stays in BF16 (NVIDIA
		// Transformer Engine's FP8 recipe), so its FLOPs take BF16 time.
		attn := s.trainingFlopsPerToken(r.Seq) - s.trainingFlopsPerToken(0)
		if bf := newHW(h.gpu, FormatBF16, trainEfficiency, h.cal).slowed(h.overhead); bf.peak > 0 && h.peak > bf.peak {
			share := attn / s.trainingFlopsPerToken(r.Seq)
			st.computeS += hwFlops * share / n * (1/bf.peak - 1/h.peak)
		}
	}
	if s.routedActiveParams > 0 {
		// The routed experts run as grouped GEMMs over the micro-batches of
		// the expert-parallel group, and the busiest rank sets the pace.
		imb := 1.0
		if l.ep > 1 {
			imb = expertImbalance
		}
		perExpert := float64(r.Seq/l.c()*r.MicroBatch*max(1, l.ep)*c.NumExpertsPerToken) / float64(c.NumExperts) * imb
		share := 6 * s.routedActiveParams / s.trainingFlopsPerToken(r.Seq)
		st.computeS += st.computeS * share * (imb/groupedGEMMEfficiency(perExpert) - 1)
	}
	microBatches := max(1, r.GlobalBatch/(r.MicroBatch*l.dp))
	v := l.v()
	st.bubbleS = st.computeS * float64(l.pp-1) / float64(v*microBatches)

	layers := float64(s.layersPerStage(l.pp))
	actMsg := float64(r.Seq/l.c()*r.MicroBatch) * float64(c.HiddenSize) * 2
	collectives := 4.0 // two in forward, two in backward per layer
	if r.Recompute == RecomputeFull {
		collectives = 6
	}
	st.tpS = float64(microBatches) * layers * collectives * allReduceTime(actMsg, l.tp, tpLink(h.gpu, l.tp))
	if l.pp > 1 {
		pl := ppLink(h.gpu, l)
		st.ppS = float64(v*microBatches) * 2 * (actMsg/float64(l.tp)/pl.bytesPerS + pl.alpha)
	}
	if l.cp > 1 {
		// Ring attention: each rank passes its keys and values on cp-1
		// times in the forward pass, and keys, values and their gradients
		// in the backward pass; the exchange overlaps the attention it
		// feeds, so only what exceeds that attention counts.
		kvd := float64(c.NumKVHeads * c.HeadDim)
		if c.IsMLA() {
			kvd = float64(c.KVLoRARank + c.QKRopeHeadDim)
		}
		chunk := float64(r.Seq/l.c()*r.MicroBatch) * 2 * kvd * 2 / float64(max(1, min(l.tp, c.NumKVHeads)))
		cl := groupLink(h.gpu, l.tp*l.cp)
		if l.tp*l.cp > max(h.gpu.DomainSize, 1) {
			cl = networkLink()
		}
		comm := 3 * float64(l.cp-1) * (chunk/cl.bytesPerS + cl.alpha)
		// Causal attention of the rank's tokens against the whole sequence:
		// 2 matmuls of 2 FLOPs per multiply-add, half masked, backward twice
		// the forward.
		attnDim := float64(c.NumHeads * c.HeadDim)
		attn := 3 * 2 * attnDim * float64(r.Seq) * float64(r.Seq/l.c()*r.MicroBatch) / float64(l.tp) / h.peak
		st.cpS = float64(microBatches) * layers * math.Max(0, comm-attn)
	}
	if l.dp*l.c() > 1 {
		// Gradients are reduced over the data- and context-parallel ranks.
		dense, experts := s.trainingParamsPerGPU(l)
		gradBytes := (dense + experts) * 2
		dl := groupLink(h.gpu, l.gpus())
		if l.tp*l.pp*l.c() > 1 && l.gpus() > max(h.gpu.DomainSize, 1) {
			dl = networkLink()
		}
		t := allReduceTime(gradBytes, l.dp*l.c(), dl)
		if r.ZeRO == 3 {
			t *= 1.5 // parameters gathered again for the backward pass
		}
		// Gradient buckets overlap with the backward pass (two thirds of compute).
		st.dpS = math.Max(0, t-st.computeS*2/3)
	}
	if c.IsMoE() && l.ep > 1 {
		moeLayers := s.moeLayersPerStage(l.pp)
		a2a := float64(r.Seq*r.MicroBatch*c.NumExpertsPerToken) * float64(c.HiddenSize) * 2 / float64(l.tp)
		el := groupLink(h.gpu, l.tp*l.ep)
		st.epS = float64(microBatches) * moeLayers * 4 * allGatherTime(a2a, l.ep, el)
		st.a2aBytes = float64(microBatches) * moeLayers * 4 * a2a * float64(l.ep-1) / float64(l.ep)
		if l.pp > 1 {
			// With pipeline stages each rank has another micro-batch's
			// computation to hide the dispatch and combine behind
			// (DeepSeek-V3's DualPipe, Megatron-Core's overlapped 1F1B
			// all-to-all): only what exceeds it counts. DeepSeek put the
			// ratio unhidden at about 1:1 (arXiv:2412.19437 section 3.2.1).
			st.epS = math.Max(0, st.epS-st.computeS)
		}
	}
	st.stepS = st.computeS + st.bubbleS + st.tpS + st.ppS + st.dpS + st.epS + st.cpS
	st.bound = classify(st.computeS+st.bubbleS, 0, st.tpS+st.ppS+st.dpS+st.epS+st.cpS)
	return st
}

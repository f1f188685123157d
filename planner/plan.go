package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// Plan is the planner's answer: the model's summary, one candidate per GPU
// model (its best layout), ranked, and a recommendation.
type Plan struct {
	Model          ModelSummary    `json:"model"`
	Mode           Mode            `json:"mode"`
	Workload       Workload        `json:"workload"`
	Candidates     []Candidate     `json:"candidates"`
	Recommendation *Recommendation `json:"recommendation"`
}

// ModelSummary describes the planned model.
type ModelSummary struct {
	Name         string `json:"name"`
	ModelType    string `json:"model_type"`
	ParamsTotal  int64  `json:"params_total"`
	ParamsActive int64  `json:"params_active"`
	// ParamsActiveIncludesEmbeddings is always true: params_active counts
	// the embedding and head; params_active_excluding_embeddings does not.
	ParamsActiveIncludesEmbeddings bool  `json:"params_active_includes_embeddings"`
	ParamsActiveExcludingEmbedding int64 `json:"params_active_excluding_embeddings"`
	Layers                         int   `json:"layers"`
	HiddenSize                     int   `json:"hidden_size"`
	// KVCacheBytesPerToken is for the whole model at the KV precision asked for.
	KVCacheBytesPerToken int64 `json:"kv_cache_bytes_per_token"`
	// WeightsBytes and WeightsSource are the checkpoint's weight bytes
	// and where the planner took them from (quantization_config,
	// safetensors_index, safetensors_headers) when an inference plan
	// counts the checkpoint's weights rather than the precision's;
	// absent otherwise.
	WeightsBytes  int64  `json:"weights_bytes,omitempty"`
	WeightsSource string `json:"weights_source,omitempty"`
}

// Workload echoes the workload with defaults filled in.
type Workload struct {
	Precision      Format   `json:"precision"`
	KVPrecision    Format   `json:"kv_precision"`
	Batch          *int     `json:"batch"`
	BatchMax       bool     `json:"batch_max"`
	InputTokens    *int     `json:"input_tokens"`
	OutputTokens   *int     `json:"output_tokens"`
	Seq            *int     `json:"seq"`
	MicroBatch     *int     `json:"micro_batch"`
	GlobalBatch    *int     `json:"global_batch"`
	Tokens         *int64   `json:"tokens"`
	Optimizer      *string  `json:"optimizer"`
	ZeRO           *int     `json:"zero"`
	Recompute      *string  `json:"recompute"`
	LatencyTargetS *float64 `json:"latency_target_s"`
	TTFTTargetS    *float64 `json:"ttft_target_s"`
}

// MemoryBreakdown is a candidate's per-GPU memory on its most loaded GPU.
// Parts that do not apply to the mode are null.
type MemoryBreakdown struct {
	WeightsBytes     int64  `json:"weights_bytes"`
	KVCacheBytes     *int64 `json:"kv_cache_bytes"`
	ActivationsBytes int64  `json:"activations_bytes"`
	GradientsBytes   *int64 `json:"gradients_bytes"`
	OptimizerBytes   *int64 `json:"optimizer_bytes"`
	OverheadBytes    int64  `json:"overhead_bytes"`
	TotalBytes       int64  `json:"total_bytes"`
	CapacityBytes    int64  `json:"capacity_bytes"`
	// Reserve is the serving engine's overhead and the headroom its
	// memory cap keeps free (inference; null in training). A plan fits
	// when the total and the headroom fit the capacity.
	Reserve *Reserve `json:"reserve"`
}

// Candidate is one GPU model with its best layout and estimates. Fields that
// do not apply to the mode, or cannot be known (no price, no TDP), are null.
type Candidate struct {
	GPU           string `json:"gpu"`
	GPUs          int    `json:"gpus"`
	TP            int    `json:"tp"`
	PP            int    `json:"pp"`
	DP            int    `json:"dp"`
	EP            int    `json:"ep"`
	CP            int    `json:"cp"`             // context parallelism (training); 1 without
	VirtualStages *int   `json:"virtual_stages"` // interleaved pipeline chunks per GPU (training)
	// Recompute is the activation recomputation the training layout runs
	// with: the one asked for, or with auto, selective where it fits and
	// full where it does not.
	Recompute         *Recompute      `json:"recompute"`
	Fits              bool            `json:"fits"`
	PrecisionNative   bool            `json:"precision_native"`
	PrecisionFallback *Fallback       `json:"precision_fallback"`
	ComputePrecision  string          `json:"compute_precision"`
	Bound             *Bound          `json:"bound"`
	PrefillBound      *Bound          `json:"prefill_bound"`
	MemoryPerGPU      MemoryBreakdown `json:"memory_per_gpu"`

	MaxBatch *int `json:"max_batch"`
	// MaxContextTokens is the longest context (prompt plus output) that
	// the batch used can hold per sequence.
	MaxContextTokens *int `json:"max_context_tokens"`
	// KVCacheTokens is the KV cache the engine allocates per replica, in
	// tokens: all the memory under its cap that the weights, activations
	// and its reserve leave (vLLM's "GPU KV cache size").
	KVCacheTokens *int64 `json:"kv_cache_tokens"`
	// KVCacheTokensLow and KVCacheTokensHigh are what the engine may
	// really allocate, by how far the engine profile's KV figures were
	// off on its dev rows (docs/ACCURACY.md, "Engine logs"); admission
	// plans on the low end.
	KVCacheTokensLow    *int64   `json:"kv_cache_tokens_low"`
	KVCacheTokensHigh   *int64   `json:"kv_cache_tokens_high"`
	Batch               *int     `json:"batch"`
	OutputTokensPerS    *float64 `json:"output_tokens_per_s"`
	TimeToFirstTokenS   *float64 `json:"time_to_first_token_s"`
	TimePerOutputTokenS *float64 `json:"time_per_output_token_s"`
	// BatchPrefillS is the time to prefill the prompts of the whole batch.
	BatchPrefillS              *float64 `json:"batch_prefill_s"`
	DecodeArithmeticIntensity  *float64 `json:"decode_arithmetic_intensity"`
	PrefillArithmeticIntensity *float64 `json:"prefill_arithmetic_intensity"`
	RidgePoint                 float64  `json:"ridge_point"`

	TrainingTokensPerS *float64 `json:"training_tokens_per_s"`
	MFU                *float64 `json:"mfu"`
	StepTimeS          *float64 `json:"step_time_s"`
	TrainTimeS         *float64 `json:"train_time_s"`
	TrainCostUSD       *float64 `json:"train_cost_usd"`
	TrainEnergyJoules  *float64 `json:"train_energy_joules"`

	CostPerMillionTokensUSD *float64 `json:"cost_per_million_tokens_usd"`
	JoulesPerToken          *float64 `json:"joules_per_token"`
	PricePerHourUSD         *float64 `json:"price_per_hour_usd"`
	MeetsLatencyTarget      *bool    `json:"meets_latency_target"`
	Notes                   []string `json:"notes"`
	// Facility is the candidate's power, cooling and rack-space needs
	// (Request.Rack); null without a published TDP.
	Facility *Facility `json:"facility"`

	supported bool
	score     float64 // lower is better among fitting layouts of one GPU
	layout    layout  // the layout evaluated, for finish
}

// Layout writes the candidate's parallelism for people: TP, PP and DP
// joined by sep, then the context- and expert-parallel degrees where they
// are above 1 ("4x2x8 cp2 ep8").
func (c Candidate) Layout(sep string) string {
	out := fmt.Sprintf("%d%s%d%s%d", c.TP, sep, c.PP, sep, c.DP)
	if c.CP > 1 {
		out += fmt.Sprintf(" cp%d", c.CP)
	}
	if c.EP > 1 {
		out += fmt.Sprintf(" ep%d", c.EP)
	}
	return out
}

// Recommendation is the planner's pick and the scaling advice.
type Recommendation struct {
	GPU     string `json:"gpu"`
	GPUs    int    `json:"gpus"`
	Scaling string `json:"scaling"` // vertical or horizontal
	Reason  string `json:"reason"`
}

// Run plans req against the candidate GPUs (req.GPUs, or gpus when that is
// empty). It is pure and deterministic: the same request gives the same plan.
func Run(req Request, gpus []catalog.GPU) (*Plan, error) {
	r, err := req.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(r.GPUs) > 0 {
		gpus = r.GPUs
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("%w: gpu: no candidate hardware", gpufleet.ErrInvalid)
	}
	s := newShape(r.Model)
	s.wt = newWeightTable(r, s)
	p := &Plan{Model: summary(r, s), Mode: r.Mode, Workload: workload(r)}
	if s.wt != nil {
		p.Model.WeightsBytes, p.Model.WeightsSource = int64(s.wt.total), s.wt.source
	}
	for _, g := range gpus {
		p.Candidates = append(p.Candidates, s.best(r, g))
	}
	rank(r, p.Candidates)
	p.Recommendation = recommend(r, s, p.Candidates)
	return p, nil
}

func summary(r Request, s shape) ModelSummary {
	return ModelSummary{
		Name: r.Model.Name, ModelType: r.Model.ModelType,
		ParamsTotal: s.params.Total, ParamsActive: s.params.Active,
		ParamsActiveIncludesEmbeddings: true,
		ParamsActiveExcludingEmbedding: s.params.ActiveExcludingEmbeddings,
		Layers:                         r.Model.NumLayers, HiddenSize: r.Model.HiddenSize,
		KVCacheBytesPerToken: r.Model.KVCacheBytesPerToken(r.KVPrecision.BytesPerElement()),
	}
}

func workload(r Request) Workload {
	w := Workload{Precision: r.Precision, KVPrecision: r.KVPrecision}
	if r.Mode == Inference {
		w.InputTokens, w.OutputTokens, w.BatchMax = &r.InputTokens, &r.OutputTokens, r.BatchMax
		if r.Batch > 0 {
			w.Batch = &r.Batch
		}
		if r.LatencyTargetS > 0 {
			w.LatencyTargetS = &r.LatencyTargetS
		}
		if r.TTFTTargetS > 0 {
			w.TTFTTargetS = &r.TTFTTargetS
		}
		return w
	}
	opt, rc := string(r.Optimizer), string(r.Recompute)
	w.Seq, w.MicroBatch, w.GlobalBatch, w.Tokens = &r.Seq, &r.MicroBatch, &r.GlobalBatch, &r.Tokens
	w.Optimizer, w.ZeRO, w.Recompute = &opt, &r.ZeRO, &rc
	return w
}

// powersOfTwo lists 1, 2, 4, ... up to n.
func powersOfTwo(n int) []int {
	var out []int
	for v := 1; v <= n; v *= 2 {
		out = append(out, v)
	}
	return out
}

// maxTP is the widest tensor parallelism a GPU model supports well: its
// NVLink domain, or one host over PCIe.
func maxTP(g catalog.GPU) int { return max(g.DomainSize, gpusPerHost) }

// layouts lists the ways to split the model over n GPUs, tensor parallelism
// widest first inside the domain (then fewer pipeline stages).
func (s shape) layouts(r Request, g catalog.GPU, n int) []layout {
	var out []layout
	for _, tp := range slices.Backward(powersOfTwo(min(n, maxTP(g)))) {
		if r.TP > 0 && tp != r.TP {
			continue
		}
		if s.cfg.NumHeads%tp != 0 {
			continue
		}
		for pp := 1; tp*pp <= n; pp++ {
			if n%(tp*pp) != 0 || pp > s.layers {
				continue
			}
			if r.PP > 0 && pp != r.PP {
				continue
			}
			for _, cp := range s.contextDegrees(r, n/(tp*pp)) {
				dp := n / (tp * pp * cp)
				if r.DP > 0 && dp != r.DP {
					continue
				}
				if r.Mode == Inference && r.GPUCount == 0 && r.DP == 0 && dp != max(1, r.EP/tp) {
					continue
				}
				if r.Mode == Training && r.GlobalBatch < r.MicroBatch*dp {
					continue
				}
				for _, ep := range s.expertDegrees(r, tp, dp) {
					l := layout{tp: tp, pp: pp, dp: dp, ep: ep, cp: cp}
					out = append(out, l)
					if r.Mode == Training {
						if v := s.virtualStages(r, l); v > 1 {
							l.vs = v
							out = append(out, l)
						}
					}
				}
			}
		}
	}
	// Fewer pipeline stages first, then wider tensor parallelism.
	slices.SortStableFunc(out, func(a, b layout) int { return cmp.Compare(a.pp, b.pp) })
	return out
}

// contextDegrees are the context-parallel degrees to try with rest GPUs
// left after tensor and pipeline parallelism: the one asked for, else 1
// and, for training sequences of cpMinSeq tokens or more, the powers of
// two up to 16 that divide rest and split the sequence into 2 x cp
// chunks.
func (s shape) contextDegrees(r Request, rest int) []int {
	if r.CP > 0 {
		if rest%r.CP != 0 {
			return nil
		}
		return []int{r.CP}
	}
	out := []int{1}
	if r.Mode != Training || r.Seq < cpMinSeq {
		return out
	}
	for cp := 2; cp <= min(16, rest); cp *= 2 {
		if rest%cp == 0 && r.Seq%(2*cp) == 0 {
			out = append(out, cp)
		}
	}
	return out
}

// expertDegrees are the expert-parallel degrees to try for a layout of
// tp and dp: the one asked for where it is valid, else 1 and every power
// of two that divides the expert count and, in training, dp; in inference
// tp times a power of two dividing dp (whole experts over one replica's
// GPUs, or over several replicas').
func (s shape) expertDegrees(r Request, tp, dp int) []int {
	if !s.cfg.IsMoE() || s.cfg.NumExperts <= 0 {
		return []int{1}
	}
	var out []int
	add := func(ep int) {
		if s.cfg.NumExperts%ep == 0 && (r.EP == 0 || ep == r.EP) {
			out = append(out, ep)
		}
	}
	if r.EP <= 1 {
		out = append(out, 1)
	}
	for m := 1; m <= dp; m *= 2 {
		if dp%m != 0 {
			continue
		}
		if r.Mode == Training && m > 1 {
			add(m)
		}
		if r.Mode == Inference && tp*m > 1 {
			add(tp * m)
		}
	}
	return out
}

// counts lists the GPU counts to try: the one asked for, or powers of two.
func counts(r Request) []int {
	if r.GPUCount > 0 {
		return []int{r.GPUCount}
	}
	base := 1
	if r.DP > 0 {
		base = r.DP
	}
	var out []int
	for n := max(base, max(r.TP, 1)*max(r.PP, 1)*max(r.DP, 1)*max(r.CP, 1), r.EP); n <= r.MaxGPUs; n *= 2 {
		out = append(out, n)
	}
	return out
}

// best finds the best layout of g: at the given count the fitting layout
// with the best score; without a count, the smallest count that fits.
func (s shape) best(r Request, g catalog.GPU) Candidate {
	var fallback *Candidate
	for _, n := range counts(r) {
		if avail, ok := r.Available[g.ID]; ok && n > avail {
			break
		}
		var bestC *Candidate
		for _, l := range s.layouts(r, g, n) {
			c := s.evaluate(r, g, l)
			if !c.Fits {
				if fallback == nil || c.MemoryPerGPU.TotalBytes < fallback.MemoryPerGPU.TotalBytes {
					cc := c
					fallback = &cc
				}
				continue
			}
			if bestC == nil || c.score < bestC.score {
				cc := c
				bestC = &cc
			}
		}
		if bestC != nil {
			return s.finish(r, g, *bestC)
		}
	}
	if fallback == nil {
		c := Candidate{GPU: g.ID, Notes: []string{"no valid layout: tensor parallelism must divide the attention heads and fit the NVLink domain"}}
		c.MemoryPerGPU.CapacityBytes = g.MemoryBytes
		return c
	}
	return s.finish(r, g, *fallback)
}

func ptr[T any](v T) *T { return &v }

// evaluate estimates one layout of one GPU model.
func (s shape) evaluate(r Request, g catalog.GPU, l layout) Candidate {
	c := Candidate{GPU: g.ID, GPUs: l.gpus(), TP: l.tp, PP: l.pp, DP: l.dp, EP: l.ep, CP: l.c(), PricePerHourUSD: g.PricePerHourUSD}
	h := hwFor(r, g)
	c.PrecisionNative = h.sup.native
	c.ComputePrecision = string(h.sup.computeP)
	c.supported = h.sup.fallback != FallbackUnsupported
	if !h.sup.native {
		c.PrecisionFallback = ptr(h.sup.fallback)
	}
	if h.sup.peak > 0 {
		c.RidgePoint = round(h.sup.peak/g.MemoryBandwidthBytesPerS, 1)
	}
	if r.Mode == Training {
		c.VirtualStages = ptr(l.v())
		s.evaluateTraining(r, h, l, &c)
	} else {
		s.evaluateInference(r, h, l, &c)
	}
	c.layout = l
	return c
}

// hwFor is g with the mode's efficiency, under its mechanism's overhead.
func hwFor(r Request, g catalog.GPU) hw {
	eff := computeEfficiency
	if r.Mode == Training {
		eff = trainEfficiency
	}
	return newHW(g, r.Precision, eff, r.calibrationFor(g.ID)).slowed(r.Overhead[g.ID])
}

// finish adds what only the chosen layout of a GPU model needs: the
// longest context its batch holds, the notes and the facility check.
func (s shape) finish(r Request, g catalog.GPU, c Candidate) Candidate {
	l := c.layout
	h := hwFor(r, g)
	if r.Mode == Inference && c.Batch != nil {
		c.MaxContextTokens = ptr(s.maxContext(r, *c.Batch, l, newEngineGPU(r, g, l.tp)))
	}
	if rv := c.MemoryPerGPU.Reserve; rv != nil {
		rv.ProfileSizedBy = profileSizedBy(r, g)
	}
	c.Notes = append(c.Notes, s.notes(r, h, l, &c)...)
	if n := s.publishedNote(r, g, c); n != "" {
		c.Notes = append(c.Notes, n)
	}
	if n := h.cal.note(h.sup.computeP); n != "" {
		c.Notes = append(c.Notes, n)
	}
	c.Facility = facility(r, g, &c)
	return c
}

func (s shape) evaluateInference(r Request, h hw, l layout, c *Candidate) {
	g := h.gpu
	e := newEngineGPU(r, g, l.tp)
	mb := s.maxBatch(r, l, e)
	if r.MaxNumSeqs > 0 {
		mb = min(mb, r.MaxNumSeqs) // the engine runs no more at once
	}
	c.MaxBatch = ptr(mb)
	kv := s.kvCacheTokens(r, l, e)
	c.KVCacheTokens = ptr(kv)
	low, high := r.engineProfile().kvRange(kv)
	c.KVCacheTokensLow, c.KVCacheTokensHigh = ptr(low), ptr(high)
	if r.KVLowEnd {
		// Plan on the low end: no more sequences at once than it holds.
		mb = min(mb, int(low/int64(r.InputTokens+r.OutputTokens)))
		c.MaxBatch = ptr(mb)
	}
	batch := r.Batch
	switch {
	case r.BatchMax:
		batch = max(mb, 1)
	case batch == 0 && r.LatencyTargetS > 0 && h.peak > 0 && c.supported:
		batch = s.batchForLatency(h, r, l, max(mb, 1))
	case batch == 0:
		batch = max(1, min(mb, defaultMaxSeqs))
	}
	c.Batch = ptr(batch)
	m := s.inferenceMemory(r, batch, l, e)
	c.MemoryPerGPU = MemoryBreakdown{
		WeightsBytes: m.WeightsBytes, KVCacheBytes: ptr(m.KVCacheBytes), ActivationsBytes: m.ActivationsBytes,
		OverheadBytes: m.OverheadBytes, TotalBytes: m.TotalBytes, CapacityBytes: m.CapacityBytes, Reserve: &m.Reserve,
	}
	// An engine whose KV cache cannot hold one max_model_len sequence
	// refuses to start (vLLM's "max seq len ... is larger than the
	// maximum number of tokens that can be stored in KV cache").
	need := int64(r.MaxModelLen)
	if r.KVLowEnd {
		need = max(need, int64(batch*(r.InputTokens+r.OutputTokens)))
		kv = low
	}
	c.Fits = m.fits() && kv >= need
	if !c.supported || h.peak == 0 {
		c.score = math.Inf(1)
		return
	}
	prefill, decode, total := s.inferenceTimes(h, r, l, batch)
	tps := float64(l.dp) * float64(batch) * float64(r.OutputTokens) / total
	c.OutputTokensPerS = ptr(round(tps, 1))
	// Time to first token is one request's prompt on the replica; a burst
	// of a whole batch waits for all the prompts (BatchPrefillS).
	single, _, _ := s.inferenceTimes(h, r, l, 1)
	ttft := single.timeS + firstTokenOverheadS
	c.TimeToFirstTokenS = ptr(round(ttft, 5))
	c.BatchPrefillS = ptr(round(prefill.timeS, 4))
	c.TimePerOutputTokenS = ptr(round(decode.timeS, 5))
	c.Bound, c.PrefillBound = ptr(decode.bound), ptr(single.bound)
	c.DecodeArithmeticIntensity = ptr(round(decode.intensity, 2))
	c.PrefillArithmeticIntensity = ptr(round(single.intensity, 1))
	if g.PricePerHourUSD != nil {
		c.CostPerMillionTokensUSD = ptr(round(*g.PricePerHourUSD*float64(l.gpus())/3600/tps*1e6, 4))
	}
	if g.TDPWatts != nil {
		c.JoulesPerToken = ptr(round(*g.TDPWatts*averagePowerFraction*float64(l.gpus())/tps, 4))
	}
	meets := (r.LatencyTargetS == 0 || decode.timeS <= r.LatencyTargetS) && (r.TTFTTargetS == 0 || ttft <= r.TTFTTargetS)
	if r.LatencyTargetS > 0 || r.TTFTTargetS > 0 {
		c.MeetsLatencyTarget = ptr(meets)
	}
	// Within one GPU model: layouts that meet the target first, then the
	// highest throughput for the GPUs spent, then the fewest GPUs.
	c.score = -tps / float64(l.gpus())
	if !meets {
		c.score += 1e12
	}
}

func (s shape) evaluateTraining(r Request, h hw, l layout, c *Candidate) {
	g := h.gpu
	if r.Recompute == RecomputeAuto {
		r.Recompute = RecomputeSelective
		if s.trainingMemory(r, l, g.MemoryBytes).TotalBytes > g.MemoryBytes {
			r.Recompute = RecomputeFull
		}
	}
	c.Recompute = ptr(r.Recompute)
	m := s.trainingMemory(r, l, g.MemoryBytes)
	c.MemoryPerGPU = MemoryBreakdown{
		WeightsBytes: m.WeightsBytes, ActivationsBytes: m.ActivationsBytes,
		GradientsBytes: ptr(m.GradientsBytes), OptimizerBytes: ptr(m.OptimizerBytes),
		OverheadBytes: m.OverheadBytes, TotalBytes: m.TotalBytes, CapacityBytes: m.CapacityBytes,
	}
	c.Fits = m.TotalBytes <= g.MemoryBytes
	if !c.supported || h.peak == 0 {
		c.score = math.Inf(1)
		return
	}
	st := s.trainingStep(h, r, l)
	tokensPerStep := float64(r.GlobalBatch * r.Seq)
	tps := tokensPerStep / st.stepS
	n := float64(l.gpus())
	c.TrainingTokensPerS = ptr(round(tps, 1))
	c.StepTimeS = ptr(round(st.stepS, 4))
	c.MFU = ptr(round(st.modelFlopsPerStep/(st.stepS*n*h.sup.peak), 4))
	trainS := float64(r.Tokens) / tps
	c.TrainTimeS = ptr(round(trainS, 0))
	c.Bound = ptr(st.bound)
	if g.PricePerHourUSD != nil {
		c.TrainCostUSD = ptr(round(*g.PricePerHourUSD*n*trainS/3600, 2))
		c.CostPerMillionTokensUSD = ptr(round(*g.PricePerHourUSD*n/3600/tps*1e6, 4))
	}
	if g.TDPWatts != nil {
		c.TrainEnergyJoules = ptr(round(*g.TDPWatts*averagePowerFraction*n*trainS, 0))
		c.JoulesPerToken = ptr(round(*g.TDPWatts*averagePowerFraction*n/tps, 4))
	}
	c.score = st.stepS
}

// batchForLatency is the largest batch up to limit whose time per output
// token meets the latency target (1 when none does). Decode time grows
// with the batch, so it bisects.
func (s shape) batchForLatency(h hw, r Request, l layout, limit int) int {
	return max(1, largest(limit, func(b int) bool {
		return s.forward(h, r, l, b, 1, r.InputTokens+r.OutputTokens/2).timeS <= r.LatencyTargetS
	}))
}

// rank orders candidates: runnable and fitting first, then those meeting
// the latency target, then by cost per token (inference) or cost of the
// run (training), unknown costs last, then by speed and id.
func rank(r Request, cs []Candidate) {
	key := func(c Candidate) (int, float64, float64) {
		tier := 0
		switch {
		case !c.Fits || !c.supported:
			tier = 3
		case c.MeetsLatencyTarget != nil && !*c.MeetsLatencyTarget:
			tier = 2
		}
		cost := math.Inf(1)
		speed := 0.0
		if r.Mode == Training {
			if c.TrainCostUSD != nil {
				cost = *c.TrainCostUSD
			}
			if c.TrainingTokensPerS != nil {
				speed = *c.TrainingTokensPerS
			}
		} else {
			if c.CostPerMillionTokensUSD != nil {
				cost = *c.CostPerMillionTokensUSD
			}
			if c.OutputTokensPerS != nil {
				speed = *c.OutputTokensPerS
			}
		}
		if tier == 0 && math.IsInf(cost, 1) {
			tier = 1
		}
		return tier, cost, speed
	}
	slices.SortStableFunc(cs, func(a, b Candidate) int {
		ta, ca, sa := key(a)
		tb, cb, sb := key(b)
		return cmp.Or(cmp.Compare(ta, tb), cmp.Compare(ca, cb), cmp.Compare(sb, sa), cmp.Compare(a.GPU, b.GPU))
	})
}

// round rounds v to n decimals, so that output is stable and readable.
func round(v float64, n int) float64 {
	p := math.Pow(10, float64(n))
	return math.Round(v*p) / p
}

package model

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/gpufleet/gpufleet"
)

// WeightBytes is a checkpoint's weight storage in bytes, by where it sits:
// the embedding, the output head, and each transformer layer's dense part
// and routed experts. CheckpointWeights derives it from the config's
// quantization description.
type WeightBytes struct {
	Embedding float64 `json:"embedding"`
	Head      float64 `json:"head"` // 0 when tied to the embedding
	// Dense is per layer: attention, dense MLP, shared experts, router,
	// norms and biases (the final norm on the last layer). Experts is per
	// layer: the routed experts.
	Dense   []float64 `json:"dense"`
	Experts []float64 `json:"experts"`
	// QuantizedParams are the linear weights stored in a quantised
	// format; KeptParams every other parameter (16-bit).
	QuantizedParams int64 `json:"quantized_params"`
	KeptParams      int64 `json:"kept_params"`
	// SchemeParams are the quantised parameters of each of the
	// description's schemes, in its order.
	SchemeParams []int64 `json:"scheme_params"`
}

// MainScheme is the scheme that stores the most parameters, -1 when none
// does.
func (w WeightBytes) MainScheme() int {
	best := -1
	for i, n := range w.SchemeParams {
		if n > 0 && (best < 0 || n > w.SchemeParams[best]) {
			best = i
		}
	}
	return best
}

// Total is the weights' bytes, the tied head counted once.
func (w WeightBytes) Total() float64 {
	t := w.Embedding + w.Head
	for i := range w.Dense {
		t += w.Dense[i] + w.Experts[i]
	}
	return t
}

// keptBytes is the storage of a parameter kept unquantised: the
// checkpoints Parse reads keep them in bf16 or fp16.
const keptBytes = 2

// linear is one weight matrix of a layer: its name after the layer
// prefix, its shape, and how many of it the layer has (routed experts,
// named by expert 0).
type linear struct {
	suffix  string
	out, in int64
	count   int64
	expert  bool
}

// naming is a family's module names.
type naming struct {
	layers, embed, head string
}

func (c *Config) naming() naming {
	switch c.ModelType {
	case "gptj":
		return naming{"transformer.h.", "transformer.wte", "lm_head"}
	case "gpt_neox":
		return naming{"gpt_neox.layers.", "gpt_neox.embed_in", "embed_out"}
	}
	return naming{"model.layers.", "model.embed_tokens", "lm_head"}
}

// linears lists the weight matrices of layer i with the family's names.
// Routers, norms and biases are not listed: they stay 16-bit.
func (c *Config) linears(i int) []linear {
	h, a, kv, d := int64(c.HiddenSize), int64(c.NumHeads), int64(c.kvHeads()), int64(c.headDim())
	var out []linear
	add := func(name string, o, in int64) { out = append(out, linear{suffix: name, out: o, in: in, count: 1}) }
	switch {
	case c.IsMLA():
		rope, nope, vd := int64(c.QKRopeHeadDim), int64(c.QKNopeHeadDim), int64(c.VHeadDim)
		kvr, qr := int64(c.KVLoRARank), int64(c.QLoRARank)
		if qr > 0 {
			add("self_attn.q_a_proj", qr, h)
			add("self_attn.q_b_proj", a*(nope+rope), qr)
		} else {
			add("self_attn.q_proj", a*(nope+rope), h)
		}
		add("self_attn.kv_a_proj_with_mqa", kvr+rope, h)
		add("self_attn.kv_b_proj", a*(nope+vd), kvr)
		add("self_attn.o_proj", h, a*vd)
	case c.ModelType == "phi3":
		add("self_attn.qkv_proj", (a+2*kv)*d, h)
		add("self_attn.o_proj", h, a*d)
	case c.ModelType == "gpt_neox":
		add("attention.query_key_value", (a+2*kv)*d, h)
		add("attention.dense", h, a*d)
	case c.ModelType == "gptj":
		add("attn.q_proj", a*d, h)
		add("attn.k_proj", kv*d, h)
		add("attn.v_proj", kv*d, h)
		add("attn.out_proj", h, a*d)
	default:
		add("self_attn.q_proj", a*d, h)
		add("self_attn.k_proj", kv*d, h)
		add("self_attn.v_proj", kv*d, h)
		add("self_attn.o_proj", h, a*d)
	}
	mlp := func(prefix string, inter int64, gate, up, down string) {
		if c.GatedMLP {
			add(prefix+gate, inter, h)
		}
		add(prefix+up, inter, h)
		add(prefix+down, h, inter)
	}
	if !c.isMoELayer(i) {
		inter := int64(c.IntermediateSize)
		switch c.ModelType {
		case "phi3":
			add("mlp.gate_up_proj", 2*inter, h)
			add("mlp.down_proj", h, inter)
		case "gptj":
			mlp("mlp.", inter, "", "fc_in", "fc_out")
		case "gpt_neox":
			mlp("mlp.", inter, "", "dense_h_to_4h", "dense_4h_to_h")
		default:
			mlp("mlp.", inter, "gate_proj", "up_proj", "down_proj")
		}
		return out
	}
	experts := "mlp.experts.0."
	gate, up, down := "gate_proj", "up_proj", "down_proj"
	if c.ModelType == "mixtral" || c.ModelType == "minimax_m2" {
		experts, gate, up, down = "block_sparse_moe.experts.0.", "w1", "w3", "w2"
	}
	n := len(out)
	mlp(experts, int64(c.MoEIntermediateSize), gate, up, down)
	for j := n; j < len(out); j++ {
		out[j].count, out[j].expert = int64(c.NumExperts), true
	}
	if s := int64(c.SharedExpertIntermediateSize); s > 0 {
		prefix := "mlp.shared_experts."
		if c.ModelType == "qwen2_moe" {
			prefix = "mlp.shared_expert."
		}
		mlp(prefix, s, "gate_proj", "up_proj", "down_proj")
	}
	return out
}

// layerParams counts layer i's parameters as Params does.
func (c *Config) layerParams(i int) int64 {
	h := int64(c.HiddenSize)
	norm := h
	if c.LayerNorm {
		norm = 2 * h
	}
	per := int64(c.NormsPerLayer)
	if per <= 0 {
		per = 2
	}
	p := attentionParams[int64](c) + per*norm + int64(c.QKNormWeights)
	if c.IsMLA() {
		p += int64(c.KVLoRARank) + int64(c.QLoRARank)
	}
	if !c.isMoELayer(i) {
		return p + mlpParams[int64](c, c.IntermediateSize)
	}
	p += int64(c.NumExperts)*mlpParams[int64](c, c.MoEIntermediateSize) + h*int64(c.NumExperts)
	if c.RouterBias {
		p += int64(c.NumExperts)
	}
	if c.SharedExpertIntermediateSize > 0 {
		p += mlpParams[int64](c, c.SharedExpertIntermediateSize)
	}
	if c.SharedExpertGate {
		p += h
	}
	return p
}

// CheckpointWeights is the weight storage the config's quantization
// description gives, module by module: each linear layer in the scheme
// that targets it (with its scales, zero points and per-matrix extras)
// unless the description keeps it, everything else (embedding, norms,
// biases, routers, and the head unless the method quantises it) in 16
// bits. ok is false when the config has no description or one of a
// method Parse does not read.
//
// Parse derives them once and keeps them with the description; a Config
// changed since (or a Quantization built by hand) derives them anew.
func (c *Config) CheckpointWeights() (w WeightBytes, ok bool) {
	q := c.Quantization
	if q == nil || !q.Known || len(q.Schemes) == 0 {
		return w, false
	}
	if q.cache != nil && q.cacheKey == c.weightsKey() {
		w = *q.cache
		w.Dense, w.Experts, w.SchemeParams = slices.Clone(w.Dense), slices.Clone(w.Experts), slices.Clone(w.SchemeParams)
		return w, true
	}
	if !q.compiled {
		cp := *q
		if cp.check() != nil {
			return w, false
		}
		q = &cp
	}
	return c.deriveWeights(q), true
}

// weightsKey is what the derived weights depend on besides the
// description: the family's names and every count.
type weightsKey struct {
	modelType string
	params    Params
}

func (c *Config) weightsKey() weightsKey { return weightsKey{c.ModelType, c.Params()} }

// maxPatternWork bounds layers x linear layers x patterns that Parse
// lets a description cost (well under a second); real checkpoints are
// thousands of times below it.
const maxPatternWork = 1 << 20

// cacheWeights derives the weights of a parsed config once, refusing a
// description whose patterns would cost too much to match.
func (c *Config) cacheWeights() error {
	q := c.Quantization
	if q == nil || !q.Known || len(q.Schemes) == 0 {
		return nil
	}
	pats := len(q.ignore.res)
	for _, t := range q.targets {
		pats += len(t.res)
	}
	if work := int64(c.NumLayers) * 16 * int64(pats); work > maxPatternWork {
		return fmt.Errorf("%w: quantization_config: %d regular expressions over %d layers: at most %d pattern matches", gpufleet.ErrInvalid, pats, c.NumLayers, maxPatternWork)
	}
	w := c.deriveWeights(q)
	q.cache, q.cacheKey = &w, c.weightsKey()
	return nil
}

// deriveWeights counts the weights module by module; q is compiled.
func (c *Config) deriveWeights(q *Quantization) (w WeightBytes) {
	static := q.ActivationScheme == "static"
	nm := c.naming()
	p := c.Params()
	w.SchemeParams = make([]int64, len(q.Schemes))
	w.Embedding = float64(p.Embedding) * keptBytes
	w.KeptParams = p.Embedding
	if p.Head > 0 {
		h := int64(c.HiddenSize)
		k := -1
		if q.QuantizeHead {
			k = q.scheme(nm.head)
		}
		if k >= 0 {
			w.Head = q.Schemes[k].bytes(int64(c.VocabSize), h, static) + float64(p.Head-int64(c.VocabSize)*h)*keptBytes
			w.QuantizedParams += int64(c.VocabSize) * h
			w.SchemeParams[k] += int64(c.VocabSize) * h
			w.KeptParams += p.Head - int64(c.VocabSize)*h
		} else {
			w.Head = float64(p.Head) * keptBytes
			w.KeptParams += p.Head
		}
	}
	w.Dense = make([]float64, c.NumLayers)
	w.Experts = make([]float64, c.NumLayers)
	var name []byte
	for i := range c.NumLayers {
		prefix := nm.layers + strconv.Itoa(i) + "."
		rest := c.layerParams(i)
		for _, m := range c.linears(i) {
			name = append(append(name[:0], prefix...), m.suffix...)
			elems := m.out * m.in * m.count
			rest -= elems
			b := float64(elems) * keptBytes
			if k := q.scheme(string(name)); k >= 0 {
				b = q.Schemes[k].bytes(m.out, m.in, static) * float64(m.count)
				w.QuantizedParams += elems
				w.SchemeParams[k] += elems
			} else {
				w.KeptParams += elems
			}
			if m.expert {
				w.Experts[i] += b
			} else {
				w.Dense[i] += b
			}
		}
		w.Dense[i] += float64(rest) * keptBytes
		w.KeptParams += rest
	}
	final := int64(c.HiddenSize)
	if c.LayerNorm {
		final *= 2
	}
	if c.NumLayers > 0 {
		w.Dense[c.NumLayers-1] += float64(final) * keptBytes
	}
	w.KeptParams += final
	return w
}

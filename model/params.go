package model

import "math"

// number is what the counting code runs on: int64 for exact counts, float64
// for Parse's overflow check.
type number interface{ ~int64 | ~float64 }

// counts is Params before Active is summed, in either number type.
type counts[T number] struct {
	embedding, head, attention, denseMLP, shared, experts, oneExpert, norms, largest T
	// activeExperts is the top-k routed experts of every MoE layer.
	activeExperts T
}

func (n counts[T]) total() T {
	return n.embedding + n.head + n.attention + n.denseMLP + n.shared + n.experts + n.norms
}

// IsMoE reports whether at least one layer routes its MLP to experts.
func (c *Config) IsMoE() bool {
	if c.NumExperts <= 0 {
		return false
	}
	for i := range c.NumLayers {
		if c.isMoELayer(i) {
			return true
		}
	}
	return false
}

// IsMLA reports whether the model uses multi-head latent attention.
func (c *Config) IsMLA() bool { return c.KVLoRARank > 0 }

// isMoELayer says whether layer i is MoE. A Config with experts but no
// MoELayers (built by hand) is MoE on every layer.
func (c *Config) isMoELayer(i int) bool {
	if c.NumExperts <= 0 {
		return false
	}
	if c.MoELayers == nil {
		return true
	}
	return i < len(c.MoELayers) && c.MoELayers[i]
}

// IsSlidingLayer reports whether layer i attends through the sliding window.
// A Config with a window but no SlidingLayers (built by hand) slides on every
// layer, as Mistral v0.1 does.
func (c *Config) IsSlidingLayer(i int) bool {
	if c.SlidingWindow <= 0 {
		return false
	}
	if c.SlidingLayers == nil {
		return true
	}
	return i < len(c.SlidingLayers) && c.SlidingLayers[i]
}

// headDim is HeadDim, or hidden/heads for a hand-built Config that left it 0.
func (c *Config) headDim() int {
	if c.HeadDim > 0 || c.NumHeads <= 0 {
		return c.HeadDim
	}
	return c.HiddenSize / c.NumHeads
}

// kvHeads is NumKVHeads, or the head count (MHA) when 0.
func (c *Config) kvHeads() int {
	if c.NumKVHeads > 0 {
		return c.NumKVHeads
	}
	return c.NumHeads
}

// Params counts the parameters of c. Every matrix, bias and norm weight of
// the family is counted exactly: RMSNorm has h weights, LayerNorm 2h; the
// output head is counted once when tied (Head is then 0). MLA's latent norms
// (q_a_layernorm, kv_a_layernorm) count as Norms; DeepSeek-V3's MTP module is
// not counted. Rotary embeddings and Gemma's embedding scale are buffers, not
// parameters.
func (c *Config) Params() Params {
	n := count[int64](c)
	p := Params{
		Total:        n.total(),
		Embedding:    n.embedding,
		Head:         n.head,
		Attention:    n.attention,
		DenseMLP:     n.denseMLP,
		Shared:       n.shared,
		Experts:      n.experts,
		OneExpert:    n.oneExpert,
		Norms:        n.norms,
		LargestLayer: n.largest,
	}
	p.ActiveExcludingEmbeddings = n.attention + n.denseMLP + n.shared + n.activeExperts + n.norms
	p.Active = p.ActiveExcludingEmbeddings + n.embedding + n.head
	return p
}

// count does the counting of Params in T.
func count[T number](c *Config) counts[T] {
	var n counts[T]
	h, v := T(c.HiddenSize), T(c.VocabSize)
	n.embedding = v * h
	if !c.TieWordEmbeddings {
		n.head = v * h
		if c.LMHeadBias {
			n.head += v
		}
	}

	attn := attentionParams[T](c)
	norm := h
	if c.LayerNorm {
		norm = 2 * h
	}
	perLayer := T(c.NormsPerLayer)
	if c.NormsPerLayer <= 0 {
		perLayer = 2
	}
	layerNorms := perLayer * norm
	if c.IsMLA() {
		layerNorms += T(c.KVLoRARank) + T(c.QLoRARank) // RMSNorms on the latents
	}
	layerNorms += T(c.QKNormWeights)

	dense := mlpParams[T](c, c.IntermediateSize)
	var routed, sharedAndRouter, topK T
	if c.NumExperts > 0 {
		n.oneExpert = mlpParams[T](c, c.MoEIntermediateSize)
		routed = T(c.NumExperts) * n.oneExpert
		topK = T(c.NumExpertsPerToken) * n.oneExpert
		sharedAndRouter = h * T(c.NumExperts)
		if c.RouterBias {
			sharedAndRouter += T(c.NumExperts)
		}
		if c.SharedExpertIntermediateSize > 0 {
			sharedAndRouter += mlpParams[T](c, c.SharedExpertIntermediateSize)
		}
		if c.SharedExpertGate {
			sharedAndRouter += h
		}
	}

	for i := range c.NumLayers {
		layer := attn + layerNorms
		n.attention += attn
		n.norms += layerNorms
		if c.isMoELayer(i) {
			n.experts += routed
			n.shared += sharedAndRouter
			n.activeExperts += topK
			layer += routed + sharedAndRouter
		} else {
			n.denseMLP += dense
			layer += dense
		}
		n.largest = max(n.largest, layer)
	}
	n.norms += norm // final norm
	return n
}

// attentionParams counts one layer's attention, biases included.
func attentionParams[T number](c *Config) T {
	h, a := T(c.HiddenSize), T(c.NumHeads)
	if c.IsMLA() {
		rope, nope, vd := T(c.QKRopeHeadDim), T(c.QKNopeHeadDim), T(c.VHeadDim)
		kvr, qr := T(c.KVLoRARank), T(c.QLoRARank)
		var p T
		if c.QLoRARank > 0 {
			p = h*qr + qr*a*(nope+rope) // q_a_proj, q_b_proj
		} else {
			p = h * a * (nope + rope) // q_proj
		}
		p += h*(kvr+rope) + kvr*a*(nope+vd) // kv_a_proj_with_mqa, kv_b_proj
		p += a * vd * h                     // o_proj
		if c.AttentionBias {
			p += kvr + rope
			if c.QLoRARank > 0 {
				p += qr
			}
		}
		if c.AttentionOutputBias {
			p += h
		}
		return p
	}
	d, kv := T(c.headDim()), T(c.kvHeads())
	p := 2*h*a*d + 2*h*kv*d // q and o, k and v
	if c.AttentionBias {
		p += a*d + 2*kv*d
	}
	if c.AttentionOutputBias {
		p += h
	}
	return p
}

// mlpParams counts one MLP (or expert) of the given intermediate size.
func mlpParams[T number](c *Config, inter int) T {
	h, i := T(c.HiddenSize), T(inter)
	if c.GatedMLP {
		p := 3 * h * i
		if c.MLPBias {
			p += 2*i + h
		}
		return p
	}
	p := 2 * h * i
	if c.MLPBias {
		p += i + h
	}
	return p
}

// kvElementsPerToken is the number of cached elements one token adds to
// layer i: K and V of every KV head, or MLA's latent and rope key.
func (c *Config) kvElementsPerToken() int64 {
	if c.IsMLA() {
		return int64(c.KVLoRARank + c.QKRopeHeadDim)
	}
	return 2 * int64(c.kvHeads()) * int64(c.headDim())
}

// KVCacheBytesPerToken is the KV cache one token adds to the whole model at
// bytesPerElement bytes per element (2 for BF16, 1 for FP8), with no window
// cap: 2*L*kv*d*B for MHA/GQA/MQA, and L*(kv_lora_rank+qk_rope_head_dim)*B
// for MLA, which caches the compressed latent and the rope key only, as vLLM
// and SGLang do.
func (c *Config) KVCacheBytesPerToken(bytesPerElement float64) int64 {
	return int64(math.Round(float64(int64(c.NumLayers)*c.kvElementsPerToken()) * bytesPerElement))
}

// KVCacheBytes is the KV cache of one sequence of contextTokens tokens at
// bytesPerElement bytes per element. Sliding-window layers hold at most
// min(contextTokens, SlidingWindow) tokens; the rest hold all of them. A
// context of zero or less needs nothing.
func (c *Config) KVCacheBytes(contextTokens int64, bytesPerElement float64) int64 {
	if contextTokens <= 0 {
		return 0
	}
	var elements float64
	perToken := float64(c.kvElementsPerToken())
	for i := range c.NumLayers {
		tokens := contextTokens
		if c.IsSlidingLayer(i) {
			tokens = min(tokens, int64(c.SlidingWindow))
		}
		elements += perToken * float64(tokens)
	}
	return int64(math.Round(elements * bytesPerElement))
}

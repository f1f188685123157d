package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// families maps each supported model_type to its parser. A parser reads the
// family's fields into c and reports errors through f.
var families = map[string]func(c *Config, f *fields){
	"llama":       parseLlama,
	"mistral":     parseMistral,
	"mixtral":     parseMixtral,
	"qwen2":       parseQwen2,
	"qwen2_moe":   parseQwen2MoE,
	"qwen3":       parseQwen3,
	"qwen3_moe":   parseQwen3MoE,
	"minimax_m2":  parseMiniMaxM2,
	"kimi_k2":     parseDeepSeek,
	"gemma":       parseGemma,
	"gemma2":      parseGemma2,
	"phi3":        parsePhi3,
	"gptj":        parseGPTJ,
	"gpt_neox":    parseGPTNeoX,
	"deepseek_v2": parseDeepSeek,
	"deepseek_v3": parseDeepSeek,
}

// SupportedModelTypes returns the model_type values Parse accepts, sorted.
func SupportedModelTypes() []string {
	types := make([]string, 0, len(families))
	for t := range families {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}

// Parse reads a Hugging Face config.json of a supported family into a
// Config named name. Fields the family derives are filled in: head_dim is
// hidden/heads when absent, num_key_value_heads is the head count when absent,
// SlidingLayers and MoELayers have one entry per layer (nil when the model has
// no sliding-window or MoE layers).
//
// An unknown model_type gives an error wrapping gpufleet.ErrUnsupported that
// lists the supported ones; malformed JSON and missing, mistyped or
// inconsistent fields give errors wrapping gpufleet.ErrInvalid that name the
// field.
func Parse(name string, data []byte) (*Config, error) {
	c, err := parse(name, data)
	if err != nil {
		return nil, fmt.Errorf("parse model %q: %w", name, err)
	}
	return c, nil
}

func parse(name string, data []byte) (*Config, error) {
	f, err := decodeObject(data)
	if err != nil {
		return nil, err
	}
	mt := f.str("model_type")
	if f.err != nil {
		return nil, f.err
	}
	if mt == "" {
		return nil, fmt.Errorf("%w: model_type: missing", gpufleet.ErrInvalid)
	}
	family, ok := families[mt]
	if !ok {
		return nil, fmt.Errorf("%w: model_type %s (supported: %s)",
			gpufleet.ErrUnsupported, gpufleet.Quote(mt), strings.Join(SupportedModelTypes(), ", "))
	}
	c := &Config{Name: name, ModelType: mt}
	family(c, f)
	readQuantization(c, f)
	if f.err != nil {
		return nil, f.err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := c.cacheWeights(); err != nil {
		return nil, err
	}
	return c, nil
}

// readStandard reads the Llama-style schema shared by most families and
// derives head_dim and the KV head count.
func readStandard(c *Config, f *fields, tieByDefault bool) {
	c.HiddenSize = f.positive("hidden_size")
	c.NumLayers = f.positive("num_hidden_layers")
	c.NumHeads = f.positive("num_attention_heads")
	c.NumKVHeads = f.optPositive("num_key_value_heads", c.NumHeads)
	c.HeadDim = f.optPositive("head_dim", 0)
	c.IntermediateSize = f.positive("intermediate_size")
	c.VocabSize = f.positive("vocab_size")
	c.MaxPositionEmbeddings = f.optPositive("max_position_embeddings", 0)
	c.TieWordEmbeddings = f.boolean("tie_word_embeddings", tieByDefault)
	c.GatedMLP = true
	deriveHeads(c, f, "num_attention_heads", "num_key_value_heads", "head_dim")
}

// deriveHeads fills head_dim from hidden/heads when absent and checks that
// KV heads divide query heads. The key names are the family's.
func deriveHeads(c *Config, f *fields, headsKey, kvKey, headDimKey string) {
	if f.err != nil {
		return
	}
	if c.NumLayers > maxLayers {
		f.fail("num_hidden_layers", "%d layers is more than the %d supported", c.NumLayers, maxLayers)
		return
	}
	if c.HeadDim == 0 {
		if c.HiddenSize%c.NumHeads != 0 {
			f.fail(headsKey, "%d heads do not divide hidden size %d and %s is absent", c.NumHeads, c.HiddenSize, headDimKey)
			return
		}
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if c.NumKVHeads > c.NumHeads || c.NumHeads%c.NumKVHeads != 0 {
		f.fail(kvKey, "%d key/value heads do not divide %d attention heads", c.NumKVHeads, c.NumHeads)
	}
}

// readSliding reads sliding_window: absent gives def, null gives none.
func readSliding(c *Config, f *fields, def int) {
	if _, present := f.m["sliding_window"]; !present {
		c.SlidingWindow = def
		return
	}
	c.SlidingWindow = f.optNonNegative("sliding_window", 0)
}

// allLayers returns a slice of n copies of v.
func allLayers(n int, v bool) []bool {
	s := make([]bool, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// slidingFromLayerTypes applies a layer_types array ("sliding_attention",
// "full_attention"), which newer transformers releases write. It reports
// whether the array was present.
func slidingFromLayerTypes(c *Config, f *fields) bool {
	types := f.list("layer_types")
	if types == nil || f.err != nil {
		return false
	}
	if len(types) != c.NumLayers {
		f.fail("layer_types", "has %d entries for %d layers", len(types), c.NumLayers)
		return true
	}
	sliding := make([]bool, c.NumLayers)
	any := false
	for i, t := range types {
		s, _ := t.(string)
		switch s {
		case "sliding_attention":
			sliding[i], any = true, true
		case "full_attention":
		default:
			f.fail("layer_types", "element %d: unknown layer type %v", i, t)
			return true
		}
	}
	if any && c.SlidingWindow > 0 {
		c.SlidingLayers = sliding
	}
	return true
}

// parseLlama reads LlamaForCausalLM: attention_bias puts biases on q, k, v
// and o; mlp_bias on the three MLP matrices.
func parseLlama(c *Config, f *fields) {
	readStandard(c, f, false)
	c.AttentionBias = f.boolean("attention_bias", false)
	c.AttentionOutputBias = c.AttentionBias
	c.MLPBias = f.boolean("mlp_bias", false)
}

// parseMistral reads MistralForCausalLM. transformers defaults an absent
// sliding_window to 4096; null means full attention. Every layer slides.
func parseMistral(c *Config, f *fields) {
	readStandard(c, f, false)
	readSliding(c, f, 4096)
	if c.SlidingWindow > 0 {
		c.SlidingLayers = allLayers(c.NumLayers, true)
	}
}

// parseMixtral reads MixtralForCausalLM: every layer is MoE with
// num_local_experts experts of intermediate_size and no shared expert.
func parseMixtral(c *Config, f *fields) {
	readStandard(c, f, false)
	readSliding(c, f, 0)
	if c.SlidingWindow > 0 {
		c.SlidingLayers = allLayers(c.NumLayers, true)
	}
	c.NumExperts = f.positive("num_local_experts")
	c.NumExpertsPerToken = f.positive("num_experts_per_tok")
	c.MoEIntermediateSize = c.IntermediateSize
	c.MoELayers = allLayers(c.NumLayers, true)
}

// qwenSliding applies Qwen2's rule: with use_sliding_window, layers from
// max_window_layers on use the window.
func qwenSliding(c *Config, f *fields) {
	readSliding(c, f, 4096)
	use := f.boolean("use_sliding_window", false)
	first := f.optNonNegative("max_window_layers", c.NumLayers)
	if !use {
		c.SlidingWindow = 0
	}
	if slidingFromLayerTypes(c, f) || c.SlidingWindow == 0 || first >= c.NumLayers {
		return
	}
	c.SlidingLayers = make([]bool, c.NumLayers)
	for i := first; i < c.NumLayers; i++ {
		c.SlidingLayers[i] = true
	}
}

// parseQwen2 reads Qwen2ForCausalLM: biases on q, k and v, none on o.
func parseQwen2(c *Config, f *fields) {
	readStandard(c, f, false)
	c.AttentionBias = true
	qwenSliding(c, f)
}

// parseQwen2MoE reads Qwen2MoeForCausalLM: layer i is MoE unless listed in
// mlp_only_layers or (i+1) is not a multiple of decoder_sparse_step; each MoE
// layer has num_experts routed experts of moe_intermediate_size, one shared
// expert of shared_expert_intermediate_size and the shared expert's gate.
func parseQwen2MoE(c *Config, f *fields) {
	parseQwen2(c, f)
	qwenMoE(c, f)
	c.SharedExpertIntermediateSize = f.optNonNegative("shared_expert_intermediate_size", 0)
	if c.SharedExpertIntermediateSize > 0 {
		c.NumSharedExperts = 1
		c.SharedExpertGate = true
	}
}

// qwenMoE reads the routed experts of Qwen2-MoE and Qwen3-MoE.
func qwenMoE(c *Config, f *fields) {
	c.NumExperts = f.positive("num_experts")
	c.NumExpertsPerToken = f.positive("num_experts_per_tok")
	c.MoEIntermediateSize = f.positive("moe_intermediate_size")
	step := f.optPositive("decoder_sparse_step", 1)
	only := f.layerIndexes("mlp_only_layers", c.NumLayers)
	if f.err != nil {
		return
	}
	c.MoELayers = make([]bool, c.NumLayers)
	for i := range c.MoELayers {
		c.MoELayers[i] = (i+1)%step == 0 && !slices.Contains(only, i)
	}
}

// parseQwen3 reads Qwen3ForCausalLM: an explicit head_dim (64 heads of 128
// over a hidden size of 4096 or 5120), biases only with attention_bias, and
// RMSNorms on each head's queries and keys (head_dim weights each).
func parseQwen3(c *Config, f *fields) {
	readStandard(c, f, false)
	c.AttentionBias = f.boolean("attention_bias", false)
	c.AttentionOutputBias = c.AttentionBias
	c.QKNormWeights = 2 * c.HeadDim
	qwenSliding(c, f)
}

// parseQwen3MoE reads Qwen3MoeForCausalLM: Qwen3 attention and Qwen2-MoE's
// routed experts, without a shared expert.
func parseQwen3MoE(c *Config, f *fields) {
	parseQwen3(c, f)
	qwenMoE(c, f)
}

// parseMiniMaxM2 reads MiniMaxM2ForCausalLM: every layer is MoE with
// num_local_experts experts of intermediate_size (the per-expert width),
// no shared expert, a sigmoid router with a bias per expert
// (use_routing_bias), and RMSNorms over the whole query and key
// projections (qk_norm_type per_layer). Its multi-token-prediction modules
// are not counted, as DeepSeek-V3's are not.
func parseMiniMaxM2(c *Config, f *fields) {
	readStandard(c, f, false)
	c.NumExperts = f.positive("num_local_experts")
	c.NumExpertsPerToken = f.positive("num_experts_per_tok")
	c.MoEIntermediateSize = c.IntermediateSize
	c.RouterBias = f.boolean("use_routing_bias", false)
	c.RotaryDim = f.optPositive("rotary_dim", 0)
	if f.boolean("use_qk_norm", false) {
		c.QKNormWeights = (c.NumHeads + c.NumKVHeads) * c.HeadDim
	}
	c.MoELayers = allLayers(c.NumLayers, true)
}

// parseGemma reads GemmaForCausalLM: explicit head_dim, GeGLU MLP, tied
// embeddings by default.
func parseGemma(c *Config, f *fields) {
	readStandard(c, f, true)
	c.AttentionBias = f.boolean("attention_bias", false)
	c.AttentionOutputBias = c.AttentionBias
}

// parseGemma2 reads Gemma2ForCausalLM: four norms per layer and sliding
// window on the even layers (0, 2, ...), global attention on the odd ones.
func parseGemma2(c *Config, f *fields) {
	parseGemma(c, f)
	c.NormsPerLayer = 4
	readSliding(c, f, 4096)
	if slidingFromLayerTypes(c, f) || c.SlidingWindow == 0 {
		return
	}
	c.SlidingLayers = make([]bool, c.NumLayers)
	for i := range c.SlidingLayers {
		c.SlidingLayers[i] = i%2 == 0
	}
}

// parsePhi3 reads Phi3ForCausalLM: fused qkv and gate_up projections (same
// counts as separate ones), no biases, sliding window on every layer when set.
func parsePhi3(c *Config, f *fields) {
	readStandard(c, f, false)
	readSliding(c, f, 0)
	if c.SlidingWindow > 0 {
		c.SlidingLayers = allLayers(c.NumLayers, true)
	}
}

// parseGPTJ reads GPTJForCausalLM: n_embd, n_layer, n_head, rotary_dim,
// n_inner (null: 4*n_embd) and n_positions; one LayerNorm per layer with
// attention and MLP in parallel; no biases on q, k, v or out; biased MLP;
// untied lm_head with a bias.
func parseGPTJ(c *Config, f *fields) {
	c.HiddenSize = f.positive("n_embd")
	c.NumLayers = f.positive("n_layer")
	c.NumHeads = f.positive("n_head")
	c.NumKVHeads = c.NumHeads
	c.IntermediateSize = f.optPositive("n_inner", 4*c.HiddenSize)
	c.VocabSize = f.positive("vocab_size")
	c.MaxPositionEmbeddings = f.optPositive("n_positions", 0)
	c.RotaryDim = f.optPositive("rotary_dim", 0)
	c.TieWordEmbeddings = f.boolean("tie_word_embeddings", false)
	c.MLPBias = true
	c.LMHeadBias = !c.TieWordEmbeddings
	c.LayerNorm = true
	c.NormsPerLayer = 1
	c.ParallelAttention = true
	deriveHeads(c, f, "n_head", "n_head", "head_dim")
}

// parseGPTNeoX reads GPTNeoXForCausalLM: fused biased qkv, biased dense and
// MLP, two LayerNorms per layer, untied embed_out by default.
func parseGPTNeoX(c *Config, f *fields) {
	c.HiddenSize = f.positive("hidden_size")
	c.NumLayers = f.positive("num_hidden_layers")
	c.NumHeads = f.positive("num_attention_heads")
	c.NumKVHeads = c.NumHeads
	c.IntermediateSize = f.positive("intermediate_size")
	c.VocabSize = f.positive("vocab_size")
	c.MaxPositionEmbeddings = f.optPositive("max_position_embeddings", 0)
	c.TieWordEmbeddings = f.boolean("tie_word_embeddings", false)
	c.AttentionBias = f.boolean("attention_bias", true)
	c.AttentionOutputBias = c.AttentionBias
	c.MLPBias = true
	c.LayerNorm = true
	c.ParallelAttention = f.boolean("use_parallel_residual", true)
	pct := f.number("rotary_pct", 0.25)
	if pct < 0 || pct > 1 {
		f.fail("rotary_pct", "want a fraction in [0, 1], got %v", pct)
	}
	deriveHeads(c, f, "num_attention_heads", "num_attention_heads", "head_dim")
	c.RotaryDim = int(float64(c.HeadDim) * pct)
}

// parseDeepSeek reads DeepseekV2ForCausalLM and DeepseekV3ForCausalLM:
// multi-head latent attention, and MoE on layer i when n_routed_experts is
// set, i >= first_k_dense_replace and i%moe_layer_freq == 0. V3 adds the
// router's e_score_correction_bias; its MTP layers are recorded, not counted.
// Kimi K2 (model_type kimi_k2) is DeepseekV3ForCausalLM with other sizes.
func parseDeepSeek(c *Config, f *fields) {
	c.HiddenSize = f.positive("hidden_size")
	c.NumLayers = f.positive("num_hidden_layers")
	c.NumHeads = f.positive("num_attention_heads")
	c.NumKVHeads = f.optPositive("num_key_value_heads", c.NumHeads)
	c.IntermediateSize = f.positive("intermediate_size")
	c.VocabSize = f.positive("vocab_size")
	c.MaxPositionEmbeddings = f.optPositive("max_position_embeddings", 0)
	c.TieWordEmbeddings = f.boolean("tie_word_embeddings", false)
	c.GatedMLP = true
	c.AttentionBias = f.boolean("attention_bias", false)
	c.AttentionOutputBias = c.AttentionBias

	c.KVLoRARank = f.positive("kv_lora_rank")
	c.QLoRARank = f.optPositive("q_lora_rank", 0)
	c.QKRopeHeadDim = f.positive("qk_rope_head_dim")
	c.QKNopeHeadDim = f.positive("qk_nope_head_dim")
	c.VHeadDim = f.positive("v_head_dim")
	c.HeadDim = c.QKNopeHeadDim + c.QKRopeHeadDim
	if c.ModelType == "deepseek_v3" || c.ModelType == "kimi_k2" {
		c.RouterBias = true
		c.NumNextNPredictLayers = f.optNonNegative("num_nextn_predict_layers", 0)
	}
	if f.err == nil && c.NumLayers > maxLayers {
		f.fail("num_hidden_layers", "%d layers is more than the %d supported", c.NumLayers, maxLayers)
	}

	c.NumExperts = f.optPositive("n_routed_experts", 0)
	if c.NumExperts == 0 || f.err != nil {
		return // dense: every layer uses intermediate_size
	}
	c.NumExpertsPerToken = f.positive("num_experts_per_tok")
	c.MoEIntermediateSize = f.positive("moe_intermediate_size")
	c.NumSharedExperts = f.optNonNegative("n_shared_experts", 0)
	c.SharedExpertIntermediateSize = c.NumSharedExperts * c.MoEIntermediateSize
	firstMoE := f.optNonNegative("first_k_dense_replace", 0)
	freq := f.optPositive("moe_layer_freq", 1)
	if f.err != nil {
		return
	}
	c.MoELayers = make([]bool, c.NumLayers)
	for i := range c.MoELayers {
		c.MoELayers[i] = i >= firstMoE && i%freq == 0
	}
}

// check validates what every family shares once the fields are read:
// top-k within the expert count, layer slices of the right length, and a
// size that counts exactly.
func (c *Config) check() error {
	if c.NumExperts > 0 && c.NumExpertsPerToken > c.NumExperts {
		return fmt.Errorf("%w: num_experts_per_tok: top-%d is more than the %d experts",
			gpufleet.ErrInvalid, c.NumExpertsPerToken, c.NumExperts)
	}
	// A nil per-layer slice means "every layer" for a hand-built Config
	// (isMoELayer, IsSlidingLayer), so when no layer routes or slides the
	// model is made plainly dense or full-attention.
	if !slices.Contains(c.MoELayers, true) {
		c.MoELayers = nil
		c.NumExperts, c.NumExpertsPerToken, c.MoEIntermediateSize = 0, 0, 0
		c.NumSharedExperts, c.SharedExpertIntermediateSize, c.SharedExpertGate, c.RouterBias = 0, 0, false, false
	}
	if !slices.Contains(c.SlidingLayers, true) {
		c.SlidingLayers = nil
		c.SlidingWindow = 0
	}
	if total := count[float64](c).total(); total > maxParams {
		return fmt.Errorf("%w: dimensions give %.3g parameters, more than the %.0g supported",
			gpufleet.ErrInvalid, total, maxParams)
	}
	return nil
}

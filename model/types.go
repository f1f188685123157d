package model

// Config is a transformer architecture as the planner needs it, normalised
// from a Hugging Face config.json of any supported family. Dimensions that a
// family derives (head_dim = hidden/heads, kv heads = heads) are filled in.
type Config struct {
	Name      string `json:"name"`       // built-in name or the file's base name
	ModelType string `json:"model_type"` // as in config.json: "llama", "mixtral", "deepseek_v2"...

	NumLayers             int  `json:"layers"`
	HiddenSize            int  `json:"hidden_size"`
	NumHeads              int  `json:"num_attention_heads"`
	NumKVHeads            int  `json:"num_key_value_heads"`
	HeadDim               int  `json:"head_dim"` // query/key head size of standard attention
	IntermediateSize      int  `json:"intermediate_size"`
	VocabSize             int  `json:"vocab_size"`
	MaxPositionEmbeddings int  `json:"max_position_embeddings"`
	TieWordEmbeddings     bool `json:"tie_word_embeddings"`
	GatedMLP              bool `json:"gated_mlp"`      // SwiGLU/GeGLU: three matrices instead of two
	AttentionBias         bool `json:"attention_bias"` // q/k/v (and o where the family has it) carry biases

	// SlidingWindow is the window of sliding-window layers in tokens, 0 when
	// none. SlidingLayers[i] says whether layer i uses it (all layers for
	// Mistral v0.1, every other layer for Gemma 2).
	SlidingWindow int    `json:"sliding_window,omitempty"`
	SlidingLayers []bool `json:"-"`

	// Mixture of experts. MoELayers[i] says whether layer i routes its MLP to
	// experts; nil for dense models.
	NumExperts                   int    `json:"num_experts,omitempty"`           // routed experts per MoE layer
	NumExpertsPerToken           int    `json:"num_experts_per_tok,omitempty"`   // top-k
	MoEIntermediateSize          int    `json:"moe_intermediate_size,omitempty"` // one routed expert
	NumSharedExperts             int    `json:"num_shared_experts,omitempty"`
	SharedExpertIntermediateSize int    `json:"shared_expert_intermediate_size,omitempty"` // all shared experts together
	MoELayers                    []bool `json:"-"`

	// Multi-head latent attention (DeepSeek-V2/V3); KVLoRARank > 0 turns it on.
	KVLoRARank    int `json:"kv_lora_rank,omitempty"`
	QLoRARank     int `json:"q_lora_rank,omitempty"` // 0: queries are projected directly
	QKRopeHeadDim int `json:"qk_rope_head_dim,omitempty"`
	QKNopeHeadDim int `json:"qk_nope_head_dim,omitempty"`
	VHeadDim      int `json:"v_head_dim,omitempty"`

	// The fields below were added after the first contract; their zero
	// values describe a Llama-style model (RMSNorm, two norms per layer, no
	// biases outside q/k/v), so a hand-built Config counts as Llama does.

	// AttentionOutputBias says the attention output projection carries a
	// bias (Llama with attention_bias, GPT-NeoX, DeepSeek with
	// attention_bias); Qwen2 has q/k/v biases only.
	AttentionOutputBias bool `json:"attention_output_bias,omitempty"`
	// MLPBias says every MLP and expert matrix carries a bias (GPT-J,
	// GPT-NeoX, Llama with mlp_bias).
	MLPBias bool `json:"mlp_bias,omitempty"`
	// LMHeadBias says the untied output head carries a bias (GPT-J).
	LMHeadBias bool `json:"lm_head_bias,omitempty"`
	// LayerNorm says norms are LayerNorm (weight and bias, 2h each) rather
	// than RMSNorm (weight only, h each).
	LayerNorm bool `json:"layer_norm,omitempty"`
	// NormsPerLayer is the number of hidden-size norms in each transformer
	// layer: 1 for GPT-J, 4 for Gemma 2, 2 for the rest; 0 means 2. The
	// final norm is always counted once more.
	NormsPerLayer int `json:"norms_per_layer,omitempty"`
	// ParallelAttention says attention and MLP read the same layer input
	// (GPT-J, GPT-NeoX with use_parallel_residual). It does not change counts.
	ParallelAttention bool `json:"parallel_attention,omitempty"`
	// RotaryDim is the number of rotary dimensions of each head when only a
	// part of the head is rotated (GPT-J rotary_dim, GPT-NeoX rotary_pct);
	// 0 means the whole head or not stated.
	RotaryDim int `json:"rotary_dim,omitempty"`

	// SharedExpertGate says the shared expert output is scaled by a learned
	// sigmoid gate of h parameters per MoE layer (Qwen2-MoE).
	SharedExpertGate bool `json:"shared_expert_gate,omitempty"`
	// RouterBias says the router carries one bias per routed expert
	// (DeepSeek-V3 e_score_correction_bias).
	RouterBias bool `json:"router_bias,omitempty"`
	// QKNormWeights is the weights of the RMSNorms on each layer's queries
	// and keys: 2 x head_dim where they norm each head (Qwen3), the whole
	// projections' width where they norm those (MiniMax-M2); 0 without.
	QKNormWeights int `json:"qk_norm_weights,omitempty"`
	// NumNextNPredictLayers is DeepSeek-V3's multi-token-prediction depth.
	// The MTP module is not counted by Params: it is a training and
	// speculative-decoding add-on, and the published 671B excludes it.
	NumNextNPredictLayers int `json:"num_nextn_predict_layers,omitempty"`

	// Quantization is the checkpoint's quantization_config, nil when the
	// config has none (CheckpointWeights counts the weights it gives).
	Quantization *Quantization `json:"quantization,omitempty"`
}

// Params counts the parameters of a Config. Total includes the input
// embedding and the output head (counted once when tied).
type Params struct {
	Total int64 `json:"total"`
	// Active is what one token touches: attention, dense MLPs, shared
	// experts, the top-k routed experts, routers, norms, and the embedding and
	// head. ActiveExcludingEmbeddings leaves the embedding and head out.
	Active                    int64 `json:"active"`
	ActiveExcludingEmbeddings int64 `json:"active_excluding_embeddings"`

	Embedding    int64 `json:"embedding"`     // input embedding
	Head         int64 `json:"head"`          // output head; 0 when tied
	Attention    int64 `json:"attention"`     // all layers, including biases
	DenseMLP     int64 `json:"dense_mlp"`     // MLPs of dense layers, all layers
	Shared       int64 `json:"shared"`        // shared experts and routers, all MoE layers
	Experts      int64 `json:"experts"`       // routed experts, all MoE layers
	OneExpert    int64 `json:"one_expert"`    // one routed expert of one layer
	Norms        int64 `json:"norms"`         // layer norms and final norm
	LargestLayer int64 `json:"largest_layer"` // the largest single transformer layer (ZeRO-3 working set)
}

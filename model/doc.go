// Package model owns model architectures: it parses Hugging Face
// config.json files into a normalised Config and counts what the planner
// needs from them, parameters (Params) and KV cache bytes
// (KVCacheBytesPerToken, KVCacheBytes). It is pure: no file, network or clock
// access; built-in configurations are embedded (Builtin, BuiltinNames).
//
// Supported families (model_type): llama, mistral, mixtral, qwen2,
// qwen2_moe, gemma, gemma2, phi3, gptj, gpt_neox, deepseek_v2 and
// deepseek_v3. Parse fills what a family derives (head_dim, KV heads,
// per-layer sliding-window and MoE flags) so callers never need to know the
// family.
//
// # Counting convention
//
// Params counts every weight, bias and norm of the family exactly. Total
// includes the input embedding and the output head, the head counted once
// when tied. Active is what one token touches: attention, dense MLPs, shared
// experts, the top-k routed experts, routers, norms, and the embedding and
// head (both whole matrices). ActiveExcludingEmbeddings drops the embedding
// and head. Published "active" figures differ in whether they include
// embeddings: Mixtral's 12.9B does, DeepSeek's do not follow one rule (see
// model_test.go). DeepSeek-V3's multi-token-prediction module is not counted:
// Params gives the 671B main model, not the 685B checkpoint.
//
// KV cache is counted as serving engines store it: K and V of each KV head
// for standard attention, the compressed latent and rope key for MLA; sliding
// window layers hold at most the window.
package model

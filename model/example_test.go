package model_test

import (
	"fmt"

	"github.com/gpufleet/gpufleet/model"
)

// Example counts the parameters and KV cache of a built-in MoE model.
func Example() {
	c, err := model.Builtin("mixtral-8x7b-v0.1")
	if err != nil {
		fmt.Println(err)
		return
	}
	p := c.Params()
	fmt.Printf("%s: %d layers, MoE %v\n", c.Name, c.NumLayers, c.IsMoE())
	fmt.Printf("total %.1fB, active %.1fB (%.1fB without embeddings)\n",
		float64(p.Total)/1e9, float64(p.Active)/1e9, float64(p.ActiveExcludingEmbeddings)/1e9)
	fmt.Printf("one expert %d, largest layer %d\n", p.OneExpert, p.LargestLayer)
	fmt.Printf("KV cache %d bytes/token in bf16, %d MiB for 32768 tokens\n",
		c.KVCacheBytesPerToken(2), c.KVCacheBytes(32768, 2)>>20)
	// Output:
	// mixtral-8x7b-v0.1: 32 layers, MoE true
	// total 46.7B, active 12.9B (12.6B without embeddings)
	// one expert 176160768, largest layer 1451270144
	// KV cache 131072 bytes/token in bf16, 4096 MiB for 32768 tokens
}

// ExampleParse reads a config.json and derives what it leaves out.
func ExampleParse() {
	c, err := model.Parse("tiny", []byte(`{
		"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4,
		"num_attention_heads": 8, "intermediate_size": 1376, "vocab_size": 32000
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.HeadDim, c.NumKVHeads, c.Params().Total)

	_, err = model.Parse("bert", []byte(`{"model_type": "bert"}`))
	fmt.Println(err)
	// Output:
	// 64 8 45421056
	// parse model "bert": unsupported: model_type "bert" (supported: deepseek_v2, deepseek_v3, gemma, gemma2, gpt_neox, gptj, kimi_k2, llama, minimax_m2, mistral, mixtral, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe)
}

package model

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// withQuant is the built-in config base with quantization_config q.
func withQuant(t testing.TB, base, q string) []byte {
	t.Helper()
	data, err := configs.ReadFile("configs/" + base + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	var qc any
	if err := json.Unmarshal([]byte(q), &qc); err != nil {
		t.Fatalf("quantization_config %s: %v", q, err)
	}
	m["quantization_config"] = qc
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// quantForms are quantization_config forms as checkpoints write them,
// each on a base model of the built-in set.
var quantForms = []struct {
	name, base, config string
}{
	{"fp8-block", "llama-3.1-8b", `{"quant_method":"fp8","activation_scheme":"dynamic","fmt":"e4m3","weight_block_size":[128,128]}`},
	{"fp8-tensor-static", "llama-3.1-8b", `{"quant_method":"fp8","activation_scheme":"static","ignored_layers":["lm_head"]}`},
	{"fp8-moe-keeps-gate", "mixtral-8x7b-v0.1", `{"quant_method":"fp8","activation_scheme":"dynamic","weight_block_size":[128,128],"modules_to_not_convert":["model.layers.0.block_sparse_moe.gate"]}`},
	{"fbgemm-fp8-mixed", "llama-3.1-8b", `{"quant_method":"fbgemm_fp8","activation_scale_ub":1200.0,"modules_to_not_convert":["model.layers.0","model.layers.31","lm_head","self_attn"]}`},
	{"compressed-tensors-fp8-channel", "llama-3.1-8b", `{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"channel","symmetric":true,"dynamic":false},"input_activations":{"num_bits":8,"type":"float","strategy":"token","dynamic":true}}},"ignore":["lm_head"]}`},
	{"compressed-tensors-w4a16", "llama-3.1-8b", `{"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":4,"type":"int","strategy":"group","group_size":128,"symmetric":true}}},"ignore":["lm_head"]}`},
	{"compressed-tensors-regex-ignore", "mixtral-8x7b-v0.1", `{"quant_method":"compressed-tensors","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float","strategy":"tensor"},"input_activations":{"num_bits":8,"type":"float","strategy":"tensor","dynamic":false}}},"ignore":["lm_head","re:.*block_sparse_moe\\.gate$","re:model\\.layers\\.[0-3]\\.self_attn\\..*"]}`},
	{"compressed-tensors-two-groups", "llama-3.1-8b", `{"quant_method":"compressed-tensors","config_groups":{"attn":{"targets":["re:.*self_attn.*"],"weights":{"num_bits":8,"type":"int","strategy":"channel"}},"mlp":{"targets":["re:.*mlp.*"],"weights":{"num_bits":4,"type":"int","strategy":"group","group_size":64,"symmetric":false}}},"ignore":["lm_head"]}`},
	{"compressed-tensors-nvfp4", "llama-3.1-8b", `{"quant_method":"compressed-tensors","format":"nvfp4-pack-quantized","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":4,"type":"float","strategy":"tensor_group","group_size":16}}},"ignore":["lm_head"]}`},
	{"compressed-tensors-head-quantised", "llama-3.1-8b", `{"quant_method":"compressed-tensors","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"int","strategy":"channel"}}}}`},
	{"awq-int4", "llama-3.1-8b", `{"quant_method":"awq","bits":4,"group_size":128,"zero_point":true,"version":"gemm","modules_to_not_convert":null}`},
	{"gptq-int4", "llama-3.1-8b", `{"quant_method":"gptq","bits":4,"group_size":128,"desc_act":false,"sym":true}`},
	{"gptq-int8-per-channel", "llama-3.1-8b", `{"quant_method":"gptq","bits":8,"group_size":-1}`},
	{"bitsandbytes-nf4", "llama-3.1-8b", `{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":"nf4","bnb_4bit_use_double_quant":true,"llm_int8_skip_modules":["lm_head"]}`},
	{"bitsandbytes-int8", "llama-3.1-8b", `{"quant_method":"bitsandbytes","load_in_8bit":true}`},
	{"mxfp4-experts", "mixtral-8x7b-v0.1", `{"quant_method":"mxfp4","modules_to_not_convert":["model.layers.*.self_attn","model.layers.*.block_sparse_moe.gate","model.embed_tokens","lm_head"]}`},
	{"modelopt-nvfp4", "llama-3.1-8b", `{"quant_method":"modelopt","quant_algo":"NVFP4","group_size":16,"exclude_modules":["lm_head"]}`},
	{"modelopt-fp8", "llama-3.1-8b", `{"quant_method":"modelopt","quant_algo":"FP8","exclude_modules":["lm_head"]}`},
	{"deepseek-fp8-block", "deepseek-v2-lite", `{"quant_method":"fp8","activation_scheme":"dynamic","weight_block_size":[128,128]}`},
	{"unknown-method", "llama-3.1-8b", `{"quant_method":"hqq","nbits":4}`},
}

// TestQuantizationForms pins, for each form, the description Parse reads
// and the weights it gives (testdata/golden/quantization/*.json; -update
// rewrites them).
func TestQuantizationForms(t *testing.T) {
	for _, tc := range quantForms {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(tc.name, withQuant(t, tc.base, tc.config))
			if err != nil {
				t.Fatal(err)
			}
			if c.Quantization == nil {
				t.Fatal("no quantization read")
			}
			w, ok := c.CheckpointWeights()
			got := struct {
				Quantization *Quantization `json:"quantization"`
				Derived      bool          `json:"derived"`
				TotalBytes   int64         `json:"total_bytes"`
				BF16Bytes    int64         `json:"bf16_bytes"`
				Embedding    int64         `json:"embedding_bytes"`
				Head         int64         `json:"head_bytes"`
				FirstLayer   int64         `json:"first_layer_bytes"`
				LastLayer    int64         `json:"last_layer_bytes"`
				Quantized    int64         `json:"quantized_params"`
				Kept         int64         `json:"kept_params"`
			}{Quantization: c.Quantization, Derived: ok, BF16Bytes: 2 * c.Params().Total}
			if ok {
				last := c.NumLayers - 1
				got.TotalBytes, got.Embedding, got.Head = int64(w.Total()), int64(w.Embedding), int64(w.Head)
				got.FirstLayer, got.LastLayer = int64(w.Dense[0]+w.Experts[0]), int64(w.Dense[last]+w.Experts[last])
				got.Quantized, got.Kept = w.QuantizedParams, w.KeptParams
				if w.QuantizedParams+w.KeptParams != c.Params().Total {
					t.Errorf("quantized %d + kept %d parameters, want the %d of Params", w.QuantizedParams, w.KeptParams, c.Params().Total)
				}
				if w.Total() >= float64(got.BF16Bytes) {
					t.Errorf("checkpoint %.0f bytes, not below its bf16 %d", w.Total(), got.BF16Bytes)
				}
			}
			b, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", "quantization", tc.name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./model -run TestQuantizationForms -update)", err)
			}
			if diff := cmp.Diff(string(want), string(b)+"\n"); diff != "" {
				t.Errorf("quantization changed (-want +got); rerun with -update if intended:\n%s", diff)
			}
		})
	}
}

// TestQuantizedBytesByHand checks the scale arithmetic of the common
// schemes on Llama 3.1 8B against sums written out by hand.
func TestQuantizedBytesByHand(t *testing.T) {
	// Llama 3.1 8B: per layer q and o 4096x4096, k and v 1024x4096,
	// gate and up 14336x4096, down 4096x14336; 32 layers.
	type mat struct{ out, in float64 }
	mats := []mat{{4096, 4096}, {1024, 4096}, {1024, 4096}, {4096, 4096}, {14336, 4096}, {14336, 4096}, {4096, 14336}}
	var elems float64
	for _, m := range mats {
		elems += m.out * m.in
	}
	base, err := Parse("llama-3.1-8b", mustRead(t, "configs/llama-3.1-8b.json"))
	if err != nil {
		t.Fatal(err)
	}
	p := base.Params()
	kept := 2 * float64(p.Total-32*int64(elems)) // embedding, head, norms
	perLayer := func(f func(m mat) float64) float64 {
		s := 0.0
		for _, m := range mats {
			s += f(m)
		}
		return 32 * s
	}
	tests := []struct {
		form string
		want float64
	}{
		// AWQ: 4 bits, an fp16 scale and a 4-bit zero per 128 of a row.
		{"awq-int4", kept + perLayer(func(m mat) float64 { return m.out*m.in/2 + m.out*math.Ceil(m.in/128)*2.5 })},
		// GPTQ: the same plus g_idx, an int32 per input column.
		{"gptq-int4", kept + perLayer(func(m mat) float64 { return m.out*m.in/2 + m.out*math.Ceil(m.in/128)*2.5 + 4*m.in })},
		// FP8 with 128x128 blocks and an fp32 scale per block.
		{"fp8-block", kept + perLayer(func(m mat) float64 { return m.out*m.in + math.Ceil(m.out/128)*math.Ceil(m.in/128)*4 })},
		// compressed-tensors FP8 per channel, bf16 scales.
		{"compressed-tensors-fp8-channel", kept + perLayer(func(m mat) float64 { return m.out*m.in + 2*m.out })},
		// NVFP4: 4 bits, an FP8 scale per 16 and an fp32 global scale.
		{"modelopt-nvfp4", kept + perLayer(func(m mat) float64 { return m.out*m.in/2 + m.out*m.in/16 + 4 })},
	}
	for _, tc := range tests {
		t.Run(tc.form, func(t *testing.T) {
			var cfg string
			for _, f := range quantForms {
				if f.name == tc.form {
					cfg = f.config
				}
			}
			c, err := Parse(tc.form, withQuant(t, "llama-3.1-8b", cfg))
			if err != nil {
				t.Fatal(err)
			}
			w, ok := c.CheckpointWeights()
			if !ok {
				t.Fatal("no weights derived")
			}
			if math.Abs(w.Total()-tc.want) > 1 {
				t.Errorf("weights %.0f bytes, want %.0f", w.Total(), tc.want)
			}
		})
	}
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	data, err := configs.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestQuantizationRefusals: what Parse refuses in a quantization_config
// names the field and wraps gpufleet.ErrInvalid.
func TestQuantizationRefusals(t *testing.T) {
	long := make([]string, maxQuantModules+1)
	for i := range long {
		long[i] = fmt.Sprintf("%q", "model.layers.0")
	}
	regexes := make([]string, 2049)
	for i := range regexes {
		regexes[i] = fmt.Sprintf(`"re:model\\.layers\\.%d\\."`, i)
	}
	tests := []struct {
		name, config, field string
	}{
		{"not an object", `"fp8"`, "quantization_config"},
		{"too many patterns for the layers", `{"quant_method":"fp8","modules_to_not_convert":[` + strings.Join(regexes, ",") + `]}`, "regular expressions"},
		{"bits zero", `{"quant_method":"gptq","bits":0,"group_size":128}`, "bits"},
		{"bits 32", `{"quant_method":"awq","bits":32,"group_size":128}`, "bits"},
		{"group size zero", `{"quant_method":"awq","bits":4,"group_size":0}`, "group_size"},
		{"group size huge", `{"quant_method":"gptq","bits":4,"group_size":1000000}`, "group_size"},
		{"block of one number", `{"quant_method":"fp8","weight_block_size":[128]}`, "weight_block_size"},
		{"block of zero", `{"quant_method":"fp8","weight_block_size":[0,128]}`, "weight_block_size"},
		{"list too long", `{"quant_method":"fp8","modules_to_not_convert":[` + strings.Join(long, ",") + `]}`, "modules_to_not_convert"},
		{"name not text", `{"quant_method":"fbgemm_fp8","modules_to_not_convert":["lm_head\u0000"]}`, "modules_to_not_convert[0]"},
		{"name not a string", `{"quant_method":"fbgemm_fp8","modules_to_not_convert":[3]}`, "modules_to_not_convert"},
		{"bad regex", `{"quant_method":"compressed-tensors","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float"}}},"ignore":["re:(?!lm_head)"]}`, "ignore[0]"},
		{"bad type", `{"quant_method":"compressed-tensors","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":8,"type":"posit"}}}}`, "type"},
		{"bad strategy", `{"quant_method":"compressed-tensors","config_groups":{"g":{"targets":["Linear"],"weights":{"num_bits":8,"type":"int","strategy":"diagonal"}}}}`, "strategy"},
		{"bitsandbytes without bits", `{"quant_method":"bitsandbytes"}`, "load_in_4bit"},
		{"bad activation scheme", `{"quant_method":"fp8","activation_scheme":"sometimes"}`, "activation_scheme"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("q", withQuant(t, "llama-3.1-8b", tc.config))
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("error %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), "quantization_config") || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name quantization_config and %s", err, tc.field)
			}
		})
	}
}

// TestNameSet checks module-name matching: names and what is under
// them, dotted parts, globs, regular expressions.
func TestNameSet(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"lm_head", "lm_head", true},
		{"model.layers.0", "model.layers.0.mlp.down_proj", true},
		{"model.layers.1", "model.layers.10.mlp.down_proj", false},
		{"model.layers.1.self_attn", "model.layers.1.self_attn.q_proj", true},
		{"self_attn", "model.layers.7.self_attn.o_proj", true},
		{"mlp.gate", "model.layers.7.mlp.gate_proj", false},
		{"mlp.gate", "model.layers.7.mlp.gate", true},
		{"re:.*mlp\\.gate$", "model.layers.3.mlp.gate", true},
		{"re:.*mlp\\.gate$", "model.layers.3.mlp.gate_proj", false},
		{"re:model\\.layers\\.[0-3]\\.", "model.layers.2.self_attn.q_proj", true},
		{"re:layers", "model.layers.2.self_attn.q_proj", false}, // matched from the start
		{"model.layers.*.self_attn", "model.layers.12.self_attn.k_proj", true},
		{"model.layers.*.self_attn", "model.layers.12.mlp.up_proj", false},
		{"Linear", "model.layers.0.mlp.up_proj", true},
	}
	for _, tc := range tests {
		s, err := compileNames("ignore", []string{tc.pattern})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.match(tc.name); got != tc.want {
			t.Errorf("%q matches %q: %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

// TestUnknownQuantization: a method Parse does not read parses, is kept
// with Known false, and derives no weights.
func TestUnknownQuantization(t *testing.T) {
	c, err := Parse("q", withQuant(t, "llama-3.1-8b", `{"quant_method":"hqq","nbits":4}`))
	if err != nil {
		t.Fatal(err)
	}
	if q := c.Quantization; q == nil || q.Known || q.Method != "hqq" {
		t.Fatalf("quantization %+v, want hqq unknown", q)
	}
	if _, ok := c.CheckpointWeights(); ok {
		t.Error("weights derived from an unknown method")
	}
}

// TestHandBuiltQuantization: a Quantization written as a literal (not
// compiled by Parse) derives the same weights.
func TestHandBuiltQuantization(t *testing.T) {
	parsed, err := Parse("q", withQuant(t, "llama-3.1-8b", `{"quant_method":"fbgemm_fp8","modules_to_not_convert":["model.layers.0","lm_head"]}`))
	if err != nil {
		t.Fatal(err)
	}
	hand := load(t, "llama-3.1-8b")
	hand.Quantization = &Quantization{Method: "fbgemm_fp8", Known: true, Ignore: []string{"model.layers.0", "lm_head"},
		Schemes: []WeightScheme{{Bits: 8, Type: "float", Strategy: "channel", ScaleBits: 32, Targets: []string{"Linear"}}}}
	a, _ := parsed.CheckpointWeights()
	b, ok := hand.CheckpointWeights()
	if !ok || a.Total() != b.Total() {
		t.Errorf("hand-built %.0f bytes (ok %v), parsed %.0f", b.Total(), ok, a.Total())
	}
}

// TestUnknownQuantizationFieldsIgnored: the fields of a method Parse does
// not read are not checked, whatever their types.
func TestUnknownQuantizationFieldsIgnored(t *testing.T) {
	c, err := Parse("q", withQuant(t, "llama-3.1-8b", `{"quant_method":"quark","activation_scheme":{"odd":true},"bits":"four","ignore":[1,2]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Quantization.Known || c.Quantization.Method != "quark" {
		t.Errorf("quantization %+v", c.Quantization)
	}
}

// TestMainScheme: the scheme storing the most parameters is the
// checkpoint's format, whatever the order of config_groups.
func TestMainScheme(t *testing.T) {
	for _, f := range quantForms {
		if f.name != "compressed-tensors-two-groups" {
			continue
		}
		c, err := Parse(f.name, withQuant(t, f.base, f.config))
		if err != nil {
			t.Fatal(err)
		}
		w, _ := c.CheckpointWeights()
		if m := w.MainScheme(); m < 0 || c.Quantization.Schemes[m].Bits != 4 {
			t.Errorf("main scheme %d of %v, want the 4-bit MLP group", m, w.SchemeParams)
		}
	}
}

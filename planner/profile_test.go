package planner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
)

func TestParseEngine(t *testing.T) {
	for in, want := range map[string]Engine{
		"": "vllm", "vllm": "vllm", " vLLM ": "vllm", "vllm@0.6": "vllm@0.6", "vllm@v0.8.5": "vllm@0.8.5",
		"vllm@0.9.0.2.dev108+g71faa1880.d20250731.rocm641": "vllm@0.9.0.2", "vllm@0.17.1 (ROCm wheel)": "vllm@0.17.1",
		"tensorrt-llm": "trtllm", "trt-llm@0.10": "trtllm@0.10", "sglang@0.4.6.post1": "sglang@0.4.6",
	} {
		got, err := ParseEngine(in)
		if err != nil || got != want {
			t.Errorf("ParseEngine(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"ollama", "vllm@", "vllm@latest", "@0.6", "vllm@" + strings.Repeat("1", 100)} {
		if _, err := ParseEngine(in); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParseEngine(%q) = %v, want ErrInvalid", in, err)
		}
	}
}

func TestProfileFor(t *testing.T) {
	tests := []struct {
		engine    Engine
		label     string
		noteWants string
	}{
		{"vllm", "vLLM 0.9 and later (V1 engine)", ""},
		{"vllm@0.11.0", "vLLM 0.9 and later (V1 engine)", "planned with the vLLM 0.9 and later"},
		{"vllm@0.9", "vLLM 0.9 and later (V1 engine)", "planned with"},
		{"vllm@0.8.5", "vLLM 0.8 (V1 engine)", "planned with"},
		{"vllm@0.7.3", "vLLM 0.5-0.7 (V0 engine)", "planned with"},
		{"vllm@0.5", "vLLM 0.5-0.7 (V0 engine)", "planned with"},
		{"vllm@0.4.3", "vLLM 0.5-0.7 (V0 engine)", "no profile of vllm 0.4.3: planned with the oldest"},
		{"trtllm", "TensorRT-LLM", ""},
		{"trtllm@0.10", "TensorRT-LLM", "planned with the TensorRT-LLM profile"},
		{"sglang", "SGLang 0.4", ""},
		{"sglang@0.3", "SGLang 0.4", "no profile of sglang 0.3"},
	}
	for _, tc := range tests {
		p, note := profileFor(tc.engine)
		if p.label != tc.label || (tc.noteWants == "") != (note == "") || !strings.Contains(note, tc.noteWants) {
			t.Errorf("profileFor(%s) = %q, note %q; want %q, note containing %q", tc.engine, p.label, note, tc.label, tc.noteWants)
		}
	}
}

// TestMaxModelLenMovesKVAsTheEngineDoes pins, per engine profile, the KV
// cache of Llama-3.1-8B on one H100 and one A100 at max_model_len 4K to
// 128K (testdata/golden/max-model-len.txt), and checks the shape each
// engine's rule gives: vLLM's V0 engine prefills a whole max_model_len
// sequence in its profile run until chunked prefill turns on above 32K,
// so its KV cache shrinks with the length and jumps back at 64K; the
// engines that always chunk (vLLM V1, TensorRT-LLM, SGLang) keep the same
// KV cache at every length.
func TestMaxModelLenMovesKVAsTheEngineDoes(t *testing.T) {
	lens := []int{4096, 8192, 16384, 32768, 65536, 131072}
	var b strings.Builder
	fmt.Fprintf(&b, "# KV cache tokens of llama-3.1-8b (bf16), one GPU, by max_model_len; go test ./planner -run MaxModelLen -update\n")
	fmt.Fprintf(&b, "%-10s %-15s", "engine", "gpu")
	for _, n := range lens {
		fmt.Fprintf(&b, " %8d", n)
	}
	b.WriteString("\n")
	for _, e := range []Engine{"vllm@0.6", "vllm@0.8", "vllm", "trtllm", "sglang"} {
		for _, g := range gpus(t, "h100-sxm-80gb", "a100-sxm-80gb") {
			fmt.Fprintf(&b, "%-10s %-15s", e, g.ID)
			var kv []int64
			for _, n := range lens {
				p, err := Run(Request{Model: builtin(t, "llama-3.1-8b"), GPUs: []catalog.GPU{g}, GPUCount: 1, Engine: e, MaxModelLen: n}, nil)
				if err != nil {
					t.Fatal(err)
				}
				c := p.Candidates[0]
				kv = append(kv, *c.KVCacheTokens)
				fmt.Fprintf(&b, " %8d", *c.KVCacheTokens)
			}
			b.WriteString("\n")
			switch e.Family() {
			case EngineVLLM:
				if e.Version() == "0.6" {
					if !(kv[0] > kv[1] && kv[1] > kv[2] && kv[2] > kv[3] && kv[4] > kv[3] && kv[4] == kv[5]) {
						t.Errorf("%s on %s: KV %v, want it to fall with max_model_len to 32K and rise once chunked above", e, g.ID, kv)
					}
					continue
				}
				fallthrough
			default:
				for i := range kv {
					if kv[i] != kv[0] {
						t.Errorf("%s on %s: KV %v moves with max_model_len; the engine chunks every prefill", e, g.ID, kv)
						break
					}
				}
			}
		}
	}
	path := filepath.Join("testdata", "golden", "max-model-len.txt")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("max-model-len table (-golden +now):\n%s", diff)
	}
}

// TestMaxModelLenBounds: a request longer than max_model_len is refused,
// and a KV cache that cannot hold one max_model_len sequence does not fit.
func TestMaxModelLenBounds(t *testing.T) {
	if _, err := Run(Request{Model: builtin(t, "llama-3.1-8b"), GPUs: gpus(t, "h100-sxm-80gb"), InputTokens: 4000, OutputTokens: 200, MaxModelLen: 4096}, nil); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("4200 tokens under max_model_len 4096: %v, want ErrInvalid", err)
	}
	p, err := Run(Request{Model: builtin(t, "llama-3.1-70b"), GPUs: gpus(t, "h100-sxm-80gb"), GPUCount: 2, MaxModelLen: 131072, Precision: FormatFP8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Candidates[0]
	if *c.KVCacheTokens >= 131072 {
		t.Skipf("70B fp8 on 2 H100s holds %d tokens: pick a smaller fleet for this test", *c.KVCacheTokens)
	}
	if c.Fits || !strings.Contains(strings.Join(c.Notes, "\n"), "will not start") {
		t.Errorf("a KV cache of %d tokens under max_model_len 131072: fits %v, notes %q", *c.KVCacheTokens, c.Fits, c.Notes)
	}
}

// TestPublishedLayoutNote: a plan for DeepSeek-V3 on the authors' 2048
// H800s that picks another layout says what theirs trades.
func TestPublishedLayoutNote(t *testing.T) {
	cfg, err := model.Parse("deepseek-v3", mustRead(t, filepath.Join("..", "model", "testdata", "deepseek-v3.json")))
	if err != nil {
		t.Fatal(err)
	}
	r := Request{Model: cfg, Mode: Training, GPUs: gpus(t, "h800-sxm-80gb"), GPUCount: 2048, Seq: 4096, GlobalBatch: 15360, ZeRO: 1, Tokens: 14.8e12}
	p, err := Run(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Candidates[0]
	notes := strings.Join(c.Notes, "\n")
	if c.TP == 1 && c.PP == 16 && c.EP == 64 {
		if !strings.Contains(notes, "this is the layout the model's authors ran") {
			t.Errorf("the authors' layout chosen without saying so: %q", notes)
		}
		return
	}
	for _, want := range []string{"the authors' layout for 2048 GPUs, tp 1, pp 16, dp 128, ep 64", "arXiv:2412.19437", "more headroom", "all-to-all per GPU and step over the network", "pipeline bubble"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	// Forcing a layout is the user's choice: no comparison then.
	r.TP, r.PP, r.EP = 2, 16, 4
	if p, err = Run(r, nil); err != nil || strings.Contains(strings.Join(p.Candidates[0].Notes, "\n"), "authors' layout") {
		t.Errorf("a forced layout compared with the authors': %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOldReleasesWarnOfThroughput(t *testing.T) {
	for e, warn := range map[Engine]bool{"vllm@0.5.3": true, "vllm@0.4": true, "vllm@0.6.0": false, "vllm": false} {
		_, note := profileFor(e)
		if got := strings.Contains(note, "less throughput"); got != warn {
			t.Errorf("%s: note %q, want a throughput warning %v", e, note, warn)
		}
	}
}

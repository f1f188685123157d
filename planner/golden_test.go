package planner

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
)

var update = flag.Bool("update", false, "rewrite golden files and docs/ACCURACY.md")

func builtin(t *testing.T, name string) *model.Config {
	t.Helper()
	cfg, err := model.Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func gpus(t *testing.T, ids ...string) []catalog.GPU {
	t.Helper()
	var out []catalog.GPU
	for _, id := range ids {
		g, err := catalog.Default().Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	return out
}

// TestGolden pins whole plans for several models and both modes. Run with
// -update after a deliberate change and review the diff.
func TestGolden(t *testing.T) {
	tests := map[string]func(t *testing.T) Request{
		"llama-3.1-70b-inference-bf16": func(t *testing.T) Request {
			return Request{Model: builtin(t, "llama-3.1-70b"), GPUs: gpus(t, "h100-sxm-80gb", "a100-sxm-80gb", "l40s", "h200-sxm-141gb", "mi300x")}
		},
		"llama-3.1-8b-fp8-on-ampere-ada-hopper": func(t *testing.T) Request {
			return Request{Model: builtin(t, "llama-3.1-8b"), Precision: FormatFP8, KVPrecision: FormatFP8, GPUs: gpus(t, "l4", "a100-sxm-80gb", "h100-sxm-80gb", "t4")}
		},
		"mixtral-latency-target": func(t *testing.T) Request {
			return Request{Model: builtin(t, "mixtral-8x7b-v0.1"), Precision: FormatFP8, LatencyTargetS: 0.03, GPUs: gpus(t, "h100-sxm-80gb", "h200-sxm-141gb", "l40s")}
		},
		"deepseek-v2-lite-mla-batch-max": func(t *testing.T) Request {
			return Request{Model: builtin(t, "deepseek-v2-lite"), BatchMax: true, InputTokens: 4096, OutputTokens: 512, GPUs: gpus(t, "a100-sxm-40gb", "l4")}
		},
		"gemma-2-9b-int4-fixed-gpus": func(t *testing.T) Request {
			return Request{Model: builtin(t, "gemma-2-9b"), Precision: FormatINT4, GPUCount: 2, GPUs: gpus(t, "t4", "rtx-4090", "p100-pcie-16gb")}
		},
		"llama-3.1-70b-training-64": func(t *testing.T) Request {
			return Request{Model: builtin(t, "llama-3.1-70b"), Mode: Training, GPUCount: 64, ZeRO: 1, Tokens: 2e12, GPUs: gpus(t, "h100-sxm-80gb", "a100-sxm-80gb", "b200-hgx")}
		},
		"llama-2-7b-training-smallest": func(t *testing.T) Request {
			return Request{Model: builtin(t, "llama-2-7b"), Mode: Training, Seq: 4096, MicroBatch: 2, GlobalBatch: 256, Tokens: 1e11, Recompute: RecomputeFull, Optimizer: AdamW8bit, GPUs: gpus(t, "a100-sxm-80gb", "l4", "h100-sxm-80gb")}
		},
		"llama-3.1-405b-fp8-checkpoint": func(t *testing.T) Request {
			// Meta's mixed FP8 checkpoint: weights from its quantization_config.
			return Request{Model: loadModel(t, "llama-3.1-405b-instruct-fp8"), GPUCount: 8, GPUs: gpus(t, "h100-sxm-80gb", "h200-sxm-141gb", "mi300x")}
		},
		"qwen2-7b-training-zero3": func(t *testing.T) Request {
			return Request{Model: builtin(t, "qwen2-7b"), Mode: Training, GPUCount: 16, ZeRO: 3, TP: 1, PP: 1, GPUs: gpus(t, "a100-sxm-40gb", "l40s")}
		},
	}
	for name, build := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := Run(build(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			got := mustJSON(t, p)
			path := filepath.Join("testdata", "golden", name+".json")
			if *update {
				os.MkdirAll(filepath.Dir(path), 0o755)
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./planner -run TestGolden -update)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("plan changed (-want +got); rerun with -update if intended:\n%s", diff)
			}
		})
	}
}

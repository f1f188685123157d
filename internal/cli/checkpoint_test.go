package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/planner"
)

// TestPlanCheckpointIndex: plan --checkpoint-index reads the index and the
// shard headers next to it (or one .safetensors file), and the plan's
// weights are the checkpoint's.
func TestPlanCheckpointIndex(t *testing.T) {
	dir := filepath.Join("..", "..", "planner", "testdata")
	cfg := filepath.Join(dir, "models", "llama-3.1-405b-instruct-fp8.json")
	index := filepath.Join(dir, "checkpoints", "llama-3.1-405b-instruct-fp8.safetensors.index.json")
	shard := filepath.Join(dir, "checkpoints", "llama-3.1-405b-instruct-fp8.safetensors")
	// The index alone: copied to a folder without its shard.
	alone := filepath.Join(t.TempDir(), "model.safetensors.index.json")
	data, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, source string
	}{
		{"index and header", index, "safetensors_headers"},
		{"one safetensors file", shard, "safetensors_headers"},
		{"index alone", alone, "safetensors_index"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := run(t, "plan", "--model", cfg, "--checkpoint-index", tc.path, "--gpu", "h200-sxm-141gb", "--gpus", "8", "-o", "json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var p planner.Plan
			if err := json.Unmarshal([]byte(out), &p); err != nil {
				t.Fatal(err)
			}
			if p.Model.WeightsBytes != 487229259776 || p.Model.WeightsSource != tc.source {
				t.Errorf("weights %d from %q, want 487229259776 from %s", p.Model.WeightsBytes, p.Model.WeightsSource, tc.source)
			}
			if p.Workload.Precision != planner.FormatFP8 {
				t.Errorf("precision %s, want the checkpoint's fp8 when --precision is not given", p.Workload.Precision)
			}
		})
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"weight_map":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{bad, filepath.Join(t.TempDir(), "missing.json")} {
		_, errOut, code := run(t, "plan", "--model", cfg, "--checkpoint-index", path, "--gpu", "h200-sxm-141gb")
		if code == 0 || !strings.Contains(errOut, "--checkpoint-index") {
			t.Errorf("%s: exit %d, %q; want an error naming --checkpoint-index", path, code, errOut)
		}
	}
}

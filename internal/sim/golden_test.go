package sim

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpufleet/gpufleet/internal/scheduler"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestGoldenTiny replays testdata/tiny.csv on testdata/tiny-cluster.yaml
// under every policy and compares the JSON report and SVG plot with
// testdata/golden/<policy>.golden; -update rewrites them. Each policy runs
// twice and must give byte-identical output.
func TestGoldenTiny(t *testing.T) {
	for _, policy := range []string{"fifo", "bestfit", "backfill", "gpufleet"} {
		t.Run(policy, func(t *testing.T) {
			pc, err := scheduler.PolicyConfig(policy)
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Policy: pc, EstimateError: 0.3, Seed: 11}
			got := tinyRun(t, cfg)
			if again := tinyRun(t, cfg); !bytes.Equal(got, again) {
				t.Fatalf("two runs differ")
			}
			path := filepath.Join("testdata", "golden", policy+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(want, got) {
				t.Errorf("%s differs from the golden file; run go test ./internal/sim -run TestGoldenTiny -update and review the diff", path)
			}
		})
	}
}

package scheduler_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

var update = flag.Bool("update", false, "rewrite the expected blocks of testdata/scenarios/*.txt")

// TestScenarios runs every scenario script and compares each schedule's
// output with the expected block after it. Each script runs twice: the
// scheduler must give byte-identical output.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenarios")
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".txt")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := schedtest.Run(string(src))
			if err != nil {
				t.Fatal(err)
			}
			again, err := schedtest.Run(string(src))
			if err != nil {
				t.Fatal(err)
			}
			if got != again {
				t.Fatalf("two runs differ (-first +second):\n%s", cmp.Diff(got, again))
			}
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if diff := cmp.Diff(string(src), got); diff != "" {
				t.Errorf("scenario output differs (-want +got); rerun with -update if intended:\n%s", diff)
			}
		})
	}
}

// TestScenariosCoverEveryCode checks that the scenario files, between
// them, show every reason code the scheduler can give a user: each wait
// code on a pending line, each stop code on a stop line, each fail code on
// a fail line.
func TestScenariosCoverEveryCode(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[string]bool{"pending": {}, "stop": {}, "fail": {}}
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(src)) {
			f := strings.Fields(line)
			if len(f) < 3 || seen[f[0]] == nil {
				continue
			}
			code := f[2] // stop JOB CODE ..., fail JOB CODE ...
			if f[0] == "pending" && len(f) >= 6 {
				code = f[5] // pending JOB pos= team-pos= eta= CODE: ...
			}
			seen[f[0]][strings.TrimSuffix(code, ":")] = true
		}
	}
	for kind, codes := range map[string][]string{"pending": scheduler.WaitCodes(), "stop": scheduler.StopCodes(), "fail": scheduler.FailCodes()} {
		for _, c := range codes {
			if !seen[kind][c] {
				t.Errorf("no scenario shows a %s line with code %s", kind, c)
			}
		}
	}
}

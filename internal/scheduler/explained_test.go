package scheduler_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// explainedProblem says what is wrong with a reason as data, or "": the
// explanation's code is the reason code, and the sentence is the
// explanation's String, never empty (the scheduler writes no words of its
// own).
func explainedProblem(code, reason string, e *gpufleet.Explanation) string {
	switch {
	case e == nil:
		return "no explanation"
	case e.Code != code:
		return "explanation code " + e.Code + ", reason code " + code
	case e.String() == "":
		return "the explanation renders no sentence"
	case reason != e.String():
		return "reason " + reason + ", explanation says " + e.String()
	}
	return ""
}

// TestScenarioReasonsAreData: over every scenario script, every pending
// entry's and every refusal's sentence is its explanation's String.
func TestScenarioReasonsAreData(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]bool{}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".txt")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			h := schedtest.NewHarness()
			h.Explained = func(job, code, reason string, e *gpufleet.Explanation) {
				codes[code] = true
				if p := explainedProblem(code, reason, e); p != "" {
					t.Errorf("job %q (%s): %s", job, code, p)
				}
			}
			if _, err := h.Run(string(src)); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, c := range scheduler.WaitCodes() {
		if !codes[c] {
			t.Errorf("no scenario gives reason code %s: the test proves nothing of it", c)
		}
	}
}

// TestPropertyReasonsAreData: on random fleets and queues, every pending
// entry's sentence is its explanation's String.
func TestPropertyReasonsAreData(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		if rapid.Bool().Draw(t, "shallow") {
			in.Config.ReasonDepth = rapid.IntRange(1, 3).Draw(t, "depth") // brief explanations too
		}
		for _, p := range scheduler.Schedule(in).Pending {
			if pr := explainedProblem(p.ReasonCode, p.Reason, p.Explanation); pr != "" {
				t.Fatalf("job %s (%s): %s", p.Job, p.ReasonCode, pr)
			}
		}
	})
}

package scheduler_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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

// TestReasonData: the reasons that are not about nodes carry their
// figures as data. Each case is the last explanation a scenario script
// gives a job with a code; the node counts are left to the scenarios'
// explain lines.
func TestReasonData(t *testing.T) {
	limit := 4.0
	start := time.Date(2025, 1, 1, 1, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		file, job, code string
		want            *gpufleet.Explanation
	}{
		"order names the blocker": {file: "backfill_eta", job: "small", code: scheduler.ReasonOrder,
			want: &gpufleet.Explanation{Code: scheduler.ReasonOrder, Blocker: &gpufleet.Blocker{Job: "big", Position: 1}}},
		"reservation names the head job, its start and the estimate": {file: "backfill", job: "long", code: scheduler.ReasonReservation,
			want: &gpufleet.Explanation{Code: scheduler.ReasonReservation, Reservation: &gpufleet.ReservationHold{Job: "big", Start: start, EstimateS: 7200}}},
		"cycle limit": {file: "cycle_limit", job: "c", code: scheduler.ReasonCycleLimit,
			want: &gpufleet.Explanation{Code: scheduler.ReasonCycleLimit, CycleLimit: 2}},
		"preempting counts the victims and the grace": {file: "cancel_grace", job: "prod", code: scheduler.ReasonPreempting,
			want: &gpufleet.Explanation{Code: scheduler.ReasonPreempting, Preemption: &gpufleet.Preemption{Victims: 1, GraceS: 30}}},
		"capacity while stopping jobs leave": {file: "cancel_grace", job: "low", code: scheduler.ReasonCapacity,
			want: &gpufleet.Explanation{Code: scheduler.ReasonCapacity, Preemption: &gpufleet.Preemption{Victims: 1, GraceS: 30, Stopping: true}}},
		"slower model, the slowdown and when it takes it": {file: "slower_model", job: "short", code: scheduler.ReasonSlowerModel,
			want: &gpufleet.Explanation{Code: scheduler.ReasonSlowerModel, Slower: &gpufleet.SlowerWait{Model: "k80", Slowdown: 3.75, TakesInS: 105}}},
		"stack: the first node and what it lacks": {file: "stack", job: "newest", code: scheduler.ReasonStackMismatch,
			want: &gpufleet.Explanation{Code: scheduler.ReasonStackMismatch, Stack: &gpufleet.StackMismatch{Node: "h2", Unmet: "cuda >=13.0: the node has 12.2"}}},
		"stack unknown": {file: "stack", job: "ghost", code: scheduler.ReasonStackMismatch,
			want: &gpufleet.Explanation{Code: scheduler.ReasonStackMismatch, Stack: &gpufleet.StackMismatch{Stack: "prod-999", Unknown: true}}},
		"quota never enough": {file: "quota_exceeded", job: "huge", code: scheduler.ReasonQuotaExceeded,
			want: &gpufleet.Explanation{Code: scheduler.ReasonQuotaExceeded,
				Quota: &gpufleet.QuotaShortfall{Class: "h100-sxm-80gb", Asked: 12, Quota: 4, Limit: &limit}}},
		"quota past the reason depth is brief": {file: "reason_depth", job: "a2", code: scheduler.ReasonQuota,
			want: &gpufleet.Explanation{Code: scheduler.ReasonQuota, Brief: true, Quota: &gpufleet.QuotaShortfall{Class: "h100-sxm-80gb", LimitReached: true}}},
		"no GPU has the MIG profile": {file: "mig", job: "bad", code: scheduler.ReasonUnplaceable,
			want: &gpufleet.Explanation{Code: scheduler.ReasonUnplaceable, Profile: "3g.40gb"}},
		"the spare held for production": {file: "spare", job: "t2", code: scheduler.ReasonCapacity,
			want: &gpufleet.Explanation{Code: scheduler.ReasonCapacity, SpareHeld: 2}},
		"the preemption search limit": {file: "preempt_search_limit", job: "i1", code: scheduler.ReasonCapacity,
			want: &gpufleet.Explanation{Code: scheduler.ReasonCapacity, SearchLimit: 1}},
	}
	counts := cmpopts.IgnoreFields(gpufleet.Explanation{}, "NodesEvaluated", "NodesFiltered", "Exhausted", "Need", "Most", "PerNode", "NotReady", "Never", "Detail")
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("testdata", "scenarios", tc.file+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			var got *gpufleet.Explanation
			h := schedtest.NewHarness()
			h.Explained = func(job, code, _ string, e *gpufleet.Explanation) {
				if job == tc.job && code == tc.code {
					got = e
				}
			}
			if _, err := h.Run(string(src)); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, counts); diff != "" {
				t.Errorf("explanation of %s (-want +got):\n%s", tc.job, diff)
			}
		})
	}
}

package scheduler

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// TestKeepWaitPerSizeClass: the history keeps the newest ETAHistory
// samples of each size class, so a rare class is not pushed out by a
// frequent one.
func TestKeepWaitPerSizeClass(t *testing.T) {
	var h []WaitSample
	h = KeepWait(h, WaitSample{GPUs: 16, Actual: time.Hour})
	for i := range 3 * ETAHistory {
		h = KeepWait(h, WaitSample{GPUs: 1, Actual: time.Duration(i)})
	}
	if len(h) != ETAHistory+1 || h[0].GPUs != 16 {
		t.Fatalf("%d samples, first %+v; want the 16-GPU sample kept beside %d one-GPU ones", len(h), h[0], ETAHistory)
	}
	if first := h[1].Actual; first != time.Duration(2*ETAHistory) {
		t.Errorf("oldest one-GPU sample kept is #%d, want #%d", first, 2*ETAHistory)
	}
}

// TestCellKaplanMeier: censored samples (jobs still waiting) raise the
// p90 that the started jobs alone would put too low.
func TestCellKaplanMeier(t *testing.T) {
	var h []WaitSample
	for i := range 40 {
		h = append(h, WaitSample{GPUs: 1, Predicted: time.Hour, Actual: time.Duration(i+1) * 6 * time.Minute}) // 6 min to 4 h
	}
	idx := make([]int, len(h))
	for i := range idx {
		idx[i] = i
	}
	done := cellOf(h, idx)
	for range 40 {
		h = append(h, WaitSample{GPUs: 1, Predicted: time.Hour, Actual: 3 * time.Hour, Censored: true})
		idx = append(idx, len(h)-1)
	}
	waiting := cellOf(h, idx)
	if done == nil || waiting == nil {
		t.Fatal("no cell")
	}
	if !(waiting.q90 > done.q90) {
		t.Errorf("with 40 jobs still waiting 3h: q90 %.2f; started alone: %.2f; want higher", waiting.q90, done.q90)
	}
	// Started alone, the p90 is the 36th of 40 waits: 3.6 h against 1 h
	// predicted.
	if got := applyResidual(time.Hour, done.q90); math.Abs(got.Hours()-3.6) > 0.11 {
		t.Errorf("p90 of the started jobs %s, want about 3.6h", got)
	}
	// With the 40 leaving the risk set at 3 h, the p90 is the 9th of the
	// 10 later waits: 3.9 h.
	if got := applyResidual(time.Hour, waiting.q90); math.Abs(got.Hours()-3.9) > 0.11 {
		t.Errorf("p90 with jobs still waiting %s, want about 3.9h", got)
	}
}

// TestKeepArrivals: the arrivals kept are those within the window, at
// most ArrivalHistory of them, the newest.
func TestKeepArrivals(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var a []Job
	for i := range ArrivalHistory + 10 {
		now := t0.Add(time.Duration(i) * time.Second)
		a = KeepArrivals(a, now, 24*time.Hour, Job{ID: fmt.Sprint(i), Submitted: now})
	}
	if len(a) != ArrivalHistory || a[0].ID != "10" {
		t.Fatalf("%d arrivals, first %s; want %d, first 10", len(a), a[0].ID, ArrivalHistory)
	}
	// At once, as a leader taking over a queue passes them: the same.
	var all []Job
	for i := range ArrivalHistory + 10 {
		all = append(all, Job{ID: fmt.Sprint(i), Submitted: t0.Add(time.Duration(i) * time.Second)})
	}
	if b := KeepArrivals(nil, all[len(all)-1].Submitted, 24*time.Hour, all...); !slices.EqualFunc(a, b, func(x, y Job) bool { return x.ID == y.ID }) {
		t.Errorf("at once: %d arrivals, first %s; want one at a time's %d, first %s", len(b), b[0].ID, len(a), a[0].ID)
	}
	a = KeepArrivals(a, t0.Add(48*time.Hour), 24*time.Hour, Job{ID: "late", Submitted: t0.Add(48 * time.Hour)})
	if len(a) != 1 || a[0].ID != "late" {
		t.Errorf("a day later: %d arrivals, want the new one alone", len(a))
	}
}

package cli

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/capacity"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// TestDevHistoryTellsItsStory: whatever the weekday gpufleet dev starts
// on, its seeded history makes procurement order H100 nodes and need
// nothing for the idle L4s, as the README and docs/CAPACITY.md show.
func TestDevHistoryTellsItsStory(t *testing.T) {
	pol, err := scheduler.PolicyConfig("gpufleet")
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string]string{}
	fleets := map[string]capacity.ModelFleet{}
	for _, d := range devDemand {
		for _, n := range d.nodes {
			byNode[n] = d.model
		}
		fleets[d.model] = capacity.ModelFleet{Model: d.model, Nodes: len(d.nodes), GPUsPerNode: d.gpus}
	}
	want := map[string]capacity.Action{"h100-sxm-80gb": capacity.Order, "l4": capacity.Nothing}
	for day := range 7 {
		now := time.Date(2026, 12, 7+day, 15, 0, 0, 0, time.UTC)
		jobs := devHistory(60, now)
		if again := devHistory(60, now); len(again) != len(jobs) {
			t.Fatalf("devHistory is not deterministic: %d then %d jobs", len(jobs), len(again))
		}
		for model, action := range want {
			hist := capacity.DemandHistory(jobs, now, func(j gpufleet.Job) bool { return capacity.JobModel(j, byNode) == model })
			rec, _, err := capacity.Procure(capacity.ProcureInput{Today: now.Truncate(24 * time.Hour), Fleet: fleets[model], History: hist,
				Pool: capacity.Pool(jobs, model, byNode), HorizonDays: 180, LeadTimeDays: 84, LeadTimeSource: "test", Target: capacity.DefaultTarget,
				Quantile: 0.8, Catalog: catalog.Default(), Policy: pol, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s %s, crossing %s, %d nodes, chance %.2f", now.Weekday(), model, rec.Action, fmtDate(rec.Crossing), rec.Nodes, rec.Probability)
			if rec.Action != action {
				t.Errorf("dev started on a %s: %s gets %s, want %s: %v", now.Weekday(), model, rec.Action, action, rec.Reasons)
			}
		}
	}
}

func fmtDate(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.DateOnly)
}

// TestDevTeamQuotas: each dev team gets a quota on every dev GPU model,
// named by catalog id, and the quotas of a model never add up to more
// GPUs than the dev fleet has of it.
func TestDevTeamQuotas(t *testing.T) {
	have := map[string]int{}
	for _, d := range devDemand {
		have[d.model] = len(d.nodes) * d.gpus
	}
	if have["h100-sxm-80gb"] != 16 || have["a100-sxm-80gb"] != 16 || have["l4"] != 16 || have["h200-sxm-141gb"] != 8 {
		t.Fatalf("dev fleet %v, want 2x8 H100, 2x8 A100, 4x4 L4, 1x8 H200", have)
	}
	cat := catalog.Default()
	total := map[string]int{}
	for _, team := range []string{"team-a", "team-b"} {
		r := devTeam(team)
		if r.Name != team || len(r.Quota) != len(have) {
			t.Fatalf("devTeam(%s) = %+v, want a quota on each of %v", team, r, have)
		}
		for model, n := range r.Quota {
			if _, err := cat.Lookup(model); err != nil || n <= 0 {
				t.Errorf("%s: quota %s=%d: %v", team, model, n, err)
			}
			total[model] += n
		}
		r.Quota["l4"] = 99 // a copy: the seed stays as it was
		if devQuotas[team]["l4"] == 99 {
			t.Error("devTeam hands out the seed's own map")
		}
	}
	for model, n := range total {
		if n > have[model] {
			t.Errorf("%s: quotas add up to %d GPUs, the fleet has %d", model, n, have[model])
		}
	}
	if r := devTeam("team-z"); r.Quota != nil {
		t.Errorf("an unknown team gets quota %v, want none (PutTeam keeps what it has)", r.Quota)
	}
}

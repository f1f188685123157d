package capacity

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/forecast"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

var today = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

// history is days of demand that start at base GPU-hours a day and grow
// by growth a day, lower at weekends.
func history(days int, base, growth float64) forecast.Series {
	s := forecast.Series{Start: today.AddDate(0, 0, -days)}
	for i := range days {
		v := base + growth*float64(i)
		if wd := s.Day(i).Weekday(); wd == time.Saturday || wd == time.Sunday {
			v *= 0.5
		}
		s.Values = append(s.Values, v)
	}
	return s
}

// pool is a mix of one-GPU notebooks, eight-GPU training runs and
// four-GPU inference jobs.
var pool = []PoolJob{
	{GPUs: 1, Seconds: 1800, Class: gpufleet.Interactive, Team: "a", DaySeconds: 9 * 3600},
	{GPUs: 1, Seconds: 3600, Class: gpufleet.Interactive, Team: "b", DaySeconds: 14 * 3600},
	{GPUs: 8, Seconds: 6 * 3600, Class: gpufleet.Training, Team: "a", DaySeconds: 10 * 3600},
	{GPUs: 4, Seconds: 3 * 3600, Class: gpufleet.Training, Team: "b", DaySeconds: 16 * 3600},
	{GPUs: 2, Seconds: 2 * 3600, Class: gpufleet.Batch, Team: "b", DaySeconds: 2 * 3600},
}

func input(t testing.TB, hist forecast.Series, lead int) ProcureInput {
	t.Helper()
	pol, err := scheduler.PolicyConfig("gpufleet")
	if err != nil {
		t.Fatal(err)
	}
	return ProcureInput{Today: today, Fleet: ModelFleet{Model: "h100-sxm-80gb", Nodes: 2, GPUsPerNode: 8, NVLinkDomainGPUs: 8},
		History: hist, Pool: pool, HorizonDays: 56, LeadTimeDays: lead, LeadTimeSource: "test", Target: DefaultTarget,
		Quantile: 0.8, Catalog: catalog.Default(), Policy: pol, Seed: 1}
}

var update = flag.Bool("update", false, "rewrite the golden files")

// golden compares v, as indented JSON, with testdata/name.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs (go test -update to accept) (-want +got):\n%s", path, d)
	}
}

// TestProcureGolden: fixed histories and the decision each gets, with
// its replays: growing demand on a small fleet orders, flat demand well
// inside the fleet orders nothing, an allocation target.
func TestProcureGolden(t *testing.T) {
	for _, c := range []struct {
		name   string
		hist   forecast.Series
		target Target
		lead   int
		want   Action
	}{
		{"growing", history(42, 150, 3), DefaultTarget, 84, Order},
		{"flat", history(42, 60, 0), DefaultTarget, 84, Nothing},
		{"allocation", history(42, 260, 3), Target{Metric: Allocation, Limit: 0.85}, 30, Order},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := input(t, c.hist, c.lead)
			in.Target = c.target
			rec, _, err := Procure(in)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Action != c.want {
				t.Fatalf("action %s, want %s: %v", rec.Action, c.want, rec.Reasons)
			}
			switch rec.Action {
			case Order:
				if rec.With == nil || !rec.With.Meets || rec.Without == nil || rec.Without.Meets {
					t.Errorf("an order without a replay that shows it meets the target where today's fleet does not: %+v", rec)
				}
			case Nothing:
				if rec.Without == nil || !rec.Without.Meets {
					t.Errorf("nothing needed without a replay that meets the target: %+v", rec)
				}
			}
			golden(t, "procure-"+c.name+".json", rec)
		})
	}
}

// nodesOrdered ranks a decision by what it buys: none, then the nodes
// of an order, then no plan (more than any order).
func nodesOrdered(r Recommendation) int {
	switch r.Action {
	case Order:
		return r.Nodes
	case NoPlan:
		return math.MaxInt
	}
	return 0
}

// TestProcureMoreDemandNeverOrdersLess: the same history scaled up never
// gets fewer nodes, nor a later crossing.
func TestProcureMoreDemandNeverOrdersLess(t *testing.T) {
	for _, shape := range []struct{ base, growth float64 }{{60, 0}, {100, 2}, {150, 3}, {40, 6}} {
		prev, prevCross := -1, time.Time{}
		for _, k := range []float64{0.5, 1, 1.5, 2, 3} {
			h := history(42, shape.base*k, shape.growth*k)
			rec, _, err := Procure(input(t, h, 84))
			if err != nil {
				t.Fatal(err)
			}
			n := nodesOrdered(rec)
			if n < prev {
				t.Errorf("base %g growth %g: demand x%g orders %d nodes, less than %d for less demand", shape.base, shape.growth, k, n, prev)
			}
			if rec.Crossing != nil && !prevCross.IsZero() && rec.Crossing.After(prevCross) {
				t.Errorf("base %g growth %g: demand x%g crosses the target on %s, after %s for less demand", shape.base, shape.growth, k, rec.Crossing, prevCross)
			}
			prev = n
			if rec.Crossing != nil {
				prevCross = *rec.Crossing
			}
		}
	}
}

// TestProcureLongerLeadNeverOrdersLater: the order-by date never moves
// later as the lead time grows, and the rest of the decision does not
// move with it.
func TestProcureLongerLeadNeverOrdersLater(t *testing.T) {
	h := history(42, 150, 3)
	var prev *Recommendation
	for _, lead := range []int{0, 7, 30, 84, 180, 365} {
		rec, _, err := Procure(input(t, h, lead))
		if err != nil {
			t.Fatal(err)
		}
		if rec.OrderBy == nil {
			t.Fatalf("lead %d: no order-by date: %+v", lead, rec)
		}
		if prev != nil {
			if rec.OrderBy.After(*prev.OrderBy) {
				t.Errorf("lead %d days orders by %s, later than %s with a shorter lead", lead, rec.OrderBy, prev.OrderBy)
			}
			if rec.Nodes != prev.Nodes || !rec.Crossing.Equal(*prev.Crossing) {
				t.Errorf("lead %d days changed the order: %d nodes crossing %s, was %d crossing %s", lead, rec.Nodes, rec.Crossing, prev.Nodes, prev.Crossing)
			}
		}
		prev = &rec
	}
}

func TestProcureRefuses(t *testing.T) {
	for name, edit := range map[string]func(*ProcureInput){
		"short history":  func(in *ProcureInput) { in.History = history(10, 100, 0) },
		"no model":       func(in *ProcureInput) { in.Fleet.Model = "" },
		"horizon 3 days": func(in *ProcureInput) { in.HorizonDays = 3 },
		"lead 10 years":  func(in *ProcureInput) { in.LeadTimeDays = 3650 },
		"quantile 1":     func(in *ProcureInput) { in.Quantile = 1 },
		"negative day":   func(in *ProcureInput) { in.History.Values[3] = -1 },
	} {
		in := input(t, history(42, 100, 1), 30)
		edit(&in)
		if _, _, err := Procure(in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// BenchmarkProcure times one decision (forecast, weekly replays up to the
// crossing, the search for the purchase) on the test fleet of 16 GPUs and
// on one ten times larger with ten times the demand.
func BenchmarkProcure(b *testing.B) {
	for _, scale := range []int{1, 10} {
		b.Run(fmt.Sprintf("gpus=%d", 16*scale), func(b *testing.B) {
			in := input(b, history(42, 150*float64(scale), 3*float64(scale)), 84)
			in.Fleet.Nodes *= scale
			b.Run("procure", func(b *testing.B) {
				for b.Loop() {
					if _, _, err := Procure(in); err != nil {
						b.Fatal(err)
					}
				}
			})
			// The baseline: one replay of one week (three samplings and
			// the warm-up), the unit procurement spends its time in.
			b.Run("one-week-replay", func(b *testing.B) {
				fc, err := forecast.HoltWinters(in.History, in.HorizonDays)
				if err != nil {
					b.Fatal(err)
				}
				r := &replayer{cat: in.Catalog, policy: in.Policy, model: in.Fleet, pool: in.Pool, target: in.Target, seed: in.Seed,
					start: in.Today, history: in.History, fc: fc, quantile: in.Quantile}
				for b.Loop() {
					if _, err := r.week(0, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// TestProcureCountsNodesAsTheyAre: a model whose nodes differ in size is
// replayed with its GPUs as they are (two nodes of 8 and one of 4 are 20
// GPUs, not three nodes of 8), and an order buys nodes of the common size.
func TestProcureCountsNodesAsTheyAre(t *testing.T) {
	in := input(t, history(42, 150, 3), 84)
	in.Fleet = ModelFleet{Model: "h100-sxm-80gb", Nodes: 3, GPUsPerNode: 8, NVLinkDomainGPUs: 8,
		Sizes: []NodeSize{{GPUs: 4, Nodes: 1}, {GPUs: 8, Nodes: 2}}}
	if g := in.Fleet.GPUs(); g != 20 {
		t.Fatalf("GPUs %d, want 20", g)
	}
	rec, _, err := Procure(in)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Without == nil || rec.Without.GPUs != 20 {
		t.Errorf("today's fleet replayed as %+v, want its 20 GPUs", rec.Without)
	}
	if rec.Action == Order && (rec.With == nil || rec.With.GPUs != 20+rec.Nodes*8 || rec.GPUs != rec.Nodes*8) {
		t.Errorf("an order of %d nodes (%d GPUs) replayed as %+v, want nodes of 8 added to the 20", rec.Nodes, rec.GPUs, rec.With)
	}
	if !strings.Contains(strings.Join(rec.Reasons, " "), "today's 20 GPUs") {
		t.Errorf("reasons %v: want today's 20 GPUs", rec.Reasons)
	}
	in.Fleet.Sizes[0].Nodes = 5 // 7 nodes in the sizes, 3 in the count
	if _, _, err := Procure(in); err == nil {
		t.Error("sizes that do not add up to the nodes are accepted")
	}
}

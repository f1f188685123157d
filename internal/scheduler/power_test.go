package scheduler_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// TestPropertyRacksStayUnderBudget: whatever the fleet, the queue and the
// racks' budgets and draws, the GPUs a cycle starts never take a rack's
// projected draw over its budget (less the production reserve for other
// classes), counting what each placed GPU adds for its job's class.
func TestPropertyRacksStayUnderBudget(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		racks := map[string]bool{}
		for _, n := range in.Nodes {
			if n.Rack != "" {
				racks[n.Rack] = true
			}
		}
		for _, name := range sortedSet(racks) {
			budget := gpufleet.Watts(rapid.IntRange(0, 12).Draw(t, "budget_kw")) * 1000
			in.Racks = append(in.Racks, scheduler.Rack{Name: name, BudgetWatts: budget,
				ProductionReserveWatts: gpufleet.Watts(rapid.IntRange(0, 2).Draw(t, "reserve_kw")) * 1000,
				DrawWatts:              gpufleet.Watts(rapid.IntRange(0, 10).Draw(t, "draw_kw")) * 1000})
		}
		in.GPUDraw = scheduler.GPUDraw{}
		for _, m := range propModels {
			if rapid.Bool().Draw(t, "learned") {
				in.GPUDraw[m] = map[gpufleet.Priority]float64{gpufleet.Training: float64(rapid.IntRange(100, 900).Draw(t, "w"))}
			}
		}
		out := scheduler.Schedule(in)
		checkOutput(t, in, out)

		rackOf, modelOf := map[string]string{}, map[string]string{}
		for _, n := range in.Nodes {
			rackOf[n.Name] = n.Rack
			for _, g := range n.GPUs {
				modelOf[g.ID] = g.Model
				for _, m := range g.MIG {
					modelOf[m.ID] = g.Model
				}
			}
		}
		jobs := map[string]scheduler.Job{}
		for _, j := range in.Jobs {
			jobs[j.ID] = j
		}
		added := map[string]float64{}
		prod := map[string]bool{}
		for _, st := range out.Starts {
			j := jobs[st.Job]
			for _, p := range st.Placement {
				for _, id := range p.GPUs {
					frac := p.Fraction
					if frac <= 0 {
						frac = 1
					}
					if j.Resources.Sharing.Kind == gpufleet.MIG {
						mp, _ := gpufleet.ParseMIGProfile(j.Resources.Sharing.Profile)
						frac = mp.Share()
					}
					added[rackOf[p.Node]] += frac * perGPU(in, modelOf[id], j.Priority)
					prod[rackOf[p.Node]] = prod[rackOf[p.Node]] || j.Priority == gpufleet.Production
				}
			}
		}
		for _, r := range in.Racks {
			if r.BudgetWatts <= 0 || added[r.Name] == 0 {
				continue
			}
			limit := float64(r.BudgetWatts)
			if !prod[r.Name] {
				limit -= float64(min(r.ProductionReserveWatts, r.BudgetWatts))
			}
			if float64(r.DrawWatts)+added[r.Name] > limit+1 {
				t.Fatalf("rack %s: draw %.0f W + %.0f W started > limit %.0f W", r.Name, r.DrawWatts, added[r.Name], limit)
			}
		}
	})
}

// perGPU is what one GPU of model adds for a job of class p, as the
// scheduler reads Input.GPUDraw, with the catalog's prior.
func perGPU(in scheduler.Input, model string, p gpufleet.Priority) float64 {
	if w, ok := in.GPUDraw[model][p]; ok {
		return w
	}
	g := in.Models[model]
	if g.TDPWatts == nil {
		return 0
	}
	idle := *g.TDPWatts / 10
	if g.IdleWatts != nil {
		idle = *g.IdleWatts
	}
	return max(*g.TDPWatts-idle, 0)
}

func sortedSet(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// scheduleRacksBothWays runs in through the searches that visit only the
// racks with room (powerNodes) and through the scan of every node they
// replace, with every reason in full.
func scheduleRacksBothWays(in scheduler.Input) (indexed, scanned scheduler.Output) {
	in.Config.ReasonDepth = 0
	indexed = scheduler.Schedule(in)
	restore := scheduler.ScanAllRackNodes()
	defer restore()
	return indexed, scheduler.Schedule(in)
}

// TestPropertyPowerNodes: with every node in a rack and budgets that leave
// few racks room, the searches that visit only the racks with room
// (powerNodes) decide exactly what the scan of every node decides, ETAs
// included.
func TestPropertyPowerNodes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		racks := rapid.IntRange(1, 6).Draw(t, "racks")
		for i := range in.Nodes {
			in.Nodes[i].Rack = fmt.Sprintf("r%d", rapid.IntRange(0, racks-1).Draw(t, "rack"))
		}
		for r := range racks {
			in.Racks = append(in.Racks, scheduler.Rack{Name: fmt.Sprintf("r%d", r),
				BudgetWatts:            gpufleet.Watts(rapid.IntRange(1, 12).Draw(t, "budget_kw")) * 1000,
				ProductionReserveWatts: gpufleet.Watts(rapid.IntRange(0, 2).Draw(t, "reserve_kw")) * 1000,
				DrawWatts:              gpufleet.Watts(rapid.IntRange(0, 10).Draw(t, "draw_kw")) * 1000})
		}
		in.Config.ETA = true
		indexed, scanned := scheduleRacksBothWays(in)
		if diff := cmp.Diff(scanned, indexed); diff != "" {
			t.Fatalf("rack-driven search and scan differ (-scan +racks):\n%s", diff)
		}
	})
}

// TestPowerNodesLarge is TestPropertyPowerNodes on generated fleets of a
// few hundred nodes in racks of 32 (schedtest.Large: single-node, spread
// and shared jobs), with budgets that leave a few racks room: placements,
// reasons and ETAs are those of the full scan.
func TestPowerNodesLarge(t *testing.T) {
	for _, budget := range []float64{0.87, 0.9} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			in := withRacks(schedtest.Large(schedtest.LargeSpec{Nodes: 320, Pending: 3000, Teams: 6, Seed: 5}), budget)
			in.Config, _ = scheduler.PolicyConfig("gpufleet")
			indexed, scanned := scheduleRacksBothWays(in)
			if diff := cmp.Diff(scanned, indexed); diff != "" {
				t.Fatalf("rack-driven search and scan differ (-scan +racks):\n%s", diff)
			}
			if len(indexed.Starts) == 0 {
				t.Fatal("nothing starts: the budgets leave no room, the test compares nothing")
			}
		})
	}
}

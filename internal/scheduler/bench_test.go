package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// BenchmarkScheduleLargeFleet runs the gpufleet policy on 5,000 nodes x 8
// GPUs (70% busy) with 50,000 queued jobs (see schedtest.Large for the
// mix). "cycle" is the placement cycle alone and reports placements/s and
// ms/cycle; "eta" adds the forward simulation for every queued job and
// reports the ETA pass alone (eta_ms, the difference of the two).
func BenchmarkScheduleLargeFleet(b *testing.B) {
	benchSchedule(b, schedtest.Large(schedtest.DefaultLarge))
}

// BenchmarkScheduleLargeFleetRacks is BenchmarkScheduleLargeFleet with a
// power budget on each rack (32 nodes): what the rack checks of placement
// and of the ETA simulation cost (withRacks).
func BenchmarkScheduleLargeFleetRacks(b *testing.B) {
	benchSchedule(b, withRacks(schedtest.Large(schedtest.DefaultLarge), benchRackBudget))
}

// BenchmarkScheduleLargeFleetStacks is BenchmarkScheduleLargeFleet with
// every node on one of three driver stacks and a tenth of the queued jobs
// requiring versions (20 distinct constraints): what judging jobs' stack
// needs costs (once per distinct node stack and shape).
func BenchmarkScheduleLargeFleetStacks(b *testing.B) {
	in := schedtest.Large(schedtest.DefaultLarge)
	drivers := []string{"535.104.05", "550.54.15", "570.124.06"}
	for i := range in.Nodes {
		in.Nodes[i].Stack = gpufleet.StackVersions{gpufleet.StackDriver: drivers[i%3], gpufleet.StackCUDA: "12.4"}
	}
	for i := range in.Jobs {
		if i%10 == 0 && in.Jobs[i].Placement == nil {
			in.Jobs[i].Resources.Requires = map[string]string{"driver": fmt.Sprintf(">=%d", 530+i/10%20)}
		}
	}
	benchSchedule(b, in)
}

// BenchmarkScheduleLargeFleetSelectors is BenchmarkScheduleLargeFleetStacks
// with node labels and selectors instead of stacks: the same tenth of the
// jobs restricted to the same nodes, for comparison.
func BenchmarkScheduleLargeFleetSelectors(b *testing.B) {
	in := schedtest.Large(schedtest.DefaultLarge)
	drivers := []string{"535", "550", "570"}
	for i := range in.Nodes {
		in.Nodes[i].Labels = map[string]string{"driver": drivers[i%3]}
	}
	for i := range in.Jobs {
		if i%10 == 0 && in.Jobs[i].Placement == nil && 530+i/10%20 > 535 {
			in.Jobs[i].Resources.NodeSelector = map[string]string{"driver": drivers[1+i/10%2]}
		}
	}
	benchSchedule(b, in)
}

// BenchmarkScheduleLargeFleetIsolation is BenchmarkScheduleLargeFleet with
// a third of the nodes on time-sliced vGPUs and a third passthrough VMs,
// and a tenth of the queued jobs requiring hard isolation (half of them
// capping the overhead at 1%): what judging isolation costs (once per
// distinct virtualization and shape).
func BenchmarkScheduleLargeFleetIsolation(b *testing.B) {
	in := schedtest.Large(schedtest.DefaultLarge)
	virts := []string{"bare-metal", "passthrough", "vgpu:H100-80C"}
	for i := range in.Nodes {
		l := map[string]string{}
		for k, v := range in.Nodes[i].Labels {
			l[k] = v
		}
		l[gpufleet.VirtualizationLabel] = virts[i%3]
		in.Nodes[i].Labels = l
	}
	limit := gpufleet.OverheadLimit(0.01)
	for i := range in.Jobs {
		if i%10 == 0 && in.Jobs[i].Placement == nil && in.Jobs[i].Resources.Sharing.Kind != gpufleet.TimeSlice {
			in.Jobs[i].Resources.Isolation = gpufleet.IsolationHard
			if i%20 == 0 {
				in.Jobs[i].Resources.Overhead = &limit
			}
		}
	}
	benchSchedule(b, in)
}

// BenchmarkScheduleHugeFleet is BenchmarkScheduleLargeFleet at ten times
// the nodes and the queue: 50,000 nodes x 8 GPUs, 500,000 queued jobs,
// the same mix (schedtest.HugeLarge). The goal is a cycle under 1 s and an
// ETA pass under 5 s on one core (-cpu 1). The fixture is built only when
// the benchmark runs (go test -bench), never in a plain go test.
func BenchmarkScheduleHugeFleet(b *testing.B) {
	benchSchedule(b, schedtest.Large(schedtest.HugeLarge))
}

// BenchmarkScheduleHugeFleetRacks is BenchmarkScheduleHugeFleet with rack
// power budgets, as BenchmarkScheduleLargeFleetRacks.
func BenchmarkScheduleHugeFleetRacks(b *testing.B) {
	benchSchedule(b, withRacks(schedtest.Large(schedtest.HugeLarge), benchRackBudget))
}

// withArrivals gives the ETA pass a day of arrivals to expect again
// (Input.Arrivals): scheduler.ArrivalHistory of the queued jobs, as if
// submitted evenly over the last day.
func withArrivals(in scheduler.Input) scheduler.Input {
	for i := range in.Jobs {
		if len(in.Arrivals) == scheduler.ArrivalHistory {
			break
		}
		if j := in.Jobs[i]; !j.Running() {
			j.ID = "arrived-" + j.ID
			j.Submitted = in.Now.Add(-scheduler.DefaultArrivalWindow + time.Duration(len(in.Arrivals))*scheduler.DefaultArrivalWindow/scheduler.ArrivalHistory)
			in.Arrivals = append(in.Arrivals, j)
		}
	}
	return in
}

// benchRackBudget is the racks' budget in the benchmarks, a fraction of
// their rated draw: with 70 % of the GPUs busy at their TDP a rack draws
// about 86 % of its rating (the host overhead is a large part of it), so
// some racks have room and some do not.
const benchRackBudget = 0.9

// withRacks gives every rack of in a budget of frac times its rated draw
// (power.RatedNode per node) and its projected draw now: the host
// overhead of its nodes, busy GPUs (and shares of them) at their TDP, idle
// GPUs at their idle draw.
func withRacks(in scheduler.Input, frac float64) scheduler.Input {
	busy := map[string]float64{} // node -> GPUs busy
	for _, j := range in.Jobs {
		for _, p := range j.Placement {
			f := p.Fraction
			if f <= 0 || f > 1 {
				f = 1
			}
			busy[p.Node] += f * float64(len(p.GPUs))
		}
	}
	rated, draw := map[string]float64{}, map[string]float64{}
	var racks []string
	for _, n := range in.Nodes {
		g := in.Models[n.GPUs[0].Model]
		if _, ok := rated[n.Rack]; !ok {
			racks = append(racks, n.Rack)
		}
		k := len(n.GPUs)
		b := min(busy[n.Name], float64(k))
		rated[n.Rack] += float64(power.RatedNode(g, k))
		draw[n.Rack] += float64(power.HostOverhead(g, k)) + b*power.TDP(g) + (float64(k)-b)*power.Idle(g)
	}
	for _, r := range racks {
		in.Racks = append(in.Racks, scheduler.Rack{Name: r, BudgetWatts: gpufleet.Watts(frac * rated[r]), DrawWatts: gpufleet.Watts(draw[r])})
	}
	return in
}

// benchSchedule measures the placement cycle alone ("cycle") and the cycle
// with the ETA pass ("eta") on a generated fleet and queue. Besides wall
// time it reports the process's CPU time (cpu_ms, eta_cpu_ms), which
// other work on a shared machine disturbs less; run it with -cpu 1.
func benchSchedule(b *testing.B, in scheduler.Input) {
	in = withArrivals(in)
	cfg, err := scheduler.PolicyConfig("gpufleet")
	if err != nil {
		b.Fatal(err)
	}
	var cycle, cycleCPU time.Duration
	b.Run("cycle", func(b *testing.B) {
		in.Config = cfg
		in.Config.ETA = false
		var out scheduler.Output
		start, cpu0 := time.Now(), cpuTime()
		for b.Loop() {
			out = scheduler.Schedule(in)
		}
		elapsed := time.Since(start)
		cycle = elapsed / time.Duration(b.N)
		cycleCPU = (cpuTime() - cpu0) / time.Duration(b.N)
		b.ReportMetric(float64(cycleCPU.Microseconds())/1000, "cpu_ms")
		b.ReportMetric(float64(out.Stats.Placed)/cycle.Seconds(), "placements/s")
		b.ReportMetric(float64(cycle.Microseconds())/1000, "cycle_ms")
		b.ReportMetric(float64(out.Stats.Placed), "placed")
		b.ReportMetric(float64(out.Stats.Preempted), "preempted")
		b.ReportMetric(float64(out.Stats.PreemptionSearches), "searches")
		b.ReportMetric(float64(out.Stats.PreemptionSearchesSkipped), "searches_skipped")
	})
	b.Run("eta", func(b *testing.B) {
		in.Config = cfg
		var out scheduler.Output
		start, cpu0 := time.Now(), cpuTime()
		for b.Loop() {
			out = scheduler.Schedule(in)
		}
		per := time.Since(start) / time.Duration(b.N)
		perCPU := (cpuTime() - cpu0) / time.Duration(b.N)
		b.ReportMetric(float64(per.Microseconds())/1000, "cycle+eta_ms")
		b.ReportMetric(float64((per-cycle).Microseconds())/1000, "eta_ms")
		b.ReportMetric(float64((perCPU-cycleCPU).Microseconds())/1000, "eta_cpu_ms")
		withETA := 0
		for _, p := range out.Pending {
			if p.EstimatedStart != nil {
				withETA++
			}
		}
		b.ReportMetric(float64(withETA), "etas")
		b.ReportMetric(float64(len(out.Pending)), "pending")
	})
}

// BenchmarkExplainLargeFleet is the check every submission makes
// (scheduler.Explain: can the fleet ever run this job?) on the fleet of
// gpufleet-load at 10x: 10,000 nodes x 8 GPUs, nothing queued. "fresh"
// builds the fleet index every call, as the server did before it kept a
// FleetCache for its check fleet; "cached" reuses it.
func BenchmarkExplainLargeFleet(b *testing.B) {
	in := schedtest.Large(schedtest.LargeSpec{Nodes: 10000, Pending: 1, Teams: 20, Seed: 1})
	in.Jobs = nil
	for i := range in.Nodes {
		in.Nodes[i].LastSeen = in.Now.Add(-time.Second) // as the server's nodes are
	}
	var err error
	if in.Config, err = scheduler.PolicyConfig("gpufleet"); err != nil {
		b.Fatal(err)
	}
	j := scheduler.Job{ID: "j", Team: "team00", Priority: gpufleet.Batch, Submitted: in.Now,
		Resources: gpufleet.Resources{GPUs: 1}}
	for _, tc := range []struct {
		name    string
		version uint64
	}{{"fresh", 0}, {"cached", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			in := in
			in.Cache, in.FleetVersion = &scheduler.FleetCache{}, tc.version
			for b.Loop() {
				if e, why := scheduler.Explain(in, j); e != nil {
					b.Fatal(why)
				}
			}
		})
	}
}

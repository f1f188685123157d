package scheduler_test

import (
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// BenchmarkScheduleLargeFleet runs the gpufleet policy on 5,000 nodes x 8
// GPUs (70% busy) with 50,000 queued jobs (see schedtest.Large for the
// mix). "cycle" is the placement cycle alone and reports placements/s and
// ms/cycle; "eta" adds the forward simulation for every queued job and
// reports the ETA pass alone (eta_ms, the difference of the two).
func BenchmarkScheduleLargeFleet(b *testing.B) {
	in := schedtest.Large(schedtest.DefaultLarge)
	cfg, err := scheduler.PolicyConfig("gpufleet")
	if err != nil {
		b.Fatal(err)
	}
	var cycle time.Duration
	b.Run("cycle", func(b *testing.B) {
		in.Config = cfg
		in.Config.ETA = false
		var out scheduler.Output
		start := time.Now()
		for b.Loop() {
			out = scheduler.Schedule(in)
		}
		elapsed := time.Since(start)
		cycle = elapsed / time.Duration(b.N)
		b.ReportMetric(float64(out.Stats.Placed)/cycle.Seconds(), "placements/s")
		b.ReportMetric(float64(cycle.Microseconds())/1000, "cycle_ms")
		b.ReportMetric(float64(out.Stats.Placed), "placed")
		b.ReportMetric(float64(out.Stats.Preempted), "preempted")
	})
	b.Run("eta", func(b *testing.B) {
		in.Config = cfg
		var out scheduler.Output
		start := time.Now()
		for b.Loop() {
			out = scheduler.Schedule(in)
		}
		per := time.Since(start) / time.Duration(b.N)
		b.ReportMetric(float64(per.Microseconds())/1000, "cycle+eta_ms")
		b.ReportMetric(float64((per-cycle).Microseconds())/1000, "eta_ms")
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

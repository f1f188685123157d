package audit

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// benchSnapshot is a fleet of n 8-GPU H100 nodes over one day: every GPU
// held by a two-hour attempt after another, one minute rollup per GPU per
// minute, every fourth attempt idle.
func benchSnapshot(n int) Snapshot {
	s := Snapshot{Now: t0, Since: t0.Add(-24 * time.Hour), Models: ModelMap(catalog.Default().All())}
	eff, idle := 0.7, 0.02
	for i := range n {
		nd := node(fmt.Sprintf("n%d", i), "h100-sxm-80gb", 8, fmt.Sprintf("n%d-nvl", i), nil)
		s.Nodes = append(s.Nodes, nd)
		for slot := range 12 {
			start := s.Since.Add(time.Duration(slot) * 2 * time.Hour)
			gpus := []string{nd.GPUs[0].UUID, nd.GPUs[1].UUID, nd.GPUs[2].UUID, nd.GPUs[3].UUID}
			for half := range 2 {
				if half == 1 {
					gpus = []string{nd.GPUs[4].UUID, nd.GPUs[5].UUID, nd.GPUs[6].UUID, nd.GPUs[7].UUID}
				}
				j := job(fmt.Sprintf("j-%d-%d-%d", i, slot, half), "team-a", gpufleet.Training, nd.Name, gpus, start, 2*time.Hour)
				s.Jobs = append(s.Jobs, j)
				e, idleS := &eff, 0.0
				if (slot+half)%4 == 0 {
					e, idleS = &idle, 60
				}
				mem := int64(60 << 30)
				for m := start; m.Before(start.Add(2 * time.Hour)); m = m.Add(time.Minute) {
					for _, g := range gpus {
						s.Usage = append(s.Usage, GPUMinute{GPU: g, Node: nd.Name, Model: "h100-sxm-80gb", Team: "team-a", Minute: m,
							AllocatedS: 60, IdleAllocatedS: idleS, Effective: e, MemoryUsedMax: &mem, PowerWatts: &eff})
					}
				}
			}
		}
	}
	return s
}

// BenchmarkAudit times a whole audit against the least any audit must do:
// one pass over the rollups it reads (docs/PERFORMANCE.md, "Audit").
func BenchmarkAudit(b *testing.B) {
	for _, n := range []int{16, 160} {
		s := benchSnapshot(n)
		b.Run(fmt.Sprintf("nodes=%d/audit", n), func(b *testing.B) {
			b.ReportMetric(float64(len(s.Usage)), "rollups")
			for b.Loop() {
				if r := Run(s); len(r.Findings) == 0 {
					b.Fatal("no findings")
				}
			}
		})
		b.Run(fmt.Sprintf("nodes=%d/one-pass", n), func(b *testing.B) {
			var sink float64
			for b.Loop() {
				for i := range s.Usage {
					sink += s.Usage[i].AllocatedS
				}
			}
			_ = sink
		})
	}
}

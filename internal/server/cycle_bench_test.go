package server

import (
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// BenchmarkLeaderCycle times one full leader cycle of a SQLite-backed
// server: read the active jobs and the nodes, judge silence and the
// repair path, build the scheduler's input, schedule, write the decision
// fenced, and rebuild the agents' orders. The fleet (8-GPU H100 nodes, in
// racks of 32) is full after the first cycle, and the rest of the jobs
// queue: each timed cycle decides over the whole queue and starts
// nothing, the steady state of a busy fleet. Each job's command differs,
// as real jobs' do, so that no two specs are the same text. The 5k x 50k case is
// docs/PERFORMANCE.md's; -short runs the small one only.
func BenchmarkLeaderCycle(b *testing.B) {
	for _, tc := range []struct{ nodes, queued int }{{500, 5000}, {5000, 50000}} {
		b.Run(fmt.Sprintf("nodes=%d/queued=%d", tc.nodes, tc.queued), func(b *testing.B) {
			if testing.Short() && tc.nodes > 500 {
				b.Skip("-short")
			}
			f := newFixtureB(b)
			f.srv.cfg.LeaseTTL = time.Hour // the cycle's deadline is half of it
			f.srv.log = slog.New(slog.DiscardHandler)
			ctx := b.Context()
			if _, err := f.srv.PutTeam(ctx, f.admin, api.TeamRequest{Name: "team-a"}); err != nil {
				b.Fatal(err)
			}
			for i := range tc.nodes {
				name := fmt.Sprintf("n%05d", i)
				n := gpufleet.Node{Name: name, Labels: map[string]string{"rack": fmt.Sprintf("r%03d", i/32)},
					Versions: map[string]string{"driver": "580.65"}}
				for g := range 8 {
					n.GPUs = append(n.GPUs, gpufleet.NodeGPU{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "h100-sxm-80gb",
						MemoryBytes: 80 << 30, NVLinkDomain: name + "-nvl"})
				}
				if err := f.st.PutNode(ctx, n); err != nil {
					b.Fatal(err)
				}
			}
			for r := 0; r*32 < tc.nodes; r++ { // the racks list their nodes (a budget of 0: none)
				rack := gpufleet.Rack{Name: fmt.Sprintf("r%03d", r)}
				for i := r * 32; i < min(r*32+32, tc.nodes); i++ {
					rack.Nodes = append(rack.Nodes, fmt.Sprintf("n%05d", i))
				}
				if err := f.st.PutRack(ctx, rack, "bench"); err != nil {
					b.Fatal(err)
				}
			}
			est := 3600.0
			total := tc.nodes + tc.queued // one 8-GPU job per node runs
			for i := 0; i < total; i += 500 {
				jobs := make([]gpufleet.Job, 0, 500)
				for k := i; k < min(i+500, total); k++ {
					jobs = append(jobs, gpufleet.Job{Team: "team-a", Name: "bench", Priority: gpufleet.Batch, RequestID: fmt.Sprint("req-", k),
						Resources: gpufleet.Resources{GPUs: 8, GPUModels: []string{"h100-sxm-80gb"}}, Command: []string{"python", "train.py", fmt.Sprint("--seed=", k)},
						EstimateS: &est, Retries: gpufleet.Retries{Max: 2}})
				}
				if _, err := f.st.SubmitJobs(ctx, jobs, "bench"); err != nil {
					b.Fatal(err)
				}
			}
			f.srv.dirty.Store(true)
			if err := f.srv.Cycle(ctx); err != nil { // fills the fleet
				b.Fatal(err)
			}
			cpu0 := cycleCPUTime()
			b.ResetTimer()
			for b.Loop() {
				f.srv.dirty.Store(true)
				if err := f.srv.Cycle(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cycleCPUTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}

// cycleCPUTime is the CPU time (user and system) the process has used so
// far: the leader cycle's cost apart from what other processes take of the
// machine's cores.
func cycleCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package server

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// BenchmarkHeartbeatHTTP measures the heartbeat path end to end over HTTP:
// auth, decoding, the in-memory update, the health rules, the rollups and
// the answer. "empty" heartbeats carry nothing; "telemetry" ones carry what
// an 8-GPU agent sends every interval: readings and health evidence.
func BenchmarkHeartbeatHTTP(b *testing.B) {
	for _, telemetry := range []bool{false, true} {
		name := "empty"
		if telemetry {
			name = "telemetry"
		}
		b.Run(name, func(b *testing.B) {
			f := newFixtureB(b)
			h := api.NewHandler(f.srv, f.srv, f.srv, f.srv, api.HandlerOptions{})
			ts := httptest.NewServer(h)
			defer ts.Close()
			const nodes = 64
			clients := make([]*api.Client, nodes)
			for i := range nodes {
				p := f.nodeCred(fmt.Sprintf("n%d", i))
				c, _ := api.NewClient([]string{ts.URL}, p)
				clients[i] = c
			}
			f.cycle()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					node := fmt.Sprintf("n%d", i%nodes)
					r := api.HeartbeatRequest{ProtocolVersion: 1, Node: node}
					if telemetry {
						// As an agent sends it: evidence only while it
						// changes (here: the first beats).
						r.Samples = benchSamples(node, float64(i), i <= nodes)
					}
					if _, err := clients[i%nodes].Heartbeat(b.Context(), r); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "heartbeats/s")
		})
	}
}

// BenchmarkJudge measures the health rules and rollup folding of one
// 8-GPU heartbeat, without HTTP.
func BenchmarkJudge(b *testing.B) {
	f := newFixtureB(b)
	p := f.node("n1", "h100-sxm-80gb", 8)
	f.cycle()
	ctx := b.Context()
	now := time.Now()
	b.ResetTimer()
	for i := range b.N {
		r := api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Samples: benchSamples("n1", float64(i), true)}
		if err := f.srv.judge(ctx, p.Node, r, now.Add(time.Duration(i)*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
}

// benchSamples is an 8-GPU heartbeat's telemetry for a fixture node, with
// the health evidence when withEvidence.
func benchSamples(node string, energy float64, withEvidence bool) []api.GPUSample {
	f := func(v float64) *float64 { return &v }
	u := func(v uint64) *uint64 { return &v }
	n := func(v int) *int { return &v }
	out := make([]api.GPUSample, 8)
	for g := range out {
		mem := int64(40 << 30)
		out[g] = api.GPUSample{UUID: "GPU-" + node + "-" + string(rune('a'+g)), Utilization: f(0.9), SMActivity: f(0.7), DRAMActivity: f(0.4),
			TensorActivity: f(0.3), MemoryUsedBytes: &mem, PowerWatts: f(550), EnergyJoulesTotal: f(550 * energy), TemperatureC: f(61),
			Evidence: &api.GPUEvidence{ClockEventsAll: u(0), Counters: gpu.Counters{ECCCorrectedVolatile: u(0), ECCUncorrectedVolatile: u(0),
				ECCCorrectedAggregate: u(0), ECCUncorrectedAggregate: u(0), RemappedRowsCorrectable: u(0), RemappedRowsUncorrectable: u(0),
				PCIeGen: n(5), PCIeWidth: n(16), PCIeMaxGen: n(5), PCIeMaxWidth: n(16),
				PCIeReplayCount: u(0), NVLinkLinksUp: n(18), NVLinkLinksTotal: n(18), NVLinkErrors: u(0)}}}
		if !withEvidence {
			out[g].Evidence = nil
		}
	}
	return out
}

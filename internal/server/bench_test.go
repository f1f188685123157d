package server

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/gpufleet/gpufleet/internal/api"
)

// BenchmarkHeartbeatHTTP measures the heartbeat path end to end over HTTP:
// auth, decoding, the in-memory update and the answer.
func BenchmarkHeartbeatHTTP(b *testing.B) {
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
			c := clients[i%nodes]
			if _, err := c.Heartbeat(b.Context(), api.HeartbeatRequest{ProtocolVersion: 1, Node: fmt.Sprintf("n%d", i%nodes)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "heartbeats/s")
}

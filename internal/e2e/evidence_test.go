package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// TestAggregateECCEndToEnd follows one counter from the GPU to the health
// rules over real processes: correctable ECC errors that GPU resets keep
// hiding from the volatile counter (a reset restarts it at zero) still show
// in the aggregate counter, which the agent reads from the simulated GPU,
// the heartbeat carries and the server's ecc-sbe-rate rule judges. With a
// threshold of 3 per hour and a reset after every error, the volatile count
// never grows by more than 1, so only the aggregate can degrade the GPU.
func TestAggregateECCEndToEnd(t *testing.T) {
	p := startServer(t, t.TempDir(), nil, "--ecc-corrected-growth", "3", "--ecc-corrected-window", "1h")
	admin := setupTeams(t, p).admin
	a := startFleetAgent(t, p, admin, "ecc-1", "h100-sxm-80gb:1")
	defer func() {
		if t.Failed() {
			a.dumpLog(t)
		}
	}()
	waitNode(t, admin, a.name, 20*time.Second, "ready and healthy", readyAndHealthy)
	time.Sleep(time.Second) // a few heartbeats: the counters' baseline
	ctx := t.Context()
	for i := range 3 {
		if _, err := admin.InjectFault(ctx, a.name, api.FaultRequest{GPU: ptrTo(0), Kind: "ecc-sbe"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(600 * time.Millisecond)
		if _, err := admin.ClearFaults(ctx, a.name, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(600 * time.Millisecond)
		if i < 2 {
			n, err := admin.Node(ctx, a.name)
			if err != nil {
				t.Fatal(err)
			}
			if g := n.GPUs[0]; g.Health != gpufleet.Healthy {
				t.Fatalf("after %d correctable errors gpu 0 is %s (%s); the threshold is 3", i+1, g.Health, g.Reason)
			}
		}
	}
	waitNode(t, admin, a.name, 10*time.Second, "gpu 0 degraded by the aggregate correctable ECC count", func(n gpufleet.Node) error {
		if g := n.GPUs[0]; g.Health != gpufleet.Degraded || !strings.Contains(g.Reason, "correctable ECC errors +3") {
			return fmt.Errorf("gpu 0 %s (%s)", g.Health, g.Reason)
		}
		return nil
	})
}

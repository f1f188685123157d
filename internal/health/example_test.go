package health_test

import (
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet/internal/health"
)

func ExampleEvaluate() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ev := health.NodeEvidence{Node: "gpu-07", InventoryGPUs: 4, HeartbeatAge: 3 * time.Second}
	for i := range 4 {
		ev.GPUs = append(ev.GPUs, health.GPUEvidence{Index: i, Present: true})
	}
	ev.GPUs[3].XIDs = []int{79}
	pending := true
	ev.GPUs[1].RowRemapPending = &pending

	var st health.State
	st, conds := health.Evaluate(st, ev, now, health.DefaultConfig())
	for _, c := range conds {
		fmt.Printf("%s gpu %d: %s, %s\n", c.Rule, c.GPU, c.Severity, c.Action)
	}
	sum := health.Summarize(conds)
	fmt.Printf("node: %s (%s), %s\n", sum.Health, sum.Reason, sum.Action)
	q := health.CheckQuarantine(512, 0, 4, 0.10)
	fmt.Println("quarantine allowed:", q.Allowed)
	_ = st // keep for the next heartbeat
	// Output:
	// row-remap-pending gpu 1: degraded, reset-gpu
	// xid-79 gpu 3: unhealthy, reboot-node
	// node: unhealthy (gpu 3: XID 79 (fell off the bus)), reboot-node
	// quarantine allowed: true
}

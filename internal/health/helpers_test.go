package health

import (
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func u64(v uint64) *uint64         { return &v }
func i(v int) *int                 { return &v }
func b(v bool) *bool               { return &v }
func f64(v float64) *float64       { return &v }
func at(d time.Duration) time.Time { return t0.Add(d) }

// healthyGPU returns a present GPU with no readings.
func healthyGPU(index int) GPUEvidence {
	return GPUEvidence{Index: index, UUID: "GPU-" + string(rune('a'+index)), Model: "h100-sxm-80gb", Present: true}
}

// node returns a healthy node of the given GPUs.
func node(gpus ...GPUEvidence) NodeEvidence {
	return NodeEvidence{Node: "n1", InventoryGPUs: len(gpus), HeartbeatAge: 5 * time.Second, GPUs: gpus}
}

// rules lists the rule ids of conditions, in order.
func rules(conds []Condition) []string {
	out := []string{}
	for _, c := range conds {
		out = append(out, c.Rule)
	}
	return out
}

// step is one evaluation of a sequence: the evidence of GPU 0 at t0+at.
type step struct {
	at  time.Duration
	gpu GPUEvidence
}

// runSteps evaluates one GPU through the steps and returns the rule ids of
// each step's conditions.
func runSteps(cfg Config, steps []step) [][]string {
	var st State
	var out [][]string
	for _, s := range steps {
		var conds []Condition
		st, conds = Evaluate(st, node(s.gpu), at(s.at), cfg)
		out = append(out, rules(conds))
	}
	return out
}

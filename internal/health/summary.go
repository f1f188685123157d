package health

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// GPUSummary is the health of one GPU, from its conditions.
type GPUSummary struct {
	Index int `json:"index"`
	// Health is the worst severity of the GPU's conditions.
	Health gpufleet.Health `json:"health"`
	// Reason is the reason of the worst condition ("XID 79 (fell off the
	// bus)"), empty while the GPU is healthy.
	Reason string `json:"reason"`
	// Action is the most severe action of the GPU's conditions.
	Action Action `json:"action"`
}

// Summary is the health of a node and its GPUs, from a set of conditions.
type Summary struct {
	// Health is the worst severity of all conditions, node-level and GPU.
	Health gpufleet.Health `json:"health"`
	// Reason names the worst condition and its GPU ("gpu 3: XID 79 (fell
	// off the bus)"); empty while the node is healthy.
	Reason string `json:"reason"`
	// Action is the most severe action of all conditions; its Scope says
	// whether it is about the node or about one GPU (see GPUs).
	Action Action `json:"action"`
	// GPUs has one entry per GPU with at least one condition, by index.
	GPUs []GPUSummary `json:"gpus,omitempty"`
}

// healthRank orders health from best to worst.
func healthRank(h gpufleet.Health) int {
	switch h {
	case gpufleet.Degraded:
		return 1
	case gpufleet.Unhealthy:
		return 2
	}
	return 0
}

// worse reports whether a is a worse condition than b: higher severity,
// then more severe action, then an XID over what it causes, then
// Evaluate's order.
func worse(a, b Condition) bool {
	if ra, rb := healthRank(a.Severity), healthRank(b.Severity); ra != rb {
		return ra > rb
	}
	if a.Action != b.Action {
		return a.Action.Rank() > b.Action.Rank()
	}
	// Of conditions as severe with the same action, an XID names the
	// cause (XID 79, the GPU fell off the bus) where the others name its
	// effect (the GPU is missing): the reason people read says the XID.
	if ax, bx := strings.HasPrefix(a.Rule, "xid-"), strings.HasPrefix(b.Rule, "xid-"); ax != bx {
		return ax
	}
	return conditionLess(a, b)
}

// Summarize folds conditions into per-GPU and node health. With no
// conditions everything is healthy and the action is ignore (nothing to
// do). The result does not depend on the order of conds.
func Summarize(conds []Condition) Summary {
	s := Summary{Health: gpufleet.Healthy, Action: ActionIgnore}
	var worst *Condition
	byGPU := map[int]int{} // index -> position in s.GPUs
	worstOf := map[int]Condition{}
	for i := range conds {
		c := conds[i]
		if worst == nil || worse(c, *worst) {
			worst = &conds[i]
		}
		s.Action = Worst(s.Action, c.Action)
		if c.GPU < 0 {
			continue
		}
		pos, ok := byGPU[c.GPU]
		if !ok {
			pos = len(s.GPUs)
			byGPU[c.GPU] = pos
			s.GPUs = append(s.GPUs, GPUSummary{Index: c.GPU, Health: gpufleet.Healthy, Action: ActionIgnore})
			worstOf[c.GPU] = c
		} else if worse(c, worstOf[c.GPU]) {
			worstOf[c.GPU] = c
		}
		s.GPUs[pos].Action = Worst(s.GPUs[pos].Action, c.Action)
	}
	for i := range s.GPUs {
		w := worstOf[s.GPUs[i].Index]
		s.GPUs[i].Health = w.Severity
		if w.Severity != gpufleet.Healthy && w.Severity != "" {
			s.GPUs[i].Reason = w.Reason
		} else {
			s.GPUs[i].Health = gpufleet.Healthy
		}
	}
	sort.Slice(s.GPUs, func(i, j int) bool { return s.GPUs[i].Index < s.GPUs[j].Index })
	if worst != nil && healthRank(worst.Severity) > 0 {
		s.Health = worst.Severity
		s.Reason = worst.Reason
		if worst.GPU >= 0 {
			s.Reason = fmt.Sprintf("gpu %d: %s", worst.GPU, worst.Reason)
		}
	}
	return s
}

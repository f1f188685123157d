package scheduler

import (
	"fmt"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/health"
)

// A node's life out of service and back is decided here, for the server
// (internal/server/health.go carries the decisions out and persists them)
// and for the simulator alike:
//
//	ready|cordoned --Quarantine (health findings, within the breaker)--> draining
//	draining --Drained (no work holds it any more)--> repairing
//	repairing --Repaired (a person, or the simulator's repair time)--> validating
//	validating --Validated: pass--> ready; fail--> repairing
//
// The same path holds for one GPU of a node (a GPU-scope finding drains
// the GPU alone). Each state carries its cause (gpufleet.StateCause).

// NodeLife is where a node, or one of its GPUs, stands on that path.
type NodeLife struct {
	State  gpufleet.NodeState
	Cause  gpufleet.StateCause
	Reason string
}

// Quarantine takes a ready or cordoned node or GPU out of service for the
// health finding reason: it drains, with cause health. Anything else
// (already out of service, down) is left as it is; false then.
func Quarantine(l NodeLife, reason string) (NodeLife, bool) {
	if l.State != gpufleet.NodeReady && l.State != gpufleet.NodeCordoned && l.State != "" {
		return l, false
	}
	return NodeLife{State: gpufleet.NodeDraining, Cause: gpufleet.CauseHealth, Reason: reason}, true
}

// Drained moves a draining node or GPU that no active attempt holds any
// more to repair, keeping its cause and reason; false when it does not
// move.
func Drained(l NodeLife, busy bool) (NodeLife, bool) {
	if l.State != gpufleet.NodeDraining || busy {
		return l, false
	}
	if l.Reason == "" {
		l.Reason = "drained"
	}
	l.State = gpufleet.NodeRepairing
	return l, true
}

// Repaired starts the return to service of a node or GPU in repair: it
// validates (the agent checks it). by names who marked it repaired. A
// node or GPU not in repair is an error wrapping gpufleet.ErrInvalid.
func Repaired(l NodeLife, by string) (NodeLife, error) {
	if l.State != gpufleet.NodeRepairing {
		return l, fmt.Errorf("%w: it is %s, not repairing", gpufleet.ErrInvalid, l.State)
	}
	return NodeLife{State: gpufleet.NodeValidating, Cause: gpufleet.CauseOperator, Reason: "marked repaired by " + by}, nil
}

// Rebenched starts the re-check of a cordoned node whose only findings
// are its benchmark figures (a GPU under its model's fleet median, no
// error): marked repaired, it validates like a repaired node, and the
// validation's bench decides (a pass returns it to ready). benchOnly says
// the findings are all benchmark figures. A node in service is refused: a
// job would share its GPUs with the bench.
func Rebenched(l NodeLife, by string, benchOnly bool) (NodeLife, error) {
	switch {
	case !benchOnly:
		return l, fmt.Errorf("%w: it is %s, not repairing", gpufleet.ErrInvalid, l.State)
	case l.State != gpufleet.NodeCordoned:
		return l, fmt.Errorf("%w: it is %s and its only findings are benchmark figures: cordon it first, so that no job shares a GPU with the bench, then mark it repaired", gpufleet.ErrInvalid, l.State)
	}
	return NodeLife{State: gpufleet.NodeValidating, Cause: gpufleet.CauseOperator,
		Reason: "marked repaired by " + by + ": its only findings are benchmark figures; the validation's bench decides"}, nil
}

// Validated applies a validation's result to a validating node or GPU: a
// pass returns it to ready, a failure sends it back to repair with the
// detail. Anything not validating is left as it is; false then.
func Validated(l NodeLife, passed bool, detail string) (NodeLife, bool) {
	if l.State != gpufleet.NodeValidating {
		return l, false
	}
	if passed {
		return NodeLife{State: gpufleet.NodeReady}, true
	}
	return NodeLife{State: gpufleet.NodeRepairing, Cause: gpufleet.CauseRepair, Reason: "validation failed: " + detail}, true
}

// OutOfService reports whether a node or GPU in state s keeps work off
// while it is on the repair path.
func OutOfService(s gpufleet.NodeState) bool {
	return s == gpufleet.NodeDraining || s == gpufleet.NodeRepairing || s == gpufleet.NodeValidating
}

// Quarantined counts the fleet's GPUs and those automatic quarantine holds
// out of service: on the repair path with cause health (the node's, or
// the GPU's own).
func Quarantined(nodes []gpufleet.Node) (total, out int) {
	held := func(s gpufleet.NodeState, c gpufleet.StateCause) bool {
		return OutOfService(s) && c == gpufleet.CauseHealth
	}
	for _, n := range nodes {
		total += len(n.GPUs)
		if held(n.State, n.StateCause) {
			out += len(n.GPUs)
			continue
		}
		for _, g := range n.GPUs {
			if held(g.State, g.StateCause) {
				out++
			}
		}
	}
	return total, out
}

// Breaker decides whether automatic quarantine may take adding more GPUs
// out of service in a fleet of nodes (health.CheckQuarantine, with the
// counts of Quarantined).
func Breaker(nodes []gpufleet.Node, adding int, maxFraction float64) health.Quarantine {
	total, out := Quarantined(nodes)
	return health.CheckQuarantine(total, out, adding, maxFraction)
}

// StateOf is how the scheduler sees a node or GPU in stored state s:
// ready, draining (its jobs are stopped with their grace), down (silent)
// or cordoned (nothing new starts: cordoned, repairing, validating).
func StateOf(s gpufleet.NodeState) GPUState {
	switch s {
	case gpufleet.NodeReady, "":
		return Ready
	case gpufleet.NodeDraining:
		return Draining
	case gpufleet.NodeDown:
		return Down
	}
	return Cordoned
}

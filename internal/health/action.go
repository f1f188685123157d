package health

// Action is what gpufleet does about a condition. Actions are ranked (see
// Rank): when several conditions hit one GPU or node, the most severe
// action is the one to carry out, because it covers the milder ones.
type Action string

// Actions, from mildest to most severe.
const (
	// ActionIgnore: an application error; the GPU is fine and stays in
	// service. The failing attempt ends with its own error.
	ActionIgnore Action = "ignore"
	// ActionDegrade: the GPU (or node) is marked degraded with the reason
	// and stays in service; a person should look when convenient.
	ActionDegrade Action = "degrade"
	// ActionResetGPU: drain the GPU, reset it once idle (this also applies
	// pending row remaps), validate it and return it to service.
	ActionResetGPU Action = "reset-gpu"
	// ActionDrainGPU: drain the GPU and hold it in repair until an admin
	// marks it repaired.
	ActionDrainGPU Action = "drain-gpu"
	// ActionReplace: drain the GPU and hold it in repair for hardware
	// replacement (RMA); a reset will not fix it.
	ActionReplace Action = "replace"
	// ActionDrainNode: drain every GPU of the node and hold the node in
	// repair until an admin marks it repaired.
	ActionDrainNode Action = "drain-node"
	// ActionRebootNode: drain the node, reboot it, validate it and return it
	// to service.
	ActionRebootNode Action = "reboot-node"
)

// actionOrder lists the actions from mildest to most severe. Node-scope
// actions rank above GPU-scope ones because they take more capacity; within
// a scope, an action ranks above those its remedy covers (a GPU held for a
// person can also be reset; a reboot includes a drain).
var actionOrder = []Action{ActionIgnore, ActionDegrade, ActionResetGPU, ActionDrainGPU, ActionReplace, ActionDrainNode, ActionRebootNode}

// Actions returns every action, from mildest to most severe.
func Actions() []Action {
	out := make([]Action, len(actionOrder))
	copy(out, actionOrder)
	return out
}

// Rank orders actions by severity: 0 for ignore up to 6 for reboot-node,
// -1 for a value that is not an action.
func (a Action) Rank() int {
	for i, b := range actionOrder {
		if a == b {
			return i
		}
	}
	return -1
}

// Valid reports whether a is one of the defined actions.
func (a Action) Valid() bool { return a.Rank() >= 0 }

// MoreSevere reports whether a ranks above b.
func (a Action) MoreSevere(b Action) bool { return a.Rank() > b.Rank() }

// Worst returns the more severe of a and b (a on ties).
func Worst(a, b Action) Action {
	if b.MoreSevere(a) {
		return b
	}
	return a
}

// TakesOutOfService reports whether carrying out the action removes
// capacity from scheduling: every action except ignore and degrade.
func (a Action) TakesOutOfService() bool { return a.Rank() >= ActionResetGPU.Rank() }

// Scope is what an action applies to.
type Scope string

// Scopes.
const (
	ScopeGPU  Scope = "gpu"
	ScopeNode Scope = "node"
)

// Scope says whether the action applies to one GPU or to the whole node:
// drain-node and reboot-node are node scope, every other action (replace
// included) is GPU scope.
func (a Action) Scope() Scope {
	if a == ActionDrainNode || a == ActionRebootNode {
		return ScopeNode
	}
	return ScopeGPU
}

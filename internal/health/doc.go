// Package health holds gpufleet's GPU health rules: the XID catalog, the
// ECC, row-remap, thermal, PCIe, NVLink, missing-GPU and heartbeat rules
// with their thresholds, and the runbooks rendered from them.
//
// The package is pure: values in, decisions out. It does no I/O, reads no
// clock and does not log. Rules that need memory ("sustained for five
// minutes", "the counter grew") get it from a State value the caller keeps
// and passes back:
//
//	st := health.State{}
//	for each heartbeat of a node:
//		ev := evidence(heartbeat)                 // NodeEvidence, readings as pointers
//		st, conds = health.Evaluate(st, ev, now, cfg)
//		sum := health.Summarize(conds)            // per-GPU and node health, reason, action
//		for an action that takes capacity out of service:
//			if health.CheckQuarantine(fleetGPUs, quarantined, adding, cfg.QuarantineMaxFraction).Allowed {
//				drain / reset / reboot
//			}
//		after a repair: st = st.ClearGPU(index)
//
// Each Condition names its rule, its GPU (-1 for the node), a severity
// (gpufleet.Health), an Action, a short reason, a sentence a person can act
// on, and when it was first seen. Actions are ranked; Action.Scope says
// whether an action is about a GPU or the whole node, and
// Action.TakesOutOfService whether it removes capacity.
//
// The XID catalog (XIDs) and the rule table (Rules) are data, with their
// sources; docs/runbooks is generated from them by
// `go test ./internal/health -run TestRunbooks -update`.
package health

package health

import (
	"fmt"
	"strconv"
)

// Quarantine is the circuit breaker's answer for one automatic action.
type Quarantine struct {
	// Allowed is true when the action may take its GPUs out of service.
	Allowed bool `json:"allowed"`
	// Limit is the most GPUs automatic quarantine may hold out of service.
	Limit int `json:"limit"`
	// Reason explains the answer with the counts.
	Reason string `json:"reason"`
}

// CheckQuarantine is the circuit breaker in front of automatic quarantine.
// fleetGPUs is the number of GPUs in the fleet, outOfService the GPUs
// automatic quarantine already holds out (drained, resetting, in repair
// because a rule said so; not the ones an admin drained), and adding the
// GPUs the new action would take out (all of a node's GPUs for a
// node-scope action). maxFraction outside (0, 1] means the default, 0.10.
//
// Real faults are rare and independent: a handful of GPUs at a time. When
// many GPUs look bad at once, the cause is far more likely shared — a bad
// driver or firmware push, a telemetry bug, a cooling or power event in a
// row of racks — and draining everything would turn a partial problem into
// a full outage. So automatic quarantine stops once it would hold more
// than maxFraction of the fleet; the conditions are still reported, and a
// person decides. The first quarantine (nothing out yet) is always
// allowed, so that a small fleet can still drain one node.
func CheckQuarantine(fleetGPUs, outOfService, adding int, maxFraction float64) Quarantine {
	if !(maxFraction > 0 && maxFraction <= 1) {
		maxFraction = DefaultConfig().QuarantineMaxFraction
	}
	fleetGPUs, outOfService, adding = max(fleetGPUs, 0), max(outOfService, 0), max(adding, 0)
	limit := int(maxFraction*float64(fleetGPUs) + 1e-9) // floor: both are >= 0
	total := outOfService + adding
	pct := strconv.FormatFloat(maxFraction*100, 'g', 3, 64) + "%"
	switch {
	case adding == 0:
		return Quarantine{Allowed: true, Limit: limit, Reason: "the action takes no GPU out of service"}
	case total <= limit:
		return Quarantine{Allowed: true, Limit: limit, Reason: fmt.Sprintf(
			"%d of %d GPUs would be out of service by automatic quarantine, within the limit of %d (%s)", total, fleetGPUs, limit, pct)}
	case outOfService == 0:
		return Quarantine{Allowed: true, Limit: limit, Reason: fmt.Sprintf(
			"%d of %d GPUs would be out of service, above the limit of %d (%s), but the first quarantine is always allowed", total, fleetGPUs, limit, pct)}
	}
	return Quarantine{Allowed: false, Limit: limit, Reason: fmt.Sprintf(
		"automatic quarantine paused: %d of %d GPUs would be out of service, above the limit of %d (%s); so many at once points at a shared cause such as a bad driver push, so an admin must decide",
		total, fleetGPUs, limit, pct)}
}

package health

import (
	"fmt"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// RunbookFile is one generated runbook page.
type RunbookFile struct {
	// Name is the file name inside docs/runbooks.
	Name    string
	Content string
}

// actionFlow says what gpufleet does for each action, in node and GPU
// states.
var actionFlow = map[Action]string{
	ActionIgnore:  "Nothing. The GPU stays `ready` and `healthy`; the attempt that hit the error ends with its own failure.",
	ActionDegrade: "Takes nothing out of service: the GPU (or node) shows the condition's health and reason and stays `ready` with its work; the mark clears by itself when the condition ends.",
	ActionResetGPU: "Takes the GPU out of service: it goes `draining` (no new work; its attempts get the checkpoint signal and their grace, then stop and requeue), then `repairing` once idle. " +
		"Reset it (`nvidia-smi -r -i INDEX` with no process on it), then `gpufleet repaired NODE`: it goes `validating` and returns to `ready` only if validation passes; otherwise it is back in `repairing` with the reason.",
	ActionDrainGPU: "Takes the GPU out of service: `draining`, then `repairing`. After the repair an admin marks it repaired; it goes `validating` and returns to `ready` only if validation passes.",
	ActionReplace: "Takes the GPU out of service like drain-gpu and keeps it in `repairing` until the GPU has been replaced; then an admin marks it repaired, it goes `validating`, " +
		"and returns to `ready` only if validation passes.",
	ActionDrainNode: "Takes the whole node out of service: `draining`, then `repairing`. After the repair an admin marks it repaired; it goes `validating` and returns to `ready` only if validation passes.",
	ActionRebootNode: "Takes the whole node out of service: `draining`, then `repairing` once its work has stopped. Reboot it, then `gpufleet repaired NODE`: it goes `validating` and returns to `ready` only if validation passes, " +
		"otherwise it is back in `repairing` with the reason.",
}

// familyIntro opens each family page.
var familyIntro = map[string]string{
	"xid": "The NVIDIA driver reports GPU errors as numbered XIDs, in the kernel log (`NVRM: Xid (PCI:...): N, ...`) and as NVML events; the agent forwards them with each heartbeat. " +
		"The actions follow the immediate action of NVIDIA's Xid Catalog (" + xidCatalogURL + ") as recorded in shared/reference/telemetry.md §3, " +
		"made stricter where the reference's fleet policy asks for it. An XID whose action is `ignore` is reported once; the others are held (see below).",
	"ecc": "GPU memory is protected by ECC. Correctable (single-bit) errors are repaired on the fly; uncorrectable (double-bit) errors reach the application. " +
		"Volatile counters restart when the driver loads, aggregate counters last the GPU's life. Before Ampere the driver retires bad pages; from Ampere on it remaps bad rows to spares " +
		"(up to 512 per GPU), and both take effect only at the next GPU reset. A counter's first reading only sets the baseline, and a counter that goes down (driver reload) starts over without firing.",
	"thermal": "NVML reports why the clocks are below their maximum as a bitmask of clock-event reasons: idle 0x1, application clocks 0x2, software power cap 0x4, hardware slowdown 0x8, " +
		"sync boost 0x10, software thermal slowdown 0x20, hardware thermal slowdown 0x40, hardware power brake 0x80. " +
		"A GPU running at its power limit (software power cap) is normal and ignored, as are idle, application clocks and sync boost. Short throttling is normal too: only a reason present in every evaluation for the sustain time counts.",
	"pcie":        "A GPU talks to its host over PCIe. A link that trained to fewer lanes or a lower generation than it supports, or that keeps resending packets, slows every transfer and often comes before the GPU falls off the bus (XID 79).",
	"nvlink":      "NVLink connects the GPUs of a node (directly or through NVSwitches). Multi-GPU jobs depend on every link: with one down, collectives fall back to slower paths or hang.",
	"gpu-missing": "The agent enumerates the GPUs on every heartbeat. A GPU that the node registered with but no longer reports has usually fallen off the bus, and the driver cannot reach it again until the node reboots.",
	"heartbeat":   "Every agent sends a heartbeat every few seconds. The server's own heartbeat logic, not this rule, marks a silent node `down` and, once the agent's fence timeout has passed, requeues its jobs; this rule gives the silence a reason people can read.",
}

// Runbooks renders the runbook pages from the rule and XID tables, with
// the thresholds of cfg (zero fields take their defaults): README.md, an
// index, and one page per rule family.
func Runbooks(cfg Config) []RunbookFile {
	c := cfg.withDefaults()
	rules := Rules(c)
	out := []RunbookFile{{Name: "README.md", Content: runbookIndex(rules, c)}}
	for _, f := range families {
		var b strings.Builder
		header(&b, f.title)
		b.WriteString(familyIntro[f.id] + "\n\n")
		b.WriteString("| Rule | Severity | Action | Kind |\n|---|---|---|---|\n")
		for _, r := range rules {
			if r.Family == f.id {
				fmt.Fprintf(&b, "| [%s](#%s) | %s | `%s` | %s |\n", r.ID, r.ID, r.Severity, r.Action, kind(r))
			}
		}
		for _, r := range rules {
			if r.Family == f.id {
				section(&b, r, c)
			}
		}
		out = append(out, RunbookFile{Name: f.id + ".md", Content: b.String()})
	}
	return out
}

func header(b *strings.Builder, title string) {
	b.WriteString("<!-- Generated from internal/health by `go test ./internal/health -run TestRunbooks -update`. Do not edit by hand. -->\n\n")
	b.WriteString("# " + title + "\n\n")
}

func kind(r Rule) string {
	switch {
	case r.Held:
		return "event, held"
	case r.Event:
		return "event, once"
	}
	return "reading"
}

func section(b *strings.Builder, r Rule, c Config) {
	fmt.Fprintf(b, "\n<a id=\"%s\"></a>\n## %s — %s\n\n", r.ID, r.ID, r.Title)
	fmt.Fprintf(b, "**What the evidence means.** %s\n\n", r.Evidence)
	fmt.Fprintf(b, "**When it fires.** %s\n\n", r.Trigger)
	scope := "this GPU"
	if r.Action.Scope() == ScopeNode {
		scope = "the whole node"
	}
	out := "keeps capacity in service"
	if r.Action.TakesOutOfService() {
		out = "takes " + scope + " out of service"
	}
	fmt.Fprintf(b, "**Severity:** %s. **Action:** `%s` (%s).", r.Severity, r.Action, out)
	if r.Held {
		fmt.Fprintf(b, " The condition is held for %s after the event was last seen, or until the GPU is marked repaired.\n\n", gpufleet.FormatDuration(c.EventHold))
	} else if r.Event {
		b.WriteString(" The condition is reported once, with the evaluation that sees the event, and not held.\n\n")
	} else {
		b.WriteString(" The condition lasts as long as the reading shows it.\n\n")
	}
	fmt.Fprintf(b, "**What gpufleet does.** %s\n\n", actionFlow[r.Action])
	fmt.Fprintf(b, "**What you should do.** %s\n\n", r.Operator)
	fmt.Fprintf(b, "**Source.** %s\n", r.Source)
}

func runbookIndex(rules []Rule, c Config) string {
	var b strings.Builder
	header(&b, "Runbooks")
	b.WriteString("These pages are generated from the same tables the health rules run on (`internal/health`): change a rule there, then regenerate them. " +
		"Each condition names its rule id (`xid-79`, `ecc-dbe`, ...); find it below.\n\n")
	b.WriteString("A condition has a severity (what it says about the GPU or node: `healthy`, `degraded`, `unhealthy`) and an action (what gpufleet does about it). " +
		"When several conditions hit one GPU or node, the worst severity is its health and the most severe action is carried out. " +
		"A rule of kind *event, held* (an XID, a counter rising too fast) holds its condition for " + gpufleet.FormatDuration(c.EventHold) + " after the event was last seen, or until the GPU is marked repaired; " +
		"an *event, once* (an XID that is the application's fault) is reported with the heartbeat that brought it; a rule of kind *reading* (a pending remap, a link down) lasts as long as the reading shows it. A reading the GPU does not report never fires a rule.\n\n")

	b.WriteString("## Actions\n\nFrom mildest to most severe.\n\n| Action | Scope | Out of service | What gpufleet does |\n|---|---|---|---|\n")
	for _, a := range actionOrder {
		oos := "no"
		if a.TakesOutOfService() {
			oos = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", a, a.Scope(), oos, actionFlow[a])
	}
	fmt.Fprintf(&b, "\n## Quarantine circuit breaker\n\n"+
		"Before an action takes GPUs out of service, the server asks the circuit breaker (`health.CheckQuarantine`). "+
		"Real GPU faults are rare and independent; when many GPUs look bad at once, a shared cause (a bad driver or firmware push, a telemetry bug, a cooling or power event) is far more likely, "+
		"and draining everything would turn a partial problem into an outage. So automatic quarantine stops once it would hold more than %s of the fleet's GPUs out of service "+
		"(the first quarantine is always allowed, so a small fleet can still drain one node). The conditions are still reported; an admin decides, and can drain by hand.\n\n",
		fmt.Sprintf("%.0f%%", c.QuarantineMaxFraction*100))

	b.WriteString("## Rules\n\n| Rule | Page | Severity | Action | Kind |\n|---|---|---|---|---|\n")
	for _, r := range rules {
		fmt.Fprintf(&b, "| [%s](%s.md#%s) | %s | %s | `%s` | %s |\n", r.ID, r.Family, r.ID, r.Family, r.Severity, r.Action, kind(r))
	}
	return b.String()
}

package health

import (
	"fmt"

	"github.com/gpufleet/gpufleet"
)

// Rule describes one health rule for people: the runbooks are rendered
// from these, and Evaluate takes each condition's severity and action from
// them, so the documentation and the code cannot drift apart.
type Rule struct {
	// ID is the Condition.Rule of the rule's conditions.
	ID string
	// Family groups rules into one runbook page: xid, ecc, thermal, pcie,
	// nvlink, gpu-missing, heartbeat.
	Family   string
	Title    string
	Severity gpufleet.Health
	Action   Action
	// Event is true for rules fired by an event (an XID, a counter's
	// growth), false for rules that follow a reading.
	Event bool
	// Held is true for event rules whose conditions are held for
	// Config.EventHold after the event (all but the XIDs whose action is
	// ignore, which are reported once).
	Held bool
	// Evidence says what the evidence means.
	Evidence string
	// Trigger says when the rule fires, with the thresholds of the Config.
	Trigger string
	// Operator says what a person should do.
	Operator string
	Source   string
}

// Sources of the non-XID rules.
const (
	srcDCGMLimits = "DCGM dcgm_gpu_hardware_limits.h (NVIDIA/DCGM)"
	srcNVMLClocks = "NVML nvmlClocksEventReasons (telemetry.md §1, clock-event reason bits)"
)

// families lists the rule families in runbook order, with their page
// titles.
var families = []struct{ id, title string }{
	{"xid", "XID errors"},
	{"ecc", "GPU memory: ECC, page retirement, row remapping"},
	{"thermal", "Thermal and power throttling"},
	{"pcie", "PCIe link"},
	{"nvlink", "NVLink"},
	{"gpu-missing", "Missing GPU"},
	{"heartbeat", "Heartbeat loss"},
	{"bench", "Benchmarks below the fleet"},
}

// Rules returns every rule, XIDs first (one per catalog entry, then the
// default for unknown XIDs and the application-XID burst), with the
// triggers written from cfg (zero fields take their defaults).
func Rules(cfg Config) []Rule {
	c := cfg.withDefaults()
	var out []Rule
	for _, x := range xids {
		out = append(out, Rule{
			ID: XIDRule(x.Code), Family: "xid", Title: fmt.Sprintf("XID %d: %s", x.Code, x.Name),
			Severity: x.Severity, Action: x.Action, Event: true, Held: x.Action != ActionIgnore,
			Evidence: x.Meaning + " Likely cause: " + string(x.Cause) + ".",
			Trigger:  fmt.Sprintf("The driver raises XID %d on the GPU (NVIDIA's immediate action: %s).", x.Code, x.NVIDIAAction),
			Operator: upperFirst(x.Advice) + ".",
			Source:   x.Source,
		})
	}
	unknown := xidFor(0)
	out = append(out, []Rule{
		{
			ID: "xid-unknown", Family: "xid", Title: "XIDs not in the catalog (their conditions use rule xid-N)",
			Severity: unknown.Severity, Action: unknown.Action, Event: true, Held: true,
			Evidence: "The driver raised an XID that gpufleet's catalog does not list. Rather than drop it, gpufleet marks the GPU degraded so that somebody looks.",
			Trigger:  "The driver raises an XID not listed on this page.",
			Operator: "Look the XID up in NVIDIA's XID catalog (" + xidCatalogURL + "), act on it, and add it to the table in internal/health/xid.go so the next one is handled.",
			Source:   "gpufleet default",
		},
		{
			ID: "xid-app-burst", Family: "xid", Title: "Burst of application XIDs",
			Severity: gpufleet.Degraded, Action: ActionDegrade, Event: true, Held: true,
			Evidence: "One application-class XID (cause application above: 8, 13, 31, 43, 68, 69) is the job's own fault, but a stream of them on one GPU, across jobs, points at the GPU.",
			Trigger:  fmt.Sprintf("At least %d application-class XIDs on the GPU within %s.", c.AppXIDBurst, gpufleet.FormatDuration(c.AppXIDWindow)),
			Operator: "Check whether the XIDs come from one job (its bug) or many; if many, drain the GPU by hand and run diagnostics (dcgmi diag -r 3).",
			Source:   "telemetry.md §3 (XID 13: an application error unless it repeats across jobs)",
		},
		{
			ID: "ecc-dbe", Family: "ecc", Title: "Uncorrectable ECC errors increased",
			Severity: gpufleet.Unhealthy, Action: ActionResetGPU, Event: true, Held: true,
			Evidence: "The GPU's uncorrectable (double-bit) ECC counter went up: memory returned data ECC could not repair, and whatever read it was killed or got an error. The error stays until the GPU is reset.",
			Trigger:  fmt.Sprintf("The volatile or aggregate uncorrectable ECC counter grows by at least %d between two evaluations. The first reading only sets the baseline; a counter that goes down (driver reload) starts over without firing.", c.ECCUncorrectedGrowth),
			Operator: "Let gpufleet reset the GPU. Look at the XIDs that came with it (48, 94, 95) and at the row-remap state afterwards; if it happens again after the reset, run field diagnostics (dcgmi diag -r 3) and start an RMA.",
			Source:   srcMemRef + "; XID 48 in the Xid Catalog",
		},
		{
			ID: "ecc-sbe-rate", Family: "ecc", Title: "Correctable ECC errors rising fast",
			Severity: gpufleet.Degraded, Action: ActionDegrade, Event: true, Held: true,
			Evidence: "Correctable (single-bit) ECC errors were repaired, so no data was lost, but a fast-rising count often comes before uncorrectable errors.",
			Trigger:  fmt.Sprintf("The volatile or aggregate correctable ECC counter grows by at least %d within %s (scaled when evaluations are further apart than that). A counter that goes down starts over.", c.ECCCorrectedGrowth, gpufleet.FormatDuration(c.ECCCorrectedWindow)),
			Operator: "Check whether rows are being remapped and whether XID 92 appears; if the rate persists, schedule a reset and diagnostics in a quiet period.",
			Source:   "gpufleet threshold: NVIDIA gives none (DCGM's SBE rate limit is a placeholder, " + srcDCGMLimits + "); XID 92 in telemetry.md §3",
		},
		{
			ID: "retired-pages-pending", Family: "ecc", Title: "Page retirement pending",
			Severity: gpufleet.Degraded, Action: ActionResetGPU,
			Evidence: "On GPUs before Ampere the driver retires a memory page after one double-bit or two single-bit errors at the same address; the retirement only takes effect after a GPU reset or driver reload.",
			Trigger:  "NVML reports retired pages pending.",
			Operator: "Let gpufleet drain and reset the GPU; afterwards pending should read false.",
			Source:   srcMemRef,
		},
		{
			ID: "retired-pages-high", Family: "ecc", Title: "Many retired pages",
			Severity: gpufleet.Degraded, Action: ActionDegrade,
			Evidence: "The GPU has retired many memory pages; its InfoROM can record at most 64, and it is heading for replacement.",
			Trigger:  fmt.Sprintf("Single- plus double-bit retired pages reach %d (and stay below %d).", c.RetiredPagesHigh, c.RetiredPagesLimit),
			Operator: "Run field diagnostics at the next maintenance and plan a replacement.",
			Source:   srcDCGMLimits + " (soft limit 15); " + srcMemRef,
		},
		{
			ID: "retired-pages-limit", Family: "ecc", Title: "Retired-page limit reached",
			Severity: gpufleet.Unhealthy, Action: ActionReplace,
			Evidence: "The GPU has retired as many pages as DCGM's diagnostics accept; the memory is failing.",
			Trigger:  fmt.Sprintf("Single- plus double-bit retired pages reach %d.", c.RetiredPagesLimit),
			Operator: "Run field diagnostics (dcgmi diag -r 3) to confirm and start an RMA.",
			Source:   srcDCGMLimits + " (limit 60); " + srcMemRef,
		},
		{
			ID: "row-remap-pending", Family: "ecc", Title: "Row remap pending",
			Severity: gpufleet.Degraded, Action: ActionResetGPU,
			Evidence: "On Ampere and newer the GPU replaces a faulty memory row with a spare; the remap is recorded at once but only takes effect at the next GPU reset (until then the faulty page is kept offline).",
			Trigger:  "NVML reports a row remap pending. (NVML cannot read row remapping on a MIG-enabled GPU with active instances; the rule then stays silent.)",
			Operator: "Let gpufleet drain and reset the GPU; afterwards pending should read false.",
			Source:   srcMemRef,
		},
		{
			ID: "row-remap-failure", Family: "ecc", Title: "Row remap failed",
			Severity: gpufleet.Unhealthy, Action: ActionReplace,
			Evidence: "A row remap failed, usually because the memory bank has no spare rows left, so the faulty memory cannot be fenced off.",
			Trigger:  "NVML reports a row remap failure.",
			Operator: "Run field diagnostics to confirm and start an RMA; NVIDIA's RMA policy treats a remap failure as a replacement candidate.",
			Source:   srcMemRef,
		},
		{
			ID: "thermal-sustained", Family: "thermal", Title: "Sustained thermal throttling",
			Severity: gpufleet.Degraded, Action: ActionDegrade,
			Evidence: "The GPU lowers its clocks because it is too hot (software thermal slowdown 0x20, hardware thermal slowdown 0x40): jobs run slower, and heat shortens the hardware's life.",
			Trigger:  fmt.Sprintf("A thermal reason bit is present in every evaluation for at least %s; an evaluation without it, or without the reading, starts the count again.", gpufleet.FormatDuration(c.ThrottleSustain)),
			Operator: "Check the inlet temperature, fans, airflow and blanking panels, and the rack's cooling budget; compare with the neighbouring GPUs.",
			Source:   srcNVMLClocks,
		},
		{
			ID: "hw-slowdown-sustained", Family: "thermal", Title: "Sustained hardware slowdown",
			Severity: gpufleet.Degraded, Action: ActionDegrade,
			Evidence: "Hardware slowdown (0x8) cuts the clocks by half or more; the hardware asserts it for high temperature, an external power brake, or a spike in power draw.",
			Trigger:  fmt.Sprintf("The hardware slowdown bit is present in every evaluation for at least %s.", gpufleet.FormatDuration(c.ThrottleSustain)),
			Operator: "Look at temperature and power together: check the thermal rules for the same GPU and the node's power supplies.",
			Source:   srcNVMLClocks,
		},
		{
			ID: "power-brake-sustained", Family: "thermal", Title: "Sustained power brake",
			Severity: gpufleet.Unhealthy, Action: ActionDrainGPU,
			Evidence: "The board's power brake (0x80) is asserted: something outside the GPU, usually a power supply or the chassis, forces it to slow down hard.",
			Trigger:  fmt.Sprintf("The power brake bit is present in every evaluation for at least %s.", gpufleet.FormatDuration(c.ThrottleSustain)),
			Operator: "Check the node's power supplies and cabling and the rack's power budget; mark the GPU repaired once the brake has cleared.",
			Source:   srcNVMLClocks,
		},
		{
			ID: "pcie-downgrade", Family: "pcie", Title: "PCIe link below its maximum",
			Severity: gpufleet.Degraded, Action: ActionDegrade,
			Evidence: "The PCIe link runs slower than it can: fewer lanes than its maximum width, or a lower generation while the GPU is busy. (A lower generation at idle is normal power saving.) Host-device copies and anything that crosses PCIe slow down.",
			Trigger:  fmt.Sprintf("The width is below the maximum, or the generation is below the maximum while utilization is at least %.0f%%, in every evaluation for at least %s.", c.PCIeLoadUtilization*100, gpufleet.FormatDuration(c.PCIeDowngradeSustain)),
			Operator: "Reseat the GPU or its riser and check the slot and the BIOS link settings; a narrower link nearly always means a seating or hardware fault.",
			Source:   "NVML GetCurrPcieLinkGeneration/Width vs GetMaxPcieLinkGeneration/Width (telemetry.md §1); thresholds are gpufleet's",
		},
		{
			ID: "pcie-replay", Family: "pcie", Title: "PCIe replays rising",
			Severity: gpufleet.Degraded, Action: ActionDegrade, Event: true, Held: true,
			Evidence: "The PCIe replay counter counts packets the link had to resend after errors; a rising count means a marginal link (signal quality, riser, slot).",
			Trigger:  fmt.Sprintf("The replay counter grows by at least %d within %s (scaled when evaluations are further apart). A counter that goes down starts over.", c.PCIeReplayGrowth, gpufleet.FormatDuration(c.PCIeReplayWindow)),
			Operator: "Check the link width and generation, reseat the GPU or riser, and watch for XID 32 or XID 79, which often follow a bad link.",
			Source:   srcDCGMLimits + " (DCGM_LIMIT_MAX_PCIREPLAY_RATE: 8 per minute)",
		},
		{
			ID: "nvlink-down", Family: "nvlink", Title: "NVLink down",
			Severity: gpufleet.Unhealthy, Action: ActionDrainGPU,
			Evidence: "Fewer NVLinks are up than the GPU has: a multi-GPU job across this GPU would fall back to slower paths or hang in its collectives.",
			Trigger:  "Links up is below links total.",
			Operator: "Check nvidia-smi nvlink -s on this GPU and its peers (and Fabric Manager on NVSwitch systems); a GPU reset or node reboot usually retrains the link; replace the GPU or baseboard if it stays down.",
			Source:   srcXIDRef + ", XID 74 row; NVSentinel maps NVLINK_DOWN to a node reboot (telemetry.md §2)",
		},
		{
			ID: "nvlink-errors", Family: "nvlink", Title: "NVLink errors rising",
			Severity: gpufleet.Degraded, Action: ActionDegrade, Event: true, Held: true,
			Evidence: "The NVLink error counters (CRC, replay and recovery, summed) are rising: the links still work but resend data and lose bandwidth.",
			Trigger:  fmt.Sprintf("The summed counter grows by at least %d within %s (scaled when evaluations are further apart). A counter that goes down starts over.", c.NVLinkErrorGrowth, gpufleet.FormatDuration(c.NVLinkErrorWindow)),
			Operator: "Find the link with nvidia-smi nvlink -e, reset the GPU when convenient, and replace the GPU or baseboard if the errors continue.",
			Source:   srcDCGMLimits + " (CRC errors matter from 100 per second)",
		},
		{
			ID: "gpu-missing", Family: "gpu-missing", Title: "GPU missing",
			Severity: gpufleet.Unhealthy, Action: ActionRebootNode,
			Evidence: "A GPU the node registered with is no longer reported (or the node reports fewer GPUs than it registered with): usually it fell off the bus (XID 79), and the driver cannot reach it again until the node reboots.",
			Trigger:  "A GPU of the inventory is reported absent (on that GPU), or the node lists fewer GPUs than its inventory count (on the node).",
			Operator: "Let gpufleet reboot the node; if the GPU does not come back or drops out again, check the PCIe slot, riser and power cabling, and replace the GPU.",
			Source:   srcXIDRef + ", XID 79 row (RESTART_BM); telemetry.md §4 (AKS GPUMissing: GPU count below the SKU's)",
		},
		{
			ID: "heartbeat-lost", Family: "heartbeat", Title: "No heartbeat",
			Severity: gpufleet.Unhealthy, Action: ActionDegrade,
			Evidence: "The node's agent has not sent a heartbeat within the grace period: the node, its network or the agent is down. The server's own heartbeat logic marks the node down and, after the fence timeout, requeues its jobs; this rule only reports it with a reason, so its action takes nothing out of service.",
			Trigger:  fmt.Sprintf("The heartbeat is older than the grace (the server's, or %s).", gpufleet.FormatDuration(c.HeartbeatGrace)),
			Operator: "Check that the node is up and reachable and that the agent runs (systemctl status gpufleet-agent, journalctl -u gpufleet-agent).",
			Source:   "gpufleet server heartbeat grace (docs/SERVER.md, DESIGN.md node state down)",
		},
		{
			ID: RuleBenchDegraded, Family: "bench", Title: "Benchmark figures below the fleet",
			Severity: gpufleet.Degraded, Action: ActionDegrade,
			Evidence: "The GPU's newest microbenchmark figure (memory copy, a matrix product, host copies, GPU-to-GPU copies; or, on the node, the all-reduce) is under its gate as a fraction of the median of the other GPUs of its model: the card delivers less than its siblings, from slow memory, clocks held down, a weak link or a bad slot. Nothing else may show it.",
			Trigger:  "A GPU's newest figure is under the gate (default 0.9 of the fleet median, settable per test with gpufleet server --bench-gate) with at least two other GPUs of its model measured. A newer figure at or over the gate clears it.",
			Operator: "Read the evidence (which figure, how far under), cordon the node and run gpufleet bench run NODE to confirm; check clocks and throttle reasons (nvidia-smi -q -d PERFORMANCE), the PCIe link, NVLink status and cooling; drain and repair the GPU if it stays under; validation after the repair runs the same check.",
			Source:   "gpufleet fleet rule (docs/BENCH.md); DESIGN.md mistake 18",
		},
	}...)
	return out
}

// ruleByID indexes the default rules, for Evaluate.
var ruleByID = func() map[string]Rule {
	m := map[string]Rule{}
	for _, r := range Rules(DefaultConfig()) {
		m[r.ID] = r
	}
	return m
}()

func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

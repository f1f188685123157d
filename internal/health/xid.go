package health

import (
	"fmt"
	"sort"

	"github.com/gpufleet/gpufleet"
)

// Cause is the likely origin of an XID.
type Cause string

// Causes.
const (
	CauseApplication  Cause = "application"  // a bug or fault in the job's own code
	CauseSystem       Cause = "system"       // a kill, a reset or another error came first
	CauseDriver       Cause = "driver"       // driver or GPU firmware (GSP, PMU)
	CauseMemory       Cause = "memory"       // GPU memory (ECC, row remapping)
	CauseInterconnect Cause = "interconnect" // PCIe, NVLink, C2C
	CauseHardware     Cause = "hardware"     // the GPU or its board
)

// XID is one entry of the XID catalog: what the driver's error number
// means and what gpufleet does about it.
type XID struct {
	Code int
	// Name is a short phrase used in reasons: "XID 79 (fell off the bus)".
	Name string
	// Meaning says, in a sentence or two, what the driver is reporting.
	Meaning  string
	Cause    Cause
	Severity gpufleet.Health
	Action   Action
	// NVIDIAAction is the immediate resolution bucket of NVIDIA's Xid
	// Catalog (RESTART_APP, RESET_GPU, RESTART_BM, ...).
	NVIDIAAction string
	// Advice is what a person should do, as an imperative clause.
	Advice string
	// Source names where the entry comes from.
	Source string
}

// Sources cited by the tables.
const (
	xidCatalogURL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
	srcXIDRef     = "shared/reference/telemetry.md §3 (NVIDIA Xid Catalog, immediate action; " + xidCatalogURL + ")"
	srcXIDCatalog = "NVIDIA Xid Catalog, " + xidCatalogURL + " (not in telemetry.md §3)"
	srcMemRef     = "shared/reference/telemetry.md §3, memory rules (NVIDIA GPU Memory Error Management, Dynamic Page Retirement)"
)

// nvlink5 builds the entries of the NVLink5 unit errors, XIDs 144 to 150.
func nvlink5(code int, unit string) XID {
	return XID{code, "NVLink " + unit + " error",
		"A fifth-generation NVLink unit (" + unit + ") reported an error; NVIDIA's NVLink5 workflow decodes its registers to choose between a GPU reset and a node reboot.",
		CauseInterconnect, gpufleet.Unhealthy, ActionDrainGPU, "WORKFLOW_NVLINK5_ERR",
		"drain the GPU, decode the error with NVIDIA's NVLink5 workflow, then reset the GPU or reboot the node", srcXIDRef}
}

// xids is the catalog, sorted by code. Actions follow the immediate action
// of NVIDIA's Xid Catalog as telemetry.md §3 records it, tightened where
// the reference's fleet-policy column asks for more (48, 74, 94).
var xids = []XID{
	{8, "GPU stopped processing (idle timeout)",
		"A channel stopped making progress and the driver timed it out; usually the application hung or waited on something that never came.",
		CauseApplication, gpufleet.Healthy, ActionIgnore, "RESTART_APP",
		"leave the GPU in service; the job owner should restart the job and look for a hang", srcXIDRef},
	{13, "graphics engine exception",
		"A kernel ran an illegal instruction or touched an illegal address; nearly always a bug in the application or a library it uses.",
		CauseApplication, gpufleet.Healthy, ActionIgnore, "RESTART_APP",
		"leave the GPU in service; the job owner should debug the kernel (compute-sanitizer), and if unrelated jobs hit it on this GPU, run diagnostics", srcXIDRef},
	{31, "GPU memory page fault",
		"The GPU's memory management unit caught an access to an address the process had not mapped; usually an application bug, rarely the driver or the hardware.",
		CauseApplication, gpufleet.Healthy, ActionIgnore, "RESTART_APP",
		"leave the GPU in service; the job owner should run the job under compute-sanitizer memcheck", srcXIDRef},
	{32, "corrupted push buffer stream",
		"The DMA engine that feeds commands to the GPU over PCIe received a corrupt command stream; NVIDIA ties this mostly to PCIe signal quality rather than to the application.",
		CauseInterconnect, gpufleet.Degraded, ActionDegrade, "RESTART_APP",
		"check the PCIe link (replays, width, generation) and reseat or replace the riser or GPU if it repeats", srcXIDCatalog},
	{38, "driver firmware watchdog timeout",
		"A watchdog in the firmware of the GPU's context-switch engine expired; NVIDIA's catalog ignores it unless it repeats.",
		CauseDriver, gpufleet.Healthy, ActionIgnore, "IGNORE",
		"leave the GPU in service; if it repeats, collect nvidia-bug-report output and check the driver version", srcXIDCatalog},
	{43, "GPU stopped processing (channel reset)",
		"The application hit a fault and the driver reset its channel; the GPU itself stays healthy.",
		CauseApplication, gpufleet.Healthy, ActionIgnore, "IGNORE",
		"leave the GPU in service; the job owner should look at the application's own error", srcXIDRef},
	{45, "preemptive channel removal",
		"The driver tore down a GPU context because its process was killed, the GPU was reset or another error came first; it is a consequence, not a cause.",
		CauseSystem, gpufleet.Healthy, ActionIgnore, "WORKFLOW_XID_45",
		"look for the XID that came with it; alone it needs nothing, but bursts are worth correlating with node failures", srcXIDRef},
	{48, "double-bit ECC error",
		"GPU memory returned data that ECC could not correct; the application that read it failed, and the error stays until the GPU is reset or the node rebooted. Newer drivers add XID 171 (DRAM) or 172 (SRAM) to say where.",
		CauseMemory, gpufleet.Unhealthy, ActionResetGPU, "WORKFLOW_XID_48",
		"drain and reset the GPU; run field diagnostics and start an RMA if it happens again", srcXIDRef},
	{61, "micro-controller breakpoint or warning",
		"An internal micro-controller (the PMU) hit a breakpoint or raised a warning the driver did not expect.",
		CauseDriver, gpufleet.Unhealthy, ActionDrainGPU, "UNEXPECTED_ERR_REPORT_ISSUE",
		"drain the GPU, collect nvidia-bug-report output and open a case with NVIDIA", srcXIDRef},
	{62, "micro-controller halt",
		"An internal micro-controller (the PMU) stopped; the GPU cannot be trusted until it is reset.",
		CauseDriver, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU; collect a bug report if it returns", srcXIDRef},
	{63, "row remap or page retirement recorded",
		"After ECC errors the driver recorded a memory row remap (Ampere and newer) or a page retirement (older GPUs); it takes effect at the next GPU reset.",
		CauseMemory, gpufleet.Degraded, ActionDegrade, "IGNORE",
		"nothing urgent; the row-remap-pending and retired-pages-pending rules schedule the reset that applies it", srcXIDRef},
	{64, "row remap or page retirement failed",
		"The driver could not record a row remap or page retirement, so a faulty memory row stays in use.",
		CauseMemory, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU, then run field diagnostics; start an RMA if they fail", srcXIDRef},
	{68, "video decoder exception",
		"The NVDEC0 video decoder engine raised an exception; NVIDIA's catalog restarts the application and the k8s device plugin counts it as an application error.",
		CauseApplication, gpufleet.Healthy, ActionIgnore, "RESTART_APP",
		"leave the GPU in service; if it repeats across jobs, collect a bug report", srcXIDCatalog + "; k8s-device-plugin application-error list, telemetry.md §3"},
	{69, "graphics engine class error",
		"The GPU's engine rejected a command it was sent, usually from a faulty application or a mismatched CUDA library.",
		CauseApplication, gpufleet.Healthy, ActionIgnore, "RESTART_APP",
		"leave the GPU in service; the job owner should check the application and its CUDA version", srcXIDCatalog},
	{74, "NVLink error",
		"A link from this GPU to a peer GPU or NVSwitch failed; the fault can be at either end, and only a GPU reset or node reboot clears it.",
		CauseInterconnect, gpufleet.Unhealthy, ActionDrainGPU, "WORKFLOW_NVLINK_ERR",
		"drain the GPU and check its NVLink peers (nvidia-smi nvlink), then reset the GPU or reboot the node", srcXIDRef},
	{79, "fell off the bus",
		"The driver can no longer reach the GPU over PCIe: the link dropped or the GPU failed, and only a reboot brings it back.",
		CauseHardware, gpufleet.Unhealthy, ActionRebootNode, "RESTART_BM",
		"drain the node and reboot it; replace the GPU if it recurs", srcXIDRef},
	{92, "high single-bit ECC rate",
		"The driver saw correctable memory errors at an unusual rate; nothing failed yet, but it is an early sign of failing memory.",
		CauseMemory, gpufleet.Degraded, ActionDegrade, "IGNORE",
		"watch the ECC and row-remap counters and plan a reset with diagnostics if the rate stays high", srcXIDRef},
	{94, "contained ECC error",
		"An uncorrectable memory error was contained: only the application that touched the memory was killed and other work on the GPU carries on; a reset applies the row remap.",
		CauseMemory, gpufleet.Degraded, ActionResetGPU, "RESTART_APP",
		"let the affected job restart elsewhere and reset the GPU once its other work has finished", srcXIDRef},
	{95, "uncontained ECC error",
		"An uncorrectable memory error could not be contained to one application; everything on the GPU is affected and the GPU must be reset before it runs work again.",
		CauseMemory, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"stop all work on the GPU and reset it; run diagnostics and consider an RMA if it repeats", srcXIDRef},
	{109, "context switch timeout",
		"The GPU did not switch between contexts in time; NVIDIA's catalog asks for a GPU reset, while the k8s device plugin counts it as an application error.",
		CauseDriver, gpufleet.Degraded, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU; if it follows one application around, look at that application", srcXIDRef},
	{110, "security fault",
		"The GPU reported a security fault, which NVIDIA says is rare without a hardware problem.",
		CauseHardware, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU; undo recent hardware changes and power-cycle the node if it returns", srcXIDRef},
	{119, "GSP RPC timeout",
		"The GPU System Processor (GSP) did not answer a driver request in time.",
		CauseDriver, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU; reboot the node if the reset fails or the error comes back", srcXIDRef},
	{120, "GSP error",
		"Code running on the GPU System Processor (GSP) failed.",
		CauseDriver, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU; reboot the node if the reset fails or the error comes back", srcXIDRef},
	{121, "C2C link error",
		"The chip-to-chip link between a Grace CPU and its GPU logged an error it recovered from.",
		CauseInterconnect, gpufleet.Degraded, ActionDegrade, "IGNORE",
		"watch the trend and open a case with the vendor if it keeps rising", srcXIDRef},
	{136, "NVLink training failure (ALI)",
		"NVLink link training failed while the links were being brought up.",
		CauseInterconnect, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU, then check that all its NVLinks are up", srcXIDRef},
	{140, "unrecovered ECC escape",
		"A memory error escaped the normal ECC recovery path.",
		CauseMemory, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU; run field diagnostics if it happens again", srcXIDRef},
	{143, "GPU initialisation failure",
		"The GPU failed to initialise.",
		CauseHardware, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU; if it still fails, reboot the node and then replace the GPU", srcXIDRef},
	nvlink5(144, "SAW"),
	nvlink5(145, "RLW"),
	nvlink5(146, "TLW"),
	nvlink5(147, "TREX"),
	nvlink5(148, "NVLPW"),
	nvlink5(149, "NETIR"),
	nvlink5(150, "MSE"),
	{154, "recovery action changed",
		"The driver changed the recovery action it recommends for this GPU (reset, reboot, drain peers); it comes with another XID, and NVML reports the action.",
		CauseDriver, gpufleet.Degraded, ActionDegrade, "follow linked XID",
		"read the recommended recovery action (nvidia-smi -q, NVML field FI_DEV_GET_GPU_RECOVERY_ACTION) and follow it; the XID that came with it carries gpufleet's own action", srcXIDRef},
	{155, "NVLink software-defined error",
		"The driver raised a software-defined NVLink error.",
		CauseInterconnect, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU, then check its NVLinks", srcXIDRef},
	{156, "resource retirement event",
		"The driver retired a GPU resource after repeated errors.",
		CauseHardware, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU; run field diagnostics if it happens again", srcXIDRef},
	{158, "GPU fatal timeout",
		"The GPU stopped responding within the driver's fatal timeout.",
		CauseHardware, gpufleet.Unhealthy, ActionResetGPU, "RESET_GPU",
		"drain and reset the GPU; reboot the node if the reset fails", srcXIDRef},
	{160, "channel retirement or memory marked for repair",
		"The driver retired a channel or marked GPU memory for repair; a reboot of the node applies it.",
		CauseMemory, gpufleet.Unhealthy, ActionRebootNode, "RESTART_BM",
		"drain the node and reboot it", srcXIDRef},
	{171, "uncorrectable ECC error in DRAM",
		"Newer drivers raise this with XID 48 to say the uncorrectable error was in the GPU's DRAM (HBM).",
		CauseMemory, gpufleet.Unhealthy, ActionResetGPU, "WORKFLOW_XID_48",
		"drain and reset the GPU; run field diagnostics and start an RMA if it happens again", srcXIDRef + ", row 48"},
	{172, "uncorrectable ECC error in SRAM",
		"Newer drivers raise this with XID 48 to say the uncorrectable error was in on-chip SRAM.",
		CauseMemory, gpufleet.Unhealthy, ActionResetGPU, "WORKFLOW_XID_48",
		"drain and reset the GPU; check whether nvidia-smi reports the SRAM error threshold exceeded and start an RMA if so", srcXIDRef + ", row 48"},
}

// XIDs returns the XID catalog, sorted by code. The slice is a copy.
func XIDs() []XID {
	out := make([]XID, len(xids))
	copy(out, xids)
	return out
}

// LookupXID returns the catalog entry of an XID and whether it is known.
func LookupXID(code int) (XID, bool) {
	i := sort.Search(len(xids), func(i int) bool { return xids[i].Code >= code })
	if i < len(xids) && xids[i].Code == code {
		return xids[i], true
	}
	return XID{}, false
}

// xidFor returns the catalog entry of an XID, or the conservative default
// for an XID the catalog does not know: degrade, and look it up.
func xidFor(code int) XID {
	if x, ok := LookupXID(code); ok {
		return x
	}
	return XID{
		Code: code, Name: "unknown XID", Meaning: "An XID gpufleet's catalog does not list.",
		Cause: CauseHardware, Severity: gpufleet.Degraded, Action: ActionDegrade, NVIDIAAction: "unknown",
		Advice: fmt.Sprintf("look up XID %d in NVIDIA's XID catalog (%s) and add it to internal/health", code, xidCatalogURL),
		Source: "gpufleet default for XIDs not in the catalog",
	}
}

// XIDRule returns the rule id of an XID's condition: "xid-79".
func XIDRule(code int) string { return fmt.Sprintf("xid-%d", code) }

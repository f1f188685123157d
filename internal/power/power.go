// Package power holds gpufleet's power and energy arithmetic: what a node
// draws beyond its GPUs, a rack's projected draw (each held GPU charged
// its limit until measured, then its peak with a margin: Charging), the
// scheduler's power input (SchedulerRacks), the facility energy and CO2e
// of GPU energy, and the facility check of a plan (how many nodes a
// rack's power, cooling and space hold).
//
// The package is pure: figures in, figures out, no I/O and no clock. The
// server feeds it telemetry and the simulator its simulated readings; both
// build the scheduler's input (scheduler.Rack, scheduler.GPUDraw) with
// SchedulerRacks, and the planner uses the same figures. docs/POWER.md
// gives every default with its source.
package power

import (
	"math"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// IdleFraction is a GPU's idle draw as a share of its TDP where the
// catalog has no idle figure. The catalog's own idle figures run from
// 10 % (H100 SXM: 70 W of 700 W; L40S: 35 W of 350 W) to 22 % (L4: 16 W
// of 72 W); a tenth is the data-centre boards' share.
const IdleFraction = 0.10

// DefaultHostOverhead is the draw of a node beyond its GPUs (CPUs,
// memory, NICs, disks, fans, power-supply losses) for servers without a
// published system figure: a two-socket 2U server at load. An assumption,
// stated as such in docs/POWER.md; override it per rack.
const DefaultHostOverhead gpufleet.Watts = 500

// hostOverhead is, for 8-GPU HGX/DGX boards, the system's published
// maximum draw less its GPUs' TDPs: NVSwitches, CPUs, NICs and fans.
var hostOverhead = map[string]struct {
	system gpufleet.Watts // the published system maximum
	source string
}{
	"a100-sxm-80gb":  {6500, "NVIDIA DGX A100 datasheet: 6.5 kW max (8 x 400 W GPUs)"},
	"a100-sxm-40gb":  {6500, "NVIDIA DGX A100 datasheet: 6.5 kW max (8 x 400 W GPUs)"},
	"h100-sxm-80gb":  {10200, "NVIDIA DGX H100 datasheet: ~10.2 kW max (8 x 700 W GPUs)"},
	"h200-sxm-141gb": {10200, "NVIDIA DGX H200 datasheet: ~10.2 kW max (8 x 700 W GPUs)"},
	"b200-hgx":       {14300, "NVIDIA DGX B200 datasheet: ~14.3 kW max (8 x 1000 W GPUs)"},
}

// HostOverhead is what a node of gpus GPUs of model g draws beyond them
// at load: the published system maximum less the GPUs' TDPs for the
// 8-GPU boards hostOverhead lists, DefaultHostOverhead otherwise.
func HostOverhead(g catalog.GPU, gpus int) gpufleet.Watts {
	if h, ok := hostOverhead[g.ID]; ok && gpus == 8 && g.TDPWatts != nil {
		return max(h.system-gpufleet.Watts(8**g.TDPWatts), 0)
	}
	return DefaultHostOverhead
}

// HostOverheadSource says where HostOverhead's figure for a model comes
// from.
func HostOverheadSource(g catalog.GPU, gpus int) string {
	if h, ok := hostOverhead[g.ID]; ok && gpus == 8 {
		return h.source
	}
	return "assumption: a two-socket server at load, 500 W"
}

// TDP is a model's board power; 0 when unpublished.
func TDP(g catalog.GPU) float64 {
	if g.TDPWatts == nil {
		return 0
	}
	return *g.TDPWatts
}

// Idle is a model's idle draw: the catalog's, else IdleFraction of its
// TDP.
func Idle(g catalog.GPU) float64 {
	if g.IdleWatts != nil {
		return *g.IdleWatts
	}
	return IdleFraction * TDP(g)
}

// RatedNode is what a node of gpus GPUs of model g draws at its rating:
// the GPUs' TDPs and the host overhead.
func RatedNode(g catalog.GPU, gpus int) gpufleet.Watts {
	return gpufleet.Watts(float64(gpus)*TDP(g)) + HostOverhead(g, gpus)
}

// GPUReading is one GPU as a rack projection sees it.
type GPUReading struct {
	Model catalog.GPU
	// Watts is the latest measured draw; nil when none is known.
	Watts *float64
	// Held says a job holds the GPU; Class is that job's.
	Held  bool
	Class gpufleet.Priority
	// PeakWatts is the highest reading taken since the job holding the
	// GPU started on it; nil until one was (the job is then charged the
	// GPU's limit, Charging).
	PeakWatts *float64
	// LimitWatts is the power limit in force on the GPU; 0: its TDP.
	LimitWatts float64
	// CapWatts is the power cap the server gave the GPU under its holder
	// (Charging.Cap, set on the node through NVML); 0: none. A capped GPU
	// is charged its cap: it cannot draw more.
	CapWatts float64
}

// NodeReading is one node of a rack as a projection sees it.
type NodeReading struct {
	GPUs []GPUReading
	// HostWatts is the node's draw beyond its GPUs (HostOverhead).
	HostWatts float64
}

// ProjectRack is a rack's projected draw now: per node the host
// overhead, and per GPU what Charging charges it: a held GPU its limit
// until it was measured under its job (a job that has just started has
// not ramped up, and readings lag), then its measured peak with the
// margin; a free GPU its reading, else its idle draw.
func ProjectRack(nodes []NodeReading, c Charging) gpufleet.Watts {
	w := 0.0
	for _, n := range nodes {
		w += n.HostWatts
		for _, g := range n.GPUs {
			w += c.Charge(g)
		}
	}
	return gpufleet.Watts(w)
}

// rackUnits is the height of the 8-GPU systems of hostOverhead, from the
// same datasheets.
var rackUnits = map[string]int{
	"a100-sxm-80gb":  6,  // DGX A100: 6U
	"a100-sxm-40gb":  6,  // DGX A100: 6U
	"h100-sxm-80gb":  8,  // DGX H100: 8U
	"h200-sxm-141gb": 8,  // DGX H200: 8U
	"b200-hgx":       10, // DGX B200: 10U
}

// BoardGPUs is the GPUs of the one server a model comes in (8 for the
// SXM boards of the DGX/HGX systems hostOverhead lists), 0 when it comes
// in servers of any size (PCIe cards).
func BoardGPUs(g catalog.GPU) int {
	if _, ok := hostOverhead[g.ID]; ok {
		return 8
	}
	return 0
}

// NodeUnits is a node's height in rack units: the DGX system's for the
// 8-GPU boards it knows, else 4U for up to 8 GPUs and 2U for up to 2 (an
// assumption, stated in docs/POWER.md), 8U beyond 8.
func NodeUnits(g catalog.GPU, gpus int) int {
	if u, ok := rackUnits[g.ID]; ok && gpus == 8 {
		return u
	}
	switch {
	case gpus <= 2:
		return 2
	case gpus <= 8:
		return 4
	}
	return 8
}

// Facility is a rack's limits for the planner's facility check; a zero
// field is no limit.
type Facility struct {
	Power   gpufleet.Watts // the rack's power budget
	Cooling gpufleet.Watts // the heat the rack's cooling removes
	Units   int            // rack units available for nodes
}

// Fit is how many nodes of one kind a rack holds, and what a plan of
// several of them needs from the facility.
type Fit struct {
	// RatedNodeWatts is a node at its rating; ExpectedNodeWatts with its
	// GPUs at the expected draw of the planned work.
	RatedNodeWatts, ExpectedNodeWatts gpufleet.Watts
	NodeUnits                         int
	// PerRackRated and PerRackExpected are the nodes a rack holds at rated
	// and at expected draw (-1: no limit set); LimitedBy names the limit
	// that binds at rated draw ("power", "cooling", "space", "").
	PerRackRated, PerRackExpected int
	LimitedBy                     string
	// Racks is how many racks the nodes need at rated draw (0 when no
	// limit is set); TotalRated and TotalExpected the power of all nodes,
	// which the cooling must also remove.
	Racks                     int
	TotalRated, TotalExpected gpufleet.Watts
	// Throttles says a single node's rated draw exceeds the rack's power or
	// cooling: the hardware cannot run at rated performance there.
	Throttles bool
}

// FitRack is the facility check of nodes nodes of gpus GPUs of model g,
// each GPU expected to draw expectedGPU watts (the TDP when 0 or more).
func FitRack(f Facility, g catalog.GPU, gpus, nodes int, expectedGPU float64) Fit {
	host := HostOverhead(g, gpus)
	exp := TDP(g)
	if expectedGPU > 0 && expectedGPU < exp {
		exp = expectedGPU
	}
	fit := Fit{
		RatedNodeWatts:    RatedNode(g, gpus),
		ExpectedNodeWatts: gpufleet.Watts(float64(gpus)*exp) + host,
		NodeUnits:         NodeUnits(g, gpus),
	}
	fit.TotalRated = fit.RatedNodeWatts * gpufleet.Watts(nodes)
	fit.TotalExpected = fit.ExpectedNodeWatts * gpufleet.Watts(nodes)
	per := func(node gpufleet.Watts) (int, string) {
		n, by := -1, ""
		limit := func(cap, each float64, name string) {
			if cap <= 0 || each <= 0 {
				return
			}
			if k := int(math.Floor(cap / each)); n < 0 || k < n {
				n, by = k, name
			}
		}
		limit(float64(f.Power), float64(node), "power")
		limit(float64(f.Cooling), float64(node), "cooling")
		limit(float64(f.Units), float64(fit.NodeUnits), "space")
		return n, by
	}
	fit.PerRackRated, fit.LimitedBy = per(fit.RatedNodeWatts)
	fit.PerRackExpected, _ = per(fit.ExpectedNodeWatts)
	fit.Throttles = (f.Power > 0 && fit.RatedNodeWatts > f.Power) || (f.Cooling > 0 && fit.RatedNodeWatts > f.Cooling)
	if fit.PerRackRated > 0 && nodes > 0 {
		fit.Racks = (nodes + fit.PerRackRated - 1) / fit.PerRackRated
	}
	return fit
}

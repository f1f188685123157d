package planner

import (
	"fmt"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/power"
)

// Rack is the facility a plan is checked against (Request.Rack): a
// rack's power budget, its cooling and its space. A zero field is no
// limit.
type Rack struct {
	PowerWatts   float64
	CoolingWatts float64
	Units        int
}

// Facility is a candidate's facility check: the nodes it needs (whole
// 8-GPU boards for SXM parts, else servers of up to 8 cards), what each draws at its rating and at the planned
// work's expected draw, how many fit in a rack and what binds, the racks
// the plan needs and the power and cooling in total. docs/POWER.md gives
// the figures' sources.
type Facility struct {
	Nodes             int     `json:"nodes"`
	GPUsPerNode       int     `json:"gpus_per_node"`
	NodeRackUnits     int     `json:"node_rack_units"`
	RatedNodeWatts    float64 `json:"rated_node_watts"`
	ExpectedNodeWatts float64 `json:"expected_node_watts"`
	// NodesPerRackRated and NodesPerRackExpected are null without a rack
	// limit; LimitedBy is power, cooling or space ("" without one).
	NodesPerRackRated    *int   `json:"nodes_per_rack_rated"`
	NodesPerRackExpected *int   `json:"nodes_per_rack_expected"`
	LimitedBy            string `json:"limited_by"`
	// Racks is the racks the nodes need at rated draw; null without a
	// rack limit or when not even one node fits.
	Racks *int `json:"racks"`
	// TotalRatedWatts is the power, and the cooling, the plan needs at
	// rated draw; TotalExpectedWatts at the expected draw.
	TotalRatedWatts    float64 `json:"total_rated_watts"`
	TotalExpectedWatts float64 `json:"total_expected_watts"`
	// Throttles says one node's rated draw exceeds the rack's power or
	// cooling: the hardware cannot run at rated performance there.
	Throttles bool `json:"throttles"`
}

// facility checks candidate c on GPU g against the request's rack; nil
// when the GPU has no published TDP.
func facility(r Request, g catalog.GPU, c *Candidate) *Facility {
	if g.TDPWatts == nil || c.GPUs <= 0 {
		return nil
	}
	perNode := power.BoardGPUs(g) // an SXM board is bought, powered and cooled whole
	if perNode == 0 {
		perNode = min(c.GPUs, gpusPerHost)
	}
	nodes := (c.GPUs + perNode - 1) / perNode
	fit := power.FitRack(power.Facility{Power: gpufleet.Watts(r.Rack.PowerWatts), Cooling: gpufleet.Watts(r.Rack.CoolingWatts), Units: r.Rack.Units},
		g, perNode, nodes, *g.TDPWatts*averagePowerFraction)
	f := &Facility{Nodes: nodes, GPUsPerNode: perNode, NodeRackUnits: fit.NodeUnits,
		RatedNodeWatts: float64(fit.RatedNodeWatts), ExpectedNodeWatts: float64(fit.ExpectedNodeWatts),
		LimitedBy: fit.LimitedBy, TotalRatedWatts: float64(fit.TotalRated), TotalExpectedWatts: float64(fit.TotalExpected), Throttles: fit.Throttles}
	if fit.PerRackRated >= 0 {
		f.NodesPerRackRated, f.NodesPerRackExpected = ptr(fit.PerRackRated), ptr(fit.PerRackExpected)
	}
	if fit.Racks > 0 {
		f.Racks = ptr(fit.Racks)
	}
	if f.Throttles {
		what, limit := "power", r.Rack.PowerWatts
		if limit <= 0 || float64(fit.RatedNodeWatts) <= limit {
			what, limit = "cooling", r.Rack.CoolingWatts
		}
		c.Notes = append(c.Notes, fmt.Sprintf("one %d-GPU node draws %s at its rating, more than the rack's %s of %s: it cannot run at rated performance there (power capping or thermal throttling)",
			perNode, fit.RatedNodeWatts.Human(), what, gpufleet.Watts(limit).Human()))
	} else if f.NodesPerRackExpected != nil && *f.NodesPerRackExpected > *f.NodesPerRackRated {
		c.Notes = append(c.Notes, fmt.Sprintf("a rack holds %d nodes at rated draw and %d at the expected %s per node: packing beyond the rating relies on power capping",
			*f.NodesPerRackRated, *f.NodesPerRackExpected, fit.ExpectedNodeWatts.Human()))
	}
	return f
}

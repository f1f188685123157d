package planner

import (
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
)

func TestFacilityCheck(t *testing.T) {
	cfg, err := model.Builtin("llama-3.1-70b")
	if err != nil {
		t.Fatal(err)
	}
	cat := catalog.Default()
	h100, _ := cat.Lookup("h100-sxm-80gb")
	l40s, _ := cat.Lookup("l40s")
	for _, tc := range []struct {
		name      string
		rack      Rack
		gpus      int
		g         catalog.GPU
		nodes     int
		perRack   int // -1: no limit given
		racks     int
		throttles bool
		note      string
	}{
		// 16 H100 SXM: two DGX boards of 10.2 kW; a 17.3 kW rack holds one.
		{"two boards, one per rack", Rack{PowerWatts: 17300}, 16, h100, 2, 1, 2, false, ""},
		{"a 40 kW rack holds three", Rack{PowerWatts: 40000, CoolingWatts: 35000, Units: 42}, 16, h100, 2, 3, 1, false, ""},
		{"an 8 kW rack throttles", Rack{PowerWatts: 8000}, 8, h100, 1, 0, 0, true, "cannot run at rated performance"},
		{"cooling throttles", Rack{PowerWatts: 30000, CoolingWatts: 9000}, 8, h100, 1, 0, 0, true, "cooling of 9kW"},
		{"no rack", Rack{}, 8, h100, 1, -1, 0, false, ""},
		// PCIe cards: a server of the plan's cards, 500 W of host.
		{"pcie", Rack{PowerWatts: 17300}, 4, l40s, 1, 9, 1, false, "relies on power capping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Run(Request{Model: cfg, GPUs: []catalog.GPU{tc.g}, GPUCount: tc.gpus, Rack: tc.rack}, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := p.Candidates[0]
			f := c.Facility
			if f == nil || f.Nodes != tc.nodes || f.Throttles != tc.throttles {
				t.Fatalf("facility %+v", f)
			}
			if (f.NodesPerRackRated == nil) != (tc.perRack < 0) || (f.NodesPerRackRated != nil && *f.NodesPerRackRated != tc.perRack) {
				t.Errorf("nodes per rack %v, want %d", f.NodesPerRackRated, tc.perRack)
			}
			if got := 0; f.Racks != nil {
				if got = *f.Racks; got != tc.racks {
					t.Errorf("racks %d, want %d", got, tc.racks)
				}
			} else if tc.racks != 0 {
				t.Errorf("racks null, want %d", tc.racks)
			}
			if f.TotalRatedWatts != float64(tc.nodes)*f.RatedNodeWatts || f.TotalExpectedWatts > f.TotalRatedWatts {
				t.Errorf("totals %+v", f)
			}
			if tc.note != "" && !strings.Contains(strings.Join(c.Notes, "\n"), tc.note) {
				t.Errorf("notes %q lack %q", c.Notes, tc.note)
			}
		})
	}
	if _, err := Run(Request{Model: cfg, Rack: Rack{PowerWatts: -1}}, cat.All()); err == nil || !strings.Contains(err.Error(), "rack-power") {
		t.Errorf("a negative rack power: %v", err)
	}
}

package bench_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// groupRun measures an all-reduce across simulated nodes as the server
// does: every member's part, combined, one result per member.
func groupRun(t *testing.T, id string, nodes []string, perNode int, faults map[string]map[int]simgpu.Fault) []bench.Result {
	t.Helper()
	g := bench.GroupRun{ID: id, Nodes: nodes, GPUsPerNode: perNode, Fabric: bench.FabricNetwork}
	var parts []bench.Measurement
	for i, n := range nodes {
		be, err := simgpu.New([]simgpu.Spec{{Model: "h100-sxm-80gb", Count: perNode}}, simgpu.WithNodeName(n))
		if err != nil {
			t.Fatal(err)
		}
		for gpu, f := range faults[n] {
			if err := be.Inject(gpu, f); err != nil {
				t.Fatal(err)
			}
		}
		run := g
		run.Rank = i
		m, err := be.MeasureGroup(context.Background(), run, bench.Options{Quick: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, m)
	}
	ms, err := bench.CombineGroup(g, parts)
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.ValidateMeasurements("parts", ms); err != nil {
		t.Fatal(err)
	}
	var out []bench.Result
	for i, f := range bench.Summarize(catalog.Default(), ms) {
		out = append(out, bench.Result{Figure: f, Node: nodes[i], At: time.Unix(0, 0), Order: id})
	}
	return out
}

// TestAllReduceAcrossNodes: a run is as fast as its slowest member, each
// member stores it, the fleet rule counts a run once and never toward its
// own members, and a node with rails of its network down makes its run
// degraded against the other runs of the same shape only.
func TestAllReduceAcrossNodes(t *testing.T) {
	down := map[int]simgpu.Fault{0: {Kind: simgpu.FaultNICDown}, 1: {Kind: simgpu.FaultNICDown}, 2: {Kind: simgpu.FaultNICDown}}
	var fleet []bench.Result
	for i := range 3 {
		fleet = append(fleet, groupRun(t, fmt.Sprintf("g%d", i), []string{fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)}, 4, nil)...)
	}
	slow := groupRun(t, "slow", []string{"c0", "c1"}, 4, map[string]map[int]simgpu.Fault{"c1": down})
	bigger := groupRun(t, "big", []string{"a0", "a1", "a2", "a3"}, 4, nil)
	fleet = append(append(fleet, slow...), bigger...)

	healthy := fleet[0]
	if healthy.Name != "allreduce-2x4" || healthy.Nodes != 2 || healthy.GPUs != 8 || healthy.Spec != nil {
		t.Fatalf("figure %s over %d nodes, %d GPUs, spec %v", healthy.Name, healthy.Nodes, healthy.GPUs, healthy.Spec)
	}
	// Four H100 rails of 400 Gb/s at 0.85: 170 GB/s, under the node's
	// own NVLink ring (about 360 GB/s), so the network sets the pace.
	if v := healthy.Value; v < 160e9 || v > 180e9 {
		t.Errorf("healthy run %s, want about 170 GB/s", bench.Human(v, healthy.Unit))
	}
	// Both members store the same figure of the slow run: one rail up.
	if slow[0].Value != slow[1].Value || slow[0].Value > 0.3*healthy.Value {
		t.Errorf("slow run: members %s and %s, healthy %s", bench.Human(slow[0].Value, slow[0].Unit), bench.Human(slow[1].Value, slow[1].Unit), bench.Human(healthy.Value, healthy.Unit))
	}
	base := bench.NewBaseline(fleet)
	c := base.Compare(healthy.Figure, bench.Gates{})
	if c.Peers != 3 || c.Degraded { // g1, g2 and slow; not g0 itself
		t.Errorf("healthy against the fleet: %+v, want 3 other runs and no verdict against it", c)
	}
	sc := base.Compare(slow[1].Figure, bench.Gates{})
	if sc.Peers != 3 || !sc.Degraded {
		t.Errorf("slow run against the fleet: %+v, want degraded against 3 other runs", sc)
	}
	// The 4-node run has no run of its shape to compare with.
	if bc := base.Compare(bigger[0].Figure, bench.Gates{}); bc.Peers != 0 || bc.Fraction != nil {
		t.Errorf("4x4 run: %+v, want no baseline", bc)
	}
	short := bench.Judge([]bench.Figure{slow[0].Figure, slow[1].Figure, healthy.Figure}, fleet, bench.Gates{})
	if len(short) != 2 {
		t.Fatalf("%d shortfalls, want both members of the slow run", len(short))
	}
	for _, s := range short {
		for _, want := range []string{"all-reduce across 2 nodes (c0, c1; 8 GPUs)", "allreduce-2x4 measured", "3 other runs of this shape"} {
			if !strings.Contains(s.Evidence, want) {
				t.Errorf("evidence %q lacks %q", s.Evidence, want)
			}
		}
	}
	// The node's own all-reduce and the run across nodes never compare.
	local := simFigures(t, "a0", nil, bench.Options{Tests: []bench.Test{bench.AllReduce}, Quick: true})
	if lc := bench.NewBaseline(append(slices.Clone(fleet), local...)).Compare(local[0].Figure, bench.Gates{}); lc.Peers != 0 {
		t.Errorf("the node's all-reduce compared with %d runs across nodes", lc.Peers)
	}
}

func TestCombineGroupTakesTheSlowestMember(t *testing.T) {
	g := bench.GroupRun{ID: "g", Nodes: []string{"a", "b", "c"}, GPUsPerNode: 8, Fabric: bench.FabricNVLink}
	part := func(uuid string, rates ...float64) bench.Measurement {
		return bench.Measurement{Name: "x", Test: bench.AllReduce, UUID: uuid, Model: "m", GPUs: 24, Unit: bench.BytesPerS, Rates: rates}
	}
	ms, err := bench.CombineGroup(g, []bench.Measurement{part("ua", 5, 9, 7), part("ub", 6, 3, 8), part("uc", 4, 10, 9, 1)})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if !slices.Equal(m.Rates, []float64{4, 3, 7}) || m.Name != "allreduce-3x8-nvlink" || m.Group != "g" || m.Nodes != 3 || !slices.Equal(m.Members, g.Nodes) {
			t.Errorf("member %d: %+v", i, m)
		}
	}
	if ms[1].UUID != "ub" {
		t.Errorf("member 1 on %s, want its own GPU", ms[1].UUID)
	}
	if _, err := bench.CombineGroup(g, ms[:2]); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("two parts of three: %v", err)
	}
}

func TestGroupRunValidate(t *testing.T) {
	ok := bench.GroupRun{ID: "g", Nodes: []string{"a", "b"}, Rank: 1, GPUsPerNode: 8, Fabric: bench.FabricNetwork}
	if err := ok.Validate("group"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		edit  func(*bench.GroupRun)
	}{
		{"nodes", func(g *bench.GroupRun) { g.Nodes = g.Nodes[:1] }},
		{"nodes[1]", func(g *bench.GroupRun) { g.Nodes = []string{"a", "a"} }},
		{"rank", func(g *bench.GroupRun) { g.Rank = 2 }},
		{"gpus_per_node", func(g *bench.GroupRun) { g.GPUsPerNode = 0 }},
		{"fabric", func(g *bench.GroupRun) { g.Fabric = "carrier-pigeon" }},
		{"token", func(g *bench.GroupRun) { g.Token = make([]byte, bench.MaxTokenBytes+1) }},
	} {
		g := ok
		g.Nodes = slices.Clone(ok.Nodes)
		tc.edit(&g)
		if err := g.Validate("group"); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "group."+tc.field) {
			t.Errorf("%s: %v", tc.field, err)
		}
	}
}

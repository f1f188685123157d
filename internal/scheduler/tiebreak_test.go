package scheduler_test

import (
	"fmt"
	"testing"

	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// TestTieBreaks checks that no policy picks among equally good nodes by
// their names: the fastest model goes first (k80-000 sorts before
// v100-000, and loses), then a seeded order, the same whatever the input's
// order of nodes.
func TestTieBreaks(t *testing.T) {
	tests := map[string]struct {
		policy string
		nodes  []scheduler.Node
		gpus   int
		want   string // node of the start
	}{
		"fifo's first-fit takes the V100 node, not the K80 named first": {
			policy: "fifo",
			nodes:  []scheduler.Node{schedtest.MakeNode("k80-000", "k80", 8).Obj(), schedtest.MakeNode("v100-000", "v100-sxm2-16gb", 8).Obj()},
			gpus:   1, want: "v100-000",
		},
		"bestfit's tie on free GPUs goes to the faster model": {
			policy: "bestfit",
			nodes:  []scheduler.Node{schedtest.MakeNode("a-k80", "k80", 4).Obj(), schedtest.MakeNode("b-h100", "h100-sxm-80gb", 4).Obj()},
			gpus:   2, want: "b-h100",
		},
		"best fit still beats speed": {
			policy: "bestfit",
			nodes:  []scheduler.Node{schedtest.MakeNode("a-k80", "k80", 2).Obj(), schedtest.MakeNode("b-h100", "h100-sxm-80gb", 8).Obj()},
			gpus:   2, want: "a-k80",
		},
		"an opaque model goes after the catalog's": {
			policy: "fifo",
			nodes:  []scheduler.Node{schedtest.MakeNode("a-opaque", schedtest.Opaque, 8).Obj(), schedtest.MakeNode("z-l4", "l4", 8).Obj()},
			gpus:   1, want: "z-l4",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := scheduler.PolicyConfig(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			for _, order := range [][]scheduler.Node{tc.nodes, {tc.nodes[1], tc.nodes[0]}} {
				in := scheduler.Input{Now: schedtest.T0, Models: schedtest.Models(), Nodes: order, Config: cfg,
					Jobs: []scheduler.Job{schedtest.MakeJob("j", "a", tc.gpus).Obj()}}
				out := scheduler.Schedule(in)
				if len(out.Starts) != 1 || out.Starts[0].Placement[0].Node != tc.want {
					t.Fatalf("starts %+v, want one on %s", out.Starts, tc.want)
				}
			}
		})
	}
}

// TestTieBreakSeed checks that among nodes of one model the seed, not the
// name, decides: over a few seeds first-fit lands on more than one node,
// and each seed gives one answer whatever the input's node order.
func TestTieBreakSeed(t *testing.T) {
	var nodes []scheduler.Node
	for i := range 8 {
		nodes = append(nodes, schedtest.MakeNode(fmt.Sprintf("n%d", i), "h100-sxm-80gb", 8).Obj())
	}
	reversed := make([]scheduler.Node, len(nodes))
	for i, n := range nodes {
		reversed[len(nodes)-1-i] = n
	}
	cfg, err := scheduler.PolicyConfig("fifo")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for seed := range uint64(16) {
		cfg.Seed = seed
		var got []string
		for _, order := range [][]scheduler.Node{nodes, reversed} {
			in := scheduler.Input{Now: schedtest.T0, Models: schedtest.Models(), Nodes: order, Config: cfg,
				Jobs: []scheduler.Job{schedtest.MakeJob("j", "a", 1).Obj()}}
			out := scheduler.Schedule(in)
			if len(out.Starts) != 1 {
				t.Fatalf("seed %d: starts %+v", seed, out.Starts)
			}
			got = append(got, out.Starts[0].Placement[0].Node)
		}
		if got[0] != got[1] {
			t.Errorf("seed %d: %s with nodes in order, %s reversed", seed, got[0], got[1])
		}
		seen[got[0]] = true
	}
	if len(seen) < 4 {
		t.Errorf("16 seeds chose only %v", seen)
	}
}

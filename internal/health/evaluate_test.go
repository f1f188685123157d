package health

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
)

// with returns GPU 0 with readings set by fn.
func with(fn func(g *GPUEvidence)) GPUEvidence {
	g := healthyGPU(0)
	fn(&g)
	return g
}

func TestRules(t *testing.T) {
	none := []string{}
	reasons := func(v uint64) GPUEvidence { return with(func(g *GPUEvidence) { g.ClockEventReasons = u64(v) }) }
	noReasons := with(func(g *GPUEvidence) {})
	vol := func(v uint64) GPUEvidence { return with(func(g *GPUEvidence) { g.ECCUncorrectedVolatile = u64(v) }) }
	sbe := func(v uint64) GPUEvidence { return with(func(g *GPUEvidence) { g.ECCCorrectedVolatile = u64(v) }) }
	replay := func(v uint64) GPUEvidence { return with(func(g *GPUEvidence) { g.PCIeReplayCount = u64(v) }) }
	nvErr := func(v uint64) GPUEvidence { return with(func(g *GPUEvidence) { g.NVLinkErrors = u64(v) }) }
	pages := func(sbe, dbe *uint64) GPUEvidence {
		return with(func(g *GPUEvidence) { g.RetiredPagesSBE, g.RetiredPagesDBE = sbe, dbe })
	}
	link := func(gen, width, maxGen, maxWidth *int, util *float64) GPUEvidence {
		return with(func(g *GPUEvidence) {
			g.PCIeGen, g.PCIeWidth, g.PCIeMaxGen, g.PCIeMaxWidth, g.Utilization = gen, width, maxGen, maxWidth, util
		})
	}
	links := func(up, total *int) GPUEvidence {
		return with(func(g *GPUEvidence) { g.NVLinkLinksUp, g.NVLinkLinksTotal = up, total })
	}
	app := func(n int) GPUEvidence {
		return with(func(g *GPUEvidence) {
			for range n {
				g.XIDs = append(g.XIDs, 13)
			}
		})
	}

	tests := map[string]struct {
		cfg   Config
		steps []step
		want  [][]string
	}{
		// Memory readings.
		"row remap pending":             {steps: []step{{0, with(func(g *GPUEvidence) { g.RowRemapPending = b(true) })}}, want: [][]string{{"row-remap-pending"}}},
		"row remap not pending":         {steps: []step{{0, with(func(g *GPUEvidence) { g.RowRemapPending = b(false) })}}, want: [][]string{none}},
		"row remap absent":              {steps: []step{{0, noReasons}}, want: [][]string{none}},
		"row remap failure":             {steps: []step{{0, with(func(g *GPUEvidence) { g.RowRemapFailure = b(true) })}}, want: [][]string{{"row-remap-failure"}}},
		"row remap failure false":       {steps: []step{{0, with(func(g *GPUEvidence) { g.RowRemapFailure = b(false) })}}, want: [][]string{none}},
		"retired pages pending":         {steps: []step{{0, with(func(g *GPUEvidence) { g.RetiredPagesPending = b(true) })}}, want: [][]string{{"retired-pages-pending"}}},
		"retired pages at the limit":    {steps: []step{{0, pages(u64(10), u64(50))}}, want: [][]string{{"retired-pages-limit"}}},
		"retired pages high":            {steps: []step{{0, pages(u64(5), u64(10))}}, want: [][]string{{"retired-pages-high"}}},
		"retired pages below":           {steps: []step{{0, pages(u64(4), u64(10))}}, want: [][]string{none}},
		"retired pages one absent":      {steps: []step{{0, pages(nil, u64(14))}}, want: [][]string{none}},
		"retired pages one absent over": {steps: []step{{0, pages(nil, u64(60))}}, want: [][]string{{"retired-pages-limit"}}},
		"retired pages custom limit":    {cfg: Config{RetiredPagesHigh: 2, RetiredPagesLimit: 4}, steps: []step{{0, pages(u64(2), u64(2))}}, want: [][]string{{"retired-pages-limit"}}},

		// Uncorrectable ECC growth.
		"dbe growth":                  {steps: []step{{0, vol(0)}, {time.Minute, vol(1)}}, want: [][]string{none, {"ecc-dbe"}}},
		"dbe steady":                  {steps: []step{{0, vol(2)}, {time.Minute, vol(2)}}, want: [][]string{none, none}},
		"dbe first reading is base":   {steps: []step{{0, vol(5)}}, want: [][]string{none}},
		"dbe counter reset":           {steps: []step{{0, vol(5)}, {time.Minute, vol(0)}, {2 * time.Minute, vol(1)}}, want: [][]string{none, none, {"ecc-dbe"}}},
		"dbe absent is not zero":      {steps: []step{{0, noReasons}, {time.Minute, vol(3)}}, want: [][]string{none, none}},
		"dbe absent keeps baseline":   {steps: []step{{0, vol(1)}, {time.Minute, noReasons}, {2 * time.Minute, vol(2)}}, want: [][]string{none, none, {"ecc-dbe"}}},
		"dbe aggregate":               {steps: []step{{0, with(func(g *GPUEvidence) { g.ECCUncorrectedAggregate = u64(7) })}, {time.Minute, with(func(g *GPUEvidence) { g.ECCUncorrectedAggregate = u64(8) })}}, want: [][]string{none, {"ecc-dbe"}}},
		"dbe custom growth threshold": {cfg: Config{ECCUncorrectedGrowth: 3}, steps: []step{{0, vol(0)}, {time.Minute, vol(2)}, {2 * time.Minute, vol(5)}}, want: [][]string{none, none, {"ecc-dbe"}}},

		// Correctable ECC rate: 100 per hour.
		"sbe fast":           {steps: []step{{0, sbe(0)}, {30 * time.Minute, sbe(100)}}, want: [][]string{none, {"ecc-sbe-rate"}}},
		"sbe slow":           {steps: []step{{0, sbe(0)}, {30 * time.Minute, sbe(50)}, {59 * time.Minute, sbe(99)}, {61 * time.Minute, sbe(99)}}, want: [][]string{none, none, none, none}},
		"sbe sparse scaled":  {steps: []step{{0, sbe(0)}, {2 * time.Hour, sbe(150)}}, want: [][]string{none, none}},
		"sbe sparse fast":    {steps: []step{{0, sbe(0)}, {2 * time.Hour, sbe(200)}}, want: [][]string{none, {"ecc-sbe-rate"}}},
		"sbe counter reset":  {steps: []step{{0, sbe(5000)}, {time.Minute, sbe(10)}}, want: [][]string{none, none}},
		"sbe window rebases": {steps: []step{{0, sbe(0)}, {time.Hour, sbe(90)}, {90 * time.Minute, sbe(150)}}, want: [][]string{none, none, none}},

		// PCIe replays: 8 per minute.
		"pcie replays fast":   {steps: []step{{0, replay(0)}, {30 * time.Second, replay(8)}}, want: [][]string{none, {"pcie-replay"}}},
		"pcie replays slow":   {steps: []step{{0, replay(0)}, {59 * time.Second, replay(7)}, {70 * time.Second, replay(9)}}, want: [][]string{none, none, none}},
		"pcie replays steady": {steps: []step{{0, replay(40)}, {time.Minute, replay(40)}}, want: [][]string{none, none}},
		"pcie replays reset":  {steps: []step{{0, replay(100)}, {time.Minute, replay(3)}}, want: [][]string{none, none}},

		// NVLink.
		"nvlink down":          {steps: []step{{0, links(i(16), i(18))}}, want: [][]string{{"nvlink-down"}}},
		"nvlink all up":        {steps: []step{{0, links(i(18), i(18))}}, want: [][]string{none}},
		"nvlink up absent":     {steps: []step{{0, links(nil, i(18))}}, want: [][]string{none}},
		"nvlink no links":      {steps: []step{{0, links(i(0), i(0))}}, want: [][]string{none}},
		"nvlink errors fast":   {steps: []step{{0, nvErr(0)}, {time.Minute, nvErr(6000)}}, want: [][]string{none, {"nvlink-errors"}}},
		"nvlink errors slow":   {steps: []step{{0, nvErr(0)}, {time.Minute, nvErr(5999)}}, want: [][]string{none, none}},
		"nvlink errors steady": {steps: []step{{0, nvErr(10)}, {time.Minute, nvErr(10)}}, want: [][]string{none, none}},
		"nvlink errors reset":  {steps: []step{{0, nvErr(90000)}, {time.Minute, nvErr(1)}}, want: [][]string{none, none}},

		// Throttling: 5 minutes in every evaluation.
		"thermal sustained": {
			steps: []step{{0, reasons(0x40)}, {2 * time.Minute, reasons(0x40)}, {4 * time.Minute, reasons(0x40)}, {5 * time.Minute, reasons(0x40)}},
			want:  [][]string{none, none, none, {"thermal-sustained"}},
		},
		"thermal interrupted": {
			steps: []step{{0, reasons(0x40)}, {2 * time.Minute, reasons(0x40)}, {3 * time.Minute, reasons(0x1)}, {4 * time.Minute, reasons(0x20)}, {6 * time.Minute, reasons(0x20)}, {9 * time.Minute, reasons(0x60)}},
			want:  [][]string{none, none, none, none, none, {"thermal-sustained"}},
		},
		"thermal absent reading breaks the run": {
			steps: []step{{0, reasons(0x20)}, {3 * time.Minute, noReasons}, {5 * time.Minute, reasons(0x20)}},
			want:  [][]string{none, none, none},
		},
		"thermal ends": {
			steps: []step{{0, reasons(0x40)}, {5 * time.Minute, reasons(0x40)}, {6 * time.Minute, reasons(0)}},
			want:  [][]string{none, {"thermal-sustained"}, none},
		},
		"software power cap is normal": {
			steps: []step{{0, reasons(0x4 | 0x1)}, {10 * time.Minute, reasons(0x4)}},
			want:  [][]string{none, none},
		},
		"power brake sustained": {
			steps: []step{{0, reasons(0x80 | 0x8)}, {5 * time.Minute, reasons(0x80 | 0x8)}},
			want:  [][]string{none, {"power-brake-sustained", "hw-slowdown-sustained"}},
		},
		"custom sustain": {
			cfg:   Config{ThrottleSustain: time.Minute},
			steps: []step{{0, reasons(0x40)}, {time.Minute, reasons(0x40)}},
			want:  [][]string{none, {"thermal-sustained"}},
		},

		// PCIe link: width at any load, generation under load, for 5 minutes.
		"pcie narrow":           {steps: []step{{0, link(i(5), i(8), i(5), i(16), nil)}, {5 * time.Minute, link(i(5), i(8), i(5), i(16), nil)}}, want: [][]string{none, {"pcie-downgrade"}}},
		"pcie narrow not yet":   {steps: []step{{0, link(i(5), i(8), i(5), i(16), nil)}, {4 * time.Minute, link(i(5), i(8), i(5), i(16), nil)}}, want: [][]string{none, none}},
		"pcie slow gen idle":    {steps: []step{{0, link(i(1), i(16), i(5), i(16), f64(0))}, {10 * time.Minute, link(i(1), i(16), i(5), i(16), f64(0))}}, want: [][]string{none, none}},
		"pcie slow gen busy":    {steps: []step{{0, link(i(3), i(16), i(5), i(16), f64(0.9))}, {5 * time.Minute, link(i(3), i(16), i(5), i(16), f64(0.9))}}, want: [][]string{none, {"pcie-downgrade"}}},
		"pcie slow gen no util": {steps: []step{{0, link(i(3), i(16), i(5), i(16), nil)}, {5 * time.Minute, link(i(3), i(16), i(5), i(16), nil)}}, want: [][]string{none, none}},
		"pcie at max":           {steps: []step{{0, link(i(5), i(16), i(5), i(16), f64(1))}, {5 * time.Minute, link(i(5), i(16), i(5), i(16), f64(1))}}, want: [][]string{none, none}},
		"pcie max width absent": {steps: []step{{0, link(nil, i(8), nil, nil, f64(1))}, {5 * time.Minute, link(nil, i(8), nil, nil, f64(1))}}, want: [][]string{none, none}},
		"pcie busy then idle":   {steps: []step{{0, link(i(3), i(16), i(5), i(16), f64(0.9))}, {3 * time.Minute, link(i(3), i(16), i(5), i(16), f64(0))}, {5 * time.Minute, link(i(3), i(16), i(5), i(16), f64(0.9))}}, want: [][]string{none, none, none}},

		// Missing GPU.
		"gpu not present": {steps: []step{{0, with(func(g *GPUEvidence) { g.Present = false })}}, want: [][]string{{"gpu-missing"}}},

		// Application XIDs: 10 per hour degrade.
		"app xids once":  {steps: []step{{0, app(1)}}, want: [][]string{{"xid-13"}}},
		"app xids burst": {steps: []step{{0, app(9)}, {10 * time.Minute, app(1)}}, want: [][]string{{"xid-13"}, {"xid-app-burst", "xid-13"}}},
		"app xids spread": {
			steps: []step{{0, app(5)}, {61 * time.Minute, app(5)}, {62 * time.Minute, app(4)}},
			want:  [][]string{{"xid-13"}, {"xid-13"}, {"xid-13"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := runSteps(tc.cfg, tc.steps)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rules per step (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeRules(t *testing.T) {
	tests := map[string]struct {
		ev   NodeEvidence
		want []Condition
	}{
		"heartbeat lost": {
			ev: NodeEvidence{Node: "n1", HeartbeatAge: 90 * time.Second},
			want: []Condition{{Rule: "heartbeat-lost", GPU: -1, Severity: gpufleet.Unhealthy, Action: ActionDegrade, Reason: "no heartbeat for 1m30s",
				Explanation: "Node n1 has sent no heartbeat for 1m30s (grace 30s): check that it is up, reachable and running the gpufleet agent.", Since: at(-time.Minute)}},
		},
		"heartbeat at the grace":   {ev: NodeEvidence{Node: "n1", HeartbeatAge: 30 * time.Second}, want: nil},
		"heartbeat within its own": {ev: NodeEvidence{Node: "n1", HeartbeatAge: 50 * time.Second, HeartbeatGrace: time.Minute}, want: nil},
		"fewer GPUs than registered": {
			ev: NodeEvidence{Node: "n1", InventoryGPUs: 8, GPUs: []GPUEvidence{healthyGPU(0), healthyGPU(1), healthyGPU(2), healthyGPU(3), healthyGPU(4), healthyGPU(5), healthyGPU(6)}},
			want: []Condition{{Rule: "gpu-missing", GPU: -1, Severity: gpufleet.Unhealthy, Action: ActionRebootNode, Reason: "7 of 8 GPUs reported",
				Explanation: "Node n1 reports 7 of the 8 GPUs it registered with: drain the node and reboot it, and replace any GPU that does not come back.", Since: t0}},
		},
		"GPU reported absent": {
			ev: node(healthyGPU(0), healthyGPU(1), GPUEvidence{Index: 2, UUID: "GPU-c"}),
			want: []Condition{{Rule: "gpu-missing", GPU: 2, UUID: "GPU-c", Severity: gpufleet.Unhealthy, Action: ActionRebootNode, Reason: "missing from the node's report",
				Explanation: "GPU 2 (GPU-c) is in the node's inventory but the node no longer reports it (it probably fell off the bus): drain the node and reboot it, and replace the GPU if it does not come back.", Since: t0}},
		},
		"all there": {ev: node(healthyGPU(0), healthyGPU(1)), want: nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, got := Evaluate(State{}, tc.ev, t0, DefaultConfig())
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b []Condition) bool { return cmp.Equal(normal(a), normal(b)) })); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}

// normal maps nil to an empty slice.
func normal(c []Condition) []Condition {
	if c == nil {
		return []Condition{}
	}
	return c
}

func TestEventConditionsAreHeld(t *testing.T) {
	g := healthyGPU(0)
	g.XIDs = []int{48, 13}
	st, conds := Evaluate(State{}, node(g), t0, Config{})
	if diff := cmp.Diff([]string{"xid-48", "xid-13"}, rules(conds)); diff != "" {
		t.Fatalf("first evaluation (-want +got):\n%s", diff)
	}
	st, conds = Evaluate(st, node(healthyGPU(0)), at(time.Hour), Config{})
	if len(conds) != 1 || conds[0].Rule != "xid-48" || !conds[0].Since.Equal(t0) {
		t.Fatalf("an hour later: %+v, want xid-48 since t0 (xid-13 is not held)", conds)
	}
	// Seen again: Since stays, the hold restarts.
	g.XIDs = []int{48}
	st, _ = Evaluate(st, node(g), at(2*time.Hour), Config{})
	_, conds = Evaluate(st, node(healthyGPU(0)), at(2*time.Hour+23*time.Hour), Config{})
	if len(conds) != 1 || !conds[0].Since.Equal(t0) {
		t.Fatalf("23h after the second XID 48: %+v", conds)
	}
	_, conds = Evaluate(st, node(healthyGPU(0)), at(2*time.Hour+24*time.Hour), Config{})
	if len(conds) != 0 {
		t.Fatalf("24h after the last XID 48: %+v, want none", conds)
	}
	// A shorter hold.
	_, conds = Evaluate(st, node(healthyGPU(0)), at(3*time.Hour), Config{EventHold: 30 * time.Minute})
	if len(conds) != 0 {
		t.Fatalf("hold 30m: %+v, want none", conds)
	}
}

func TestReadingConditionsFollowTheReading(t *testing.T) {
	pending := with(func(g *GPUEvidence) { g.RowRemapPending = b(true) })
	st, _ := Evaluate(State{}, node(pending), t0, Config{})
	st, conds := Evaluate(st, node(pending), at(time.Minute), Config{})
	if len(conds) != 1 || !conds[0].Since.Equal(t0) {
		t.Fatalf("still pending: %+v, want since t0", conds)
	}
	_, conds = Evaluate(st, node(with(func(g *GPUEvidence) { g.RowRemapPending = b(false) })), at(2*time.Minute), Config{})
	if len(conds) != 0 {
		t.Fatalf("after the reset: %+v, want none", conds)
	}
}

func TestClearGPU(t *testing.T) {
	g0, g1 := healthyGPU(0), healthyGPU(1)
	g0.XIDs, g1.XIDs = []int{79}, []int{74}
	st, _ := Evaluate(State{}, NodeEvidence{Node: "n1", InventoryGPUs: 3, GPUs: []GPUEvidence{g0, g1}}, t0, Config{})
	cleared := st.ClearGPU(0).ClearGPU(-1)
	_, conds := Evaluate(cleared, node(healthyGPU(0), healthyGPU(1)), at(time.Minute), Config{})
	if diff := cmp.Diff([]string{"xid-74"}, rules(conds)); diff != "" {
		t.Errorf("after ClearGPU(0) (-want +got):\n%s", diff)
	}
	if len(st.Active) != 3 {
		t.Errorf("ClearGPU changed the original state: %+v", st.Active)
	}
}

func TestEvaluateDoesNotChangePrev(t *testing.T) {
	g := with(func(g *GPUEvidence) {
		g.ECCCorrectedVolatile, g.PCIeReplayCount, g.ClockEventReasons = u64(1), u64(1), u64(0x40)
		g.XIDs = []int{48}
	})
	prev, _ := Evaluate(State{}, node(g), t0, Config{})
	before, _ := json.Marshal(prev)
	g.ECCCorrectedVolatile, g.PCIeReplayCount, g.XIDs = u64(500), u64(900), []int{95}
	Evaluate(prev, node(g), at(6*time.Minute), Config{})
	after, _ := json.Marshal(prev)
	if string(before) != string(after) {
		t.Errorf("Evaluate changed prev:\nbefore %s\nafter  %s", before, after)
	}
}

func TestReplacedGPUStartsFresh(t *testing.T) {
	old := with(func(g *GPUEvidence) { g.ECCUncorrectedAggregate = u64(3); g.XIDs = []int{48} })
	st, _ := Evaluate(State{}, node(old), t0, Config{})
	repl := with(func(g *GPUEvidence) { g.UUID = "GPU-new"; g.ECCUncorrectedAggregate = u64(9) })
	_, conds := Evaluate(st, node(repl), at(time.Hour), Config{})
	if len(conds) != 0 {
		t.Errorf("a new GPU at the same index inherited %+v", conds)
	}
}

func TestExplanations(t *testing.T) {
	g := with(func(g *GPUEvidence) {
		g.Index = 2
		g.RowRemapPending, g.RemappedRowsUncorrectable, g.RemappedRowsCorrectable = b(true), u64(3), u64(1)
		g.NVLinkLinksUp, g.NVLinkLinksTotal = i(17), i(18)
	})
	_, conds := Evaluate(State{}, node(healthyGPU(0), healthyGPU(1), g), t0, Config{})
	want := []string{
		"GPU 2 has 17 of 18 NVLinks up: drain it so multi-GPU jobs do not slow down or hang, then reset the GPU or reboot the node to retrain the links.",
		"GPU 2 has a memory row remap pending (3 rows remapped for uncorrectable and 1 for correctable errors so far): drain and reset the GPU so the remap takes effect.",
	}
	var got []string
	for _, c := range conds {
		got = append(got, c.Explanation)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("explanations (-want +got):\n%s", diff)
	}
}

// busyNode is a node with something wrong on most GPUs.
func busyNode() NodeEvidence {
	var gs []GPUEvidence
	for k := range 8 {
		g := healthyGPU(k)
		g.XIDs = []int{13, 79, 48, 13, 999}[k%5:]
		g.ClockEventReasons = u64(0xff)
		g.NVLinkLinksUp, g.NVLinkLinksTotal = i(k), i(18)
		g.RowRemapPending = b(k%2 == 0)
		g.ECCCorrectedVolatile = u64(uint64(k) * 1000)
		g.PCIeGen, g.PCIeMaxGen, g.PCIeWidth, g.PCIeMaxWidth, g.Utilization = i(3), i(5), i(8), i(16), f64(1)
		gs = append(gs, g)
	}
	gs[5].Present = false
	return NodeEvidence{Node: "n1", InventoryGPUs: 9, HeartbeatAge: time.Hour, GPUs: gs}
}

func TestDeterminism(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var st1 State
	var want []Condition
	for _, d := range []time.Duration{0, 5 * time.Minute, 10 * time.Minute} {
		st1, want = Evaluate(st1, busyNode(), at(d), Config{})
	}
	wantJSON, _ := json.Marshal(want)
	for run := range 5 {
		var st State
		var got []Condition
		for _, d := range []time.Duration{0, 5 * time.Minute, 10 * time.Minute} {
			ev := busyNode()
			rng.Shuffle(len(ev.GPUs), func(a, b int) { ev.GPUs[a], ev.GPUs[b] = ev.GPUs[b], ev.GPUs[a] })
			for k := range ev.GPUs {
				xs := ev.GPUs[k].XIDs
				rng.Shuffle(len(xs), func(a, b int) { xs[a], xs[b] = xs[b], xs[a] })
			}
			st, got = Evaluate(st, ev, at(d), Config{})
		}
		gotJSON, _ := json.Marshal(got)
		if string(gotJSON) != string(wantJSON) {
			t.Fatalf("run %d: output depends on input order:\n%s\nvs\n%s", run, gotJSON, wantJSON)
		}
		if diff := cmp.Diff(st1, st); diff != "" {
			t.Fatalf("run %d: state depends on input order (-first +this):\n%s", run, diff)
		}
	}
	if len(want) < 20 {
		t.Errorf("busy node gave only %d conditions; the test should exercise most rules", len(want))
	}
	// Order: node first, then by GPU, most severe action first.
	for k := 1; k < len(want); k++ {
		if conditionLess(want[k], want[k-1]) {
			t.Errorf("conditions out of order at %d: %s/%d after %s/%d", k, want[k].Rule, want[k].GPU, want[k-1].Rule, want[k-1].GPU)
		}
	}
	if want[0].GPU != -1 || !strings.HasPrefix(want[0].Rule, "gpu-missing") {
		t.Errorf("first condition %s/%d, want the node's gpu-missing", want[0].Rule, want[0].GPU)
	}
}

func TestEveryRuleHasMetadata(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Rules(Config{}) {
		if seen[r.ID] {
			t.Errorf("rule %s listed twice", r.ID)
		}
		seen[r.ID] = true
		if r.Family == "" || r.Title == "" || r.Evidence == "" || r.Trigger == "" || r.Operator == "" || r.Source == "" || !r.Action.Valid() || r.Severity == "" {
			t.Errorf("rule %s has an empty field: %+v", r.ID, r)
		}
	}
	// Every rule id Evaluate emits (other than xid-N) is in the table.
	_, conds := Evaluate(State{}, busyNode(), t0, Config{})
	for _, c := range conds {
		if !seen[c.Rule] && !(strings.HasPrefix(c.Rule, "xid-") && seen["xid-unknown"]) {
			t.Errorf("condition rule %s is not in Rules()", c.Rule)
		}
	}
}

func TestConfig(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	if diff := cmp.Diff(DefaultConfig(), Config{}.withDefaults()); diff != "" {
		t.Errorf("zero Config does not take the defaults (-want +got):\n%s", diff)
	}
	for name, c := range map[string]Config{
		"negative hold":    {EventHold: -time.Second},
		"load above 1":     {PCIeLoadUtilization: 1.5},
		"fraction below 0": {QuarantineMaxFraction: -0.1},
		"high above limit": {RetiredPagesHigh: 70},
		"negative sustain": {ThrottleSustain: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
}

// TestBenchShortfalls: one bench-degraded condition per GPU (and one for
// the node's all-reduce) carrying every figure's evidence; it follows the
// reading, so a node whose figures recovered has none.
func TestBenchShortfalls(t *testing.T) {
	ev := node(healthyGPU(0), healthyGPU(1))
	ev.Bench = []BenchShortfall{
		{GPU: 1, UUID: "GPU-b", Reason: "copy at 0.60 of the fleet median", Evidence: "GPU 1: copy measured 1.8 TB/s"},
		{GPU: 1, UUID: "GPU-b", Reason: "h2d at 0.50 of the fleet median", Evidence: "GPU 1: h2d measured 26 GB/s"},
		{GPU: NodeGPU, Reason: "allreduce at 0.70 of the fleet median", Evidence: "all-reduce over 2 GPUs"},
		{GPU: -7, Reason: "ignored"},
	}
	st, conds := Evaluate(State{}, ev, t0, Config{})
	if got := rules(conds); len(got) != 2 || got[0] != "bench-degraded" || got[1] != "bench-degraded" {
		t.Fatalf("conditions %v", got)
	}
	c := conds[1]
	if c.GPU != 1 || c.Severity != gpufleet.Degraded || c.Action != ActionDegrade ||
		c.Reason != "copy at 0.60 of the fleet median (and 1 more figures)" ||
		!strings.Contains(c.Explanation, "copy measured 1.8 TB/s") || !strings.Contains(c.Explanation, "h2d measured 26 GB/s") {
		t.Errorf("gpu condition %+v", c)
	}
	if conds[0].GPU != NodeGPU {
		t.Errorf("node condition %+v", conds[0])
	}
	ev.Bench = nil
	if _, conds := Evaluate(st, ev, at(time.Second), Config{}); len(conds) != 0 {
		t.Errorf("recovered figures still flagged: %v", rules(conds))
	}
}

package server

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
)

// TestAllReduceAcrossNodesProtocol: refusals before any node is asked;
// rank 0 alone gets the rendezvous, then every member its part with the
// token; the figure is the slowest member's per run, stored on both; a
// part of another node's GPU fails the run; a member that never answers
// fails it after the timeout, naming it.
func TestAllReduceAcrossNodesProtocol(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a, b, c := f.node("a", "h100-sxm-80gb", 2), f.node("b", "h100-sxm-80gb", 2), f.node("c", "a100-sxm-80gb", 2)
	f.cycle()
	hb := func(p api.Principal, reps ...api.BenchReport) []api.BenchOrder {
		t.Helper()
		r, err := f.srv.Heartbeat(ctx, p, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Bench: reps})
		if err != nil {
			t.Fatal(err)
		}
		return r.Bench
	}
	for _, tc := range []struct {
		p    api.Principal
		req  api.AllReduceBenchRequest
		want string
	}{
		{f.admin, api.AllReduceBenchRequest{Nodes: []string{"a", "b"}}, "a is ready, b is ready: cordon them first"},
		{f.admin, api.AllReduceBenchRequest{}, "give one of nodes, rack or nvlink_domain"},
		{f.admin, api.AllReduceBenchRequest{Nodes: []string{"a", "a"}}, "nodes[1]"},
		{f.admin, api.AllReduceBenchRequest{Nodes: []string{"a"}}, "needs 2 to"},
		{f.admin, api.AllReduceBenchRequest{Rack: "nope"}, "rack"},
		{f.team("team-a", nil), api.AllReduceBenchRequest{Nodes: []string{"a", "b"}}, ""},
	} {
		_, err := f.srv.StartAllReduceBench(ctx, tc.p, tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.req, err, tc.want)
		}
	}
	for _, n := range []string{"a", "b", "c"} {
		if _, err := f.srv.NodeAction(ctx, f.admin, n, api.Cordon); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.srv.StartAllReduceBench(ctx, f.admin, api.AllReduceBenchRequest{Nodes: []string{"a", "c"}}); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "a100-sxm-80gb") {
		t.Errorf("mixed models: %v", err)
	}

	part := func(p api.Principal, o api.BenchOrder, uuid string, rates ...float64) api.BenchReport {
		g := o.Group
		return api.BenchReport{ID: o.ID, Measurements: []bench.Measurement{{Name: bench.GroupName(len(g.Nodes), g.GPUsPerNode, g.Fabric), Test: bench.AllReduce,
			UUID: uuid, Model: "h100-sxm-80gb", GPUs: g.Ranks(), Nodes: len(g.Nodes), Group: g.ID, Members: g.Nodes, Fabric: g.Fabric,
			Size: "128 MiB", Unit: bench.BytesPerS, Rates: rates}}}
	}
	run, err := f.srv.StartAllReduceBench(ctx, f.admin, api.AllReduceBenchRequest{Nodes: []string{"b", "a"}})
	if err != nil || run.State != bench.GroupRendezvous || run.Fabric != bench.FabricNetwork {
		t.Fatalf("start: %+v %v", run, err)
	}
	if _, err := f.srv.StartAllReduceBench(ctx, f.admin, api.AllReduceBenchRequest{Nodes: []string{"a", "b"}}); err == nil || !strings.Contains(err.Error(), run.ID) {
		t.Errorf("a second run on the same nodes: %v", err)
	}
	if os := hb(a); len(os) != 0 {
		t.Fatalf("a (rank 1) got %+v before the rendezvous", os)
	}
	os := hb(b)
	if len(os) != 1 || os[0].Rendezvous == nil || os[0].Rendezvous.Rank != 0 {
		t.Fatalf("b (rank 0) got %+v, want the rendezvous", os)
	}
	tok := []byte("a 128-byte id, or close enough")
	ob := hb(b, api.BenchReport{ID: os[0].ID, Token: tok})
	oa := hb(a)
	if len(ob) != 1 || len(oa) != 1 || ob[0].Group.Rank != 0 || oa[0].Group.Rank != 1 || string(oa[0].Group.Token) != string(tok) ||
		!slices.Equal(oa[0].Group.Nodes, []string{"b", "a"}) {
		t.Fatalf("parts: b %+v, a %+v", ob, oa)
	}
	hb(b, part(b, ob[0], "GPU-b-a", 100e9, 110e9, 105e9))
	if r, _ := f.srv.AllReduceBench(ctx, f.admin, run.ID); r.State != bench.GroupRunning || !slices.Equal(r.Reported, []string{"b"}) {
		t.Errorf("one part in: %+v", r)
	}
	hb(a, part(a, oa[0], "GPU-a-a", 90e9, 120e9, 104e9))
	r, err := f.srv.AllReduceBench(ctx, f.team("team-b", nil), run.ID)
	if err != nil || r.State != bench.GroupDone || r.Figure == nil || r.Figure.Value != 104e9 || !slices.Equal(r.Figure.Rates, []float64{90e9, 110e9, 104e9}) {
		t.Fatalf("done: %+v %v", r, err)
	}
	for _, n := range []string{"a", "b"} {
		list, _ := f.srv.BenchResults(ctx, f.admin, api.BenchQuery{Node: n})
		if !slices.ContainsFunc(list.Results, func(x bench.Result) bool { return x.Name == "allreduce-2x2" && x.Order == run.ID }) {
			t.Errorf("%s lacks the run's figure: %+v", n, list.Results)
		}
	}

	// A part measured on another node's GPU fails the run.
	run2, err := f.srv.StartAllReduceBench(ctx, f.admin, api.AllReduceBenchRequest{Nodes: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	os = hb(a)
	hb(a, api.BenchReport{ID: os[0].ID, Token: tok})
	oa, ob = hb(a), hb(b)
	hb(b, part(b, ob[0], "GPU-a-a", 1e9))
	if r, _ := f.srv.AllReduceBench(ctx, f.admin, run2.ID); r.State != bench.GroupFailed || !strings.Contains(r.Detail, "b could not run its part") {
		t.Errorf("foreign part: %+v", r)
	}
	if os := hb(a); len(os) != 0 {
		t.Errorf("a still has %+v after the run failed", os)
	}
	_ = oa

	// Nobody opens the rendezvous: after the timeout the run fails.
	run3, err := f.srv.StartAllReduceBench(ctx, f.admin, api.AllReduceBenchRequest{Nodes: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(groupBenchTimeout + time.Second)
	if r, _ := f.srv.AllReduceBench(ctx, f.admin, run3.ID); r.State != bench.GroupFailed || !strings.Contains(r.Detail, "no answer from a") {
		t.Errorf("after the timeout: %+v", r)
	}
	runs, err := f.srv.AllReduceBenches(ctx, f.admin)
	if err != nil || len(runs) != 3 || !slices.ContainsFunc(runs, func(r bench.GroupReport) bool { return r.ID == run3.ID && r.State == bench.GroupFailed }) {
		t.Errorf("list: %d runs, %v", len(runs), err)
	}
	_ = c
}

package server

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

// TestRackAtItsBudgetWaitsForPower: an H100 node in a rack of 8 kW (its
// rating is 10.2 kW: 8 x 700 W and 4.6 kW of host): a 4-GPU job fits
// (5.2 kW idle and host + 4 x 630 W), a second one would take the rack
// to about 10.2 kW, so it waits with reason rack_power naming the rack;
// once the first ends, it starts.
func TestRackAtItsBudgetWaitsForPower(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	node := f.node("n1", "h100-sxm-80gb", 8)
	if _, err := f.srv.PutRack(ctx, f.admin, api.PutRackRequest{Rack: gpufleet.Rack{Name: "r1", PowerBudgetWatts: 8000, Nodes: []string{"n1"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.PutRack(ctx, a, api.PutRackRequest{Rack: gpufleet.Rack{Name: "r2", PowerBudgetWatts: 1}}); err == nil {
		t.Error("a member created a rack")
	}
	beat := func(reps ...api.AttemptReport) api.HeartbeatResponse {
		hb, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: reps})
		if err != nil {
			t.Fatal(err)
		}
		return hb
	}
	first := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4}})
	f.cycle()
	hb := beat()
	if len(hb.Start) != 1 || hb.Start[0].JobID != first.ID {
		t.Fatalf("starts %+v, want the first job", hb.Start)
	}
	run := api.AttemptReport{AttemptID: hb.Start[0].AttemptID, JobID: first.ID, State: gpufleet.AttemptRunning}
	beat(run)
	second := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4}})
	f.clk.Advance(time.Second)
	f.cycle()
	q := f.job(second.ID).Queue
	if q == nil || q.ReasonCode != scheduler.ReasonRackPower || !strings.Contains(q.Reason, "rack r1") || !strings.Contains(q.Reason, "8kW budget") {
		t.Fatalf("second job's queue entry %+v, want rack_power naming rack r1 and its 8kW budget", q)
	}
	racks, err := f.srv.Racks(ctx, a)
	if err != nil || len(racks) != 1 || racks[0].DrawWatts == nil || *racks[0].DrawWatts < 7000 || racks[0].RatedWatts != 10200 {
		t.Fatalf("racks %+v, %v: want r1 drawing about 7.7 kW of 10.2 kW rated", racks, err)
	}
	rec := httptest.NewRecorder()
	f.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`gpufleet_rack_power_watts{kind="budget",rack="r1"} 8000`, `gpufleet_rack_power_watts{kind="rated",rack="r1"} 10200`,
		`gpufleet_rack_power_watts{kind="projected",rack="r1"} 7`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	beat(api.AttemptReport{AttemptID: run.AttemptID, JobID: first.ID, State: gpufleet.AttemptSucceeded})
	f.clk.Advance(time.Second)
	f.cycle()
	if hb := beat(); len(hb.Start) != 1 || hb.Start[0].JobID != second.ID {
		t.Fatalf("starts after the first job ended: %+v, want the second job", hb.Start)
	}
}

// TestMeasuredJobIsChargedItsPeak: a running job's GPUs count their TDP
// until readings taken a settle time after it started arrive, then their
// peak plus the margin, which makes room for a second job.
func TestMeasuredJobIsChargedItsPeak(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	node := f.node("n1", "h100-sxm-80gb", 8)
	// 9 kW: 4.6 kW host + 8 x 70 W idle + 4 x 630 W for the first job
	// (7.68 kW); a second 4-GPU job needs 2.52 kW more.
	if _, err := f.srv.PutRack(ctx, f.admin, api.PutRackRequest{Rack: gpufleet.Rack{Name: "r1", PowerBudgetWatts: 9000, Nodes: []string{"n1"}}}); err != nil {
		t.Fatal(err)
	}
	first := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4}})
	f.cycle()
	hb, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if err != nil || len(hb.Start) != 1 {
		t.Fatalf("starts %+v, %v: want the first job", hb.Start, err)
	}
	run := api.AttemptReport{AttemptID: hb.Start[0].AttemptID, JobID: first.ID, State: gpufleet.AttemptRunning}
	var samples []api.GPUSample
	for _, u := range hb.Start[0].GPUs {
		w := 300.0
		samples = append(samples, api.GPUSample{UUID: u, PowerWatts: &w})
	}
	beat := func() {
		if _, err := f.srv.Heartbeat(ctx, node, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: []api.AttemptReport{run}, Samples: samples}); err != nil {
			t.Fatal(err)
		}
	}
	beat()
	second := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4}})
	f.clk.Advance(time.Second)
	f.cycle()
	if q := f.job(second.ID).Queue; q == nil || q.ReasonCode != scheduler.ReasonRackPower {
		t.Fatalf("second job's queue entry %+v: want rack_power while the first is unmeasured (charged 700 W a GPU)", q)
	}
	// Past the settle time the readings count: 4 x 330 W (300 W + 10 %).
	for range 3 {
		f.clk.Advance(time.Minute)
		beat()
	}
	f.cycle()
	if q := f.job(second.ID).Queue; q != nil {
		t.Fatalf("second job still queued (%s): want it started once the first was measured", q.Reason)
	}
}

// TestRackMembersAreTheRacksLists: a rack's nodes list alone says which
// nodes it holds. A node's rack label lists it once, at its first
// registration or when its rack is created, and only where no rack lists
// it; taking a node off a list takes it out of the rack, label or not.
func TestRackMembersAreTheRacksLists(t *testing.T) {
	type step func(f *fixture)
	put := func(name string, nodes ...string) step {
		return func(f *fixture) {
			f.t.Helper()
			if _, err := f.srv.PutRack(f.t.Context(), f.admin, api.PutRackRequest{Rack: gpufleet.Rack{Name: name, PowerBudgetWatts: 100000, Nodes: nodes}}); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	register := func(node, rack string) step {
		return func(f *fixture) {
			f.t.Helper()
			labels := map[string]string{}
			if rack != "" {
				labels[gpufleet.RackLabel] = rack
			}
			if f.creds == nil {
				f.creds = map[string]string{}
			}
			if f.creds[node] == "" {
				f.creds[node] = f.registerLabelled(node, "l4", 1, labels)
				return
			}
			// Its agent restarts: it shows its credential.
			jt, err := f.srv.CreateJoinToken(f.t.Context(), f.admin, api.JoinTokenRequest{})
			if err != nil {
				f.t.Fatal(err)
			}
			gpus := []gpufleet.NodeGPU{{UUID: "GPU-" + node + "-a", Model: "l4", MemoryBytes: 24 << 30, State: gpufleet.NodeReady, Health: gpufleet.Healthy}}
			resp, err := f.srv.Register(f.t.Context(), jt.Token, api.RegisterRequest{ProtocolVersion: 1, Node: node, GPUs: gpus, Labels: labels,
				Versions: map[string]string{"driver": "580.65"}, Credential: f.creds[node]})
			if err != nil {
				f.t.Fatal(err)
			}
			f.creds[node] = resp.Credential
		}
	}
	for name, tc := range map[string]struct {
		steps       []step
		wantMembers map[string][]string
		wantEvent   string // a node's event kind, when one is due
	}{
		"a node's first registration lists it in the rack its label names": {
			steps:       []step{put("r1"), register("n1", "r1")},
			wantMembers: map[string][]string{"r1": {"n1"}},
		},
		"a rack created lists the nodes labelled with its name": {
			steps:       []step{register("n1", "r1"), register("n2", "r2"), put("r1")},
			wantMembers: map[string][]string{"r1": {"n1"}},
		},
		"a node taken off its rack's list leaves the rack, whatever its label": {
			steps:       []step{register("n1", "r1"), put("r1"), put("r1", "n2")},
			wantMembers: map[string][]string{"r1": nil},
		},
		"a later registration leaves the lists alone": {
			steps:       []step{register("n1", "r1"), put("r1"), put("r1"), register("n1", "r1")},
			wantMembers: map[string][]string{"r1": nil},
		},
		"a label never takes a node from the rack that lists it": {
			steps:       []step{put("r1", "n1"), put("r2"), register("n1", "r2")},
			wantMembers: map[string][]string{"r1": {"n1"}, "r2": nil},
			wantEvent:   "node.rack_label_ignored",
		},
		"a node listed elsewhere does not join the rack its label names when that rack is created": {
			steps:       []step{register("n1", "r1"), put("r2", "n1"), put("r1")},
			wantMembers: map[string][]string{"r1": nil, "r2": {"n1"}},
		},
		"a label naming no rack lists nothing": {
			steps:       []step{register("n1", "r9"), put("r1")},
			wantMembers: map[string][]string{"r1": nil},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			for _, s := range tc.steps {
				s(f)
			}
			racks, err := f.srv.Racks(t.Context(), f.admin)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, r := range racks {
				got[r.Name] = r.Members
			}
			if diff := cmp.Diff(tc.wantMembers, got); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
			// The scheduler sees the same racks.
			nodes, err := f.st.Nodes(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			in, _, err := f.srv.snapshot(t.Context(), f.clk.Now(), nil, nodes)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range in.Nodes {
				want := ""
				for r, ms := range tc.wantMembers {
					if slices.Contains(ms, n.Name) {
						want = r
					}
				}
				if n.Rack != want {
					t.Errorf("the scheduler puts %s in rack %q, want %q", n.Name, n.Rack, want)
				}
			}
			evs, err := f.st.Events(t.Context(), store.EventFilter{Object: "n1"})
			if err != nil {
				t.Fatal(err)
			}
			if has := slices.ContainsFunc(evs, func(e gpufleet.Event) bool { return e.Kind == tc.wantEvent }); tc.wantEvent != "" && !has {
				t.Errorf("events of n1 %+v, want a %s", evs, tc.wantEvent)
			}
		})
	}
}

// TestRackChangeNeedsForce: a rack PUT that takes a node from another
// rack, or that leaves the rack's projected draw over its budget (an
// idle H100 node draws 5.16 kW: 4.6 kW of host and 8 x 70 W), is refused
// with 422 naming the nodes, the draw and the budget, and changes
// nothing; with "force": true it is made, and an event records what was
// forced.
func TestRackChangeNeedsForce(t *testing.T) {
	for name, tc := range map[string]struct {
		path, body string
		wantStatus int
		wantErr    string              // in the error message
		wantLists  map[string][]string // every rack's nodes afterwards
		wantEvent  string              // in the rack.forced event's detail; "" for none
	}{
		"a move from another rack is refused": {
			path: "/api/v1/racks/r3", body: `{"power_budget_watts":100000,"nodes":["h1"]}`,
			wantStatus: 422, wantErr: `rack "r3": it moves node "h1" from rack "r2": pass --force (gpufleet racks set r3 ... --force) or "force": true`,
			wantLists: map[string][]string{"r2": {"h1"}},
		},
		"a forced move is made and recorded": {
			path: "/api/v1/racks/r3", body: `{"power_budget_watts":100000,"nodes":["h1"],"force":true}`,
			wantStatus: 200, wantLists: map[string][]string{"r2": {}, "r3": {"h1"}}, wantEvent: `forced: it moves node "h1" from rack "r2"`,
		},
		"an H100 node put in a 1 W rack is refused": {
			path: "/api/v1/racks/r9", body: `{"power_budget_watts":1,"nodes":["h2"]}`,
			wantStatus: 422, wantErr: `rack "r9": its projected draw, 5.16kW, would be over its 1W budget: pass --force`,
			wantLists: map[string][]string{"r2": {"h1"}},
		},
		"a move over the budget names both": {
			path: "/api/v1/racks/r9", body: `{"power_budget_watts":1,"nodes":["h1","h2"]}`,
			wantStatus: 422, wantErr: `it moves node "h1" from rack "r2"; its projected draw, 10.32kW, would be over its 1W budget`,
			wantLists: map[string][]string{"r2": {"h1"}},
		},
		"a budget cut under the draw is refused": {
			path: "/api/v1/racks/r2", body: `{"power_budget_watts":"5kW","nodes":["h1"]}`,
			wantStatus: 422, wantErr: "its projected draw, 5.16kW, would be over its 5kW budget",
			wantLists: map[string][]string{"r2": {"h1"}},
		},
		"a forced rack over its budget is made and recorded": {
			path: "/api/v1/racks/r9", body: `{"power_budget_watts":1,"nodes":["h2"],"force":true}`,
			wantStatus: 200, wantLists: map[string][]string{"r2": {"h1"}, "r9": {"h2"}}, wantEvent: "forced: its projected draw, 5.16kW, would be over its 1W budget",
		},
		"a change that moves nothing and stays under the budget needs no force": {
			path: "/api/v1/racks/r2", body: `{"power_budget_watts":"17.3kW","nodes":["h1","h2"]}`,
			wantStatus: 200, wantLists: map[string][]string{"r2": {"h1", "h2"}},
		},
		"a rack without a budget is never over it": {
			path: "/api/v1/racks/r0", body: `{"power_budget_watts":0,"nodes":["h2"]}`,
			wantStatus: 200, wantLists: map[string][]string{"r0": {"h2"}, "r2": {"h1"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			ctx := t.Context()
			f.registerLabelled("h1", "h100-sxm-80gb", 8, nil)
			f.registerLabelled("h2", "h100-sxm-80gb", 8, nil)
			if _, err := f.srv.PutRack(ctx, f.admin, api.PutRackRequest{Rack: gpufleet.Rack{Name: "r2", PowerBudgetWatts: 100000, Nodes: []string{"h1"}}}); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(api.NewHandler(f.srv, f.srv, f.srv, f.srv, api.HandlerOptions{}))
			defer srv.Close()
			status, raw, eb := callAPI(t, srv, "PUT", tc.path, testAdmin, "", tc.body)
			if status != tc.wantStatus || !strings.Contains(eb.Error, tc.wantErr) {
				t.Fatalf("PUT %s: %d %s, want %d naming %q", tc.path, status, raw, tc.wantStatus, tc.wantErr)
			}
			racks, err := f.srv.Racks(ctx, f.admin)
			if err != nil {
				t.Fatal(err)
			}
			lists := map[string][]string{}
			for _, r := range racks {
				lists[r.Name] = r.Nodes
			}
			if diff := cmp.Diff(tc.wantLists, lists); diff != "" {
				t.Errorf("racks' nodes (-want +got):\n%s", diff)
			}
			rack := strings.TrimPrefix(tc.path, "/api/v1/racks/")
			evs, err := f.st.Events(ctx, store.EventFilter{Object: rack})
			if err != nil {
				t.Fatal(err)
			}
			var forced []string
			for _, e := range evs {
				if e.Kind == "rack.forced" {
					forced = append(forced, e.Detail)
				}
			}
			switch {
			case tc.wantEvent == "" && len(forced) > 0:
				t.Errorf("rack.forced events %q, want none", forced)
			case tc.wantEvent != "" && (len(forced) != 1 || !strings.Contains(forced[0], tc.wantEvent)):
				t.Errorf("rack.forced events %q, want one naming %q", forced, tc.wantEvent)
			}
		})
	}
}

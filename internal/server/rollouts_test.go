package server

import (
	"database/sql"
	"errors"
	"log/slog"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/rollout"
)

// fakeAgents heartbeat for their nodes and carry out update orders as a
// simulated agent does: once per key, taking the order's versions.
type fakeAgents struct {
	t        *testing.T
	f        *fixture
	nodes    map[string]api.Principal
	versions map[string]map[string]string
	ran      map[string]int // update keys carried out
	results  map[string][]api.UpdateResult
	checks   map[string][]api.ValidationResult
}

func (a *fakeAgents) beat() {
	a.t.Helper()
	for name, p := range a.nodes {
		req := api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Updates: a.results[name], Validations: a.checks[name]}
		resp, err := a.f.srv.Heartbeat(a.t.Context(), p, req)
		if err != nil {
			a.t.Fatal(err)
		}
		a.results[name], a.checks[name] = nil, nil
		for _, o := range resp.Validate { // the return-to-service check passes
			a.checks[name] = append(a.checks[name], api.ValidationResult{ID: o.ID, Passed: true, Detail: "all checks passed"})
		}
		for _, o := range resp.Update {
			a.ran[o.Key]++
			if a.ran[o.Key] > 1 {
				continue // an agent runs an order once
			}
			// As a simulated agent: the order's versions, and of the
			// rest only what NVML and the host report (user-level
			// software is what the order installs).
			v := maps.Clone(o.Versions)
			for k, x := range a.versions[name] {
				if _, named := v[k]; !named && !slices.Contains([]string{"cuda_toolkit", "cudnn", "nccl", "torch", "fabric_manager"}, k) {
					v[k] = x
				}
			}
			a.versions[name] = v
			a.results[name] = append(a.results[name], api.UpdateResult{Key: o.Key, OK: true, Detail: "updated", Versions: v})
		}
	}
}

// TestRolloutThroughTheServer: a rollout of a good stack goes through the
// canary and a wave with every node updated once, even across a server
// restart mid-wave (a new Server on the same store resumes it); a bad
// stack (a toolkit the L4s cannot run) halts at the canary with the other
// nodes untouched; rollback returns the canary.
func TestRolloutThroughTheServer(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	old := map[string]string{"driver": "550.54.15", "cuda": "12.4"}
	agents := &fakeAgents{t: t, f: f, nodes: map[string]api.Principal{}, versions: map[string]map[string]string{},
		ran: map[string]int{}, results: map[string][]api.UpdateResult{}, checks: map[string][]api.ValidationResult{}}
	for _, n := range []string{"l1", "l2", "l3"} {
		agents.nodes[n] = f.registerVersions(n, "l4", old)
		agents.versions[n] = maps.Clone(old)
	}
	if _, err := f.srv.CreateStack(ctx, f.admin, api.CreateStackRequest{Stack: gpufleet.Stack{Name: "prod-555", Versions: map[string]string{"driver": "555.42.02", "cuda": "12.5"}}}); err != nil {
		t.Fatal(err)
	}
	a := f.team("team-a", nil)
	if _, err := f.srv.StartRollout(ctx, a, api.RolloutRequest{Stack: "prod-555", GPUModel: "l4", Canary: 1}); err == nil {
		t.Fatal("a member started a rollout")
	}
	bake := 20.0
	r, err := f.srv.StartRollout(ctx, f.admin, api.RolloutRequest{Stack: "prod-555", GPUModel: "l4", Canary: 1, Waves: []float64{1}, MaxUnavailable: 1, BakeS: &bake})
	if err != nil || len(r.Nodes) != 3 || r.Nodes[0].Name != "l1" || r.Nodes[0].Wave != 0 {
		t.Fatalf("started %+v, %v", r, err)
	}
	step := func() {
		f.clk.Advance(2 * time.Second)
		f.cycle()
		agents.beat()
	}
	for i := range 200 {
		step()
		if i == 20 {
			// kill -9 of the server: a new one over the same store.
			srv, err := New(ctx, f.srv.cfg, f.st, catalog.Default(), testAdmin, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			f.srv = srv
			f.clk.Advance(10 * time.Second) // the old lease runs out
		}
		if r, _ = f.srv.Rollout(ctx, f.admin, r.ID); r.State != rollout.Running {
			break
		}
	}
	if r.State != rollout.Done {
		t.Fatalf("rollout %s (%s): %+v", r.State, r.Reason, r.Nodes)
	}
	for k, n := range agents.ran {
		if n > 1 {
			// An order may be repeated (the agent keeps the key); the
			// node was updated once.
			t.Logf("order %s repeated %d times, carried out once", k, n)
		}
	}
	if len(agents.ran) != 3 {
		t.Errorf("update orders %v, want one per node", agents.ran)
	}
	nodes, _ := f.srv.Nodes(ctx, f.admin)
	for _, n := range nodes {
		if n.Versions["driver"] != "555.42.02" || n.State != gpufleet.NodeReady {
			t.Errorf("%s: %s on %s; want back in service on the stack", n.Name, n.State, n.Versions["driver"])
		}
	}

	// A stack the L4s cannot run (CUDA toolkit 11.7 on Ada, sm_89) is
	// refused at create, where it works on none of the fleet's models,
	// and at rollout start, before any node is touched; forced, it halts
	// at the canary.
	badStack := gpufleet.Stack{Name: "bad", Versions: map[string]string{"driver": "560.28.03", "cuda": "12.6", "cuda_toolkit": "11.7"}}
	if _, err := f.srv.CreateStack(ctx, f.admin, api.CreateStackRequest{Stack: badStack}); !errors.Is(err, gpufleet.ErrUnsatisfiable) || !strings.Contains(err.Error(), "l4") {
		t.Fatalf("create of a stack no GPU model of the fleet can run: %v", err)
	}
	created, err := f.srv.CreateStack(ctx, f.admin, api.CreateStackRequest{Stack: badStack, Force: true})
	if err != nil || len(created.Incompatible) == 0 || !strings.Contains(created.Incompatible[0], "CUDA toolkit 11.7 cannot run on Ada") {
		t.Fatalf("forced create: %v, incompatible %q", err, created.Incompatible)
	}
	_, err = f.srv.StartRollout(ctx, f.admin, api.RolloutRequest{Stack: "bad", GPUModel: "l4", Canary: 1, BakeS: &bake})
	if !errors.Is(err, gpufleet.ErrUnsatisfiable) || !strings.Contains(err.Error(), "cannot work on 3 of the 3 targeted nodes") || !strings.Contains(err.Error(), "l1, l2, l3") {
		t.Fatalf("rollout start of a stack the rules refuse: %v", err)
	}
	if all, _ := f.srv.Rollouts(ctx, f.admin); len(all) != 1 {
		t.Fatalf("%d rollouts after the refusal, want the first one only", len(all))
	}
	nodes, _ = f.srv.Nodes(ctx, f.admin)
	for _, n := range nodes {
		if n.State != gpufleet.NodeReady {
			t.Fatalf("%s is %s after a refused rollout", n.Name, n.State)
		}
	}
	r, err = f.srv.StartRollout(ctx, f.admin, api.RolloutRequest{Stack: "bad", GPUModel: "l4", Canary: 1, BakeS: &bake, Force: true})
	if err != nil || len(r.Warnings) != 1 {
		t.Fatalf("forced start: %v, warnings %q", err, r.Warnings)
	}
	for range 100 {
		step()
		if r, _ = f.srv.Rollout(ctx, f.admin, r.ID); r.State != rollout.Running {
			break
		}
	}
	if r.State != rollout.Halted || !strings.Contains(r.Reason, "node l1 failed a gate: validation: CUDA toolkit 11.7 cannot run on Ada") {
		t.Fatalf("rollout %s (%s)", r.State, r.Reason)
	}
	rec := httptest.NewRecorder()
	f.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`gpufleet_rollout_nodes{phase="failed",rollout="` + r.ID + `",stack="bad",state="halted"} 1`,
		`gpufleet_rollout_nodes{phase="pending",rollout="` + r.ID + `",stack="bad",state="halted"} 2`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	nodes, _ = f.srv.Nodes(ctx, f.admin)
	for _, n := range nodes {
		switch {
		case n.Name == "l1" && n.State != gpufleet.NodeCordoned:
			t.Errorf("the failed canary is %s, want kept out of service", n.State)
		case n.Name != "l1" && (n.State != gpufleet.NodeReady || n.Versions["driver"] != "555.42.02"):
			t.Errorf("%s touched: %s on %s", n.Name, n.State, n.Versions["driver"])
		}
	}
	if r, err = f.srv.RolloutAction(ctx, f.admin, r.ID, "rollback"); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		step()
		if r, _ = f.srv.Rollout(ctx, f.admin, r.ID); r.State != rollout.RollingBack {
			break
		}
	}
	n, _ := f.srv.Node(ctx, f.admin, "l1")
	if r.State != rollout.RolledBack || n.Versions["driver"] != "555.42.02" || n.Versions["cuda_toolkit"] != "" || n.State != gpufleet.NodeReady {
		t.Errorf("rolled back %s; l1 %s on %v", r.State, n.State, n.Versions)
	}
}

// TestRolloutKeepsTheProductionSpare: a node whose drain would leave fewer
// free GPUs than the production spare waits, saying why, and goes once the
// spare allows it.
func TestRolloutKeepsTheProductionSpare(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	old := map[string]string{"driver": "550.54.15", "cuda": "12.4"}
	agents := &fakeAgents{t: t, f: f, nodes: map[string]api.Principal{}, versions: map[string]map[string]string{},
		ran: map[string]int{}, results: map[string][]api.UpdateResult{}, checks: map[string][]api.ValidationResult{}}
	for _, n := range []string{"l1", "l2"} {
		agents.nodes[n] = f.registerVersions(n, "l4", old)
		agents.versions[n] = maps.Clone(old)
	}
	f.srv.cfg.Spare = map[string]int{"l4": 9} // 16 free: taking either node out leaves 8
	if _, err := f.srv.CreateStack(ctx, f.admin, api.CreateStackRequest{Stack: gpufleet.Stack{Name: "prod-555", Versions: map[string]string{"driver": "555.42.02", "cuda": "12.5"}}}); err != nil {
		t.Fatal(err)
	}
	bake := 10.0
	r, err := f.srv.StartRollout(ctx, f.admin, api.RolloutRequest{Stack: "prod-555", GPUModel: "l4", Canary: 1, BakeS: &bake})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		f.clk.Advance(2 * time.Second)
		f.cycle()
		agents.beat()
	}
	r, _ = f.srv.Rollout(ctx, f.admin, r.ID)
	if r.Nodes[0].Phase != rollout.Pending || !strings.Contains(r.Nodes[0].Waiting, "under the production spare of 9") {
		t.Fatalf("the canary %+v; want it waiting for the spare", r.Nodes[0])
	}
	f.srv.cfg.Spare = map[string]int{"l4": 8}
	for range 100 {
		f.clk.Advance(2 * time.Second)
		f.cycle()
		agents.beat()
		if r, _ = f.srv.Rollout(ctx, f.admin, r.ID); r.State != rollout.Running {
			break
		}
	}
	if r.State != rollout.Done {
		t.Errorf("rollout %s (%s) %+v", r.State, r.Reason, r.Nodes)
	}
}

// TestUnreadableRolloutHaltsAlone: a stored rollout whose state no longer
// parses reads as halted, saying so, and the leader goes on scheduling.
func TestUnreadableRolloutHaltsAlone(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	old := map[string]string{"driver": "550.54.15", "cuda": "12.4"}
	f.registerVersions("l1", "l4", old)
	f.registerVersions("l2", "l4", old)
	if _, err := f.srv.CreateStack(ctx, f.admin, api.CreateStackRequest{Stack: gpufleet.Stack{Name: "prod-555", Versions: map[string]string{"driver": "555.42.02", "cuda": "12.5"}}}); err != nil {
		t.Fatal(err)
	}
	r, err := f.srv.StartRollout(ctx, f.admin, api.RolloutRequest{Stack: "prod-555", GPUModel: "l4", Canary: 1})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", f.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE rollouts SET body = '{"id":' WHERE id = ?`, r.ID); err != nil {
		t.Fatal(err)
	}
	j := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}})
	f.cycle()
	if j = f.job(j.ID); j.State != gpufleet.JobScheduled {
		t.Errorf("job %s, want scheduled past the unreadable rollout", j.State)
	}
	got, err := f.srv.Rollout(ctx, f.admin, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != rollout.Halted || !strings.Contains(got.Reason, "stored state unreadable") {
		t.Errorf("rollout %s (%s), want halted as unreadable", got.State, got.Reason)
	}
}

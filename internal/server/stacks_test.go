package server

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

// registerVersions registers an 8-GPU node reporting versions and
// returns its principal.
func (f *fixture) registerVersions(name, model string, versions map[string]string) api.Principal {
	f.t.Helper()
	jt, err := f.srv.CreateJoinToken(f.t.Context(), f.admin, api.JoinTokenRequest{})
	if err != nil {
		f.t.Fatal(err)
	}
	var gpus []gpufleet.NodeGPU
	for i := range 8 {
		gpus = append(gpus, gpufleet.NodeGPU{Index: i, UUID: "GPU-" + name + "-" + string(rune('a'+i)), Model: model,
			MemoryBytes: 80 << 30, NVLinkDomain: name + "-nvl", State: gpufleet.NodeReady, Health: gpufleet.Healthy})
	}
	// Registering again, the node shows its credential (a restart).
	resp, err := f.srv.Register(f.t.Context(), jt.Token, api.RegisterRequest{ProtocolVersion: 1, Node: name, GPUs: gpus, Versions: versions,
		Credential: f.creds[name]})
	if err != nil {
		f.t.Fatal(err)
	}
	if f.creds == nil {
		f.creds = map[string]string{}
	}
	f.creds[name] = resp.Credential
	p, err := f.srv.Authenticate(f.t.Context(), resp.Credential)
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// TestStacks walks a stack through its life on the server: recorded by an
// admin only, validated for H100 by the H100 nodes that run it, refused
// for a model none runs; a node off the validated stack drifts (degraded,
// in nodes and /metrics); jobs that require the stack land on its nodes,
// one that no node meets is refused as stack_mismatch; a retired stack
// matches no job.
func TestStacks(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("team-a", nil)
	on := map[string]string{"driver": "550.54.15", "cuda": "12.4", "vbios": "96.00.89.00.01"}
	h1 := f.registerVersions("h1", "h100-sxm-80gb", on)
	h2 := f.registerVersions("h2", "h100-sxm-80gb", on)
	h3 := f.registerVersions("h3", "h100-sxm-80gb", map[string]string{"driver": "535.104.05", "cuda": "12.2"})
	beat := func() {
		f.cycle()
		for _, n := range []api.Principal{h1, h2, h3} {
			if _, err := f.srv.Heartbeat(ctx, n, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion}); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := gpufleet.Stack{Name: "prod-550", Versions: map[string]string{"driver": "550.54.15", "cuda": "12.4"}}
	if _, err := f.srv.CreateStack(ctx, a, api.CreateStackRequest{Stack: st}); !errors.Is(err, api.ErrForbidden) {
		t.Fatalf("a member created a stack: %v", err)
	}
	got, err := f.srv.CreateStack(ctx, f.admin, api.CreateStackRequest{Stack: st})
	if err != nil || got.State != gpufleet.StackCandidate || strings.Join(got.Nodes, ",") != "h1,h2" {
		t.Fatalf("created %+v, %v; want a candidate that h1 and h2 run", got, err)
	}
	if _, err := f.srv.ValidateStack(ctx, f.admin, "prod-550", "a100-sxm-80gb", 0); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "no node of a100-sxm-80gb runs it") {
		t.Errorf("validated for a model no node runs: %v", err)
	}
	beat()
	if _, err := f.srv.ValidateStack(ctx, f.admin, "prod-550", "h100-sxm-80gb", 30*time.Minute); !errors.Is(err, gpufleet.ErrInvalid) ||
		!strings.Contains(err.Error(), "h1 has run it healthy for 0s of the 30m0s bake") {
		t.Errorf("validated before the bake: %v", err)
	}
	for range 31 * 30 { // a beat every 2 s, inside the 3 s grace
		f.clk.Advance(2 * time.Second)
		beat()
	}
	got, err = f.srv.ValidateStack(ctx, f.admin, "prod-550", "h100-sxm-80gb", 30*time.Minute)
	if err != nil || got.State != gpufleet.StackValidated || len(got.Validated) != 1 || strings.Join(got.Validated[0].Nodes, ",") != "h1,h2" ||
		got.Validated[0].ApprovedBy == "" || !strings.Contains(got.Validated[0].Evidence, "healthy on it for at least 30m0s") {
		t.Fatalf("validated %+v, %v; want evidence from h1 and h2", got, err)
	}

	nodes, err := f.srv.Nodes(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		drifted := n.Health == gpufleet.Degraded && strings.Contains(n.HealthReason, "runs no stack validated for h100-sxm-80gb (validated: prod-550)")
		if drifted != (n.Name == "h3") {
			t.Errorf("node %s: health %s (%s); only h3 drifts", n.Name, n.Health, n.HealthReason)
		}
	}
	rec := httptest.NewRecorder()
	f.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`gpufleet_node_stack_drift{node="h3"} 1`, `gpufleet_node_stack_drift{node="h1"} 0`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	check, err := f.srv.StackCheck(ctx, a)
	if err != nil || len(check) != 3 || strings.Join(check[0].Stacks, ",") != "prod-550" {
		t.Errorf("stack check %+v, %v", check, err)
	}

	job := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8, Stack: "prod-550"}})
	other := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8, Stack: "prod-550"}})
	f.cycle()
	for _, id := range []string{job.ID, other.ID} {
		j := f.job(id)
		if len(j.Attempts) != 1 || (j.Attempts[0].Node != "h1" && j.Attempts[0].Node != "h2") {
			t.Errorf("job %s on %+v; want h1 or h2", id, j.Attempts)
		}
	}
	_, err = f.srv.SubmitJob(ctx, a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, Requires: map[string]string{"cuda": ">=12.8"}}, Command: []string{"x"}})
	if !errors.Is(err, gpufleet.ErrUnsatisfiable) || !strings.Contains(err.Error(), scheduler.ReasonStackMismatch) || !strings.Contains(err.Error(), "cuda >=12.8") {
		t.Errorf("a job no node meets: %v; want a 422 naming stack_mismatch and the constraint", err)
	}
	var refused *gpufleet.ExplainedError
	if !errors.As(err, &refused) || refused.Explanation.Stack == nil || refused.Explanation.Stack.Node == "" ||
		!strings.HasPrefix(refused.Explanation.Stack.Unmet, "cuda >=12.8") {
		t.Errorf("a job no node meets: explanation %+v; want the first node and what it lacks as data", refused)
	}
	if err := f.srv.RetireStack(ctx, f.admin, "prod-550"); err != nil {
		t.Fatal(err)
	}
	_, err = f.srv.SubmitJob(ctx, a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, Stack: "prod-550"}, Command: []string{"x"}})
	if !errors.Is(err, gpufleet.ErrUnsatisfiable) || !strings.Contains(err.Error(), `no stack named "prod-550"`) {
		t.Errorf("a job on a retired stack: %v", err)
	}
	if want := (&gpufleet.StackMismatch{Stack: "prod-550", Unknown: true}); !errors.As(err, &refused) || !cmp.Equal(refused.Explanation.Stack, want) {
		t.Errorf("a job on a retired stack: explanation %+v; want stack %+v", refused, want)
	}
}

// TestVersionChangeIsAnEvent: a node that registers again with other
// versions records which changed, and a stack's bake starts over there.
func TestVersionChangeIsAnEvent(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	f.registerVersions("h1", "h100-sxm-80gb", map[string]string{"driver": "535.104.05", "cuda": "12.2", "agent": "v1"})
	f.clk.Advance(time.Hour)
	f.cycle()
	f.clk.Advance(time.Minute) // the leader's grace for nodes it never heard from
	f.cycle()
	f.registerVersions("h1", "h100-sxm-80gb", map[string]string{"driver": "550.54.15", "cuda": "12.2", "agent": "v2"})
	evs, err := f.st.Events(ctx, store.EventFilter{Object: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	var details []string
	for _, e := range evs {
		if e.Kind == "node.versions" {
			details = append(details, e.Detail)
		}
	}
	if len(details) != 1 || details[0] != "driver 535.104.05 -> 550.54.15" {
		t.Fatalf("node.versions events %q, want the driver change alone", details)
	}
	since, err := f.srv.settledSince(ctx, "h1")
	if err != nil || !since.Equal(f.clk.Now().UTC()) {
		t.Errorf("settled since %v, %v; want the re-registration", since, err)
	}
}

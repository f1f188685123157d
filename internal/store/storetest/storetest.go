// Package storetest is the conformance suite every store.Store passes:
// each dialect's test calls Run with a function that opens a fresh, empty
// store. The suite checks the contracts the server relies on (job and
// attempt state machines, fencing, idempotent submission, pagination,
// tokens, nodes, events, usage) and that concurrent submitters and readers
// get no errors.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/rollout"
	"github.com/gpufleet/gpufleet/internal/store"
)

// T0 is the suite's reference time; tests pass times explicitly.
var T0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// Run runs the suite. open returns a new empty store, closed by the
// caller's cleanup (open should register it with t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := map[string]func(t *testing.T, s store.Store){
		"teams":                            testTeams,
		"classes":                          testClasses,
		"racks":                            testRacks,
		"stacks":                           testStacks,
		"rollouts":                         testRollouts,
		"bench results and workloads":      testBench,
		"tokens":                           testTokens,
		"join tokens":                      testJoinTokens,
		"node credentials":                 testNodeCredentials,
		"nodes keep state on re-register":  testNodes,
		"node health":                      testNodeHealth,
		"submit stores every field":        testSubmitFields,
		"submit ids are in order":          testSubmitOrder,
		"submit is idempotent":             testSubmitIdempotent,
		"submit rejects bad jobs alone":    testSubmitInvalid,
		"list jobs pages and filters":      testListJobs,
		"lease":                            testLease,
		"schedule is fenced":               testFenced,
		"every leader write is fenced":     testFencedWrites,
		"a batch commits all or nothing":   testBatch,
		"schedule starts attempts":         testScheduleStart,
		"schedule with a stale start":      testScheduleStale,
		"schedule stores the queue":        testQueue,
		"schedule stops attempts":          testScheduleStop,
		"attempt transitions":              testTransitions,
		"terminal attempts are immutable":  testTerminalImmutable,
		"attempt accounting totals":        testAccounting,
		"cancel":                           testCancel,
		"import history":                   testImportHistory,
		"stops end or requeue":             testStopEffects,
		"active jobs":                      testActiveJobs,
		"node attempts":                    testNodeAttempts,
		"multi-node attempts end together": testRanks,
		"work per attempt and history":     testWork,
		"finished runs for the estimates":  testRuns,
		"events record every transition":   testEventsFlow,
		"events filter and page":           testEventsFilter,
		"usage aggregates by day":          testUsage,
		"rollups add up and prune":         testRollups,
		"concurrent submitters and reader": testConcurrent,
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) { fn(t, open(t)) })
	}
}

// equateEmpty treats nil and empty slices and maps alike.
var equateEmpty = cmpopts.EquateEmpty()

// wantErr fails unless err wraps target (nil: no error).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	switch {
	case target == nil && err != nil:
		t.Fatalf("%s: %v", what, err)
	case target != nil && !errors.Is(err, target):
		t.Fatalf("%s: error %v, want one wrapping %v", what, err, target)
	}
}

// newJob is a small valid job of team with request id rid.
func newJob(team, name, rid string) gpufleet.Job {
	return gpufleet.Job{
		Team: team, Name: name, RequestID: rid, Priority: "batch",
		Resources:   gpufleet.Resources{GPUs: 1},
		Command:     []string{"sleep", "1"},
		SubmittedAt: T0,
	}
}

// submit stores jobs and returns them as stored.
func submit(t *testing.T, s store.Store, jobs ...gpufleet.Job) []gpufleet.Job {
	t.Helper()
	res, err := s.SubmitJobs(t.Context(), jobs, "tester")
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	out := make([]gpufleet.Job, len(res))
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("submit %d: %v", i, r.Err)
		}
		out[i] = r.Job
	}
	return out
}

// lead takes the lease and returns its epoch.
func lead(t *testing.T, s store.Store) int64 {
	t.Helper()
	l, held, err := s.TryLease(t.Context(), "leader-1", time.Hour)
	if err != nil || !held {
		t.Fatalf("take lease: held %v, %v", held, err)
	}
	return l.Epoch
}

// place starts job on node (one GPU) and returns the attempt id.
func place(t *testing.T, s store.Store, epoch int64, jobID, node string) string {
	t.Helper()
	d := store.Decision{At: T0.Add(time.Minute), Starts: []store.Start{{
		JobID: jobID, Nodes: []gpufleet.AttemptNode{{Name: node, GPUs: []string{node + "-gpu0"}}}, Fraction: 1,
	}}}
	if err := s.ApplySchedule(t.Context(), epoch, d); err != nil {
		t.Fatalf("place %s: %v", jobID, err)
	}
	j := getJob(t, s, jobID)
	return j.Attempts[len(j.Attempts)-1].ID
}

func getJob(t *testing.T, s store.Store, id string) gpufleet.Job {
	t.Helper()
	j, err := s.Job(t.Context(), id)
	if err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	return j
}

func getNode(t *testing.T, s store.Store, name string) gpufleet.Node {
	t.Helper()
	n, err := s.Node(t.Context(), name)
	if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	return n
}

func update(t *testing.T, s store.Store, attempt string, state gpufleet.AttemptState) gpufleet.Job {
	t.Helper()
	j, err := s.UpdateAttempt(t.Context(), store.AttemptUpdate{AttemptID: attempt, State: state, At: T0.Add(2 * time.Minute), Actor: "agent:n1"})
	if err != nil {
		t.Fatalf("attempt %s -> %s: %v", attempt, state, err)
	}
	return j
}

func kinds(evs []gpufleet.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

func events(t *testing.T, s store.Store, f store.EventFilter) []gpufleet.Event {
	t.Helper()
	evs, err := s.Events(t.Context(), f)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	return evs
}

func testTeams(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := gpufleet.Team{Name: "team-a", Quota: map[string]int{"h100-sxm-80gb": 8}, BorrowingLimit: -1, Weight: 2,
		Mounts:       []gpufleet.MountAllow{{Path: "/datasets"}, {Path: "/scratch/team-a", ReadWrite: true}},
		RegistryAuth: map[string]gpufleet.RegistryCredential{"nvcr.io": {Username: "$oauthtoken", Password: "s3cr3t-key"}}}
	b := gpufleet.Team{Name: "team-b", Weight: 1}
	for _, tm := range []gpufleet.Team{b, a} {
		wantErr(t, "put team", s.PutTeam(ctx, tm, "admin"), nil)
	}
	// Each new team takes the next uid offset; the store lists the
	// registries it holds a login for.
	b.UIDOffset, a.UIDOffset, a.Registries = 0, 1, []string{"nvcr.io"}
	got, err := s.Team(ctx, "team-a")
	wantErr(t, "team", err, nil)
	if diff := cmp.Diff(a, got, equateEmpty); diff != "" {
		t.Errorf("team-a (-want +got):\n%s", diff)
	}
	a.Quota = map[string]int{"a100-sxm-80gb": 4}
	a.Weight = 3
	wantErr(t, "replace team", s.PutTeam(ctx, a, "admin"), nil)
	all, err := s.Teams(ctx)
	wantErr(t, "teams", err, nil)
	if diff := cmp.Diff([]gpufleet.Team{a, b}, all, equateEmpty); diff != "" {
		t.Errorf("teams (-want +got):\n%s", diff)
	}
	_, err = s.Team(ctx, "nope")
	wantErr(t, "unknown team", err, gpufleet.ErrNotFound)
	wantErr(t, "nameless team", s.PutTeam(ctx, gpufleet.Team{}, "admin"), gpufleet.ErrInvalid)
	evs := events(t, s, store.EventFilter{Object: "team-a"})
	if len(evs) != 2 || evs[0].Kind != "team.put" || evs[0].Actor != "admin" {
		t.Errorf("team-a events %+v, want two team.put by admin", evs)
	}
	for _, e := range evs {
		if strings.Contains(e.Detail, "s3cr3t") || !strings.Contains(e.Detail, "nvcr.io") {
			t.Errorf("event %q: want the registry named and its password not", e.Detail)
		}
	}
}

func testClasses(t *testing.T, s store.Store) {
	ctx := t.Context()
	want := []gpufleet.Class{{Name: "big", Models: []string{"h100-sxm-80gb", "h200-sxm-141gb"}}, {Name: "small", Models: []string{"l4"}}}
	for _, c := range []gpufleet.Class{want[1], {Name: "big", Models: []string{"a100"}}, want[0]} {
		wantErr(t, "put class", s.PutClass(ctx, c, "admin"), nil)
	}
	got, err := s.Classes(ctx)
	wantErr(t, "classes", err, nil)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
	wantErr(t, "nameless class", s.PutClass(ctx, gpufleet.Class{}, "admin"), gpufleet.ErrInvalid)
}

func testTokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	admin := store.TokenRecord{ID: "t1", Hash: []byte("hash-1"), Role: gpufleet.RoleAdmin, CreatedAt: T0}
	member := store.TokenRecord{ID: "t2", Hash: []byte("hash-2"), Team: "team-a", Role: gpufleet.RoleMember, CreatedAt: T0.Add(time.Second)}
	for _, tk := range []store.TokenRecord{admin, member} {
		wantErr(t, "create token", s.CreateToken(ctx, tk, "admin"), nil)
	}
	for name, tc := range map[string]struct {
		tok  store.TokenRecord
		want error
	}{
		"id in use":      {tok: store.TokenRecord{ID: "t1", Hash: []byte("x"), Role: gpufleet.RoleAdmin}, want: gpufleet.ErrInvalid},
		"no hash":        {tok: store.TokenRecord{ID: "t3", Role: gpufleet.RoleAdmin}, want: gpufleet.ErrInvalid},
		"unknown role":   {tok: store.TokenRecord{ID: "t4", Hash: []byte("x"), Role: "root"}, want: gpufleet.ErrInvalid},
		"member no team": {tok: store.TokenRecord{ID: "t5", Hash: []byte("x"), Role: gpufleet.RoleMember}, want: gpufleet.ErrInvalid},
	} {
		t.Run(name, func(t *testing.T) { wantErr(t, "create token", s.CreateToken(ctx, tc.tok, "admin"), tc.want) })
	}
	got, err := s.Token(ctx, "t2")
	wantErr(t, "token", err, nil)
	if diff := cmp.Diff(member, got); diff != "" {
		t.Errorf("token (-want +got):\n%s", diff)
	}
	revoked := T0.Add(time.Hour)
	wantErr(t, "revoke", s.RevokeToken(ctx, "t2", revoked, "admin"), nil)
	wantErr(t, "revoke again", s.RevokeToken(ctx, "t2", revoked.Add(time.Hour), "admin"), nil)
	wantErr(t, "revoke unknown", s.RevokeToken(ctx, "nope", revoked, "admin"), gpufleet.ErrNotFound)
	member.RevokedAt = &revoked
	all, err := s.Tokens(ctx)
	wantErr(t, "tokens", err, nil)
	if diff := cmp.Diff([]store.TokenRecord{admin, member}, all); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	_, err = s.Token(ctx, "nope")
	wantErr(t, "unknown token", err, gpufleet.ErrNotFound)
	if got := kinds(events(t, s, store.EventFilter{Object: "t2"})); !cmp.Equal(got, []string{"token.created", "token.revoked"}) {
		t.Errorf("token events %v", got)
	}
}

func testJoinTokens(t *testing.T, s store.Store) {
	ctx := t.Context()
	exp := T0.Add(time.Hour)
	for _, jt := range []store.JoinToken{
		{ID: "once", Hash: []byte("h-once"), SingleUse: true, CreatedAt: T0},
		{ID: "many", Hash: []byte("h-many"), CreatedAt: T0.Add(1)},
		{ID: "expiring", Hash: []byte("h-exp"), ExpiresAt: &exp, CreatedAt: T0.Add(2)},
		{ID: "bound", Hash: []byte("h-bound"), Node: "n1", CreatedAt: T0.Add(3)},
		{ID: "replace", Hash: []byte("h-repl"), Node: "n9", Replaces: true, CreatedAt: T0.Add(4)},
	} {
		wantErr(t, "create join token", s.CreateJoinToken(ctx, jt, "admin"), nil)
	}
	wantErr(t, "duplicate join token", s.CreateJoinToken(ctx, store.JoinToken{ID: "once", Hash: []byte("x")}, "admin"), gpufleet.ErrInvalid)
	// Steps run in order; each names token, hash, node, time and outcome.
	// n1 and n9 exist; n2, n3 do not.
	wantErr(t, "put n1", s.PutNode(ctx, testNode("n1")), nil)
	wantErr(t, "put n9", s.PutNode(ctx, testNode("n9")), nil)
	steps := []struct {
		name, id, hash, node string
		at                   time.Time
		proven               bool // the agent showed the node's credential
		want                 error
	}{
		{"unbound cannot take an existing name", "once", "h-once", "n1", T0, false, store.ErrNameInUse},
		{"single use works once", "once", "h-once", "n1", T0, true, nil},
		{"single use is then spent", "once", "h-once", "n2", T0, false, gpufleet.ErrNotFound},
		{"multi use works", "many", "h-many", "n1", T0, true, nil},
		{"multi use works again, for a new name", "many", "h-many", "n2", T0.Add(time.Minute), false, nil},
		{"wrong secret", "many", "h-wrong", "n3", T0, false, gpufleet.ErrNotFound},
		{"wrong secret for an existing name", "many", "h-wrong", "n1", T0, false, gpufleet.ErrNotFound},
		{"before expiry", "expiring", "h-exp", "n3", T0, false, nil},
		{"at expiry", "expiring", "h-exp", "n3", exp, false, gpufleet.ErrNotFound},
		{"bound to another node", "bound", "h-bound", "n2", T0, false, gpufleet.ErrNotFound},
		{"bound does not take its existing name", "bound", "h-bound", "n1", T0, false, store.ErrNameInUse},
		{"bound, with the node's credential", "bound", "h-bound", "n1", T0, true, nil},
		{"a replace token takes its name", "replace", "h-repl", "n9", T0, false, nil},
		{"unknown", "nope", "x", "n1", T0, false, gpufleet.ErrNotFound},
	}
	for _, st := range steps {
		jt, err := s.UseJoinToken(ctx, st.id, []byte(st.hash), st.node, st.at, st.proven)
		wantErr(t, st.name, err, st.want)
		if st.want == nil && (jt.UsedAt == nil || !jt.UsedAt.Equal(st.at)) {
			t.Errorf("%s: used_at %v, want %v", st.name, jt.UsedAt, st.at)
		}
	}
	all, err := s.JoinTokens(ctx)
	wantErr(t, "join tokens", err, nil)
	var ids []string
	for _, jt := range all {
		ids = append(ids, jt.ID)
	}
	if !cmp.Equal(ids, []string{"once", "many", "expiring", "bound", "replace"}) || !all[4].Replaces || all[3].Replaces {
		t.Errorf("join tokens %v", ids)
	}
	if all[1].UsedAt == nil || !all[1].UsedAt.Equal(T0.Add(time.Minute)) {
		t.Errorf("multi-use token used_at %v, want the last use", all[1].UsedAt)
	}

	// Expiring the tokens bound to a name (nodes replace): the bound one
	// stops working, the others are untouched, and a second call finds none.
	wantErr(t, "another bound token", s.CreateJoinToken(ctx, store.JoinToken{ID: "bound2", Hash: []byte("h-b2"), Node: "n1", CreatedAt: T0.Add(5)}, "admin"), nil)
	n, err := s.ExpireJoinTokens(ctx, "n1", T0.Add(2*time.Minute), "admin")
	if err != nil || n != 2 {
		t.Errorf("expire join tokens of n1: %d, %v; want 2", n, err)
	}
	_, err = s.UseJoinToken(ctx, "bound", []byte("h-bound"), "n1", T0.Add(3*time.Minute), false)
	wantErr(t, "an expired bound token", err, gpufleet.ErrNotFound)
	_, err = s.UseJoinToken(ctx, "many", []byte("h-many"), "n4", T0.Add(3*time.Minute), true)
	wantErr(t, "an unbound token after another name's expiry", err, nil)
	if n, err := s.ExpireJoinTokens(ctx, "n1", T0.Add(4*time.Minute), "admin"); err != nil || n != 0 {
		t.Errorf("expire again: %d, %v; want 0", n, err)
	}
	_, err = s.ExpireJoinTokens(ctx, "", T0, "admin")
	wantErr(t, "expire with no name", err, gpufleet.ErrInvalid)
}

func testNodeCredentials(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := store.NodeCredential{Node: "n1", Hash: []byte("a"), ExpiresAt: T0}
	wantErr(t, "put", s.PutNodeCredential(ctx, c), nil)
	c.Hash, c.ExpiresAt = []byte("b"), T0.Add(time.Hour)
	c.PrevHash, c.PrevExpiresAt = []byte("a"), T0
	wantErr(t, "renew", s.PutNodeCredential(ctx, c), nil)
	got, err := s.NodeCredential(ctx, "n1")
	wantErr(t, "read", err, nil)
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("credential (-want +got):\n%s", diff)
	}
	// A new registration replaces both.
	c = store.NodeCredential{Node: "n1", Hash: []byte("c"), ExpiresAt: T0.Add(2 * time.Hour)}
	wantErr(t, "replace", s.PutNodeCredential(ctx, c), nil)
	got, err = s.NodeCredential(ctx, "n1")
	wantErr(t, "read", err, nil)
	if diff := cmp.Diff(c, got, equateEmpty); diff != "" {
		t.Errorf("credential after replace (-want +got):\n%s", diff)
	}
	_, err = s.NodeCredential(ctx, "n2")
	wantErr(t, "unknown", err, gpufleet.ErrNotFound)
}

// testNode is a two-GPU node fixture.
func testNode(name string) gpufleet.Node {
	return gpufleet.Node{
		Name: name, MetricsURL: "http://" + name + ":9400/metrics",
		Labels:   map[string]string{"rack": "r1"},
		Versions: map[string]string{"driver": "550.54"},
		GPUs: []gpufleet.NodeGPU{
			{Index: 0, UUID: name + "-gpu0", Model: "h100-sxm-80gb", MemoryBytes: 80 << 30},
			{Index: 1, UUID: name + "-gpu1", Model: "h100-sxm-80gb", MemoryBytes: 80 << 30, MIGInstances: []gpufleet.MIGInstance{{UUID: "mig-1", Profile: "1g.10gb"}}},
		},
	}
}

func testNodes(t *testing.T, s store.Store) {
	ctx := t.Context()
	n := testNode("n2")
	wantErr(t, "put n2", s.PutNode(ctx, n), nil)
	wantErr(t, "put n1", s.PutNode(ctx, testNode("n1")), nil)
	want := n
	want.State, want.Health = gpufleet.NodeReady, gpufleet.Healthy
	for i := range want.GPUs {
		want.GPUs[i].State, want.GPUs[i].Health = gpufleet.NodeReady, gpufleet.Healthy
	}
	got, err := s.Node(ctx, "n2")
	wantErr(t, "node", err, nil)
	if diff := cmp.Diff(want, got, equateEmpty); diff != "" {
		t.Errorf("new node (-want +got):\n%s", diff)
	}

	wantErr(t, "cordon", s.SetNodeState(ctx, "n2", gpufleet.NodeCordoned, gpufleet.CauseOperator, "maintenance", "admin", T0), nil)
	wantErr(t, "cordon again", s.SetNodeState(ctx, "n2", gpufleet.NodeCordoned, gpufleet.CauseOperator, "maintenance", "admin", T0), nil)
	wantErr(t, "gpu unhealthy", s.SetNodeHealth(ctx, "n2", gpufleet.Degraded, "gpu 1 xid 79",
		[]gpufleet.NodeGPU{{UUID: "n2-gpu1", Health: gpufleet.Unhealthy, Reason: "xid 79"}}, T0), nil)
	// Re-registration with a new driver and a third GPU keeps state and health.
	n.Versions = map[string]string{"driver": "560.1"}
	n.GPUs = append(n.GPUs, gpufleet.NodeGPU{Index: 2, UUID: "n2-gpu2", Model: "h100-sxm-80gb", MemoryBytes: 80 << 30})
	wantErr(t, "re-register", s.PutNode(ctx, n), nil)
	got, err = s.Node(ctx, "n2")
	wantErr(t, "node", err, nil)
	want.Versions = n.Versions
	want.State, want.Health, want.Reason = gpufleet.NodeCordoned, gpufleet.Degraded, "gpu 1 xid 79"
	want.StateReason, want.StateCause, want.HealthReason = "maintenance", gpufleet.CauseOperator, "gpu 1 xid 79"
	want.GPUs[1].Health, want.GPUs[1].Reason = gpufleet.Unhealthy, "xid 79"
	want.GPUs = append(want.GPUs, gpufleet.NodeGPU{Index: 2, UUID: "n2-gpu2", Model: "h100-sxm-80gb", MemoryBytes: 80 << 30, State: gpufleet.NodeReady, Health: gpufleet.Healthy})
	if diff := cmp.Diff(want, got, equateEmpty); diff != "" {
		t.Errorf("re-registered node (-want +got):\n%s", diff)
	}
	all, err := s.Nodes(ctx)
	wantErr(t, "nodes", err, nil)
	if len(all) != 2 || all[0].Name != "n1" || all[1].Name != "n2" {
		t.Errorf("nodes %v, want n1, n2", all)
	}
	wantErr(t, "unknown node state", s.SetNodeState(ctx, "nope", gpufleet.NodeCordoned, gpufleet.CauseOperator, "", "admin", T0), gpufleet.ErrNotFound)
	wantErr(t, "bad state", s.SetNodeState(ctx, "n2", "asleep", gpufleet.CauseOperator, "", "admin", T0), gpufleet.ErrInvalid)
	_, err = s.Node(ctx, "nope")
	wantErr(t, "unknown node", err, gpufleet.ErrNotFound)
	wantErr(t, "uncordon", s.SetNodeState(ctx, "n2", gpufleet.NodeReady, gpufleet.CauseOperator, "", "admin", T0), nil)
	if got := kinds(events(t, s, store.EventFilter{Object: "n2"})); !cmp.Equal(got, []string{"node.registered", "node.cordoned", "node.degraded", "node.registered", "node.versions", "node.ready"}) {
		t.Errorf("node events %v", got)
	}
}

func testNodeHealth(t *testing.T, s store.Store) {
	t.Run("health state", func(t *testing.T) {
		ctx := t.Context()
		wantErr(t, "put", s.PutNode(ctx, testNode("hs1")), nil)
		got, err := s.NodeHealthState(ctx, "hs1")
		wantErr(t, "read empty", err, nil)
		if got != "" {
			t.Errorf("new node's health state %q", got)
		}
		wantErr(t, "set", s.SetNodeHealthState(ctx, "hs1", `{"active":[]}`), nil)
		got, err = s.NodeHealthState(ctx, "hs1")
		wantErr(t, "read", err, nil)
		if got != `{"active":[]}` {
			t.Errorf("health state %q", got)
		}
		wantErr(t, "unknown node", s.SetNodeHealthState(ctx, "nope", "{}"), gpufleet.ErrNotFound)
		_, err = s.NodeHealthState(ctx, "nope")
		wantErr(t, "read unknown", err, gpufleet.ErrNotFound)
		// A GPU's state changes with its reason and an event.
		wantErr(t, "drain gpu", s.SetNodeHealth(ctx, "hs1", gpufleet.Unhealthy, "gpu 0: XID 79",
			[]gpufleet.NodeGPU{{UUID: "hs1-gpu0", Health: gpufleet.Unhealthy, Reason: "XID 79", State: gpufleet.NodeDraining, StateReason: "health: fell off"}}, T0), nil)
		n, err := s.Node(ctx, "hs1")
		wantErr(t, "node", err, nil)
		if g := n.GPUs[0]; g.State != gpufleet.NodeDraining || g.StateReason != "health: fell off" || n.GPUs[1].State != gpufleet.NodeReady {
			t.Errorf("gpus after drain: %+v", n.GPUs)
		}
		evs, err := s.Events(ctx, store.EventFilter{Object: "hs1-gpu0"})
		wantErr(t, "events", err, nil)
		var kinds []string
		for _, e := range evs {
			kinds = append(kinds, e.Kind)
		}
		if !slices.Contains(kinds, "gpu.draining") || !slices.Contains(kinds, "gpu.unhealthy") {
			t.Errorf("gpu events %v", kinds)
		}
		wantErr(t, "bad gpu state", s.SetNodeHealth(ctx, "hs1", gpufleet.Unhealthy, "",
			[]gpufleet.NodeGPU{{UUID: "hs1-gpu0", State: "broken"}}, T0), gpufleet.ErrInvalid)
	})
	ctx := t.Context()
	wantErr(t, "put", s.PutNode(ctx, testNode("n1")), nil)
	wantErr(t, "cordon", s.SetNodeState(ctx, "n1", gpufleet.NodeCordoned, gpufleet.CauseOperator, "by admin", "admin", T0), nil)
	wantErr(t, "unhealthy", s.SetNodeHealth(ctx, "n1", gpufleet.Unhealthy, "ecc", nil, T0), nil)
	n, _ := s.Node(ctx, "n1")
	if n.Reason != "ecc" {
		t.Errorf("reason %q while unhealthy, want the health reason", n.Reason)
	}
	wantErr(t, "healthy", s.SetNodeHealth(ctx, "n1", gpufleet.Healthy, "", nil, T0), nil)
	n, _ = s.Node(ctx, "n1")
	if n.Reason != "by admin" || n.State != gpufleet.NodeCordoned {
		t.Errorf("node %s %q once healthy, want cordoned with the cordon reason", n.State, n.Reason)
	}
	wantErr(t, "by index", s.SetNodeHealth(ctx, "n1", gpufleet.Healthy, "", []gpufleet.NodeGPU{{Index: 1, Health: gpufleet.Degraded, Reason: "hot"}}, T0), nil)
	n, _ = s.Node(ctx, "n1")
	if g := n.GPUs[1]; g.Health != gpufleet.Degraded || g.Reason != "hot" {
		t.Errorf("gpu 1 %s %q, want degraded hot", g.Health, g.Reason)
	}
	wantErr(t, "unknown gpu", s.SetNodeHealth(ctx, "n1", gpufleet.Healthy, "", []gpufleet.NodeGPU{{UUID: "nope"}}, T0), gpufleet.ErrNotFound)
	wantErr(t, "bad health", s.SetNodeHealth(ctx, "n1", "sick", "", nil, T0), gpufleet.ErrInvalid)
	wantErr(t, "unknown node", s.SetNodeHealth(ctx, "nope", gpufleet.Healthy, "", nil, T0), gpufleet.ErrNotFound)
	if got := kinds(events(t, s, store.EventFilter{Object: "n1-gpu1"})); !cmp.Equal(got, []string{"gpu.degraded"}) {
		t.Errorf("gpu events %v", got)
	}
}

func testSubmitFields(t *testing.T, s store.Store) {
	limit, est, grace := 3600.0, 1200.0, 30.0
	in := gpufleet.Job{
		Team: "team-a", Name: "train-llama", Priority: "training", RequestID: "req-1",
		Resources: gpufleet.Resources{
			GPUs: 16, Nodes: 1, GPUModels: []string{"h100-sxm-80gb"}, GPUMemoryMinBytes: 80 << 30,
			MinComputeCapability: gpufleet.ComputeCapability{Major: 9}, Precision: "bf16", Interconnect: "nvlink", Sharing: gpufleet.Sharing{Kind: gpufleet.MIG, Profile: "1g.18gb"},
			Prefer: "fastest", NodeSelector: map[string]string{"rack": "r1"},
		},
		Command: []string{"torchrun", "train.py"}, Env: map[string]string{"A": "1"}, Workdir: "/work",
		TimeLimitS: &limit, EstimateS: &est, Preemptible: true, GraceS: &grace,
		Retries: gpufleet.Retries{Max: 2}, SimLoad: "compute", SubmittedAt: T0,
		Plan: map[string]any{"gpu": "h100-sxm-80gb", "gpus": 16},
	}
	got := submit(t, s, in)[0]
	want := in
	want.ID = got.ID
	want.State = gpufleet.JobQueued
	want.Plan = json.RawMessage(`{"gpu":"h100-sxm-80gb","gpus":16}`)
	if diff := cmp.Diff(want, got, equateEmpty); diff != "" {
		t.Errorf("submitted (-want +got):\n%s", diff)
	}
	read := getJob(t, s, got.ID)
	if diff := cmp.Diff(got, read, equateEmpty); diff != "" {
		t.Errorf("read back (-submitted +read):\n%s", diff)
	}
	if len(got.ID) != 18 || got.ID[:2] != "j-" {
		t.Errorf("id %q, want j- and 16 base32 characters", got.ID)
	}
	_, err := s.Job(t.Context(), "j-nope")
	wantErr(t, "unknown job", err, gpufleet.ErrNotFound)
}

func testSubmitOrder(t *testing.T, s store.Store) {
	var ids []string
	for i := range 20 {
		j := newJob("team-a", fmt.Sprint(i), "")
		ids = append(ids, submit(t, s, j, j)[0].ID)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("id %s after %s: ids must increase", ids[i], ids[i-1])
		}
	}
	jobs, _, err := s.ListJobs(t.Context(), store.JobFilter{Limit: 1000})
	wantErr(t, "list", err, nil)
	if len(jobs) != 40 {
		t.Fatalf("%d jobs, want 40", len(jobs))
	}
	for i := 0; i < 20; i++ {
		if jobs[2*i].ID != ids[i] || jobs[2*i].Name != fmt.Sprint(i) || jobs[2*i+1].Name != fmt.Sprint(i) {
			t.Fatalf("job %d is %s %q, want submission order", 2*i, jobs[2*i].ID, jobs[2*i].Name)
		}
	}
}

func testSubmitIdempotent(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := submit(t, s, newJob("team-a", "a", "r1"))[0]
	res, err := s.SubmitJobs(ctx, []gpufleet.Job{
		newJob("team-a", "a again", "r1"), // same team and request id: the first job
		newJob("team-b", "b", "r1"),       // another team: a new job
		newJob("team-a", "c", "r2"),       // a new request id
		newJob("team-a", "c again", "r2"), // repeated within one batch
		newJob("team-a", "d", ""),         // no request id: always new
		newJob("team-a", "d", ""),
	}, "tester")
	wantErr(t, "submit", err, nil)
	type outcome struct {
		Name    string
		Created bool
		Same    string // which earlier job it returned
	}
	var got []outcome
	for _, r := range res {
		wantErr(t, "result", r.Err, nil)
		o := outcome{Name: r.Job.Name, Created: r.Created}
		if r.Job.ID == first.ID {
			o.Same = "first"
		}
		if r.Job.ID == res[2].Job.ID && r.Job.Name == "c" && !r.Created {
			o.Same = "c"
		}
		got = append(got, o)
	}
	want := []outcome{{"a", false, "first"}, {"b", true, ""}, {"c", true, ""}, {"c", false, "c"}, {"d", true, ""}, {"d", true, ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if res[4].Job.ID == res[5].Job.ID {
		t.Errorf("jobs without request id share id %s", res[4].Job.ID)
	}
	all, _, _ := s.ListJobs(ctx, store.JobFilter{})
	if len(all) != 5 {
		t.Errorf("%d jobs stored, want 5", len(all))
	}
	if evs := events(t, s, store.EventFilter{Object: first.ID}); len(evs) != 1 || evs[0].Kind != "job.submitted" || evs[0].Actor != "tester" || evs[0].Team != "team-a" {
		t.Errorf("events of the first job %+v, want one job.submitted", evs)
	}
}

func testSubmitInvalid(t *testing.T, s store.Store) {
	bad := newJob("team-a", "bad", "")
	bad.Retries.Max = -1
	res, err := s.SubmitJobs(t.Context(), []gpufleet.Job{newJob("", "no team", ""), bad, newJob("team-a", "good", "")}, "tester")
	wantErr(t, "submit", err, nil)
	wantErr(t, "no team", res[0].Err, gpufleet.ErrInvalid)
	wantErr(t, "negative retries", res[1].Err, gpufleet.ErrInvalid)
	wantErr(t, "good", res[2].Err, nil)
	if !res[2].Created {
		t.Errorf("good job not created")
	}
	dup := newJob("team-a", "dup", "")
	dup.ID = res[2].Job.ID
	res, err = s.SubmitJobs(t.Context(), []gpufleet.Job{dup}, "tester")
	wantErr(t, "submit", err, nil)
	wantErr(t, "id in use", res[0].Err, gpufleet.ErrInvalid)
	if res, err := s.SubmitJobs(t.Context(), nil, "tester"); err != nil || len(res) != 0 {
		t.Errorf("empty submit: %v %v", res, err)
	}
}

func testListJobs(t *testing.T, s store.Store) {
	ctx := t.Context()
	var all []gpufleet.Job
	labels := []map[string]string{
		{"app": "web", "tier": "front"}, {"app": "db"}, {"app": "web"}, nil, {"app": "web", "tier": "front"}, {"app": "cache"}, {"app": "web"},
	}
	for i := range 7 {
		team := "team-a"
		if i%3 == 2 {
			team = "team-b"
		}
		j := newJob(team, fmt.Sprint(i), "")
		j.Labels = labels[i]
		all = append(all, submit(t, s, j)...)
	}
	epoch := lead(t, s)
	place(t, s, epoch, all[0].ID, "n1")
	_, err := s.RequestCancel(ctx, all[1].ID, "tester", T0)
	wantErr(t, "cancel", err, nil)

	ids := func(js []gpufleet.Job) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.Name)
		}
		return out
	}
	for name, tc := range map[string]struct {
		f     store.JobFilter
		pages [][]string
	}{
		"everything":         {f: store.JobFilter{}, pages: [][]string{{"0", "1", "2", "3", "4", "5", "6"}}},
		"pages of three":     {f: store.JobFilter{Limit: 3}, pages: [][]string{{"0", "1", "2"}, {"3", "4", "5"}, {"6"}}},
		"exact pages":        {f: store.JobFilter{Limit: 7}, pages: [][]string{{"0", "1", "2", "3", "4", "5", "6"}}},
		"one team":           {f: store.JobFilter{Team: "team-b", Limit: 1}, pages: [][]string{{"2"}, {"5"}}},
		"queued":             {f: store.JobFilter{States: []gpufleet.JobState{gpufleet.JobQueued}}, pages: [][]string{{"2", "3", "4", "5", "6"}}},
		"two states":         {f: store.JobFilter{States: []gpufleet.JobState{gpufleet.JobScheduled, gpufleet.JobCancelled}}, pages: [][]string{{"0", "1"}}},
		"team and state":     {f: store.JobFilter{Team: "team-a", States: []gpufleet.JobState{gpufleet.JobQueued}}, pages: [][]string{{"3", "4", "6"}}},
		"after a cursor":     {f: store.JobFilter{After: all[4].ID}, pages: [][]string{{"5", "6"}}},
		"nothing matches":    {f: store.JobFilter{Team: "team-z"}, pages: [][]string{nil}},
		"limit above max ok": {f: store.JobFilter{Limit: 5000}, pages: [][]string{{"0", "1", "2", "3", "4", "5", "6"}}},
		"label equals":       {f: store.JobFilter{Selector: sel(t, "app=web")}, pages: [][]string{{"0", "2", "4", "6"}}},
		"label pages hold only matches": {f: store.JobFilter{Selector: sel(t, "app=web"), Limit: 2},
			pages: [][]string{{"0", "2"}, {"4", "6"}}},
		"label not equal, or lacking it": {f: store.JobFilter{Selector: sel(t, "app!=web")}, pages: [][]string{{"1", "3", "5"}}},
		"label exists":                   {f: store.JobFilter{Selector: sel(t, "tier")}, pages: [][]string{{"0", "4"}}},
		"label does not exist":           {f: store.JobFilter{Selector: sel(t, "!app")}, pages: [][]string{{"3"}}},
		"label in":                       {f: store.JobFilter{Selector: sel(t, "app in (db,cache)")}, pages: [][]string{{"1", "5"}}},
		"label notin, or lacking it":     {f: store.JobFilter{Selector: sel(t, "app notin (web,db)")}, pages: [][]string{{"3", "5"}}},
		"labels all hold":                {f: store.JobFilter{Selector: sel(t, "app=web,tier=front")}, pages: [][]string{{"0", "4"}}},
		"label and a missing one":        {f: store.JobFilter{Selector: sel(t, "app=web,!tier")}, pages: [][]string{{"2", "6"}}},
		"label, team and state": {f: store.JobFilter{Team: "team-b", States: []gpufleet.JobState{gpufleet.JobQueued}, Selector: sel(t, "app=web")},
			pages: [][]string{{"2"}}},
		"label after a cursor": {f: store.JobFilter{Selector: sel(t, "app=web"), After: all[2].ID}, pages: [][]string{{"4", "6"}}},
		"no job has the label": {f: store.JobFilter{Selector: sel(t, "app=nope")}, pages: [][]string{nil}},
	} {
		t.Run(name, func(t *testing.T) {
			f := tc.f
			var got [][]string
			for range 10 {
				js, next, err := s.ListJobs(ctx, f)
				wantErr(t, "list", err, nil)
				got = append(got, ids(js))
				if next == "" {
					break
				}
				f.After = next
			}
			if diff := cmp.Diff(tc.pages, got); diff != "" {
				t.Errorf("pages (-want +got):\n%s", diff)
			}
		})
	}
	js, _, _ := s.ListJobs(ctx, store.JobFilter{Limit: 1})
	if len(js[0].Attempts) != 1 {
		t.Errorf("listed job has %d attempts, want 1", len(js[0].Attempts))
	}
	if diff := cmp.Diff(labels[0], js[0].Labels); diff != "" {
		t.Errorf("listed job's labels (-want +got):\n%s", diff)
	}
	if j, err := s.Job(ctx, all[4].ID); err != nil || !cmp.Equal(j.Labels, labels[4]) {
		t.Errorf("job %s read with labels %v, %v; want %v", all[4].ID, j.Labels, err, labels[4])
	}
	_, _, err = s.ListJobs(ctx, store.JobFilter{States: []gpufleet.JobState{"sleeping"}})
	wantErr(t, "unknown state", err, gpufleet.ErrInvalid)
	_, _, err = s.ListJobs(ctx, store.JobFilter{Selector: gpufleet.LabelSelector{{Key: "app", Op: "like"}}})
	wantErr(t, "unknown selector operator", err, gpufleet.ErrInvalid)
	_, _, err = s.ListJobs(ctx, store.JobFilter{Selector: gpufleet.LabelSelector{{Key: "app", Op: gpufleet.OpIn}}})
	wantErr(t, "in without values", err, gpufleet.ErrInvalid)
}

// sel parses a label selector.
func sel(t *testing.T, s string) gpufleet.LabelSelector {
	t.Helper()
	v, err := gpufleet.ParseLabelSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func testLease(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.Lease(ctx)
	wantErr(t, "no lease yet", err, gpufleet.ErrNotFound)
	l, held, err := s.TryLease(ctx, "a", time.Hour)
	if err != nil || !held || l.Holder != "a" || l.Epoch != 1 {
		t.Fatalf("first lease %+v held %v err %v, want a at epoch 1", l, held, err)
	}
	l, held, err = s.TryLease(ctx, "a", time.Hour)
	if err != nil || !held || l.Epoch != 1 {
		t.Fatalf("renewal %+v held %v err %v, want epoch 1", l, held, err)
	}
	l, held, err = s.TryLease(ctx, "b", time.Hour)
	if err != nil || held || l.Holder != "a" || l.Epoch != 1 {
		t.Fatalf("contender got %+v held %v err %v, want a's lease", l, held, err)
	}
	// Expire a's lease: a short renewal, then wait it out.
	if _, held, err := s.TryLease(ctx, "a", 20*time.Millisecond); err != nil || !held {
		t.Fatalf("short renewal: %v", err)
	}
	time.Sleep(60 * time.Millisecond)
	l, held, err = s.TryLease(ctx, "b", time.Hour)
	if err != nil || !held || l.Holder != "b" || l.Epoch != 2 {
		t.Fatalf("takeover %+v held %v err %v, want b at epoch 2", l, held, err)
	}
	got, err := s.Lease(ctx)
	wantErr(t, "lease", err, nil)
	if got.Holder != "b" || got.Epoch != 2 || !got.ExpiresAt.Equal(l.ExpiresAt) {
		t.Errorf("lease %+v, want %+v", got, l)
	}
	_, _, err = s.TryLease(ctx, "", time.Hour)
	wantErr(t, "no holder", err, gpufleet.ErrInvalid)
	_, _, err = s.TryLease(ctx, "a", 0)
	wantErr(t, "no ttl", err, gpufleet.ErrInvalid)

	// Released: another replica leads at once; the release of a lease
	// one does not hold is a no-op.
	if ok, err := s.ReleaseLease(ctx, "a"); err != nil || ok {
		t.Fatalf("release by a non-holder: released %v, %v", ok, err)
	}
	if ok, err := s.ReleaseLease(ctx, "b"); err != nil || !ok {
		t.Fatalf("release by the holder: released %v, %v", ok, err)
	}
	l, held, err = s.TryLease(ctx, "a", time.Hour)
	if err != nil || !held || l.Epoch != 3 {
		t.Fatalf("after a release: %+v held %v err %v, want a at epoch 3", l, held, err)
	}
	// A restarted replica takes its own unexpired lease back at once,
	// with a new epoch; another replica does not.
	r1, r1again, r2 := store.Holder("r1", "host-10"), store.Holder("r1", "host-11"), store.Holder("r2", "host-12")
	if ok, err := s.ReleaseLease(ctx, "a"); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if l, held, err = s.TryLease(ctx, r1, time.Hour); err != nil || !held || l.Epoch != 4 {
		t.Fatalf("r1: %+v held %v err %v", l, held, err)
	}
	if l, held, err = s.TryLease(ctx, r2, time.Hour); err != nil || held || l.Holder != r1 {
		t.Fatalf("another replica took an unexpired lease: %+v held %v err %v", l, held, err)
	}
	if l, held, err = s.TryLease(ctx, r1again, time.Hour); err != nil || !held || l.Holder != r1again || l.Epoch != 5 {
		t.Fatalf("restarted r1: %+v held %v err %v, want it at epoch 5", l, held, err)
	}
	wantErr(t, "the old process's writes", s.ApplySchedule(ctx, 4, store.Decision{At: T0}), store.ErrFenced)

	// The lease names where its holder answers; a restarted replica's
	// new process replaces its old one's address.
	if got, _ := s.Lease(ctx); got.URL != "" {
		t.Errorf("url %q before any replica gave one", got.URL)
	}
	wantErr(t, "put r1", s.PutReplica(ctx, r1, "http://r1:7070", T0), nil)
	wantErr(t, "put r1 again", s.PutReplica(ctx, r1again, "http://r1:7071", T0), nil)
	wantErr(t, "put r2", s.PutReplica(ctx, r2, "http://r2:7070", T0), nil)
	if got, _ := s.Lease(ctx); got.Holder != r1again || got.URL != "http://r1:7071" {
		t.Errorf("lease %+v, want r1's new process at http://r1:7071", got)
	}
	wantErr(t, "no instance", s.PutReplica(ctx, "r3", "http://r3", T0), gpufleet.ErrInvalid)
	wantErr(t, "no url", s.PutReplica(ctx, r2, "", T0), gpufleet.ErrInvalid)
}

func testFenced(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := submit(t, s, newJob("team-a", "a", ""))[0]
	d := store.Decision{At: T0, Starts: []store.Start{{JobID: j.ID, Nodes: []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"g0"}}}}},
		Queue: []gpufleet.QueueEntry{{ID: j.ID, Position: 1}}}
	wantErr(t, "no lease", s.ApplySchedule(ctx, 1, d), store.ErrFenced)
	epoch := lead(t, s)
	wantErr(t, "stale epoch", s.ApplySchedule(ctx, epoch+1, d), store.ErrFenced)
	wantErr(t, "stale epoch", s.ApplySchedule(ctx, epoch-1, d), store.ErrFenced)
	got := getJob(t, s, j.ID)
	if got.State != gpufleet.JobQueued || len(got.Attempts) != 0 || got.Queue != nil {
		t.Errorf("fenced decision wrote: %+v", got)
	}
	wantErr(t, "current epoch", s.ApplySchedule(ctx, epoch, d), nil)
}

// testFencedWrites: under store.Fenced, a write of any kind the leader
// makes (node state and health, rollouts, versions, events) is refused
// once the epoch is stale, and writes nothing.
func testFencedWrites(t *testing.T, s store.Store) {
	ctx := t.Context()
	wantErr(t, "put n1", s.PutNode(ctx, testNode("n1")), nil)
	epoch := lead(t, s)
	r := rollout.Rollout{ID: "ro-f", Stack: "prod-550", Target: map[string]string{"driver": "550.54.15"}, Canary: 1, Waves: []float64{1},
		CreatedAt: T0, CreatedBy: "alice"}
	wantErr(t, "plan", rollout.Plan(&r, []string{"n1"}), nil)
	for _, tc := range []struct {
		epoch int64
		want  error
	}{{epoch + 1, store.ErrFenced}, {epoch - 1, store.ErrFenced}, {epoch, nil}} {
		f := store.Fenced(ctx, tc.epoch)
		before, err := s.LastEventID(ctx)
		wantErr(t, "last event", err, nil)
		wantErr(t, "node state", s.SetNodeState(f, "n1", gpufleet.NodeDraining, gpufleet.CauseOperator, "health", "health", T0), tc.want)
		wantErr(t, "node health", s.SetNodeHealth(f, "n1", gpufleet.Degraded, "xid 79", nil, T0), tc.want)
		wantErr(t, "versions", s.SetNodeVersions(f, "n1", map[string]string{"driver": "550.54.15"}, T0), tc.want)
		wantErr(t, "rollout", s.PutRollout(f, r, "leader", "step"), tc.want)
		wantErr(t, "event", s.AppendEvent(f, gpufleet.Event{At: T0, Actor: "leader", Kind: "test.fenced", Object: "n1"}), tc.want)
		after, err := s.LastEventID(ctx)
		wantErr(t, "last event", err, nil)
		n := getNode(t, s, "n1")
		if tc.want != nil && (after != before || n.State == gpufleet.NodeDraining || n.Health == gpufleet.Degraded) {
			t.Errorf("epoch %d (current %d) wrote: events %d -> %d, node %s %s", tc.epoch, epoch, before, after, n.State, n.Health)
		}
		if tc.want == nil && (n.State != gpufleet.NodeDraining || n.Health != gpufleet.Degraded) {
			t.Errorf("current epoch did not write: node %s %s", n.State, n.Health)
		}
	}
}

// testBatch: a cycle's writes take effect together at the end, fenced,
// or not at all.
func testBatch(t *testing.T, s store.Store) {
	ctx := t.Context()
	wantErr(t, "put n1", s.PutNode(ctx, testNode("n1")), nil)
	jobs := submit(t, s, newJob("team-a", "a", ""))
	epoch := lead(t, s)
	writes := func(ctx context.Context) error {
		if err := s.SetNodeState(ctx, "n1", gpufleet.NodeDraining, gpufleet.CauseRollout, "rollout", "rollout:r", T0); err != nil {
			return err
		}
		if err := s.AppendEvent(ctx, gpufleet.Event{At: T0, Actor: "leader", Kind: "test.batch", Object: "n1"}); err != nil {
			return err
		}
		d := store.Decision{At: T0, Starts: []store.Start{{JobID: jobs[0].ID, AttemptID: "a-batch", Nodes: []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"n1-g0"}}}}}}
		if err := s.ApplySchedule(ctx, epoch, d); err != nil {
			return err
		}
		// Reads in the batch see the store without its writes.
		if n := getNode(t, s, "n1"); n.State == gpufleet.NodeDraining {
			t.Error("a read in the batch saw its uncommitted write")
		}
		return nil
	}
	unchanged := func(what string) {
		t.Helper()
		if n, j := getNode(t, s, "n1"), getJob(t, s, jobs[0].ID); n.State == gpufleet.NodeDraining || len(j.Attempts) != 0 {
			t.Errorf("%s: node %s, %d attempts: a write happened", what, n.State, len(j.Attempts))
		}
	}
	before, err := s.LastEventID(ctx)
	wantErr(t, "last event", err, nil)
	// fn fails: nothing happens.
	boom := errors.New("boom")
	wantErr(t, "failing fn", s.Batch(store.Fenced(ctx, epoch), func(ctx context.Context) error {
		if err := writes(ctx); err != nil {
			return err
		}
		return boom
	}), boom)
	unchanged("failing fn")
	// Stale epoch: refused at the commit, nothing happens.
	wantErr(t, "stale", s.Batch(store.Fenced(ctx, epoch+1), writes), store.ErrFenced)
	unchanged("stale epoch")
	// One write of a stale epoch in a batch fenced by the current one.
	if err := s.Batch(store.Fenced(ctx, epoch), func(ctx context.Context) error {
		return s.AppendEvent(store.Fenced(ctx, epoch-1), gpufleet.Event{At: T0, Actor: "leader", Kind: "test.batch", Object: "n1"})
	}); err == nil {
		t.Error("a batch with writes of two epochs was committed")
	}
	if after, _ := s.LastEventID(ctx); after != before {
		t.Errorf("mixed epochs wrote: events %d -> %d", before, after)
	}
	unchanged("mixed epochs")
	// Current epoch: every write at once.
	wantErr(t, "current", s.Batch(store.Fenced(ctx, epoch), writes), nil)
	if n, j := getNode(t, s, "n1"), getJob(t, s, jobs[0].ID); n.State != gpufleet.NodeDraining || len(j.Attempts) != 1 || j.Attempts[0].ID != "a-batch" {
		t.Errorf("current epoch: node %s, attempts %+v", n.State, j.Attempts)
	}
	if after, _ := s.LastEventID(ctx); after <= before {
		t.Errorf("current epoch: no events written (%d -> %d)", before, after)
	}
}

func testScheduleStart(t *testing.T, s store.Store) {
	ctx := t.Context()
	jobs := submit(t, s, newJob("team-a", "a", ""), newJob("team-a", "b", ""))
	epoch := lead(t, s)
	at := T0.Add(time.Minute)
	nodes := []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"n1-g0", "n1-g1"}}, {Name: "n2", GPUs: []string{"n2-g0"}}}
	d := store.Decision{At: at, Starts: []store.Start{{JobID: jobs[0].ID, AttemptID: "a-custom-1", Nodes: nodes, Fraction: 0.5}},
		Queue: []gpufleet.QueueEntry{{ID: jobs[1].ID, Team: "team-a", Priority: "batch", Position: 1, TeamPosition: 1, Reason: "no capacity"}}}
	wantErr(t, "apply", s.ApplySchedule(ctx, epoch, d), nil)
	got := getJob(t, s, jobs[0].ID)
	want := gpufleet.Attempt{ID: "a-custom-1", JobID: jobs[0].ID, State: gpufleet.AttemptStarting, Node: "n1", GPUs: []string{"n1-g0", "n1-g1"},
		Nodes: nodes, StartedAt: &at, Fraction: 0.5}
	if got.State != gpufleet.JobScheduled || got.StartedAt != nil || got.Queue != nil {
		t.Errorf("job %s started_at %v queue %v, want scheduled, not started, not queued", got.State, got.StartedAt, got.Queue)
	}
	if diff := cmp.Diff([]gpufleet.Attempt{want}, got.Attempts, equateEmpty); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	rec, err := s.Attempt(ctx, "a-custom-1")
	wantErr(t, "attempt", err, nil)
	if diff := cmp.Diff(want, rec.Attempt, equateEmpty); diff != "" || rec.Team != "team-a" {
		t.Errorf("attempt record team %q (-want +got):\n%s", rec.Team, diff)
	}
	_, err = s.Attempt(ctx, "a-nope")
	wantErr(t, "unknown attempt", err, gpufleet.ErrNotFound)

	// A generated attempt id; a second attempt after a requeue is numbered after the first.
	id2 := place(t, s, epoch, jobs[1].ID, "n3")
	if len(id2) != 18 || id2[:2] != "a-" {
		t.Errorf("generated attempt id %q", id2)
	}
	update(t, s, "a-custom-1", gpufleet.AttemptLost)
	id3 := place(t, s, epoch, jobs[0].ID, "n4")
	got = getJob(t, s, jobs[0].ID)
	if len(got.Attempts) != 2 || got.Attempts[0].ID != "a-custom-1" || got.Attempts[1].ID != id3 {
		t.Errorf("attempts %+v, want a-custom-1 then %s", got.Attempts, id3)
	}
	for name, st := range map[string]store.Start{
		"no nodes":     {JobID: jobs[0].ID},
		"bad fraction": {JobID: jobs[0].ID, Nodes: nodes, Fraction: 2},
	} {
		err := s.ApplySchedule(ctx, epoch, store.Decision{Starts: []store.Start{st}})
		wantErr(t, name, err, gpufleet.ErrInvalid)
	}
	err = s.ApplySchedule(ctx, epoch, store.Decision{Starts: []store.Start{{JobID: "j-nope", Nodes: nodes}}})
	wantErr(t, "unknown job", err, gpufleet.ErrNotFound)
}

func testScheduleStale(t *testing.T, s store.Store) {
	ctx := t.Context()
	jobs := submit(t, s, newJob("team-a", "a", ""), newJob("team-a", "b", ""), newJob("team-a", "c", ""))
	epoch := lead(t, s)
	_, err := s.RequestCancel(ctx, jobs[1].ID, "tester", T0)
	wantErr(t, "cancel", err, nil)
	n := []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"g0"}}}
	d := store.Decision{At: T0, Starts: []store.Start{{JobID: jobs[0].ID, Nodes: n}, {JobID: jobs[1].ID, Nodes: n}},
		Queue: []gpufleet.QueueEntry{{ID: jobs[2].ID, Position: 1}}}
	wantErr(t, "start of a cancelled job", s.ApplySchedule(ctx, epoch, d), store.ErrStale)
	if j := getJob(t, s, jobs[0].ID); j.State != gpufleet.JobQueued || len(j.Attempts) != 0 {
		t.Errorf("stale decision started job a: %s with %d attempts", j.State, len(j.Attempts))
	}
	if q, _ := s.Queue(ctx); len(q) != 0 {
		t.Errorf("stale decision wrote the queue: %+v", q)
	}
	d.Starts = []store.Start{{JobID: jobs[0].ID, Nodes: n}, {JobID: jobs[0].ID, Nodes: n}}
	wantErr(t, "the same job twice", s.ApplySchedule(ctx, epoch, d), store.ErrStale)
}

func testQueue(t *testing.T, s store.Store) {
	ctx := t.Context()
	jobs := submit(t, s, newJob("team-a", "a", ""), newJob("team-b", "b", ""), newJob("team-a", "c", ""))
	epoch := lead(t, s)
	eta, p90, conf := T0.Add(time.Hour), T0.Add(3*time.Hour), 0.62
	q1 := []gpufleet.QueueEntry{
		{ID: jobs[2].ID, Team: "team-a", Priority: "batch", Position: 1, TeamPosition: 1, Reason: "waiting for 1 gpu", ReasonCode: "capacity",
			EstimatedStart: &eta, EstimatedStartP90: &p90, ETAConfidence: &conf,
			// The reason as data comes back as it went in (a JSON column).
			Explanation: &gpufleet.Explanation{Code: "capacity", NodesEvaluated: 3,
				NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterSelector, Nodes: 1}, {Code: gpufleet.FilterCapacity, Nodes: 2}},
				Exhausted:     gpufleet.DimGPUs, Need: 1}},
		{ID: jobs[0].ID, Team: "team-a", Priority: "batch", Position: 2, TeamPosition: 2, Reason: "behind c", ReasonCode: "order",
			Estimate: &gpufleet.RunEstimate{Seconds: 5400, From: gpufleet.EstimateWorkload, Runs: 7}},
		{ID: jobs[1].ID, Team: "team-b", Priority: "batch", Position: 3, TeamPosition: 1, Reason: "quota", ReasonCode: "quota"},
	}
	wantErr(t, "apply", s.ApplySchedule(ctx, epoch, store.Decision{At: T0, Queue: q1}), nil)
	got, err := s.Queue(ctx)
	wantErr(t, "queue", err, nil)
	if diff := cmp.Diff(q1, got); diff != "" {
		t.Errorf("queue (-want +got):\n%s", diff)
	}
	if j := getJob(t, s, jobs[2].ID); j.Queue == nil || !cmp.Equal(*j.Queue, q1[0]) {
		t.Errorf("job c queue %+v, want %+v", j.Queue, q1[0])
	}
	// The next decision replaces the queue: c starts, b is cancelled, a alone is left.
	_, err = s.RequestCancel(ctx, jobs[1].ID, "tester", T0)
	wantErr(t, "cancel", err, nil)
	q2 := []gpufleet.QueueEntry{
		{ID: jobs[0].ID, Team: "team-a", Priority: "batch", Position: 1, TeamPosition: 1, Reason: "next"},
		{ID: jobs[1].ID, Team: "team-b", Priority: "batch", Position: 2, TeamPosition: 1}, // no longer queued: ignored
	}
	wantErr(t, "apply", s.ApplySchedule(ctx, epoch, store.Decision{At: T0, Queue: q2,
		Starts: []store.Start{{JobID: jobs[2].ID, Nodes: []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"g0"}}}}}}), nil)
	got, err = s.Queue(ctx)
	wantErr(t, "queue", err, nil)
	if diff := cmp.Diff(q2[:1], got); diff != "" {
		t.Errorf("queue after the second decision (-want +got):\n%s", diff)
	}
	for _, id := range []string{jobs[1].ID, jobs[2].ID} {
		if j := getJob(t, s, id); j.Queue != nil {
			t.Errorf("job %s (%s) keeps queue info %+v", j.Name, j.State, j.Queue)
		}
	}
}

func testScheduleStop(t *testing.T, s store.Store) {
	ctx := t.Context()
	jobs := submit(t, s, newJob("team-a", "a", ""), newJob("team-a", "b", ""))
	epoch := lead(t, s)
	a := place(t, s, epoch, jobs[0].ID, "n1")
	b := place(t, s, epoch, jobs[1].ID, "n1")
	update(t, s, b, gpufleet.AttemptSucceeded)
	// A stop code the core does not know is refused: it could not say
	// whether the job requeues.
	wantErr(t, "apply unknown code", s.ApplySchedule(ctx, epoch, store.Decision{At: T0, Stops: []store.Stop{{AttemptID: a, Reason: "?", ReasonCode: "preempted"}}}),
		gpufleet.ErrInvalid)
	d := store.Decision{At: T0, Stops: []store.Stop{{AttemptID: a, Reason: "preempted by production job", ReasonCode: gpufleet.StopPreemptedPriority},
		{AttemptID: b, Reason: "late", ReasonCode: gpufleet.StopDrain}}}
	wantErr(t, "apply", s.ApplySchedule(ctx, epoch, d), nil)
	wantErr(t, "apply again", s.ApplySchedule(ctx, epoch, d), nil)
	rec, err := s.Attempt(ctx, a)
	wantErr(t, "attempt", err, nil)
	if !rec.StopRequested || rec.StopReason != "preempted by production job" || rec.StopReasonCode != string(gpufleet.StopPreemptedPriority) || rec.State != gpufleet.AttemptStarting {
		t.Errorf("attempt after stop %+v", rec)
	}
	if rb, _ := s.Attempt(ctx, b); rb.StopRequested {
		t.Errorf("stop of a finished attempt was recorded")
	}
	if got := kinds(events(t, s, store.EventFilter{Object: a})); !cmp.Equal(got, []string{"attempt.started", "attempt.stop_requested"}) {
		t.Errorf("attempt events %v, want one stop request", got)
	}
	j := update(t, s, a, gpufleet.AttemptStopped)
	if j.State != gpufleet.JobQueued || j.Interruptions != 1 || j.Retries.Used != 0 || !store.Requeued(j) {
		t.Errorf("preempted job %s interruptions %d retries %d requeued %v", j.State, j.Interruptions, j.Retries.Used, store.Requeued(j))
	}
	err = s.ApplySchedule(ctx, epoch, store.Decision{Stops: []store.Stop{{AttemptID: "a-nope", ReasonCode: gpufleet.StopDrain}}})
	wantErr(t, "unknown attempt", err, gpufleet.ErrNotFound)
}

func testTransitions(t *testing.T, s store.Store) {
	type want struct {
		Job           gpufleet.JobState
		Attempts      []gpufleet.AttemptState
		Used          int
		Interruptions int
		Requeued      bool
		Started       bool
		Finished      bool
	}
	for name, tc := range map[string]struct {
		retries int
		cancel  string // "before" the steps, or "after" the first step
		steps   []gpufleet.AttemptState
		// place a new attempt when the job is queued again between steps
		want want
	}{
		"runs and succeeds": {steps: []gpufleet.AttemptState{"running", "succeeded"},
			want: want{Job: "succeeded", Attempts: []gpufleet.AttemptState{"succeeded"}, Started: true, Finished: true}},
		"succeeds straight from starting": {steps: []gpufleet.AttemptState{"succeeded"},
			want: want{Job: "succeeded", Attempts: []gpufleet.AttemptState{"succeeded"}, Started: true, Finished: true}},
		"running": {steps: []gpufleet.AttemptState{"running"},
			want: want{Job: "running", Attempts: []gpufleet.AttemptState{"running"}, Started: true}},
		"fails with a retry left": {retries: 1, steps: []gpufleet.AttemptState{"running", "failed"},
			want: want{Job: "queued", Attempts: []gpufleet.AttemptState{"failed"}, Used: 1, Started: true}},
		"fails out of retries": {retries: 1, steps: []gpufleet.AttemptState{"running", "failed", "running", "failed"},
			want: want{Job: "failed", Attempts: []gpufleet.AttemptState{"failed", "failed"}, Used: 2, Started: true, Finished: true}},
		"fails without retries": {steps: []gpufleet.AttemptState{"failed"},
			want: want{Job: "failed", Attempts: []gpufleet.AttemptState{"failed"}, Used: 1, Finished: true}},
		"stopped requeues without using retries": {steps: []gpufleet.AttemptState{"running", "stopped"},
			want: want{Job: "queued", Attempts: []gpufleet.AttemptState{"stopped"}, Interruptions: 1, Requeued: true, Started: true}},
		"lost requeues": {steps: []gpufleet.AttemptState{"lost"},
			want: want{Job: "queued", Attempts: []gpufleet.AttemptState{"lost"}, Interruptions: 1, Requeued: true}},
		"lost, then succeeds": {steps: []gpufleet.AttemptState{"running", "lost", "running", "succeeded"},
			want: want{Job: "succeeded", Attempts: []gpufleet.AttemptState{"lost", "succeeded"}, Interruptions: 1, Started: true, Finished: true}},
		"cancelled while running, then stopped": {cancel: "after", steps: []gpufleet.AttemptState{"running", "stopped"},
			want: want{Job: "cancelled", Attempts: []gpufleet.AttemptState{"stopped"}, Started: true, Finished: true}},
		"cancelled while starting, then fails": {retries: 3, cancel: "before", steps: []gpufleet.AttemptState{"failed"},
			want: want{Job: "cancelled", Attempts: []gpufleet.AttemptState{"failed"}, Finished: true}},
		"cancelled, but succeeds first": {cancel: "after", steps: []gpufleet.AttemptState{"running", "succeeded"},
			want: want{Job: "succeeded", Attempts: []gpufleet.AttemptState{"succeeded"}, Started: true, Finished: true}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			j := newJob("team-a", name, "")
			j.Retries.Max = tc.retries
			id := submit(t, s, j)[0].ID
			epoch, _, _ := s.TryLease(ctx, "leader-1", time.Hour)
			attempt := place(t, s, epoch.Epoch, id, "n1")
			if tc.cancel == "before" {
				if _, err := s.RequestCancel(ctx, id, "tester", T0); err != nil {
					t.Fatal(err)
				}
			}
			var got gpufleet.Job
			for i, st := range tc.steps {
				if i > 0 && got.State == gpufleet.JobQueued {
					attempt = place(t, s, epoch.Epoch, id, "n1")
				}
				got = update(t, s, attempt, st)
				if i == 0 && tc.cancel == "after" {
					if _, err := s.RequestCancel(ctx, id, "tester", T0); err != nil {
						t.Fatal(err)
					}
				}
			}
			got = getJob(t, s, id)
			var states []gpufleet.AttemptState
			for _, a := range got.Attempts {
				states = append(states, a.State)
			}
			g := want{Job: got.State, Attempts: states, Used: got.Retries.Used, Interruptions: got.Interruptions,
				Requeued: store.Requeued(got), Started: got.StartedAt != nil, Finished: got.FinishedAt != nil}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("after %v (-want +got):\n%s", tc.steps, diff)
			}
		})
	}
}

func testTerminalImmutable(t *testing.T, s store.Store) {
	ctx := t.Context()
	id := submit(t, s, newJob("team-a", "a", ""))[0].ID
	epoch := lead(t, s)
	a := place(t, s, epoch, id, "n1")
	update(t, s, a, gpufleet.AttemptRunning)
	_, err := s.UpdateAttempt(ctx, store.AttemptUpdate{AttemptID: a, State: gpufleet.AttemptStarting})
	wantErr(t, "running -> starting", err, gpufleet.ErrInvalid)
	code := 0
	_, err = s.UpdateAttempt(ctx, store.AttemptUpdate{AttemptID: a, State: gpufleet.AttemptSucceeded, ExitCode: &code, At: T0.Add(time.Hour)})
	wantErr(t, "succeed", err, nil)
	before := getJob(t, s, id)
	nEvents := len(events(t, s, store.EventFilter{}))
	other := 3
	j, err := s.UpdateAttempt(ctx, store.AttemptUpdate{AttemptID: a, State: gpufleet.AttemptSucceeded, ExitCode: &other, At: T0.Add(2 * time.Hour)})
	wantErr(t, "repeat succeeded", err, nil)
	if diff := cmp.Diff(before, j, equateEmpty); diff != "" {
		t.Errorf("a repeated terminal report changed the job (-before +after):\n%s", diff)
	}
	for _, st := range []gpufleet.AttemptState{"failed", "lost", "stopped", "running", "starting"} {
		_, err = s.UpdateAttempt(ctx, store.AttemptUpdate{AttemptID: a, State: st})
		wantErr(t, "succeeded -> "+string(st), err, gpufleet.ErrInvalid)
	}
	if n := len(events(t, s, store.EventFilter{})); n != nEvents {
		t.Errorf("%d events after refused updates, want %d", n, nEvents)
	}
	if got := getJob(t, s, id); *got.Attempts[0].ExitCode != 0 || !got.Attempts[0].FinishedAt.Equal(T0.Add(time.Hour)) {
		t.Errorf("first report did not win: %+v", got.Attempts[0])
	}
	_, err = s.UpdateAttempt(ctx, store.AttemptUpdate{AttemptID: "a-nope", State: gpufleet.AttemptRunning})
	wantErr(t, "unknown attempt", err, gpufleet.ErrNotFound)
	_, err = s.UpdateAttempt(ctx, store.AttemptUpdate{AttemptID: a, State: "paused"})
	wantErr(t, "unknown state", err, gpufleet.ErrInvalid)
}

func testAccounting(t *testing.T, s store.Store) {
	ctx := t.Context()
	id := submit(t, s, newJob("team-a", "a", ""))[0].ID
	a := place(t, s, lead(t, s), id, "n1")
	for _, u := range []store.AttemptUpdate{
		{State: gpufleet.AttemptRunning, GPUSeconds: 10, EffectiveGPUSeconds: 5, EnergyJoules: 700},
		{State: gpufleet.AttemptRunning, GPUSeconds: 20, EffectiveGPUSeconds: 12, EnergyJoules: 1400},
		{State: gpufleet.AttemptLost, Reason: "node silent", ReasonCode: "node_lost"}, // the server knows no totals
	} {
		u.AttemptID = a
		if _, err := s.UpdateAttempt(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	got := getJob(t, s, id).Attempts[0]
	if got.GPUSeconds != 20 || got.EffectiveGPUSeconds != 12 || got.EnergyJoules != 1400 || got.ReasonCode != "node_lost" || got.Reason != "node silent" {
		t.Errorf("attempt %+v, want totals 20/12/1400 kept and the loss reason", got)
	}
	if got.ExitCode != nil {
		t.Errorf("exit code %d, want null", *got.ExitCode)
	}
}

// testStopEffects: a run stopped at its time limit fails its job, with the
// stop's reason on the job; a drained one requeues it; a failed queued job
// ends with its reason.
func testStopEffects(t *testing.T, s store.Store) {
	ctx := t.Context()
	jobs := submit(t, s, newJob("team-a", "limited", ""), newJob("team-a", "drained", ""), newJob("team-a", "poison", ""))
	epoch := lead(t, s)
	al := place(t, s, epoch, jobs[0].ID, "n1")
	ad := place(t, s, epoch, jobs[1].ID, "n1")
	update(t, s, al, gpufleet.AttemptRunning)
	update(t, s, ad, gpufleet.AttemptRunning)
	wantErr(t, "stops", s.ApplySchedule(ctx, epoch, store.Decision{At: T0.Add(time.Hour),
		Stops: []store.Stop{{AttemptID: al, Reason: "time limit 1h0m0s reached", ReasonCode: "time_limit", Grace: time.Second},
			{AttemptID: ad, Reason: "node n1 is draining", ReasonCode: "drain", Grace: time.Second}},
		Fails: []store.Fail{{JobID: jobs[2].ID, Reason: "invalid request: resources.gpus 0", ReasonCode: "invalid_request"}}}), nil)
	if j := update(t, s, al, gpufleet.AttemptStopped); j.State != gpufleet.JobFailed || j.ReasonCode != "time_limit" || j.Reason != "time limit 1h0m0s reached" {
		t.Errorf("job stopped at its time limit: %s %q %q, want failed with the stop's reason", j.State, j.ReasonCode, j.Reason)
	}
	if j := update(t, s, ad, gpufleet.AttemptStopped); j.State != gpufleet.JobQueued || !store.Requeued(j) {
		t.Errorf("drained job: %s, want queued again", j.State)
	}
	j, err := s.Job(ctx, jobs[2].ID)
	wantErr(t, "poison job", err, nil)
	if j.State != gpufleet.JobFailed || j.ReasonCode != "invalid_request" || j.FinishedAt == nil {
		t.Errorf("failed queued job: %s %q finished %v", j.State, j.ReasonCode, j.FinishedAt)
	}
}

func testCancel(t *testing.T, s store.Store) {
	ctx := t.Context()
	jobs := submit(t, s, newJob("team-a", "queued", ""), newJob("team-a", "running", ""), newJob("team-a", "done", ""))
	epoch := lead(t, s)
	ar := place(t, s, epoch, jobs[1].ID, "n1")
	update(t, s, ar, gpufleet.AttemptRunning)
	ad := place(t, s, epoch, jobs[2].ID, "n1")
	update(t, s, ad, gpufleet.AttemptSucceeded)

	at := T0.Add(time.Hour)
	j, err := s.RequestCancel(ctx, jobs[0].ID, "tester", at)
	wantErr(t, "cancel queued", err, nil)
	if j.State != gpufleet.JobCancelled || !j.CancelRequested || j.FinishedAt == nil || !j.FinishedAt.Equal(at) {
		t.Errorf("queued job after cancel: %s cancel_requested %v finished %v", j.State, j.CancelRequested, j.FinishedAt)
	}
	j, err = s.RequestCancel(ctx, jobs[1].ID, "tester", at)
	wantErr(t, "cancel running", err, nil)
	if j.State != gpufleet.JobRunning || !j.CancelRequested || j.FinishedAt != nil {
		t.Errorf("running job after cancel: %s cancel_requested %v", j.State, j.CancelRequested)
	}
	// The store marks the cancel; the scheduler decides the stop and its
	// grace, which ApplySchedule writes.
	if rec, _ := s.Attempt(ctx, ar); rec.StopRequested {
		t.Errorf("attempt of the cancelled job: %+v, stopped before the scheduler decided it", rec)
	}
	wantErr(t, "stop the cancelled job", s.ApplySchedule(ctx, epoch, store.Decision{At: at,
		Stops: []store.Stop{{AttemptID: ar, Reason: "cancelled", ReasonCode: "cancelled", Grace: 45 * time.Second}}}), nil)
	if rec, _ := s.Attempt(ctx, ar); !rec.StopRequested || rec.StopReasonCode != "cancelled" || !rec.Attempt.StopRequested ||
		rec.StopGraceS == nil || *rec.StopGraceS != 45 || rec.StopRequestedAt == nil || !rec.StopRequestedAt.Equal(at) {
		t.Errorf("attempt of the cancelled job: %+v, want stop requested at %v with a 45s grace", rec, at)
	}
	j, _ = s.Job(ctx, jobs[1].ID)
	j2, err := s.RequestCancel(ctx, jobs[1].ID, "tester", at)
	wantErr(t, "cancel again", err, nil)
	if diff := cmp.Diff(j, j2, equateEmpty); diff != "" {
		t.Errorf("second cancel changed the job (-first +second):\n%s", diff)
	}
	j, err = s.RequestCancel(ctx, jobs[2].ID, "tester", at)
	wantErr(t, "cancel finished", err, nil)
	if j.State != gpufleet.JobSucceeded || j.CancelRequested {
		t.Errorf("finished job after cancel: %s cancel_requested %v", j.State, j.CancelRequested)
	}
	_, err = s.RequestCancel(ctx, "j-nope", "tester", at)
	wantErr(t, "cancel unknown", err, gpufleet.ErrNotFound)
	j = update(t, s, ar, gpufleet.AttemptStopped)
	if j.State != gpufleet.JobCancelled || store.Requeued(j) {
		t.Errorf("cancelled job once stopped: %s", j.State)
	}
	if got := kinds(events(t, s, store.EventFilter{Object: jobs[1].ID})); !cmp.Equal(got, []string{"job.submitted", "job.scheduled", "job.running", "job.cancel_requested", "job.cancelled"}) {
		t.Errorf("events %v", got)
	}
	if got := kinds(events(t, s, store.EventFilter{Object: jobs[0].ID})); !cmp.Equal(got, []string{"job.submitted", "job.cancelled"}) {
		t.Errorf("events %v", got)
	}
}

func testActiveJobs(t *testing.T, s store.Store) {
	jobs := submit(t, s, newJob("team-a", "0", ""), newJob("team-b", "1", ""), newJob("team-a", "2", ""), newJob("team-a", "3", ""), newJob("team-a", "4", ""))
	epoch := lead(t, s)
	a0 := place(t, s, epoch, jobs[0].ID, "n1")
	update(t, s, a0, gpufleet.AttemptRunning)
	a1 := place(t, s, epoch, jobs[1].ID, "n1")
	update(t, s, a1, gpufleet.AttemptSucceeded)
	a2 := place(t, s, epoch, jobs[2].ID, "n2")
	update(t, s, a2, gpufleet.AttemptLost)
	place(t, s, epoch, jobs[2].ID, "n3")
	if _, err := s.RequestCancel(t.Context(), jobs[3].ID, "tester", T0); err != nil {
		t.Fatal(err)
	}
	got, err := s.ActiveJobs(t.Context())
	wantErr(t, "active", err, nil)
	type row struct {
		Name     string
		State    gpufleet.JobState
		Attempts int
	}
	var rows []row
	for _, j := range got {
		rows = append(rows, row{j.Name, j.State, len(j.Attempts)})
	}
	want := []row{{"0", "running", 1}, {"2", "scheduled", 2}, {"4", "queued", 0}}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("active jobs (-want +got):\n%s", diff)
	}
}

func testNodeAttempts(t *testing.T, s store.Store) {
	ctx := t.Context()
	jobs := submit(t, s, newJob("team-a", "0", ""), newJob("team-a", "1", ""), newJob("team-b", "2", ""))
	epoch := lead(t, s)
	d := store.Decision{At: T0, Starts: []store.Start{
		{JobID: jobs[0].ID, AttemptID: "a-1", Nodes: []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"g0"}}, {Name: "n2", GPUs: []string{"g0"}}}},
		{JobID: jobs[1].ID, AttemptID: "a-2", Nodes: []gpufleet.AttemptNode{{Name: "n2", GPUs: []string{"g1"}}}, Fraction: 0.25},
		{JobID: jobs[2].ID, AttemptID: "a-3", Nodes: []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"g1"}}}},
	}}
	wantErr(t, "apply", s.ApplySchedule(ctx, epoch, d), nil)
	update(t, s, "a-3", gpufleet.AttemptFailed)
	ids := func(node string) []string {
		as, err := s.NodeAttempts(ctx, node)
		wantErr(t, "node attempts", err, nil)
		var out []string
		for _, a := range as {
			out = append(out, fmt.Sprintf("%s %s %g", a.ID, a.Team, a.Fraction))
		}
		return out
	}
	for node, want := range map[string][]string{
		"n1": {"a-1 team-a 1"},
		"n2": {"a-1 team-a 1", "a-2 team-a 0.25"},
		"n9": nil,
		"":   {"a-1 team-a 1", "a-2 team-a 0.25"},
	} {
		if diff := cmp.Diff(want, ids(node)); diff != "" {
			t.Errorf("attempts on %q (-want +got):\n%s", node, diff)
		}
	}
}

// testRanks: a multi-node attempt succeeds only once every node's rank
// has; a failure on any node ends it at once.
func testRanks(t *testing.T, s store.Store) {
	ctx := t.Context()
	jobs := submit(t, s, newJob("team-a", "0", ""), newJob("team-a", "1", ""))
	epoch := lead(t, s)
	two := []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"g0"}}, {Name: "n2", GPUs: []string{"g0"}}}
	d := store.Decision{At: T0, Starts: []store.Start{
		{JobID: jobs[0].ID, AttemptID: "a-1", Nodes: two},
		{JobID: jobs[1].ID, AttemptID: "a-2", Nodes: two},
	}}
	wantErr(t, "apply", s.ApplySchedule(ctx, epoch, d), nil)
	code := 0
	report := func(attempt, node string, st gpufleet.AttemptState, gs float64) gpufleet.Job {
		t.Helper()
		j, err := s.UpdateAttempt(ctx, store.AttemptUpdate{AttemptID: attempt, Node: node, State: st, ExitCode: &code, GPUSeconds: gs,
			At: T0.Add(time.Hour), Actor: "agent:" + node})
		wantErr(t, attempt+" from "+node, err, nil)
		return j
	}
	report("a-1", "n1", gpufleet.AttemptRunning, 0)
	report("a-1", "n2", gpufleet.AttemptRunning, 0)
	j := report("a-1", "n2", gpufleet.AttemptSucceeded, 50)
	if a := j.Attempts[0]; a.State != gpufleet.AttemptRunning || j.State != gpufleet.JobRunning || a.GPUSeconds != 50 {
		t.Fatalf("after rank n2 succeeded: attempt %s, job %s, gpu-seconds %g; want running, running, 50", a.State, j.State, a.GPUSeconds)
	}
	report("a-1", "n2", gpufleet.AttemptSucceeded, 50) // a resent report changes nothing
	if j := getJob(t, s, jobs[0].ID); j.Attempts[0].State != gpufleet.AttemptRunning {
		t.Fatalf("a resent rank report ended the attempt: %s", j.Attempts[0].State)
	}
	j = report("a-1", "n1", gpufleet.AttemptSucceeded, 100)
	if a := j.Attempts[0]; a.State != gpufleet.AttemptSucceeded || j.State != gpufleet.JobSucceeded {
		t.Fatalf("after both ranks succeeded: attempt %s, job %s", a.State, j.State)
	}
	if a := j.Attempts[0]; a.GPUSeconds != 150 {
		t.Errorf("gpu-seconds %g, want the nodes' totals added up, 100 + 50", a.GPUSeconds)
	}
	evs := events(t, s, store.EventFilter{Object: "a-1"})
	if got := strings.Join(kinds(evs), " "); !strings.HasSuffix(got, "attempt.running attempt.rank_succeeded attempt.rank_succeeded attempt.succeeded") {
		t.Errorf("events %s: want a rank_succeeded for each node, then the attempt's success", got)
	}

	report("a-2", "n1", gpufleet.AttemptSucceeded, 10)
	code = 1
	j = report("a-2", "n2", gpufleet.AttemptFailed, 10)
	if a := j.Attempts[0]; a.State != gpufleet.AttemptFailed {
		t.Fatalf("a rank failed after the other succeeded: attempt %s, want failed", a.State)
	}
}

// testWork: an attempt keeps the last work count its node reported; a
// multi-node attempt the largest of its nodes'; WorkHistory returns the
// newest ended attempts of the team's namesake jobs in the same unit.
func testWork(t *testing.T, s store.Store) {
	ctx := t.Context()
	counted := func(name, unit string) gpufleet.Job {
		j := newJob("team-a", name, "")
		j.Work = &gpufleet.WorkCounter{Metric: `tokens=(\d+)`, Unit: unit}
		return j
	}
	other := newJob("team-b", "train", "")
	other.Work = &gpufleet.WorkCounter{Metric: `tokens=(\d+)`, Unit: "tokens"}
	jobs := submit(t, s, counted("train", "tokens"), counted("train", "tokens"), counted("train", "samples"), counted("gang", "tokens"), other)
	if w := getJob(t, s, jobs[0].ID).Work; w == nil || w.Unit != "tokens" {
		t.Fatalf("stored work counter %+v, want the submitted one", w)
	}
	epoch := lead(t, s)
	f := func(v float64) *float64 { return &v }
	code := 0
	report := func(attempt, node string, st gpufleet.AttemptState, energy float64, work *float64, at time.Duration) gpufleet.Job {
		t.Helper()
		j, err := s.UpdateAttempt(ctx, store.AttemptUpdate{AttemptID: attempt, Node: node, State: st, ExitCode: &code,
			EnergyJoules: energy, Work: work, At: T0.Add(at)})
		wantErr(t, attempt+" from "+node, err, nil)
		return j
	}
	var single []string
	for i, j := range []gpufleet.Job{jobs[0], jobs[1], jobs[2], jobs[4]} {
		single = append(single, place(t, s, epoch, j.ID, "n1"))
		report(single[i], "n1", gpufleet.AttemptRunning, 10, f(5), time.Hour)
	}
	if j := report(single[0], "n1", gpufleet.AttemptRunning, 20, nil, time.Hour); *j.Attempts[0].Work != 5 {
		t.Errorf("a report without work lost the count: %g", *j.Attempts[0].Work)
	}
	for i, a := range single {
		j := report(a, "n1", gpufleet.AttemptSucceeded, 100, f(float64(1000*(i+1))), time.Duration(i+2)*time.Hour)
		if w := j.Attempts[0].Work; w == nil || *w != float64(1000*(i+1)) {
			t.Errorf("attempt %d work %v, want the last count %d", i, w, 1000*(i+1))
		}
	}
	two := []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"g0"}}, {Name: "n2", GPUs: []string{"g0"}}}
	wantErr(t, "apply gang", s.ApplySchedule(ctx, epoch, store.Decision{At: T0, Starts: []store.Start{{JobID: jobs[3].ID, AttemptID: "a-gang", Nodes: two}}}), nil)
	report("a-gang", "n1", gpufleet.AttemptRunning, 10, f(700), time.Hour)
	j := report("a-gang", "n2", gpufleet.AttemptRunning, 10, f(300), time.Hour)
	if w := j.Attempts[0].Work; w == nil || *w != 700 {
		t.Errorf("gang work %v, want the largest node's count, 700", w)
	}
	if j := getJob(t, s, jobs[3].ID); j.Attempts[0].EnergyJoules != 20 {
		t.Errorf("gang energy %g, want the nodes' summed, 20", j.Attempts[0].EnergyJoules)
	}

	hist, err := s.WorkHistory(ctx, "team-a", "train", "tokens", 10)
	wantErr(t, "history", err, nil)
	var ids []string
	for _, a := range hist {
		ids = append(ids, a.ID)
	}
	if want := []string{single[1], single[0]}; !cmp.Equal(ids, want) {
		t.Errorf("history %v, want team-a's train attempts in tokens, newest first %v", ids, want)
	}
	if hist, _ := s.WorkHistory(ctx, "team-a", "train", "tokens", 1); len(hist) != 1 || hist[0].ID != single[1] {
		t.Errorf("history limited to 1: %v", hist)
	}
	if hist, _ := s.WorkHistory(ctx, "team-a", "gang", "tokens", 10); len(hist) != 0 {
		t.Errorf("history of a running attempt: %v, want none (only ended attempts measure)", hist)
	}
}

// testRuns: Runs returns the jobs that succeeded, newest first, with how
// long their runs held GPUs in all (from placement, T0+1m here, to the
// end); failed and running jobs are not runs.
func testRuns(t *testing.T, s store.Store) {
	ctx := t.Context()
	wide := newJob("team-a", "", "")
	wide.Resources.GPUs, wide.Command = 4, []string{"python", "train.py"}
	jobs := submit(t, s, newJob("team-a", "train", ""), newJob("team-a", "train", ""), newJob("team-b", "eval", ""), wide)
	epoch := lead(t, s)
	code := 0
	report := func(attempt string, st gpufleet.AttemptState, at time.Duration) {
		t.Helper()
		_, err := s.UpdateAttempt(ctx, store.AttemptUpdate{AttemptID: attempt, Node: "n1", State: st, ExitCode: &code, At: T0.Add(at)})
		wantErr(t, attempt, err, nil)
	}
	for i, j := range jobs {
		a := place(t, s, epoch, j.ID, "n1")
		report(a, gpufleet.AttemptRunning, time.Hour)
		switch i {
		case 0, 3:
			report(a, gpufleet.AttemptSucceeded, time.Duration(3+i)*time.Hour)
		case 1:
			code = 1
			report(a, gpufleet.AttemptFailed, 2*time.Hour)
			code = 0
		}
	}
	runs, err := s.Runs(ctx, time.Time{}, 10)
	wantErr(t, "runs", err, nil)
	want := []store.FinishedRun{
		{Job: jobs[3].ID, Team: "team-a", Command: []string{"python", "train.py"}, GPUs: 4, Finished: T0.Add(6 * time.Hour), Ran: 6*time.Hour - time.Minute},
		{Job: jobs[0].ID, Team: "team-a", Name: "train", Command: []string{"sleep", "1"}, GPUs: 1, Finished: T0.Add(3 * time.Hour), Ran: 3*time.Hour - time.Minute},
	}
	if diff := cmp.Diff(want, runs); diff != "" {
		t.Errorf("runs (-want +got):\n%s", diff)
	}
	if runs, _ := s.Runs(ctx, T0.Add(4*time.Hour), 10); len(runs) != 1 || runs[0].Job != jobs[3].ID {
		t.Errorf("runs since 4h: %+v, want the one that finished at 6h", runs)
	}
	if runs, _ := s.Runs(ctx, time.Time{}, 1); len(runs) != 1 || runs[0].Job != jobs[3].ID {
		t.Errorf("runs limited to 1: %+v, want the newest", runs)
	}
}

func testEventsFlow(t *testing.T, s store.Store) {
	id := submit(t, s, newJob("team-a", "a", ""))[0].ID
	epoch := lead(t, s)
	a := place(t, s, epoch, id, "n1")
	update(t, s, a, gpufleet.AttemptRunning)
	code := 1
	if _, err := s.UpdateAttempt(t.Context(), store.AttemptUpdate{AttemptID: a, State: gpufleet.AttemptFailed, ExitCode: &code, Actor: "agent:n1"}); err != nil {
		t.Fatal(err)
	}
	if got := kinds(events(t, s, store.EventFilter{Object: id})); !cmp.Equal(got, []string{"job.submitted", "job.scheduled", "job.running", "job.failed"}) {
		t.Errorf("job events %v", got)
	}
	evs := events(t, s, store.EventFilter{Object: a})
	if got := kinds(evs); !cmp.Equal(got, []string{"attempt.started", "attempt.running", "attempt.failed"}) {
		t.Errorf("attempt events %v", got)
	}
	for _, e := range evs {
		if e.Team != "team-a" {
			t.Errorf("event %s team %q", e.Kind, e.Team)
		}
	}
	if evs[0].Actor != "scheduler" || evs[2].Actor != "agent:n1" {
		t.Errorf("actors %q %q, want scheduler and agent:n1", evs[0].Actor, evs[2].Actor)
	}
}

func testEventsFilter(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i := range 5 {
		team := "team-a"
		if i%2 == 1 {
			team = "team-b"
		}
		e := gpufleet.Event{At: T0.Add(time.Duration(i) * time.Second), Actor: "admin", Kind: "test.event", Object: fmt.Sprint("o", i%3), Team: team, Detail: fmt.Sprint(i)}
		wantErr(t, "append", s.AppendEvent(ctx, e), nil)
	}
	wantErr(t, "kindless", s.AppendEvent(ctx, gpufleet.Event{}), gpufleet.ErrInvalid)
	all := events(t, s, store.EventFilter{})
	if len(all) != 5 || all[0].Detail != "0" || !all[4].At.Equal(T0.Add(4*time.Second)) || all[0].ID >= all[1].ID {
		t.Fatalf("events %+v", all)
	}
	details := func(evs []gpufleet.Event) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Detail)
		}
		return out
	}
	for name, tc := range map[string]struct {
		f    store.EventFilter
		want []string
	}{
		"one team":            {f: store.EventFilter{Team: "team-b"}, want: []string{"1", "3"}},
		"one object":          {f: store.EventFilter{Object: "o1"}, want: []string{"1", "4"}},
		"team and object":     {f: store.EventFilter{Team: "team-a", Object: "o1"}, want: []string{"4"}},
		"after an id":         {f: store.EventFilter{AfterID: all[2].ID}, want: []string{"3", "4"}},
		"limited":             {f: store.EventFilter{Limit: 2}, want: []string{"0", "1"}},
		"after and limited":   {f: store.EventFilter{AfterID: all[1].ID, Limit: 2}, want: []string{"2", "3"}},
		"after the last":      {f: store.EventFilter{AfterID: all[4].ID}, want: nil},
		"unknown team":        {f: store.EventFilter{Team: "team-z"}, want: nil},
		"limit above the max": {f: store.EventFilter{Limit: 1 << 20}, want: []string{"0", "1", "2", "3", "4"}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, details(events(t, s, tc.f))); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func testUsage(t *testing.T, s store.Store) {
	ctx := t.Context()
	d1 := time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)
	d2 := d1.AddDate(0, 0, 1)
	f := func(v float64) *float64 { return &v }
	rows := []store.UsageRow{
		{Team: "team-a", Model: "h100", Day: d1.Add(3 * time.Hour), GPUSeconds: 10, EffectiveGPUSeconds: 5, EnergyJoules: 100, FacilityJoules: f(130)},
		{Team: "team-a", Model: "h100", Day: d1.Add(20 * time.Hour), GPUSeconds: 1, EffectiveGPUSeconds: 1, EnergyJoules: 10},
		{Team: "team-a", Model: "a100", Day: d1, GPUSeconds: 2},
		{Team: "team-b", Model: "h100", Day: d2.Add(time.Hour), GPUSeconds: 7},
	}
	wantErr(t, "add", s.AddUsage(ctx, rows), nil)
	wantErr(t, "add again", s.AddUsage(ctx, rows[:1]), nil)
	wantErr(t, "bad row", s.AddUsage(ctx, []store.UsageRow{{Model: "h100", Day: d1}}), gpufleet.ErrInvalid)
	for name, tc := range map[string]struct {
		team     string
		from, to time.Time
		want     []store.UsageRow
	}{
		"everything": {want: []store.UsageRow{
			{Team: "team-a", Model: "a100", Day: d1, GPUSeconds: 2, FacilityJoules: f(0)},
			// Facility energy as given, else at a PUE of 1: 130 + 10 + 130.
			{Team: "team-a", Model: "h100", Day: d1, GPUSeconds: 21, EffectiveGPUSeconds: 11, EnergyJoules: 210, FacilityJoules: f(270)},
			{Team: "team-b", Model: "h100", Day: d2, GPUSeconds: 7, FacilityJoules: f(0)},
		}},
		"one team": {team: "team-b", want: []store.UsageRow{{Team: "team-b", Model: "h100", Day: d2, GPUSeconds: 7, FacilityJoules: f(0)}}},
		"first day only": {to: d2, want: []store.UsageRow{
			{Team: "team-a", Model: "a100", Day: d1, GPUSeconds: 2, FacilityJoules: f(0)},
			{Team: "team-a", Model: "h100", Day: d1, GPUSeconds: 21, EffectiveGPUSeconds: 11, EnergyJoules: 210, FacilityJoules: f(270)},
		}},
		"from mid second day": {from: d2.Add(12 * time.Hour), want: []store.UsageRow{{Team: "team-b", Model: "h100", Day: d2, GPUSeconds: 7, FacilityJoules: f(0)}}},
		"nothing":             {team: "team-a", from: d2, want: []store.UsageRow{}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := s.Usage(ctx, tc.team, tc.from, tc.to)
			wantErr(t, "usage", err, nil)
			if diff := cmp.Diff(tc.want, got, equateEmpty); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
		})
	}
}

// testRollups checks that minute rollups add up when the same minute is
// written twice, read back by node, GPU and time, sum idle allocated time
// per team and model, and go at the prune.
func testRollups(t *testing.T, s store.Store) {
	ctx := t.Context()
	m0 := time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	sample := func(gpu, team string, at time.Time, eff float64, mem int64, temp float64) store.RollupRow {
		r := store.RollupRow{GPU: gpu, Minute: at, Node: "n1", Model: "h100-sxm-80gb", Team: team, Samples: 1,
			EnergyJoules: 600, MemoryUsedBytesMax: i(mem), TemperatureCMax: f(temp)}
		if team != "" {
			r.AllocatedS = 20
			if eff < 0.05 {
				r.IdleAllocatedS = 20
			}
		}
		r.Utilization.Add(f(eff))
		r.Effective.Add(f(eff))
		r.PowerWatts.Add(f(300))
		return r
	}
	rows := []store.RollupRow{
		sample("GPU-a", "team-a", m0.Add(10*time.Second), 0.9, 10, 60),
		sample("GPU-b", "", m0, 0, 0, 30),
		sample("GPU-a", "team-a", m0.Add(time.Minute), 0.01, 5, 50),
		sample("GPU-b", "team-b", m0.Add(2*time.Minute), 0.02, 7, 40),
	}
	wantErr(t, "add", s.AddRollups(ctx, rows), nil)
	// A second write of the same minute adds up: sums, counts, energy;
	// maxima keep the larger; an empty team keeps the known one.
	again := sample("GPU-a", "", m0.Add(50*time.Second), 0.5, 20, 55)
	again.SMActivity.Add(f(0.4))
	wantErr(t, "add again", s.AddRollups(ctx, []store.RollupRow{again}), nil)
	wantErr(t, "bad row", s.AddRollups(ctx, []store.RollupRow{{GPU: "GPU-a"}}), gpufleet.ErrInvalid)

	got, err := s.Rollups(ctx, store.RollupFilter{GPUs: []string{"GPU-a"}, From: m0, To: m0.Add(time.Minute)})
	wantErr(t, "rollups", err, nil)
	want := store.RollupRow{GPU: "GPU-a", Minute: m0, Node: "n1", Model: "h100-sxm-80gb", Team: "team-a", Samples: 2,
		Utilization: store.Mean{Sum: 1.4, N: 2}, Effective: store.Mean{Sum: 1.4, N: 2}, SMActivity: store.Mean{Sum: 0.4, N: 1},
		PowerWatts: store.Mean{Sum: 600, N: 2}, EnergyJoules: 1200, MemoryUsedBytesMax: i(20), TemperatureCMax: f(60), AllocatedS: 20}
	if diff := cmp.Diff([]store.RollupRow{want}, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("rollups (-want +got):\n%s", diff)
	}
	if m := want.Utilization.Value(); m == nil || *m != 0.7 {
		t.Errorf("mean = %v, want 0.7", m)
	}
	if (store.Mean{}).Value() != nil {
		t.Error("the mean of no samples is not absent")
	}
	all, err := s.Rollups(ctx, store.RollupFilter{Node: "n1"})
	wantErr(t, "all", err, nil)
	var order []string
	for _, r := range all {
		order = append(order, r.GPU+"@"+r.Minute.Format("15:04"))
	}
	if diff := cmp.Diff([]string{"GPU-a@05:06", "GPU-b@05:06", "GPU-a@05:07", "GPU-b@05:08"}, order); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}

	idle, err := s.IdleAllocated(ctx, "", time.Time{}, time.Time{})
	wantErr(t, "idle", err, nil)
	wantIdle := []store.IdleAllocated{{Team: "team-a", Model: "h100-sxm-80gb", Seconds: 20}, {Team: "team-b", Model: "h100-sxm-80gb", Seconds: 20}}
	if diff := cmp.Diff(wantIdle, idle); diff != "" {
		t.Errorf("idle allocated (-want +got):\n%s", diff)
	}
	idle, err = s.IdleAllocated(ctx, "team-b", m0, m0.Add(2*time.Minute))
	wantErr(t, "idle team-b", err, nil)
	if len(idle) != 0 {
		t.Errorf("idle minutes of team-b before its minute: %+v", idle)
	}

	n, err := s.PruneRollups(ctx, m0.Add(2*time.Minute))
	wantErr(t, "prune", err, nil)
	if n != 3 {
		t.Errorf("pruned %d rows, want 3", n)
	}
	all, err = s.Rollups(ctx, store.RollupFilter{})
	wantErr(t, "after prune", err, nil)
	if len(all) != 1 || all[0].GPU != "GPU-b" {
		t.Errorf("after prune: %+v", all)
	}
}

// testConcurrent has 50 goroutines submit 40 jobs each, one call per job,
// with request ids that collide across goroutines, while readers list and
// read jobs. Every (team, request id) must map to exactly one job, created
// once, and nobody may see an error (SQLITE_BUSY above all).
func testConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const writers, perWriter, keys = 50, 40, 1000
	type key struct{ team, rid string }
	var (
		mu      sync.Mutex
		ids     = map[key]map[string]bool{}
		created = map[key]int{}
		errs    []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 4 {
		readers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				switch (r + i) % 4 {
				case 0:
					_, _, err = s.ListJobs(ctx, store.JobFilter{Limit: 50})
				case 1:
					_, err = s.ActiveJobs(ctx)
				case 2:
					_, err = s.Events(ctx, store.EventFilter{Limit: 50})
				case 3:
					_, err = s.Job(ctx, "j-0000000000000000")
					if errors.Is(err, gpufleet.ErrNotFound) {
						err = nil
					}
				}
				if err != nil {
					fail(fmt.Errorf("reader: %w", err))
					return
				}
			}
		})
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				n := (w*perWriter + i) % keys // each key twice, by writers w and w+25
				k := key{team: fmt.Sprint("team-", n%2), rid: fmt.Sprint("req-", n)}
				res, err := s.SubmitJobs(ctx, []gpufleet.Job{newJob(k.team, k.rid, k.rid)}, "tester")
				if err == nil && res[0].Err != nil {
					err = res[0].Err
				}
				if err != nil {
					fail(fmt.Errorf("writer %d: %w", w, err))
					return
				}
				mu.Lock()
				if ids[k] == nil {
					ids[k] = map[string]bool{}
				}
				ids[k][res[0].Job.ID] = true
				if res[0].Created {
					created[k]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(ids) != keys {
		t.Errorf("%d request ids seen, want %d", len(ids), keys)
	}
	for k, set := range ids {
		if len(set) != 1 || created[k] != 1 {
			t.Errorf("%v: %d job ids, created %d times; want one job created once", k, len(set), created[k])
		}
	}
	total := 0
	f := store.JobFilter{Limit: 1000}
	for {
		js, next, err := s.ListJobs(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		total += len(js)
		if next == "" {
			break
		}
		f.After = next
	}
	if total != keys {
		t.Errorf("%d jobs stored, want %d", total, keys)
	}
}

func testRacks(t *testing.T, s store.Store) {
	ctx := t.Context()
	cooling, pue := gpufleet.Watts(20000), 1.3
	r1 := gpufleet.Rack{Name: "r1", PowerBudgetWatts: 17300, ProductionReserveWatts: 2000, CoolingWatts: &cooling, PUE: &pue, Nodes: []string{"n1", "n2"}}
	wantErr(t, "put r1", s.PutRack(ctx, r1, "admin"), nil)
	wantErr(t, "put r0", s.PutRack(ctx, gpufleet.Rack{Name: "r0", PowerBudgetWatts: 10000}, "admin"), nil)
	wantErr(t, "reserve over the budget", s.PutRack(ctx, gpufleet.Rack{Name: "r2", PowerBudgetWatts: 1000, ProductionReserveWatts: 2000}, "admin"), gpufleet.ErrInvalid)
	wantErr(t, "a PUE below 1", s.PutRack(ctx, gpufleet.Rack{Name: "r2", PowerBudgetWatts: 1000, PUE: new(float64)}, "admin"), gpufleet.ErrInvalid)
	got, err := s.Racks(ctx)
	wantErr(t, "racks", err, nil)
	want := []gpufleet.Rack{{Name: "r0", PowerBudgetWatts: 10000, Nodes: []string{}}, r1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("racks (-want +got):\n%s", diff)
	}
	r1.PowerBudgetWatts, r1.Nodes = 15000, nil
	wantErr(t, "replace r1", s.PutRack(ctx, r1, "admin"), nil)
	got, _ = s.Racks(ctx)
	if len(got) != 2 || got[1].PowerBudgetWatts != 15000 || len(got[1].Nodes) != 0 {
		t.Errorf("replaced r1: %+v", got)
	}
	wantErr(t, "delete r0", s.DeleteRack(ctx, "r0", "admin"), nil)
	wantErr(t, "delete r0 again", s.DeleteRack(ctx, "r0", "admin"), gpufleet.ErrNotFound)
	evs, _ := s.Events(ctx, store.EventFilter{Object: "r1"})
	if len(evs) != 2 || evs[0].Kind != "rack.put" {
		t.Errorf("rack events %+v, want two rack.put", evs)
	}

	// A node is listed by one rack at most: a rack that lists it takes it
	// from another's list, and a rack label lists it only where none does.
	wantErr(t, "put r1 with n1, n2", s.PutRack(ctx, gpufleet.Rack{Name: "r1", PowerBudgetWatts: 15000, Nodes: []string{"n1", "n2"}}, "admin"), nil)
	wantErr(t, "put r2 taking n2", s.PutRack(ctx, gpufleet.Rack{Name: "r2", PowerBudgetWatts: 15000, Nodes: []string{"n2", "n3"}}, "admin"), nil)
	for name, tc := range map[string]struct{ node, rack, want string }{
		"a node no rack lists joins its label's rack": {node: "n4", rack: "r2", want: "r2"},
		"a node another rack lists stays there":       {node: "n1", rack: "r2", want: "r1"},
		"a rack that does not exist lists nothing":    {node: "n5", rack: "r9", want: ""},
	} {
		got, err := s.AssignRack(ctx, tc.node, tc.rack, "agent:"+tc.node)
		wantErr(t, name, err, nil)
		if got != tc.want {
			t.Errorf("%s: AssignRack(%s, %s) = %q, want %q", name, tc.node, tc.rack, got, tc.want)
		}
	}
	got, _ = s.Racks(ctx)
	lists := map[string][]string{}
	for _, r := range got {
		lists[r.Name] = r.Nodes
	}
	if diff := cmp.Diff(map[string][]string{"r1": {"n1"}, "r2": {"n2", "n3", "n4"}}, lists); diff != "" {
		t.Errorf("racks' nodes (-want +got):\n%s", diff)
	}
	evs, _ = s.Events(ctx, store.EventFilter{Object: "r2"})
	if len(evs) != 2 || evs[0].Kind != "rack.put" || !strings.Contains(evs[0].Detail, "moved n2 from r1") || evs[1].Kind != "rack.assigned" || !strings.Contains(evs[1].Detail, "n4") {
		t.Errorf("r2's events %+v, want rack.put naming n2 moved from r1, then rack.assigned naming n4", evs)
	}
}

func testStacks(t *testing.T, s store.Store) {
	ctx := t.Context()
	v := map[string]string{"driver": "550.54.15", "cuda": "12.4", "torch": "2.5.1+cu124"}
	st, err := s.CreateStack(ctx, gpufleet.Stack{Name: "prod-550", Versions: v, Notes: "H100 fleet, Q4"}, "alice")
	wantErr(t, "create", err, nil)
	if st.State != gpufleet.StackCandidate || st.CreatedBy != "alice" || len(st.Validated) != 0 {
		t.Errorf("created %+v, want a candidate by alice", st)
	}
	again, err := s.CreateStack(ctx, gpufleet.Stack{Name: "prod-550", Versions: v}, "bob")
	wantErr(t, "create again, same versions", err, nil)
	if again.CreatedBy != "alice" || again.Notes != "H100 fleet, Q4" {
		t.Errorf("created again %+v, want the stack as it was", again)
	}
	_, err = s.CreateStack(ctx, gpufleet.Stack{Name: "prod-550", Versions: map[string]string{"driver": "555.42.02"}}, "bob")
	wantErr(t, "other versions under the name", err, gpufleet.ErrInvalid)
	_, err = s.CreateStack(ctx, gpufleet.Stack{Name: "bad", Versions: map[string]string{"pytorch": "2.5"}}, "bob")
	wantErr(t, "unknown component", err, gpufleet.ErrInvalid)
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	val := gpufleet.StackValidation{GPUModel: "h100-sxm-80gb", Nodes: []string{"h1", "h2"}, Evidence: "healthy, no incompatible finding", At: at, ApprovedBy: "alice"}
	st, err = s.ValidateStack(ctx, "prod-550", val)
	wantErr(t, "validate", err, nil)
	if st.State != gpufleet.StackValidated || len(st.Validated) != 1 || st.Validated[0].GPUModel != "h100-sxm-80gb" {
		t.Errorf("validated %+v", st)
	}
	val.Nodes = []string{"h3"}
	st, _ = s.ValidateStack(ctx, "prod-550", val)
	if len(st.Validated) != 1 || st.Validated[0].Nodes[0] != "h3" {
		t.Errorf("validated again for the same model %+v, want the evidence replaced", st.Validated)
	}
	_, err = s.ValidateStack(ctx, "nope", val)
	wantErr(t, "validate an unknown stack", err, gpufleet.ErrNotFound)
	wantErr(t, "retire", s.RetireStack(ctx, "prod-550", "alice"), nil)
	wantErr(t, "retire again", s.RetireStack(ctx, "prod-550", "alice"), nil)
	wantErr(t, "retire an unknown stack", s.RetireStack(ctx, "nope", "alice"), gpufleet.ErrNotFound)
	_, err = s.ValidateStack(ctx, "prod-550", val)
	wantErr(t, "validate a retired stack", err, gpufleet.ErrInvalid)
	all, err := s.Stacks(ctx)
	wantErr(t, "stacks", err, nil)
	if len(all) != 1 || all[0].State != gpufleet.StackRetired || all[0].RetiredAt == nil || !cmp.Equal(all[0].Versions, v) {
		t.Errorf("stacks %+v", all)
	}
	evs, _ := s.Events(ctx, store.EventFilter{Object: "prod-550"})
	kinds := []string{}
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if len(kinds) != 4 || !slices.Contains(kinds, "stack.created") || !slices.Contains(kinds, "stack.retired") {
		t.Errorf("stack events %v, want created, validated twice, retired", kinds)
	}
}

func testRollouts(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := rollout.Rollout{ID: "ro-1", Stack: "prod-550", Target: map[string]string{"driver": "550.54.15"}, Canary: 1, Waves: []float64{1},
		CreatedAt: T0, CreatedBy: "alice"}
	wantErr(t, "plan", rollout.Plan(&r, []string{"n1", "n2"}), nil)
	wantErr(t, "put", s.PutRollout(ctx, r, "alice", "started"), nil)
	r.State, r.Reason = rollout.Halted, "node n1 failed a gate"
	wantErr(t, "put again", s.PutRollout(ctx, r, "leader", r.Reason), nil)
	got, err := s.Rollout(ctx, "ro-1")
	wantErr(t, "get", err, nil)
	if got.State != rollout.Halted || len(got.Nodes) != 2 || got.Nodes[0].Name != "n1" || !got.CreatedAt.Equal(T0) {
		t.Errorf("rollout %+v", got)
	}
	_, err = s.Rollout(ctx, "nope")
	wantErr(t, "unknown", err, gpufleet.ErrNotFound)
	all, err := s.Rollouts(ctx)
	if err != nil || len(all) != 1 {
		t.Errorf("rollouts %+v, %v", all, err)
	}
	evs, _ := s.Events(ctx, store.EventFilter{Object: "ro-1"})
	if kinds := kinds(evs); !cmp.Equal(kinds, []string{"rollout.running", "rollout.halted"}) {
		t.Errorf("rollout events %v", kinds)
	}
	wantErr(t, "versions of an unknown node", s.SetNodeVersions(ctx, "nope", map[string]string{"driver": "1"}, T0), gpufleet.ErrNotFound)
}

func testBench(t *testing.T, s store.Store) {
	ctx := t.Context()
	res := func(node, uuid, model, name string, peer *int, v float64, at time.Time) bench.Result {
		return bench.Result{Figure: bench.Figure{Measurement: bench.Measurement{Name: name, Test: bench.Copy, UUID: uuid, Model: model, GPUs: 1,
			Peer: peer, Unit: bench.BytesPerS, Rates: []float64{v}}, Value: v, Runs: 1}, Node: node, At: at, Trigger: bench.TriggerJoin, Order: "o"}
	}
	one := 1
	rs := []bench.Result{
		res("n1", "u1", "h100", "copy", nil, 1, T0),
		res("n1", "u1", "h100", "p2p", &one, 2, T0),
		res("n2", "u2", "a100", "copy", nil, 3, T0),
	}
	if err := s.AddBenchResults(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if err := s.AddBenchResults(ctx, []bench.Result{res("n1", "u1", "h100", "copy", nil, 4, T0.Add(time.Minute))}); err != nil {
		t.Fatal(err)
	}
	values := func(f store.BenchFilter) []float64 {
		t.Helper()
		got, err := s.BenchResults(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		for _, r := range got {
			out = append(out, r.Value)
		}
		return out
	}
	for name, tc := range map[string]struct {
		f    store.BenchFilter
		want []float64
	}{
		"all, oldest first":          {store.BenchFilter{}, []float64{1, 2, 3, 4}},
		"latest per gpu and figure":  {store.BenchFilter{Latest: true}, []float64{2, 3, 4}},
		"one node's latest":          {store.BenchFilter{Node: "n1", Latest: true}, []float64{2, 4}},
		"one model":                  {store.BenchFilter{Model: "a100"}, []float64{3}},
		"newest two, oldest first":   {store.BenchFilter{Limit: 2}, []float64{3, 4}},
		"nothing for an unknown one": {store.BenchFilter{Node: "n9"}, nil},
	} {
		if got := values(tc.f); !cmp.Equal(got, tc.want, equateEmpty) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	// Pruning keeps each GPU's newest figure whatever its age.
	n, err := s.PruneBenchResults(ctx, T0.Add(time.Hour))
	if err != nil || n != 1 {
		t.Errorf("pruned %d, %v; want the one superseded copy", n, err)
	}
	if got := values(store.BenchFilter{}); !cmp.Equal(got, []float64{2, 3, 4}) {
		t.Errorf("after pruning: %v", got)
	}
	got, _ := s.BenchResults(ctx, store.BenchFilter{Node: "n1", Latest: true})
	if diff := cmp.Diff(rs[1], got[0], cmpopts.EquateApproxTime(time.Microsecond)); diff != "" {
		t.Errorf("a result does not read back as written (-want +got):\n%s", diff)
	}

	w := bench.Workload{ID: "wb-1", Team: "team-a", CreatedBy: "token:x", CreatedAt: T0, GPUModels: []string{"h100", "l4"}, GPUs: 1,
		Metric: "tok/s=([0-9]+)", Unit: "tokens", Command: []string{"./b.sh"}, Jobs: []bench.WorkloadJob{{GPUModel: "h100", JobID: "j1"}}}
	w2 := w
	w2.ID, w2.Team, w2.CreatedAt = "wb-2", "team-b", T0.Add(time.Hour)
	for _, x := range []bench.Workload{w, w2} {
		if err := s.PutWorkloadBench(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	w.Jobs = append(w.Jobs, bench.WorkloadJob{GPUModel: "l4", JobID: "j2"})
	if err := s.PutWorkloadBench(ctx, w); err != nil {
		t.Fatal(err)
	}
	back, err := s.WorkloadBench(ctx, "wb-1")
	if err != nil || !cmp.Equal(back, w, cmpopts.EquateApproxTime(time.Microsecond)) {
		t.Errorf("workload bench reads back %+v, %v", back, err)
	}
	_, err = s.WorkloadBench(ctx, "wb-9")
	wantErr(t, "unknown workload bench", err, gpufleet.ErrNotFound)
	for team, want := range map[string][]string{"": {"wb-2", "wb-1"}, "team-a": {"wb-1"}, "team-c": nil} {
		ws, err := s.WorkloadBenches(ctx, team)
		var ids []string
		for _, x := range ws {
			ids = append(ids, x.ID)
		}
		if err != nil || !cmp.Equal(ids, want, equateEmpty) {
			t.Errorf("workload benches of %q: %v, %v; want %v", team, ids, err, want)
		}
	}
	wantErr(t, "a workload bench without a team", s.PutWorkloadBench(ctx, bench.Workload{ID: "wb-3"}), gpufleet.ErrInvalid)
}

// testImportHistory: finished jobs come back with their attempts, times
// and accounting; an unfinished one refuses the whole batch.
func testImportHistory(t *testing.T, s store.Store) {
	ctx := t.Context()
	at := func(h int) *time.Time { v := T0.Add(time.Duration(h) * time.Hour); return &v }
	code := 0
	done := gpufleet.Job{Team: "hist", Name: "old", State: gpufleet.JobSucceeded, Priority: gpufleet.Training,
		Resources: gpufleet.Resources{GPUs: 2}, Command: []string{"true"}, SubmittedAt: *at(-50), StartedAt: at(-49), FinishedAt: at(-45),
		Attempts: []gpufleet.Attempt{{State: gpufleet.AttemptSucceeded, Node: "n9", Nodes: []gpufleet.AttemptNode{{Name: "n9"}},
			StartedAt: at(-49), FinishedAt: at(-45), ExitCode: &code, Fraction: 1, GPUSeconds: 2 * 4 * 3600}}}
	running := done
	running.State = gpufleet.JobRunning
	wantErr(t, "a running job", s.ImportHistory(ctx, []gpufleet.Job{done, running}, "test"), gpufleet.ErrInvalid)
	wantErr(t, "import", s.ImportHistory(ctx, []gpufleet.Job{done, done}, "test"), nil)
	jobs, _, err := s.ListJobs(ctx, store.JobFilter{Team: "hist", Limit: 10})
	wantErr(t, "list", err, nil)
	if len(jobs) != 2 {
		t.Fatalf("%d jobs of the batch, want 2 (and none of the refused one)", len(jobs))
	}
	j := jobs[0]
	if j.State != gpufleet.JobSucceeded || !j.SubmittedAt.Equal(*at(-50)) || j.FinishedAt == nil || !j.FinishedAt.Equal(*at(-45)) || len(j.Attempts) != 1 {
		t.Fatalf("imported job %+v", j)
	}
	if a := j.Attempts[0]; a.GPUSeconds != 2*4*3600 || a.Node != "n9" || a.State != gpufleet.AttemptSucceeded || !a.StartedAt.Equal(*at(-49)) {
		t.Errorf("imported attempt %+v", a)
	}
	if act, err := s.ActiveJobs(ctx); err != nil || slices.ContainsFunc(act, func(x gpufleet.Job) bool { return x.Team == "hist" }) {
		t.Errorf("imported history is active: %v", err)
	}

	// The imported runs count in usage as live accounting counts them,
	// under the GPU model the job was limited to (the node is unknown
	// here), spread over the UTC days they ran in: usage and capacity read
	// the same history. done's attempts name no model and count nowhere.
	night := gpufleet.Job{Team: "hist", Name: "night", State: gpufleet.JobSucceeded, Priority: gpufleet.Training,
		Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"l4"}}, Command: []string{"true"}, SubmittedAt: *at(-11), StartedAt: at(-10), FinishedAt: at(-2),
		Attempts: []gpufleet.Attempt{{State: gpufleet.AttemptSucceeded, Node: "n8", Nodes: []gpufleet.AttemptNode{{Name: "n8"}},
			StartedAt: at(-10), FinishedAt: at(-2), ExitCode: &code, Fraction: 1, GPUSeconds: 8 * 3600, EnergyJoules: 8 * 3600 * 72}}}
	wantErr(t, "import across midnight", s.ImportHistory(ctx, []gpufleet.Job{night}, "test"), nil)
	rows, err := s.Usage(ctx, "hist", time.Time{}, time.Time{})
	wantErr(t, "usage", err, nil)
	sum, days := 0.0, map[time.Time]float64{}
	for _, r := range rows {
		if r.Model != "l4" {
			t.Errorf("usage row %+v: only the l4 job names its model", r)
		}
		sum += r.GPUSeconds
		days[r.Day] = r.GPUSeconds
	}
	first := at(-10).UTC().Truncate(24 * time.Hour)
	if math.Abs(sum-8*3600) > 1e-6 || len(days) != 2 ||
		math.Abs(days[first]-first.Add(24*time.Hour).Sub(*at(-10)).Seconds()) > 1e-6 {
		t.Errorf("usage rows %+v: want the 8 GPU-hours split at midnight", rows)
	}
}

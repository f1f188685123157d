package rollout

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// fleet is a toy fleet the tests drive the rollout against, as the leader
// and the agents would: drains stop the work, an update order switches
// the node's versions (once per key), a bad version makes it unhealthy.
type fleet struct {
	views   map[string]View
	ran     map[string]int // update keys run, per key
	bad     string         // a driver version that breaks the node
	updates []string       // node names, in the order updated
}

func newFleet(names ...string) *fleet {
	f := &fleet{views: map[string]View{}, ran: map[string]int{}}
	for _, n := range names {
		f.views[n] = View{State: gpufleet.NodeReady, Health: gpufleet.Healthy, Running: 1, Seen: true,
			Versions: map[string]string{"driver": "535.104.05", "cuda": "12.2", "agent": "v1"}}
	}
	return f
}

// apply carries out a step's actions and the agents' side of it.
func (f *fleet) apply(r Rollout, acts []Action) {
	for _, a := range acts {
		v := f.views[a.Node]
		switch a.Kind {
		case Drain:
			v.State, v.Running = gpufleet.NodeDraining, 0
		case Cordon:
			v.State = gpufleet.NodeCordoned
		case Validate:
			v.State = gpufleet.NodeValidating
		}
		f.views[a.Node] = v
	}
	// The agents' return-to-service checks: a node on the bad driver
	// fails it, the others return to service.
	for name, v := range f.views {
		if v.State != gpufleet.NodeValidating {
			continue
		}
		v.State = gpufleet.NodeReady
		if f.bad != "" && v.Versions["driver"] == f.bad {
			v.State, v.Reason = gpufleet.NodeRepairing, "validation failed: xid 79 while the check ran"
		}
		f.views[name] = v
	}
	for name := range f.views {
		o, ok := r.Order(name)
		if !ok {
			continue
		}
		f.ran[o.Key]++
		if f.ran[o.Key] > 1 {
			continue // an agent runs each order once
		}
		f.updates = append(f.updates, name)
		v := f.views[name]
		v.Versions = maps.Clone(o.Versions)
		v.Versions["agent"] = "v1"
		f.views[name] = v
	}
}

// run steps the rollout every minute until it stops changing state or an
// hour of steps pass, and returns it.
func run(t *testing.T, r Rollout, f *fleet, from time.Time, steps int) (Rollout, time.Time) {
	t.Helper()
	now := from
	for range steps {
		var acts []Action
		r, acts = Step(r, f.views, now)
		f.apply(r, acts)
		if r.State != Running && r.State != RollingBack {
			break
		}
		now = now.Add(time.Minute)
	}
	return r, now
}

func newRollout(t *testing.T, nodes ...string) Rollout {
	t.Helper()
	r := Rollout{ID: "r1", Stack: "prod-550", Target: map[string]string{"driver": "550.54.15", "cuda": "12.4"},
		Canary: 1, Waves: []float64{0.5, 1}, MaxUnavailable: 2, BakeS: 600, CreatedAt: t0, DrainPolicy: DrainPolicy{Mode: DrainNow}}
	if err := Plan(&r, nodes); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPlan(t *testing.T) {
	r := newRollout(t, "n5", "n1", "n3", "n2", "n4")
	var waves []string
	for _, n := range r.Nodes {
		waves = append(waves, fmt.Sprintf("%s:%d", n.Name, n.Wave))
	}
	if got := strings.Join(waves, " "); got != "n1:0 n2:1 n3:1 n4:2 n5:2" {
		t.Errorf("waves %s; want the canary n1, then half of the rest, then the rest", got)
	}
	for name, bad := range map[string]Rollout{
		"no node":             {},
		"canary beyond nodes": {Canary: 9},
		"falling shares":      {Waves: []float64{0.5, 0.2, 1}},
		"last share below 1":  {Waves: []float64{0.5}},
	} {
		nodes := []string{"a", "b"}
		if name == "no node" {
			nodes = nil
		}
		if err := Plan(&bad, nodes); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}

// TestGoodStack: the canary, then two waves, each node drained, updated
// once, baked, back in service; never more than MaxUnavailable at once.
func TestGoodStack(t *testing.T) {
	f := newFleet("n1", "n2", "n3", "n4", "n5")
	r := newRollout(t, "n1", "n2", "n3", "n4", "n5")
	peak := 0
	now := t0
	for range 200 {
		var acts []Action
		r, acts = Step(r, f.views, now)
		f.apply(r, acts)
		out := 0
		for _, v := range f.views {
			if v.State != gpufleet.NodeReady {
				out++
			}
		}
		peak = max(peak, out)
		if r.State != Running {
			break
		}
		now = now.Add(time.Minute)
	}
	if r.State != Done {
		t.Fatalf("state %s (%s), want done: %+v", r.State, r.Reason, r.Nodes)
	}
	if peak > r.MaxUnavailable {
		t.Errorf("%d nodes out of service at once, max unavailable %d", peak, r.MaxUnavailable)
	}
	if f.updates[0] != "n1" || len(f.updates) != 5 {
		t.Errorf("updated %v; want the canary n1 first and every node once", f.updates)
	}
	for k, n := range f.ran {
		if n != 1 {
			t.Errorf("update %s ordered to an agent %d times (it runs it once)", k, n)
		}
	}
	for name, v := range f.views {
		if v.State != gpufleet.NodeReady || v.Versions["driver"] != "550.54.15" {
			t.Errorf("%s: %s on driver %s; want back in service on the target", name, v.State, v.Versions["driver"])
		}
	}
	if done := now.Sub(t0); done < 3*r.bake() {
		t.Errorf("done after %s; three waves each bake %s", done, r.bake())
	}
}

// TestBadStackHaltsAtTheCanary: the canary goes unhealthy on the new
// driver; the rollout halts, the canary stays out of service with the
// reason, and no other node is touched. Rollback returns it.
func TestBadStackHaltsAtTheCanary(t *testing.T) {
	f := newFleet("n1", "n2", "n3")
	f.bad = "550.54.15"
	r := newRollout(t, "n1", "n2", "n3")
	r, now := run(t, r, f, t0, 100)
	if r.State != Halted || !strings.Contains(r.Reason, "node n1 failed a gate: validation: validation failed: xid 79") {
		t.Fatalf("state %s (%s), want halted at the canary", r.State, r.Reason)
	}
	if f.views["n1"].State != gpufleet.NodeCordoned {
		t.Errorf("the failed canary is %s, want kept out of service", f.views["n1"].State)
	}
	for _, n := range []string{"n2", "n3"} {
		if v := f.views[n]; v.State != gpufleet.NodeReady || v.Versions["driver"] != "535.104.05" {
			t.Errorf("%s touched: %s on %s", n, v.State, v.Versions["driver"])
		}
	}
	if r2, _ := Step(r, f.views, now.Add(time.Hour)); r2.State != Halted {
		t.Errorf("a halted rollout moved on: %s", r2.State)
	}
	back, err := Rollback(r, now)
	if err != nil {
		t.Fatal(err)
	}
	back, _ = run(t, back, f, now, 100)
	if back.State != RolledBack || f.views["n1"].Versions["driver"] != "535.104.05" || f.views["n1"].State != gpufleet.NodeReady {
		t.Errorf("rolled back %s; n1 %+v", back.State, f.views["n1"])
	}
}

// TestUpdateTimeout: a node that never comes back on the target versions
// fails after the update timeout.
func TestUpdateTimeout(t *testing.T) {
	f := newFleet("n1")
	r := newRollout(t, "n1")
	r.UpdateTimeoutS = 300
	now := t0
	for range 20 {
		var acts []Action
		r, acts = Step(r, f.views, now)
		for _, a := range acts { // the drain, never the update
			v := f.views[a.Node]
			v.Running = 0
			f.views[a.Node] = v
		}
		if r.State != Running {
			break
		}
		now = now.Add(time.Minute)
	}
	if r.State != Halted || !strings.Contains(r.Reason, "not on the target versions") {
		t.Errorf("state %s (%s), want halted on the timeout", r.State, r.Reason)
	}
}

// TestResumeFromTheStoredState: stepping from a copy of the state at any
// point gives the same result as going on: the state is all there is.
func TestResumeFromTheStoredState(t *testing.T) {
	f := newFleet("n1", "n2", "n3", "n4")
	r := newRollout(t, "n1", "n2", "n3", "n4")
	now := t0
	for i := range 200 {
		var acts []Action
		saved := r // what the store holds after the last step
		r, acts = Step(saved, f.views, now)
		if i%7 == 3 { // the leader crashed before applying: a new one steps the saved state again
			r, acts = Step(saved, f.views, now)
		}
		f.apply(r, acts)
		if r.State != Running {
			break
		}
		now = now.Add(time.Minute)
	}
	if r.State != Done {
		t.Fatalf("state %s (%s)", r.State, r.Reason)
	}
	if slices.Sort(f.updates); len(f.updates) != 4 || slices.Compact(slices.Clone(f.updates))[3] != "n4" {
		t.Errorf("updates %v, want each node once", f.updates)
	}
}

// TestProductionLastAndTheSpare: within a wave the nodes without
// production work drain first, and a node whose drain would take the
// production spare away waits, saying why, until it would not.
func TestProductionLastAndTheSpare(t *testing.T) {
	f := newFleet("a", "b", "c")
	r := Rollout{ID: "r1", Stack: "s", Target: map[string]string{"driver": "550.54.15"}, Waves: []float64{1}, MaxUnavailable: 1, BakeS: 60, DrainPolicy: DrainPolicy{Mode: DrainNow}}
	if err := Plan(&r, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	va, vb := f.views["a"], f.views["b"]
	va.Production, vb.SpareShort = true, "the production spare of l4 (2 GPUs) would be gone"
	f.views["a"], f.views["b"] = va, vb
	r, acts := Step(r, f.views, t0)
	if len(acts) != 1 || acts[0].Node != "c" {
		t.Fatalf("first drain %+v, want c (a runs production, b holds the spare)", acts)
	}
	if r.Nodes[1].Waiting == "" {
		t.Errorf("b waits without saying why: %+v", r.Nodes[1])
	}
	vb.SpareShort = ""
	f.views["b"] = vb
	f.apply(r, acts)
	now := t0
	for range 50 {
		now = now.Add(time.Minute)
		r, acts = Step(r, f.views, now)
		f.apply(r, acts)
		if r.State != Running {
			break
		}
	}
	if r.State != Done || f.updates[len(f.updates)-1] != "a" {
		t.Errorf("state %s, updated %v; want done with a, the production node, last", r.State, f.updates)
	}
}

// TestMessagesNameTheDirection: every drain, validation and cordon says
// which way the node goes and to which versions: a rollback's drain does
// not say "updating to stack prod-550".
func TestMessagesNameTheDirection(t *testing.T) {
	f := newFleet("n1", "n2")
	f.bad = "550.54.15"
	r := newRollout(t, "n1", "n2")
	var msgs []string
	step := func(r Rollout, now time.Time) Rollout {
		r, acts := Step(r, f.views, now)
		f.apply(r, acts)
		for _, a := range acts {
			msgs = append(msgs, string(a.Kind)+": "+a.Reason)
		}
		return r
	}
	now := t0
	for ; r.State == Running; now = now.Add(time.Minute) {
		r = step(r, now)
	}
	update := strings.Join(msgs, "\n")
	for _, want := range []string{"drain: rollout r1: updating to stack prod-550 (driver 550.54.15, cuda 12.4) (wave 0)",
		"validate: rollout r1: validating, updating to stack prod-550", "cordon: rollout r1 failed here, updating to stack prod-550"} {
		if !strings.Contains(update, want) {
			t.Errorf("the update's messages lack %q:\n%s", want, update)
		}
	}
	msgs = nil
	back, err := Rollback(r, now)
	if err != nil {
		t.Fatal(err)
	}
	for ; back.State == RollingBack; now = now.Add(time.Minute) {
		back = step(back, now)
	}
	rollback := strings.Join(msgs, "\n")
	if !strings.Contains(rollback, "drain: rollout r1: rolling back to its versions before the update (driver 535.104.05, cuda 12.2)") ||
		strings.Contains(rollback, "updating to stack") {
		t.Errorf("the rollback's messages:\n%s", rollback)
	}
}

package rollout

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
)

// drive steps r every minute for steps minutes on f, with each node's
// running work ending on its own at ends[node] (never when absent), and
// returns the rollout, every action given, and when each node's first
// drain (stop of its work) was ordered.
func drive(t *testing.T, r Rollout, f *fleet, ends map[string]time.Time, steps int) (Rollout, []Action, map[string]time.Time) {
	t.Helper()
	var all []Action
	drained := map[string]time.Time{}
	now := t0
	for range steps {
		for n, at := range ends {
			if v := f.views[n]; !now.Before(at) && v.Running > 0 {
				v.Running = 0
				f.views[n] = v
			}
		}
		var acts []Action
		r, acts = Step(r, f.views, now)
		for _, a := range acts {
			if _, seen := drained[a.Node]; a.Kind == Drain && !seen {
				drained[a.Node] = now
			}
		}
		all = append(all, acts...)
		f.apply(r, acts)
		if !r.moving() {
			break
		}
		now = now.Add(time.Minute)
	}
	return r, all, drained
}

func policyRollout(t *testing.T, p DrainPolicy, nodes ...string) Rollout {
	t.Helper()
	r := Rollout{ID: "r1", Stack: "prod-550", Target: map[string]string{"driver": "550.54.15", "cuda": "12.4"},
		Canary: 1, Waves: []float64{1}, MaxUnavailable: 1, BakeS: 600, DrainPolicy: p}
	if err := Plan(&r, nodes); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDrainPolicies: wait lets a node's job end on its own however long it
// runs; timeout stops it with its grace once the timeout passes; now stops
// it at once. A node cordoned for its jobs counts as unavailable.
func TestDrainPolicies(t *testing.T) {
	for name, tc := range map[string]struct {
		policy      DrainPolicy
		jobEnds     time.Duration // n1's job ends on its own this long after the start
		wantDrainAt time.Duration // -1: never drained
	}{
		"wait lets a 3h job end":                                  {DrainPolicy{Mode: DrainWait}, 3 * time.Hour, -1},
		"timeout:1h stops a 3h job":                               {DrainPolicy{Mode: DrainTimeout, Timeout: time.Hour}, 3 * time.Hour, time.Hour},
		"timeout:1h waits for a 20m job":                          {DrainPolicy{Mode: DrainTimeout, Timeout: time.Hour}, 20 * time.Minute, -1},
		"now stops it at once":                                    {DrainPolicy{Mode: DrainNow}, 3 * time.Hour, 0},
		"a rollout recorded before drain policies drains at once": {DrainPolicy{}, 3 * time.Hour, 0},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFleet("n1", "n2")
			r := policyRollout(t, tc.policy, "n1", "n2")
			r.DrainPolicy = tc.policy // Plan gives the zero policy the default
			r, acts, drained := drive(t, r, f, map[string]time.Time{"n1": t0.Add(tc.jobEnds), "n2": t0.Add(tc.jobEnds)}, 8*60)
			if r.State != Done {
				t.Fatalf("state %s (%s)", r.State, r.Reason)
			}
			at, was := drained["n1"]
			switch {
			case tc.wantDrainAt < 0 && was:
				t.Errorf("n1 drained at +%s: its job should have ended on its own", at.Sub(t0))
			case tc.wantDrainAt >= 0 && (!was || at.Sub(t0) != tc.wantDrainAt):
				t.Errorf("n1 drained %v at +%s; want at +%s", was, at.Sub(t0), tc.wantDrainAt)
			}
			if tc.policy.waits() {
				if acts[0].Kind != Cordon || !strings.Contains(acts[0].Reason, "cordoned, waiting") || !strings.Contains(acts[0].Reason, "before updating to stack prod-550") {
					t.Errorf("first action %+v; want n1 cordoned while it waits for its jobs", acts[0])
				}
			}
			// n2 (the next wave) never started while n1 was cordoned for
			// its jobs: max unavailable is 1.
			for _, a := range acts {
				if a.Node == "n2" && (a.Kind == Cordon || a.Kind == Drain) {
					if i := slices.Index(f.updates, "n1"); i != 0 {
						t.Errorf("n2 started before n1 was updated: updates %v", f.updates)
					}
					break
				}
			}
		})
	}
}

func TestParseDrainPolicy(t *testing.T) {
	for in, want := range map[string]DrainPolicy{
		"wait": {Mode: DrainWait}, "now": {Mode: DrainNow}, "timeout:90m": {Mode: DrainTimeout, Timeout: 90 * time.Minute},
	} {
		got, err := ParseDrainPolicy(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v", in, got, err)
		}
		var back DrainPolicy
		if err := back.UnmarshalText([]byte(got.String())); err != nil || back != got {
			t.Errorf("%q: text %q reads back %+v, %v", in, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", "later", "timeout", "timeout:", "timeout:-1h", "timeout:0s", "timeout:9999h", "wait:1h", "now:5m"} {
		if _, err := ParseDrainPolicy(bad); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "drain_policy") {
			t.Errorf("%q: %v, want a refusal naming drain_policy", bad, err)
		}
	}
}

// TestMaxUnavailableShare: a share of the selection is rounded up, at
// least one node, and that many start at once.
func TestMaxUnavailableShare(t *testing.T) {
	for _, tc := range []struct {
		nodes   int
		percent float64
		want    int
	}{{10, 30, 3}, {10, 25, 3}, {2, 25, 1}, {4, 100, 4}, {3, 0.1, 1}} {
		var names []string
		for i := range tc.nodes {
			names = append(names, string(rune('a'+i)))
		}
		r := Rollout{ID: "r", Stack: "s", Target: map[string]string{"driver": "550.54.15"}, Waves: []float64{1}, MaxUnavailablePercent: tc.percent,
			DrainPolicy: DrainPolicy{Mode: DrainNow}}
		if err := Plan(&r, names); err != nil {
			t.Fatal(err)
		}
		_, acts := Step(r, newFleet(names...).views, t0)
		if r.MaxUnavailable != tc.want || len(acts) != tc.want {
			t.Errorf("%g%% of %d: max unavailable %d, %d drains at once; want %d", tc.percent, tc.nodes, r.MaxUnavailable, len(acts), tc.want)
		}
	}
	for in, want := range map[string][2]float64{"2": {2, 0}, "25%": {0, 25}, " 100% ": {0, 100}} {
		n, p, err := ParseMaxUnavailable(in)
		if err != nil || float64(n) != want[0] || p != want[1] {
			t.Errorf("%q: %d, %g, %v", in, n, p, err)
		}
	}
	for _, bad := range []string{"", "0", "-1", "0%", "101%", "x%", "1.5", "25 %%"} {
		if _, _, err := ParseMaxUnavailable(bad); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("%q: %v, want refused", bad, err)
		}
	}
}

// TestOnHaltRollback: with on_halt rollback a failed gate turns the
// rollout around on its own, and the halt's reason stays on record.
func TestOnHaltRollback(t *testing.T) {
	f := newFleet("n1", "n2", "n3")
	f.bad = "550.54.15"
	r := policyRollout(t, DrainPolicy{Mode: DrainNow}, "n1", "n2", "n3")
	r.OnHalt = HaltRollback
	r, _ = run(t, r, f, t0, 120)
	for r.State == RollingBack { // run stops at the first state change
		r, _ = run(t, r, f, t0.Add(2*time.Hour), 120)
	}
	if r.State != RolledBack || !strings.Contains(r.Halt, "node n1 failed a gate: validation") {
		t.Fatalf("state %s, halt %q; want rolled back with the halt kept", r.State, r.Halt)
	}
	if v := f.views["n1"]; v.Versions["driver"] != "535.104.05" {
		t.Errorf("n1 on %s after the rollback, want its previous driver", v.Versions["driver"])
	}
	if slices.Contains(f.updates, "n2") {
		t.Errorf("n2 updated by a halted rollout: %v", f.updates)
	}

	// The default, pause, halts and waits.
	f = newFleet("n1", "n2")
	f.bad = "550.54.15"
	r, _ = run(t, policyRollout(t, DrainPolicy{Mode: DrainNow}, "n1", "n2"), f, t0, 120)
	if r.State != Halted || r.OnHalt != HaltPause {
		t.Errorf("default on halt: %s (%s)", r.State, r.OnHalt)
	}
}

// TestPauseLetsTheNodesInFlightFinish: a pause taken while the canary
// validates lets it finish its step, bake and complete; nothing else
// starts until the resume, and an update ordered before the pause still
// reaches its agent.
func TestPauseLetsTheNodesInFlightFinish(t *testing.T) {
	f := newFleet("n1", "n2")
	r := policyRollout(t, DrainPolicy{Mode: DrainNow}, "n1", "n2")
	now := t0
	var acts []Action
	r, acts = Step(r, f.views, now) // the canary drains
	f.apply(r, acts)
	now = now.Add(time.Minute)
	r, acts = Step(r, f.views, now) // drained: its update is ordered
	if o, ok := r.Order("n1"); !ok {
		t.Fatal("no update order for the canary")
	} else {
		r.State = Paused
		if _, ok := r.Order("n1"); !ok {
			t.Fatalf("a pause withdrew the canary's update order %s", o.Key)
		}
	}
	f.apply(r, acts)
	for range 30 {
		now = now.Add(time.Minute)
		r, acts = Step(r, f.views, now)
		f.apply(r, acts)
	}
	if r.State != Paused || r.Nodes[0].Phase != Complete || r.Nodes[1].Phase != Pending {
		t.Fatalf("paused: %s, n1 %s, n2 %s; want n1 through its steps and n2 not started", r.State, r.Nodes[0].Phase, r.Nodes[1].Phase)
	}
	r.State = Running
	r, _ = run(t, r, f, now, 60)
	if r.State != Done {
		t.Errorf("after the resume: %s (%s)", r.State, r.Reason)
	}
}

// TestAbortSaysWhatItLeaves: an abort names the nodes it leaves updated,
// failed and cordoned, or out of service mid-step, and offers the
// rollback.
func TestAbortSaysWhatItLeaves(t *testing.T) {
	f := newFleet("n1", "n2", "n3")
	f.bad = "550.54.15"
	r, _ := run(t, policyRollout(t, DrainPolicy{Mode: DrainNow}, "n1", "n2", "n3"), f, t0, 120)
	if r.State != Halted {
		t.Fatalf("state %s", r.State)
	}
	r, err := Abort(r, "admin", t0)
	if err != nil || r.State != Aborted {
		t.Fatalf("abort: %v, %s", err, r.State)
	}
	for _, want := range []string{"aborted by admin", "n1 (validation: validation failed: xid 79 while the check ran) failed a gate and stay cordoned",
		"2 nodes were not started", "`gpufleet rollout rollback r1` returns every node it touched"} {
		if !strings.Contains(r.Reason, want) {
			t.Errorf("abort reason %q lacks %q", r.Reason, want)
		}
	}
	if _, err := Abort(r, "admin", t0); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("abort of an aborted rollout: %v", err)
	}
	if _, err := Rollback(r, t0); err != nil {
		t.Errorf("the rollback the abort offers: %v", err)
	}
}

// TestPreflight: the Ada case (CUDA toolkit 11.7 on sm_89) is found on
// every node it targets, before any is touched; a node whose GPU the
// toolkit supports is not named.
func TestPreflight(t *testing.T) {
	ada := gpufleet.ComputeCapability{Major: 8, Minor: 9}
	ampere := gpufleet.ComputeCapability{Major: 8, Minor: 0}
	have := map[string]string{"driver": "560.28.03", "cuda": "12.6"}
	targets := []Target{
		{Name: "l2", Versions: have, Models: []string{"l4"}, CCs: []gpufleet.ComputeCapability{ada}},
		{Name: "a1", Versions: have, Models: []string{"a100-sxm-80gb"}, CCs: []gpufleet.ComputeCapability{ampere}},
		{Name: "l1", Versions: have, Models: []string{"l4"}, CCs: []gpufleet.ComputeCapability{ada}},
	}
	bs := Preflight(map[string]string{"cuda_toolkit": "11.7"}, targets)
	if len(bs) != 1 || !slices.Equal(bs[0].Nodes, []string{"l1", "l2"}) || !slices.Equal(bs[0].Models, []string{"l4"}) ||
		!strings.Contains(bs[0].Message, "CUDA toolkit 11.7 cannot run on Ada") || bs[0].Source == "" {
		t.Fatalf("blockers %+v", bs)
	}
	err := PreflightError("bad", bs, len(targets))
	if !errors.Is(err, gpufleet.ErrUnsatisfiable) || !strings.Contains(err.Error(), "cannot work on 2 of the 3 targeted nodes") || !strings.Contains(err.Error(), "no node was touched") {
		t.Errorf("refusal: %v", err)
	}
	if bs := Preflight(map[string]string{"cuda_toolkit": "12.4"}, targets); len(bs) != 0 {
		t.Errorf("a toolkit every GPU supports: %+v", bs)
	}
}

func TestDrainPolicyText(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Hour: "timeout:1h", time.Minute: "timeout:1m", 90 * time.Minute: "timeout:1h30m",
		45 * time.Second: "timeout:45s", 90 * time.Second: "timeout:1m30s", 25 * time.Hour: "timeout:25h"} {
		p := DrainPolicy{Mode: DrainTimeout, Timeout: d}
		if got := p.String(); got != want {
			t.Errorf("%s: %q, want %q", d, got, want)
		}
		if back, err := ParseDrainPolicy(p.String()); err != nil || back != p {
			t.Errorf("%q reads back %+v, %v", p.String(), back, err)
		}
	}
}

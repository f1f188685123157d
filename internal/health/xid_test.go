package health

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
)

// wantXID is the catalog written out by hand from telemetry.md §3 (and
// NVIDIA's Xid Catalog for 32, 38, 68, 69). Changing an action or severity
// in xid.go must be a deliberate change here too.
var wantXID = map[int]struct {
	action   Action
	severity gpufleet.Health
}{
	8:   {ActionIgnore, gpufleet.Healthy},
	13:  {ActionIgnore, gpufleet.Healthy},
	31:  {ActionIgnore, gpufleet.Healthy},
	32:  {ActionDegrade, gpufleet.Degraded},
	38:  {ActionIgnore, gpufleet.Healthy},
	43:  {ActionIgnore, gpufleet.Healthy},
	45:  {ActionIgnore, gpufleet.Healthy},
	48:  {ActionResetGPU, gpufleet.Unhealthy},
	61:  {ActionDrainGPU, gpufleet.Unhealthy},
	62:  {ActionResetGPU, gpufleet.Unhealthy},
	63:  {ActionDegrade, gpufleet.Degraded},
	64:  {ActionResetGPU, gpufleet.Unhealthy},
	68:  {ActionIgnore, gpufleet.Healthy},
	69:  {ActionIgnore, gpufleet.Healthy},
	74:  {ActionDrainGPU, gpufleet.Unhealthy},
	79:  {ActionRebootNode, gpufleet.Unhealthy},
	92:  {ActionDegrade, gpufleet.Degraded},
	94:  {ActionResetGPU, gpufleet.Degraded},
	95:  {ActionResetGPU, gpufleet.Unhealthy},
	109: {ActionResetGPU, gpufleet.Degraded},
	110: {ActionResetGPU, gpufleet.Unhealthy},
	119: {ActionResetGPU, gpufleet.Unhealthy},
	120: {ActionResetGPU, gpufleet.Unhealthy},
	121: {ActionDegrade, gpufleet.Degraded},
	136: {ActionResetGPU, gpufleet.Unhealthy},
	140: {ActionResetGPU, gpufleet.Unhealthy},
	143: {ActionResetGPU, gpufleet.Unhealthy},
	144: {ActionDrainGPU, gpufleet.Unhealthy},
	145: {ActionDrainGPU, gpufleet.Unhealthy},
	146: {ActionDrainGPU, gpufleet.Unhealthy},
	147: {ActionDrainGPU, gpufleet.Unhealthy},
	148: {ActionDrainGPU, gpufleet.Unhealthy},
	149: {ActionDrainGPU, gpufleet.Unhealthy},
	150: {ActionDrainGPU, gpufleet.Unhealthy},
	154: {ActionDegrade, gpufleet.Degraded},
	155: {ActionResetGPU, gpufleet.Unhealthy},
	156: {ActionResetGPU, gpufleet.Unhealthy},
	158: {ActionResetGPU, gpufleet.Unhealthy},
	160: {ActionRebootNode, gpufleet.Unhealthy},
	171: {ActionResetGPU, gpufleet.Unhealthy},
	172: {ActionResetGPU, gpufleet.Unhealthy},
}

func TestXIDCatalogMatchesReference(t *testing.T) {
	for code, want := range wantXID {
		x, ok := LookupXID(code)
		if !ok {
			t.Errorf("XID %d missing from the catalog", code)
			continue
		}
		if x.Action != want.action || x.Severity != want.severity {
			t.Errorf("XID %d = %s/%s, want %s/%s", code, x.Action, x.Severity, want.action, want.severity)
		}
	}
	for _, x := range XIDs() {
		if _, ok := wantXID[x.Code]; !ok {
			t.Errorf("XID %d is in the catalog but not in wantXID: add a test row", x.Code)
		}
	}
}

func TestXIDCatalogIsWellFormed(t *testing.T) {
	all := XIDs()
	if !slices.IsSortedFunc(all, func(a, b XID) int { return a.Code - b.Code }) {
		t.Error("catalog not sorted by code (LookupXID searches it)")
	}
	for k := 1; k < len(all); k++ {
		if all[k].Code == all[k-1].Code {
			t.Errorf("XID %d listed twice", all[k].Code)
		}
	}
	for _, x := range all {
		if x.Name == "" || x.Meaning == "" || x.Advice == "" || x.Source == "" || x.NVIDIAAction == "" || x.Cause == "" {
			t.Errorf("XID %d has an empty field: %+v", x.Code, x)
		}
		if !x.Action.Valid() {
			t.Errorf("XID %d has invalid action %q", x.Code, x.Action)
		}
		if strings.HasSuffix(x.Advice, ".") {
			t.Errorf("XID %d advice ends with a period; explanations add it", x.Code)
		}
	}
	// XIDs() is a copy.
	all[0].Action = ActionReplace
	if x, _ := LookupXID(all[0].Code); x.Action == ActionReplace {
		t.Error("XIDs() exposes the catalog to changes")
	}
}

func TestEvaluateEveryXID(t *testing.T) {
	for code, want := range wantXID {
		g := healthyGPU(3)
		g.XIDs = []int{code}
		_, conds := Evaluate(State{}, node(healthyGPU(0), healthyGPU(1), healthyGPU(2), g), t0, DefaultConfig())
		if len(conds) != 1 {
			t.Errorf("XID %d: %d conditions, want 1: %+v", code, len(conds), conds)
			continue
		}
		c := conds[0]
		if c.Rule != XIDRule(code) || c.GPU != 3 || c.Action != want.action || c.Severity != want.severity {
			t.Errorf("XID %d: got %s gpu %d %s/%s, want %s gpu 3 %s/%s", code, c.Rule, c.GPU, c.Action, c.Severity, XIDRule(code), want.action, want.severity)
		}
		if !strings.HasPrefix(c.Explanation, "GPU 3 raised XID ") || !c.Since.Equal(t0) {
			t.Errorf("XID %d: explanation %q since %s", code, c.Explanation, c.Since)
		}
	}
}

func TestXID79Explanation(t *testing.T) {
	g := healthyGPU(3)
	g.XIDs = []int{79}
	_, conds := Evaluate(State{}, node(healthyGPU(0), healthyGPU(1), healthyGPU(2), g), t0, Config{})
	want := "GPU 3 raised XID 79 (fell off the bus): drain the node and reboot it; replace the GPU if it recurs."
	if len(conds) != 1 || conds[0].Explanation != want || conds[0].Reason != "XID 79 (fell off the bus)" {
		t.Errorf("got %+v, want explanation %q", conds, want)
	}
}

func TestUnknownXIDDegrades(t *testing.T) {
	g := healthyGPU(0)
	g.XIDs = []int{999, 999}
	_, conds := Evaluate(State{}, node(g), t0, Config{})
	if len(conds) != 1 {
		t.Fatalf("got %+v", conds)
	}
	c := conds[0]
	if c.Rule != "xid-999" || c.Action != ActionDegrade || c.Severity != gpufleet.Degraded ||
		!strings.Contains(c.Explanation, "look it up in NVIDIA's XID catalog") || c.Reason != "unknown XID 999" {
		t.Errorf("got %+v", c)
	}
}

func TestXID94DoesNotTouchTheNode(t *testing.T) {
	for _, code := range []int{94, 95, 48} {
		x, _ := LookupXID(code)
		if x.Action.Scope() != ScopeGPU {
			t.Errorf("XID %d action %s is node scope; a memory error is the GPU's", code, x.Action)
		}
	}
	x94, _ := LookupXID(94)
	x95, _ := LookupXID(95)
	if healthRank(x95.Severity) <= healthRank(x94.Severity) {
		t.Errorf("XID 95 (%s) should be more severe than XID 94 (%s)", x95.Severity, x94.Severity)
	}
}

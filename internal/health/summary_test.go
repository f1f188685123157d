package health

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
)

func TestSummarize(t *testing.T) {
	xid79 := Condition{Rule: "xid-79", GPU: 3, Severity: gpufleet.Unhealthy, Action: ActionRebootNode, Reason: "XID 79 (fell off the bus)"}
	remap := Condition{Rule: "row-remap-failure", GPU: 1, Severity: gpufleet.Unhealthy, Action: ActionReplace, Reason: "row remap failure"}
	hot := Condition{Rule: "thermal-sustained", GPU: 1, Severity: gpufleet.Degraded, Action: ActionDegrade, Reason: "thermal throttling for 5m"}
	app := Condition{Rule: "xid-13", GPU: 0, Severity: gpufleet.Healthy, Action: ActionIgnore, Reason: "XID 13 (graphics engine exception)"}
	hb := Condition{Rule: "heartbeat-lost", GPU: -1, Severity: gpufleet.Unhealthy, Action: ActionDegrade, Reason: "no heartbeat for 2m"}
	pending := Condition{Rule: "row-remap-pending", GPU: 2, Severity: gpufleet.Degraded, Action: ActionResetGPU, Reason: "row remap pending"}
	sbe := Condition{Rule: "ecc-sbe-rate", GPU: 2, Severity: gpufleet.Degraded, Action: ActionDegrade, Reason: "correctable ECC errors +200 in 1h"}

	tests := map[string]struct {
		conds []Condition
		want  Summary
	}{
		"nothing": {want: Summary{Health: gpufleet.Healthy, Action: ActionIgnore}},
		"application error only": {
			conds: []Condition{app},
			want:  Summary{Health: gpufleet.Healthy, Action: ActionIgnore, GPUs: []GPUSummary{{Index: 0, Health: gpufleet.Healthy, Action: ActionIgnore}}},
		},
		"fell off the bus": {
			conds: []Condition{hot, xid79, app},
			want: Summary{Health: gpufleet.Unhealthy, Reason: "gpu 3: XID 79 (fell off the bus)", Action: ActionRebootNode, GPUs: []GPUSummary{
				{Index: 0, Health: gpufleet.Healthy, Action: ActionIgnore},
				{Index: 1, Health: gpufleet.Degraded, Reason: "thermal throttling for 5m", Action: ActionDegrade},
				{Index: 3, Health: gpufleet.Unhealthy, Reason: "XID 79 (fell off the bus)", Action: ActionRebootNode},
			}},
		},
		"node action above a GPU's replace": {
			conds: []Condition{remap, hot, xid79},
			want: Summary{Health: gpufleet.Unhealthy, Reason: "gpu 3: XID 79 (fell off the bus)", Action: ActionRebootNode, GPUs: []GPUSummary{
				{Index: 1, Health: gpufleet.Unhealthy, Reason: "row remap failure", Action: ActionReplace},
				{Index: 3, Health: gpufleet.Unhealthy, Reason: "XID 79 (fell off the bus)", Action: ActionRebootNode},
			}},
		},
		"severity before action": {
			conds: []Condition{pending, sbe, hb},
			want: Summary{Health: gpufleet.Unhealthy, Reason: "no heartbeat for 2m", Action: ActionResetGPU, GPUs: []GPUSummary{
				{Index: 2, Health: gpufleet.Degraded, Reason: "row remap pending", Action: ActionResetGPU},
			}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Summarize(tc.conds)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Summarize (-want +got):\n%s", diff)
			}
			rev := slices.Clone(tc.conds)
			slices.Reverse(rev)
			if diff := cmp.Diff(got, Summarize(rev)); diff != "" {
				t.Errorf("Summarize depends on order (-forward +reversed):\n%s", diff)
			}
		})
	}
}

// TestSummaryNamesTheXID: a GPU that fell off the bus is unhealthy twice
// over (XID 79, and missing); the reason people read names the XID.
func TestSummaryNamesTheXID(t *testing.T) {
	s := Summarize([]Condition{
		{Rule: "gpu-missing", GPU: 3, Severity: gpufleet.Unhealthy, Action: ActionRebootNode, Reason: "missing from the node's report"},
		{Rule: "xid-79", GPU: 3, Severity: gpufleet.Unhealthy, Action: ActionRebootNode, Reason: "XID 79 (fell off the bus)"},
	})
	if s.Reason != "gpu 3: XID 79 (fell off the bus)" || s.GPUs[0].Reason != "XID 79 (fell off the bus)" || s.Action != ActionRebootNode {
		t.Errorf("summary %+v", s)
	}
}

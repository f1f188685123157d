package scheduler

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
)

func TestRebenched(t *testing.T) {
	for name, tc := range map[string]struct {
		state     gpufleet.NodeState
		benchOnly bool
		want      gpufleet.NodeState // "" for a refusal
		refusal   string
	}{
		"cordoned, bench figures only: validates":     {gpufleet.NodeCordoned, true, gpufleet.NodeValidating, ""},
		"in service: cordon first":                    {gpufleet.NodeReady, true, "", "cordon it first"},
		"cordoned with an error finding: repair path": {gpufleet.NodeCordoned, false, "", "not repairing"},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := Rebenched(NodeLife{State: tc.state, Cause: gpufleet.CauseOperator}, "admin", tc.benchOnly)
			switch {
			case tc.want == "" && (!errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), tc.refusal)):
				t.Errorf("%v, want a refusal saying %q", err, tc.refusal)
			case tc.want != "" && (err != nil || l.State != tc.want || !strings.Contains(l.Reason, "marked repaired by admin")):
				t.Errorf("%+v, %v; want %s", l, err, tc.want)
			}
		})
	}
}

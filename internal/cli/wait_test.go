package cli

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseWait(t *testing.T) {
	for _, tc := range []struct {
		object, cond string
		want         waitCond
		bad          string
	}{
		{object: "job/j-1", cond: "state=running", want: waitCond{kind: "job", name: "j-1", field: "state", values: []string{"running"}}},
		{object: "job/j-1", cond: "state=succeeded, failed", want: waitCond{kind: "job", name: "j-1", field: "state", values: []string{"succeeded", "failed"}}},
		{object: "node/dev-h100-0", cond: "health=unhealthy", want: waitCond{kind: "node", name: "dev-h100-0", field: "health", values: []string{"unhealthy"}}},
		{object: "pod/x", cond: "state=running", bad: "expected job/ID or node/NAME"},
		{object: "job/", cond: "state=running", bad: "expected job/ID"},
		{object: "job/j-1", cond: "health=healthy", bad: "FIELD one of state for a job"},
		{object: "node/n", cond: "state=runing", bad: `"runing": a node's state is one of ready,`},
		{object: "node/n", cond: "state", bad: "FIELD one of health, state"},
	} {
		got, err := parseWait(tc.object, tc.cond)
		if tc.bad != "" {
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%s --for %s: %v, want a usage error with %q", tc.object, tc.cond, err, tc.bad)
			}
			continue
		}
		if err != nil || got.kind != tc.want.kind || got.name != tc.want.name || got.field != tc.want.field || !slices.Equal(got.values, tc.want.values) {
			t.Errorf("%s --for %s: %+v, %v", tc.object, tc.cond, got, err)
		}
	}
}

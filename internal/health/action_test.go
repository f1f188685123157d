package health

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestActions(t *testing.T) {
	tests := map[Action]struct {
		rank         int
		outOfService bool
		scope        Scope
	}{
		ActionIgnore:     {0, false, ScopeGPU},
		ActionDegrade:    {1, false, ScopeGPU},
		ActionResetGPU:   {2, true, ScopeGPU},
		ActionDrainGPU:   {3, true, ScopeGPU},
		ActionReplace:    {4, true, ScopeGPU},
		ActionDrainNode:  {5, true, ScopeNode},
		ActionRebootNode: {6, true, ScopeNode},
		"bogus":          {-1, false, ScopeGPU},
	}
	for a, tc := range tests {
		if got := a.Rank(); got != tc.rank {
			t.Errorf("%s.Rank() = %d, want %d", a, got, tc.rank)
		}
		if got := a.TakesOutOfService(); got != tc.outOfService {
			t.Errorf("%s.TakesOutOfService() = %v, want %v", a, got, tc.outOfService)
		}
		if got := a.Scope(); got != tc.scope {
			t.Errorf("%s.Scope() = %s, want %s", a, got, tc.scope)
		}
		if got := a.Valid(); got != (tc.rank >= 0) {
			t.Errorf("%s.Valid() = %v", a, got)
		}
	}
	if diff := cmp.Diff([]Action{"ignore", "degrade", "reset-gpu", "drain-gpu", "replace", "drain-node", "reboot-node"}, Actions()); diff != "" {
		t.Errorf("Actions() (-want +got):\n%s", diff)
	}
	if Worst(ActionReplace, ActionRebootNode) != ActionRebootNode || Worst(ActionDrainGPU, ActionResetGPU) != ActionDrainGPU || Worst(ActionDegrade, ActionDegrade) != ActionDegrade {
		t.Error("Worst picks the milder action")
	}
	if !ActionDrainNode.MoreSevere(ActionReplace) || ActionIgnore.MoreSevere(ActionDegrade) {
		t.Error("MoreSevere is wrong")
	}
}

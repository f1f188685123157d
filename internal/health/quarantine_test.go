package health

import (
	"strings"
	"testing"
)

func TestCheckQuarantine(t *testing.T) {
	tests := map[string]struct {
		fleet, out, adding int
		fraction           float64
		wantAllowed        bool
		wantLimit          int
		wantReason         string
	}{
		"one GPU in a big fleet":       {fleet: 1000, out: 3, adding: 1, wantAllowed: true, wantLimit: 100, wantReason: "4 of 1000 GPUs"},
		"up to the limit":              {fleet: 1000, out: 92, adding: 8, wantAllowed: true, wantLimit: 100},
		"one past the limit":           {fleet: 1000, out: 93, adding: 8, wantAllowed: false, wantLimit: 100, wantReason: "automatic quarantine paused: 101 of 1000"},
		"bad driver push":              {fleet: 512, out: 51, adding: 8, wantAllowed: false, wantLimit: 51, wantReason: "bad driver push"},
		"first quarantine small fleet": {fleet: 16, out: 0, adding: 8, wantAllowed: true, wantLimit: 1, wantReason: "first quarantine is always allowed"},
		"second node small fleet":      {fleet: 16, out: 8, adding: 8, wantAllowed: false, wantLimit: 1},
		"nothing to take out":          {fleet: 16, out: 16, adding: 0, wantAllowed: true, wantLimit: 1},
		"custom fraction":              {fleet: 100, out: 20, adding: 5, fraction: 0.25, wantAllowed: true, wantLimit: 25, wantReason: "(25%)"},
		"fraction out of range":        {fleet: 100, out: 5, adding: 6, fraction: 7, wantAllowed: false, wantLimit: 10, wantReason: "(10%)"},
		"empty fleet":                  {fleet: 0, out: 0, adding: 1, wantAllowed: true, wantLimit: 0},
		"negative counts":              {fleet: -5, out: -1, adding: -1, wantAllowed: true, wantLimit: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := CheckQuarantine(tc.fleet, tc.out, tc.adding, tc.fraction)
			if got.Allowed != tc.wantAllowed || got.Limit != tc.wantLimit || !strings.Contains(got.Reason, tc.wantReason) {
				t.Errorf("CheckQuarantine(%d, %d, %d, %g) = %+v, want allowed %v limit %d reason containing %q",
					tc.fleet, tc.out, tc.adding, tc.fraction, got, tc.wantAllowed, tc.wantLimit, tc.wantReason)
			}
		})
	}
}

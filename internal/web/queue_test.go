package web

import (
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
)

// TestExplainedHolds: a queued job's reason as data shows what holds it
// that is not about nodes, with a link to the job it names.
func TestExplainedHolds(t *testing.T) {
	ts, err := parseTemplates()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2025, 1, 1, 1, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		e    *gpufleet.Explanation
		want []string
	}{
		"behind the blocker": {
			e:    &gpufleet.Explanation{Code: "order", Blocker: &gpufleet.Blocker{Job: "j-big", Position: 1}},
			want: []string{`<span class="held" data-held="blocker">behind (position 1) <a href="/jobs/j-big">j-big</a></span>`},
		},
		"the reservation": {
			e:    &gpufleet.Explanation{Code: "reservation", Reservation: &gpufleet.ReservationHold{Job: "j-big", Start: start}},
			want: []string{`data-held="reservation">reserved at 2025-01-01T01:00:00Z for <a href="/jobs/j-big">j-big</a>`},
		},
		"counts, then the spare held": {
			e: &gpufleet.Explanation{Code: "capacity", NodesEvaluated: 1, NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterCapacity, Nodes: 1}},
				Exhausted: gpufleet.DimGPUs, Need: 4, Most: 2, SpareHeld: 2},
			want: []string{`1 nodes evaluated`, `(needs 4, most 2)</span>; <span class="held" data-held="spare_held">2 GPUs held spare</span>`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var row pendingRow
			row.explained(tc.e)
			var b strings.Builder
			if err := ts["queue"].ExecuteTemplate(&b, "explained", row); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("explained lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
}

package gpufleet

import (
	"testing"
	"time"
)

// TestExplanationString: the sentence of each reason is written from its
// data, the figures as the data hold them.
func TestExplanationString(t *testing.T) {
	limit, cap1 := 4.0, 0.01
	start := time.Date(2025, 1, 1, 1, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		e    *Explanation
		want string
	}{
		"nil":         {e: nil, want: ""},
		"a bare code": {e: &Explanation{Code: "order"}, want: ""},
		"order": {e: &Explanation{Code: "order", Blocker: &Blocker{Job: "big", Position: 1}},
			want: "fits now, but waits behind job big (position 1) in strict order"},
		"reservation": {e: &Explanation{Code: "reservation", Reservation: &ReservationHold{Job: "big", Start: start, EstimateS: 7200}},
			want: "fits now, but would delay job big, reserved to start by 2025-01-01T01:00:00Z; backfill needs it to finish by then (estimate 2h0m0s)"},
		"reservation, brief": {e: &Explanation{Code: "reservation", Brief: true, Reservation: &ReservationHold{Job: "big", Start: start}},
			want: "fits now, but would delay job big, reserved to start by 2025-01-01T01:00:00Z"},
		"cycle limit": {e: &Explanation{Code: "cycle_limit", CycleLimit: 2}, want: "placement limit of 2 jobs per cycle reached"},
		"preempting": {e: &Explanation{Code: "preempting", Preemption: &Preemption{Victims: 2, GraceS: 12.5}},
			want: "waiting for 2 preempted jobs to stop (grace up to 12.5s)"},
		"preempting, stopping and starving": {e: &Explanation{Code: "preempting", Preemption: &Preemption{Victims: 1, GraceS: 30, Stopping: true, Starving: true}},
			want: "starving: waiting for 1 stopping job to stop (grace up to 30s)"},
		"capacity while jobs leave": {e: &Explanation{Code: "capacity", Preemption: &Preemption{Victims: 1, GraceS: 10, Stopping: true}},
			want: "the GPUs it needs come free when 1 stopping job leaves (grace up to 10s)"},
		"slower": {e: &Explanation{Code: "slower_model", Slower: &SlowerWait{Model: "k80", Slowdown: 3.75, TakesInS: 105}},
			want: "waiting for a faster GPU than k80, which has room but would run it about 3.8x slower; takes it in 1m45s if nothing faster frees up"},
		"slower, brief": {e: &Explanation{Code: "slower_model", Brief: true, Slower: &SlowerWait{Model: "k80"}},
			want: "waiting for a faster GPU than k80, which has room but would run it slower"},
		"stack, a node lacks it": {e: &Explanation{Code: "stack_mismatch", Stack: &StackMismatch{Stack: "prod", Node: "h2", Unmet: "cuda >=13.0: the node has 12.2"}},
			want: "no node runs stack prod (node h2: cuda >=13.0: the node has 12.2)"},
		"stack unknown": {e: &Explanation{Code: "stack_mismatch", Stack: &StackMismatch{Stack: "ghost", Unknown: true}}, want: `no stack named "ghost"`},
		"stack unreadable": {e: &Explanation{Code: "stack_mismatch", Stack: &StackMismatch{Stack: "prod", Invalid: "stack", Error: "bad pin"}},
			want: "stack prod: bad pin"},
		"quota never enough": {e: &Explanation{Code: "quota_exceeded", Exhausted: DimQuota, Quota: &QuotaShortfall{Class: "h100", Asked: 12, Quota: 4, Limit: &limit}},
			want: "needs 12 h100 GPUs but team quota 4 plus borrowing limit 4 allow at most 8"},
		"quota, brief": {e: &Explanation{Code: "quota", Exhausted: DimQuota, Brief: true, Quota: &QuotaShortfall{Class: "h100", LimitReached: true}},
			want: "team quota for h100 exhausted and borrowing limit reached"},
		"isolation": {e: &Explanation{Code: "isolation", Isolation: &IsolationShortfall{Isolation: IsolationHard, OverheadMax: &cap1,
			Mechanisms: []MechanismShortfall{{Name: "vgpu:A100-4C/exclusive", Isolation: IsolationSoft, Overhead: 0.05}}}},
			want: "GPUs are free, but not under a mechanism it accepts: it requires isolation hard and overhead <= 1%; vgpu:A100-4C/exclusive gives soft (5% overhead)"},
		"no model": {e: &Explanation{Code: "unplaceable", NoModel: &ModelTerms{GPUModels: []string{"b200"}, Precision: "fp8"}},
			want: "no GPU model in the fleet matches gpu_models [b200], native precision fp8"},
		"no MIG profile": {e: &Explanation{Code: "unplaceable", Profile: "3g.40gb"}, want: "no GPU in the fleet has MIG instances of profile 3g.40gb"},
		"empty fleet":    {e: &Explanation{Code: "unplaceable", EmptyFleet: true}, want: "the fleet has no GPU: no node has joined"},
		"spare, then the search limit": {e: &Explanation{Code: "capacity", Exhausted: DimGPUs, Need: 4, Most: 2, SpareHeld: 2, SearchLimit: 1},
			want: "needs 4 GPUs on one node; the most free on a matching node is 2 (2 GPUs are held free for production failover); preemption not tried this cycle (search limit of 1 per cycle reached)"},
		"rack power of a placement": {e: &Explanation{Code: "rack_power", Exhausted: DimRackPower, NodesFiltered: []FilterCount{{Code: FilterRackPower, Nodes: 3}},
			Rack: &RackShortfall{Rack: "r1", DrawWatts: 6000, AddWatts: 4000, LimitWatts: 9000, BudgetWatts: 9000, Placement: true}},
			want: "the GPUs are free, but rack r1 would draw 10kW (6kW now + 4kW for this job) over its 9kW budget"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.e.String(); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

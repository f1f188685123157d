package scheduler_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/scheduler"
)

func TestPolicyConfig(t *testing.T) {
	type features struct{ Classes, Strict, Backfill, FairShare, Quotas, Preemption, Hetero bool }
	tests := map[string]struct {
		name        string
		wantPacking string
		want        features
		wantErr     error
	}{
		"fifo is one strict queue":                         {name: "fifo", wantPacking: scheduler.PackFirstFit, want: features{Strict: true}},
		"bestfit packs tightly":                            {name: "bestfit", wantPacking: scheduler.PackBestFit, want: features{Strict: true}},
		"backfill is Slurm-like":                           {name: "backfill", wantPacking: scheduler.PackBestFit, want: features{Classes: true, Backfill: true}},
		"gpufleet has everything":                          {name: "gpufleet", wantPacking: scheduler.PackTopology, want: features{true, false, true, true, true, true, true}},
		"hetero-easy is backfill that prefers the fastest": {name: "hetero-easy", wantPacking: scheduler.PackBestFit, want: features{Classes: true, Backfill: true, Hetero: true}},
		"hrrn is hetero-easy by response ratio":            {name: "hrrn", wantPacking: scheduler.PackBestFit, want: features{Classes: true, Backfill: true, Hetero: true}},
		"srtf is hetero-easy, shortest first":              {name: "srtf", wantPacking: scheduler.PackBestFit, want: features{Classes: true, Backfill: true, Hetero: true}},
		"slurm is multifactor with backfill":               {name: "slurm", wantPacking: scheduler.PackBestFit, want: features{Classes: true, Backfill: true}},
		"las preempts and reads no estimate":               {name: "las", wantPacking: scheduler.PackBestFit, want: features{Classes: true, Preemption: true}},
		"names ignore case and space":                      {name: " GPUfleet ", wantPacking: scheduler.PackTopology, want: features{true, false, true, true, true, true, true}},
		"an unknown name is a clear error":                 {name: "dominant", wantErr: scheduler.ErrUnknownPolicy},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := scheduler.PolicyConfig(tc.name)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			got := features{c.PriorityClasses, c.StrictOrder, c.Backfill, c.FairShare, c.Quotas, c.Preemption, c.HeterogeneityPreference}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("features (-want +got):\n%s", diff)
			}
			if c.Packing != tc.wantPacking || !c.ETA || c.Validate() != nil {
				t.Errorf("packing %q, ETA %v, validate %v", c.Packing, c.ETA, c.Validate())
			}
		})
	}
}

// TestPolicyConfigIsACopy: changing a returned Config (an ablation, a
// sweep) changes nothing of the next caller's.
func TestPolicyConfigIsACopy(t *testing.T) {
	for _, name := range scheduler.Policies() {
		c, err := scheduler.PolicyConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := scheduler.PolicyConfig(name)
		if c.Multifactor != nil {
			c.Multifactor.AgeWeight = -1
		}
		for i := range c.LASThresholds {
			c.LASThresholds[i] = 0
		}
		if again, _ := scheduler.PolicyConfig(name); !cmp.Equal(want, again) {
			t.Errorf("%s: a caller's change reached the next caller", name)
		}
	}
}

// TestValidateKnobs: the tuning knobs, the bounds of a cycle and the
// queue orders are checked.
func TestValidateKnobs(t *testing.T) {
	tests := map[string]struct {
		change  func(*scheduler.Config)
		wantErr bool
	}{
		"the defaults":                                     {change: func(*scheduler.Config) {}},
		"no bound on preemption searches":                  {change: func(c *scheduler.Config) { c.MaxPreemptionSearches = 0 }},
		"a negative bound on preemption searches":          {change: func(c *scheduler.Config) { c.MaxPreemptionSearches = -1 }, wantErr: true},
		"every reason in full":                             {change: func(c *scheduler.Config) { c.ReasonDepth = 0 }},
		"a negative reason depth":                          {change: func(c *scheduler.Config) { c.ReasonDepth = -5 }, wantErr: true},
		"a negative bound on placements is still an error": {change: func(c *scheduler.Config) { c.MaxPlacementsPerCycle = -1 }, wantErr: true},
		"a negative gain factor":                           {change: func(c *scheduler.Config) { c.StarvationGainFactor = -1 }, wantErr: true},
		"a fair-share clamp below 1":                       {change: func(c *scheduler.Config) { c.FairShareClamp = 0.5 }, wantErr: true},
		"a clamp of 1 turns it off":                        {change: func(c *scheduler.Config) { c.FairShareClamp = 1 }},
		"negative search bounds":                           {change: func(c *scheduler.Config) { c.PreemptSearchNodes = -1 }, wantErr: true},
		"two queue orders":                                 {change: func(c *scheduler.Config) { c.ShortestFirst = true }, wantErr: true},
		"LAS thresholds out of order":                      {change: func(c *scheduler.Config) { c.SizeSlack = 0; c.LASThresholds = []time.Duration{2, 1} }, wantErr: true},
		"no preemption bound (negative)":                   {change: func(c *scheduler.Config) { c.MaxPreemptionsPerJob = -1 }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := scheduler.PolicyConfig("gpufleet")
			if err != nil {
				t.Fatal(err)
			}
			if c.MaxPreemptionSearches != scheduler.DefaultMaxPreemptionSearches || c.ReasonDepth != scheduler.DefaultReasonDepth {
				t.Fatalf("defaults: searches %d, reason depth %d", c.MaxPreemptionSearches, c.ReasonDepth)
			}
			tc.change(&c)
			if err := c.Validate(); (err != nil) != tc.wantErr {
				t.Errorf("Validate() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

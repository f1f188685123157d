package scheduler_test

import (
	"errors"
	"testing"

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
		"fifo is one strict queue":         {name: "fifo", wantPacking: scheduler.PackFirstFit, want: features{Strict: true}},
		"bestfit packs tightly":            {name: "bestfit", wantPacking: scheduler.PackBestFit, want: features{Strict: true}},
		"backfill is Slurm-like":           {name: "backfill", wantPacking: scheduler.PackBestFit, want: features{Classes: true, Backfill: true}},
		"gpufleet has everything":          {name: "gpufleet", wantPacking: scheduler.PackTopology, want: features{true, false, true, true, true, true, true}},
		"names ignore case and space":      {name: " GPUfleet ", wantPacking: scheduler.PackTopology, want: features{true, false, true, true, true, true, true}},
		"an unknown name is a clear error": {name: "drf", wantErr: scheduler.ErrUnknownPolicy},
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

func TestConfigValidateBounds(t *testing.T) {
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

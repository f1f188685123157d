package scheduler_test

import "github.com/gpufleet/gpufleet/internal/scheduler"

// setLargeConfig makes TestLargeDecisions' policy comparable with the
// golden's commit: no bound on preemption searches.
func setLargeConfig(c *scheduler.Config) { c.MaxPreemptionSearches = 0 }

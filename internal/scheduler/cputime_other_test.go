//go:build !unix

package scheduler_test

import "time"

// cpuTime is 0 where the process's CPU time is not read: the benchmarks'
// cpu_ms metrics are then 0.
func cpuTime() time.Duration { return 0 }

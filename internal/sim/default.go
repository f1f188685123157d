package sim

import "github.com/gpufleet/gpufleet/internal/scheduler"

// defaultSchedule is the scheduling core Run uses when Config.Schedule is
// nil: the same code the server runs.
var defaultSchedule ScheduleFunc = scheduler.Schedule

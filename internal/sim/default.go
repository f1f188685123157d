package sim

import "github.com/gpufleet/gpufleet/internal/scheduler"

// defaultSchedule is the scheduling core Run uses when Config.Schedule is
// nil: the same code the server runs.
var defaultSchedule ScheduleFunc = scheduler.Schedule

// DefaultRestartOverhead is the restart overhead (Config.RestartOverhead,
// seconds) the CLI replays with unless told otherwise: what a stopped job
// loses to resume, on top of the grace it was given to write its
// checkpoint (30 s by default, during which it holds its GPUs and makes
// no progress). 60 s to start again (reschedule the container, initialize
// CUDA and the collective library, warm the input pipeline) plus 30 s to
// read the checkpoint back, the same budget as its write: a Philly-era
// model (ResNet-50 about 100 MB, the largest LSTMs about 1 GB) loads in
// seconds at 1 GB/s, so 30 s is generous for it and fits a model of tens
// of GB. A replay with no cost for stops (0) flatters every policy that
// preempts; docs/SIMULATOR.md says more.
const DefaultRestartOverhead = 90.0

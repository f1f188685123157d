// Package sim is gpufleet's trace-driven simulator: trace readers, a
// virtual clock, a discrete-event loop and reports.
//
// The simulator drives the same pure scheduling core as the server,
// scheduler.Schedule, with virtual time: it replays a trace's arrivals, asks
// the scheduler for a decision at every event time (simultaneous events are
// batched into one cycle), carries the decision out with scheduler.Apply
// (a stopped job holds its GPUs through its grace, then requeues or ends),
// and runs the jobs for the time their GPU model needs. Besides arrivals
// and completions its events are graces ending, time limits, cancels,
// node failures and health drains, repairs, and the moments the scheduler
// asked to be run again (Output.Recheck). It keeps the teams' decayed usage
// (Config.UsageHalfLife) as the server does.
//
// Like the scheduler, the package is pure: readers take an io.Reader (the
// CLI opens the files), time is virtual, randomness comes from a PCG seeded
// with Config.Seed, and the wall clock is only read through the optional
// Config.Clock the caller supplies (for sim_wall_s). The same trace, cluster,
// policy and seed give byte-identical reports.
//
// Pipeline:
//
//	trace file --Read--> *Trace --+
//	                              +--Run(Config)--> loop: events -> Input -> Schedule -> Apply --> *Result
//	cluster spec or node list ----+                                                              (Report, timeline, plot)
package sim

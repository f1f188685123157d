// Package scheduler is gpufleet's pure scheduling core: one call,
// Schedule, takes a snapshot of the fleet and the work (Input) and returns
// the decisions of one cycle (Output): which queued jobs start now and on
// which GPUs, which running jobs stop and why (preempted, drained, timed
// out, cancelled) with their grace, which queued jobs fail, and for every
// job still queued its position, the reason it waits (a code and a
// sentence with counts) and its estimated start.
//
// The package owns the policy: cluster order (priority classes, starving
// and requeued jobs first, response ratio, fair share over decayed usage), team quotas per GPU class with
// borrowing of idle capacity and reclaim, gang placement on one node or
// spread over nodes in one rack or block, NVLink-domain and fragmentation
// aware packing, heterogeneity (model allowlists, memory, compute
// capability, native precision, node labels, cheapest, fastest or most energy-efficient model,
// waiting for a faster model as long as a slower one would cost), MIG and
// time-slice sharing, preemption that loses the least work and, for
// starving jobs, preemption of long jobs with a bounded cost, EASY
// backfill, and ETAs from a forward simulation of the queue through the
// same placement code. Policies are Configs of the same code: see
// PolicyConfig for fifo, bestfit, backfill, hetero-easy, hrrn, srtf, slurm,
// las, the fairness baselines drf, themis and gandiva-fair, and gpufleet.
//
// The package does no I/O, reads no clock and keeps no state between
// calls: time comes in as Input.Now, and the same Input gives the same
// Output, whatever the order of Input.Nodes. The caller drives it, and
// Apply says what carrying a decision out means:
//
//	for each cycle:
//		in := snapshot()              // nodes, teams, queued and running jobs, Now
//		out := scheduler.Schedule(in)
//		carry out out.Starts, out.Stops (each with its Grace), out.Fails;
//		show out.Pending (position, reason, estimated start)
//		in = scheduler.Apply(in, out, now) // what the fleet looks like next
//
// The server translates Output to store writes one for one (its store's
// transitions mean what Apply does); the simulator (internal/sim) and the
// schedtest harness call Apply itself. A stopped job holds its GPUs until
// its grace ends, then requeues (preempted, drained) or ends (time limit,
// cancel); its preemptor waits with reason "preempting" and is placed in a
// cycle after that. Output.Recheck says when time alone may change a
// decision, for callers that move from event to event. Team usage decay
// (Team.Usage) is the caller's job.
//
// Scenario scripts under testdata/scenarios are run by the schedtest
// harness; see README.md for the pipeline and docs/SCHEDULER.md for the
// policies, reason codes and the ETA method.
package scheduler

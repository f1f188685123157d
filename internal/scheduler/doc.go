// Package scheduler is gpufleet's pure scheduling core: one call,
// Schedule, takes a snapshot of the fleet and the work (Input) and returns
// the decisions of one cycle (Output): which queued jobs start now and on
// which GPUs, which running jobs to preempt, and for every job still
// queued its position, the reason it waits (a code and a sentence with
// counts) and its estimated start.
//
// The package owns the policy: cluster order (priority classes, starving
// and requeued jobs first, response ratio, fair share over decayed usage), team quotas per GPU class with
// borrowing of idle capacity and reclaim, gang placement on one node or
// spread over nodes in one rack or block, NVLink-domain and fragmentation
// aware packing, heterogeneity (model allowlists, memory, compute
// capability, native precision, node labels, cheapest or fastest model,
// waiting for a faster model as long as a slower one would cost), MIG and
// time-slice sharing, preemption that loses the least work and, for
// starving jobs, preemption of long jobs with a bounded cost, EASY
// backfill, and ETAs from a forward simulation of the queue through the
// same placement code. Policies are Configs of the same code: see
// PolicyConfig for fifo, bestfit, backfill and gpufleet.
//
// The package does no I/O, reads no clock and keeps no state between
// calls: time comes in as Input.Now, and the same Input gives the same
// Output, whatever the order of Input.Nodes. The caller drives it:
//
//	for each cycle:
//		in := snapshot()            // nodes, teams, queued and running jobs, Now
//		out := scheduler.Schedule(in)
//		persist and apply out.Starts; stop out.Preemptions (after Grace);
//		show out.Pending (position, reason, estimated start)
//
// The server calls it from its leader loop, the simulator (internal/sim)
// from its virtual clock; both see the same decisions. Preempted jobs are
// not replaced in the same cycle: the preemptor waits with reason
// "preempting" and is placed in a later cycle, once the caller reports the
// victims stopped. Team usage decay (Team.Usage) is the caller's job.
//
// Scenario scripts under testdata/scenarios are run by the schedtest
// harness; see README.md for the pipeline and docs/SCHEDULER.md for the
// policies, reason codes and the ETA method.
package scheduler

// Package planner answers, before anything is bought or queued, whether a
// model fits, on which accelerators, how many, how fast, and at what cost
// and energy, for inference and for training.
//
// Run takes a Request (a model.Config, the workload, candidate catalog.GPU
// entries) and returns a Plan: one Candidate per GPU model with its best
// layout (tensor x pipeline x data parallelism), the memory per GPU broken
// into weights, KV cache, activations, gradients, optimizer state and
// runtime overhead, whether the precision is native, what bounds decode
// and prefill (compute, memory or interconnect), throughput, latency,
// cost, energy and notes in plain language, ranked, with a recommendation
// to scale vertically or horizontally.
//
// The package is pure and deterministic: no I/O, no clock, no logging. The
// CLI (`gpufleet plan`) and the server's memory-fit admission call the same
// code. The estimation model and its constants are documented in
// docs/PLANNER.md and constants.go; docs/ACCURACY.md compares it with
// published measurements.
package planner

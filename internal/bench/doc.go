// Package bench measures what a GPU delivers and judges it: the
// microbenchmark vocabulary (copy, gemm, h2d, p2p, allreduce), the
// measurements a backend returns (simulated GPUs here, the CUDA libraries
// in package cuda), the figures they make against the catalog's spec,
// and the fleet rule that flags a GPU delivering less than its model's
// fleet median. It is pure: no I/O, no clock; docs/BENCH.md explains
// each figure and the method.
package bench

// Package gpufleet holds the vocabulary shared by every part of gpufleet, a
// control plane for GPU infrastructure that treats GPUs as specialised
// hardware: memory capacity and bandwidth, interconnect, precision support,
// power and heat, and failure modes enter every decision.
//
// The root package is standard-library only. The parts live in their own
// packages: catalog (accelerator specifications), model (model architectures
// from Hugging Face config.json), planner (memory, roofline, cost and energy
// estimates), and under internal/ the scheduler, simulator, server, agent and
// CLI. See docs/ARCHITECTURE.md for the map.
package gpufleet

// Package simgpu is the gpu.Backend for machines without GPUs: simulated
// NVIDIA GPUs built from catalog models, whose readings respond to declared
// load and to injected faults.
//
// A Backend is built once from Specs (model, count, optional MIG layout)
// and driven by its caller: SetLoad/AddLoad/ClearLoad declare what the
// attempts on a GPU do (compute, memory or idle), Inject/Clear start and
// end faults, and every read integrates the model from the last read to
// the clock's now (WithClock lets tests step time). Nothing runs in the
// background. Devices are deterministic per node name (WithNodeName) and
// readings per seed (WithSeed).
//
// The model: utilization and GPM activity follow the load profile;
// power rises from the card's idle draw toward TDP with load; energy
// integrates power; temperature follows power with a first-order lag and,
// above the slowdown temperature, sets the thermal clock-event bits and
// lowers the SM clock. GPM metrics exist only on Hopper and newer, ECC not
// on GeForce cards, row remapping only on Ampere and newer, NVLink only on
// NVLink models: everything else is absent (nil), as on real hardware.
// docs/GPU.md lists the constants and the evidence of every fault.
package simgpu

// Package nvml is the gpu.Backend for real NVIDIA GPUs, read through
// NVIDIA's NVML with github.com/NVIDIA/go-nvml. It needs linux and cgo; on
// other builds New returns gpu.ErrUnavailable. Nothing else in gpufleet
// imports go-nvml.
//
// The backend is driven by its caller: New initialises NVML (a missing
// libnvidia-ml.so.1 gives gpu.ErrUnavailable) and registers the GPUs for
// XID and ECC events; Devices, Versions and Sample read the GPUs when
// called; Events blocks in NVML's event wait. Every reading NVML does not
// support, or that fails, is left nil, never zero. Dump writes a
// gpu.Snapshot as JSON for gpu-check.
package nvml

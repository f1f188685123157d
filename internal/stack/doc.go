// Package stack judges a node's software and firmware stack: the
// compatibility rules between the NVIDIA driver, the CUDA toolkit and
// driver API, the GPUs' compute capabilities, PyTorch's CUDA builds, the
// fabric manager and published defects (NCCL, cuBLAS), each with its
// source (docs/STACKS.md). It is pure: versions in, findings out. The
// version and constraint vocabulary (gpufleet.SoftwareVersion,
// gpufleet.VersionConstraint, gpufleet.StackRequirements) lives in the
// root package, where jobs and nodes use it.
package stack

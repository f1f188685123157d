// Package cuda is the real path of gpufleet bench: a bench.Backend that
// measures NVIDIA GPUs through the CUDA driver API, cuBLASLt and NCCL.
//
// The libraries are loaded at run time with dlopen and dlsym (libcuda.so.1,
// libcublasLt.so.13/12/11, libnccl.so.2), from a directory the caller names
// first and then the loader's default paths, so one binary builds without
// CUDA headers or libraries and fails cleanly where they are absent: Open
// returns an error wrapping gpu.ErrUnavailable naming what it could not
// load and where it looked. The handful of types, values and prototypes
// used are declared by hand in cuda.go, each checked against NVIDIA's
// public headers. It needs linux and cgo; on other builds Open returns
// gpu.ErrUnavailable.
//
// Open lists the CUDA devices and matches them by UUID to the GPUs NVML
// discovered, so that figures carry NVML's index and the catalog model.
// Measure runs the tests (copy, gemm, h2d, p2p, allreduce; see package
// bench) on the selected GPUs, one primary context per device, made current
// on a locked OS thread. Each figure follows the method of
// docs/BENCH.md: inputs drawn at random (never zeros) and
// uploaded, three warm-up runs, each timed run between two device events on
// a stream of its own, outputs poisoned before a checked run, and the
// result compared on the host: copied bytes against the source on sampled
// regions, products against a float64 reference on sampled elements, with a
// limit per precision (a failed check is an error, never a figure), sums
// of the all-reduce exactly. Every status the libraries return is checked,
// and an error names the call and the status. Close releases the contexts;
// the libraries stay loaded for the life of the process.
//
// The host side (library search order, the number formats, the reference,
// the figures' arithmetic) is plain Go in host.go and tested on every
// build; the device side needs a GPU.
package cuda

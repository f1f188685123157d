// Package catalog owns the specifications of GPUs and other accelerators
// that every gpufleet decision starts from: memory capacity and bandwidth,
// dense peak throughput per precision, interconnect and its domain size,
// power, MIG profiles, and default prices, each entry with the datasheet it
// came from.
//
// The data lives in the package as an embedded CSV file, catalog/data/gpus.csv,
// which Default parses once. Nothing is read from disk or network: callers
// that want other figures open a file themselves and pass it to
// Catalog.WithOverrides (CSV in the same format, or JSON with the keys of GPU),
// which returns a new Catalog and leaves the original unchanged.
//
// Units. GPU fields are in base units: bytes, bytes per second, FLOP/s (OP/s
// for INT8), watts, US dollars. The data file uses the units of datasheets
// and converts in Parse: GB = 1e9 bytes, or GiB = 2^30 bytes where a capacity
// cell ends in "GiB"; GB/s = 1e9 bytes/s, TFLOPS = 1e12 FLOP/s. HBM parts are
// written in GiB: HBM stacks are binary-sized and vendors' "80GB" is 80 GiB
// (NVML reports 81559 MiB for an H100 SXM, 81920 MiB for an A100 80GB).
// GDDR parts stay in decimal GB, which matches what NVML reports once ECC
// has taken its share (L4 23034 MiB = 24.15e9 bytes, T4 15360 MiB).
// Throughputs are dense: sparse vendor figures are halved. A precision the
// hardware does not support natively is a nil pointer, never zero.
// Interconnect bandwidth is per GPU with both directions added, as vendors
// quote it.
//
// Names. Lookup accepts ids ("h100-sxm-80gb"), aliases including the names
// NVML reports ("NVIDIA H100 80GB HBM3") and trace names ("V100M16"),
// ignoring case, spaces, dashes and underscores. An unknown name gives an
// error wrapping gpufleet.ErrNotFound with suggestions.
//
// The package is pure: no I/O, no clock, no logging. docs/CATALOG.md lists
// the columns, the verification log and the price sources.
package catalog

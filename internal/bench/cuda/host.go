package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/gpufleet/gpufleet"
)

// This file is the host side of the bench, the same on every build: where
// the libraries are looked for, the number formats the products read and
// write, the inputs and the float64 reference, and the figures' arithmetic.

// The libraries Open loads, each known by the names tried in order.
var (
	driverLibs   = []string{"libcuda.so.1", "libcuda.so"}
	cublasLtLibs = []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"}
	ncclLibs     = []string{"libnccl.so.2", "libnccl.so"}
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// Method constants (docs/BENCH.md): warm-up runs before the
// timed ones, and how much of each result is compared on the host.
const (
	warmups = 3
	// allReducesPerRun all-reduces sit between one timed run's events
	// (quickAllReducesPerRun with --quick), as nccl-tests times 20 in a
	// row, so that NCCL's launch on the host is not counted as transfer.
	allReducesPerRun      = 20
	quickAllReducesPerRun = 5
	checkRegions          = 16        // sampled regions of a copied buffer
	checkRegion           = 256 * kib // bytes in each: 4 MiB compared in all
	gemmSamples           = 64        // sampled elements of a product
	workspaceSize         = 32 * mib  // cuBLASLt workspace (the size cuBLAS advises for Hopper)
)

// libraryPaths lists what to hand dlopen for a library known by names:
// each name under dir first when dir is not empty, then each bare name,
// which the loader looks up in its default paths (LD_LIBRARY_PATH, the
// ld.so cache, /lib, /usr/lib).
func libraryPaths(dir string, names []string) []string {
	var out []string
	if dir != "" {
		for _, n := range names {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return append(out, names...)
}

// cublasLtFor is the cuBLASLt names to try with a driver of CUDA version v
// (cuDriverGetVersion's 1000 major + 10 minor; 0 when unknown): a cuBLASLt
// of a later major release than the driver's does not run on it, so its
// name is left out. The unversioned name stays, last.
func cublasLtFor(v int) []string {
	var out []string
	for _, n := range cublasLtLibs {
		_, major, versioned := strings.Cut(n, ".so.")
		if m, err := strconv.Atoi(major); v > 0 && versioned && err == nil && m > v/1000 {
			continue
		}
		out = append(out, n)
	}
	return out
}

// cudaVersion writes a cuDriverGetVersion number: "12.8", or "unknown".
func cudaVersion(v int) string {
	if v <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// searched says where libraryPaths looks, for error messages.
func searched(dir string) string {
	if dir == "" {
		return "the loader's default paths"
	}
	return dir + " and the loader's default paths"
}

// formatUUID writes the 16 bytes of cuDeviceGetUuid as NVML writes a GPU's
// UUID: "GPU-" and the bytes in lower-case hex, grouped 8-4-4-4-12.
func formatUUID(b [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// humanBytes writes a size in whole-ish binary units: "4 GiB", "256 MiB",
// "3.25 GiB".
func humanBytes(n int64) string {
	switch {
	case n >= gib:
		return strconv.FormatFloat(float64(n)/float64(gib), 'f', -1, 64) + " GiB"
	case n >= mib:
		return strconv.FormatFloat(float64(n)/float64(mib), 'f', -1, 64) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

// rates turns each run's seconds into work per second.
func rates(work float64, secs []float64) []float64 {
	out := make([]float64, len(secs))
	for i, s := range secs {
		out[i] = work / s
	}
	return out
}

// busBandwidth is an all-reduce's bus bandwidth as nccl-tests defines it
// (doc/PERFORMANCE.md there): the algorithm bandwidth, bytes per rank over
// time, times 2(n-1)/n, the share of the data each link carries in a ring,
// so that the figure compares with the link rate whatever n is.
func busBandwidth(bytes, secs float64, n int) float64 {
	if n < 2 || secs <= 0 {
		return 0
	}
	return bytes / secs * 2 * float64(n-1) / float64(n)
}

// word is the 8 bytes at word index i of the byte pattern of seed, what
// copy buffers are filled with: a stateless mix (SplitMix64's finalizer
// over a Weyl sequence), so that any sampled offset can be checked without
// keeping the pattern, and never zeros.
func word(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// fillPattern writes the pattern of seed into buf, which holds the
// pattern's bytes from offset off (both multiples of 8).
func fillPattern(buf []byte, seed uint64, off int64) {
	first := uint64(off / 8)
	parallel(len(buf)/8, func(lo, hi int) {
		for w := lo; w < hi; w++ {
			binary.LittleEndian.PutUint64(buf[8*w:], word(seed, first+uint64(w)))
		}
	})
}

// patternMismatch returns the first offset in buf, which holds the bytes
// from offset off, that differs from the pattern of seed, or -1.
func patternMismatch(buf []byte, seed uint64, off int64) int64 {
	first := uint64(off / 8)
	for w := 0; 8*w+8 <= len(buf); w++ {
		want := word(seed, first+uint64(w))
		if got := binary.LittleEndian.Uint64(buf[8*w:]); got != want {
			for b := range 8 {
				if byte(got>>(8*b)) != byte(want>>(8*b)) {
					return off + int64(8*w+b)
				}
			}
		}
	}
	return -1
}

// sampleRegions picks count regions of region bytes in a buffer of size
// bytes to compare after a copy: the first and the last, and the rest at
// random offsets, each a multiple of 8. Fewer when the buffer is small.
func sampleRegions(size, region int64, count int, r *rand.Rand) []int64 {
	if size < region {
		return nil
	}
	count = int(min(int64(count), size/region))
	out := []int64{0}
	if count > 1 {
		out = append(out, (size-region)/8*8)
	}
	for len(out) < count {
		out = append(out, r.Int64N((size-region)/8+1)*8)
	}
	return out
}

// parallel runs f over [0, n) split among the CPUs.
func parallel(n int, f func(lo, hi int)) {
	workers := max(1, min(runtime.GOMAXPROCS(0), n/(1<<16)))
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := n*w/workers, n*(w+1)/workers
		wg.Go(func() { f(lo, hi) })
	}
	wg.Wait()
}

// miniFloat is a binary floating-point format of at most 16 bits, rounded
// to nearest even on encoding. IEEE formats (fp16, bf16) spend the all-ones
// exponent on infinities and NaNs; the others (fp8 E4M3, the "fn" variant
// CUDA's __nv_fp8_e4m3 implements) only the all-ones pattern on NaN, have no
// infinity, and saturate to their largest finite value.
type miniFloat struct {
	exp, man, bias int
	ieee           bool
}

// The formats the products read and write.
var (
	fp16 = miniFloat{exp: 5, man: 10, bias: 15, ieee: true}
	bf16 = miniFloat{exp: 8, man: 7, bias: 127, ieee: true}
	e4m3 = miniFloat{exp: 4, man: 3, bias: 7}
)

func (f miniFloat) expMask() int    { return 1<<f.exp - 1 }
func (f miniFloat) signBit() uint16 { return 1 << (f.exp + f.man) }

// encode rounds v to the nearest value of the format, ties to even.
func (f miniFloat) encode(v float64) uint16 {
	var sign uint16
	if math.Signbit(v) {
		sign, v = f.signBit(), -v
	}
	if math.IsNaN(v) {
		if f.ieee {
			return sign | uint16(f.expMask())<<f.man | uint16(1)<<(f.man-1)
		}
		return sign | uint16(f.expMask())<<f.man | uint16(1<<f.man-1)
	}
	if v == 0 {
		return sign
	}
	if math.IsInf(v, 0) {
		v = math.MaxFloat64 // overflows below: infinity, or saturates
	}
	_, e := math.Frexp(v) // v in [2^(e-1), 2^e)
	e = max(e-1, 1-f.bias)
	// The significand with its hidden bit, in units of the quantum at e.
	r := int(math.RoundToEven(v / math.Ldexp(1, e-f.man)))
	if r >= 1<<(f.man+1) { // rounded up into the next binade
		r, e = r/2, e+1
	}
	field := 0 // a subnormal
	if r >= 1<<f.man {
		field, r = e+f.bias, r-1<<f.man
	}
	maxField, maxMan := f.expMask()-1, 1<<f.man-1
	if !f.ieee {
		maxField, maxMan = f.expMask(), 1<<f.man-2 // all ones is NaN
	}
	if field > maxField || field == maxField && r > maxMan {
		if f.ieee {
			return sign | uint16(f.expMask())<<f.man // infinity
		}
		return sign | uint16(maxField)<<f.man | uint16(maxMan)
	}
	return sign | uint16(field)<<f.man | uint16(r)
}

// decode returns the value of bits.
func (f miniFloat) decode(bits uint16) float64 {
	field := int(bits>>f.man) & f.expMask()
	man := int(bits) & (1<<f.man - 1)
	var v float64
	switch {
	case f.ieee && field == f.expMask() && man == 0:
		v = math.Inf(1)
	case f.ieee && field == f.expMask(), !f.ieee && field == f.expMask() && man == 1<<f.man-1:
		return math.NaN()
	case field == 0:
		v = math.Ldexp(float64(man), 1-f.bias-f.man)
	default:
		v = math.Ldexp(float64(1<<f.man+man), field-f.bias-f.man)
	}
	if bits&f.signBit() != 0 {
		return -v
	}
	return v
}

// gemmKind is one precision of the product: what the device must have,
// the bytes of A's and B's elements and of D's, and how close to the
// float64 reference D must be.
type gemmKind struct {
	p       gpufleet.Precision
	minCC   gpufleet.ComputeCapability
	in, out int
	// limit bounds ||out-ref||/||ref|| on the sampled elements; 0 means
	// exact (int8).
	limit float64
}

// gemmKinds are the products measured, widest first. TF32 and BF16 need
// Ampere's tensor cores, int8 Turing's (IMMA), fp8 Ada's or Hopper's; fp4
// is not measured yet.
var gemmKinds = []gemmKind{
	{p: gpufleet.FP64, in: 8, out: 8, limit: 1e-12},
	{p: gpufleet.FP32, in: 4, out: 4, limit: 1e-4},
	{p: gpufleet.TF32, minCC: gpufleet.ComputeCapability{Major: 8}, in: 4, out: 4, limit: 5e-3},
	{p: gpufleet.BF16, minCC: gpufleet.ComputeCapability{Major: 8}, in: 2, out: 2, limit: 2e-2},
	{p: gpufleet.FP16, in: 2, out: 2, limit: 2e-2},
	{p: gpufleet.FP8, minCC: gpufleet.ComputeCapability{Major: 8, Minor: 9}, in: 1, out: 2, limit: 2e-2}, // bf16 out
	{p: gpufleet.INT8, minCC: gpufleet.ComputeCapability{Major: 7, Minor: 5}, in: 1, out: 4, limit: 0},   // int32 out
}

// shape is the product's m = n = k and how many products one timed run
// does, so that a run lasts at least about a millisecond on an H100
// (dense bf16 about 800 TFLOP/s measured, fp8 and int8 about 1,400, fp64
// about 55, fp32 about 50): fp64 and fp32 at 4096 take 2-3 ms; the tensor
// precisions at 8192, quick at 4096 repeated, 1-3 ms.
func (k gemmKind) shape(quick bool) (n, reps int) {
	switch k.p {
	case gpufleet.FP64, gpufleet.FP32:
		return 4096, 1
	case gpufleet.FP8, gpufleet.INT8:
		if quick {
			return 4096, 16
		}
		return 8192, 2
	}
	if quick {
		return 4096, 8
	}
	return 8192, 1
}

// unit maps a random word to [-1, 1) with 24 significant bits, exact in
// float32.
func unit(w uint64) float64 { return float64(int64(w>>40)-1<<23) / (1 << 23) }

// encodeInput writes element i of A or B, drawn from the random word w:
// floats in [-1, 1) (53 bits for fp64, then rounded to the format), int8
// in [-8, 8].
func (k gemmKind) encodeInput(buf []byte, i int, w uint64) {
	switch k.p {
	case gpufleet.FP64:
		v := float64(int64(w>>11)-1<<52) / (1 << 52)
		binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(v))
	case gpufleet.FP32, gpufleet.TF32:
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(unit(w))))
	case gpufleet.BF16:
		binary.LittleEndian.PutUint16(buf[2*i:], bf16.encode(unit(w)))
	case gpufleet.FP16:
		binary.LittleEndian.PutUint16(buf[2*i:], fp16.encode(unit(w)))
	case gpufleet.FP8:
		buf[i] = byte(e4m3.encode(unit(w)))
	case gpufleet.INT8:
		buf[i] = byte(int8(int((w>>32)%17) - 8))
	}
}

// decodeInput reads element i of A or B.
func (k gemmKind) decodeInput(buf []byte, i int) float64 {
	switch k.p {
	case gpufleet.FP64:
		return math.Float64frombits(binary.LittleEndian.Uint64(buf[8*i:]))
	case gpufleet.FP32, gpufleet.TF32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])))
	case gpufleet.BF16:
		return bf16.decode(binary.LittleEndian.Uint16(buf[2*i:]))
	case gpufleet.FP16:
		return fp16.decode(binary.LittleEndian.Uint16(buf[2*i:]))
	case gpufleet.FP8:
		return e4m3.decode(uint16(buf[i]))
	case gpufleet.INT8:
		return float64(int8(buf[i]))
	}
	return math.NaN()
}

// decodeOutput reads element i of D.
func (k gemmKind) decodeOutput(buf []byte, i int) float64 {
	switch k.p {
	case gpufleet.FP64:
		return math.Float64frombits(binary.LittleEndian.Uint64(buf[8*i:]))
	case gpufleet.FP32, gpufleet.TF32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])))
	case gpufleet.BF16, gpufleet.FP8:
		return bf16.decode(binary.LittleEndian.Uint16(buf[2*i:]))
	case gpufleet.FP16:
		return fp16.decode(binary.LittleEndian.Uint16(buf[2*i:]))
	case gpufleet.INT8:
		return float64(int32(binary.LittleEndian.Uint32(buf[4*i:])))
	}
	return math.NaN()
}

// fillMatrix fills buf, a whole matrix of k's input elements, from seed.
func (k gemmKind) fillMatrix(buf []byte, seed uint64) {
	parallel(len(buf)/k.in, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			k.encodeInput(buf, i, word(seed, uint64(i)))
		}
	})
}

// refDot is the float64 reference for element (i, j) of D = op(A) op(B) in
// the TN layout: A is stored k x m column-major, so row i of op(A) is
// elements [i*kk, (i+1)*kk) of a; B is k x n column-major, so column j is
// elements [j*kk, (j+1)*kk) of b. The sum is compensated (each product's
// rounding error from an FMA, Neumaier's summation), so the reference is
// good to far below the fp64 limit.
func (k gemmKind) refDot(a, b []byte, kk, i, j int) float64 {
	var sum, comp float64
	for l := range kk {
		x, y := k.decodeInput(a, i*kk+l), k.decodeInput(b, j*kk+l)
		p := x * y
		comp += math.FMA(x, y, -p)
		t := sum + p
		if math.Abs(sum) >= math.Abs(p) {
			comp += (sum - t) + p
		} else {
			comp += (p - t) + sum
		}
		sum = t
	}
	return sum + comp
}

// relErr is ||out - ref|| / ||ref|| over the sampled elements; NaN when an
// output is not finite (an unwritten poisoned element, an overflow), so
// that it never passes a limit.
func relErr(out, ref []float64) float64 {
	var num, den float64
	for i := range out {
		if math.IsNaN(out[i]) || math.IsInf(out[i], 0) {
			return math.NaN()
		}
		d := out[i] - ref[i]
		num += d * d
		den += ref[i] * ref[i]
	}
	if den == 0 {
		if num == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}

// passes reports whether a relative error e is within limit; NaN never is.
func passes(e, limit float64) bool { return e <= limit }

// checkText says how a product compared with its reference.
func checkText(e float64, n int, limit float64) string {
	lim := fmt.Sprintf("limit %.0e", limit)
	if limit == 0 {
		lim = "exact"
	}
	return fmt.Sprintf("rel err %.1e on %d sampled elements (%s)", e, n, lim)
}

// gemmSize writes a product's shape and repeats: "8192x8192x8192",
// "4096x4096x4096 x8".
func gemmSize(n, reps int) string {
	s := strings.Repeat(strconv.Itoa(n)+"x", 2) + strconv.Itoa(n)
	if reps > 1 {
		s += " x" + strconv.Itoa(reps)
	}
	return s
}

package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

func TestOpenWithoutCUDA(t *testing.T) {
	if libraryLoads("libcuda.so.1") {
		t.Skip("libcuda.so.1 loads here")
	}
	tests := map[string]struct{ dir string }{
		"no directory":    {dir: ""},
		"bogus directory": {dir: "/nonexistent/gpufleet-cuda-test"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := Open(tc.dir, nil)
			if err == nil {
				b.Close()
				t.Fatal("Open succeeded without libcuda")
			}
			if !errors.Is(err, gpu.ErrUnavailable) {
				t.Errorf("Open error %q does not wrap gpu.ErrUnavailable", err)
			}
			want := []string{"linux and cgo"}
			if cgoBuild {
				want = []string{"libcuda.so.1", "libcuda.so", searched(tc.dir)}
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open error %q does not say %q", err, w)
				}
			}
		})
	}
}

// The entry points Open looks up, for fake libraries.
var (
	fakeDriverSymbols = []string{"cuGetErrorName", "cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName",
		"cuDeviceGetUuid_v2", "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2",
		"cuCtxSetCurrent", "cuCtxSynchronize", "cuMemGetInfo_v2", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemHostAlloc",
		"cuMemFreeHost", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
		"cuMemcpyDtoDAsync_v2", "cuMemcpyPeerAsync", "cuMemsetD8_v2", "cuMemsetD32_v2", "cuStreamCreate",
		"cuStreamDestroy_v2", "cuStreamSynchronize", "cuEventCreate", "cuEventDestroy_v2", "cuEventRecord",
		"cuEventSynchronize", "cuEventElapsedTime", "cuDeviceCanAccessPeer", "cuCtxEnablePeerAccess",
		"cuCtxDisablePeerAccess"}
	fakeCublasLtSymbols = []string{"cublasLtCreate", "cublasLtDestroy", "cublasLtGetStatusName",
		"cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy", "cublasLtMatmulDescSetAttribute",
		"cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutDestroy", "cublasLtMatmulPreferenceCreate",
		"cublasLtMatmulPreferenceDestroy", "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatmulAlgoGetHeuristic",
		"cublasLtMatmul"}
)

// fakeDriver is a libcuda whose devices can be listed and nothing more:
// cuInit returns initResult, there is one device, an H100 by its compute
// capability, and every other call fails with CUDA_ERROR_UNKNOWN.
const fakeDriver = `
#include <string.h>
int cuInit(unsigned f) { return INIT_RESULT; }
int cuDriverGetVersion(int *v) { *v = 12080; return 0; }
int cuGetErrorName(int r, const char **s) {
	*s = r == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
	return 0;
}
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int ord) { *d = ord; return 0; }
int cuDeviceGetName(char *s, int n, int d) { strncpy(s, "Fake GPU", n); return 0; }
int cuDeviceGetUuid_v2(unsigned char *u, int d) { for (int i = 0; i < 16; i++) u[i] = 0xa0 + i; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int d) { *v = attr == 75 ? 9 : 0; return 0; }
int cuCtxSetCurrent(void *c) { return 0; }
`

// fakeUUID is the UUID of fakeDriver's device.
const fakeUUID = "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"

// buildFake compiles a shared library into dir/name defining the symbols
// not in src as functions that fail.
func buildFake(t *testing.T, dir, name, src string, symbols []string, defines ...string) {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			t.Skip("no C compiler to build a fake library")
		}
	}
	var b strings.Builder
	b.WriteString(src)
	for _, s := range symbols {
		if !strings.Contains(src, " "+s+"(") {
			b.WriteString("int " + s + "(void) { return 999; }\n")
		}
	}
	c := filepath.Join(t.TempDir(), name+".c")
	if err := os.WriteFile(c, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-shared", "-fPIC", "-o", filepath.Join(dir, name), c}, defines...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
}

func TestOpenFakeLibraries(t *testing.T) {
	if !cgoBuild {
		t.Skip("the CUDA bench needs linux and cgo")
	}
	cublasLtElsewhere := slices.ContainsFunc(cublasLtLibs, libraryLoads)
	tests := map[string]struct {
		driver, cublasLt bool // build full fakes
		initResult       string
		wantErr          []string
		skip             bool
	}{
		"driver lacks an entry point": {wantErr: []string{"libcuda.so.1 has no cuGetErrorName"}},
		"no cuBLASLt": {driver: true, initResult: "0", skip: cublasLtElsewhere,
			wantErr: []string{"cuBLASLt for the driver's CUDA 12.8: none of libcublasLt.so.12, libcublasLt.so.11, libcublasLt.so loads"}},
		"cuInit fails": {driver: true, cublasLt: true, initResult: "100",
			wantErr: []string{"cuInit: CUDA_ERROR_NO_DEVICE", "libcuda.so.1"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.skip {
				t.Skip("a real cuBLASLt loads here")
			}
			dir := t.TempDir()
			if tc.driver {
				buildFake(t, dir, "libcuda.so.1", fakeDriver, fakeDriverSymbols, "-DINIT_RESULT="+tc.initResult)
			} else {
				buildFake(t, dir, "libcuda.so.1", "int cuInit(unsigned f) { return 0; }\n", nil)
			}
			if tc.cublasLt {
				buildFake(t, dir, "libcublasLt.so.12", "", fakeCublasLtSymbols)
			}
			b, err := Open(dir, nil)
			if err == nil {
				b.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, gpu.ErrUnavailable) {
				t.Errorf("Open error %q does not wrap gpu.ErrUnavailable", err)
			}
			for _, w := range append(tc.wantErr, dir) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestMeasureFakeDevice(t *testing.T) {
	if !cgoBuild {
		t.Skip("the CUDA bench needs linux and cgo")
	}
	dir := t.TempDir()
	buildFake(t, dir, "libcuda.so.1", fakeDriver, fakeDriverSymbols, "-DINIT_RESULT=0")
	buildFake(t, dir, "libcublasLt.so.12", "", fakeCublasLtSymbols)
	noNCCL := "allreduce skipped: NCCL not loaded: none of libnccl.so.2, libnccl.so loads from " + dir
	if slices.ContainsFunc(ncclLibs, libraryLoads) {
		noNCCL = "allreduce needs at least 2 GPUs, skipped"
	}
	tests := map[string]struct {
		devs         []gpu.Device
		o            bench.Options
		wantErr      string // "" for none
		wantProgress []string
	}{
		"matched to NVML's index 3": {
			devs:    []gpu.Device{{Index: 2, UUID: "GPU-other"}, {Index: 3, UUID: strings.ToUpper(fakeUUID), Model: "H100-SXM5-80GB"}},
			o:       bench.Options{Tests: []bench.Test{bench.Copy}},
			wantErr: "gpu 3: cuDevicePrimaryCtxRetain: CUDA_ERROR_UNKNOWN",
		},
		"CUDA's ordinal without NVML": {
			o:       bench.Options{GPUs: []int{0}, Tests: []bench.Test{bench.GEMM}},
			wantErr: "gpu 0: cuDevicePrimaryCtxRetain: CUDA_ERROR_UNKNOWN",
		},
		"not among NVML's GPUs": {
			devs:         []gpu.Device{{Index: 0, UUID: "GPU-other"}},
			wantProgress: []string{"cuda device 0 (" + fakeUUID + "): not among the GPUs NVML lists, skipped", "no CUDA device selected"},
		},
		"not selected, NCCL missing": {
			o:            bench.Options{GPUs: []int{1}},
			wantProgress: []string{"no CUDA device selected", "p2p needs at least 2 GPUs, skipped", noNCCL},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := Open(dir, tc.devs)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			var progress []string
			ms, err := b.Measure(t.Context(), tc.o, func(s string) { progress = append(progress, s) })
			if len(ms) != 0 {
				t.Errorf("Measure measured %v on a fake device", ms)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Measure: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Measure error %v, want %q", err, tc.wantErr)
			}
			for _, w := range tc.wantProgress {
				if !slices.ContainsFunc(progress, func(s string) bool { return strings.HasPrefix(s, w) }) {
					t.Errorf("progress %q lacks %q", progress, w)
				}
			}
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if _, err := b.Measure(t.Context(), tc.o, nil); err == nil {
				t.Error("Measure after Close succeeded")
			}
		})
	}
}

func TestLibraryPaths(t *testing.T) {
	tests := map[string]struct {
		dir   string
		names []string
		want  []string
	}{
		"loader only": {names: driverLibs, want: []string{"libcuda.so.1", "libcuda.so"}},
		"directory first": {dir: "/opt/cuda/lib64", names: cublasLtLibs, want: []string{
			"/opt/cuda/lib64/libcublasLt.so.13", "/opt/cuda/lib64/libcublasLt.so.12", "/opt/cuda/lib64/libcublasLt.so.11", "/opt/cuda/lib64/libcublasLt.so",
			"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"}},
		"nccl": {dir: "/x", names: ncclLibs, want: []string{"/x/libnccl.so.2", "/x/libnccl.so", "libnccl.so.2", "libnccl.so"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, libraryPaths(tc.dir, tc.names)); diff != "" {
				t.Errorf("libraryPaths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCublasLtFor(t *testing.T) {
	tests := map[string]struct {
		version int
		want    []string
		text    string
	}{
		"CUDA 13.0":       {version: 13000, want: cublasLtLibs, text: "13.0"},
		"CUDA 12.8":       {version: 12080, want: []string{"libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"}, text: "12.8"},
		"CUDA 11.4":       {version: 11040, want: []string{"libcublasLt.so.11", "libcublasLt.so"}, text: "11.4"},
		"unknown version": {version: 0, want: cublasLtLibs, text: "unknown"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, cublasLtFor(tc.version)); diff != "" {
				t.Errorf("cublasLtFor(%d) (-want +got):\n%s", tc.version, diff)
			}
			if got := cudaVersion(tc.version); got != tc.text {
				t.Errorf("cudaVersion(%d) = %q, want %q", tc.version, got, tc.text)
			}
		})
	}
}

func TestFormatUUID(t *testing.T) {
	var b [16]byte
	for i := range b {
		b[i] = byte(0x10*i + 0x0f - i)
	}
	if got, want := formatUUID(b), "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"; got != want {
		t.Errorf("formatUUID = %s, want %s", got, want)
	}
}

func TestMiniFloatKnownBits(t *testing.T) {
	tests := map[string]struct {
		f    miniFloat
		v    float64
		bits uint16
	}{
		"fp16 one":                 {fp16, 1, 0x3c00},
		"fp16 minus two":           {fp16, -2, 0xc000},
		"fp16 half":                {fp16, 0.5, 0x3800},
		"fp16 largest":             {fp16, 65504, 0x7bff},
		"fp16 smallest normal":     {fp16, 0x1p-14, 0x0400},
		"fp16 smallest subnormal":  {fp16, 0x1p-24, 0x0001},
		"fp16 infinity":            {fp16, math.Inf(1), 0x7c00},
		"fp16 minus zero":          {fp16, math.Copysign(0, -1), 0x8000},
		"bf16 one":                 {bf16, 1, 0x3f80},
		"bf16 minus two":           {bf16, -2, 0xc000},
		"bf16 pi":                  {bf16, 3.140625, 0x4049},
		"bf16 smallest subnormal":  {bf16, 0x1p-133, 0x0001},
		"e4m3 one":                 {e4m3, 1, 0x38},
		"e4m3 minus two":           {e4m3, -2, 0xc0},
		"e4m3 seven eighths":       {e4m3, 0.875, 0x36},
		"e4m3 largest":             {e4m3, 448, 0x7e},
		"e4m3 minus largest":       {e4m3, -448, 0xfe},
		"e4m3 smallest normal":     {e4m3, 0x1p-6, 0x08},
		"e4m3 smallest subnormal":  {e4m3, 0x1p-9, 0x01},
		"e4m3 largest subnormal":   {e4m3, 7 * 0x1p-9, 0x07},
		"e4m3 zero":                {e4m3, 0, 0x00},
		"e4m3 one and a quarter":   {e4m3, 1.25, 0x3a},
		"e4m3 two hundred and six": {e4m3, 208, 0x75},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.f.encode(tc.v); got != tc.bits {
				t.Errorf("encode(%g) = %#04x, want %#04x", tc.v, got, tc.bits)
			}
			if got := tc.f.decode(tc.bits); got != tc.v || math.Signbit(got) != math.Signbit(tc.v) {
				t.Errorf("decode(%#04x) = %g, want %g", tc.bits, got, tc.v)
			}
		})
	}
}

func TestMiniFloatRounding(t *testing.T) {
	tests := map[string]struct {
		f    miniFloat
		v    float64
		bits uint16
	}{
		"fp16 a third rounds down":             {fp16, 1.0 / 3, 0x3555},
		"fp16 tie to even, down":               {fp16, 1 + 0x1p-11, 0x3c00},
		"fp16 tie to even, up":                 {fp16, 1 + 3*0x1p-11, 0x3c02},
		"fp16 past the largest is infinity":    {fp16, 65520, 0x7c00},
		"fp16 subnormal rounds to normal":      {fp16, 0x1p-14 - 0x1p-26, 0x0400},
		"fp16 half the smallest is zero":       {fp16, 0x1p-25, 0x0000},
		"bf16 a third rounds up":               {bf16, 1.0 / 3, 0x3eab},
		"bf16 tie to even":                     {bf16, 1 + 0x1p-8, 0x3f80},
		"e4m3 tie to even, down":               {e4m3, 1.0625, 0x38},
		"e4m3 tie to even, up":                 {e4m3, 1.1875, 0x3a},
		"e4m3 saturates, no infinity":          {e4m3, 500, 0x7e},
		"e4m3 infinity saturates":              {e4m3, math.Inf(-1), 0xfe},
		"e4m3 above the largest saturates":     {e4m3, 464, 0x7e},
		"e4m3 carry into the next binade":      {e4m3, 1.97, 0x40},
		"e4m3 below half the smallest is zero": {e4m3, 0x1p-11, 0x00},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.f.encode(tc.v); got != tc.bits {
				t.Errorf("encode(%g) = %#04x, want %#04x", tc.v, got, tc.bits)
			}
		})
	}
}

// Every bit pattern decodes to a value that encodes back to it; NaNs stay
// NaNs.
func TestMiniFloatRoundTrip(t *testing.T) {
	tests := map[string]struct {
		f    miniFloat
		bits int
		nans int
	}{
		"fp16": {fp16, 16, 2 * (1<<10 - 1)},
		"bf16": {bf16, 16, 2 * (1<<7 - 1)},
		"e4m3": {e4m3, 8, 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			nans := 0
			for b := range 1 << tc.bits {
				v := tc.f.decode(uint16(b))
				if math.IsNaN(v) {
					nans++
					if !math.IsNaN(tc.f.decode(tc.f.encode(v))) {
						t.Errorf("NaN %#04x does not encode to a NaN", b)
					}
					continue
				}
				if got := tc.f.encode(v); got != uint16(b) {
					t.Errorf("encode(decode(%#04x) = %g) = %#04x", b, v, got)
				}
			}
			if nans != tc.nans {
				t.Errorf("%d NaN patterns, want %d", nans, tc.nans)
			}
		})
	}
}

func TestRelErr(t *testing.T) {
	tests := map[string]struct {
		out, ref []float64
		limit    float64
		want     float64
		pass     bool
	}{
		"equal":                 {out: []float64{1, -2, 3}, ref: []float64{1, -2, 3}, want: 0, pass: true},
		"equal, exact limit":    {out: []float64{5, 7}, ref: []float64{5, 7}, limit: 0, want: 0, pass: true},
		"one off, exact limit":  {out: []float64{5, 8}, ref: []float64{5, 7}, limit: 0, want: math.Sqrt(1.0 / 74), pass: false},
		"within":                {out: []float64{3.003, 4}, ref: []float64{3, 4}, limit: 1e-3, want: 0.003 / 5, pass: true},
		"beyond":                {out: []float64{3.3, 4}, ref: []float64{3, 4}, limit: 2e-2, want: 0.3 / 5, pass: false},
		"an unwritten NaN":      {out: []float64{math.NaN(), 4}, ref: []float64{3, 4}, limit: 1, want: math.NaN(), pass: false},
		"an infinity":           {out: []float64{math.Inf(1), 4}, ref: []float64{3, 4}, limit: 1, want: math.NaN(), pass: false},
		"zero reference, wrong": {out: []float64{1}, ref: []float64{0}, limit: 1, want: math.Inf(1), pass: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := relErr(tc.out, tc.ref)
			if math.IsNaN(tc.want) != math.IsNaN(got) || !math.IsNaN(got) && math.Abs(got-tc.want) > 1e-12*max(1, tc.want) {
				t.Errorf("relErr = %g, want %g", got, tc.want)
			}
			if p := passes(got, tc.limit); p != tc.pass {
				t.Errorf("passes(%g, %g) = %v, want %v", got, tc.limit, p, tc.pass)
			}
		})
	}
}

func TestCheckText(t *testing.T) {
	if got, want := checkText(3.1e-3, 64, 2e-2), "rel err 3.1e-03 on 64 sampled elements (limit 2e-02)"; got != want {
		t.Errorf("checkText = %q, want %q", got, want)
	}
	if got, want := checkText(0, 64, 0), "rel err 0.0e+00 on 64 sampled elements (exact)"; got != want {
		t.Errorf("checkText = %q, want %q", got, want)
	}
}

// matrix encodes values (row-major in the sense refDot reads: row i of
// op(A), or column j of B, is k consecutive elements) as kind k's inputs.
func matrix(k gemmKind, vs ...float64) []byte {
	buf := make([]byte, len(vs)*k.in)
	for i, v := range vs {
		switch k.p {
		case gpufleet.FP64:
			putLE(buf[8*i:], math.Float64bits(v), 8)
		case gpufleet.FP32:
			putLE(buf[4*i:], uint64(math.Float32bits(float32(v))), 4)
		case gpufleet.BF16:
			putLE(buf[2*i:], uint64(bf16.encode(v)), 2)
		case gpufleet.FP8:
			buf[i] = byte(e4m3.encode(v))
		case gpufleet.INT8:
			buf[i] = byte(int8(v))
		}
	}
	return buf
}

func putLE(b []byte, v uint64, n int) {
	for i := range n {
		b[i] = byte(v >> (8 * i))
	}
}

func kind(p gpufleet.Precision) gemmKind {
	i := slices.IndexFunc(gemmKinds, func(k gemmKind) bool { return k.p == p })
	return gemmKinds[i]
}

func TestRefDot(t *testing.T) {
	tests := map[string]struct {
		k      gemmKind
		a, b   []float64 // two rows of op(A), two columns of B, k = len/2
		i, j   int
		want   float64
		wantOK bool
	}{
		"int8 row 1 by column 0": {k: kind(gpufleet.INT8), a: []float64{1, 2, 3, -8, 7, 6}, b: []float64{2, -1, 5, 0, 0, 0}, i: 1, j: 0, want: -16 - 7 + 30},
		"fp8 exact":              {k: kind(gpufleet.FP8), a: []float64{0.5, -0.25, 0.875, 0, 0, 0}, b: []float64{0, 0, 0, 1, 2, -1}, i: 0, j: 1, want: 0.5*1 - 0.25*2 - 0.875},
		"bf16 exact":             {k: kind(gpufleet.BF16), a: []float64{3.140625, 1, 0, 0}, b: []float64{2, 0.5, 0, 0}, i: 0, j: 0, want: 6.28125 + 0.5},
		"fp64 cancellation":      {k: kind(gpufleet.FP64), a: []float64{1e16, 1, -1e16, 0, 0, 0}, b: []float64{1, 1, 1, 0, 0, 0}, i: 0, j: 0, want: 1},
		"fp64 product rounding":  {k: kind(gpufleet.FP64), a: []float64{1 + 0x1p-30, -1, 0, 0}, b: []float64{1 + 0x1p-30, 1 + 0x1p-29, 0, 0}, i: 0, j: 0, want: 0x1p-60},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kk := len(tc.a) / 2
			if got := tc.k.refDot(matrix(tc.k, tc.a...), matrix(tc.k, tc.b...), kk, tc.i, tc.j); got != tc.want {
				t.Errorf("refDot = %g, want %g", got, tc.want)
			}
		})
	}
}

// The inputs of every kind are drawn in range, not all zero, and decode
// to what the encoder stored.
func TestFillMatrix(t *testing.T) {
	for _, k := range gemmKinds {
		t.Run(string(k.p), func(t *testing.T) {
			n := 1 << 17
			buf := make([]byte, n*k.in)
			k.fillMatrix(buf, 42)
			lo, hi, zeros := 1.0, -1.0, 0
			for i := range n {
				v := k.decodeInput(buf, i)
				lo, hi = min(lo, v), max(hi, v)
				if v == 0 {
					zeros++
				}
			}
			limit := 1.0
			if k.p == gpufleet.INT8 {
				limit = 8
			}
			if lo < -limit || hi > limit || lo > -0.9*limit || hi < 0.9*limit {
				t.Errorf("inputs span [%g, %g], want about [-%g, %g]", lo, hi, limit, limit)
			}
			if zeros > n/10 {
				t.Errorf("%d of %d inputs are zero", zeros, n)
			}
			again := make([]byte, len(buf))
			k.fillMatrix(again, 42)
			if !slices.Equal(buf, again) {
				t.Error("the same seed filled a different matrix")
			}
		})
	}
}

// A timed run lasts about a millisecond or more on an H100 at the rates
// the sizes were chosen for.
func TestGEMMShape(t *testing.T) {
	h100 := map[gpufleet.Precision]float64{gpufleet.FP64: 55e12, gpufleet.FP32: 50e12, gpufleet.TF32: 400e12,
		gpufleet.BF16: 800e12, gpufleet.FP16: 800e12, gpufleet.FP8: 1400e12, gpufleet.INT8: 1400e12}
	for _, k := range gemmKinds {
		for _, quick := range []bool{false, true} {
			n, reps := k.shape(quick)
			if secs := float64(reps) * 2 * math.Pow(float64(n), 3) / h100[k.p]; secs < 0.8e-3 || n%16 != 0 {
				t.Errorf("%s quick=%v: %d x%d runs %.2g ms on an H100", k.p, quick, n, reps, secs*1e3)
			}
		}
	}
	if got := gemmSize(8192, 1); got != "8192x8192x8192" {
		t.Errorf("gemmSize(8192, 1) = %q", got)
	}
	if got := gemmSize(4096, 8); got != "4096x4096x4096 x8" {
		t.Errorf("gemmSize(4096, 8) = %q", got)
	}
}

func TestBusBandwidth(t *testing.T) {
	tests := map[string]struct {
		bytes, secs float64
		n           int
		want        float64
	}{
		"2 GPUs: the algorithm bandwidth": {bytes: 1e9, secs: 1, n: 2, want: 1e9},
		"8 GPUs: 7/4 of it":               {bytes: 512 << 20, secs: 0.002, n: 8, want: float64(512<<20) / 0.002 * 1.75},
		"one GPU: none":                   {bytes: 1e9, secs: 1, n: 1, want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := busBandwidth(tc.bytes, tc.secs, tc.n); math.Abs(got-tc.want) > 1e-9*tc.want {
				t.Errorf("busBandwidth = %g, want %g", got, tc.want)
			}
		})
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{4 * gib: "4 GiB", gib: "1 GiB", 256 * mib: "256 MiB", 13 * gib / 4: "3.25 GiB", 1536 * mib: "1.5 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestPattern(t *testing.T) {
	buf := make([]byte, 1<<20)
	fillPattern(buf, 7, 0)
	if bad := patternMismatch(buf, 7, 0); bad != -1 {
		t.Fatalf("a fresh pattern mismatches at %d", bad)
	}
	if slices.Equal(buf[:64], make([]byte, 64)) {
		t.Error("the pattern starts with zeros")
	}
	part := make([]byte, 4096)
	fillPattern(part, 7, 8192)
	if !slices.Equal(part, buf[8192:8192+4096]) {
		t.Error("a pattern filled from an offset differs from the whole")
	}
	if bad := patternMismatch(buf[8192:], 7, 8192); bad != -1 {
		t.Errorf("the pattern from an offset mismatches at %d", bad)
	}
	buf[12345] ^= 0x10
	if bad := patternMismatch(buf, 7, 0); bad != 12345 {
		t.Errorf("a changed byte 12345 is reported at %d", bad)
	}
	if bad := patternMismatch(buf[:4096], 8, 0); bad == -1 {
		t.Error("another seed's pattern matches")
	}
}

func TestSampleRegions(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	size := gib + 8*kib
	regions := sampleRegions(size, checkRegion, checkRegions, r)
	if len(regions) != checkRegions || regions[0] != 0 || regions[1] != size-checkRegion {
		t.Fatalf("regions %v: want %d, the first at 0, the second at the end", regions, checkRegions)
	}
	for _, off := range regions {
		if off < 0 || off+checkRegion > size || off%8 != 0 {
			t.Errorf("region at %d is outside [0, %d) or unaligned", off, size)
		}
	}
	if got := sampleRegions(3*checkRegion, checkRegion, checkRegions, r); len(got) != 3 {
		t.Errorf("a buffer of 3 regions gets %d", len(got))
	}
	if got := sampleRegions(checkRegion/2, checkRegion, checkRegions, r); got != nil {
		t.Errorf("a buffer smaller than a region gets %v", got)
	}
}

// D is read in its own type: fp8 products write bf16, int8 ones int32.
func TestDecodeOutput(t *testing.T) {
	tests := map[gpufleet.Precision]struct {
		bytes []byte
		want  float64
	}{
		gpufleet.FP64: {bytes: []byte{0, 0, 0, 0, 0, 0, 0xf0, 0xbf}, want: -1},
		gpufleet.FP32: {bytes: []byte{0, 0, 0x40, 0x40}, want: 3},
		gpufleet.TF32: {bytes: []byte{0, 0, 0x40, 0x40}, want: 3},
		gpufleet.BF16: {bytes: []byte{0x49, 0x40}, want: 3.140625},
		gpufleet.FP16: {bytes: []byte{0x00, 0x3c}, want: 1},
		gpufleet.FP8:  {bytes: []byte{0x00, 0xc0}, want: -2},
		gpufleet.INT8: {bytes: []byte{0xfe, 0xff, 0xff, 0xff}, want: -2},
	}
	for _, k := range gemmKinds {
		tc := tests[k.p]
		if len(tc.bytes) != k.out {
			t.Errorf("%s: D elements are %d bytes, the test has %d", k.p, k.out, len(tc.bytes))
			continue
		}
		if got := k.decodeOutput(tc.bytes, 0); got != tc.want {
			t.Errorf("%s: decodeOutput(% x) = %g, want %g", k.p, tc.bytes, got, tc.want)
		}
	}
	if got, want := rates(8e9, []float64{2, 4}), []float64{4e9, 2e9}; !slices.Equal(got, want) {
		t.Errorf("rates = %v, want %v", got, want)
	}
}

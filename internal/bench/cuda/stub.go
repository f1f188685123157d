//go:build !(linux && cgo)

package cuda

import (
	"context"
	"fmt"

	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

var _ bench.Backend = (*Backend)(nil)

// cgoBuild reports that this build cannot load the libraries.
const cgoBuild = false

// errNoCgo is why this build has no CUDA bench.
var errNoCgo = fmt.Errorf("%w: the CUDA bench needs linux and cgo", gpu.ErrUnavailable)

// Backend is unusable on this build: the CUDA bench needs linux and cgo.
type Backend struct{}

// Open returns an error wrapping gpu.ErrUnavailable: this build cannot
// load the CUDA libraries.
func Open(libDir string, devs []gpu.Device) (*Backend, error) { return nil, errNoCgo }

// Measure implements bench.Backend; it returns an error wrapping
// gpu.ErrUnavailable.
func (*Backend) Measure(context.Context, bench.Options, func(string)) ([]bench.Measurement, error) {
	return nil, errNoCgo
}

var _ bench.GroupBackend = (*Backend)(nil)

// GroupToken implements bench.GroupBackend; it returns an error wrapping
// gpu.ErrUnavailable.
func (*Backend) GroupToken(context.Context) ([]byte, error) { return nil, errNoCgo }

// MeasureGroup implements bench.GroupBackend; it returns an error
// wrapping gpu.ErrUnavailable.
func (*Backend) MeasureGroup(context.Context, bench.GroupRun, bench.Options, func(string)) (bench.Measurement, error) {
	return bench.Measurement{}, errNoCgo
}

// Close releases contexts and handles (not the libraries); here there are
// none.
func (*Backend) Close() error { return nil }

// libraryLoads reports whether the loader finds name: never on this build.
func libraryLoads(string) bool { return false }

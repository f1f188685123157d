//go:build !(linux && cgo)

package nvml

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

var (
	_ gpu.Backend     = (*Backend)(nil)
	_ gpu.PowerCapper = (*Backend)(nil)
)

// Option configures New.
type Option func(*options)

type options struct{}

// WithLogger is accepted for symmetry with the linux cgo build.
func WithLogger(*slog.Logger) Option { return func(*options) {} }

// WithCatalog is accepted for symmetry with the linux cgo build.
func WithCatalog(*catalog.Catalog) Option { return func(*options) {} }

// WithClock is accepted for symmetry with the linux cgo build.
func WithClock(func() time.Time) Option { return func(*options) {} }

// Backend is unusable on this build: NVML needs linux and cgo.
type Backend struct{}

// New returns gpu.ErrUnavailable: this build has no NVML.
func New(...Option) (*Backend, error) {
	return nil, fmt.Errorf("%w: nvml needs linux and cgo", gpu.ErrUnavailable)
}

// Devices returns gpu.ErrUnavailable.
func (*Backend) Devices(context.Context) ([]gpu.Device, error) { return nil, gpu.ErrUnavailable }

// Versions returns gpu.ErrUnavailable.
func (*Backend) Versions(context.Context) (gpu.Versions, error) {
	return gpu.Versions{}, gpu.ErrUnavailable
}

// Sample returns gpu.ErrUnavailable.
func (*Backend) Sample(context.Context) ([]gpu.Sample, error) { return nil, gpu.ErrUnavailable }

// Events returns gpu.ErrUnavailable.
func (*Backend) Events(context.Context, time.Duration) ([]gpu.Event, error) {
	return nil, gpu.ErrUnavailable
}

// PowerLimits returns gpu.ErrUnavailable.
func (*Backend) PowerLimits(context.Context, int) (gpu.PowerLimits, error) {
	return gpu.PowerLimits{}, gpu.ErrUnavailable
}

// SetPowerLimit returns gpu.ErrUnavailable.
func (*Backend) SetPowerLimit(context.Context, int, float64) error { return gpu.ErrUnavailable }

// Close does nothing.
func (*Backend) Close() error { return nil }

//go:build linux && cgo

package nvml

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

var _ gpu.PowerCapper = (*Backend)(nil)

// capError turns an NVML return of the power-limit calls into an error:
// a GPU that does not support limits, or an agent without the permission
// to set them (NVML needs root), is ErrNoPowerCaps, not a failure.
func capError(what string, index int, ret nvml.Return) error {
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("%w: gpu %d: %s: %s", gpu.ErrNoPowerCaps, index, what, ret.Error())
	case nvml.ERROR_INVALID_ARGUMENT:
		return fmt.Errorf("%w: gpu %d: %s: %s", gpufleet.ErrInvalid, index, what, ret.Error())
	}
	return fmt.Errorf("gpu %d: %s: %s", index, what, ret.Error())
}

// deviceAt is the GPU at index.
func (b *Backend) deviceAt(index int) (nvml.Device, error) {
	d, ret := b.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		if ret == nvml.ERROR_INVALID_ARGUMENT {
			return nil, fmt.Errorf("%w: gpu %d: %s", gpufleet.ErrNotFound, index, ret.Error())
		}
		return nil, fmt.Errorf("gpu %d: handle: %s", index, ret.Error())
	}
	return d, nil
}

// PowerLimits reads the GPU's power management limits
// (nvmlDeviceGetPowerManagementLimitConstraints, ...DefaultLimit and the
// enforced limit), in watts.
func (b *Backend) PowerLimits(ctx context.Context, index int) (gpu.PowerLimits, error) {
	if err := ctx.Err(); err != nil {
		return gpu.PowerLimits{}, err
	}
	d, err := b.deviceAt(index)
	if err != nil {
		return gpu.PowerLimits{}, err
	}
	lo, hi, ret := d.GetPowerManagementLimitConstraints()
	if ret != nvml.SUCCESS {
		return gpu.PowerLimits{}, capError("power limit constraints", index, ret)
	}
	def, ret := d.GetPowerManagementDefaultLimit()
	if ret != nvml.SUCCESS {
		return gpu.PowerLimits{}, capError("default power limit", index, ret)
	}
	l := gpu.PowerLimits{MinWatts: float64(lo) / 1000, MaxWatts: float64(hi) / 1000, DefaultWatts: float64(def) / 1000}
	if mw, ret := d.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
		l.CurrentWatts = float64(mw) / 1000
	}
	if l.MaxWatts <= 0 || l.MinWatts > l.MaxWatts {
		return gpu.PowerLimits{}, fmt.Errorf("%w: gpu %d: power limit constraints %v-%v W", gpu.ErrNoPowerCaps, index, l.MinWatts, l.MaxWatts)
	}
	return l, nil
}

// SetPowerLimit sets the GPU's power management limit
// (nvmlDeviceSetPowerManagementLimit, in milliwatts). It needs root; the
// limit holds until the driver reloads or it is set again.
func (b *Backend) SetPowerLimit(ctx context.Context, index int, watts float64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := b.deviceAt(index)
	if err != nil {
		return err
	}
	if !(watts > 0 && watts < 1e7) {
		return fmt.Errorf("%w: gpu %d: power limit %v W", gpufleet.ErrInvalid, index, watts)
	}
	if ret := d.SetPowerManagementLimit(uint32(watts*1000 + 0.5)); ret != nvml.SUCCESS {
		return capError("set power limit", index, ret)
	}
	return nil
}

//go:build linux && cgo

package nvml

import (
	"errors"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// TestPowerLimits: the constraints, default and enforced limit come in
// watts; a limit is set in milliwatts; a GPU that refuses (no root, not
// supported) is ErrNoPowerCaps, not a failure.
func TestPowerLimits(t *testing.T) {
	srv := prepare(dgxh100.New())
	var set []uint32
	for i := range srv.Devices {
		d := dev(srv, i)
		d.GetPowerManagementLimitConstraintsFunc = func() (uint32, uint32, nvml.Return) { return 200000, 700000, nvml.SUCCESS }
		d.GetPowerManagementDefaultLimitFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }
		d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 650000, nvml.SUCCESS }
		d.SetPowerManagementLimitFunc = func(mw uint32) nvml.Return {
			if i == 1 {
				return nvml.ERROR_NO_PERMISSION
			}
			set = append(set, mw)
			return nvml.SUCCESS
		}
	}
	b := open(t, srv)
	l, err := b.PowerLimits(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(gpu.PowerLimits{MinWatts: 200, MaxWatts: 700, DefaultWatts: 700, CurrentWatts: 650}, l); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}
	if err := b.SetPowerLimit(t.Context(), 0, 412.5); err != nil || !slices.Equal(set, []uint32{412500}) {
		t.Errorf("SetPowerLimit(412.5 W) = %v, set %v mW", err, set)
	}
	if err := b.SetPowerLimit(t.Context(), 1, 400); !errors.Is(err, gpu.ErrNoPowerCaps) {
		t.Errorf("no permission: SetPowerLimit = %v, want ErrNoPowerCaps", err)
	}
	if err := b.SetPowerLimit(t.Context(), 0, -1); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("negative limit: %v, want ErrInvalid", err)
	}
	dev(srv, 2).GetPowerManagementLimitConstraintsFunc = nil
	unsupported(&dev(srv, 2).Device)
	if _, err := b.PowerLimits(t.Context(), 2); !errors.Is(err, gpu.ErrNoPowerCaps) {
		t.Errorf("not supported: PowerLimits = %v, want ErrNoPowerCaps", err)
	}
}

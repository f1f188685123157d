package gpu

import (
	"context"
	"fmt"
)

// Snapshot is what a backend reports at one moment: discovery, versions and
// one sample of every GPU. It is what gpu-check dumps as JSON.
type Snapshot struct {
	Devices  []Device `json:"devices"`
	Versions Versions `json:"versions"`
	Samples  []Sample `json:"samples"`
}

// ReadSnapshot reads the devices, the versions and one sample from b.
func ReadSnapshot(ctx context.Context, b Backend) (Snapshot, error) {
	var s Snapshot
	var err error
	if s.Devices, err = b.Devices(ctx); err != nil {
		return Snapshot{}, fmt.Errorf("read devices: %w", err)
	}
	if s.Versions, err = b.Versions(ctx); err != nil {
		return Snapshot{}, fmt.Errorf("read versions: %w", err)
	}
	if s.Samples, err = b.Sample(ctx); err != nil {
		return Snapshot{}, fmt.Errorf("read samples: %w", err)
	}
	return s, nil
}

package nvml

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/gpufleet/gpufleet/internal/gpu"
)

// Dump opens the NVML backend, reads a gpu.Snapshot and writes it to w as
// indented JSON. It samples twice, interval apart, so the GPM metrics of
// Hopper and newer GPUs (which need two samples) are filled in; interval 0
// samples once. On a machine without NVML it returns gpu.ErrUnavailable.
func Dump(ctx context.Context, w io.Writer, interval time.Duration, opts ...Option) error {
	b, err := New(opts...)
	if err != nil {
		return err
	}
	defer b.Close()
	return DumpBackend(ctx, w, b, interval)
}

// DumpBackend writes a gpu.Snapshot of any backend to w as indented JSON,
// sampling twice interval apart when interval > 0.
func DumpBackend(ctx context.Context, w io.Writer, b gpu.Backend, interval time.Duration) error {
	if interval > 0 {
		if _, err := b.Sample(ctx); err != nil {
			return fmt.Errorf("first sample: %w", err)
		}
		t := time.NewTimer(interval)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	s, err := gpu.ReadSnapshot(ctx, b)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

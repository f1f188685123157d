package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

func TestShmFits(t *testing.T) {
	nodes := []scheduler.Node{{Labels: map[string]string{gpufleet.HostMemoryLabel: "68719476736"}}, // 64 GiB
		{Labels: map[string]string{gpufleet.HostMemoryLabel: "137438953472"}}, // 128 GiB
		{Labels: map[string]string{gpufleet.HostMemoryLabel: "junk"}}, {}}
	for _, tc := range []struct {
		shm   gpufleet.Bytes
		nodes []scheduler.Node
		want  string
	}{
		{0, nodes, ""},
		{16 << 30, nodes, ""},
		{128 << 30, nodes, ""},
		{129 << 30, nodes, "more than the memory of the fleet's largest node (128.0 GiB)"},
		{1 << 50, nil, ""}, // no node says its memory: nothing to check against
	} {
		err := shmFits(tc.nodes, tc.shm)
		if (tc.want == "") != (err == nil) || err != nil && (!strings.Contains(err.Error(), tc.want) || !errors.Is(err, gpufleet.ErrInvalid)) {
			t.Errorf("shm %d: %v, want %q", tc.shm, err, tc.want)
		}
	}
}

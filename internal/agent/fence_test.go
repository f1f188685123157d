package agent

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// TestRestartWithoutAFenceStopsItsAttempts: an agent restarted with a
// stored credential that carries no fence timeout (written by an older
// agent), and no server to ask, stops the attempts it supervises at once
// (reason code fenced): nothing guarantees they would stop before the
// server gives their jobs to another node.
func TestRestartWithoutAFenceStopsItsAttempts(t *testing.T) {
	t.Setenv("GPUFLEET_TEST_SUPERVISE", "1")
	dir := t.TempDir()
	newAgent := func(cp *fakePlane) *Agent {
		be, err := simgpu.New([]simgpu.Spec{{Model: "l4", Count: 1}}, simgpu.WithNodeName("n1"))
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(Config{Name: "n1", DataDir: dir, Backend: "sim", FenceGrace: time.Second,
			Runner: RunnerConfig{Supervisor: []string{os.Args[0]}, Environ: os.Environ(), KillAfter: 200 * time.Millisecond}}, be, cp, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	first := newAgent(&fakePlane{})
	t.Cleanup(func() { killAll(first.runner) })
	ctx := t.Context()
	if err := first.discover(ctx); err != nil {
		t.Fatal(err)
	}
	first.mu.Lock()
	first.cred = credential{Node: "n1", Credential: "cred"}
	first.setTimingLocked(1, 5)
	first.storeCredentialLocked()
	first.mu.Unlock()
	first.apply(ctx, api.HeartbeatResponse{Start: []api.Assignment{{AttemptID: "a-1", JobID: "j-1", Team: "t",
		GPUs: []string{first.inventory[0].UUID}, GraceS: 30, Command: []string{"sleep", "60"}}}})
	waitState(t, first.runner, "a-1", gpufleet.AttemptRunning)

	// The agent dies; what restarts it finds a credential without timing
	// and a server that does not answer.
	if err := writeJSONAtomic(first.credPath(), credential{Node: "n1", Credential: "cred"}, 0o600); err != nil {
		t.Fatal(err)
	}
	second := newAgent(&fakePlane{down: true})
	t.Cleanup(func() { killAll(second.runner) })
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- second.Run(runCtx) }()
	rep := waitState(t, second.runner, "a-1", gpufleet.AttemptStopped, gpufleet.AttemptFailed)
	cancel()
	<-done
	if rep.State != gpufleet.AttemptStopped || rep.ReasonCode != ReasonFenced || !strings.Contains(rep.Reason, "fence timeout") {
		t.Errorf("the re-adopted attempt: %+v, want stopped, fenced, because the fence timeout is unknown", rep)
	}
}

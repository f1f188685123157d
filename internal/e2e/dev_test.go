package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// processesUnder lists the pids whose command line names dir: gpufleet
// dev's agents (--data-dir DIR/agents/...) and their attempts'
// supervisors (--dir DIR/agents/.../attempts/...).
func processesUnder(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
				continue // exited, not reaped yet
			}
		}
		out = append(out, pid)
	}
	return out
}

// launchDev runs `gpufleet dev` with env added and waits for dev.json.
func launchDev(t *testing.T, env ...string) (*exec.Cmd, chan struct{}, string, devProc, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	var stderr bytes.Buffer
	cmd := exec.Command(binary(t), "dev", "--listen", "127.0.0.1:0", "--data-dir", dir)
	cmd.Env, cmd.Stderr = append(os.Environ(), env...), &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		for _, pid := range processesUnder(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	var state devProc
	eventually(t, 60*time.Second, "gpufleet dev writes dev.json", func() error {
		data, err := os.ReadFile(filepath.Join(dir, "dev.json"))
		if err != nil {
			return err
		}
		return json.Unmarshal(data, &state)
	})
	return cmd, exited, dir, state, &stderr
}

// runBeating submits a beating job to a gpufleet dev fleet and waits
// until it beats.
func runBeating(t *testing.T, state devProc) (string, string) {
	t.Helper()
	c, err := api.NewClient([]string{state.APIURL}, state.Teams["team-a"])
	if err != nil {
		t.Fatal(err)
	}
	beats := outDir(t)
	r, err := c.SubmitJob(t.Context(), api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"l4"}},
		Command: beatCommand(beats), Grace: gpufleet.Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	waitRunningAttempt(t, c, r.ID, beats, 30*time.Second)
	return r.ID, beats
}

// noOrphans waits until no agent or supervisor of dir runs and the job's
// command has stopped beating.
func noOrphans(t *testing.T, dir, beats, job string, d time.Duration) {
	t.Helper()
	eventually(t, d, "no process of gpufleet dev is left", func() error {
		if pids := processesUnder(dir); len(pids) > 0 {
			return fmt.Errorf("still running: %v", pids)
		}
		last := time.Time{}
		spans, _ := readBeats(beats, job)
		for _, s := range spans {
			if s.Last.After(last) {
				last = s.Last
			}
		}
		if time.Since(last) < 5*beatEvery {
			return fmt.Errorf("the job's command still beats")
		}
		return nil
	})
}

// TestDevNeverLeavesOrphans: when gpufleet dev's server fails, dev stops
// its agents and their attempts and exits non-zero with the server's
// error; when dev itself is killed, its agents go with it (the kernel
// signals them) and their attempts fence themselves.
func TestDevNeverLeavesOrphans(t *testing.T) {
	t.Run("the server fails", func(t *testing.T) {
		cmd, exited, dir, state, stderr := launchDev(t, "GPUFLEET_TEST_SERVER_FAIL_AFTER=20s")
		job, beats := runBeating(t, state)
		select {
		case <-exited:
		case <-time.After(40 * time.Second):
			t.Fatal("gpufleet dev did not exit after its server failed")
		}
		if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(stderr.String(), "server failed on purpose") {
			t.Errorf("dev exited %d, stderr:\n%s", cmd.ProcessState.ExitCode(), stderr)
		}
		noOrphans(t, dir, beats, job, 2*time.Second)
	})
	t.Run("dev is interrupted", func(t *testing.T) {
		cmd, exited, dir, state, stderr := launchDev(t)
		job, beats := runBeating(t, state)
		cmd.Process.Signal(os.Interrupt)
		<-exited
		// Ctrl-C stops the jobs' processes itself, without waiting for the
		// fence (--keep-jobs would leave them to it).
		if !strings.Contains(stderr.String(), "stopped 1 running job process") {
			t.Errorf("dev's stderr:\n%s", stderr)
		}
		noOrphans(t, dir, beats, job, 2*time.Second)
	})
	t.Run("dev is killed", func(t *testing.T) {
		cmd, exited, dir, state, _ := launchDev(t)
		job, beats := runBeating(t, state)
		cmd.Process.Kill()
		<-exited
		// The agents get SIGTERM at once; the attempt's supervisor fences
		// it 5s after the agent's last heartbeat (dev's fence).
		noOrphans(t, dir, beats, job, 15*time.Second)
	})
}

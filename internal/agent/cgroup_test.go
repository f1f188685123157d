package agent

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// Limits the cgroup tests give their attempts.
const (
	testCPUMax    = "50000 100000" // half a CPU
	testMemoryMax = 256 << 20
)

// mountCgroup2 mounts a cgroup2 hierarchy in a temporary directory and
// unmounts it when the test ends. Every cgroup2 mount shows the one unified
// hierarchy, so this works on a cgroup v1 or hybrid host too; there the
// cpu and memory controllers stay with v1 and its cgroup.controllers lacks
// them. The test is skipped when the mount fails (not root, no permission).
func mountCgroup2(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a cgroup2 hierarchy needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("none", dir, "cgroup2", 0, ""); err != nil {
		t.Skipf("cannot mount cgroup2 at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		_ = os.Remove(filepath.Join(dir, cgroupParent)) // fails while another test uses it
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Logf("umount %s: %v; detaching it (umount -l)", dir, err)
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

// poll calls f every 10ms until it returns true or the timeout passes.
func poll(timeout time.Duration, f func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if f() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gone reports whether pid has exited (or is a zombie nobody reaped yet).
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) || zombie(pid)
}

// procUIDs returns the real, effective, saved and filesystem uids of pid.
func procUIDs(t *testing.T, pid int) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			return strings.Fields(rest)
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return nil
}

// runAsUser is the unprivileged user the test configures for its team: one
// other than the default (nobody) when the system has it.
func runAsUser(t *testing.T) *user.User {
	t.Helper()
	for _, name := range []string{"daemon", "nobody"} {
		if u, err := user.Lookup(name); err == nil && u.Uid != "0" {
			return u
		}
	}
	t.Skip("no unprivileged user (daemon, nobody) to run the attempt as")
	return nil
}

func TestAttemptRunsInItsOwnCgroupV2AsItsTeamsUser(t *testing.T) {
	root := mountCgroup2(t)
	u := runAsUser(t)
	data, out := t.TempDir(), sharedDir(t)
	r := testRunner(t, data, time.Now)
	r.cfg.Cgroups, r.cfg.CgroupRoot = true, root
	r.cfg.RunAs = map[string]string{"team-c": u.Username}
	r.limits = func(api.Assignment) (string, int64) { return testCPUMax, testMemoryMax }
	// Unique: the unified hierarchy is shared by every cgroup2 mount.
	id := fmt.Sprintf("cg-%d-%d", os.Getpid(), time.Now().UnixNano())
	cg := filepath.Join(root, cgroupParent, id)
	childFile, goFile := filepath.Join(out, "child"), filepath.Join(out, "go")
	var child int
	t.Cleanup(func() { // whatever happened, leave nothing behind
		_ = os.WriteFile(filepath.Join(cg, cgroupKill), []byte("1"), 0)
		if child > 0 {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
		poll(time.Second, func() bool { err := os.Remove(cg); return err == nil || errors.Is(err, os.ErrNotExist) })
	})

	// The command leaves a child behind and waits for the test's go-ahead.
	script := fmt.Sprintf("sleep 300 & echo $! > %s; while [ ! -e %s ]; do sleep 0.01; done; echo done", childFile, goFile)
	r.Start(api.Assignment{AttemptID: id, JobID: "j-cg", Team: "team-c", GPUs: []string{"GPU-0"}, Command: []string{"sh", "-c", script}})
	waitState(t, r, id, gpufleet.AttemptRunning)
	var pr pidRecord
	if err := readJSON(filepath.Join(data, "attempts", id, pidFileName), &pr); err != nil || pr.PID <= 0 {
		t.Fatalf("pid.json: %+v %v", pr, err)
	}
	if !poll(3*time.Second, func() bool {
		b, err := os.ReadFile(childFile)
		if err == nil {
			child, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return err == nil && child > 0
	}) {
		t.Fatalf("the command did not write its child's pid to %s", childFile)
	}

	// While it runs: the command and its child are in the attempt's cgroup,
	// as the team's user.
	procs, err := os.ReadFile(filepath.Join(cg, cgroupProcs))
	if err != nil {
		t.Fatalf("the attempt's cgroup: %v", err)
	}
	for _, pid := range []int{pr.PID, child} {
		if !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(pid)) {
			t.Errorf("pid %d is not in %s: %q", pid, filepath.Join(cg, cgroupProcs), procs)
		}
	}
	for _, uid := range procUIDs(t, pr.PID) {
		if uid != u.Uid {
			t.Errorf("the command runs with uids %v, want %s (%s)", procUIDs(t, pr.PID), u.Uid, u.Username)
			break
		}
	}

	// Each limit is written where its controller exists, else the log says
	// it is not enforced and why.
	ctrls, err := cgroupControllers(root)
	if err != nil {
		t.Fatal(err)
	}
	log, _ := os.ReadFile(filepath.Join(data, "attempts", id, logFileName))
	for _, l := range []struct{ ctrl, file, want string }{
		{"cpu", cgroupCPUMax, testCPUMax},
		{"memory", cgroupMemMax, strconv.Itoa(testMemoryMax)},
	} {
		if slices.Contains(ctrls, l.ctrl) {
			got, err := os.ReadFile(filepath.Join(cg, l.file))
			if err != nil || strings.TrimSpace(string(got)) != l.want {
				t.Errorf("%s: %q %v, want %q", l.file, got, err, l.want)
			}
			continue
		}
		t.Logf("cgroup v2 at %s has no %s controller here: checking the log says %s is not enforced", root, l.ctrl, l.file)
		want := fmt.Sprintf("(%s %s", l.file, l.want)
		note := fmt.Sprintf("is NOT enforced: cgroup v2 at %s has no %s controller", root, l.ctrl)
		if !slices.ContainsFunc(strings.Split(string(log), "\n"), func(s string) bool {
			return strings.HasPrefix(s, "gpufleet: ") && strings.Contains(s, want) && strings.Contains(s, note)
		}) {
			t.Errorf("the log does not say the %s limit is not enforced (%q):\n%s", l.ctrl, note, log)
		}
	}

	// The command ends; the child it left is killed with its cgroup
	// (cgroup.kill), which is removed.
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := waitState(t, r, id, gpufleet.AttemptSucceeded, gpufleet.AttemptFailed)
	if rep.State != gpufleet.AttemptSucceeded {
		t.Errorf("report %+v", rep)
	}
	if !poll(2*time.Second, func() bool { return gone(child) }) {
		t.Errorf("the child %d the command left behind still runs", child)
	}
	if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the attempt's cgroup %s is still there: %v", cg, err)
	}
	log, _ = os.ReadFile(filepath.Join(data, "attempts", id, logFileName))
	if !strings.Contains(string(log), "done") || strings.Contains(string(log), "running without it") || strings.Contains(string(log), "not removed") {
		t.Errorf("log:\n%s", log)
	}
}

// A root that is not cgroup v2 (here a plain directory) gives no cgroup:
// the attempt runs without one, and its log says so and that its limits
// are not enforced.
func TestAttemptRunsWithoutCgroupWhenRootIsNotCgroupV2(t *testing.T) {
	data, root := t.TempDir(), t.TempDir()
	r := testRunner(t, data, time.Now)
	r.cfg.Cgroups, r.cfg.CgroupRoot = true, root
	r.limits = func(api.Assignment) (string, int64) { return testCPUMax, testMemoryMax }
	r.Start(api.Assignment{AttemptID: "nocg", JobID: "j-nocg", Team: "team-a", GPUs: []string{"GPU-0"}, Command: []string{"sh", "-c", "echo ran"}})
	if rep := waitState(t, r, "nocg", gpufleet.AttemptSucceeded, gpufleet.AttemptFailed); rep.State != gpufleet.AttemptSucceeded {
		t.Fatalf("report %+v", rep)
	}
	log, _ := os.ReadFile(filepath.Join(data, "attempts", "nocg", logFileName))
	for _, want := range []string{
		"is not a cgroup v2 hierarchy", "(running without it)",
		"CPU limit (cpu.max 50000 100000) is NOT enforced: the attempt has no cgroup",
		"memory limit (memory.max 268435456 bytes) is NOT enforced: the attempt has no cgroup", "ran",
	} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	if _, err := os.Stat(filepath.Join(root, cgroupParent)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("made %s under a root that is not cgroup v2: %v", cgroupParent, err)
	}
}

func TestDetectCgroupV2(t *testing.T) {
	ok, note := DetectCgroupV2(DefaultCgroupRoot)
	t.Logf("this host: cgroups %v: %s", ok, note)
	plain := t.TempDir()
	if ok, note := DetectCgroupV2(plain); ok || !strings.HasPrefix(note, "off: ") {
		t.Errorf("a plain directory: %v %q", ok, note)
	}
	root := mountCgroup2(t)
	ok, note = DetectCgroupV2(root)
	if !ok || !strings.Contains(note, "cgroup v2 at "+root) {
		t.Errorf("a cgroup2 mount: %v %q", ok, note)
	}
	t.Logf("%s", note)
}

func TestAssignmentLimits(t *testing.T) {
	for _, tc := range []struct {
		cpus    float64
		mem     int64
		wantCPU string
		wantMem int64
	}{
		{0, 0, "", 0},
		{16, 64 << 30, "1600000 100000", 64 << 30},
		{0.5, 0, "50000 100000", 0},
		{1.000001, 0, "100001 100000", 0}, // rounded up: never less than asked
	} {
		cpu, mem := assignmentLimits(api.Assignment{CPUs: tc.cpus, MemoryBytes: tc.mem})
		if cpu != tc.wantCPU || mem != tc.wantMem {
			t.Errorf("cpus %g memory %d: cpu.max %q memory.max %d, want %q %d", tc.cpus, tc.mem, cpu, mem, tc.wantCPU, tc.wantMem)
		}
	}
}

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Files in an attempt's directory, DATA_DIR/attempts/<id>/.
const (
	specFile       = "spec.json"      // what to run: written by the agent
	pidFileName    = "pid.json"       // the command's pid and group: written by the supervisor
	statusFileName = "status.json"    // how it ended: written by the supervisor
	logFileName    = "log"            // stdout and stderr of the command
	supervisorLog  = "supervisor.log" // the supervisor's own errors
	cgroupRoot     = "/sys/fs/cgroup" // cgroup v2 mount
	cgroupParent   = "gpufleet"       // attempts' cgroups live under it
	cgroupCPUMax   = "cpu.max"        // "QUOTA PERIOD"
	cgroupMemMax   = "memory.max"     // bytes
	cgroupKill     = "cgroup.kill"    // writing 1 kills every process in it
	cgroupProcs    = "cgroup.procs"   // pids in the cgroup
	cgroupSubtree  = "cgroup.subtree_control"
	cgroupCtrls    = "cgroup.controllers"
)

// superviseSpec is what the supervisor runs.
type superviseSpec struct {
	AttemptID string   `json:"attempt_id"`
	Command   []string `json:"command"`
	Env       []string `json:"env"`
	Workdir   string   `json:"workdir"`
	// UID and GID, when set, are the unprivileged user the command runs as.
	UID    *uint32  `json:"uid,omitempty"`
	GID    *uint32  `json:"gid,omitempty"`
	Groups []uint32 `json:"groups,omitempty"`
	// Cgroup, when set, is a cgroup v2 directory to create and run in, with
	// the limits below when given.
	Cgroup         string `json:"cgroup,omitempty"`
	CPUMax         string `json:"cpu_max,omitempty"`
	MemoryMaxBytes int64  `json:"memory_max_bytes,omitempty"`
}

// pidRecord is the running command as the supervisor started it.
type pidRecord struct {
	SupervisorPID int       `json:"supervisor_pid"`
	PID           int       `json:"pid"`
	PGID          int       `json:"pgid"`
	StartedAt     time.Time `json:"started_at"`
}

// exitRecord is how the command ended.
type exitRecord struct {
	ExitCode   int       `json:"exit_code"`
	Signal     string    `json:"signal,omitempty"`
	Error      string    `json:"error,omitempty"`
	FinishedAt time.Time `json:"finished_at"`
}

// Supervise runs the attempt described in dir/spec.json and records its
// end in dir/status.json; it is `gpufleet agent supervise --dir DIR`, run
// by the agent in its own session so that it outlives an agent restart.
// The command runs in its own process group (the agent signals the group);
// the supervisor forwards SIGTERM, SIGINT and SIGUSR1 it receives itself.
// It returns the supervisor's exit code: 0 once status.json is written.
func Supervise(dir string) int {
	status, err := supervise(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpufleet supervise: %v\n", err)
		status = exitRecord{ExitCode: 127, Error: err.Error()}
	}
	status.FinishedAt = time.Now().UTC()
	if err := writeJSONAtomic(filepath.Join(dir, statusFileName), status, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "gpufleet supervise: write status: %v\n", err)
		return 1
	}
	return 0
}

func supervise(dir string) (exitRecord, error) {
	var spec superviseSpec
	data, err := os.ReadFile(filepath.Join(dir, specFile))
	if err != nil {
		return exitRecord{}, err
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return exitRecord{}, fmt.Errorf("%s: %w", specFile, err)
	}
	if len(spec.Command) == 0 {
		return exitRecord{}, errors.New("empty command")
	}
	logf, err := os.OpenFile(filepath.Join(dir, logFileName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return exitRecord{}, err
	}
	defer logf.Close()
	fail := func(code int, err error) (exitRecord, error) {
		fmt.Fprintf(logf, "gpufleet: %v\n", err)
		return exitRecord{ExitCode: code, Error: err.Error()}, nil
	}
	// Look the program up on the attempt's PATH, not the agent's.
	for _, kv := range spec.Env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			_ = os.Setenv("PATH", p)
		}
	}
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = spec.Env, spec.Workdir, logf, logf
	attr := &syscall.SysProcAttr{Setpgid: true}
	if spec.UID != nil && spec.GID != nil {
		attr.Credential = &syscall.Credential{Uid: *spec.UID, Gid: *spec.GID, Groups: spec.Groups}
	}
	var cgroupDir *os.File
	if spec.Cgroup != "" {
		if cgroupDir, err = makeCgroup(spec); err != nil {
			fmt.Fprintf(logf, "gpufleet: cgroup %s: %v (running without it)\n", spec.Cgroup, err)
			spec.Cgroup = ""
		} else {
			defer cgroupDir.Close()
			attr.UseCgroupFD, attr.CgroupFD = true, int(cgroupDir.Fd())
		}
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		code := 127
		if errors.Is(err, os.ErrPermission) {
			code = 126
		}
		return fail(code, fmt.Errorf("start %s: %w", spec.Command[0], err))
	}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGHUP)
	go func() {
		for s := range sig {
			if s == syscall.SIGHUP {
				continue
			}
			_ = syscall.Kill(-cmd.Process.Pid, s.(syscall.Signal))
		}
	}()
	rec := pidRecord{SupervisorPID: os.Getpid(), PID: cmd.Process.Pid, PGID: cmd.Process.Pid, StartedAt: time.Now().UTC()}
	if err := writeJSONAtomic(filepath.Join(dir, pidFileName), rec, 0o644); err != nil {
		fmt.Fprintf(logf, "gpufleet: write %s: %v\n", pidFileName, err)
	}
	werr := cmd.Wait()
	signal.Stop(sig)
	out := exitRecord{}
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			out.ExitCode, out.Signal = 128+int(ws.Signal()), ws.Signal().String()
		} else {
			out.ExitCode = ws.ExitStatus()
		}
	default:
		out.ExitCode, out.Error = 1, werr.Error()
	}
	if spec.Cgroup != "" {
		// Whatever the command left behind in its cgroup goes with it.
		_ = os.WriteFile(filepath.Join(spec.Cgroup, cgroupKill), []byte("1"), 0)
		for range 50 {
			if os.Remove(spec.Cgroup) == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out, nil
}

// makeCgroup creates the attempt's cgroup v2 directory with its limits and
// returns it opened, for clone into it.
func makeCgroup(spec superviseSpec) (*os.File, error) {
	parent := filepath.Dir(spec.Cgroup)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, err
	}
	// Enable the cpu and memory controllers down to the parent.
	for _, d := range []string{filepath.Dir(parent), parent} {
		_ = os.WriteFile(filepath.Join(d, cgroupSubtree), []byte("+cpu +memory"), 0)
	}
	if err := os.Mkdir(spec.Cgroup, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if spec.CPUMax != "" {
		if err := os.WriteFile(filepath.Join(spec.Cgroup, cgroupCPUMax), []byte(spec.CPUMax), 0); err != nil {
			return nil, fmt.Errorf("cpu.max: %w", err)
		}
	}
	if spec.MemoryMaxBytes > 0 {
		if err := os.WriteFile(filepath.Join(spec.Cgroup, cgroupMemMax), []byte(strconv.FormatInt(spec.MemoryMaxBytes, 10)), 0); err != nil {
			return nil, fmt.Errorf("memory.max: %w", err)
		}
	}
	return os.Open(spec.Cgroup)
}

// cgroupV2Available reports whether the unified cgroup v2 hierarchy is
// mounted and writable here (root on a cgroup v2 host).
func cgroupV2Available() bool {
	if _, err := os.Stat(filepath.Join(cgroupRoot, cgroupCtrls)); err != nil {
		return false
	}
	return os.Geteuid() == 0
}

// writeJSONAtomic writes v as JSON through a temporary file and a rename.
func writeJSONAtomic(path string, v any, mode os.FileMode) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, append(data, '\n'), mode)
}

// WriteFileAtomic writes data through a temporary file, fsync and rename,
// so readers never see half a file. The agent keeps its state this way; the
// CLI writes server.url, admin-token and dev.json with it too.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// readJSON reads a JSON file into v; a missing file is os.ErrNotExist.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

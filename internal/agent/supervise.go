package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/agent/devcgroup"
)

// Files in an attempt's directory, DATA_DIR/attempts/<id>/.
const (
	specFile       = "spec.json"      // what to run: written by the agent
	pidFileName    = "pid.json"       // the command's pid and group: written by the supervisor
	statusFileName = "status.json"    // how it ended: written by the supervisor
	logFileName    = "log"            // stdout and stderr of the command
	supervisorLog  = "supervisor.log" // the supervisor's own errors
	cgroupParent   = "gpufleet"       // attempts' cgroups live under the root's gpufleet/
	cgroupCPUMax   = "cpu.max"        // "QUOTA PERIOD"
	cgroupMemMax   = "memory.max"     // bytes
	cgroupKill     = "cgroup.kill"    // writing 1 kills every process in it
	cgroupProcs    = "cgroup.procs"   // pids in the cgroup
	cgroupSubtree  = "cgroup.subtree_control"
	cgroupCtrls    = "cgroup.controllers"

	// DefaultCgroupRoot is where a cgroup v2 host mounts the unified
	// hierarchy (--cgroup-root).
	DefaultCgroupRoot = "/sys/fs/cgroup"
	// DevicesV1Root is where a cgroup v1 or hybrid host mounts the devices
	// controller.
	DevicesV1Root = "/sys/fs/cgroup/devices"

	cgroup2Magic = 0x63677270 // CGROUP2_SUPER_MAGIC
	cgroup1Magic = 0x27e0eb   // CGROUP_SUPER_MAGIC
	tmpfsMagic   = 0x01021994 // TMPFS_MAGIC: /sys/fs/cgroup on v1 and hybrid hosts
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
	// Cgroup, when set, is a cgroup v2 directory ROOT/gpufleet/<attempt> to
	// create and run in, with the limits below where ROOT has the cpu and
	// memory controllers (the attempt's log says which limit is not
	// enforced and why).
	Cgroup         string `json:"cgroup,omitempty"`
	CPUMax         string `json:"cpu_max,omitempty"`
	MemoryMaxBytes int64  `json:"memory_max_bytes,omitempty"`
	// Init, when set, runs the command under InitArgv (`gpufleet agent
	// init`) as PID 1 of new PID and mount namespaces, which gives it its
	// own /proc and /tmp and drops to Init's user (AttemptInit).
	Init     *initSpec `json:"init,omitempty"`
	InitArgv []string  `json:"init_argv,omitempty"`
	// Devices, with DeviceMode, confines the command to these device nodes
	// (and devcgroup.Base): "v1" in the devices-controller directory
	// DeviceCgroupV1, made here; "v2-ebpf" on Cgroup.
	Devices        []string `json:"devices,omitempty"`
	DeviceMode     string   `json:"device_mode,omitempty"`
	DeviceCgroupV1 string   `json:"device_cgroup_v1,omitempty"`
	// Container, when set, runs the attempt in its image instead.
	Container *containerSpec `json:"container,omitempty"`
	// StopSignal is the job's stop signal (empty: SIGTERM).
	StopSignal gpufleet.Signal `json:"stop_signal,omitempty"`
	// AliveFile is touched by the agent after every heartbeat the server
	// answered. When it is older than FenceAfter the supervisor fences the
	// command itself (the stop protocol of stopStep with FenceGrace): an agent that died, or lost the server, must not leave an
	// attempt running that the server will declare lost and start again
	// elsewhere.
	AliveFile  string        `json:"alive_file,omitempty"`
	FenceAfter time.Duration `json:"fence_after,omitempty"`
	FenceGrace time.Duration `json:"fence_grace,omitempty"`
	KillAfter  time.Duration `json:"kill_after,omitempty"`
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
	// ReasonCode is set when the supervisor knows why the attempt could
	// not run: image_pull.
	ReasonCode string `json:"reason_code,omitempty"`
	// Fenced is set when the supervisor stopped the command because the
	// agent went silent (superviseSpec.AliveFile).
	Fenced string `json:"fenced,omitempty"`
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
	var cmd *exec.Cmd
	attr := &syscall.SysProcAttr{Setpgid: true}
	stopPull := func() {}
	switch {
	case spec.Container != nil:
		// A stop during the pull (the runner signals the supervisor while
		// there is no command yet) ends the pull and the attempt. The
		// handler stays until the supervisor forwards signals itself, so
		// that a late one never kills it.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		stopPull = stop
		err := ensureImage(ctx, dir, spec.Container, logf)
		stopped := ctx.Err() != nil
		_ = os.RemoveAll(filepath.Join(dir, authDir)) // the login is for the pull only
		switch {
		case stopped:
			return fail(143, errors.New("stopped before the container started (during the image pull)"))
		case err != nil:
			rec, _ := fail(125, err)
			rec.ReasonCode = ReasonImagePull
			return rec, nil
		}
		cmd = exec.Command(spec.Container.Run[0], spec.Container.Run[1:]...)
		// The engine runs with the supervisor's environment (nil: inherited);
		// the attempt's goes in --env.
	case spec.Init != nil:
		argv := append(slices.Clone(spec.InitArgv), spec.Command...)
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Env, cmd.Dir = spec.Env, "/"
		attr.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS
	default:
		cmd = exec.Command(spec.Command[0], spec.Command[1:]...)
		cmd.Env, cmd.Dir = spec.Env, spec.Workdir
		if spec.UID != nil && spec.GID != nil {
			attr.Credential = &syscall.Credential{Uid: *spec.UID, Gid: *spec.GID, Groups: spec.Groups}
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	var cgroupDir *os.File
	if spec.Cgroup != "" {
		if cgroupDir, err = makeCgroup(spec, logf); err != nil {
			fmt.Fprintf(logf, "gpufleet: cgroup %s: %v (running without it)\n", spec.Cgroup, err)
			spec.Cgroup = ""
		} else {
			defer cgroupDir.Close()
			attr.UseCgroupFD, attr.CgroupFD = true, int(cgroupDir.Fd())
		}
	}
	if spec.Cgroup == "" {
		for _, l := range specLimits(spec) {
			fmt.Fprintf(logf, "gpufleet: %s is NOT enforced: the attempt has no cgroup\n", l.what)
		}
	}
	cmd.SysProcAttr = attr
	leave, err := confineDevices(spec)
	if err != nil {
		if spec.Cgroup != "" {
			_ = os.Remove(spec.Cgroup)
		}
		return fail(126, fmt.Errorf("confining the attempt to its GPUs' device nodes (%s): %w", spec.DeviceMode, err))
	}
	err = cmd.Start()
	leave()
	if err != nil {
		if spec.Cgroup != "" {
			_ = os.Remove(spec.Cgroup) // nothing ever ran in it
		}
		code := 127
		if errors.Is(err, os.ErrPermission) {
			code = 126
		}
		return fail(code, fmt.Errorf("start %s: %w", spec.Command[0], err))
	}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGHUP)
	stopPull()
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
	fenced := make(chan string, 1)
	stopFence := make(chan struct{})
	go selfFence(spec, cmd.Process.Pid, logf, fenced, stopFence)
	werr := cmd.Wait()
	close(stopFence)
	signal.Stop(sig)
	out := exitRecord{}
	select {
	case why := <-fenced:
		out.Fenced = why
	default:
	}
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			out.ExitCode, out.Signal = 128+int(ws.Signal()), sigName(ws.Signal())
		} else {
			out.ExitCode = ws.ExitStatus()
		}
	default:
		out.ExitCode, out.Error = 1, werr.Error()
	}
	if c := spec.Container; c != nil && out.Signal != "" {
		// The engine's CLI (or the attach) was killed, the last step of a
		// stop: its container goes too, before the status says the GPUs
		// are free. (One that exited on its own removed it itself: `run
		// --rm`, attach's delete; a second removal races podman's own.)
		if c.Socket != "" {
			err := newEngineAPI(c.Socket).call(context.Background(), http.MethodDelete, "/containers/"+containerName(spec.AttemptID), url.Values{"force": {"1"}}, nil)
			if err != nil && !isNotFound(err) {
				fmt.Fprintf(logf, "gpufleet: remove container: %v\n", err)
			}
		} else if out, err := exec.Command(c.Remove[0], c.Remove[1:]...).CombinedOutput(); err != nil {
			fmt.Fprintf(logf, "gpufleet: remove container: %v: %s\n", err, strings.TrimSpace(string(out)))
		}
	}
	if spec.Init != nil && out.Signal == "" && out.ExitCode > 128 && out.ExitCode < 128+65 {
		out.Signal = sigName(syscall.Signal(out.ExitCode - 128)) // as the init reports it
	}
	if spec.DeviceCgroupV1 != "" {
		removeCgroupDir(spec.DeviceCgroupV1, logf)
	}
	if spec.Cgroup != "" {
		// Whatever the command left behind in its cgroup goes with it.
		if err := os.WriteFile(filepath.Join(spec.Cgroup, cgroupKill), []byte("1"), 0); err != nil {
			fmt.Fprintf(logf, "gpufleet: cgroup %s: kill what is left: %v\n", spec.Cgroup, err)
		}
		removeCgroupDir(spec.Cgroup, logf)
	}
	return out, nil
}

// removeCgroupDir removes an emptied cgroup directory, waiting up to 2s
// for its last processes to be gone.
func removeCgroupDir(dir string, logf io.Writer) {
	var rerr error
	for range 100 {
		if rerr = os.Remove(dir); rerr == nil || errors.Is(rerr, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Fprintf(logf, "gpufleet: cgroup %s: not removed: %v\n", dir, rerr)
}

// confineDevices sets up the attempt's device cgroup before its command
// starts. With "v1" the supervisor joins the attempt's devices cgroup so
// that the command is born in it, and leave (called once it has started)
// takes the supervisor back out; with "v2-ebpf" the filter goes on the
// attempt's cgroup v2 directory, which the command is cloned into.
func confineDevices(spec superviseSpec) (leave func(), err error) {
	leave = func() {}
	if spec.DeviceMode == "" {
		return leave, nil
	}
	rules, err := devcgroup.ForPaths(spec.Devices)
	if err != nil {
		return leave, err
	}
	rules = append(devcgroup.Base(), rules...)
	switch spec.DeviceMode {
	case devcgroup.ModeV2:
		if spec.Cgroup == "" {
			return leave, errors.New("no cgroup v2 directory for the attempt")
		}
		_, err := devcgroup.AttachV2(spec.Cgroup, rules) // stays attached for the cgroup's life
		return leave, err
	case devcgroup.ModeV1:
		dir := spec.DeviceCgroupV1
		if dir == "" {
			return leave, errors.New("no devices cgroup directory")
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return leave, err
		}
		if err := devcgroup.ApplyV1(dir, rules); err != nil {
			return leave, err
		}
		home, err := ownV1Cgroup(DevicesV1Root)
		if err != nil {
			return leave, err
		}
		if err := os.WriteFile(filepath.Join(dir, cgroupProcs), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return leave, fmt.Errorf("join %s: %w", dir, err)
		}
		return func() { _ = os.WriteFile(filepath.Join(home, cgroupProcs), []byte(strconv.Itoa(os.Getpid())), 0) }, nil
	}
	return leave, fmt.Errorf("unknown device mode %q", spec.DeviceMode)
}

// ownV1Cgroup is the directory of this process's devices cgroup under the
// v1 mount root.
func ownV1Cgroup(root string) (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "devices") {
			return filepath.Join(root, parts[2]), nil
		}
	}
	return "", errors.New("no devices cgroup in /proc/self/cgroup")
}

// selfFence watches spec.AliveFile and, once the agent has been silent for
// its fence timeout, stops the process group pgid: checkpoint signal,
// grace, SIGTERM, SIGKILL. The timeout is the one the agent last wrote
// into the alive file (it follows the server's setting), else
// spec.FenceAfter. It says why on fenced and returns when done is closed.
func selfFence(spec superviseSpec, pgid int, logf *os.File, fenced chan<- string, done <-chan struct{}) {
	if spec.AliveFile == "" {
		return
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	// The agent writes the file before it starts any attempt, so a file
	// that is gone (the agent's data removed) is as silent as a stale one.
	last := time.Now()
	fence := spec.FenceAfter
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if fi, err := os.Stat(spec.AliveFile); err == nil {
			last = fi.ModTime()
			if f := aliveFence(spec.AliveFile); f > 0 {
				fence = f
			}
		}
		if fence <= 0 || time.Since(last) <= fence {
			continue // the agent is alive (or never said how long to wait)
		}
		why := fmt.Sprintf("no word from the agent for %s (fence %s)", time.Since(last).Round(time.Second), fence)
		fmt.Fprintf(logf, "gpufleet: %s: stopping the attempt\n", why)
		fenced <- why
		// The runner's protocol, stepped by the wall clock.
		at, stage, lastSent := time.Now(), stageNone, time.Time{}
		first, killAfter := signalOf(spec.StopSignal), max(spec.KillAfter, time.Second)
		for {
			now := time.Now()
			if sig, next := stopStep(now, at, first, spec.FenceGrace, killAfter, stage, lastSent); sig != 0 {
				_ = syscall.Kill(-pgid, sig)
				stage, lastSent = next, now
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// cgroupLimit is one limit of an attempt: the controller it needs, the
// file it goes to, its value and how the log names it.
type cgroupLimit struct {
	controller, file, value, what string
}

// specLimits lists the limits spec asks for.
func specLimits(spec superviseSpec) []cgroupLimit {
	var out []cgroupLimit
	if spec.CPUMax != "" {
		out = append(out, cgroupLimit{"cpu", cgroupCPUMax, spec.CPUMax, "CPU limit (cpu.max " + spec.CPUMax + ")"})
	}
	if spec.MemoryMaxBytes > 0 {
		v := strconv.FormatInt(spec.MemoryMaxBytes, 10)
		out = append(out, cgroupLimit{"memory", cgroupMemMax, v, "memory limit (memory.max " + v + " bytes)"})
	}
	return out
}

// cgroupControllers reads a cgroup v2 directory's cgroup.controllers.
func cgroupControllers(dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, cgroupCtrls))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(data)), nil
}

// makeCgroup creates the attempt's cgroup v2 directory ROOT/gpufleet/<id>
// and returns it opened, for clone into it. It enables the cpu and memory
// controllers down to the attempt's parent where ROOT has them and writes
// the limits where the attempt's cgroup has their controller; a limit that
// cannot be applied is reported in log as NOT enforced, with the reason,
// and the attempt still runs in its cgroup (which kills what it leaves
// behind). An error (ROOT is not cgroup v2, the directory cannot be made)
// means no cgroup at all.
func makeCgroup(spec superviseSpec, log io.Writer) (*os.File, error) {
	parent := filepath.Dir(spec.Cgroup)
	root := filepath.Dir(parent)
	if _, err := cgroupControllers(root); err != nil {
		return nil, fmt.Errorf("%s is not a cgroup v2 hierarchy: %w", root, err)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, err
	}
	// Enable cpu and memory from the root down to the parent, each on its
	// own (a missing one does not keep the other off).
	why := map[string]string{} // controller -> why the attempt cannot have it
	for _, d := range []string{root, parent} {
		have, err := cgroupControllers(d)
		for _, c := range []string{"cpu", "memory"} {
			switch {
			case why[c] != "":
			case err != nil:
				why[c] = fmt.Sprintf("reading %s: %v", filepath.Join(d, cgroupCtrls), err)
			case !slices.Contains(have, c):
				why[c] = fmt.Sprintf("cgroup v2 at %s has no %s controller", d, c)
				if d == root {
					why[c] += " (on a hybrid or cgroup v1 host it belongs to a v1 hierarchy)"
				}
			default:
				if werr := os.WriteFile(filepath.Join(d, cgroupSubtree), []byte("+"+c), 0); werr != nil {
					why[c] = fmt.Sprintf("enabling the %s controller in %s: %v", c, filepath.Join(d, cgroupSubtree), werr)
				}
			}
		}
	}
	if err := os.Mkdir(spec.Cgroup, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	have, err := cgroupControllers(spec.Cgroup)
	if err != nil {
		_ = os.Remove(spec.Cgroup)
		return nil, err
	}
	for _, l := range specLimits(spec) {
		reason := why[l.controller]
		if reason == "" && !slices.Contains(have, l.controller) {
			reason = fmt.Sprintf("cgroup v2 at %s has no %s controller", spec.Cgroup, l.controller)
		}
		if reason == "" {
			if werr := os.WriteFile(filepath.Join(spec.Cgroup, l.file), []byte(l.value), 0); werr != nil {
				reason = fmt.Sprintf("writing %s: %v", filepath.Join(spec.Cgroup, l.file), werr)
			}
		}
		if reason != "" {
			fmt.Fprintf(log, "gpufleet: cgroup %s: %s is NOT enforced: %s\n", spec.Cgroup, l.what, reason)
		}
	}
	f, err := os.Open(spec.Cgroup)
	if err != nil {
		_ = os.Remove(spec.Cgroup)
		return nil, err
	}
	return f, nil
}

// DetectCgroupV2 reports whether attempts can get their own cgroups under
// root: the agent is root and root is a writable cgroup v2 mount (statfs
// CGROUP2_SUPER_MAGIC). note says, for the start-up log, which root is
// used and which limits it can enforce, or why cgroups are off.
func DetectCgroupV2(root string) (ok bool, note string) {
	if os.Geteuid() != 0 {
		return false, "off: the agent is not root (attempts stay in the agent's cgroup)"
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(root, &st); err != nil {
		return false, fmt.Sprintf("off: --cgroup-root %s: %v", root, err)
	}
	if st.Type != cgroup2Magic {
		kind := fmt.Sprintf("filesystem type %#x", st.Type)
		switch st.Type {
		case tmpfsMagic:
			kind = "a tmpfs (cgroup v1 or hybrid host)"
		case cgroup1Magic:
			kind = "a cgroup v1 hierarchy"
		}
		note := fmt.Sprintf("off: %s is not a cgroup v2 mount but %s", root, kind)
		var ust syscall.Statfs_t
		if unified := filepath.Join(root, "unified"); syscall.Statfs(unified, &ust) == nil && ust.Type == cgroup2Magic {
			note += fmt.Sprintf("; %s is cgroup v2 (--cgroup-root %s gives attempts cgroups there, without the controllers v1 holds)", unified, unified)
		}
		return false, note
	}
	if err := syscall.Access(root, 2 /* W_OK */); err != nil {
		return false, fmt.Sprintf("off: cgroup v2 at %s is not writable: %v", root, err)
	}
	have, err := cgroupControllers(root)
	if err != nil {
		return false, fmt.Sprintf("off: cgroup v2 at %s: %v", root, err)
	}
	note = fmt.Sprintf("cgroup v2 at %s, attempts in %s/<attempt>", root, filepath.Join(root, cgroupParent))
	var missing []string
	for _, c := range []string{"cpu", "memory"} {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		note += fmt.Sprintf(" (no %s controller: those limits are not enforced)", strings.Join(missing, " or "))
	}
	return true, note
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

// maxPID is the largest process id Linux hands out (PID_MAX_LIMIT on
// 64-bit).
const maxPID = 1 << 22

// validPID reports whether n can be the process id of a supervisor or an
// attempt's command: above 1 (0 and -1 signal groups or everything, 1 is
// init) and at most maxPID.
func validPID(n int) bool { return n > 1 && n <= maxPID }

// readPIDRecord reads an attempt's pid.json.
func readPIDRecord(path string) (pidRecord, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return pidRecord{}, err
	}
	return parsePIDRecord(data)
}

// parsePIDRecord reads pid.json as the supervisor writes it: three process
// ids, the command leading its own group (PGID is PID). Anything else is an
// error wrapping gpufleet.ErrInvalid: the runner signals -PGID, and a group
// of 1 or less would be every process it may signal.
func parsePIDRecord(data []byte) (pidRecord, error) {
	var pr pidRecord
	if err := json.Unmarshal(data, &pr); err != nil {
		return pidRecord{}, fmt.Errorf("%w: %s: %v", gpufleet.ErrInvalid, pidFileName, err)
	}
	if !validPID(pr.SupervisorPID) || !validPID(pr.PID) || pr.PGID != pr.PID {
		return pidRecord{}, fmt.Errorf("%w: %s: supervisor %d, pid %d, pgid %d: expected process ids from 2 to %d, the pgid the pid",
			gpufleet.ErrInvalid, pidFileName, pr.SupervisorPID, pr.PID, pr.PGID, maxPID)
	}
	return pr, nil
}

// readExitRecord reads an attempt's status.json.
func readExitRecord(path string) (exitRecord, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return exitRecord{}, err
	}
	return parseExitRecord(data)
}

// parseExitRecord reads status.json as the supervisor writes it: an exit
// code from 0 to 255 (128+N for signal N). Anything else is an error
// wrapping gpufleet.ErrInvalid.
func parseExitRecord(data []byte) (exitRecord, error) {
	var ex exitRecord
	if err := json.Unmarshal(data, &ex); err != nil {
		return exitRecord{}, fmt.Errorf("%w: %s: %v", gpufleet.ErrInvalid, statusFileName, err)
	}
	if ex.ExitCode < 0 || ex.ExitCode > 255 {
		return exitRecord{}, fmt.Errorf("%w: %s: exit code %d: expected 0 to 255", gpufleet.ErrInvalid, statusFileName, ex.ExitCode)
	}
	return ex, nil
}

// aliveFence reads the fence timeout the agent wrote into its alive file
// (nanoseconds), 0 when it wrote none or the file is unreadable.
func aliveFence(path string) time.Duration {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	d, err := parseAliveFence(data)
	if err != nil {
		return 0
	}
	return d
}

// formatAliveFence is the alive file's content for a fence timeout, as
// parseAliveFence reads it.
func formatAliveFence(fence time.Duration) []byte {
	return []byte(strconv.FormatInt(int64(fence), 10) + "\n")
}

// parseAliveFence reads the alive file's content as writeAlive writes it:
// the fence timeout in nanoseconds and a newline; 0 (or nothing: the agent
// only touched the file) means none. Anything else is an error wrapping
// gpufleet.ErrInvalid.
func parseAliveFence(data []byte) (time.Duration, error) {
	s := strings.TrimSpace(string(data))
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: alive file: %s: expected a fence timeout in nanoseconds", gpufleet.ErrInvalid, gpufleet.Quote(s))
	}
	return time.Duration(n), nil
}

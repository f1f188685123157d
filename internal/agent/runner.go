package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// Reason codes the agent reports.
const (
	ReasonFenced     = "fenced"       // stopped by the agent after losing the server
	ReasonUnknown    = "unknown"      // the server did not expect it: killed
	ReasonGPUBusy    = "gpu_busy"     // another process held an assigned GPU
	ReasonInvalid    = "invalid_spec" // workdir, env or GPUs not usable here
	ReasonStartError = "start_failed" // the command could not be started
	ReasonLost       = "supervisor_lost"
	ReasonImagePull  = "image_pull" // the job's image could not be had
	ReasonExit       = "exit"
)

// loader is the simulated backend's load control.
type loader interface {
	AddLoad(uuid string, l simgpu.Load, delta float64) error
}

// target is what an assigned UUID names on this node: a whole GPU or a MIG
// instance of one.
type target struct {
	GPU   string  // physical GPU UUID
	Index int     // its index
	Share float64 // of the physical GPU (MIG: slices/7)
	MIG   bool
}

// runAs is the account an attempt runs under.
type runAs struct {
	Name   string
	UID    *uint32
	GID    *uint32
	Groups []uint32
	Home   string
}

// attempt is one attempt as the runner keeps it (and state.json holds it).
type attempt struct {
	As         api.Assignment        `json:"assignment"`
	State      gpufleet.AttemptState `json:"state"`
	Launched   bool                  `json:"launched"`
	Supervisor int                   `json:"supervisor_pid,omitempty"`
	PGID       int                   `json:"pgid,omitempty"`
	QueuedAt   time.Time             `json:"queued_at"`
	StartedAt  *time.Time            `json:"started_at,omitempty"`
	FinishedAt *time.Time            `json:"finished_at,omitempty"`
	ExitCode   *int                  `json:"exit_code,omitempty"`
	Reason     string                `json:"reason,omitempty"`
	ReasonCode string                `json:"reason_code,omitempty"`
	User       string                `json:"user,omitempty"`
	UID        *uint32               `json:"uid,omitempty"`
	Holds      []hold                `json:"holds,omitempty"`
	Usage      Usage                 `json:"usage"`
	// AccountedTo is the end of the last interval counted in Usage.
	AccountedTo time.Time `json:"accounted_to"`
	LoadOn      bool      `json:"load_on,omitempty"`

	Stop *stopRequest `json:"stop,omitempty"`

	// Pull is the image pull's state last seen in pull.json, and Events
	// what the next reports carry to the server.
	Pull   string             `json:"pull,omitempty"`
	Events []api.AttemptEvent `json:"events,omitempty"`

	LogShipped int64 `json:"log_shipped"`
	LogDone    bool  `json:"log_done,omitempty"`
	// Work is the job's work counter as read from the log so far.
	Work      workScan `json:"work,omitzero"`
	Delivered bool     `json:"delivered,omitempty"`

	cmd *exec.Cmd // set when this process started the supervisor
	// reaped is closed once cmd's supervisor has exited and been reaped.
	reaped chan struct{}
}

// stopRequest is a stop in progress.
type stopRequest struct {
	Reason     string        `json:"reason"`
	Code       string        `json:"reason_code"`
	At         time.Time     `json:"at"`
	Grace      time.Duration `json:"grace"`
	Stage      int           `json:"stage"`
	LastSignal time.Time     `json:"last_signal"`
	// Early: the supervisor was told before its command started.
	Early bool `json:"early,omitempty"`
}

// stateFile is DATA_DIR/state.json.
type stateFile struct {
	Attempts []*attempt `json:"attempts"`
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	DataDir string
	// Supervisor is the argv that runs a supervisor; the runner appends
	// "--dir DIR" (gpufleet agent supervise).
	Supervisor []string
	// RunAs maps a team to the user its attempts run as when the agent is
	// root; DefaultUser ("nobody") covers the other teams.
	RunAs       map[string]string
	DefaultUser string
	// KillAfter is the least pause between SIGTERM and SIGKILL (default
	// 5s).
	KillAfter time.Duration
	// BusyTimeout is how long an attempt waits for a GPU another process
	// holds before it fails with gpu_busy (default 60s).
	BusyTimeout time.Duration
	// Cgroups runs attempts in CgroupRoot/gpufleet/<attempt> (cgroup v2;
	// DetectCgroupV2 decides).
	Cgroups bool
	// CgroupRoot is the cgroup v2 mount (default DefaultCgroupRoot).
	CgroupRoot string
	// AliveFile is the file the agent touches after each answered
	// heartbeat; supervisors fence their attempt when it grows older than
	// the fence (see SetFence).
	AliveFile string
	// Environ is the environment supervisors start with, as KEY=VALUE (the
	// CLI passes the agent's own); the agent's GPUFLEET_* settings, its
	// credentials among them, are left out (the attempt's own environment
	// comes from its spec). Empty starts them with none.
	Environ []string

	// UIDs, when set, gives each attempt of a team --run-as does not map a
	// uid of its own from the range, when the agent is root (users.go).
	UIDs *UIDRange
	// Isolate runs process attempts in their own PID and mount namespaces
	// under Init (`gpufleet agent init`), with private /proc and /tmp.
	Isolate bool
	Init    []string
	// DeviceMode confines each attempt to its GPUs' device nodes under
	// DevRoot ("v1", "v2-ebpf"; "" for none).
	DeviceMode string
	DevRoot    string
	// Engine, when set, runs attempts with an image in containers; CDIDirs
	// are where CDI specs are read (cdiEngineDirs and the simulator's).
	Engine  *Engine
	CDIDirs []string
	Ulimits []string
	// Attach is the argv of `gpufleet agent attach`, which runs a
	// container attempt on an engine socket (Engine.Socket).
	Attach []string
}

// Runner starts, watches and stops attempts. It is safe for concurrent
// use; Poll drives it.
type Runner struct {
	cfg   RunnerConfig
	log   *slog.Logger
	now   func() time.Time
	users func(team, attempt string) (runAs, error)
	load  loader // nil unless simulated
	// limits returns an attempt's CPU (cpu.max) and memory limits;
	// assignmentLimits unless a test replaces it.
	limits func(api.Assignment) (cpuMax string, memoryMaxBytes int64)

	mu       sync.Mutex
	fence    [2]time.Duration // fence after, fence grace (SetFence)
	attempts map[string]*attempt
	targets  map[string]target // assigned UUID -> physical GPU
	foreign  map[string][]int  // physical GPU UUID -> pids of processes not ours
	lastUID  uint32            // the uid last handed out of cfg.UIDs
	dirty    bool
}

// NewRunner returns a runner; Load re-adopts what a previous agent left.
func NewRunner(cfg RunnerConfig, log *slog.Logger, now func() time.Time, load loader) *Runner {
	if cfg.KillAfter <= 0 {
		cfg.KillAfter = 5 * time.Second
	}
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = 60 * time.Second
	}
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "nobody"
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = DefaultCgroupRoot
	}
	r := &Runner{cfg: cfg, log: log, now: now, load: load, attempts: map[string]*attempt{}, targets: map[string]target{}}
	r.users, r.limits = r.lookupUser, assignmentLimits
	return r
}

func (r *Runner) attemptDir(id string) string { return filepath.Join(r.cfg.DataDir, "attempts", id) }
func (r *Runner) statePath() string           { return filepath.Join(r.cfg.DataDir, "state.json") }

// SetDevices tells the runner which UUIDs name which GPUs (from discovery).
func (r *Runner) SetDevices(devs []gpu.Device) {
	t := map[string]target{}
	for _, d := range devs {
		t[d.UUID] = target{GPU: d.UUID, Index: d.Index, Share: 1}
		for _, m := range d.MIG {
			t[m.UUID] = target{GPU: d.UUID, Index: d.Index, Share: migShare(m.Profile), MIG: true}
		}
	}
	r.mu.Lock()
	maps.Copy(r.targets, t) // a GPU that fell off keeps its entry: its attempts still need accounting
	r.mu.Unlock()
}

// SetProcesses tells the runner which processes hold each GPU (from the
// backend's per-process memory); those of its own attempts are ignored.
func (r *Runner) SetProcesses(samples []gpu.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ours := map[int]bool{}
	for _, a := range r.attempts {
		if a.PGID > 0 && !a.State.Terminal() {
			ours[a.PGID] = true
		}
	}
	r.foreign = map[string][]int{}
	for _, s := range samples {
		for _, p := range s.Processes {
			if p.GPUInstanceID != nil {
				continue // a MIG instance's process does not hold the whole GPU
			}
			if pg, err := syscall.Getpgid(p.PID); err == nil && ours[pg] {
				continue
			}
			r.foreign[s.UUID] = append(r.foreign[s.UUID], p.PID)
		}
	}
}

// Load reads state.json and re-adopts the attempts it lists: those whose
// supervisor still runs are watched again, those that ended while the agent
// was away are read from their status.json.
func (r *Runner) Load() error {
	data, err := os.ReadFile(r.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var st stateFile
	var dropped []string
	if err == nil {
		st, dropped, err = parseStateFile(data)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", r.statePath(), err)
	}
	for _, why := range dropped {
		r.log.Warn("dropping an attempt state.json cannot describe", "why", why)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range st.Attempts {
		r.attempts[a.As.AttemptID] = a
		if !a.State.Terminal() {
			r.log.Info("re-adopting attempt", "attempt", a.As.AttemptID, "job", a.As.JobID, "state", a.State, "supervisor", a.Supervisor)
			a.LoadOn = false // the simulated load is per process: set it again
		}
	}
	return nil
}

// attemptStates are the states the runner keeps its attempts in.
var attemptStates = []gpufleet.AttemptState{gpufleet.AttemptStarting, gpufleet.AttemptRunning,
	gpufleet.AttemptSucceeded, gpufleet.AttemptFailed, gpufleet.AttemptStopped, gpufleet.AttemptLost}

// parseStateFile reads state.json as save writes it. A file that is not a
// JSON object with a list of attempts is an error wrapping
// gpufleet.ErrInvalid. Of the attempts it keeps those the runner can act
// on: one that is null, has no valid id or a state the runner does not
// know is left out and described in dropped. Process ids that no process
// has are cleared to 0, unknown (the runner then reads them again from
// pid.json, or finds the supervisor gone), and a stop stage past the last
// starts over: the runner signals -PGID, and a group of 1 or less would
// be every process it may signal.
func parseStateFile(data []byte) (st stateFile, dropped []string, err error) {
	if err := json.Unmarshal(data, &st); err != nil {
		return stateFile{}, nil, fmt.Errorf("%w: %v", gpufleet.ErrInvalid, err)
	}
	kept := st.Attempts[:0]
	for i, a := range st.Attempts {
		switch {
		case a == nil:
			dropped = append(dropped, fmt.Sprintf("attempts[%d]: null", i))
			continue
		case validAttemptID(a.As.AttemptID) != nil:
			dropped = append(dropped, fmt.Sprintf("attempts[%d]: attempt id %s", i, gpufleet.Quote(a.As.AttemptID)))
			continue
		case !slices.Contains(attemptStates, a.State):
			dropped = append(dropped, fmt.Sprintf("attempts[%d] (%s): state %s", i, a.As.AttemptID, gpufleet.Quote(string(a.State))))
			continue
		}
		if a.Supervisor != 0 && !validPID(a.Supervisor) {
			a.Supervisor = 0
		}
		if a.PGID != 0 && !validPID(a.PGID) {
			a.PGID = 0
		}
		if a.Stop != nil && (a.Stop.Stage < stageNone || a.Stop.Stage > stageKill) {
			a.Stop.Stage = stageNone
		}
		kept = append(kept, a)
	}
	st.Attempts = kept
	return st, dropped, nil
}

// save writes state.json if anything changed; r.mu must be held.
func (r *Runner) save() {
	if !r.dirty {
		return
	}
	st := stateFile{Attempts: []*attempt{}}
	for _, id := range slices.Sorted(maps.Keys(r.attempts)) {
		st.Attempts = append(st.Attempts, r.attempts[id])
	}
	if err := writeJSONAtomic(r.statePath(), st, 0o600); err != nil {
		r.log.Error("writing state file", "err", err)
		return
	}
	r.dirty = false
}

// Known reports whether the runner has the attempt.
func (r *Runner) Known(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.attempts[id]
	return ok
}

// Start takes an assignment. It validates it, waits while another process
// holds an assigned GPU, and launches the supervisor (in Poll). A known
// attempt is ignored.
func (r *Runner) Start(as api.Assignment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.attempts[as.AttemptID]; ok || validAttemptID(as.AttemptID) != nil {
		return
	}
	if as.RegistryAuth != nil {
		// The login goes to a 0600 file for the pull, never to state.json.
		if err := writeRegistryAuth(r.attemptDir(as.AttemptID), *as.RegistryAuth); err != nil {
			r.log.Warn("writing the registry login for the pull", "attempt", as.AttemptID, "registry", as.RegistryAuth.Registry, "err", err)
		}
		as.RegistryAuth = nil
	}
	a := &attempt{As: as, State: gpufleet.AttemptStarting, QueuedAt: r.now()}
	r.attempts[as.AttemptID] = a
	r.dirty = true
	if err := r.validate(as); err != nil {
		r.finish(a, gpufleet.AttemptFailed, nil, err.Error(), ReasonInvalid)
	} else {
		r.tryLaunch(a)
	}
	r.save()
}

// validate checks an assignment against this node; r.mu must be held.
func (r *Runner) validate(as api.Assignment) error {
	if len(as.Command) == 0 {
		return fmt.Errorf("%w: empty command", gpufleet.ErrInvalid)
	}
	if err := validateWorkdir(as.Workdir); err != nil {
		return err
	}
	if len(as.GPUs) == 0 {
		return fmt.Errorf("%w: no GPUs assigned", gpufleet.ErrInvalid)
	}
	for _, g := range as.GPUs {
		if _, ok := r.targets[g]; !ok {
			return fmt.Errorf("%w: gpu %s is not on this node", gpufleet.ErrInvalid, g)
		}
	}
	if err := as.Launch.Validate(); err != nil {
		return err
	}
	if as.Container() && r.cfg.Engine == nil {
		return fmt.Errorf("%w: the job has an image, and this agent runs processes (--runtime process)", gpufleet.ErrInvalid)
	}
	if as.SimLoad != "" {
		if _, err := simgpu.ParseLoad(as.SimLoad); err != nil {
			return err
		}
	}
	if as.Work != nil {
		return as.Work.Validate()
	}
	return nil
}

// holder returns why an assigned GPU is not free for a, or "".
func (r *Runner) holder(a *attempt) string {
	frac := fracOr1(a.As.Fraction)
	for _, g := range a.As.GPUs {
		t := r.targets[g]
		for _, o := range r.attempts {
			if o == a || o.State.Terminal() || !o.Launched {
				continue
			}
			if slices.Contains(o.As.GPUs, g) && (frac >= 1 || fracOr1(o.As.Fraction) >= 1) {
				return fmt.Sprintf("gpu %s is still held by attempt %s", g, o.As.AttemptID)
			}
		}
		if !t.MIG {
			if pids := r.foreign[t.GPU]; len(pids) > 0 {
				return fmt.Sprintf("gpu %s is held by process %v, not started by gpufleet", g, pids)
			}
		}
	}
	return ""
}

// tryLaunch launches a's supervisor when its GPUs are free; r.mu must be
// held.
func (r *Runner) tryLaunch(a *attempt) {
	if a.Launched || a.State.Terminal() {
		return
	}
	if a.Stop != nil {
		r.finish(a, gpufleet.AttemptStopped, nil, a.Stop.Reason, a.Stop.Code)
		return
	}
	if why := r.holder(a); why != "" {
		if r.now().Sub(a.QueuedAt) > r.cfg.BusyTimeout {
			r.finish(a, gpufleet.AttemptFailed, nil, "refused: "+why, ReasonGPUBusy)
		} else if a.Reason != why {
			a.Reason = why
			r.log.Warn("attempt waits for its GPUs", "attempt", a.As.AttemptID, "why", why)
		}
		return
	}
	if err := r.launch(a); err != nil {
		r.log.Error("starting attempt", "attempt", a.As.AttemptID, "err", err)
		r.finish(a, gpufleet.AttemptFailed, nil, err.Error(), ReasonStartError)
	}
}

// launch writes the spec and starts the supervisor; r.mu must be held.
func (r *Runner) launch(a *attempt) error {
	as := a.As
	dir := r.attemptDir(as.AttemptID)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	_ = os.Chmod(filepath.Dir(dir), 0o711)
	_ = os.Chmod(r.cfg.DataDir, 0o711)
	u, err := r.users(as.Team, as.AttemptID)
	if err != nil {
		return err
	}
	workdir := as.Workdir
	isolated := r.cfg.Isolate && u.UID != nil && len(r.cfg.Init) > 0 && !as.Container()
	switch {
	case as.Container():
	case workdir == "" && isolated:
		// The attempt's private /tmp (DIR/tmp, mounted by its init) is its
		// scratch directory: no other attempt sees it.
		workdir = "/tmp"
	case workdir == "":
		workdir = filepath.Join(dir, "work")
		if u.UID != nil {
			// The data dir may not be reachable for another user: the
			// scratch directory lives under the system's temporary dir.
			base := filepath.Join(os.TempDir(), "gpufleet-attempts")
			if err := os.MkdirAll(base, 0o711); err != nil {
				return err
			}
			_ = os.Chmod(base, 0o711)
			workdir = filepath.Join(base, as.AttemptID)
		}
		if err := os.MkdirAll(workdir, 0o700); err != nil {
			return err
		}
		if u.UID != nil {
			if err := os.Chown(workdir, int(*u.UID), int(*u.GID)); err != nil {
				return err
			}
		}
	}
	home := u.Home
	if home == "" || home == "/nonexistent" {
		home = workdir
	}
	env, err := attemptEnv(as, u.Name, home, workdir)
	if err != nil {
		return err
	}
	spec := superviseSpec{AttemptID: as.AttemptID, Command: as.Command, Env: env, Workdir: workdir, UID: u.UID, GID: u.GID, Groups: u.Groups,
		StopSignal: as.StopSignal, AliveFile: r.cfg.AliveFile, FenceAfter: r.fence[0], FenceGrace: fenceGrace(time.Duration(as.GraceS*float64(time.Second)), r.fence[1]),
		KillAfter: r.cfg.KillAfter}
	if r.cfg.Cgroups {
		spec.Cgroup = filepath.Join(r.cfg.CgroupRoot, cgroupParent, as.AttemptID)
	}
	spec.CPUMax, spec.MemoryMaxBytes = r.limits(as)
	if err := r.isolate(&spec, as, u, dir); err != nil {
		return err
	}
	for _, g := range as.GPUs {
		t := r.targets[g]
		a.Holds = append(a.Holds, hold{Attempt: as.AttemptID, GPU: t.GPU, Device: g, Share: t.Share * fracOr1(as.Fraction)})
	}
	if err := writeJSONAtomic(filepath.Join(dir, specFile), spec, 0o600); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, statusFileName))
	_ = os.Remove(filepath.Join(dir, pidFileName))
	slog, err := os.OpenFile(filepath.Join(dir, supervisorLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer slog.Close()
	argv := append(slices.Clone(r.cfg.Supervisor), "--dir", dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = slog, slog
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = supervisorEnv(r.cfg.Environ)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start supervisor: %w", err)
	}
	reaped := make(chan struct{})
	go func() { _ = cmd.Wait(); close(reaped) }() // reap it; the status file says how the attempt ended
	a.cmd, a.reaped, a.Supervisor, a.Launched, a.User, a.UID, a.Reason = cmd, reaped, cmd.Process.Pid, true, u.Name, u.UID, ""
	r.dirty = true
	r.log.Info("attempt launched", "attempt", as.AttemptID, "job", as.JobID, "team", as.Team, "gpus", strings.Join(as.GPUs, ","),
		"user", u.Name, "supervisor", cmd.Process.Pid)
	return nil
}

// supervisorEnv is the supervisor's environment: the agent's without its
// secrets (the attempt's own environment comes from the spec).
func supervisorEnv(environ []string) []string {
	out := []string{}
	for _, kv := range environ {
		if strings.HasPrefix(kv, "GPUFLEET_") && !strings.HasPrefix(kv, "GPUFLEET_TEST_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Stop starts stopping an attempt (stopStep): SIGTERM now and SIGKILL
// after grace, or the job's own stop signal now, SIGTERM after grace and
// SIGKILL KillAfter later. Stopping a stopped attempt does nothing.
func (r *Runner) Stop(id, reason, code string, grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.attempts[id]
	if a == nil {
		if validAttemptID(id) != nil {
			return
		}
		// Never started here (its start order was lost): report it stopped so
		// the server does not wait for it.
		a = &attempt{As: api.Assignment{AttemptID: id}, State: gpufleet.AttemptStarting, QueuedAt: r.now()}
		r.attempts[id] = a
	}
	r.stop(a, reason, code, grace)
	r.progress(a)
	r.save()
}

func (r *Runner) stop(a *attempt, reason, code string, grace time.Duration) {
	if a.State.Terminal() || a.Stop != nil {
		return
	}
	if reason == "" {
		reason = "stopped by the server"
	}
	if code == "" {
		code = "stopped"
	}
	a.Stop = &stopRequest{Reason: reason, Code: code, At: r.now(), Grace: max(grace, 0)}
	r.dirty = true
	r.log.Info("stopping attempt", "attempt", a.As.AttemptID, "reason", reason, "reason_code", code, "grace", grace)
}

// Fence stops every attempt that is not already stopping, with reason code
// "fenced", capping the grace at maxGrace.
func (r *Runner) Fence(why string, maxGrace time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, id := range slices.Sorted(maps.Keys(r.attempts)) {
		a := r.attempts[id]
		if a.State.Terminal() || a.Stop != nil {
			continue
		}
		g := fenceGrace(time.Duration(a.As.GraceS*float64(time.Second)), maxGrace)
		r.stop(a, why, ReasonFenced, g)
		n++
	}
	r.pollLocked()
	return n
}

// Poll advances every attempt: launches waiting ones, notices started and
// ended commands, escalates stops. Call it often (a few times a second).
func (r *Runner) Poll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pollLocked()
}

func (r *Runner) pollLocked() {
	for _, id := range slices.Sorted(maps.Keys(r.attempts)) {
		r.progress(r.attempts[id])
	}
	r.save()
}

// progress advances one attempt; r.mu must be held.
func (r *Runner) progress(a *attempt) {
	if a.State.Terminal() {
		return
	}
	if !a.Launched {
		r.tryLaunch(a)
		return
	}
	dir := r.attemptDir(a.As.AttemptID)
	if a.PGID == 0 && a.As.Container() {
		r.pullProgress(a, dir)
	}
	if a.PGID == 0 {
		if pr, err := readPIDRecord(filepath.Join(dir, pidFileName)); err == nil {
			a.PGID, a.Supervisor = pr.PGID, pr.SupervisorPID
			// The supervisor's start when it is not after the runner's now
			// (accounting stays on one clock when tests step the runner's).
			started := r.now()
			if !pr.StartedAt.IsZero() && pr.StartedAt.Before(started) {
				started = pr.StartedAt
			}
			a.StartedAt = &started
			a.State = gpufleet.AttemptRunning
			r.dirty = true
			r.setLoad(a, true)
		}
	}
	if a.State == gpufleet.AttemptRunning && !a.LoadOn {
		r.setLoad(a, true)
	}
	if ex, err := readExitRecord(filepath.Join(dir, statusFileName)); err == nil {
		r.ended(a, ex)
		return
	}
	if !r.supervisorAlive(a) {
		// Check once more: it may have written the status just now.
		if ex, err := readExitRecord(filepath.Join(dir, statusFileName)); err == nil {
			r.ended(a, ex)
			return
		}
		if a.PGID > 0 {
			_ = syscall.Kill(-a.PGID, syscall.SIGKILL)
		}
		if a.As.Container() && r.cfg.Engine != nil {
			// Its container would run on without anyone to stop it (an agent
			// pod's processes all end with the pod; the container does not).
			if err := r.cfg.Engine.remove(context.Background(), containerName(a.As.AttemptID)); err != nil {
				r.log.Warn("removing a vanished supervisor's container", "attempt", a.As.AttemptID, "err", err)
			}
		}
		r.finish(a, gpufleet.AttemptFailed, nil, "the attempt's supervisor vanished without recording an exit status", ReasonLost)
		return
	}
	if a.Stop != nil && a.PGID == 0 && a.Supervisor > 0 && !a.Stop.Early && a.As.Container() && a.Pull != "" {
		// No command yet, the container's image being pulled (pull.json is
		// written once the supervisor handles the signal): the supervisor
		// ends the pull and records the stop. Once there is a command, the
		// protocol below runs from its start.
		_ = syscall.Kill(a.Supervisor, syscall.SIGTERM)
		a.Stop.Early, r.dirty = true, true
	}
	if a.Stop != nil && a.PGID > 0 {
		now := r.now()
		sig, stage := stopStep(now, a.Stop.At, signalOf(a.As.StopSignal), a.Stop.Grace, r.cfg.KillAfter, a.Stop.Stage, a.Stop.LastSignal)
		if sig != 0 {
			if err := syscall.Kill(-a.PGID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				r.log.Warn("signalling attempt", "attempt", a.As.AttemptID, "signal", sig, "err", err)
			}
			a.Stop.Stage, a.Stop.LastSignal = stage, now
			r.dirty = true
		}
	}
}

// supervisorAlive reports whether a's supervisor still runs.
func (r *Runner) supervisorAlive(a *attempt) bool {
	if a.cmd != nil {
		select {
		case <-a.reaped:
			return false
		default:
		}
		return syscall.Kill(a.Supervisor, 0) == nil && !zombie(a.Supervisor)
	}
	if a.Supervisor <= 0 || syscall.Kill(a.Supervisor, 0) != nil || zombie(a.Supervisor) {
		return false
	}
	// After a restart the pid may have been reused: it must be our supervisor.
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(a.Supervisor) + "/cmdline")
	return err != nil || strings.Contains(string(cmdline), a.As.AttemptID)
}

// zombie reports whether pid has exited but is not reaped yet.
func zombie(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// cpuPeriod is the cgroup v2 cpu.max period the agent writes, in
// microseconds (the kernel's default).
const cpuPeriod = 100000

// assignmentLimits turns an assignment's CPU and memory limits into
// cpu.max ("QUOTA PERIOD", "" for none) and memory.max (0 for none).
func assignmentLimits(as api.Assignment) (string, int64) {
	cpu := ""
	if as.CPUs > 0 {
		cpu = fmt.Sprintf("%d %d", int64(math.Ceil(as.CPUs*cpuPeriod)), cpuPeriod)
	}
	return cpu, max(as.MemoryBytes, 0)
}

// SetFence tells the runner the agent's fence timeout and the cap on a
// fenced attempt's grace, for the supervisors of attempts it starts.
func (r *Runner) SetFence(after, grace time.Duration) {
	r.mu.Lock()
	r.fence = [2]time.Duration{after, grace}
	r.mu.Unlock()
}

// ended records a's exit from its status file; r.mu must be held. A
// supervisor's fence is the reason unless the attempt was being stopped
// for another: the server's "unknown attempt" comes after the silence the
// fence answered (an agent resumed after SIGSTOP hears it before it reads
// the status file), so it does not hide the fence.
func (r *Runner) ended(a *attempt, ex exitRecord) {
	code := ex.ExitCode
	switch {
	case ex.Fenced != "" && (a.Stop == nil || a.Stop.Code == ReasonUnknown):
		r.finish(a, gpufleet.AttemptStopped, &code, "fenced by its supervisor: "+ex.Fenced, ReasonFenced)
	case a.Stop != nil:
		r.finish(a, gpufleet.AttemptStopped, &code, a.Stop.Reason, a.Stop.Code)
	case ex.Error != "":
		r.finish(a, gpufleet.AttemptFailed, &code, ex.Error, cmp.Or(ex.ReasonCode, ReasonStartError))
	case code == 0:
		r.finish(a, gpufleet.AttemptSucceeded, &code, "exit 0", ReasonExit)
	case ex.Signal != "":
		r.finish(a, gpufleet.AttemptFailed, &code, "killed by "+ex.Signal, ReasonExit)
	default:
		r.finish(a, gpufleet.AttemptFailed, &code, "exit "+strconv.Itoa(code), ReasonExit)
	}
}

// finish makes a terminal; r.mu must be held.
func (r *Runner) finish(a *attempt, st gpufleet.AttemptState, code *int, reason, reasonCode string) {
	now := r.now()
	if a.State == gpufleet.AttemptRunning {
		// The time since the last sample counts as GPU time (its activity
		// and energy are not known).
		since := a.AccountedTo
		if a.StartedAt != nil && a.StartedAt.After(since) {
			since = *a.StartedAt
		}
		end := now
		if a.StartedAt != nil && a.Stop == nil {
			// The supervisor's status file says when it really ended.
			if ex, err := readExitRecord(filepath.Join(r.attemptDir(a.As.AttemptID), statusFileName)); err == nil && !ex.FinishedAt.IsZero() && ex.FinishedAt.Before(end) {
				end = ex.FinishedAt
			}
		}
		if secs := end.Sub(since).Seconds(); secs > 0 && !since.IsZero() {
			for _, h := range a.Holds {
				a.Usage.GPUSeconds += secs * h.Share
			}
			a.AccountedTo = end
		}
	}
	a.State, a.ExitCode, a.Reason, a.ReasonCode, a.FinishedAt = st, code, reason, reasonCode, &now
	if !a.Launched {
		a.LogDone, a.Work.Done = true, true // nothing ran, nothing to ship or count
	}
	r.setLoad(a, false)
	r.dirty = true
	r.log.Info("attempt ended", "attempt", a.As.AttemptID, "job", a.As.JobID, "state", st, "reason", reason, "reason_code", reasonCode)
}

// setLoad declares (or takes back) a's simulated load on its GPUs.
func (r *Runner) setLoad(a *attempt, on bool) {
	if r.load == nil || a.As.SimLoad == "" || a.LoadOn == on {
		return
	}
	l, err := simgpu.ParseLoad(a.As.SimLoad)
	if err != nil {
		return
	}
	delta := fracOr1(a.As.Fraction)
	if !on {
		delta = -delta
	}
	for _, g := range a.As.GPUs {
		if err := r.load.AddLoad(g, l, delta); err != nil {
			r.log.Warn("simulated load", "attempt", a.As.AttemptID, "gpu", g, "err", err)
		}
	}
	a.LoadOn = on
}

// Reports returns what the next heartbeat says about the attempts. A
// terminal attempt is reported once its log is shipped, so that a
// follower of its log sees the end before the attempt ends, and its work
// counter has read all of it.
func (r *Runner) Reports() []api.AttemptReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []api.AttemptReport
	for _, id := range slices.Sorted(maps.Keys(r.attempts)) {
		a := r.attempts[id]
		if a.Delivered {
			continue
		}
		rep := api.AttemptReport{AttemptID: id, JobID: a.As.JobID, State: a.State,
			GPUSeconds: a.Usage.GPUSeconds, EffectiveGPUSeconds: a.Usage.EffectiveGPUSeconds, EnergyJoules: a.Usage.EnergyJoules, Work: a.Work.Count,
			Events: slices.Clone(a.Events)}
		if a.State.Terminal() {
			if !a.LogDone || a.reading() {
				rep.State = gpufleet.AttemptRunning
			} else {
				rep.ExitCode, rep.Reason, rep.ReasonCode = a.ExitCode, a.Reason, a.ReasonCode
			}
		} else if a.State == gpufleet.AttemptStarting && a.Reason != "" {
			rep.Reason = a.Reason
		}
		out = append(out, rep)
	}
	return out
}

// Delivered records that the server has the reports: terminal attempts it
// has are forgotten (their directories stay for inspection).
func (r *Runner) Delivered(reps []api.AttemptReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rep := range reps {
		a := r.attempts[rep.AttemptID]
		if a == nil {
			continue
		}
		if n := len(rep.Events); n > 0 && n <= len(a.Events) {
			a.Events = a.Events[n:] // the server has them
			r.dirty = true
		}
		if rep.State.Terminal() {
			delete(r.attempts, rep.AttemptID)
			r.dirty = true
		}
	}
	r.save()
}

// Holds returns the GPU shares of the running attempts.
func (r *Runner) Holds() []hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []hold
	for _, id := range slices.Sorted(maps.Keys(r.attempts)) {
		if a := r.attempts[id]; a.State == gpufleet.AttemptRunning {
			for _, h := range a.Holds {
				h.Since = a.AccountedTo
				if a.StartedAt != nil && a.StartedAt.After(h.Since) {
					h.Since = *a.StartedAt
				}
				out = append(out, h)
			}
		}
	}
	return out
}

// AddUsage adds accounting increments to the attempts, counted up to now.
func (r *Runner) AddUsage(u map[string]Usage, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, d := range u {
		if a := r.attempts[id]; a != nil && !a.State.Terminal() {
			a.AccountedTo = now
			a.Usage.GPUSeconds += d.GPUSeconds
			a.Usage.EffectiveGPUSeconds += d.EffectiveGPUSeconds
			a.Usage.EnergyJoules += d.EnergyJoules
			r.dirty = true
		}
	}
}

// Holder is who runs on a physical GPU, for the GPU metrics' labels: the
// team, the job and its priority class; a GPU shared by several attempts
// lists each, joined by "," in order.
type Holder struct {
	Team, Job, Priority string
}

// Holders returns the holder of each physical GPU a launched attempt runs
// on, and of each MIG instance.
func (r *Runner) Holders() map[string]Holder {
	r.mu.Lock()
	defer r.mu.Unlock()
	type lists struct{ teams, jobs, prios []string }
	by := map[string]*lists{}
	for _, id := range slices.Sorted(maps.Keys(r.attempts)) {
		a := r.attempts[id]
		if a.State.Terminal() || !a.Launched {
			continue
		}
		for _, h := range a.Holds {
			// The physical GPU, and the MIG instance when it is one.
			for _, id := range slices.Compact([]string{h.GPU, cmp.Or(h.Device, h.GPU)}) {
				l := by[id]
				if l == nil {
					l = &lists{}
					by[id] = l
				}
				add := func(s *[]string, v string) {
					if !slices.Contains(*s, v) {
						*s = append(*s, v)
					}
				}
				add(&l.teams, a.As.Team)
				add(&l.jobs, a.As.JobID)
				add(&l.prios, string(a.As.Priority))
			}
		}
	}
	out := map[string]Holder{}
	for g, l := range by {
		slices.Sort(l.teams)
		slices.Sort(l.jobs)
		slices.Sort(l.prios)
		out[g] = Holder{Team: strings.Join(l.teams, ","), Job: strings.Join(l.jobs, ","), Priority: strings.Join(l.prios, ",")}
	}
	return out
}

// Teams returns the team running on each physical GPU (see Holders).
func (r *Runner) Teams() map[string]string {
	out := map[string]string{}
	for g, h := range r.Holders() {
		out[g] = h.Team
	}
	return out
}

// Counts returns how many attempts are in each state.
func (r *Runner) Counts() map[gpufleet.AttemptState]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[gpufleet.AttemptState]int{}
	for _, a := range r.attempts {
		out[a.State]++
	}
	return out
}

// logJob is a log with bytes to ship.
type logJob struct {
	Attempt string
	Path    string
	Offset  int64
	Ended   bool
	// WorkOnly: the server refused the log; only the work counter reads
	// it, from Offset.
	WorkOnly bool
}

// LogJobs lists the logs that may have bytes to ship.
func (r *Runner) LogJobs() []logJob {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logJob
	for _, id := range slices.Sorted(maps.Keys(r.attempts)) {
		a := r.attempts[id]
		if !a.Launched || (a.LogDone && !a.reading()) {
			continue
		}
		j := logJob{Attempt: id, Path: filepath.Join(r.attemptDir(id), logFileName), Offset: a.LogShipped, Ended: a.State.Terminal()}
		if a.LogDone {
			j.Offset, j.WorkOnly = a.Work.Scanned, true
		}
		out = append(out, j)
	}
	return out
}

// Shipped records that the server holds size bytes of the attempt's log;
// done marks the log complete (the attempt ended and all of it shipped, or
// the server refused it).
func (r *Runner) Shipped(id string, size int64, done bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.attempts[id]; a != nil {
		if a.LogShipped != size || done != a.LogDone {
			a.LogShipped, a.LogDone = size, done
			r.dirty = true
		}
	}
}

// ReadWork feeds the attempt's output from offset off to its work
// counter, when the job has one.
func (r *Runner) ReadWork(id string, off int64, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.attempts[id]; a != nil && a.As.Work != nil {
		a.Work.feed(a.As.Work, off, data)
		r.dirty = true
	}
}

// EndWork marks the attempt's output read to its end: the terminal report
// carries its work count from now on.
func (r *Runner) EndWork(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.attempts[id]; a != nil && a.As.Work != nil && !a.Work.Done {
		a.Work.end(a.As.Work)
		r.dirty = true
	}
}

// reading reports whether the attempt's work counter has output left to
// read; r.mu must be held.
func (a *attempt) reading() bool { return a.As.Work != nil && !a.Work.Done }

// readChunk reads up to max bytes of path from off.
func readChunk(path string, off int64, maxBytes int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, maxBytes)
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], nil
}

func fracOr1(f float64) float64 {
	if f <= 0 || f > 1 {
		return 1
	}
	return f
}

// StopSupervised stops every attempt still running under a supervisor of
// the agent data directory dir, with no agent left to do it (gpufleet dev
// whose server failed): the supervisor is told to stop its command
// (SIGTERM, which it forwards), and after grace the command's group and
// the supervisor are killed. It returns how many attempts it stopped.
func StopSupervised(dir string, grace time.Duration) int {
	paths, _ := filepath.Glob(filepath.Join(dir, "attempts", "*", pidFileName))
	type sup struct {
		pr      pidRecord
		attempt string
	}
	alive := func(s sup) bool {
		if syscall.Kill(s.pr.SupervisorPID, 0) != nil || zombie(s.pr.SupervisorPID) {
			return false
		}
		// The pid must still be this attempt's supervisor (pids are reused).
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(s.pr.SupervisorPID) + "/cmdline")
		return err == nil && strings.Contains(string(cmdline), s.attempt)
	}
	var live []sup
	for _, p := range paths {
		pr, err := readPIDRecord(p)
		s := sup{pr: pr, attempt: filepath.Base(filepath.Dir(p))}
		if err != nil || !alive(s) {
			continue
		}
		_ = syscall.Kill(s.pr.SupervisorPID, syscall.SIGTERM)
		live = append(live, s)
	}
	deadline := time.Now().Add(grace)
	for _, s := range live {
		for time.Now().Before(deadline) && alive(s) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(s) {
			if s.pr.PGID > 0 {
				_ = syscall.Kill(-s.pr.PGID, syscall.SIGKILL)
			}
			_ = syscall.Kill(s.pr.SupervisorPID, syscall.SIGKILL)
			// A container outlives its killed CLI and supervisor: remove it.
			var spec superviseSpec
			if err := readJSON(filepath.Join(dir, "attempts", s.attempt, specFile), &spec); err == nil && spec.Container != nil {
				e := Engine{Socket: spec.Container.Socket}
				if c := spec.Container.Remove; len(c) > 0 && e.Socket == "" {
					_ = exec.Command(c[0], c[1:]...).Run()
				} else if e.Socket != "" {
					_ = e.remove(context.Background(), containerName(s.attempt))
				}
			}
		}
	}
	return len(live)
}

// pullProgress follows a container attempt's image pull (pull.json, the
// supervisor's): while it runs the attempt's reason says so, and its start
// and end become events for the job; r.mu must be held.
func (r *Runner) pullProgress(a *attempt, dir string) {
	var rec pullRecord
	if err := readJSON(filepath.Join(dir, pullFileName), &rec); err != nil {
		return
	}
	if rec.State == "pulling" {
		a.Reason = fmt.Sprintf("pulling image %s: %s", rec.Image, r.now().Sub(rec.StartedAt).Round(time.Second))
		if rec.Layers > 0 {
			a.Reason += fmt.Sprintf(", %d layers so far", rec.Layers)
		}
	}
	if rec.State == a.Pull || len(a.Events) >= maxPendingEvents {
		return
	}
	a.Pull, r.dirty = rec.State, true
	var detail string
	at := rec.StartedAt
	took := ""
	if rec.FinishedAt != nil {
		at, took = *rec.FinishedAt, rec.FinishedAt.Sub(rec.StartedAt).Round(time.Millisecond).String()
	}
	switch rec.State {
	case "pulling":
		detail = "pulling image " + rec.Image
	case "pulled":
		detail = fmt.Sprintf("pulled image %s in %s (%d layers)", rec.Image, took, rec.Layers)
	case "present":
		detail = fmt.Sprintf("image %s already on the node (pull policy %s)", rec.Image, a.As.ImagePullPolicy.Or())
	case "failed":
		detail = fmt.Sprintf("image pull failed after %s: %s", took, rec.Error)
	default:
		return
	}
	if len(detail) > 1024 {
		detail = detail[:1024]
	}
	a.Events = append(a.Events, api.AttemptEvent{At: at, Kind: api.EventImagePull, Detail: strings.ToValidUTF8(detail, "?")})
}

// maxPendingEvents bounds an attempt's undelivered events.
const maxPendingEvents = 8

// ReapContainers removes the containers of this node's engine that an
// attempt of this agent made (label gpufleet.attempt) and that no live
// attempt it knows owns: what a lost agent left running (on Kubernetes an
// agent pod's supervisors end with it, its containers do not). Run it
// after Load. It returns the containers it removed.
func (r *Runner) ReapContainers(ctx context.Context) ([]string, error) {
	if r.cfg.Engine == nil {
		return nil, nil
	}
	names, err := r.cfg.Engine.listAttempts(ctx, r.cfg.DataDir)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	live := map[string]bool{}
	for id, a := range r.attempts {
		if !a.State.Terminal() {
			live[containerName(id)] = true
		}
	}
	r.mu.Unlock()
	var removed []string
	var errs []error
	for _, n := range names {
		if live[n] {
			continue
		}
		if err := r.cfg.Engine.remove(ctx, n); err != nil {
			errs = append(errs, err) // one the engine cannot remove does not keep the others
			continue
		}
		removed = append(removed, n)
	}
	return removed, errors.Join(errs...)
}

package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpufleet/gpufleet/internal/agent/devcgroup"
	"github.com/gpufleet/gpufleet/internal/api"
)

// UIDRange is the range of user ids the agent hands out, one per running
// attempt, to teams that --run-as does not map: no two attempts running
// at once share a uid, so neither can read the other's /proc entries,
// signal its processes or open its files. The ids need no passwd entry.
type UIDRange struct{ First, Last uint32 }

// DefaultUIDRange is far above the ids of people (1000+), of /etc/subuid's
// usual 100000-165535 blocks and of systemd's dynamic users.
var DefaultUIDRange = UIDRange{First: 1_900_000_000, Last: 1_900_065_535}

// ParseUIDRange reads FIRST-LAST ("1900000000-1900065535"); ids below 1000
// (system accounts) and 0 are refused.
func ParseUIDRange(s string) (UIDRange, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	first, err1 := strconv.ParseUint(a, 10, 32)
	last, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil || first < 1000 || last < first || last == 1<<32-1 {
		return UIDRange{}, fmt.Errorf("--uid-range %q: expected FIRST-LAST, from 1000 up to 4294967294", s)
	}
	return UIDRange{First: uint32(first), Last: uint32(last)}, nil
}

// String writes r as ParseUIDRange reads it.
func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// pickUID returns the first id of r that used does not hold, starting
// after hint (so ids are not reused at once), or false when every id is
// taken.
func pickUID(r UIDRange, used map[uint32]bool, hint uint32) (uint32, bool) {
	n := uint64(r.Last-r.First) + 1
	start := uint64(0)
	if hint >= r.First && hint <= r.Last {
		start = uint64(hint-r.First) + 1
	}
	for i := range n {
		id := r.First + uint32((start+i)%n)
		if !used[id] {
			return id, true
		}
	}
	return 0, false
}

// Isolation is what the agent can set up for a process attempt on this
// node: each a boundary between two attempts.
type Isolation struct {
	// Users: each attempt runs as a uid no other running attempt has.
	Users bool `json:"users"`
	// PIDNamespace: an attempt sees only its own processes, and its end
	// takes every process it started with it.
	PIDNamespace bool `json:"pid_namespace"`
	// PrivateTmp: /tmp and /var/tmp are the attempt's own.
	PrivateTmp bool `json:"private_tmp"`
	// Devices: only the attempt's GPUs' device nodes (and the control
	// nodes) can be opened: "v1" (devices controller) or "v2-ebpf".
	Devices string `json:"devices,omitempty"`
	// Missing says what is not set up and why, one entry each.
	Missing []string `json:"missing,omitempty"`
}

// Hard reports whether every boundary holds.
func (i Isolation) Hard() bool { return len(i.Missing) == 0 }

// Level is the node's job boundary as a label value: hard or soft.
func (i Isolation) Level() string {
	if i.Hard() {
		return "hard"
	}
	return "soft"
}

// ProbeNamespaces reports whether this process can start a child in new
// PID and mount namespaces (root, and a kernel and sandbox that allow
// it), by starting /bin/true so.
func ProbeNamespaces() error {
	if os.Geteuid() != 0 {
		return errors.New("the agent is not root")
	}
	exe, err := exec.LookPath("true")
	if err != nil {
		exe = "/bin/true"
	}
	cmd := exec.Command(exe)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("new PID and mount namespaces: %w", err)
	}
	return nil
}

// prNoNewPrivs is PR_SET_NO_NEW_PRIVS: setuid programs (sudo, su) gain
// nothing after it.
const prNoNewPrivs = 38

// InitSpec is what the attempt init reads from the supervisor: the
// attempt's private temporary directory and the account to drop to.
type initSpec struct {
	Tmp string `json:"tmp"`
	// Keep are directories under /tmp or /var/tmp the attempt still sees
	// at their paths (the simulator's device nodes under a test's data
	// directory).
	Keep   []string `json:"keep,omitempty"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
}

// AttemptInit is `gpufleet agent init --dir DIR -- COMMAND...`: PID 1 of
// an attempt's PID and mount namespaces, started by the supervisor as
// root. It makes the mounts private, gives the attempt its own /proc (its
// processes only) and /tmp and /var/tmp (DIR's tmp), drops to the
// attempt's user with no new privileges, and runs the command in its own
// process group, which it shares so that the agent's signals to the group
// reach the command directly (PID 1 of a namespace ignores the signals it
// has no handler for, except SIGKILL, which ends the namespace). It reaps
// orphans and exits with the command's status; the kernel then kills
// whatever the attempt left in the namespace.
func AttemptInit(dir string, command []string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "gpufleet: attempt init: %v\n", err)
		return 127
	}
	var spec superviseSpec
	if err := readJSON(filepath.Join(dir, specFile), &spec); err != nil {
		return fail(err)
	}
	if spec.Init == nil || len(command) == 0 {
		return fail(errors.New("no init spec or command"))
	}
	in := spec.Init
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fail(fmt.Errorf("make mounts private: %w", err))
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fail(fmt.Errorf("mount /proc: %w", err))
	}
	kept := map[string]int{}
	for _, k := range in.Keep {
		fd, err := unix.Open(k, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("keep %s: %w", k, err))
		}
		kept[k] = fd
	}
	// /var/tmp first: the attempt's directory may itself be under /tmp.
	for _, t := range []string{"/var/tmp", "/tmp"} {
		if _, err := os.Stat(t); err != nil {
			continue
		}
		if err := syscall.Mount(in.Tmp, t, "", syscall.MS_BIND, ""); err != nil {
			return fail(fmt.Errorf("private %s: %w", t, err))
		}
	}
	for _, k := range in.Keep {
		if err := os.MkdirAll(k, 0o755); err != nil {
			return fail(fmt.Errorf("keep %s: %w", k, err))
		}
		if err := syscall.Mount("/proc/self/fd/"+strconv.Itoa(kept[k]), k, "", syscall.MS_BIND, ""); err != nil {
			return fail(fmt.Errorf("keep %s: %w", k, err))
		}
		_ = unix.Close(kept[k])
	}
	if err := syscall.Setgroups(intList(in.Groups)); err != nil {
		return fail(fmt.Errorf("setgroups: %w", err))
	}
	if err := syscall.Setgid(int(in.GID)); err != nil {
		return fail(fmt.Errorf("setgid %d: %w", in.GID, err))
	}
	if err := syscall.Setuid(int(in.UID)); err != nil {
		return fail(fmt.Errorf("setuid %d: %w", in.UID, err))
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prNoNewPrivs, 1, 0); e != 0 {
		return fail(fmt.Errorf("no_new_privs: %w", e))
	}
	// Signals the agent sends the group reach the command directly; init
	// catches and drops them (Go's runtime would otherwise exit on
	// SIGTERM). Caught, not ignored: an exec'd program starts with the
	// default action for a caught signal, but keeps an ignored one.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
		syscall.SIGXCPU, syscall.SIGWINCH, syscall.SIGPWR)
	go func() {
		for range sigs {
		}
	}()
	// Init's own environment is the attempt's (the supervisor starts it
	// so): the program is looked up on the attempt's PATH.
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env, cmd.Dir = spec.Env, spec.Workdir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		code := 127
		if errors.Is(err, os.ErrPermission) {
			code = 126
		}
		fmt.Fprintf(os.Stderr, "gpufleet: start %s: %v\n", command[0], err)
		return code
	}
	main := cmd.Process.Pid
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 1
		}
		if pid != main {
			continue // an orphan reparented to init
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()) // as a shell reports it
		}
		return ws.ExitStatus()
	}
}

func intList(us []uint32) []int {
	out := make([]int, len(us))
	for i, u := range us {
		out[i] = int(u)
	}
	return out
}

// isolate adds to spec what keeps the attempt apart from the others on
// the node: a container, or for a process its namespaces and init, and
// its device cgroup; r.mu must be held.
func (r *Runner) isolate(spec *superviseSpec, as api.Assignment, u runAs, dir string) error {
	var indexes []int
	byName := map[string]int{}
	mig := false
	for _, g := range as.GPUs {
		t := r.targets[g]
		indexes = append(indexes, t.Index)
		byName[g] = t.Index
		mig = mig || t.MIG
	}
	if as.Container() {
		reg, err := loadCDI(r.cfg.CDIDirs)
		if err != nil {
			r.log.Warn("reading CDI specs", "err", err)
		}
		o := containerOpts{Env: containerEnv(spec.Env), Ulimits: r.cfg.Ulimits, Agent: r.cfg.DataDir,
			Devices: containerDevices(reg, as.GPUs, byName, r.cfg.DevRoot, mig), CPUMax: spec.CPUMax, Memory: spec.MemoryMaxBytes}
		if p := filepath.Join(dir, authDir, authFile); fileExists(p) {
			o.AuthFile = p
		}
		cs := containerCommand(*r.cfg.Engine, as, o)
		if r.cfg.Engine.Socket != "" {
			body := containerCreate(as, o)
			cs.Socket, cs.Create = r.cfg.Engine.Socket, &body
			cs.Run = append(slices.Clone(r.cfg.Attach), "--dir", dir)
		}
		spec.Container = &cs
		// The engine sets the container's limits and cgroup.
		spec.Cgroup, spec.CPUMax, spec.MemoryMaxBytes, spec.UID, spec.GID = "", "", 0, nil, nil
		return nil
	}
	if r.cfg.DeviceMode != "" {
		spec.DeviceMode, spec.Devices = r.cfg.DeviceMode, gpuNodes(r.cfg.DevRoot, indexes, mig)
		if r.cfg.DeviceMode == devcgroup.ModeV1 {
			spec.DeviceCgroupV1 = filepath.Join(DevicesV1Root, cgroupParent, as.AttemptID)
		}
	}
	if r.cfg.Isolate && u.UID != nil && len(r.cfg.Init) > 0 {
		tmp := filepath.Join(dir, "tmp")
		if err := os.MkdirAll(tmp, 0o700); err != nil {
			return err
		}
		if err := os.Chown(tmp, int(*u.UID), int(*u.GID)); err != nil {
			return err
		}
		spec.Init = &initSpec{Tmp: tmp, UID: *u.UID, GID: *u.GID, Groups: u.Groups, Keep: keptUnderTmp(r.cfg.DevRoot, as)}
		spec.InitArgv = append(slices.Clone(r.cfg.Init), "--dir", dir, "--")
	}
	return nil
}

// hostMemory is the node's memory in bytes (sysinfo), 0 when unknown.
func hostMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// ownCgroupV2 reads the unified hierarchy's path from /proc/self/cgroup's
// "0::PATH" line.
func ownCgroupV2(procSelfCgroup []byte) (string, bool) {
	for _, line := range strings.Split(string(procSelfCgroup), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && strings.HasPrefix(p, "/") {
			return p, true
		}
	}
	return "", false
}

// DelegatedCgroupRoot is where the agent makes its attempts' cgroups on a
// cgroup v2 host: under its own cgroup when systemd delegated it
// (Delegate=yes puts the agent in /system.slice/gpufleet-agent.service,
// whose subtree is then the agent's to manage), else under mount. To give
// attempts controllers there, the agent first moves itself to the leaf
// OWN/agent (cgroup v2 enables controllers only for a cgroup without
// processes of its own); its supervisors are born there and each
// attempt's command is cloned into OWN/gpufleet/<attempt>. note says what
// was done, for the start-up log.
func DelegatedCgroupRoot(mount string) (root, note string) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return mount, ""
	}
	own, ok := ownCgroupV2(data)
	if !ok || own == "/" {
		return mount, ""
	}
	own = strings.TrimSuffix(own, "/agent") // a restarted agent's leaf
	unit := filepath.Join(mount, own)
	if err := syscall.Access(filepath.Join(unit, cgroupSubtree), 2 /* W_OK */); err != nil {
		return mount, fmt.Sprintf("own cgroup %s is not delegated (%v): attempts under %s", own, err, mount)
	}
	leaf := filepath.Join(unit, "agent")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return mount, fmt.Sprintf("own cgroup %s: %v", own, err)
	}
	if err := os.WriteFile(filepath.Join(leaf, cgroupProcs), []byte("0"), 0); err != nil {
		return mount, fmt.Sprintf("moving the agent to %s: %v", leaf, err)
	}
	return unit, fmt.Sprintf("delegated cgroup %s: the agent in %s/agent, attempts in %s/%s/<attempt>", own, own, own, cgroupParent)
}

// keptUnderTmp lists the directories under /tmp or /var/tmp an isolated
// attempt still sees at their paths, though its /tmp is its own: the
// device root (the simulator's, under a test's data directory), the job's
// working directory, and the directory of its program when the command
// names one by path (a script a user left in /tmp). Only existing
// directories, each once.
func keptUnderTmp(devRoot string, as api.Assignment) []string {
	cands := []string{devRoot, as.Workdir}
	if len(as.Command) > 0 && filepath.IsAbs(as.Command[0]) {
		cands = append(cands, filepath.Dir(as.Command[0]))
	}
	var out []string
	for _, c := range cands {
		if c == "" || !(strings.HasPrefix(c, "/tmp/") || strings.HasPrefix(c, "/var/tmp/")) || slices.Contains(out, c) {
			continue
		}
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			out = append(out, filepath.Clean(c))
		}
	}
	return out
}

package devcgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// These tests confine real child processes with the real kernel
// facilities. They skip when not root or when the facility is missing,
// except that with CI=true a host that has the facility must run them: a
// setup problem there fails the test instead of skipping it.

// Where the tests look for the facilities.
const (
	testV1Root = "/sys/fs/cgroup/devices"
)

// testV2Roots are the places a cgroup2 mount is looked for: the hybrid
// layout's unified hierarchy, then the pure v2 layout's root.
var testV2Roots = []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}

// Environment variables that turn the test binary into a helper process.
const (
	envProbe  = "GPUFLEET_DEVCGROUP_PROBE"  // ops to run once released on stdin
	envAttach = "GPUFLEET_DEVCGROUP_ATTACH" // "DIR\nDEVICE": AttachV2(DIR, Base()+DEVICE), then exit
)

func TestMain(m *testing.M) {
	if ops, ok := os.LookupEnv(envProbe); ok {
		os.Exit(probeMain(ops))
	}
	if spec, ok := os.LookupEnv(envAttach); ok {
		os.Exit(attachMain(spec))
	}
	os.Exit(m.Run())
}

// probeMain waits for a line on stdin (sent once the parent has moved it
// into the cgroup under test), then runs each op, one a line ("open PATH"
// or "mknod PATH MAJOR MINOR"), and prints its errno (0: success), one a
// line.
func probeMain(ops string) int {
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "probe: read stdin:", err)
		return 2
	}
	for op := range strings.Lines(ops) {
		f := strings.Fields(op)
		var err error
		switch {
		case len(f) == 2 && f[0] == "open":
			var fd int
			fd, err = unix.Open(f[1], unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				_ = unix.Close(fd)
			}
		case len(f) == 4 && f[0] == "mknod":
			major, _ := strconv.ParseUint(f[2], 10, 32)
			minor, _ := strconv.ParseUint(f[3], 10, 32)
			err = unix.Mknod(f[1], unix.S_IFCHR|0o600, int(unix.Mkdev(uint32(major), uint32(minor))))
		default:
			fmt.Fprintf(os.Stderr, "probe: bad op %q\n", op)
			return 2
		}
		var errno syscall.Errno
		if err != nil && !errors.As(err, &errno) {
			fmt.Fprintln(os.Stderr, "probe:", err)
			return 2
		}
		fmt.Println(int(errno))
	}
	return 0
}

// attachMain attaches a filter for Base() and one device and exits without
// closing it, as a supervisor that dies would.
func attachMain(spec string) int {
	dir, dev, _ := strings.Cut(spec, "\n")
	devRules, err := ForPaths([]string{dev})
	if err == nil {
		_, err = AttachV2(dir, append(Base(), devRules...))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "attach:", err)
		return 1
	}
	return 0
}

// inCI reports whether the tests run in CI, where a host with a facility
// must run its tests.
func inCI() bool { return os.Getenv("CI") == "true" }

// skipOrFatal skips the test, or fails it in CI.
func skipOrFatal(t *testing.T, format string, args ...any) {
	t.Helper()
	if inCI() {
		t.Fatalf(format+" (CI=true: not skipping)", args...)
	}
	t.Skipf(format, args...)
}

// requireRoot skips the test unless it runs as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("confining devices needs root; CI runs the tests as root")
	}
}

// newCgroup makes a uniquely named cgroup directory under root and removes
// it when the test ends.
func newCgroup(t *testing.T, root string) string {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprintf("gpufleet-devcgroup-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		skipOrFatal(t, "cannot create cgroup: %v", err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := os.Remove(dir)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("remove cgroup: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return dir
}

// freeCharMajor returns a character major number that no driver has
// registered (per /proc/devices), so opening a node with it fails with
// ENXIO when the device cgroup lets the open through. 195 (NVIDIA's) comes
// first; the rest are the numbers reserved for local and experimental use.
func freeCharMajor(t *testing.T) uint32 {
	t.Helper()
	data, err := os.ReadFile("/proc/devices")
	if err != nil {
		skipOrFatal(t, "cannot read /proc/devices: %v", err)
	}
	used := map[uint32]bool{}
	char := false
	for line := range strings.Lines(string(data)) {
		switch strings.TrimSpace(line) {
		case "Character devices:":
			char = true
			continue
		case "Block devices:":
			char = false
			continue
		}
		f := strings.Fields(line)
		if !char || len(f) != 2 {
			continue
		}
		if n, err := strconv.ParseUint(f[0], 10, 32); err == nil {
			used[uint32(n)] = true
		}
	}
	candidates := []uint32{195, 60, 61, 62, 63, 120, 121, 122, 123, 124, 125, 126, 127}
	for _, m := range candidates {
		if !used[m] {
			return m
		}
	}
	skipOrFatal(t, "no free character major among %v", candidates)
	return 0
}

// testDevices makes two character device nodes, dev0 (MAJOR:0) and dev1
// (MAJOR:1), with a major no driver serves, and returns their paths and
// the major.
func testDevices(t *testing.T) (dev0, dev1 string, major uint32) {
	t.Helper()
	major = freeCharMajor(t)
	dir := t.TempDir()
	dev0 = filepath.Join(dir, "dev0")
	dev1 = filepath.Join(dir, "dev1")
	for minor, p := range []string{dev0, dev1} {
		if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(major, uint32(minor)))); err != nil {
			skipOrFatal(t, "mknod %s: %v", p, err)
		}
	}
	return dev0, dev1, major
}

// probeCase is one operation a child process in the cgroup performs, and
// the errno it must get (0: success).
type probeCase struct {
	name string
	op   string
	want syscall.Errno
}

// probe starts a child process, moves it into the cgroup dir before it does
// anything, has it run the cases' operations and checks their errnos.
func probe(t *testing.T, dir string, cases []probeCase) {
	t.Helper()
	ops := make([]string, len(cases))
	for i, c := range cases {
		ops[i] = c.op
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envProbe+"="+strings.Join(ops, "\n"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	procs := filepath.Join(dir, "cgroup.procs")
	if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("move probe into %s: %v", dir, err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatalf("release probe: %v", err)
	}
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("probe: %v; stderr:\n%s", err, stderr.String())
	}
	lines := strings.Fields(stdout.String())
	if len(lines) != len(cases) {
		t.Fatalf("probe printed %q for %d ops; stderr:\n%s", stdout.String(), len(cases), stderr.String())
	}
	for i, c := range cases {
		n, err := strconv.Atoi(lines[i])
		if err != nil {
			t.Fatalf("probe output %q: %v", lines[i], err)
		}
		if got := syscall.Errno(n); got != c.want {
			t.Errorf("%s (%s): errno %d (%v), want %d (%v)", c.name, c.op, n, errnoText(got), int(c.want), errnoText(c.want))
		}
	}
}

// errnoText describes an errno, with "success" for 0.
func errnoText(e syscall.Errno) string {
	if e == 0 {
		return "success"
	}
	return e.Error()
}

// allowedCases are the checks of a cgroup confined to Base() and dev0:
// /dev/null opens, dev0 gets through the device cgroup to the missing
// driver (ENXIO), dev1 is stopped by it (EPERM), and only dev0's numbers
// may be used for a new node.
func allowedCases(dev0, dev1 string, major uint32) []probeCase {
	newNode := func(minor int) string {
		return fmt.Sprintf("mknod %s.new %d %d", filepath.Join(filepath.Dir(dev0), "mknod"+strconv.Itoa(minor)), major, minor)
	}
	return []probeCase{
		{"open /dev/null", "open /dev/null", 0},
		{"open allowed dev0", "open " + dev0, unix.ENXIO},
		{"open denied dev1", "open " + dev1, unix.EPERM},
		{"mknod allowed dev0 numbers", newNode(0), 0},
		{"mknod denied dev1 numbers", newNode(1), unix.EPERM},
	}
}

// accessRules returns Base() with read-only access to MAJOR:0 and
// mknod-only access to MAJOR:1, which accessCases check.
func accessRules(major uint32) []Rule {
	return append(Base(),
		Rule{Type: 'c', Major: int64(major), Minor: 0, Access: "r"},
		Rule{Type: 'c', Major: int64(major), Minor: 1, Access: "m"},
	)
}

// accessCases check a cgroup confined to accessRules: each access letter
// is enforced on its own.
func accessCases(dev0, dev1 string, major uint32) []probeCase {
	c := allowedCases(dev0, dev1, major)
	c[3].name, c[3].want = "mknod read-only dev0 numbers", unix.EPERM
	c[4].name, c[4].want = "mknod mknod-only dev1 numbers", 0
	return c
}

// wildcardRules returns Base() and a rule for every minor of major.
func wildcardRules(major uint32) []Rule {
	return append(Base(), Rule{Type: 'c', Major: int64(major), Minor: Any, Access: "rw"})
}

// unconfinedCases check that dev1 is reachable: the device cgroup lets the
// open through to the missing driver.
func unconfinedCases(dev1 string) []probeCase {
	return []probeCase{
		{"open /dev/null", "open /dev/null", 0},
		{"open dev1", "open " + dev1, unix.ENXIO},
	}
}

// confinedRules returns Base() and rules for paths.
func confinedRules(t *testing.T, paths ...string) []Rule {
	t.Helper()
	devRules, err := ForPaths(paths)
	if err != nil {
		t.Fatal(err)
	}
	return append(Base(), devRules...)
}

// removeNewNodes removes the nodes allowedCases' mknod made, so that the
// next probe can make them again.
func removeNewNodes(t *testing.T, dev0 string) {
	t.Helper()
	for minor := range 2 {
		p := filepath.Join(filepath.Dir(dev0), "mknod"+strconv.Itoa(minor)+".new")
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

func TestApplyV1(t *testing.T) {
	requireRoot(t)
	if err := checkV1(testV1Root); err != nil {
		t.Skipf("no cgroup v1 devices controller here: %v", err)
	}
	if mode, why := Supported("", testV1Root); mode != ModeV1 {
		skipOrFatal(t, "Supported(%q, %q) = %q, %q", "", testV1Root, mode, why)
	}
	dev0, dev1, major := testDevices(t)
	dir := newCgroup(t, testV1Root)

	t.Run("before", func(t *testing.T) {
		probe(t, dir, unconfinedCases(dev1))
	})
	t.Run("confined", func(t *testing.T) {
		if err := ApplyV1(dir, confinedRules(t, dev0)); err != nil {
			t.Fatalf("ApplyV1: %v", err)
		}
		data, err := os.ReadFile(filepath.Join(dir, "devices.list"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("devices.list:\n%s", data)
		probe(t, dir, allowedCases(dev0, dev1, major))
		removeNewNodes(t, dev0)
	})
	t.Run("reapplied wider", func(t *testing.T) {
		if err := ApplyV1(dir, confinedRules(t, dev0, dev1)); err != nil {
			t.Fatalf("ApplyV1: %v", err)
		}
		probe(t, dir, unconfinedCases(dev1))
	})
	t.Run("access letters", func(t *testing.T) {
		if err := ApplyV1(dir, accessRules(major)); err != nil {
			t.Fatalf("ApplyV1: %v", err)
		}
		probe(t, dir, accessCases(dev0, dev1, major))
		removeNewNodes(t, dev0)
	})
	t.Run("wildcard minor", func(t *testing.T) {
		if err := ApplyV1(dir, wildcardRules(major)); err != nil {
			t.Fatalf("ApplyV1: %v", err)
		}
		probe(t, dir, unconfinedCases(dev1))
	})
	t.Run("reapplied narrower", func(t *testing.T) {
		if err := ApplyV1(dir, confinedRules(t, dev0)); err != nil {
			t.Fatalf("ApplyV1: %v", err)
		}
		probe(t, dir, allowedCases(dev0, dev1, major)[:3])
	})
}

// testV2Root returns a cgroup2 mount this process can attach device
// programs under, or skips.
func testV2Root(t *testing.T) string {
	t.Helper()
	requireRoot(t)
	for _, root := range testV2Roots {
		fd, err := openCgroup2(root)
		if err != nil {
			continue
		}
		_ = unix.Close(fd)
		if mode, why := Supported(root, ""); mode != ModeV2 {
			skipOrFatal(t, "Supported(%q, %q) = %q, %q", root, "", mode, why)
		}
		return root
	}
	t.Skipf("no cgroup2 mount at %v", testV2Roots)
	return ""
}

// attachedCount returns how many device programs are attached to dir
// itself.
func attachedCount(t *testing.T, dir string) int {
	t.Helper()
	fd, err := openCgroup2(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	res, err := link.QueryPrograms(link.QueryOptions{Target: fd, Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		t.Fatalf("query programs on %s: %v", dir, err)
	}
	return len(res.Programs)
}

func TestAttachV2(t *testing.T) {
	root := testV2Root(t)
	dev0, dev1, major := testDevices(t)
	dir := newCgroup(t, root)
	t.Cleanup(func() {
		if err := DetachV2(dir); err != nil {
			t.Errorf("DetachV2: %v", err)
		}
	})

	t.Run("before", func(t *testing.T) {
		probe(t, dir, unconfinedCases(dev1))
	})
	t.Run("attached", func(t *testing.T) {
		closer, err := AttachV2(dir, confinedRules(t, dev0))
		if err != nil {
			t.Fatalf("AttachV2: %v", err)
		}
		if n := attachedCount(t, dir); n != 1 {
			t.Errorf("%d programs attached, want 1", n)
		}
		probe(t, dir, allowedCases(dev0, dev1, major))
		removeNewNodes(t, dev0)
		if err := closer.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := closer.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if n := attachedCount(t, dir); n != 0 {
			t.Errorf("%d programs attached after Close, want 0", n)
		}
		probe(t, dir, unconfinedCases(dev1))
	})
	t.Run("access letters", func(t *testing.T) {
		closer, err := AttachV2(dir, accessRules(major))
		if err != nil {
			t.Fatalf("AttachV2: %v", err)
		}
		defer closer.Close()
		probe(t, dir, accessCases(dev0, dev1, major))
		removeNewNodes(t, dev0)
	})
	t.Run("wildcard minor", func(t *testing.T) {
		closer, err := AttachV2(dir, wildcardRules(major))
		if err != nil {
			t.Fatalf("AttachV2: %v", err)
		}
		defer closer.Close()
		probe(t, dir, append(unconfinedCases(dev1), probeCase{"open dev0", "open " + dev0, unix.ENXIO}))
	})
	t.Run("allow all", func(t *testing.T) {
		closer, err := AttachV2(dir, []Rule{{Type: 'a', Major: Any, Minor: Any, Access: "rwm"}})
		if err != nil {
			t.Fatalf("AttachV2: %v", err)
		}
		defer closer.Close()
		probe(t, dir, unconfinedCases(dev1))
	})
	t.Run("deny all", func(t *testing.T) {
		closer, err := AttachV2(dir, nil)
		if err != nil {
			t.Fatalf("AttachV2: %v", err)
		}
		defer closer.Close()
		probe(t, dir, []probeCase{{"open /dev/null", "open /dev/null", unix.EPERM}})
	})
	t.Run("outlives a dropped closer", func(t *testing.T) {
		if _, err := AttachV2(dir, confinedRules(t, dev0)); err != nil {
			t.Fatalf("AttachV2: %v", err)
		}
		runtime.GC() // finalizers close the dropped program's descriptor
		runtime.GC()
		probe(t, dir, allowedCases(dev0, dev1, major)[:3])
		if err := DetachV2(dir); err != nil {
			t.Fatalf("DetachV2: %v", err)
		}
		probe(t, dir, unconfinedCases(dev1))
	})
	t.Run("outlives the attaching process", func(t *testing.T) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envAttach+"="+dir+"\n"+dev0)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("attaching process: %v\n%s", err, out)
		}
		if n := attachedCount(t, dir); n != 1 {
			t.Errorf("%d programs attached after the attaching process exited, want 1", n)
		}
		probe(t, dir, allowedCases(dev0, dev1, major)[:3])
		if err := DetachV2(dir); err != nil {
			t.Fatalf("DetachV2: %v", err)
		}
		if n := attachedCount(t, dir); n != 0 {
			t.Errorf("%d programs attached after DetachV2, want 0", n)
		}
		probe(t, dir, unconfinedCases(dev1))
	})
	t.Run("reattaching replaces", func(t *testing.T) {
		narrow, err := AttachV2(dir, confinedRules(t, dev0))
		if err != nil {
			t.Fatalf("AttachV2: %v", err)
		}
		wide, err := AttachV2(dir, confinedRules(t, dev0, dev1))
		if err != nil {
			t.Fatalf("AttachV2: %v", err)
		}
		if n := attachedCount(t, dir); n != 1 {
			t.Errorf("%d programs attached, want 1 (the second replacing the first)", n)
		}
		probe(t, dir, unconfinedCases(dev1))
		if err := narrow.Close(); err != nil {
			t.Errorf("Close of the replaced filter: %v", err)
		}
		probe(t, dir, unconfinedCases(dev1))
		if err := wide.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := attachedCount(t, dir); n != 0 {
			t.Errorf("%d programs attached after Close, want 0", n)
		}
	})
	t.Run("other programs kept", func(t *testing.T) {
		// A foreign program (another name) that allows everything must
		// survive AttachV2's replacing and DetachV2.
		other, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "other_devcg",
			Type:         ebpf.CGroupDevice,
			Instructions: assemble([]Rule{{Type: 'a', Major: Any, Minor: Any, Access: "rwm"}}),
			License:      "Apache-2.0",
		})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		fd, err := openCgroup2(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		opts := link.RawAttachProgramOptions{Target: fd, Program: other, Attach: ebpf.AttachCGroupDevice, Flags: unix.BPF_F_ALLOW_MULTI}
		if err := link.RawAttachProgram(opts); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := link.RawDetachProgram(link.RawDetachProgramOptions(opts)); err != nil {
				t.Errorf("detach other program: %v", err)
			}
		}()
		closer, err := AttachV2(dir, confinedRules(t, dev0))
		if err != nil {
			t.Fatalf("AttachV2: %v", err)
		}
		defer closer.Close()
		if n := attachedCount(t, dir); n != 2 {
			t.Errorf("%d programs attached, want 2", n)
		}
		probe(t, dir, allowedCases(dev0, dev1, major)[:3])
		if err := DetachV2(dir); err != nil {
			t.Fatalf("DetachV2: %v", err)
		}
		if n := attachedCount(t, dir); n != 1 {
			t.Errorf("%d programs attached after DetachV2, want 1 (the other one)", n)
		}
	})
}

func TestSupported(t *testing.T) {
	notCgroup := t.TempDir()
	if err := haveSysAdmin(); err != nil {
		// Whatever the roots, the missing capability is the reason.
		mode, why := Supported("/sys/fs/cgroup/unified", testV1Root)
		if mode != "" || !strings.Contains(why, "CAP_SYS_ADMIN") {
			t.Errorf("Supported without CAP_SYS_ADMIN = %q, %q; want \"\" and a reason naming CAP_SYS_ADMIN", mode, why)
		}
		return
	}
	tests := []struct {
		name     string
		v2, v1   string
		skip     func() error // the facility the case needs; nil error: present
		wantMode string
		wantWhy  string // a substring of why; "" for an empty why
	}{
		{"nothing given", "", "", nil, "", "no cgroup root given"},
		{"neither is a cgroup", notCgroup, notCgroup, nil, "", "not on a cgroup2 mount; v1: no devices controller"},
		{"v1 only", "", testV1Root, func() error { return checkV1(testV1Root) }, ModeV1, ""},
		{"v1 after v2 fails", notCgroup, testV1Root, func() error { return checkV1(testV1Root) }, ModeV1, "v2: " + notCgroup + " is not on a cgroup2 mount"},
		{"v2 unified", "/sys/fs/cgroup/unified", testV1Root, func() error { return checkV2("/sys/fs/cgroup/unified") }, ModeV2, ""},
		{"v1 root is not cgroup2", testV1Root, "", func() error { return checkV1(testV1Root) }, "", "is not on a cgroup2 mount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.skip != nil {
				if err := tt.skip(); err != nil {
					t.Skipf("facility missing: %v", err)
				}
			}
			mode, why := Supported(tt.v2, tt.v1)
			if mode != tt.wantMode {
				t.Errorf("Supported(%q, %q) mode = %q (why %q), want %q", tt.v2, tt.v1, mode, why, tt.wantMode)
			}
			if (tt.wantWhy == "") != (why == "") || !strings.Contains(why, tt.wantWhy) {
				t.Errorf("Supported(%q, %q) why = %q, want %q", tt.v2, tt.v1, why, tt.wantWhy)
			}
		})
	}
}

package devcgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The modes Supported reports.
const (
	ModeV2 = "v2-ebpf" // AttachV2 on directories under the cgroup2 root
	ModeV1 = "v1"      // ApplyV1 on directories under the v1 devices root
)

// capSysAdmin is CAP_SYS_ADMIN's bit number (linux/capability.h).
const capSysAdmin = 21

// Supported says whether this process can confine devices here, and how:
// ModeV2 ("v2-ebpf") when v2Root is a directory on a cgroup2 mount and a
// small BPF_PROG_TYPE_CGROUP_DEVICE program, of the kind AttachV2 builds,
// loads; otherwise ModeV1 ("v1") when v1Root (normally
// /sys/fs/cgroup/devices) is a cgroup v1 mount of the devices controller;
// otherwise "", with why saying why not: not root, no CAP_SYS_ADMIN, a
// kernel without BPF_PROG_TYPE_CGROUP_DEVICE, no devices controller. An
// empty v2Root or v1Root is not tried. When the mode is ModeV1 and v2Root
// was given, why says why ModeV2 was not chosen; otherwise a non-empty mode
// comes with an empty why.
//
// On a hybrid host both may work; ModeV2 is preferred, and then the
// processes to confine must be moved into cgroup2 directories under v2Root.
func Supported(v2Root, v1Root string) (mode string, why string) {
	if err := haveSysAdmin(); err != nil {
		return "", err.Error()
	}
	var reasons []string
	if v2Root != "" {
		err := checkV2(v2Root)
		if err == nil {
			return ModeV2, ""
		}
		reasons = append(reasons, "v2: "+err.Error())
	}
	if v1Root != "" {
		err := checkV1(v1Root)
		if err == nil {
			return ModeV1, strings.Join(reasons, "; ")
		}
		reasons = append(reasons, "v1: "+err.Error())
	}
	if len(reasons) == 0 {
		return "", "no cgroup root given"
	}
	return "", strings.Join(reasons, "; ")
}

// haveSysAdmin fails unless the process has CAP_SYS_ADMIN in its effective
// set, which both the v1 devices controller and device programs need.
func haveSysAdmin() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading capabilities: %w", err)
	}
	if data[0].Effective&(1<<capSysAdmin) != 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return errors.New("not root (no CAP_SYS_ADMIN)")
	}
	return errors.New("root but missing CAP_SYS_ADMIN")
}

// checkV2 fails unless root is on a cgroup2 mount and a device program
// loads.
func checkV2(root string) error {
	fd, err := openCgroup2(root)
	if err != nil {
		return err
	}
	_ = unix.Close(fd)
	prog, err := loadProgram(Base()[:1])
	switch {
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.EINVAL):
		return fmt.Errorf("kernel without BPF_PROG_TYPE_CGROUP_DEVICE (or without 32-bit jumps): %w", err)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("not permitted to load a BPF_PROG_TYPE_CGROUP_DEVICE program: %w", err)
	case err != nil:
		return err
	}
	return prog.Close()
}

// checkV1 fails unless root is a cgroup v1 mount with the devices
// controller.
func checkV1(root string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return fmt.Errorf("no devices controller: %w", err)
	}
	if st.Type != unix.CGROUP_SUPER_MAGIC {
		return fmt.Errorf("no devices controller: %s is not a cgroup v1 mount", root)
	}
	if _, err := os.Stat(filepath.Join(root, "devices.allow")); err != nil {
		return fmt.Errorf("no devices controller at %s: %w", root, err)
	}
	return nil
}

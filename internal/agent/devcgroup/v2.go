package devcgroup

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// progName is the kernel-visible name of the programs AttachV2 loads (at
// most 15 bytes); DetachV2 and AttachV2 recognise their own programs by it.
const progName = "gpufleet_devcg"

// Values of struct bpf_cgroup_dev_ctx (include/uapi/linux/bpf.h): the low
// 16 bits of access_type hold the device type, the high 16 bits the access.
const (
	devcgDevBlock = 1 // BPF_DEVCG_DEV_BLOCK
	devcgDevChar  = 2 // BPF_DEVCG_DEV_CHAR

	devcgAccMknod = 1 // BPF_DEVCG_ACC_MKNOD
	devcgAccRead  = 2 // BPF_DEVCG_ACC_READ
	devcgAccWrite = 4 // BPF_DEVCG_ACC_WRITE
)

// Offsets of the fields of struct bpf_cgroup_dev_ctx, each a __u32.
const (
	ctxAccessType = 0
	ctxMajor      = 4
	ctxMinor      = 8
)

// AttachV2 loads a BPF_PROG_TYPE_CGROUP_DEVICE program that allows exactly
// rules and denies every other device access, and attaches it to the
// cgroup v2 directory dir.
//
// It attaches with the legacy BPF_PROG_ATTACH command
// (link.RawAttachProgram) and BPF_F_ALLOW_MULTI, not with a BPF link, so
// that the program stays attached after the attaching process closes its
// file descriptors or exits: the agent's supervisor attaches it and may
// exit or restart, and the filter lives as long as the cgroup does. (A BPF
// link, as link.AttachCgroup makes on newer kernels, would detach the
// program when its last file descriptor closed, unless it were pinned.)
// Under BPF_F_ALLOW_MULTI the kernel runs every program attached to dir and
// to its ancestors, and an access must pass all of them, so programs
// attached elsewhere (by systemd, say) can only narrow what rules allow.
// Attaching fails with EPERM when an ancestor holds a program attached
// without BPF_F_ALLOW_MULTI or BPF_F_ALLOW_OVERRIDE.
//
// After attaching, AttachV2 detaches the programs it (or an earlier
// AttachV2) attached to dir before, recognised by name, so that calling it
// again replaces the rules instead of intersecting them; there is no moment
// without a filter. Calls for the same dir must not run concurrently (each
// could detach the other's program).
//
// The returned Closer detaches the program again and releases its file
// descriptors; dropping the Closer without calling Close leaves the program
// attached. DetachV2 detaches it from another process. Removing the cgroup
// directory frees it as well.
//
// On a hybrid host the v1 devices controller is consulted too: an access
// must also pass the process's v1 devices cgroup.
func AttachV2(dir string, rules []Rule) (io.Closer, error) {
	if err := validate(rules); err != nil {
		return nil, err
	}
	cgroup, err := openCgroup2(dir)
	if err != nil {
		return nil, fmt.Errorf("devcgroup: %w", err)
	}
	prog, err := loadProgram(rules)
	if err != nil {
		_ = unix.Close(cgroup)
		return nil, err
	}
	err = link.RawAttachProgram(link.RawAttachProgramOptions{
		Target:  cgroup,
		Program: prog,
		Attach:  ebpf.AttachCGroupDevice,
		Flags:   unix.BPF_F_ALLOW_MULTI,
	})
	if err != nil {
		_ = prog.Close()
		_ = unix.Close(cgroup)
		return nil, fmt.Errorf("devcgroup: attach device program to %s: %w", dir, err)
	}
	f := &v2Filter{dir: dir, cgroup: cgroup, prog: prog}
	info, err := prog.Info()
	if err == nil {
		id, ok := info.ID()
		if ok {
			err = detachOurs(dir, cgroup, id)
		} else {
			err = errors.New("kernel does not report program IDs")
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("devcgroup: replace earlier device programs on %s: %w", dir, err)
	}
	return f, nil
}

// DetachV2 detaches from the cgroup v2 directory dir every device program
// that AttachV2 attached to it, in this process or another, and leaves other
// programs alone. Detaching nothing is not an error.
func DetachV2(dir string) error {
	cgroup, err := openCgroup2(dir)
	if err != nil {
		return fmt.Errorf("devcgroup: %w", err)
	}
	defer unix.Close(cgroup)
	if err := detachOurs(dir, cgroup, 0); err != nil {
		return fmt.Errorf("devcgroup: detach device programs from %s: %w", dir, err)
	}
	return nil
}

// v2Filter is AttachV2's Closer.
type v2Filter struct {
	dir    string
	cgroup int
	prog   *ebpf.Program
	once   sync.Once
	err    error
}

// Close detaches the program, unless something else (a later AttachV2,
// DetachV2) already has, and closes the file descriptors. Later calls
// return the first call's result.
func (f *v2Filter) Close() error {
	f.once.Do(func() {
		err := link.RawDetachProgram(link.RawDetachProgramOptions{
			Target:  f.cgroup,
			Program: f.prog,
			Attach:  ebpf.AttachCGroupDevice,
		})
		if err != nil && !errors.Is(err, unix.ENOENT) {
			f.err = fmt.Errorf("devcgroup: detach device program from %s: %w", f.dir, err)
		}
		_ = f.prog.Close()
		_ = unix.Close(f.cgroup)
	})
	return f.err
}

// openCgroup2 opens dir, which must be a directory on a cgroup2 mount. Its
// errors lack the package prefix.
func openCgroup2(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open cgroup: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("statfs %s: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("%s is not on a cgroup2 mount", dir)
	}
	return fd, nil
}

// detachOurs detaches the programs named progName from the cgroup open as
// fd, except the one with ID keep (0: none).
func detachOurs(dir string, cgroup int, keep ebpf.ProgramID) error {
	res, err := link.QueryPrograms(link.QueryOptions{Target: cgroup, Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		return err
	}
	for _, ap := range res.Programs {
		if ap.ID == keep {
			continue
		}
		if err := detachIfOurs(cgroup, ap.ID); err != nil {
			return fmt.Errorf("program %d on %s: %w", ap.ID, dir, err)
		}
	}
	return nil
}

// detachIfOurs detaches program id from the cgroup open as fd if it is
// named progName.
func detachIfOurs(cgroup int, id ebpf.ProgramID) error {
	prog, err := ebpf.NewProgramFromID(id)
	if errors.Is(err, unix.ENOENT) {
		return nil // detached and freed meanwhile
	}
	if err != nil {
		return err
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return err
	}
	if info.Name != progName {
		return nil
	}
	err = link.RawDetachProgram(link.RawDetachProgramOptions{
		Target:  cgroup,
		Program: prog,
		Attach:  ebpf.AttachCGroupDevice,
	})
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// loadProgram assembles and loads the device program for rules.
func loadProgram(rules []Rule) (*ebpf.Program, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         progName,
		Type:         ebpf.CGroupDevice,
		Instructions: assemble(rules),
		License:      "Apache-2.0",
	})
	if err != nil {
		return nil, fmt.Errorf("devcgroup: load device program: %w", err)
	}
	return prog, nil
}

// assemble returns a device program that returns 1 (allow) when an access
// matches one of rules and 0 (deny) otherwise. The rules must be valid.
//
// The program loads the context into registers once:
//
//	R2 = access (ACC_* bits), R3 = type (DEV_*), R4 = major, R5 = minor
//
// then tests the rules in order; each rule's block jumps to the next
// block as soon as one of its conditions fails and returns 1 if none does.
// A type 'a' rule (always "a *:* rwm") has no conditions and ends the
// program.
// A rule's access matches when the requested bits have none outside the
// rule's (R6 = R2 &^ allowed must be 0).
func assemble(rules []Rule) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, ctxAccessType, asm.Word),
		asm.Mov.Reg32(asm.R3, asm.R2),
		asm.And.Imm32(asm.R3, 0xffff),
		asm.RSh.Imm32(asm.R2, 16),
		asm.LoadMem(asm.R4, asm.R1, ctxMajor, asm.Word),
		asm.LoadMem(asm.R5, asm.R1, ctxMinor, asm.Word),
	}
	const deny = "deny"
	for i, r := range rules {
		next := deny
		if i+1 < len(rules) {
			next = ruleLabel(i + 1)
		}
		var block asm.Instructions
		switch r.Type {
		case 'c':
			block = append(block, asm.JNE.Imm32(asm.R3, devcgDevChar, next))
		case 'b':
			block = append(block, asm.JNE.Imm32(asm.R3, devcgDevBlock, next))
		}
		if r.Major != Any {
			block = append(block, asm.JNE.Imm32(asm.R4, int32(uint32(r.Major)), next))
		}
		if r.Minor != Any {
			block = append(block, asm.JNE.Imm32(asm.R5, int32(uint32(r.Minor)), next))
		}
		if allowed := accessBits(r.Access); allowed != devcgAccMknod|devcgAccRead|devcgAccWrite {
			block = append(block,
				asm.Mov.Reg32(asm.R6, asm.R2),
				asm.And.Imm32(asm.R6, int32(^allowed)),
				asm.JNE.Imm32(asm.R6, 0, next),
			)
		}
		block = append(block, asm.Mov.Imm32(asm.R0, 1), asm.Return())
		block[0] = block[0].WithSymbol(ruleLabel(i))
		insns = append(insns, block...)
		if r.Type == 'a' {
			// It matches every access: the verifier rejects the
			// unreachable instructions that would follow.
			return insns
		}
	}
	return append(insns,
		asm.Mov.Imm32(asm.R0, 0).WithSymbol(deny),
		asm.Return(),
	)
}

// ruleLabel is the jump label of rule i's block.
func ruleLabel(i int) string {
	return "rule" + strconv.Itoa(i)
}

// accessBits returns the BPF_DEVCG_ACC_* bits of a valid access string.
func accessBits(access string) uint32 {
	var bits uint32
	for _, c := range access {
		switch c {
		case 'r':
			bits |= devcgAccRead
		case 'w':
			bits |= devcgAccWrite
		case 'm':
			bits |= devcgAccMknod
		}
	}
	return bits
}

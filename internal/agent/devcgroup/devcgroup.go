// Package devcgroup confines which device nodes the processes of a cgroup
// may open or create: the node agent gives each job attempt a cgroup that
// allows the few device nodes every process needs (Base) plus the nodes of
// the attempt's own GPUs (ForPaths), and denies every other device.
//
// Two kernel mechanisms do this:
//
//   - cgroup v1: the devices controller. ApplyV1 writes the rules to the
//     controller's devices.deny and devices.allow files and checks
//     devices.list.
//   - cgroup v2: a BPF_PROG_TYPE_CGROUP_DEVICE program attached to the
//     cgroup directory. AttachV2 assembles one from the rules, loads it and
//     attaches it so that it outlives the attaching process.
//
// On a hybrid host the kernel consults both: an access must pass the v1
// controller of the process's v1 devices cgroup and every device program
// attached to its cgroup2 directory and that directory's ancestors.
// Supported says which of the two this process can use.
//
// Both need CAP_SYS_ADMIN (in practice: root). AttachV2 needs a kernel with
// BPF_PROG_TYPE_CGROUP_DEVICE and 32-bit jumps (Linux 5.1 or later); on
// kernels before 5.11, which charge BPF memory to RLIMIT_MEMLOCK, the caller
// may have to raise that limit first.
package devcgroup

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Any is the Major or Minor of a Rule that matches every number.
const Any = -1

// accessOrder is the order of the access letters in the kernel's
// devices.list and in Rule.String.
const accessOrder = "rwm"

// Rule allows one device or a class of devices.
type Rule struct {
	Type   byte   // 'c' (char) or 'b' (block); 'a' = all types
	Major  int64  // -1: any
	Minor  int64  // -1: any
	Access string // subset of "rwm"
}

// String returns r in the cgroup v1 devices.allow form, such as
// "c 195:0 rwm", "c 136:* rw" or "a *:* rwm". A valid rule's access letters
// come in the kernel's order (r, w, m) whatever their order in r.Access.
func (r Rule) String() string {
	access := r.Access
	if r.validAccess() == nil {
		access = canonicalAccess(r.Access)
	}
	return fmt.Sprintf("%c %s:%s %s", r.Type, number(r.Major), number(r.Minor), access)
}

// number formats a major or minor number, with "*" for Any.
func number(n int64) string {
	if n == Any {
		return "*"
	}
	return strconv.FormatInt(n, 10)
}

// canonicalAccess returns the letters of access in the order r, w, m,
// each once.
func canonicalAccess(access string) string {
	var b strings.Builder
	for _, c := range accessOrder {
		if strings.ContainsRune(access, c) {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// Validate reports why r cannot be applied: an unknown type, a major or
// minor number outside -1..2^32-1, or an access that is empty or holds a
// letter other than r, w and m. A type 'a' rule must be "a *:* rwm", the
// only form in which the v1 controller understands it.
func (r Rule) Validate() error {
	switch r.Type {
	case 'a':
		if r.Major != Any || r.Minor != Any || canonicalAccess(r.Access) != accessOrder || r.validAccess() != nil {
			return fmt.Errorf("devcgroup: rule %q: a type 'a' rule must be \"a *:* rwm\"", r.String())
		}
	case 'b', 'c':
	default:
		return fmt.Errorf("devcgroup: rule %q: type %q is not 'a', 'b' or 'c'", r.String(), r.Type)
	}
	for _, n := range []int64{r.Major, r.Minor} {
		if n < Any || n > math.MaxUint32 {
			return fmt.Errorf("devcgroup: rule %q: device number %d is out of range", r.String(), n)
		}
	}
	if err := r.validAccess(); err != nil {
		return fmt.Errorf("devcgroup: rule %q: %w", r.String(), err)
	}
	return nil
}

// errEmptyAccess is validAccess's complaint about a rule without access.
var errEmptyAccess = errors.New("access is empty")

// validAccess checks that r.Access is a non-empty subset of "rwm".
func (r Rule) validAccess() error {
	if r.Access == "" {
		return errEmptyAccess
	}
	for _, c := range r.Access {
		if !strings.ContainsRune(accessOrder, c) {
			return fmt.Errorf("access %q has %q, not one of r, w, m", r.Access, c)
		}
	}
	return nil
}

// validate checks every rule.
func validate(rules []Rule) error {
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Base returns the rules every process needs, all with access "rwm":
// /dev/null (c 1:3), /dev/zero (c 1:5), /dev/full (c 1:7), /dev/random
// (c 1:8), /dev/urandom (c 1:9), /dev/tty (c 5:0), /dev/console (c 5:1),
// /dev/ptmx (c 5:2) and the pseudo-terminals /dev/pts/* (c 136:*). It does
// not allow creating other device nodes (no "c *:* m" or "b *:* m"). Each
// call returns a new slice.
func Base() []Rule {
	return []Rule{
		{Type: 'c', Major: 1, Minor: 3, Access: "rwm"},     // null
		{Type: 'c', Major: 1, Minor: 5, Access: "rwm"},     // zero
		{Type: 'c', Major: 1, Minor: 7, Access: "rwm"},     // full
		{Type: 'c', Major: 1, Minor: 8, Access: "rwm"},     // random
		{Type: 'c', Major: 1, Minor: 9, Access: "rwm"},     // urandom
		{Type: 'c', Major: 5, Minor: 0, Access: "rwm"},     // tty
		{Type: 'c', Major: 5, Minor: 1, Access: "rwm"},     // console
		{Type: 'c', Major: 5, Minor: 2, Access: "rwm"},     // ptmx
		{Type: 'c', Major: 136, Minor: Any, Access: "rwm"}, // pts
	}
}

// ForPaths returns an "rwm" rule for each device node in paths (such as
// /dev/nvidia0, /dev/nvidiactl), in order: type 'c' for a character device,
// 'b' for a block device, with the major and minor numbers of the node's
// rdev. Symbolic links are followed. It fails, naming the path, when a path
// cannot be stat'ed or is not a device node.
func ForPaths(paths []string) ([]Rule, error) {
	rules := make([]Rule, 0, len(paths))
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return nil, fmt.Errorf("devcgroup: stat %s: %w", p, err)
		}
		var typ byte
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			typ = 'c'
		case unix.S_IFBLK:
			typ = 'b'
		default:
			return nil, fmt.Errorf("devcgroup: %s is not a device node", p)
		}
		dev := uint64(st.Rdev) // Rdev is a uint32 on some architectures
		rules = append(rules, Rule{
			Type:   typ,
			Major:  int64(unix.Major(dev)),
			Minor:  int64(unix.Minor(dev)),
			Access: "rwm",
		})
	}
	return rules, nil
}

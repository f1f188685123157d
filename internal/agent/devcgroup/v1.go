package devcgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ApplyV1 confines the cgroup v1 devices-controller directory dir (such as
// /sys/fs/cgroup/devices/gpufleet/ATTEMPT, created by the caller) to rules:
// it writes "a" to devices.deny, which denies every device and forgets the
// cgroup's earlier rules, then each rule to devices.allow, then reads
// devices.list back and fails unless it holds exactly the rules asked for
// (rules for the same type and numbers merged, as the kernel merges them;
// any type 'a' rule makes it "a *:* rwm").
//
// Call it before moving processes into dir and before creating child
// cgroups under it: the kernel refuses "a" in devices.deny of a cgroup with
// children, and a process already inside is denied every device between the
// first write and the last. A rule the parent cgroup does not allow fails
// with EPERM. Writing the files needs CAP_SYS_ADMIN. The rules stay in
// force as long as the cgroup exists; nothing has to be held open.
func ApplyV1(dir string, rules []Rule) error {
	if err := validate(rules); err != nil {
		return err
	}
	if err := writeControl(filepath.Join(dir, "devices.deny"), "a"); err != nil {
		return err
	}
	for _, r := range rules {
		if err := writeControl(filepath.Join(dir, "devices.allow"), r.String()); err != nil {
			return err
		}
	}
	listPath := filepath.Join(dir, "devices.list")
	data, err := os.ReadFile(listPath)
	if err != nil {
		return fmt.Errorf("devcgroup: read back rules: %w", err)
	}
	got := splitLines(string(data))
	want := expectedV1List(rules)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		return fmt.Errorf("devcgroup: %s holds %q, want %q", listPath, got, want)
	}
	return nil
}

// writeControl writes line to the cgroup control file path in a single
// write, as the kernel wants one rule per write.
func writeControl(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("devcgroup: %w", err)
	}
	_, werr := f.Write([]byte(line))
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("devcgroup: write %q to %s: %w", line, path, werr)
	}
	if cerr != nil {
		return fmt.Errorf("devcgroup: close %s: %w", path, cerr)
	}
	return nil
}

// splitLines returns the non-empty lines of s, trimmed.
func splitLines(s string) []string {
	var lines []string
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// expectedV1List returns, sorted, the lines devices.list should show after
// ApplyV1(dir, rules) with valid rules: one line per distinct type and
// numbers, with the union of their access.
func expectedV1List(rules []Rule) []string {
	type key struct {
		typ          byte
		major, minor int64
	}
	var order []key
	access := map[key]string{}
	for _, r := range rules {
		if r.Type == 'a' {
			return []string{Rule{Type: 'a', Major: Any, Minor: Any, Access: accessOrder}.String()}
		}
		k := key{r.Type, r.Major, r.Minor}
		if _, ok := access[k]; !ok {
			order = append(order, k)
		}
		access[k] = canonicalAccess(access[k] + r.Access)
	}
	lines := make([]string, 0, len(order))
	for _, k := range order {
		lines = append(lines, Rule{Type: k.typ, Major: k.major, Minor: k.minor, Access: access[k]}.String())
	}
	slices.Sort(lines)
	return lines
}

package gpufleet

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// versionMaxParts and versionMaxPart bound a version: no driver, toolkit or framework
// numbers itself with more than six parts or parts above a billion.
const (
	versionMaxParts = 6
	versionMaxPart  = 999_999_999
	versionMaxLen   = 128
)

// SoftwareVersion is a dotted numeric version with an optional suffix: a driver
// "550.54.15", a toolkit "12.4" or "12.4.1", a framework build
// "2.5.1+cu124" (suffix "+cu124"), a VBIOS "96.00.74.00.01". StackVersions
// compare by their numbers, part by part, a missing part counting as 0;
// the suffix is kept for what it says (a PyTorch build's CUDA) and does
// not order versions.
type SoftwareVersion struct {
	text   string // as written, trimmed
	parts  []int
	suffix string
}

// ParseSoftwareVersion reads a version: optional leading letters (a "v",
// or an InfoROM's "G"), one to six dot-separated numbers, then an optional
// suffix starting with "+", "-" or "_". It rejects anything else with an
// error naming what it read. Versions compare by their numbers alone.
func ParseSoftwareVersion(s string) (SoftwareVersion, error) {
	raw := s
	s = strings.TrimSpace(s)
	if len(s) > versionMaxLen {
		return SoftwareVersion{}, fmt.Errorf("%w: version %s: longer than %d characters", ErrInvalid, Quote(raw[:versionMaxLen]+"..."), versionMaxLen)
	}
	prefix := ""
	if i := strings.IndexFunc(s, func(r rune) bool { return r < 'A' || r > 'z' || (r > 'Z' && r < 'a') }); i > 0 {
		prefix, s = s[:i], s[i:]
		if prefix == "v" || prefix == "V" {
			prefix = ""
		}
	}
	end := strings.IndexAny(s, "+-_")
	num, suffix := s, ""
	if end >= 0 {
		num, suffix = s[:end], s[end:]
	}
	fields := strings.Split(num, ".")
	if num == "" || len(fields) > versionMaxParts {
		return SoftwareVersion{}, fmt.Errorf("%w: version %s: expected 1 to %d dot-separated numbers", ErrInvalid, Quote(raw), versionMaxParts)
	}
	v := SoftwareVersion{text: prefix + s, parts: make([]int, len(fields)), suffix: suffix}
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > versionMaxPart || f == "" || (f[0] == '+' || f[0] == '-') {
			return SoftwareVersion{}, fmt.Errorf("%w: version %s: part %q is not a number from 0 to %d", ErrInvalid, Quote(raw), f, versionMaxPart)
		}
		v.parts[i] = n
	}
	return v, nil
}

// MustSoftwareVersion parses a version known to be valid (the rules' data).
func MustSoftwareVersion(s string) SoftwareVersion {
	v, err := ParseSoftwareVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// IsZero reports whether v was never parsed.
func (v SoftwareVersion) IsZero() bool { return len(v.parts) == 0 }

// String writes the version as it was written ("535.104.05").
func (v SoftwareVersion) String() string { return v.text }

// Suffix is what follows the numbers ("+cu124"), or "".
func (v SoftwareVersion) Suffix() string { return v.suffix }

// Part is the i-th number, 0 when the version has fewer parts.
func (v SoftwareVersion) Part(i int) int {
	if i < len(v.parts) {
		return v.parts[i]
	}
	return 0
}

// Compare orders v and w by their numbers: -1, 0 or +1.
func (v SoftwareVersion) Compare(w SoftwareVersion) int {
	for i := range max(len(v.parts), len(w.parts)) {
		if c := cmp.Compare(v.Part(i), w.Part(i)); c != 0 {
			return c
		}
	}
	return 0
}

// HasPrefix reports whether v starts with the numbers of p: "550.54.15"
// has the prefix "550" and "550.54", not "55".
func (v SoftwareVersion) HasPrefix(p SoftwareVersion) bool {
	if len(p.parts) > len(v.parts) {
		return false
	}
	for i, n := range p.parts {
		if v.parts[i] != n {
			return false
		}
	}
	return true
}

// op is a constraint's comparison.
type op string

const (
	opGE     op = ">="
	opLE     op = "<="
	opGT     op = ">"
	opLT     op = "<"
	opEQ     op = "=="
	opNE     op = "!="
	opPrefix op = "" // a bare version: the same leading numbers
)

type clause struct {
	op op
	v  SoftwareVersion
}

// VersionConstraint is what a job asks of one component's version: clauses
// joined by commas, all of which must hold. A clause is a comparison
// (">=12.4", "<13", "==550.54.15", "!=560.28.03") or a bare version, which
// matches every version with the same leading numbers ("550" holds for
// 550.54.15, "2.5" for 2.5.1+cu124).
type VersionConstraint struct {
	clauses []clause
	raw     string
}

// ParseVersionConstraint reads a constraint.
func ParseVersionConstraint(s string) (VersionConstraint, error) {
	c := VersionConstraint{raw: strings.TrimSpace(s)}
	if c.raw == "" {
		return VersionConstraint{}, fmt.Errorf("%w: version constraint is empty: expected a version or >=, <=, >, <, ==, != and a version", ErrInvalid)
	}
	if len(c.raw) > versionMaxLen {
		return VersionConstraint{}, fmt.Errorf("%w: version constraint longer than %d characters", ErrInvalid, versionMaxLen)
	}
	for _, part := range strings.Split(c.raw, ",") {
		part = strings.TrimSpace(part)
		cl := clause{op: opPrefix}
		for _, o := range []op{opGE, opLE, opEQ, opNE, opGT, opLT} {
			if rest, ok := strings.CutPrefix(part, string(o)); ok {
				cl.op, part = o, strings.TrimSpace(rest)
				break
			}
		}
		if rest, ok := strings.CutPrefix(part, "="); ok && cl.op == opPrefix {
			cl.op, part = opEQ, strings.TrimSpace(rest)
		}
		v, err := ParseSoftwareVersion(part)
		if err != nil {
			return VersionConstraint{}, fmt.Errorf("version constraint %s: %w", Quote(c.raw), err)
		}
		cl.v = v
		c.clauses = append(c.clauses, cl)
	}
	return c, nil
}

// String is the constraint as written.
func (c VersionConstraint) String() string { return c.raw }

// Allows reports whether v meets every clause.
func (c VersionConstraint) Allows(v SoftwareVersion) bool {
	for _, cl := range c.clauses {
		d := v.Compare(cl.v)
		ok := false
		switch cl.op {
		case opGE:
			ok = d >= 0
		case opLE:
			ok = d <= 0
		case opGT:
			ok = d > 0
		case opLT:
			ok = d < 0
		case opEQ:
			ok = d == 0
		case opNE:
			ok = d != 0
		case opPrefix:
			ok = v.HasPrefix(cl.v)
		}
		if !ok {
			return false
		}
	}
	return true
}

// MarshalText writes the constraint as written.
func (c VersionConstraint) MarshalText() ([]byte, error) { return []byte(c.raw), nil }

// UnmarshalText parses a constraint.
func (c *VersionConstraint) UnmarshalText(b []byte) error {
	x, err := ParseVersionConstraint(string(b))
	if err != nil {
		return err
	}
	*c = x
	return nil
}

// StackComponent is one piece of a node's software and firmware stack.
type StackComponent string

// Stack components. The agent reads the driver, the CUDA version the driver
// supports, the firmware and the fabric manager from NVML and the host;
// the user-level software comes from the file an operator maintains
// (/etc/gpufleet/stack.json) or a probe command.
const (
	StackDriver        StackComponent = "driver"         // NVIDIA driver, "550.54.15"
	StackCUDA          StackComponent = "cuda"           // CUDA driver API version the driver supports, "12.4"
	StackCUDAToolkit   StackComponent = "cuda_toolkit"   // the toolkit (runtime) the node's software uses, "12.4.1"
	StackCuDNN         StackComponent = "cudnn"          // "9.1.0"
	StackNCCL          StackComponent = "nccl"           // "2.21.5"
	StackTorch         StackComponent = "torch"          // PyTorch, "2.5.1+cu124"
	StackVBIOS         StackComponent = "vbios"          // GPU VBIOS, "96.00.74.00.01"
	StackInfoROM       StackComponent = "inforom"        // InfoROM image, "G520.0200.00.05"
	StackGSP           StackComponent = "gsp"            // GSP firmware, "550.54.15"
	StackFabricManager StackComponent = "fabric_manager" // nvidia-fabricmanager, where NVSwitch is present
	StackKernel        StackComponent = "kernel"         // Linux kernel, "6.8.0-45-generic"
)

// StackComponents lists every component in a fixed order.
var StackComponents = []StackComponent{StackDriver, StackCUDA, StackCUDAToolkit, StackCuDNN, StackNCCL, StackTorch, StackVBIOS, StackInfoROM, StackGSP, StackFabricManager, StackKernel}

// ParseStackComponent reads a component name.
func ParseStackComponent(s string) (StackComponent, error) {
	c := StackComponent(strings.ToLower(strings.TrimSpace(s)))
	if slices.Contains(StackComponents, c) {
		return c, nil
	}
	names := make([]string, len(StackComponents))
	for i, x := range StackComponents {
		names[i] = string(x)
	}
	return "", fmt.Errorf("%w: stack component %s: expected one of %s", ErrInvalid, Quote(s), strings.Join(names, ", "))
}

// StackVersions is a node's stack: the version of each component it reports.
// Firmware that differs between a node's GPUs is reported once per
// distinct value by the caller (the oldest counts).
type StackVersions map[StackComponent]string

// StackRequirements is what a job asks of the stack it runs on: a constraint
// per component ("cuda": ">=12.4", "driver": ">=550", "torch": "2.5").
type StackRequirements map[StackComponent]VersionConstraint

// ParseStackRequirements reads a job's requirements from their written form,
// naming the field (field.component) of the first error.
func ParseStackRequirements(field string, in map[string]string) (StackRequirements, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := StackRequirements{}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		c, err := ParseStackComponent(k)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		con, err := ParseVersionConstraint(in[k])
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", field, c, err)
		}
		out[c] = con
	}
	return out, nil
}

// VersionsText writes versions in component order, in words for events,
// reasons and pages: "driver 550.54.15, cuda 12.4". Names that are not
// components are left out.
func VersionsText(v map[string]string) string {
	var parts []string
	for _, c := range StackComponents {
		if x, ok := v[string(c)]; ok {
			parts = append(parts, string(c)+" "+x)
		}
	}
	return strings.Join(parts, ", ")
}

// Unmet is the first requirement a node's versions do not meet, in
// words, or "" when it meets them all. A component the node does not
// report fails the requirement.
func (r StackRequirements) Unmet(v StackVersions) string {
	for _, c := range StackComponents {
		con, ok := r[c]
		if !ok {
			continue
		}
		raw, ok := v[c]
		if !ok || raw == "" {
			return fmt.Sprintf("%s %s: the node does not report its %s", c, con, c)
		}
		got, err := ParseSoftwareVersion(raw)
		if err != nil {
			return fmt.Sprintf("%s %s: the node reports %q, not a version", c, con, raw)
		}
		if !con.Allows(got) {
			return fmt.Sprintf("%s %s: the node has %s", c, con, raw)
		}
	}
	return ""
}

// And is r with the constraints of o added: a component both constrain
// must meet both.
func (r StackRequirements) And(o StackRequirements) StackRequirements {
	out := StackRequirements{}
	maps.Copy(out, r)
	for c, con := range o {
		if mine, ok := out[c]; ok {
			con = VersionConstraint{clauses: append(slices.Clone(mine.clauses), con.clauses...), raw: mine.raw + "," + con.raw}
		}
		out[c] = con
	}
	return out
}

// PinStack is a named stack's versions as requirements: every component the
// stack names must match exactly (the same numbers, as far as the stack
// gives them).
func PinStack(v StackVersions) (StackRequirements, error) {
	out := StackRequirements{}
	for c, raw := range v {
		ver, err := ParseSoftwareVersion(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c, err)
		}
		out[c] = VersionConstraint{clauses: []clause{{op: opPrefix, v: ver}}, raw: ver.String()}
	}
	return out, nil
}

// NodeStack reads a node's reported versions (Node.Versions: "driver",
// "cuda", "vbios", "gsp_firmware", and the components the agent's stack
// file adds) as its stack. Keys that are not components are left out.
// Firmware that differs between a node's GPUs arrives joined by commas
// and matches no pinned version.
func NodeStack(versions map[string]string) StackVersions {
	out := StackVersions{}
	for k, v := range versions {
		if k == "gsp_firmware" {
			k = string(StackGSP)
		}
		if c, err := ParseStackComponent(k); err == nil && v != "" {
			out[c] = v
		}
	}
	return out
}

// Stack is a named set of versions nodes run (gpufleet stacks): the driver,
// the firmware, the CUDA the driver supports, and the user-level software
// the agents read from their stack files. A stack is validated for a GPU
// model by evidence, never by declaration: nodes of that model ran it and
// passed the checks (docs/STACKS.md).
type Stack struct {
	Name     string            `json:"name"`
	Versions map[string]string `json:"versions"`
	Notes    string            `json:"notes"`
	// State is candidate until validated for some GPU model, then
	// validated; retired stacks stay for the record and match no job.
	State     string            `json:"state"`
	Validated []StackValidation `json:"validated"`
	CreatedBy string            `json:"created_by"`
	CreatedAt time.Time         `json:"created_at"`
	RetiredAt *time.Time        `json:"retired_at"`
	// Nodes is read-only: the nodes that run the stack's versions now.
	Nodes []string `json:"nodes"`
	// Incompatible is read-only: what the compatibility rules say cannot
	// work with the stack on the GPU models of the fleet, one line each.
	Incompatible []string `json:"incompatible,omitempty"`
}

// Stack states.
const (
	StackCandidate = "candidate"
	StackValidated = "validated"
	StackRetired   = "retired"
)

// StackValidation is the evidence that a stack works on one GPU model:
// the nodes that ran it, what was checked there, when and who approved.
type StackValidation struct {
	GPUModel   string    `json:"gpu_model"`
	Nodes      []string  `json:"nodes"`
	Evidence   string    `json:"evidence"`
	At         time.Time `json:"at"`
	ApprovedBy string    `json:"approved_by"`
}

// MaxStackNotes bounds a stack's notes.
const MaxStackNotes = 1000

// Validate checks a stack as a request gives it: a name, at least one
// version, each a known component with a version that parses.
func (s *Stack) Validate() error {
	if err := ValidateName("name", s.Name); err != nil {
		return err
	}
	if len(s.Versions) == 0 {
		return fmt.Errorf("%w: versions: a stack names at least one component's version", ErrInvalid)
	}
	if len(s.Versions) > len(StackComponents) {
		return fmt.Errorf("%w: versions: %d components, at most %d", ErrInvalid, len(s.Versions), len(StackComponents))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Versions)) {
		if _, err := ParseStackComponent(k); err != nil {
			return fmt.Errorf("versions: %w", err)
		}
		v := s.Versions[k]
		if err := CheckText("versions."+k, v, versionMaxLen, false); err != nil {
			return err
		}
		if strings.TrimSpace(v) != v {
			return fmt.Errorf("%w: versions.%s %s: leading or trailing space", ErrInvalid, k, Quote(v))
		}
		if _, err := ParseSoftwareVersion(v); err != nil {
			return fmt.Errorf("versions.%s: %w", k, err)
		}
	}
	return CheckText("notes", s.Notes, MaxStackNotes, true)
}

// StackVersions is the stack's versions by component.
func (s *Stack) StackVersions() StackVersions {
	out := StackVersions{}
	for k, v := range s.Versions {
		out[StackComponent(k)] = v
	}
	return out
}

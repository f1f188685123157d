package gpufleet

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Isolation is how well a mechanism keeps the work on a GPU apart from
// other work on the same GPU: hard (separate hardware), soft (a scheduler
// or a static split that a fault or a busy neighbour can still reach) or
// none. A job's requirement (resources.isolation) is hard, soft or any.
type Isolation string

// Isolation levels, strongest first. IsolationAny is a requirement only.
const (
	IsolationHard Isolation = "hard"
	IsolationSoft Isolation = "soft"
	IsolationNone Isolation = "none"
	IsolationAny  Isolation = "any"
)

// ParseIsolation reads a job's isolation requirement: hard, soft or any,
// ignoring case and surrounding space.
func ParseIsolation(s string) (Isolation, error) {
	switch v := Isolation(strings.ToLower(strings.TrimSpace(s))); v {
	case IsolationHard, IsolationSoft, IsolationAny:
		return v, nil
	}
	return "", badValue("isolation", s, "expected hard, soft or any")
}

// UnmarshalText reads a level: hard, soft, none or any (a requirement is
// checked by Resources.Validate, which refuses none); empty means unset.
func (i *Isolation) UnmarshalText(b []byte) error {
	v := Isolation(strings.ToLower(strings.TrimSpace(string(b))))
	switch v {
	case "", IsolationHard, IsolationSoft, IsolationNone, IsolationAny:
		*i = v
		return nil
	}
	return badValue("isolation", string(b), "expected hard, soft or any")
}

func (i Isolation) rank() int {
	switch i {
	case IsolationHard:
		return 2
	case IsolationSoft:
		return 1
	}
	return 0
}

// Meets reports whether a mechanism's isolation i satisfies the
// requirement req (empty or any: everything does).
func (i Isolation) Meets(req Isolation) bool { return i.rank() >= req.rank() }

// weaker returns the weaker of two levels.
func weaker(a, b Isolation) Isolation {
	if a.rank() <= b.rank() {
		return a
	}
	return b
}

// VirtKind is how a node's GPUs reach the operating system that runs the
// jobs.
type VirtKind string

// Virtualization kinds.
const (
	BareMetal   VirtKind = "bare-metal"  // the host's own GPUs
	Passthrough VirtKind = "passthrough" // whole GPUs handed to a VM (IOMMU, VFIO)
	VGPU        VirtKind = "vgpu"        // an NVIDIA vGPU: time-sliced or MIG-backed
)

// VirtualizationLabel is the node label that carries a node's
// Virtualization, detected by the agent or set with --label.
const VirtualizationLabel = "virtualization"

// Virtualization is a node's virtualization, written "bare-metal",
// "passthrough" or "vgpu:PROFILE" (the vGPU type, such as A100-4C, or
// A100-3-20C for a MIG-backed one). The zero value is bare metal.
type Virtualization struct {
	Kind    VirtKind
	Profile string // vGPU type; empty when unknown
	// JobBoundary is how the node's agent keeps jobs apart (the
	// job-isolation label): soft weakens every mechanism to soft at best;
	// empty or hard changes nothing.
	JobBoundary Isolation
}

// vgpuMIGRe matches the MIG-backed vGPU types: GPU-slices-memoryGB and a
// letter (A100-3-20C, H100-1-10C), optionally after "GRID ".
var vgpuMIGRe = regexp.MustCompile(`(?i)-[1-8]-[0-9]{1,3}[a-z]$`)

var vgpuProfileRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._+-]{0,63}$`)

// ParseVirtualization reads a node's virtualization label. Empty is bare
// metal; "vgpu" alone is a vGPU of unknown type, taken as time-sliced.
func ParseVirtualization(s string) (Virtualization, error) {
	t := strings.TrimSpace(s)
	kind, profile, _ := strings.Cut(t, ":")
	switch VirtKind(strings.ToLower(kind)) {
	case "", BareMetal:
		if profile == "" {
			return Virtualization{Kind: BareMetal}, nil
		}
	case Passthrough:
		if profile == "" {
			return Virtualization{Kind: Passthrough}, nil
		}
	case VGPU:
		if profile == "" || vgpuProfileRe.MatchString(profile) {
			return Virtualization{Kind: VGPU, Profile: profile}, nil
		}
	}
	return Virtualization{}, badValue("virtualization", s, "expected bare-metal, passthrough or vgpu:PROFILE (such as vgpu:A100-4C, or vgpu:A100-3-20C MIG-backed)")
}

// String writes v as ParseVirtualization reads it.
func (v Virtualization) String() string {
	switch {
	case v.Kind == "":
		return string(BareMetal)
	case v.Kind == VGPU && v.Profile != "":
		return string(VGPU) + ":" + v.Profile
	}
	return string(v.Kind)
}

// MIGBacked reports whether a vGPU is backed by a MIG instance (its type
// names slices and memory: A100-3-20C) rather than time-sliced.
func (v Virtualization) MIGBacked() bool { return v.Kind == VGPU && vgpuMIGRe.MatchString(v.Profile) }

// Mechanism is what a job gets on a GPU: the node's virtualization and the
// job's sharing together, with declared isolation of memory (can a
// neighbour exhaust or read it), faults (does a neighbour's fatal error
// reach it) and performance (is its share of SMs and bandwidth held for
// it), and the expected overhead against the same GPU on bare metal.
type Mechanism struct {
	Name        string    `json:"name"` // virtualization/sharing, such as bare-metal/exclusive
	Memory      Isolation `json:"memory"`
	Fault       Isolation `json:"fault"`
	Performance Isolation `json:"performance"`
	// Overhead is the expected share of throughput lost to the mechanism,
	// 0-1.
	Overhead float64 `json:"overhead"`
	// Sources are where the declared properties come from.
	Sources []string `json:"sources"`
}

// Isolation is the mechanism's isolation as a whole: hard when memory,
// faults and performance all are; soft when performance is at least soft
// (a scheduler shares the GPU out); none otherwise.
func (m Mechanism) Isolation() Isolation {
	switch {
	case m.Memory == IsolationHard && m.Fault == IsolationHard && m.Performance == IsolationHard:
		return IsolationHard
	case m.Performance.rank() >= IsolationSoft.rank():
		return IsolationSoft
	}
	return IsolationNone
}

// Meets reports whether the mechanism satisfies a job's isolation and
// overhead requirements (see Resources.Isolation and Resources.Overhead).
func (m Mechanism) Meets(req Isolation, overhead *OverheadLimit) bool {
	return m.Isolation().Meets(req) && (overhead == nil || m.Overhead <= float64(*overhead)+1e-9)
}

// Sources of the declared mechanism properties, cited in full in
// docs/ISOLATION.md.
const (
	srcMIG         = "NVIDIA MIG User Guide"
	srcPassthrough = "Walters et al., IEEE CLOUD 2014 (96-100% of bare metal)"
	srcVGPU        = "NVIDIA vGPU User Guide; VMware vSphere ML study 2018 (2-5%)"
	srcTimeSlice   = "NVIDIA k8s-device-plugin time-slicing docs; overhead assumed"
	srcJobBoundary = "the node's agent: job-isolation soft (docs/ISOLATION.md#on-the-node)"
)

// virtBase is the mechanism a node's virtualization gives a whole GPU.
func virtBase(v Virtualization) Mechanism {
	switch {
	case v.Kind == BareMetal || v.Kind == "":
		return Mechanism{Memory: IsolationHard, Fault: IsolationHard, Performance: IsolationHard}
	case v.Kind == Passthrough:
		return Mechanism{Memory: IsolationHard, Fault: IsolationHard, Performance: IsolationHard, Overhead: 0.02, Sources: []string{srcPassthrough}}
	case v.MIGBacked():
		return Mechanism{Memory: IsolationHard, Fault: IsolationHard, Performance: IsolationHard, Overhead: 0.03, Sources: []string{srcVGPU, srcMIG}}
	case v.Kind == VGPU:
		// A time-sliced vGPU: its framebuffer is the VM's alone, but a GPU
		// reset or a busy neighbour reaches every VM on the GPU.
		return Mechanism{Memory: IsolationHard, Fault: IsolationSoft, Performance: IsolationSoft, Overhead: 0.05, Sources: []string{srcVGPU}}
	}
	// An unknown kind promises nothing.
	return Mechanism{Memory: IsolationNone, Fault: IsolationNone, Performance: IsolationNone, Overhead: 1}
}

// MechanismOf is what a job sharing a GPU as s gets on a node virtualized
// as v: the weaker of the two in each respect, the overheads compounded.
func MechanismOf(v Virtualization, s Sharing) Mechanism {
	m := mechanismOf(v, s)
	if v.JobBoundary == IsolationSoft {
		// Another job on the node can open this job's GPUs or reach its
		// processes: nothing is better than soft.
		m.Name += "+soft-job-boundary"
		m.Memory, m.Fault, m.Performance = weaker(m.Memory, IsolationSoft), weaker(m.Fault, IsolationSoft), weaker(m.Performance, IsolationSoft)
		m.Sources = append(m.Sources, srcJobBoundary)
	}
	return m
}

func mechanismOf(v Virtualization, s Sharing) Mechanism {
	m := virtBase(v)
	kind := s.Kind
	if kind == "" {
		kind = Exclusive
	}
	m.Name = v.String() + "/" + string(kind)
	var share Mechanism
	switch kind {
	case MIG:
		share = Mechanism{Memory: IsolationHard, Fault: IsolationHard, Performance: IsolationHard, Sources: []string{srcMIG}}
	case TimeSlice:
		share = Mechanism{Memory: IsolationNone, Fault: IsolationNone, Performance: IsolationSoft, Overhead: 0.05, Sources: []string{srcTimeSlice}}
	default:
		return m
	}
	m.Memory, m.Fault, m.Performance = weaker(m.Memory, share.Memory), weaker(m.Fault, share.Fault), weaker(m.Performance, share.Performance)
	m.Overhead = 1 - (1-m.Overhead)*(1-share.Overhead)
	m.Sources = append(m.Sources, share.Sources...)
	return m
}

// OverheadLimit is the most expected overhead a job accepts from its
// mechanism, as a ratio (0.05). In JSON it is a number; a string such as
// "<= 5%" or "5%" is read too.
type OverheadLimit float64

// ParseOverhead reads an overhead limit: "<= 5%", "5%" or "0.05".
func ParseOverhead(s string) (OverheadLimit, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(t, "<="), "≤"))
	pct := strings.HasSuffix(t, "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(t, "%")), 64)
	if pct {
		v /= 100
	}
	if err != nil || math.IsNaN(v) || v < 0 || v >= 1 {
		return 0, badValue("overhead", s, `expected a share under 100%, such as "<= 5%" or 0.05`)
	}
	return OverheadLimit(v), nil
}

// UnmarshalJSON reads a number (a ratio, checked by Validate) or a string
// (ParseOverhead).
func (o *OverheadLimit) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		return o.UnmarshalText([]byte(s))
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return badValue("overhead", string(b), `expected a ratio such as 0.05 or a string such as "<= 5%"`)
	}
	*o = OverheadLimit(v)
	return nil
}

// UnmarshalText parses a string with ParseOverhead.
func (o *OverheadLimit) UnmarshalText(b []byte) error {
	v, err := ParseOverhead(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}

// Validate checks a limit read as a JSON number.
func (o OverheadLimit) Validate() error {
	if v := float64(o); math.IsNaN(v) || v < 0 || v >= 1 {
		return badValue("overhead", strconv.FormatFloat(v, 'g', -1, 64), "expected a ratio from 0 to under 1, such as 0.05")
	}
	return nil
}

// String writes the limit as a percentage: "<= 5%".
func (o OverheadLimit) String() string {
	return fmt.Sprintf("<= %s%%", strconv.FormatFloat(math.Round(float64(o)*1e4)/100, 'f', -1, 64))
}

// NodeVirtualization reads a node's virtualization label: bare metal when
// it has none, and a kind that promises nothing when it does not parse.
func NodeVirtualization(labels map[string]string) Virtualization {
	v, err := ParseVirtualization(labels[VirtualizationLabel])
	if err != nil {
		v = Virtualization{Kind: "unknown"}
	}
	if labels[JobIsolationLabel] == string(IsolationSoft) {
		v.JobBoundary = IsolationSoft
	}
	return v
}

// GPUMechanism is what a job holding GPU g of a node virtualized as v
// gets: a MIG instance when the GPU is in MIG mode, else the whole GPU.
// (A time share of it is MechanismOf with the job's sharing.)
func GPUMechanism(v Virtualization, g NodeGPU) Mechanism {
	if len(g.MIGInstances) > 0 {
		return MechanismOf(v, Sharing{Kind: MIG})
	}
	return MechanismOf(v, Sharing{Kind: Exclusive})
}

// Describe writes a mechanism for people: "vgpu:A100-4C/exclusive: soft
// isolation (memory hard, faults soft, performance soft), 5% overhead".
func (m Mechanism) Describe() string {
	return fmt.Sprintf("%s: %s isolation (memory %s, faults %s, performance %s), %s overhead",
		m.Name, m.Isolation(), m.Memory, m.Fault, m.Performance, strconv.FormatFloat(math.Round(m.Overhead*1000)/10, 'f', -1, 64)+"%")
}

// Short is a mechanism's isolation with its overhead when it has one:
// "hard" or "soft (5%)".
func (m Mechanism) Short() string {
	if m.Overhead <= 0 {
		return string(m.Isolation())
	}
	return fmt.Sprintf("%s (%.0f%%)", m.Isolation(), m.Overhead*100)
}

// IsolationSummary counts a node's GPUs by what whole-GPU or MIG work
// gets on them: "bare-metal: hard x6, mig hard x2" or
// "vgpu:A100-4C: soft (5%) x4".
func IsolationSummary(n Node) string {
	virt := NodeVirtualization(n.Labels)
	counts := map[string]int{}
	var order []string
	for _, g := range n.GPUs {
		k := GPUMechanism(virt, g).Short()
		if len(g.MIGInstances) > 0 {
			k = "mig " + k
		}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%s x%d", k, counts[k])
	}
	name := virt.String()
	if virt.JobBoundary == IsolationSoft {
		name += " (soft job boundary)"
	}
	if len(parts) == 0 {
		return name
	}
	return name + ": " + strings.Join(parts, ", ")
}

// MechanismTable is the declared properties of every mechanism, as the
// Markdown table docs/ISOLATION.md carries.
func MechanismTable() string {
	var b strings.Builder
	b.WriteString("| Mechanism | Isolation | Memory | Faults | Performance | Overhead | Sources |\n|---|---|---|---|---|---|---|\n")
	virts := []Virtualization{{Kind: BareMetal}, {Kind: Passthrough}, {Kind: VGPU, Profile: "A100-4C"}, {Kind: VGPU, Profile: "A100-3-20C"}}
	shares := []Sharing{{Kind: Exclusive}, {Kind: MIG}, {Kind: TimeSlice}}
	for _, v := range virts {
		for _, s := range shares {
			if v.Kind == VGPU && s.Kind == MIG {
				continue // a VM cannot partition its vGPU
			}
			m := MechanismOf(v, s)
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.1f%% | %s |\n", m.Name, m.Isolation(), m.Memory, m.Fault, m.Performance,
				m.Overhead*100, strings.Join(m.Sources, "; "))
		}
	}
	return b.String()
}

// JobIsolationLabel is the node label that says how its agent keeps jobs
// on the node apart from each other: hard (a user, PID and mount
// namespaces and a device cgroup per attempt, or containers) or soft
// (something missing: the agent's start-up log says what). A soft node
// weakens every mechanism on it to soft, so hard jobs stay off it.
const JobIsolationLabel = "job-isolation"

// HostMemoryLabel is the node label with the node's memory in bytes, as
// the agent reads it (MemTotal), for shm_size admission.
const HostMemoryLabel = "host-memory-bytes"

package gpufleet

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Launch is how a job's command runs on its node beyond the command
// itself: in an OCI image or as a bare process, which signal opens a
// stop, what of the host it sees. Job, JobRequest, the store's job spec
// and the agent's assignment embed it, so that the fields travel as one.
type Launch struct {
	// Image is an OCI image reference; empty runs the command as a process
	// on the node (docs/JOBS.md#containers).
	Image           string     `json:"image,omitempty"`
	ImagePullPolicy PullPolicy `json:"image_pull_policy,omitempty"`
	// StopSignal is the first signal of every stop (default SIGTERM); a
	// job that checkpoints on another signal asks for it, and then gets
	// SIGTERM after the grace and SIGKILL after that.
	StopSignal Signal `json:"stop_signal,omitempty"`
	// Mounts are host paths a container job sees, within what an admin
	// allows its team (Team.Mounts); read-only unless rw.
	Mounts []Mount `json:"mounts,omitempty"`
	// ShmSize is the size of a container's /dev/shm (PyTorch's DataLoader
	// workers pass tensors through it); 0 takes the agent's default.
	ShmSize Bytes `json:"shm_size,omitempty"`
	// HostNetwork runs a container in the node's network namespace, as
	// multi-node NCCL needs; a job over several nodes always gets it.
	HostNetwork bool `json:"host_network,omitempty"`
}

// Container reports whether the job runs in an image.
func (l Launch) Container() bool { return l.Image != "" }

// Limits on a launch.
const (
	// MaxImageRefLen bounds an image reference (the OCI distribution
	// spec's repository names stay well under it).
	MaxImageRefLen = 512
	// MaxMounts bounds mounts per job and allowed mounts per team.
	MaxMounts = 64
)

// Validate checks a launch on its own; mounts against a team's allowed
// paths are checked by Team.AllowsMount where the team is known.
func (l Launch) Validate() error {
	if l.Image != "" {
		if err := ValidateImageRef(l.Image); err != nil {
			return InField("image", err)
		}
	}
	if l.ImagePullPolicy != "" {
		if _, err := ParsePullPolicy(string(l.ImagePullPolicy)); err != nil {
			return InField("image_pull_policy", err)
		}
		if l.Image == "" {
			return fmt.Errorf("%w: image_pull_policy: set without an image", ErrInvalid)
		}
	}
	if l.StopSignal != "" {
		if _, err := ParseSignal(string(l.StopSignal)); err != nil {
			return InField("stop_signal", err)
		}
	}
	if len(l.Mounts) > MaxMounts {
		return fmt.Errorf("%w: mounts: %d, at most %d", ErrInvalid, len(l.Mounts), MaxMounts)
	}
	if len(l.Mounts) > 0 && l.Image == "" {
		return fmt.Errorf("%w: mounts: only a container job (image) has mounts; a process job sees the node's files as its user", ErrInvalid)
	}
	seen := map[string]bool{}
	for i, m := range l.Mounts {
		if err := m.Validate(); err != nil {
			return underField(fmt.Sprintf("mounts[%d]", i), err)
		}
		if seen[m.Target] {
			return fmt.Errorf("%w: mounts[%d]: target %s mounted twice", ErrInvalid, i, Quote(m.Target))
		}
		seen[m.Target] = true
	}
	if l.ShmSize < 0 || l.ShmSize > MaxHostMemory {
		return fmt.Errorf("%w: shm_size %d: expected 0 to %d bytes", ErrInvalid, l.ShmSize, MaxHostMemory)
	}
	if l.ShmSize > 0 && l.Image == "" {
		return fmt.Errorf("%w: shm_size: only a container job (image) has its own /dev/shm", ErrInvalid)
	}
	if l.HostNetwork && l.Image == "" {
		return fmt.Errorf("%w: host_network: only a container job (image) has a network namespace of its own", ErrInvalid)
	}
	return nil
}

// PullPolicy says when the agent pulls a job's image, as Kubernetes'
// imagePullPolicy does.
type PullPolicy string

// Pull policies.
const (
	PullAlways       PullPolicy = "always"         // pull before every attempt
	PullIfNotPresent PullPolicy = "if-not-present" // pull when the node lacks the image (default)
	PullNever        PullPolicy = "never"          // the image must be on the node
)

// ParsePullPolicy reads a pull policy: always, if-not-present or never
// (Kubernetes' Always, IfNotPresent and Never are read too).
func ParsePullPolicy(s string) (PullPolicy, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "always", "never", "if-not-present":
		return PullPolicy(t), nil
	case "ifnotpresent":
		return PullIfNotPresent, nil
	}
	return "", badValue("image_pull_policy", s, "expected always, if-not-present or never")
}

// UnmarshalText reads a policy with ParsePullPolicy; empty means unset.
func (p *PullPolicy) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*p = ""
		return nil
	}
	v, err := ParsePullPolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Or returns p, or if-not-present when p is unset.
func (p PullPolicy) Or() PullPolicy {
	if p == "" {
		return PullIfNotPresent
	}
	return p
}

// Signal is a stop signal by its name, "SIGTERM".
type Signal string

// Stop signals a job may ask for, by number (Linux, x86-64 and arm64
// alike). SIGKILL and SIGSTOP cannot be caught, so they give no grace
// and are refused.
var stopSignals = map[Signal]int{
	"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGUSR1": 10, "SIGUSR2": 12, "SIGTERM": 15,
	"SIGXCPU": 24, "SIGWINCH": 28, "SIGPWR": 30,
}

// SIGTERM is the default stop signal.
const SIGTERM Signal = "SIGTERM"

// ParseSignal reads a stop signal: its name with or without "SIG", in any
// case ("SIGUSR1", "usr1").
func ParseSignal(s string) (Signal, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(t, "SIG") {
		t = "SIG" + t
	}
	if _, ok := stopSignals[Signal(t)]; ok {
		return Signal(t), nil
	}
	if t == "SIGKILL" || t == "SIGSTOP" {
		return "", badValue("stop_signal", s, "cannot be caught, so it gives the job no grace; expected SIGTERM (default), SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT, SIGXCPU, SIGWINCH or SIGPWR")
	}
	return "", badValue("stop_signal", s, "expected SIGTERM (default), SIGINT, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT, SIGXCPU, SIGWINCH or SIGPWR")
}

// UnmarshalText reads a signal with ParseSignal; empty means unset.
func (g *Signal) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*g = ""
		return nil
	}
	v, err := ParseSignal(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// Or returns g, or SIGTERM when g is unset.
func (g Signal) Or() Signal {
	if g == "" {
		return SIGTERM
	}
	return g
}

// Number is the signal's number on Linux; 0 when g is not a stop signal.
func (g Signal) Number() int { return stopSignals[g.Or()] }

// Mount is a host path a container job sees at Target.
type Mount struct {
	Source    string `json:"source"`
	Target    string `json:"target"`
	ReadWrite bool   `json:"rw,omitempty"`
}

// ParseMount reads the flag form SOURCE[:TARGET][:ro|rw]: "/datasets",
// "/datasets:/data", "/scratch:/scratch:rw". Read-only by default.
func ParseMount(s string) (Mount, error) {
	parts := strings.Split(s, ":")
	m := Mount{}
	if n := len(parts); n > 1 && (parts[n-1] == "ro" || parts[n-1] == "rw") {
		m.ReadWrite = parts[n-1] == "rw"
		parts = parts[:n-1]
	}
	switch len(parts) {
	case 1:
		m.Source, m.Target = parts[0], parts[0]
	case 2:
		m.Source, m.Target = parts[0], parts[1]
	default:
		return Mount{}, badValue("mount", s, "expected SOURCE[:TARGET][:ro|rw], absolute paths")
	}
	if err := m.Validate(); err != nil {
		return Mount{}, err
	}
	return m, nil
}

// String writes m as ParseMount reads it.
func (m Mount) String() string {
	mode := "ro"
	if m.ReadWrite {
		mode = "rw"
	}
	return m.Source + ":" + m.Target + ":" + mode
}

// Validate checks that both paths are clean and absolute, and that the
// target is not one the engine owns.
func (m Mount) Validate() error {
	for _, p := range []struct{ field, v string }{{"source", m.Source}, {"target", m.Target}} {
		if err := CheckText(p.field, p.v, MaxPathLen, false); err != nil {
			return err
		}
		if !strings.HasPrefix(p.v, "/") || path.Clean(p.v) != p.v || strings.ContainsAny(p.v, ":,") {
			return badValue(p.field, p.v, "expected a clean absolute path without ':' or ','")
		}
	}
	for _, owned := range []string{"/", "/proc", "/sys", "/dev"} {
		if m.Target == owned || strings.HasPrefix(m.Target, owned+"/") && owned != "/" {
			return badValue("target", m.Target, "the container engine owns it; mount somewhere else")
		}
	}
	return nil
}

// MountAllow is a host path a team's container jobs may mount: the path
// and every path under it, read-only unless ReadWrite.
type MountAllow struct {
	Path      string `json:"path"`
	ReadWrite bool   `json:"rw,omitempty"`
}

// ParseMountAllow reads PATH[:ro|rw] ("/datasets", "/scratch:rw").
func ParseMountAllow(s string) (MountAllow, error) {
	p, mode, _ := strings.Cut(s, ":")
	a := MountAllow{Path: p, ReadWrite: mode == "rw"}
	if mode != "" && mode != "ro" && mode != "rw" {
		return MountAllow{}, badValue("mount", s, "expected PATH[:ro|rw]")
	}
	if err := (Mount{Source: p, Target: "/mnt"}).Validate(); err != nil {
		return MountAllow{}, InField("mount", err)
	}
	return a, nil
}

// String writes a as ParseMountAllow reads it.
func (a MountAllow) String() string {
	if a.ReadWrite {
		return a.Path + ":rw"
	}
	return a.Path + ":ro"
}

// AllowsMount says why a team allowing allowed may not mount m, or "".
func AllowsMount(allowed []MountAllow, m Mount) string {
	roOnly := false
	for _, a := range allowed {
		if m.Source != a.Path && !strings.HasPrefix(m.Source, strings.TrimSuffix(a.Path, "/")+"/") {
			continue
		}
		if !m.ReadWrite || a.ReadWrite {
			return ""
		}
		roOnly = true
	}
	if roOnly {
		return fmt.Sprintf("%s is allowed read-only for the team, not rw", m.Source)
	}
	if len(allowed) == 0 {
		return fmt.Sprintf("%s is outside the team's allowed paths (the team allows none: gpufleet teams set TEAM --allow-mount PATH)", m.Source)
	}
	paths := make([]string, len(allowed))
	for i, a := range allowed {
		paths[i] = a.String()
	}
	return fmt.Sprintf("%s is outside the team's allowed paths (%s)", m.Source, strings.Join(paths, ", "))
}

// Image references, after the OCI distribution spec's grammar:
// [DOMAIN[:PORT]/]PATH[:TAG][@DIGEST], PATH components lower-case.
var (
	imageDomainRe    = `(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?`
	imageComponentRe = `[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*`
	imageRefRe       = regexp.MustCompile(`^(?:` + imageDomainRe + `/)?` + imageComponentRe + `(?:/` + imageComponentRe + `)*` +
		`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-fA-F0-9]{32,})?$`)
)

// ValidateImageRef checks an OCI image reference: "pytorch/pytorch:2.5",
// "nvcr.io/nvidia/pytorch:24.10-py3", "localhost/train@sha256:...".
func ValidateImageRef(s string) error {
	if len(s) > MaxImageRefLen {
		return badValue("image", s, fmt.Sprintf("longer than %d bytes", MaxImageRefLen))
	}
	if !imageRefRe.MatchString(s) {
		return badValue("image", s, "expected an OCI image reference such as nvcr.io/nvidia/pytorch:24.10-py3 (lower-case repository, optional :tag and @sha256:digest)")
	}
	return nil
}

// RuntimeContainer is Resources.Runtime for a job that runs in an image.
const RuntimeContainer = "container"

// RuntimeLabel is the node label that says how its agent runs attempts:
// process, podman or docker.
const RuntimeLabel = "runtime"

// PowerCapsLabel is the node label that says whether its agent can set
// its GPUs' power limits (NVML, as root, on a board that allows it):
// "true" or "false". The server charges a capped GPU its cap only where
// it is "true" (docs/POWER.md).
const PowerCapsLabel = "power-caps"

// RunsContainers reports whether a node with these labels runs jobs with
// an image: its agent's runtime is podman or docker.
func RunsContainers(labels map[string]string) bool {
	return labels[RuntimeLabel] == "podman" || labels[RuntimeLabel] == "docker"
}

// RegistryCredential is a team's login to an image registry, set by an
// admin (teams set --registry-auth). The password never leaves the server
// but in the assignment to the node that pulls the team's image; the API,
// events, logs and the dashboard show only the registry's name.
type RegistryCredential struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// Validate checks a credential's lengths and characters.
func (c RegistryCredential) Validate(registry string) error {
	if err := ValidateRegistry(registry); err != nil {
		return err
	}
	if err := CheckText("registry_auth."+registry+".username", c.Username, MaxWordLen, false); err != nil {
		return err
	}
	if c.Username == "" || strings.Contains(c.Username, ":") {
		return fmt.Errorf("%w: registry_auth.%s.username: required, without ':'", ErrInvalid, registry)
	}
	if len(c.Password) == 0 || len(c.Password) > 4096 || strings.ContainsAny(c.Password, "\x00\n\r") {
		return fmt.Errorf("%w: registry_auth.%s.password: 1 to 4096 bytes on one line", ErrInvalid, registry)
	}
	return nil
}

var registryRe = regexp.MustCompile(`^` + imageDomainRe + `$`)

// ValidateRegistry checks a registry's host name: "nvcr.io",
// "registry.example.com:5000", "docker.io".
func ValidateRegistry(s string) error {
	if len(s) > MaxWordLen || !registryRe.MatchString(s) {
		return badValue("registry", s, "expected a registry host such as nvcr.io or registry.example.com:5000")
	}
	return nil
}

// ImageRegistry is the registry an image reference pulls from: its first
// component when that names a host (a '.', a ':' or localhost), else
// docker.io, as the engines read it.
func ImageRegistry(ref string) string {
	first, _, ok := strings.Cut(ref, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost" || strings.HasPrefix(first, "[")) {
		return first
	}
	return "docker.io"
}

// underField puts a refused value's field under prefix: "target" becomes
// "mounts[0].target".
func underField(prefix string, err error) error {
	var ve *ValueError
	if errors.As(err, &ve) {
		c := *ve
		c.Field = prefix + "." + ve.Field
		return &c
	}
	return err
}

// StopProtocol says in words what a stop sends a job with stop signal g:
// "SIGTERM, SIGKILL after the grace" or "SIGUSR1, SIGTERM after the
// grace, then SIGKILL".
func StopProtocol(g Signal) string {
	if g.Or() == SIGTERM {
		return "SIGTERM, SIGKILL after the grace"
	}
	return string(g) + ", SIGTERM after the grace, then SIGKILL"
}

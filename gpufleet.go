package gpufleet

import (
	"errors"
	"runtime/debug"
	"strings"
)

// Sentinel errors shared by every package. Wrap them with context
// (fmt.Errorf("%w: unknown gpu %q", gpufleet.ErrNotFound, id)) and test them
// with errors.Is; the API maps each to one HTTP status.
var (
	// ErrNotFound means the named object (GPU model, built-in model, job,
	// node, team) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalid means an input is malformed or out of range. The wrapping
	// message names the field and what was expected.
	ErrInvalid = errors.New("invalid")
	// ErrUnsupported means the input is well formed but describes something
	// gpufleet does not handle (an unknown model_type, say).
	ErrUnsupported = errors.New("unsupported")
	// ErrUnsatisfiable means a well-formed request that nothing in the
	// fleet could ever hold as it stands (an unknown GPU model, more GPUs
	// than the fleet has, a node selector no node matches); the message
	// names the constraint that fails.
	ErrUnsatisfiable = errors.New("unsatisfiable")
	// ErrUnavailable means this replica cannot serve the request now (not
	// the leader, a stale leadership epoch, shutting down); the caller
	// should retry, or try another server.
	ErrUnavailable = errors.New("unavailable")
)

// Version is the gpufleet release: what a release build sets with
// -ldflags "-X github.com/gpufleet/gpufleet.Version=v1.2.3", else the
// module version the Go toolchain recorded (`go install
// github.com/gpufleet/gpufleet/cmd/gpufleet@v1.2.3`, or a tagged checkout),
// else v0.0.0-dev with the commit it was built from (+COMMIT, .dirty when
// the tree had changes).
var Version = ""

// modulePath is this module's path, to find its version in build info.
const modulePath = "github.com/gpufleet/gpufleet"

func init() {
	if Version == "" {
		Version = buildVersion()
	}
}

// buildVersion reads the version from the binary's build information.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "v0.0.0-dev"
	}
	mod := &bi.Main
	if mod.Path != modulePath {
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				mod = d
			}
		}
	}
	if v := mod.Version; v != "" && v != "(devel)" && !strings.Contains(v, "+dirty") {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	v := "v0.0.0-dev"
	if rev != "" {
		v += "+" + rev[:min(12, len(rev))]
		if dirty {
			v += ".dirty"
		}
	}
	return v
}

package gpufleet

import "errors"

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

// Version is the gpufleet release. Builds may override it with
// -ldflags "-X github.com/gpufleet/gpufleet.Version=v1.2.3".
var Version = "v0.1.0-dev"

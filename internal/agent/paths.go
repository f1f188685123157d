package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// validateWorkdir checks a job's working directory: absolute, already
// clean (no "..", no "//", no trailing slash), free of control characters,
// and an existing directory.
func validateWorkdir(dir string) error {
	if dir == "" {
		return nil
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%w: workdir %q: expected an absolute path", gpufleet.ErrInvalid, dir)
	}
	if filepath.Clean(dir) != dir {
		return fmt.Errorf("%w: workdir %q: expected a clean path (no '..', '.', '//' or trailing '/')", gpufleet.ErrInvalid, dir)
	}
	for _, part := range strings.Split(dir, "/") {
		if part == ".." {
			return fmt.Errorf("%w: workdir %q: no '..' allowed", gpufleet.ErrInvalid, dir)
		}
	}
	if strings.ContainsFunc(dir, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%w: workdir %q: control characters", gpufleet.ErrInvalid, dir)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%w: workdir %s: %v", gpufleet.ErrInvalid, dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: workdir %s: not a directory", gpufleet.ErrInvalid, dir)
	}
	return nil
}

// validAttemptID keeps attempt ids usable as one path element.
func validAttemptID(id string) error {
	if id == "" || id == "." || id == ".." || len(id) > 128 || strings.ContainsAny(id, "/\\\x00") {
		return fmt.Errorf("%w: attempt id %q", gpufleet.ErrInvalid, id)
	}
	return nil
}

// validEnvName accepts POSIX-style environment variable names.
func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Package testimage builds the small OCI image the container tests and
// benchmarks run: a static busybox imported into the engine (`podman
// import` of a root file system), since no registry is reachable from the
// machines the tests run on. Tests only.
package testimage

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Ref is the image's reference.
const Ref = "localhost/gpufleet-test-busybox:1"

var (
	mu    sync.Mutex
	built = map[string]error{}
)

// Import builds Ref in engine ("podman" or "docker") once per process.
// It needs a static busybox (Debian's busybox-static: /bin/busybox).
func Import(engine string) error {
	mu.Lock()
	defer mu.Unlock()
	if err, ok := built[engine]; ok {
		return err
	}
	err := importImage(engine)
	built[engine] = err
	return err
}

func importImage(engine string) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox (static: apt-get install busybox-static): %w", err)
	}
	root, err := os.MkdirTemp("", "gpufleet-rootfs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	for _, d := range []string{"bin", "tmp", "proc", "sys", "dev", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		return err
	}
	for _, c := range []string{"sh", "ls", "cat", "sleep", "echo", "id", "grep", "tr", "kill", "head", "wc", "env", "true"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", c)); err != nil {
			return err
		}
	}
	args := []string{"import", "-", Ref}
	if engine == "podman" {
		args = append([]string{"--runtime", "runc"}, args...)
	}
	tar := exec.Command("tar", "-C", root, "-c", ".")
	imp := exec.Command(engine, args...)
	pipe, err := tar.StdoutPipe()
	if err != nil {
		return err
	}
	imp.Stdin = pipe
	var out bytes.Buffer
	imp.Stdout, imp.Stderr = &out, &out
	if err := imp.Start(); err != nil {
		return err
	}
	if err := tar.Run(); err != nil {
		return err
	}
	if err := imp.Wait(); err != nil {
		return fmt.Errorf("%s import: %w: %s", engine, err, out.String())
	}
	return nil
}

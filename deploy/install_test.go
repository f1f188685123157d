package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeInstall is the README's Install section.
func readmeInstall(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n## Install\n")
	if !ok {
		t.Fatal("README.md: no ## Install section")
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	return section
}

// TestReadmeInstallFromClone runs the README's from-a-clone install line as
// written, with GOBIN in a temporary directory, and the installed binary's
// --version.
func TestReadmeInstallFromClone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpufleet")
	}
	const line = "go install ./cmd/gpufleet"
	if !strings.Contains(readmeInstall(t), "\n"+line+"\n") {
		t.Fatalf("README.md's Install section has no line %q", line)
	}
	gobin := t.TempDir()
	cmd := exec.Command("go", strings.Fields(line)[1:]...)
	cmd.Dir = ".."
	// (go-nvml's header marks some calls deprecated; cgo would print that.)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "gpufleet"), "--version").CombinedOutput()
	if err != nil || !regexp.MustCompile(`^gpufleet v\S+ \(go[^)]+\)\n$`).Match(out) {
		t.Fatalf("gpufleet --version: %v: %q", err, out)
	}
}

// TestReadmeInstallRelease: the README's download lines name the tarballs
// and the checksum file scripts/release makes, under the GitHub release URL.
func TestReadmeInstallRelease(t *testing.T) {
	section := readmeInstall(t)
	script, err := os.ReadFile("../scripts/release")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), `name="gpufleet_${version}_linux_${arch}"`) || !strings.Contains(string(script), "SHA256SUMS") {
		t.Fatal("scripts/release no longer names its tarballs gpufleet_VERSION_linux_ARCH.tar.gz with SHA256SUMS")
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`https://github\.com/gpufleet/gpufleet/releases/download/\$\{?VERSION\}?/gpufleet_\$\{?VERSION\}?_linux_\$\{?ARCH\}?\.tar\.gz`),
		regexp.MustCompile(`https://github\.com/gpufleet/gpufleet/releases/download/\$\{?VERSION\}?/SHA256SUMS`),
		regexp.MustCompile(`sha256sum -c`),
		regexp.MustCompile(`go install github\.com/gpufleet/gpufleet/cmd/gpufleet@latest`),
		regexp.MustCompile(`gpufleet --version`),
	} {
		if !want.MatchString(section) {
			t.Errorf("README.md's Install section lacks %s", want)
		}
	}
}

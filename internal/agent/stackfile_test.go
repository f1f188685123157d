package agent

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
)

// TestParseStackFile reads operators' stack files: components and
// versions checked, the GPU-read components refused, the error naming
// what is wrong.
func TestParseStackFile(t *testing.T) {
	got, err := parseStackFile([]byte(`{"cuda_toolkit": "12.4.1", "torch": "2.5.1+cu124", "nccl": "2.21.5", "fabric_manager": "550.54.15"}`))
	if err != nil || len(got) != 4 || got["torch"] != "2.5.1+cu124" {
		t.Fatalf("parseStackFile = %v, %v", got, err)
	}
	for in, want := range map[string]string{
		`[1, 2]`:                     "expected a JSON object",
		`{"pytorch": "2.5"}`:         `stack component "pytorch"`,
		`{"driver": "550.54.15"}`:    "driver is read from the GPUs",
		`{"nccl": "two.twenty-one"}`: "stack file: nccl: invalid: version",
		`{"torch": 2.5}`:             "expected a JSON object",
	} {
		_, err := parseStackFile([]byte(in))
		if !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("parseStackFile(%s) = %v; want an invalid-input error containing %q", in, err, want)
		}
	}
}

// FuzzParseStackFile: any bytes are either a checked map or an
// invalid-input error.
func FuzzParseStackFile(f *testing.F) {
	f.Add([]byte(`{"torch": "2.5.1+cu124"}`))
	f.Add([]byte(`{"kernel": "6.8.0-45-generic", "nccl": ""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseStackFile(data)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("%v is not an invalid-input error", err)
			}
			return
		}
		for k, v := range m {
			if _, err := gpufleet.ParseSoftwareVersion(v); err != nil {
				t.Fatalf("%s %q passed but does not parse", k, v)
			}
		}
	})
}

// TestSoftwareVersions reads the stack from the file, or from the probe
// when one is set; a probe that fails or prints nonsense leaves the
// software out and the node still registers.
func TestSoftwareVersions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "stack.json")
	if err := os.WriteFile(file, []byte(`{"torch": "2.5.1+cu124"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		cfg  Config
		want string // torch's version, "" when none
	}{
		"the file":                {Config{StackFile: file}, "2.5.1+cu124"},
		"an absent file":          {Config{StackFile: file + ".nope"}, ""},
		"the probe over the file": {Config{StackFile: file, StackProbe: `echo '{"torch": "2.7.0+cu128"}'`}, "2.7.0+cu128"},
		"a failing probe":         {Config{StackProbe: "exit 3"}, ""},
		"a probe printing text":   {Config{StackProbe: "echo torch 2.5"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			a := &Agent{cfg: tc.cfg, log: slog.New(slog.DiscardHandler)}
			if got := a.software()["torch"]; got != tc.want {
				t.Errorf("torch %q, want %q", got, tc.want)
			}
		})
	}
}

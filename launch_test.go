package gpufleet

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]Signal{"SIGTERM": "SIGTERM", "usr1": "SIGUSR1", " SigInt ": "SIGINT", "USR2": "SIGUSR2", "sigpwr": "SIGPWR"} {
		got, err := ParseSignal(in)
		if err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{"SIGKILL": "cannot be caught", "stop": "cannot be caught", "SIGBOGUS": "expected SIGTERM", "": "expected", "15": "expected"} {
		if _, err := ParseSignal(in); err == nil || !strings.Contains(err.Error(), msg) || !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseSignal(%q) = %v, want an invalid error with %q", in, err, msg)
		}
	}
	if Signal("").Or() != SIGTERM || Signal("").Number() != 15 || Signal("SIGUSR1").Number() != 10 {
		t.Error("the default stop signal is SIGTERM (15)")
	}
}

func TestParsePullPolicy(t *testing.T) {
	for in, want := range map[string]PullPolicy{"always": PullAlways, "IfNotPresent": PullIfNotPresent, "if-not-present": PullIfNotPresent, "Never": PullNever} {
		if got, err := ParsePullPolicy(in); err != nil || got != want {
			t.Errorf("ParsePullPolicy(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParsePullPolicy("sometimes"); err == nil {
		t.Error("sometimes: want an error")
	}
	if PullPolicy("").Or() != PullIfNotPresent {
		t.Error("the default is if-not-present")
	}
}

func TestValidateImageRef(t *testing.T) {
	good := []string{"busybox", "busybox:1.36", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "nvcr.io/nvidia/pytorch:24.10-py3",
		"localhost/gpufleet-e2e-busybox:1", "registry.example.com:5000/team/train@sha256:" + strings.Repeat("a", 64),
		"ghcr.io/org/img:tag@sha256:" + strings.Repeat("0", 64), "[::1]:5000/img"}
	for _, s := range good {
		if err := ValidateImageRef(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	bad := []string{"", "Busybox", "busybox:", "a b", "busybox:tag:more", "-leading", "img@sha256:short", "img:" + strings.Repeat("t", 129),
		strings.Repeat("a/", 300) + "b", "img\n"}
	for _, s := range bad {
		if err := ValidateImageRef(s); err == nil {
			t.Errorf("%q: want an error", s)
		}
	}
}

func TestImageRegistry(t *testing.T) {
	for ref, want := range map[string]string{"busybox": "docker.io", "pytorch/pytorch:2.5": "docker.io", "nvcr.io/nvidia/pytorch:24.10-py3": "nvcr.io",
		"localhost/x:1": "localhost", "registry.example.com:5000/a/b": "registry.example.com:5000", "host:5000/a": "host:5000"} {
		if got := ImageRegistry(ref); got != want {
			t.Errorf("ImageRegistry(%q) = %q, want %q", ref, got, want)
		}
	}
}

func TestParseMount(t *testing.T) {
	cases := map[string]Mount{
		"/datasets":              {Source: "/datasets", Target: "/datasets"},
		"/datasets:/data":        {Source: "/datasets", Target: "/data"},
		"/scratch:/scratch:rw":   {Source: "/scratch", Target: "/scratch", ReadWrite: true},
		"/models:ro":             {Source: "/models", Target: "/models"},
		"/srv/models:/m:ro":      {Source: "/srv/models", Target: "/m"},
		"/devices-of-mine:/dev2": {Source: "/devices-of-mine", Target: "/dev2"},
	}
	for in, want := range cases {
		got, err := ParseMount(in)
		if err != nil || got != want {
			t.Errorf("ParseMount(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if back, err := ParseMount(got.String()); err != nil || back != got {
			t.Errorf("%q does not read back: %+v, %v", got.String(), back, err)
		}
	}
	for _, in := range []string{"data", "/a:/b:/c", "/a/../b", "/a:/proc", "/a:/dev/shm", "/a:/sys/x", "/a:/", "/a,b", "/a:rx"} {
		if _, err := ParseMount(in); err == nil {
			t.Errorf("ParseMount(%q): want an error", in)
		}
	}
}

func TestAllowsMount(t *testing.T) {
	allowed := []MountAllow{{Path: "/datasets"}, {Path: "/scratch/team-a", ReadWrite: true}}
	cases := []struct {
		m    Mount
		want string // "" allowed, else in the reason
	}{
		{Mount{Source: "/datasets", Target: "/data"}, ""},
		{Mount{Source: "/datasets/imagenet", Target: "/data"}, ""},
		{Mount{Source: "/datasets", Target: "/data", ReadWrite: true}, "read-only"},
		{Mount{Source: "/scratch/team-a/run1", Target: "/out", ReadWrite: true}, ""},
		{Mount{Source: "/scratch/team-b", Target: "/out"}, "outside the team's allowed paths (/datasets:ro, /scratch/team-a:rw)"},
		{Mount{Source: "/datasets-private", Target: "/d"}, "outside"},
		{Mount{Source: "/etc", Target: "/etc"}, "outside"},
	}
	for _, tc := range cases {
		got := AllowsMount(allowed, tc.m)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("AllowsMount(%+v) = %q, want %q", tc.m, got, tc.want)
		}
	}
	if got := AllowsMount(nil, Mount{Source: "/x", Target: "/x"}); !strings.Contains(got, "allows none") {
		t.Errorf("no allowed paths: %q", got)
	}
}

func TestLaunchValidate(t *testing.T) {
	cases := map[string]struct {
		l    Launch
		want string
	}{
		"empty":                {Launch{}, ""},
		"image":                {Launch{Image: "busybox", ImagePullPolicy: PullNever, StopSignal: "SIGUSR1", ShmSize: 1 << 30, HostNetwork: true, Mounts: []Mount{{Source: "/d", Target: "/d"}}}, ""},
		"policy without image": {Launch{ImagePullPolicy: PullAlways}, "image_pull_policy: set without an image"},
		"mount twice":          {Launch{Image: "busybox", Mounts: []Mount{{Source: "/a", Target: "/d"}, {Source: "/b", Target: "/d"}}}, "mounted twice"},
		"host network alone":   {Launch{HostNetwork: true}, "host_network"},
		"negative shm":         {Launch{Image: "busybox", ShmSize: -1}, "shm_size -1"},
		"bad mount target":     {Launch{Image: "busybox", Mounts: []Mount{{Source: "/a", Target: "rel"}}}, "mounts[0].target"},
	}
	for name, tc := range cases {
		err := tc.l.Validate()
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

func TestRegistryCredential(t *testing.T) {
	if err := (RegistryCredential{Username: "u", Password: "p"}).Validate("nvcr.io"); err != nil {
		t.Error(err)
	}
	for name, c := range map[string]RegistryCredential{"no user": {Password: "p"}, "colon": {Username: "a:b", Password: "p"},
		"no password": {Username: "u"}, "newline": {Username: "u", Password: "a\nb"}} {
		if err := c.Validate("nvcr.io"); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
	if err := (RegistryCredential{Username: "u", Password: "p"}).Validate("not a host"); err == nil {
		t.Error("a registry that is no host name: want an error")
	}
}

// FuzzLaunchParsers checks that the launch vocabulary's parsers never
// panic, refuse with ErrInvalid, and that what they accept reads back.
func FuzzLaunchParsers(f *testing.F) {
	for _, s := range []string{"SIGUSR1", "/a:/b:rw", "nvcr.io/nvidia/pytorch:24.10-py3", "always", "/x:ro", "", ":::", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if g, err := ParseSignal(s); err == nil {
			if back, err := ParseSignal(string(g)); err != nil || back != g {
				t.Fatalf("signal %q reads back as %q, %v", g, back, err)
			}
		} else if !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParseSignal(%q): %v is not ErrInvalid", s, err)
		}
		if m, err := ParseMount(s); err == nil {
			if back, err := ParseMount(m.String()); err != nil || back != m {
				t.Fatalf("mount %+v reads back as %+v, %v", m, back, err)
			}
		} else if !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParseMount(%q): %v is not ErrInvalid", s, err)
		}
		if err := ValidateImageRef(s); err == nil {
			_ = ImageRegistry(s)
		} else if !errors.Is(err, ErrInvalid) {
			t.Fatalf("ValidateImageRef(%q): %v is not ErrInvalid", s, err)
		}
		if _, err := ParsePullPolicy(s); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatal(err)
		}
		if _, err := ParseMountAllow(s); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatal(err)
		}
	})
}

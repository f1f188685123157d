package gpufleet_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
)

func TestParseVersion(t *testing.T) {
	tests := map[string]struct {
		in, want, suffix string
		wantErr          bool
	}{
		"driver":                  {in: "550.54.15", want: "550.54.15"},
		"toolkit":                 {in: "12.4", want: "12.4"},
		"leading v and spaces":    {in: " v2.5.1 ", want: "2.5.1"},
		"pytorch build":           {in: "2.5.1+cu124", want: "2.5.1+cu124", suffix: "+cu124"},
		"kernel":                  {in: "6.8.0-45-generic", want: "6.8.0-45-generic", suffix: "-45-generic"},
		"vbios with zeros":        {in: "96.00.74.00.01", want: "96.00.74.00.01"},
		"inforom":                 {in: "G520.0200.00.05", want: "G520.0200.00.05"},
		"empty":                   {in: "", wantErr: true},
		"letters":                 {in: "abc", wantErr: true},
		"empty part":              {in: "12..4", wantErr: true},
		"too many parts":          {in: "1.2.3.4.5.6.7", wantErr: true},
		"a part beyond a billion": {in: "12.9999999999", wantErr: true},
		"only a suffix":           {in: "+cu124", wantErr: true},
		"negative":                {in: "-1", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			v, err := gpufleet.ParseSoftwareVersion(tc.in)
			if tc.wantErr {
				if !errors.Is(err, gpufleet.ErrInvalid) {
					t.Fatalf("ParseVersion(%q) = %v, %v; want an invalid-input error", tc.in, v, err)
				}
				return
			}
			if err != nil || v.String() != tc.want || v.Suffix() != tc.suffix {
				t.Fatalf("ParseVersion(%q) = %q (suffix %q), %v; want %q (suffix %q)", tc.in, v, v.Suffix(), err, tc.want, tc.suffix)
			}
		})
	}
}

func TestConstraintAllows(t *testing.T) {
	tests := map[string]struct {
		constraint string
		yes, no    []string
	}{
		"at least":         {">=12.4", []string{"12.4", "12.4.1", "13.0"}, []string{"12.3.2", "11.8"}},
		"below":            {"<13", []string{"12.9.1"}, []string{"13", "13.0.1"}},
		"a range":          {">=550, <560", []string{"550.54.15", "555.42.02"}, []string{"545.23.08", "560.28.03"}},
		"a bare prefix":    {"550", []string{"550", "550.54.15"}, []string{"55", "555.42.02", "5500"}},
		"a framework line": {"2.5", []string{"2.5.1+cu124", "2.5.0"}, []string{"2.6.0", "2.50"}},
		"exactly":          {"==550.54.15", []string{"550.54.15"}, []string{"550.54.14", "550.54.16"}},
		"single equals":    {"=12.4", []string{"12.4.0"}, []string{"12.4.1"}},
		"not":              {"!=2.19.3", []string{"2.19.4", "2.18"}, []string{"2.19.3"}},
		"above":            {">2.18.1", []string{"2.18.3"}, []string{"2.18.1", "2.18"}},
		"at most":          {"<=535", []string{"535", "530.30.02"}, []string{"535.104.05"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := gpufleet.ParseVersionConstraint(tc.constraint)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range tc.yes {
				if !c.Allows(gpufleet.MustSoftwareVersion(v)) {
					t.Errorf("%s does not allow %s", tc.constraint, v)
				}
			}
			for _, v := range tc.no {
				if c.Allows(gpufleet.MustSoftwareVersion(v)) {
					t.Errorf("%s allows %s", tc.constraint, v)
				}
			}
		})
	}
	for _, bad := range []string{"", ">=", "~>12", ">=12.4,", "> = 12", "12.4 || 13", strings.Repeat("1.", 100)} {
		if _, err := gpufleet.ParseVersionConstraint(bad); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParseConstraint(%q) = %v; want an invalid-input error", bad, err)
		}
	}
}

func TestRequirements(t *testing.T) {
	r, err := gpufleet.ParseStackRequirements("resources.requires", map[string]string{"cuda": ">=12.4", "driver": ">=550", "torch": "2.5"})
	if err != nil {
		t.Fatal(err)
	}
	node := gpufleet.StackVersions{gpufleet.StackDriver: "550.54.15", gpufleet.StackCUDA: "12.4", gpufleet.StackTorch: "2.5.1+cu124"}
	if why := r.Unmet(node); why != "" {
		t.Errorf("unmet %q on a node that meets every requirement", why)
	}
	tests := map[string]struct {
		v    gpufleet.StackVersions
		want string
	}{
		"an old driver":      {gpufleet.StackVersions{gpufleet.StackDriver: "535.104.05", gpufleet.StackCUDA: "12.4", gpufleet.StackTorch: "2.5.1"}, "driver >=550: the node has 535.104.05"},
		"no torch reported":  {gpufleet.StackVersions{gpufleet.StackDriver: "550.54.15", gpufleet.StackCUDA: "12.4"}, "torch 2.5: the node does not report its torch"},
		"cuda too old":       {gpufleet.StackVersions{gpufleet.StackDriver: "550.54.15", gpufleet.StackCUDA: "12.2", gpufleet.StackTorch: "2.5.1"}, "cuda >=12.4: the node has 12.2"},
		"unreadable version": {gpufleet.StackVersions{gpufleet.StackDriver: "five-fifty", gpufleet.StackCUDA: "12.4", gpufleet.StackTorch: "2.5.1"}, `driver >=550: the node reports "five-fifty", not a version`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := r.Unmet(tc.v); got != tc.want {
				t.Errorf("Unmet = %q, want %q", got, tc.want)
			}
		})
	}
	for in, field := range map[string]string{"gpu_driver": "resources.requires: ", "cuda": "resources.requires.cuda: "} {
		_, err := gpufleet.ParseStackRequirements("resources.requires", map[string]string{in: ">>12"})
		if !errors.Is(err, gpufleet.ErrInvalid) || !strings.HasPrefix(err.Error(), field) {
			t.Errorf("requirement %s: %v; want an invalid-input error starting %q", in, err, field)
		}
	}
	pin, err := gpufleet.PinStack(gpufleet.StackVersions{gpufleet.StackDriver: "550.54.15", gpufleet.StackCUDA: "12.4"})
	if err != nil {
		t.Fatal(err)
	}
	if why := pin.Unmet(gpufleet.StackVersions{gpufleet.StackDriver: "550.54.14", gpufleet.StackCUDA: "12.4"}); why != "driver 550.54.15: the node has 550.54.14" {
		t.Errorf("a pinned stack on another driver: %q", why)
	}
	// A job's own constraint and its stack's pin on one component both hold.
	both := gpufleet.StackRequirements{gpufleet.StackDriver: mustConstraint(t, "<550.54.15")}.And(pin)
	if why := both.Unmet(gpufleet.StackVersions{gpufleet.StackDriver: "550.54.15", gpufleet.StackCUDA: "12.4"}); why != "driver <550.54.15,550.54.15: the node has 550.54.15" {
		t.Errorf("a stack and a constraint that exclude each other: %q", why)
	}
	other := gpufleet.StackRequirements{gpufleet.StackTorch: mustConstraint(t, "2.5")}.And(pin)
	if why := other.Unmet(gpufleet.StackVersions{gpufleet.StackDriver: "550.54.15", gpufleet.StackCUDA: "12.4", gpufleet.StackTorch: "2.5.1+cu124"}); why != "" {
		t.Errorf("a stack and another component's constraint: %q", why)
	}
}

func mustConstraint(t *testing.T, s string) gpufleet.VersionConstraint {
	t.Helper()
	c, err := gpufleet.ParseVersionConstraint(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// FuzzParseVersion checks that any text either parses to a version whose
// written form parses back to the same numbers, or is refused as invalid.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"550.54.15", "2.5.1+cu124", "6.8.0-45-generic", "v12.4", "", "1..2", "+", "9999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := gpufleet.ParseSoftwareVersion(s)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("ParseVersion(%q): %v is not an invalid-input error", s, err)
			}
			return
		}
		w, err := gpufleet.ParseSoftwareVersion(v.String())
		if err != nil || w.Compare(v) != 0 || w.Suffix() != v.Suffix() {
			t.Fatalf("ParseVersion(%q) = %q, which reads back as %q, %v", s, v, w, err)
		}
	})
}

// FuzzParseConstraint checks that any text either parses to a constraint
// that answers for any version without panicking, or is refused.
func FuzzParseConstraint(f *testing.F) {
	for _, s := range []string{">=12.4", ">=550,<560", "2.5", "!=2.19.3", "==", ",", ">=1.2.3.4.5.6"} {
		f.Add(s, "12.4.1")
	}
	f.Fuzz(func(t *testing.T, s, ver string) {
		c, err := gpufleet.ParseVersionConstraint(s)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("ParseConstraint(%q): %v is not an invalid-input error", s, err)
			}
			return
		}
		if v, err := gpufleet.ParseSoftwareVersion(ver); err == nil {
			c.Allows(v)
		}
	})
}

func TestVersionsText(t *testing.T) {
	for _, tc := range []struct {
		in   map[string]string
		want string
	}{
		{nil, ""},
		{map[string]string{"cuda": "12.4", "driver": "550.54.15"}, "driver 550.54.15, cuda 12.4"},
		{map[string]string{"kernel": "6.8", "torch": "2.4.0", "not-a-component": "x"}, "torch 2.4.0, kernel 6.8"},
	} {
		if got := gpufleet.VersionsText(tc.in); got != tc.want {
			t.Errorf("VersionsText(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

package devcgroup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRuleString(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
		want string
	}{
		{"one char device", Rule{Type: 'c', Major: 195, Minor: 0, Access: "rwm"}, "c 195:0 rwm"},
		{"any minor", Rule{Type: 'c', Major: 136, Minor: Any, Access: "rw"}, "c 136:* rw"},
		{"all devices", Rule{Type: 'a', Major: Any, Minor: Any, Access: "rwm"}, "a *:* rwm"},
		{"block, mknod only", Rule{Type: 'b', Major: Any, Minor: Any, Access: "m"}, "b *:* m"},
		{"access in kernel order", Rule{Type: 'c', Major: 1, Minor: 3, Access: "mwr"}, "c 1:3 rwm"},
		{"repeated letters once", Rule{Type: 'c', Major: 1, Minor: 3, Access: "rr"}, "c 1:3 r"},
		{"invalid access kept", Rule{Type: 'c', Major: 1, Minor: 3, Access: "rx"}, "c 1:3 rx"},
		{"large numbers", Rule{Type: 'c', Major: 4095, Minor: 1048575, Access: "r"}, "c 4095:1048575 r"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.String(); got != tt.want {
				t.Errorf("%#v.String() = %q, want %q", tt.rule, got, tt.want)
			}
		})
	}
}

func TestRuleValidate(t *testing.T) {
	tests := []struct {
		name    string
		rule    Rule
		wantErr string // "" for valid
	}{
		{"char rule", Rule{Type: 'c', Major: 195, Minor: 0, Access: "rwm"}, ""},
		{"block wildcard", Rule{Type: 'b', Major: Any, Minor: Any, Access: "m"}, ""},
		{"all", Rule{Type: 'a', Major: Any, Minor: Any, Access: "mrw"}, ""},
		{"max numbers", Rule{Type: 'c', Major: 1<<32 - 1, Minor: 1<<32 - 1, Access: "r"}, ""},
		{"unknown type", Rule{Type: 'x', Major: 1, Minor: 3, Access: "r"}, "is not 'a', 'b' or 'c'"},
		{"zero type", Rule{Major: 1, Minor: 3, Access: "r"}, "is not 'a', 'b' or 'c'"},
		{"all with numbers", Rule{Type: 'a', Major: 1, Minor: Any, Access: "rwm"}, `must be "a *:* rwm"`},
		{"all with partial access", Rule{Type: 'a', Major: Any, Minor: Any, Access: "rw"}, `must be "a *:* rwm"`},
		{"negative major", Rule{Type: 'c', Major: -2, Minor: 0, Access: "r"}, "out of range"},
		{"huge minor", Rule{Type: 'c', Major: 1, Minor: 1 << 32, Access: "r"}, "out of range"},
		{"empty access", Rule{Type: 'c', Major: 1, Minor: 3}, "access is empty"},
		{"bad access letter", Rule{Type: 'c', Major: 1, Minor: 3, Access: "rx"}, `has 'x'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.rule.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestBase(t *testing.T) {
	var got []string
	for _, r := range Base() {
		if err := r.Validate(); err != nil {
			t.Errorf("Base() rule: %v", err)
		}
		got = append(got, r.String())
	}
	want := []string{
		"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
		"c 5:0 rwm", "c 5:1 rwm", "c 5:2 rwm", "c 136:* rwm",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Base() mismatch (-want +got):\n%s", diff)
	}
	b := Base()
	b[0].Access = "r"
	if Base()[0].Access != "rwm" {
		t.Error("Base() returns a shared slice")
	}
}

func TestForPaths(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "null-link")
	if err := os.Symlink("/dev/null", link); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name    string
		paths   []string
		want    []string
		wantErr string // a substring of the error; "" for none
	}{
		{"null", []string{"/dev/null"}, []string{"c 1:3 rwm"}, ""},
		{"several in order", []string{"/dev/zero", "/dev/null"}, []string{"c 1:5 rwm", "c 1:3 rwm"}, ""},
		{"symlink followed", []string{link}, []string{"c 1:3 rwm"}, ""},
		{"none", nil, nil, ""},
		{"regular file", []string{"/dev/null", regular}, nil, regular + " is not a device node"},
		{"directory", []string{dir}, nil, dir + " is not a device node"},
		{"missing", []string{missing}, nil, "stat " + missing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules, err := ForPaths(tt.paths)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ForPaths(%q) = %v, %v; want an error containing %q", tt.paths, rules, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ForPaths(%q): %v", tt.paths, err)
			}
			var got []string
			for _, r := range rules {
				got = append(got, r.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ForPaths(%q) mismatch (-want +got):\n%s", tt.paths, diff)
			}
		})
	}
}

func TestExpectedV1List(t *testing.T) {
	c := func(major, minor int64, access string) Rule {
		return Rule{Type: 'c', Major: major, Minor: minor, Access: access}
	}
	tests := []struct {
		name  string
		rules []Rule
		want  []string
	}{
		{"none", nil, []string{}},
		{"sorted", []Rule{c(5, 0, "rwm"), c(1, 3, "rwm")}, []string{"c 1:3 rwm", "c 5:0 rwm"}},
		{"same device merged", []Rule{c(1, 3, "r"), c(1, 3, "m"), c(1, 3, "r")}, []string{"c 1:3 rm"}},
		{"wildcard kept apart", []Rule{c(136, Any, "rw"), c(136, 0, "m")}, []string{"c 136:* rw", "c 136:0 m"}},
		{"all wins", []Rule{c(1, 3, "r"), {Type: 'a', Major: Any, Minor: Any, Access: "rwm"}}, []string{"a *:* rwm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := expectedV1List(tt.rules)
			if !slices.Equal(got, tt.want) {
				t.Errorf("expectedV1List() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestApplyV1RejectsInvalidRules(t *testing.T) {
	dir := t.TempDir() // never written: validation comes first
	err := ApplyV1(dir, []Rule{{Type: 'c', Major: 1, Minor: 3, Access: "rwx"}})
	if err == nil || !strings.Contains(err.Error(), "not one of r, w, m") {
		t.Errorf("ApplyV1 with an invalid rule = %v, want a validation error", err)
	}
	if _, err := AttachV2(dir, []Rule{{Type: 'q', Access: "r"}}); err == nil {
		t.Error("AttachV2 with an invalid rule succeeded")
	}
}

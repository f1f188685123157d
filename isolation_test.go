package gpufleet

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated table of docs/ISOLATION.md")

func TestMechanismOf(t *testing.T) {
	tests := []struct {
		virt, sharing string
		iso           Isolation
		overhead      float64
	}{
		{"bare-metal", "exclusive", IsolationHard, 0},
		{"", "mig:1g.10gb", IsolationHard, 0},
		{"bare-metal", "timeslice:0.5", IsolationSoft, 0.05},
		{"passthrough", "exclusive", IsolationHard, 0.02},
		{"passthrough", "timeslice:0.25", IsolationSoft, 1 - 0.98*0.95},
		{"vgpu:A100-4C", "exclusive", IsolationSoft, 0.05},
		{"vgpu", "exclusive", IsolationSoft, 0.05},
		{"vgpu:A100-3-20C", "exclusive", IsolationHard, 0.03},
		{"vgpu:GRID A100-1-5C", "exclusive", IsolationHard, 0.03},
		{"vgpu:A100-4C", "timeslice:0.5", IsolationSoft, 1 - 0.95*0.95},
	}
	for _, tc := range tests {
		v, err := ParseVirtualization(tc.virt)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ParseSharing(tc.sharing)
		if err != nil {
			t.Fatal(err)
		}
		m := MechanismOf(v, s)
		if m.Isolation() != tc.iso || m.Overhead < tc.overhead-1e-9 || m.Overhead > tc.overhead+1e-9 {
			t.Errorf("%s with %s: %s isolation, %.4f overhead; want %s, %.4f", tc.virt, tc.sharing, m.Isolation(), m.Overhead, tc.iso, tc.overhead)
		}
		if m.Overhead > 0 && len(m.Sources) == 0 {
			t.Errorf("%s: an overhead without a source", m.Name)
		}
		// Sharing never makes a mechanism stronger than the whole GPU.
		whole := MechanismOf(v, Sharing{})
		if m.Isolation().rank() > whole.Isolation().rank() && s.Kind != MIG {
			t.Errorf("%s is stronger than %s", m.Name, whole.Name)
		}
	}
}

// TestMechanismRoundTrip: a mechanism read back from JSON (a job's
// attempts, by a client) is the one written, weakest levels included.
func TestMechanismRoundTrip(t *testing.T) {
	m := MechanismOf(Virtualization{Kind: VGPU, Profile: "A100-4C"}, Sharing{Kind: TimeSlice, Fraction: 0.5})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back Mechanism
	if err := json.Unmarshal(b, &back); err != nil || back.Name != m.Name || back.Memory != IsolationNone || back.Overhead != m.Overhead {
		t.Errorf("read back %+v, %v; wrote %s", back, err, b)
	}
}

func TestParseVirtualization(t *testing.T) {
	for _, bad := range []string{"vm", "bare-metal:x", "passthrough:A100", "vgpu:", "vgpu:-x", "vgpu:" + strings.Repeat("a", 70)} {
		if bad == "vgpu:" {
			continue // "vgpu:" is vgpu of unknown type
		}
		if _, err := ParseVirtualization(bad); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "virtualization") {
			t.Errorf("ParseVirtualization(%q) = %v, want an error naming virtualization", bad, err)
		}
	}
	for in, want := range map[string]string{"": "bare-metal", "Bare-Metal": "bare-metal", "passthrough": "passthrough", "vgpu:A100-4C": "vgpu:A100-4C", "vgpu": "vgpu"} {
		v, err := ParseVirtualization(in)
		if err != nil || v.String() != want {
			t.Errorf("ParseVirtualization(%q) = %v, %v; want %s", in, v, err, want)
		}
	}
}

func TestOverheadAndIsolationInRequests(t *testing.T) {
	var r Resources
	if err := json.Unmarshal([]byte(`{"gpus": 1, "isolation": "hard", "overhead": "<= 5%"}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Isolation != IsolationHard || r.Overhead == nil || *r.Overhead != 0.05 {
		t.Fatalf("read %+v", r)
	}
	b, _ := json.Marshal(r)
	if !strings.Contains(string(b), `"overhead":0.05`) || !strings.Contains(string(b), `"isolation":"hard"`) {
		t.Errorf("written as %s", b)
	}
	tests := []struct {
		body, field string
	}{
		{`{"gpus": 1, "isolation": "strong"}`, "isolation"},
		{`{"gpus": 1, "isolation": "none"}`, "resources.isolation"},
		{`{"gpus": 1, "overhead": "lots"}`, "overhead"},
		{`{"gpus": 1, "overhead": 1.5}`, "resources.overhead"},
		{`{"gpus": 1, "overhead": -0.1}`, "resources.overhead"},
		{`{"gpus": 1, "isolation": "hard", "sharing": "timeslice:0.5"}`, "resources.isolation"},
		{`{"gpus": 1, "overhead": 0.01, "sharing": "timeslice:0.5"}`, "resources.overhead"},
	}
	for _, tc := range tests {
		var r Resources
		err := json.Unmarshal([]byte(tc.body), &r)
		if err == nil {
			err = r.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error naming %s", tc.body, err, tc.field)
		}
	}
	for _, ok := range []string{`{"gpus": 1, "isolation": "soft", "sharing": "timeslice:0.5"}`, `{"gpus": 2, "isolation": "hard", "sharing": "mig:1g.10gb", "overhead": 0}`} {
		var r Resources
		if err := json.Unmarshal([]byte(ok), &r); err != nil || r.Validate() != nil {
			t.Errorf("%s refused: %v %v", ok, err, r.Validate())
		}
	}
}

func FuzzParseVirtualization(f *testing.F) {
	for _, s := range []string{"", "bare-metal", "passthrough", "vgpu:A100-4C", "vgpu:A100-3-20C", "vgpu:x:y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVirtualization(s)
		if err != nil {
			return
		}
		back, err := ParseVirtualization(v.String())
		if err != nil || back != v {
			t.Fatalf("%q read as %+v, written %q, read back %+v, %v", s, v, v.String(), back, err)
		}
		m := MechanismOf(v, Sharing{Kind: TimeSlice, Fraction: 0.5})
		if m.Overhead < 0 || m.Overhead > 1 {
			t.Fatalf("%q: overhead %g", s, m.Overhead)
		}
	})
}

func FuzzParseOverhead(f *testing.F) {
	for _, s := range []string{"<= 5%", "5%", "0.05", "≤ 2.5 %", "100%", "NaN", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseOverhead(s)
		if err != nil {
			return
		}
		if o.Validate() != nil {
			t.Fatalf("%q read as %g, which does not validate", s, float64(o))
		}
	})
}

// TestIsolationDoc: docs/ISOLATION.md carries the mechanism table the code
// declares (go test . -run TestIsolationDoc -update rewrites it).
func TestIsolationDoc(t *testing.T) {
	const path = "docs/ISOLATION.md"
	const begin, end = "<!-- mechanisms: generated by go test . -run TestIsolationDoc -update -->\n", "<!-- end mechanisms -->"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the generated mechanism table markers", path)
	}
	want := doc[:i+len(begin)] + MechanismTable() + doc[j:]
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if doc != want {
		t.Errorf("%s's mechanism table is stale: run go test . -run TestIsolationDoc -update", path)
	}
}

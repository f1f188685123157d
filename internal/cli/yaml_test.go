package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestYAMLWriter: JSON written in any chunks comes out as YAML documents,
// in order, keys in order, strings that look like numbers still strings.
func TestYAMLWriter(t *testing.T) {
	in := "{\"b\": 1, \"a\": \"123\", \"list\": [true, null, \"x\"]}\n{\"second\": {\"nested\": 2.5}}\n"
	var out bytes.Buffer
	y := newYAMLWriter(&out)
	for i := 0; i < len(in); i += 7 {
		if _, err := y.Write([]byte(in[i:min(i+7, len(in))])); err != nil {
			t.Fatal(err)
		}
	}
	if err := y.Close(); err != nil {
		t.Fatal(err)
	}
	want := "b: 1\na: \"123\"\nlist:\n  - true\n  - null\n  - x\n---\nsecond:\n  nested: 2.5\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	y = newYAMLWriter(&out)
	y.Write([]byte(`{"open": [1, 2`))
	if err := y.Close(); err == nil {
		t.Error("an unfinished document closed cleanly")
	}
}

// TestOutputYAML: -o yaml prints what -o json does, as YAML.
func TestOutputYAML(t *testing.T) {
	js, _, code := run(t, "catalog", "-o", "json")
	ys, errOut, code2 := run(t, "catalog", "-o", "yaml")
	if code != 0 || code2 != 0 {
		t.Fatalf("exit %d, %d: %s", code, code2, errOut)
	}
	var fromJSON, fromYAML any
	if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(ys), &fromYAML); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fromJSON)
	b, _ := json.Marshal(fromYAML)
	if !bytes.Equal(a, b) {
		t.Errorf("-o yaml differs from -o json")
	}
	if _, errOut, code := run(t, "catalog", "-o", "xml"); code == 0 || !strings.Contains(errOut, "expected table, wide, json, yaml, name or jsonpath=TEMPLATE") {
		t.Errorf("-o xml: exit %d, %q", code, errOut)
	}
}

package cli

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestTemplate: kubectl's JSONPath templates over one document: text as
// written, queries with or without $, blanks between several values,
// quoted literals, range ... end relative to each value, filters.
func TestTemplate(t *testing.T) {
	doc := `[{"id":"j-1","team":"a","gpus":8,"preemptible":true,"labels":{"run":"1","sweep":"x"},"started_at":null,"attempts":[{"id":"j-1-a1"},{"id":"j-1-a2"}]},
		{"id":"j-2","team":"b","gpus":1.5,"preemptible":false,"attempts":[]}]`
	tests := map[string]struct {
		tmpl string
		want string
	}{
		"every id":                {`{[*].id}`, "j-1 j-2"},
		"with a leading $":        {`{$[*].id}`, "j-1 j-2"},
		"text around":             {`ids: {[*].id}!`, "ids: j-1 j-2!"},
		"one field of one":        {`{[0].team}`, "a"},
		"numbers and booleans":    {`{[*].gpus} {[*].preemptible}`, "8 1.5 true false"},
		"null prints nothing":     {`<{[0].started_at}>`, "<>"},
		"missing prints nothing":  {`<{[0].nope}>`, "<>"},
		"an object as JSON":       {`{[0].labels}`, `{"run":"1","sweep":"x"}`},
		"a map key with a dot":    {`{[0].labels['sweep']}`, "x"},
		"descendants":             {`{..attempts[*].id}`, "j-1-a1 j-1-a2"},
		"quoted literals":         {`{[0].id}{"\t"}{[1].id}{"\n"}`, "j-1\tj-2\n"},
		"single-quoted literal":   {`{[0].id}{'\n'}`, `j-1\n`},
		"range":                   {`{range [*]}{.id}={.team}{"\n"}{end}`, "j-1=a\nj-2=b\n"},
		"nested range":            {`{range [*]}{.id}:{range .attempts[*]} {.id}{end};{end}`, "j-1: j-1-a1 j-1-a2;j-2:;"},
		"$ inside a range":        {`{range [*]}{.id}/{$[0].id} {end}`, "j-1/j-1 j-2/j-1 "},
		"@ inside a range":        {`{range [*]}{@.team}{end}`, "ab"},
		"filter":                  {`{[?(@.team=="b")].id}`, "j-2"},
		"filter on a number":      {`{[?@.gpus>2].id}`, "j-1"},
		"a brace in a filter":     {`{[?(@.team=="}")].id}x`, "x"},
		"a stray closing brace":   {`a}b`, "a}b"},
		"empty template, no text": {``, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tm, err := parseTemplate(tc.tmpl)
			if err != nil {
				t.Fatalf("parseTemplate(%q): %v", tc.tmpl, err)
			}
			var out bytes.Buffer
			w := newJSONPathWriter(&out, tm)
			if _, err := w.Write([]byte(doc)); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("%s: %q, want %q", tc.tmpl, out.String(), tc.want)
			}
		})
	}
	bad := map[string]string{
		`{.a[}`:                "{.a[}:",
		`{[*].id`:              "a '{' without its '}'",
		`{range [*]}{.id}`:     "{range} without its {end}",
		`{.id}{end}`:           "{end} without its {range}",
		`{id}`:                 "expected a query",
		`{"\q"}`:               "not a quoted string",
		`{range}{end}`:         "{range}: expected a query",
		`{[?(@.a=="x)].id}`:    "a '{' without its '}'",
		`{[?@.a=="x" && ]}{}`:  `{[?@.a=="x" && ]}:`,
		`{$.a}{$..[?@ == ]x}y`: "{$..[?@ == ]x}:",
	}
	for tmpl, wantErr := range bad {
		if _, err := parseTemplate(tmpl); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("parseTemplate(%q) = %v, want an error with %q", tmpl, err, wantErr)
		}
	}
}

// TestNamedKindsAreCommands: every command -o name knows exists, so a
// renamed command cannot silently lose -o name.
func TestNamedKindsAreCommands(t *testing.T) {
	paths := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		paths[c.CommandPath()] = true
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot(&env{}))
	for p := range namedKinds {
		if !paths[p] {
			t.Errorf("namedKinds names %q, which is no command", p)
		}
	}
}

// TestOutputNameAndJSONPath runs list and get commands with -o name and
// -o jsonpath against the fake server and compares the whole output with
// testdata/output.golden (go test -run TestOutputNameAndJSONPath -update
// rewrites it). Each case is the command line, then what it printed.
func TestOutputNameAndJSONPath(t *testing.T) {
	srv, fake := startFake(t)
	fake.racks = nil
	isolateClientEnv(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("current: dev\ncontexts:\n  dev: {server: \"http://127.0.0.1:7080\", token: t}\n  prod: {server: \"https://a:8443\", token: u}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GPUFLEET_CONFIG", cfg)
	cases := [][]string{
		{"jobs", "-o", "name"},
		{"job", "j-1", "-o", "name"},
		{"queue", "-o", "name"},
		{"nodes", "-o", "name"},
		{"nodes", "n1", "-o", "name"},
		{"teams", "list", "-o", "name"},
		{"classes", "list", "-o", "name"},
		{"tokens", "list", "-o", "name"},
		{"rollout", "list", "-o", "name"},
		{"rollout", "status", "ro-1", "-o", "name"},
		{"stacks", "check", "-o", "name"},
		{"catalog", "show", "h100-sxm-80gb", "-o", "name"},
		{"config", "get-contexts", "-o", "name"},
		{"cancel", "j-1", "-o", "name"},
		{"jobs", "-o", "jsonpath={[*].id}"},
		{"jobs", "-o", `jsonpath={range [*]}{.id}{"\t"}{.labels.sweep}{"\t"}{.attempts[*].nodes[*].name}{"\n"}{end}`},
		{"job", "j-1", "-o", "jsonpath={.labels}"},
		{"job", "j-1", "-o=jsonpath={.resources.gpus} GPUs on {.attempts[0].node}"},
		{"queue", "-o", `jsonpath={[?(@.reason_code=="quota")].id}`},
		{"nodes", "-o", `jsonpath={range [*]}{.name} {.state} {.labels.rack}{"\n"}{end}`},
		{"usage", "-o", "jsonpath={.teams[*].team}"},
		{"config", "get-contexts", "-o", `jsonpath={[?@.current==true].name}`},
		{"catalog", "-o", `jsonpath={[?search(@.architecture, "Hopper") && @.memory_type=="HBM3"].id}`},
	}
	var got strings.Builder
	for _, args := range cases {
		full := append(slices.Clone(args), "--server", srv.URL, "--token", fakeAdmin)
		out, errOut, code := run(t, full...)
		want := ExitOK
		if args[0] == "rollout" && args[1] == "status" {
			want = ExitError // the fake's rollout halted; status shows it, then fails
		}
		if code != want {
			t.Errorf("%v: exit %d, want %d: %s", args, code, want, errOut)
		}
		fmt.Fprintf(&got, "$ gpufleet %s\n%s", shellWords(args), out)
		if !strings.HasSuffix(out, "\n") {
			got.WriteString("\n(no newline at the end)\n")
		}
		got.WriteString("\n")
	}
	golden := filepath.Join("testdata", "output.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run TestOutputNameAndJSONPath -update writes it)", err)
	}
	if diff := cmp.Diff(string(want), got.String()); diff != "" {
		t.Errorf("output (-%s +got):\n%s", golden, diff)
	}
}

// shellWords writes args as one would type them.
func shellWords(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.ContainsAny(a, " {}[]?\"'()&@|$*\\\t") {
			out[i] = "'" + a + "'"
		}
	}
	return strings.Join(out, " ")
}

// TestOutputErrors: a template that does not parse, jsonpath without a
// template and -o name on a command that names no objects are usage
// errors naming the template or the command, before anything is sent.
func TestOutputErrors(t *testing.T) {
	srv, fake := startFake(t)
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"template does not parse": {[]string{"jobs", "-o", "jsonpath={.a[}"}, `-o jsonpath="{.a[}": {.a[}:`},
		"unclosed brace":          {[]string{"jobs", "-o", "jsonpath={.id"}, `-o jsonpath="{.id": "{.id": a '{' without its '}'`},
		"no template":             {[]string{"jobs", "-o", "jsonpath"}, "-o jsonpath needs a template"},
		"empty template":          {[]string{"jobs", "-o", "jsonpath="}, "-o jsonpath needs a template"},
		"name of a report":        {[]string{"usage", "-o", "name"}, "-o name: gpufleet usage prints no named objects"},
		"unknown format":          {[]string{"jobs", "-o", "csv"}, `-o/--output "csv": expected table, wide, json, yaml, name or jsonpath=TEMPLATE`},
		"name takes no argument":  {[]string{"jobs", "-o", "name=x"}, `-o/--output "name=x"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake.mu.Lock()
			fake.lastJobs = api.JobQuery{Team: "untouched"}
			fake.mu.Unlock()
			_, errOut, code := run(t, append(tc.args, "--server", srv.URL, "--token", fakeAdmin)...)
			if code == 0 || !strings.Contains(errOut, "invalid: ") || !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("exit %d, stderr %q; want a usage error with %q", code, errOut, tc.wantErr)
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			if fake.lastJobs.Team != "untouched" {
				t.Errorf("the jobs were listed before the output format was refused")
			}
		})
	}
}

// FuzzTemplate: any -o jsonpath template either parses, and then prints
// any JSON document without panicking, or is refused with an error.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{`{[*].id}`, `{range [*]}{.id}{"\n"}{end}`, `{..x}`, `{$.a[?@.b>1]}`, `{`, `}{`, `{end}`, `{range}`, `{"\x"}`, `{'}'}`, `a{.b}c`} {
		f.Add(s, `[{"id":"j-1","a":{"b":2},"x":[1,"2",null,true]}]`)
	}
	f.Fuzz(func(t *testing.T, tmpl, doc string) {
		tm, err := parseTemplate(tmpl)
		if err != nil {
			return
		}
		var out bytes.Buffer
		w := newJSONPathWriter(&out, tm)
		_, _ = w.Write([]byte(doc))
	})
}

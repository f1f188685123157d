package gpufleet_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// purePackages must stay free of I/O and wall-clock reads: values in,
// decisions out. The server, agent and simulator drive them.
var purePackages = []string{"catalog", "model", "planner", "internal/scheduler", "internal/sim", "internal/health", "internal/stack", "internal/rollout", "internal/bench", "internal/forecast", "internal/capacity", "internal/audit"}

// forbiddenImports are the packages a pure package must not import.
var forbiddenImports = map[string]bool{
	"os": true, "os/exec": true, "net": true, "net/http": true, "database/sql": true,
	"log": true, "log/slog": true, "io/ioutil": true, "syscall": true,
}

func TestPurePackagesDoNoIO(t *testing.T) {
	for _, dir := range purePackages {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue // tests may read testdata and use the clock
			}
			for _, v := range impurities(t, f) {
				t.Errorf("%s: %s (pure packages take values in and return decisions; do I/O at the edges)", f, v)
			}
		}
	}
}

// impurities lists the forbidden imports and time.Now calls of one file.
func impurities(t *testing.T, path string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	file, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	timeName := ""
	for _, imp := range file.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if forbiddenImports[p] {
			out = append(out, "imports "+p)
		}
		if p == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	if timeName != "" {
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Until") {
				out = append(out, "calls time."+sel.Sel.Name)
			}
			return true
		})
	}
	return out
}

func TestPurityCheckCatchesViolations(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.go")
	src := "package x\nimport (\n\t\"os\"\n\tclock \"time\"\n)\nfunc f() { _ = os.Args; _ = clock.Now() }\n"
	if err := os.WriteFile(bad, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(impurities(t, bad), "; ")
	if got != "imports os; calls time.Now" {
		t.Errorf("impurities = %q, want the os import and the time.Now call", got)
	}
}

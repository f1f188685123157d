package gpufleet_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoEnvReadsInLibraries keeps the environment an input of the edges:
// only the commands (cmd/, internal/cli) and test-only helper packages
// (…test) read it; libraries take what they need as options.
func TestNoEnvReadsInLibraries(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "cmd" || path == filepath.Join("internal", "cli") || strings.HasSuffix(path, "test") || strings.HasPrefix(d.Name(), ".") && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		osName := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "os" {
				osName = "os"
				if imp.Name != nil {
					osName = imp.Name.Name
				}
			}
		}
		if osName == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == osName {
					switch sel.Sel.Name {
					case "Getenv", "LookupEnv", "Environ", "ExpandEnv":
						t.Errorf("%s reads the environment (os.%s): take it as an option from the command", path, sel.Sel.Name)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLayers keeps the wire and the agent free of the server's storage:
// the agent binary links neither pgx nor SQLite.
func TestLayers(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	for _, pkg := range []string{"./internal/api", "./internal/agent", "./internal/gpu/...", "./internal/health", "./internal/scheduler"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for dep := range strings.Lines(string(out)) {
			dep = strings.TrimSpace(dep)
			if strings.HasSuffix(dep, "/internal/store") || strings.Contains(dep, "jackc/pgx") || strings.Contains(dep, "sqlite") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}

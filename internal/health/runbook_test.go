package health

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/runbooks from the rule tables")

// runbookDir is docs/runbooks, from this package's directory.
var runbookDir = filepath.Join("..", "..", "docs", "runbooks")

// TestRunbooks checks that docs/runbooks is what the rule tables render;
// with -update it rewrites the pages.
func TestRunbooks(t *testing.T) {
	files := Runbooks(DefaultConfig())
	if *update {
		if err := os.MkdirAll(runbookDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(runbookDir, f.Name), []byte(f.Content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]bool{}
	for _, f := range files {
		want[f.Name] = true
		got, err := os.ReadFile(filepath.Join(runbookDir, f.Name))
		if err != nil || string(got) != f.Content {
			t.Errorf("docs/runbooks/%s is stale or missing: run go test ./internal/health -run TestRunbooks -update", f.Name)
		}
	}
	entries, err := os.ReadDir(runbookDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !want[e.Name()] {
			t.Errorf("docs/runbooks/%s is not generated from the rules: remove it or add it to Runbooks", e.Name())
		}
	}
}

func TestRunbooksCoverEveryRule(t *testing.T) {
	pages := map[string]string{}
	for _, f := range Runbooks(Config{}) {
		pages[f.Name] = f.Content
	}
	for _, r := range Rules(Config{}) {
		page := pages[r.Family+".md"]
		if !strings.Contains(page, `<a id="`+r.ID+`"></a>`) {
			t.Errorf("rule %s has no section in %s.md", r.ID, r.Family)
		}
		if !strings.Contains(pages["README.md"], "("+r.Family+".md#"+r.ID+")") {
			t.Errorf("rule %s is not in the README index", r.ID)
		}
	}
	for _, a := range Actions() {
		if actionFlow[a] == "" {
			t.Errorf("action %s has no description", a)
		}
	}
	if !strings.Contains(pages["xid.md"], "Drain the node and reboot it; replace the GPU if it recurs.") {
		t.Error("xid.md lacks XID 79's advice")
	}
}

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigContexts: set-context, use-context, get-contexts and
// delete-context edit the file client commands read, which keeps its
// tokens to its owner (0600).
func TestConfigContexts(t *testing.T) {
	srv, _ := startFake(t) // it points GPUFLEET_CONFIG at an absent file: set ours after
	path := filepath.Join(t.TempDir(), "sub", "config.yaml")
	t.Setenv("GPUFLEET_CONFIG", path)
	t.Setenv("GPUFLEET_SERVER", "")
	t.Setenv("GPUFLEET_TOKEN", "")
	mustRun := func(args ...string) string {
		t.Helper()
		out, errOut, code := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	mustRun("config", "set-context", "dev", "--server", srv.URL, "--token", fakeAdmin, "--use")
	mustRun("config", "set-context", "prod", "--server", "https://a:8443,https://b:8443", "--token", "gpf_abcdefgh_secret1234")
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v, %v", err, st)
	}
	out := mustRun("config", "get-contexts")
	for _, want := range []string{"*        dev", "prod", "https://a:8443,https://b:8443", "gpf_****1234"} {
		if !strings.Contains(out, want) {
			t.Errorf("get-contexts lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "secret") || strings.Contains(out, fakeAdmin) {
		t.Errorf("get-contexts shows a token:\n%s", out)
	}
	// The current context is what client commands use.
	if out := mustRun("nodes"); !strings.Contains(out, "n1") {
		t.Errorf("nodes through the current context:\n%s", out)
	}
	mustRun("config", "use-context", "prod")
	if got := strings.TrimSpace(mustRun("config", "current-context")); got != "prod" {
		t.Errorf("current context %q", got)
	}
	var list []struct {
		Name    string `json:"name"`
		Current bool   `json:"current"`
	}
	if err := json.Unmarshal([]byte(mustRun("config", "get-contexts", "-o", "json")), &list); err != nil || len(list) != 2 || !list[1].Current {
		t.Errorf("get-contexts -o json: %+v %v", list, err)
	}
	for _, bad := range [][]string{{"config", "use-context", "nope"}, {"config", "set-context", "x"}, {"config", "set-context", "y", "--server", "ftp://x"},
		{"config", "delete-context", "nope"}} {
		if _, errOut, code := run(t, bad...); code == 0 || errOut == "" {
			t.Errorf("%v: exit %d", bad, code)
		}
	}
	mustRun("config", "delete-context", "prod")
	if _, _, code := run(t, "config", "current-context"); code == 0 {
		t.Error("a deleted current context is still current")
	}
}

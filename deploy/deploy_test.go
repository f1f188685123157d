// Package deploy holds the files operators install beside the binary
// (systemd units, Prometheus rules, Grafana dashboards); its tests check
// them with the tools that read them.
package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// promtool finds promtool (Debian's prometheus package; scripts/test
// installs it).
func promtool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("promtool not available: scripts/test installs it (apt-get install prometheus)")
	}
	t.Skip("promtool not available (apt-get install prometheus)")
	return ""
}

// TestAlertRules: the alerting rules load, and each fires on the series
// its test gives it and not otherwise (promtool test rules).
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", "gpufleet-alerts.yaml"}, {"test", "rules", "gpufleet-alerts.test.yaml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestAlertRulesUseExportedMetrics: every gpufleet metric a rule reads is
// one the agent or the server exports, so a renamed metric cannot leave a
// rule silently empty.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	rules, err := os.ReadFile("prometheus/gpufleet-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	code := exportedMetrics(t)
	for _, m := range regexp.MustCompile(`\bgpufleet_[a-z_]+\b`).FindAllString(string(rules), -1) {
		if strings.HasSuffix(m, "_") {
			continue // a family named in a comment (gpufleet_gpu_*)
		}
		if !strings.Contains(code, `"`+m+`"`) {
			t.Errorf("rule reads %s, which neither the agent nor the server exports", m)
		}
	}
}

// TestSystemdUnits: each unit's defaults (Environment=GPUFLEET_*) are
// flags of the command it runs, that command runs from ExecStart, and,
// where systemd-analyze is installed, the unit verifies.
func TestSystemdUnits(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gpufleet")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/gpufleet").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	units, _ := filepath.Glob("systemd/*.service")
	if len(units) < 2 {
		t.Fatalf("units %v", units)
	}
	for _, u := range units {
		data, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		var sub string
		var env []string
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "ExecStart=/usr/local/bin/gpufleet "); ok {
				sub = strings.Fields(v)[0]
			}
			if v, ok := strings.CutPrefix(line, "Environment="); ok {
				env = append(env, strings.Fields(v)...)
			}
		}
		if sub == "" || len(env) == 0 {
			t.Errorf("%s: no gpufleet ExecStart or no defaults", u)
			continue
		}
		help, err := exec.Command(bin, sub, "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("gpufleet %s --help: %v", sub, err)
		}
		for _, kv := range env {
			name, _, _ := strings.Cut(kv, "=")
			flag := "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "GPUFLEET_")), "_", "-")
			if !strings.HasPrefix(name, "GPUFLEET_") || !strings.Contains(string(help), flag+" ") {
				t.Errorf("%s: %s is not a flag of gpufleet %s (%s)", u, name, sub, flag)
			}
		}
		if !strings.Contains(string(data), "EnvironmentFile=-/etc/gpufleet/") {
			t.Errorf("%s: no EnvironmentFile for the operator's settings", u)
		}
		if filepath.Base(u) == "gpufleet-agent.service" {
			// Restarts leave the attempts' supervisors running; the agent's
			// cgroup subtree is delegated to it.
			for _, want := range []string{"KillMode=process", "Delegate=yes"} {
				if !slices.Contains(strings.Split(string(data), "\n"), want) {
					t.Errorf("%s: no %s line", u, want)
				}
			}
		}
		if analyze, err := exec.LookPath("systemd-analyze"); err == nil {
			copyPath := filepath.Join(t.TempDir(), filepath.Base(u))
			os.WriteFile(copyPath, []byte(strings.ReplaceAll(string(data), "/usr/local/bin/gpufleet", bin)), 0o644)
			if out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput(); err != nil {
				t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
			}
		}
	}
}

// TestGrafanaDashboardsUseExportedMetrics: every gpufleet metric a
// dashboard panel queries is exported (a histogram's _bucket and _count
// series by the histogram), and each panel has a title and a query.
func TestGrafanaDashboardsUseExportedMetrics(t *testing.T) {
	code := exportedMetrics(t)
	files, _ := filepath.Glob("grafana/*.json")
	if len(files) < 2 {
		t.Fatalf("dashboards %v", files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range d.Panels {
			if p.Title == "" || len(p.Targets) == 0 {
				t.Errorf("%s: a panel without a title or a query", f)
			}
			for _, q := range p.Targets {
				for _, m := range regexp.MustCompile(`\bgpufleet_[a-z_]+\b`).FindAllString(q.Expr, -1) {
					base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
					if !strings.Contains(code, `"`+m+`"`) && !strings.Contains(code, `"`+base+`"`) {
						t.Errorf("%s: panel %q reads %s, which nothing exports", f, p.Title, m)
					}
				}
			}
		}
	}
}

// exportedMetrics is the source of the agent's and the server's metrics.
func exportedMetrics(t *testing.T) string {
	var code strings.Builder
	for _, f := range []string{"../internal/agent/metrics.go", "../internal/server/metrics.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	return code.String()
}

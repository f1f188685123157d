// Package deploy holds the files operators install beside the binary
// (systemd units, Prometheus rules, Grafana dashboards); its tests check
// them with the tools that read them.
package deploy

import (
	"os"
	"os/exec"
	"regexp"
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
	var code strings.Builder
	for _, f := range []string{"../internal/agent/metrics.go", "../internal/server/metrics.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	for _, m := range regexp.MustCompile(`\bgpufleet_[a-z_]+\b`).FindAllString(string(rules), -1) {
		if strings.HasSuffix(m, "_") {
			continue // a family named in a comment (gpufleet_gpu_*)
		}
		if !strings.Contains(code.String(), `"`+m+`"`) {
			t.Errorf("rule reads %s, which neither the agent nor the server exports", m)
		}
	}
}

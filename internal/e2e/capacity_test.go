package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/capacity"
)

// TestDevCapacity: gpufleet dev --seed-history 60d, as a new user runs it,
// answers gpufleet forecast, procure (an H100 order checked by replay)
// and lifecycle (the idle L4s retired) from the real binary, refuses a
// member, and draws the Capacity page, plots included, in Chromium.
func TestDevCapacity(t *testing.T) {
	bctx := browser(t)
	d := startDev(t, "--seed-history", "60d")
	gf := func(token string, args ...string) (string, string, error) {
		t.Helper()
		cmd := exec.Command(binary(t), append(args, "--server", d.APIURL, "--token", token)...)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}

	out, errOut, err := gf(d.AdminToken, "procure", "-o", "json")
	if err != nil {
		t.Fatalf("procure: %v\n%s", err, errOut)
	}
	var pr api.ProcureResponse
	if err := json.Unmarshal([]byte(out), &pr); err != nil {
		t.Fatalf("procure -o json: %v\n%s", err, out)
	}
	got := map[string]capacity.Recommendation{}
	for _, m := range pr.Models {
		got[m.Recommendation.GPUModel] = m.Recommendation
	}
	h := got["h100-sxm-80gb"]
	if h.Action != capacity.Order || h.Nodes < 1 || h.OrderBy == nil || h.Crossing == nil || h.With == nil || !h.With.Meets || h.Without == nil || h.Without.Meets {
		t.Errorf("H100 decision %+v", h)
	}
	if h.LeadTimeDays != 84 || !strings.Contains(h.LeadTimeSource, "Hopper") {
		t.Errorf("H100 lead time %d (%s), want the catalog's 84 days with its source", h.LeadTimeDays, h.LeadTimeSource)
	}
	if l4 := got["l4"]; l4.Action != capacity.Nothing {
		t.Errorf("L4 decision %+v", l4)
	}
	table, _, err := gf(d.AdminToken, "procure")
	if err != nil || !strings.Contains(table, "ORDER BY") || !strings.Contains(table, "h100-sxm-80gb") {
		t.Errorf("procure table (%v):\n%s", err, table)
	}
	svg := filepath.Join(t.TempDir(), "h100.svg")
	if _, errOut, err := gf(d.AdminToken, "procure", "--gpu-model", "h100-sxm-80gb", "--lead-time", "h100-sxm-80gb=120d", "--plot", svg); err != nil {
		t.Fatalf("procure --plot: %v\n%s", err, errOut)
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.Contains(string(b), "order by") || !strings.Contains(string(b), "capacity 384 GPU-hours") {
		t.Errorf("plot (%v) lacks the order-by date or the capacity line", err)
	}
	if _, errOut, err := gf(d.Teams["team-a"], "procure"); err == nil || !strings.Contains(errOut, "admin") {
		t.Errorf("a member asked what to order: %v %s", err, errOut)
	}
	if _, errOut, err := gf(d.AdminToken, "procure", "--target", "p90-queue<4h"); err == nil || !strings.Contains(errOut, "--target") {
		t.Errorf("a bad target: %v %s", err, errOut)
	}

	out, errOut, err = gf(d.AdminToken, "lifecycle", "-o", "json")
	if err != nil {
		t.Fatalf("lifecycle: %v\n%s", err, errOut)
	}
	var lc capacity.LifecycleReport
	if err := json.Unmarshal([]byte(out), &lc); err != nil {
		t.Fatal(err)
	}
	dec := map[string]capacity.Decision{}
	for _, m := range lc.Models {
		dec[m.GPUModel] = m.Decision
		if m.AgeYears == nil || len(m.Reasons) == 0 {
			t.Errorf("%s: no age from the purchased label, or no reasons: %+v", m.GPUModel, m)
		}
	}
	if len(dec) != 4 || dec["l4"] != capacity.Retire {
		t.Errorf("lifecycle decisions %v", dec)
	}
	if out, errOut, err := gf(d.Teams["team-a"], "forecast", "-o", "json"); err != nil || !strings.Contains(out, `"forecast"`) {
		t.Errorf("a member's forecast: %v %s", err, errOut)
	}

	tc := tab(t, bctx)
	do(t, tc, "log in", chromedp.Navigate(d.LoginURL), chromedp.WaitVisible(chromedp.CSS(`[data-gpu-uuid]`)))
	do(t, tc, "capacity page", chromedp.Navigate(d.APIURL+"/capacity"), chromedp.WaitVisible(chromedp.CSS(`#lifecycle tr[data-model="l4"]`)))
	// The plots are data: images, which the page's policy must let load.
	loaded := run(t, tc, "plots", chromedp.Evaluate[int](`[...document.querySelectorAll('img.plot')].filter(i => i.complete && i.naturalWidth > 0).length`))
	if loaded != len(pr.Models) {
		t.Errorf("%d plots drawn, want %d", loaded, len(pr.Models))
	}
	html := run(t, tc, "DOM", chromedp.OuterHTML(chromedp.CSS("html")))
	for _, want := range []string{`data-model="h100-sxm-80gb"`, "order", "retire", h.OrderBy.Format("2006-01-02")} {
		if !strings.Contains(html, want) {
			t.Errorf("capacity page lacks %q", want)
		}
	}
	shot(t, tc, outDir(t), "capacity")
}

package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeDemand writes n days of weekly demand with a trend to a file.
func writeDemand(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("day,gpu_model,gpu_hours_asked,jobs_submitted\n")
	day := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	for i := range n {
		v := 400 + 2*float64(i) + 60*math.Sin(2*math.Pi*float64(i)/7)
		fmt.Fprintf(&b, "%s,h100-sxm-80gb,%.1f,3\n%s,any,%.1f,1\n", day.AddDate(0, 0, i).Format(time.DateOnly), v, day.AddDate(0, 0, i).Format(time.DateOnly), v/4)
	}
	p := filepath.Join(t.TempDir(), "demand.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestForecastCommand: the JSON contract of a forecast and a backtest,
// one model's demand, and errors that name the flag.
func TestForecastCommand(t *testing.T) {
	p := writeDemand(t, 70)
	svg := filepath.Join(t.TempDir(), "f.svg")
	out, errOut, code := run(t, "forecast", "--demand", p, "--gpu-model", "h100-sxm-80gb", "--horizon", "14d", "-o", "json", "--plot", svg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.HasPrefix(string(b), "<svg") {
		t.Errorf("--plot wrote %q, %v", b, err)
	}
	var f struct {
		Method string    `json:"method"`
		Start  string    `json:"start"`
		Mean   []float64 `json:"mean"`
		Lo80   []float64 `json:"lo80"`
		Hi95   []float64 `json:"hi95"`
	}
	if err := json.Unmarshal([]byte(out), &f); err != nil || f.Method != "holt-winters" || len(f.Mean) != 14 || !strings.HasPrefix(f.Start, "2026-03-16") ||
		f.Lo80[0] > f.Mean[0] || f.Hi95[0] < f.Mean[0] {
		t.Fatalf("forecast %+v %v\n%s", f, err, out)
	}
	out, errOut, code = run(t, "forecast", "--demand", p, "--backtest", "--horizon", "7d", "-o", "json")
	var bt struct {
		Forecast struct {
			Method     string  `json:"method"`
			MAPE       float64 `json:"mape"`
			Coverage80 float64 `json:"coverage_80"`
		} `json:"forecast"`
		Baseline struct {
			Method string  `json:"method"`
			MAPE   float64 `json:"mape"`
		} `json:"baseline"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &bt) != nil || bt.Forecast.Method != "holt-winters" || bt.Baseline.Method != "seasonal-naive" ||
		bt.Forecast.MAPE >= bt.Baseline.MAPE {
		t.Fatalf("backtest exit %d %s: %+v", code, errOut, bt)
	}
	for args, want := range map[string]string{
		"forecast --backtest":                     "--demand",
		"forecast --demand X --horizon 36h":       "--horizon",
		"forecast --demand /nonexistent/d.csv":    "--demand",
		"forecast --demand " + p + " --step 0":    "--step",
		"forecast --demand " + writeDemand(t, 10): "too short",
	} {
		_, errOut, code := run(t, strings.Fields(args)...)
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d, %q; want an error naming %s", args, code, errOut, want)
		}
	}
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

func TestSimJSONKeys(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "p.svg")
	jobsOut := filepath.Join(t.TempDir(), "jobs.csv")
	out, errOut, code := runCLI(t, "sim", "--trace", "../sim/testdata/tiny.csv", "--format", "csv",
		"--cluster", "../sim/testdata/tiny-cluster.yaml", "--policy", "gpufleet", "--plot", plot, "--jobs-out", jobsOut, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"policy", "jobs", "completed", "skipped", "avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s",
		"avg_wait_s", "p50_wait_s", "p95_wait_s", "p99_wait_s", "gpu_allocation_ratio", "fragmentation_gpus", "jain_fairness",
		"eta_median_abs_error_s", "eta_p90_abs_error_s", "makespan_s", "preemptions", "sim_wall_s", "decisions_per_s", "by_class", "by_team",
		"stops", "ended", "drains", "wait_reasons"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	if rep["completed"].(float64) != 10 {
		t.Errorf("completed = %v, want all 10 tiny jobs", rep["completed"])
	}
	rows, err := os.ReadFile(jobsOut)
	if lines := strings.Split(strings.TrimSpace(string(rows)), "\n"); err != nil || len(lines) != 11 || !strings.HasPrefix(lines[0], "id,team,class,gpus,") {
		t.Errorf("--jobs-out: %v, want a header and 10 rows, got %q", err, rows)
	}
	svg, err := os.ReadFile(plot)
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Errorf("plot: %v, %.40q", err, svg)
	}
}

func TestSimErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.csv")
	os.WriteFile(bad, []byte("submit_s,duration_s,gpus\n0,10,1\n0,x,1\n"), 0o600)
	tests := map[string]struct {
		args []string
		want string
	}{
		"bad line names file and line": {args: []string{"--trace", bad, "--format", "csv", "--cluster", "../sim/testdata/tiny-cluster.yaml"}, want: "bad.csv:3"},
		"unknown policy":               {args: []string{"--trace", bad, "--format", "csv", "--cluster", "x", "--policy", "lottery"}, want: "--policy"},
		"no cluster":                   {args: []string{"--trace", bad, "--format", "csv"}, want: "--nodes"},
		"unknown ablation":             {args: []string{"--trace", bad, "--format", "csv", "--cluster", "x", "--ablate", "magic"}, want: "--ablate"},
		"jobs-out in a missing dir":    {args: []string{"--trace", bad, "--format", "csv", "--cluster", "x", "--jobs-out", "/no/such/dir/jobs.csv"}, want: "--jobs-out"},
		"bad grace":                    {args: []string{"--trace", bad, "--format", "csv", "--cluster", "x", "--grace", "soon"}, want: "--grace"},
		"grace beyond the API's":       {args: []string{"--trace", bad, "--format", "csv", "--cluster", "x", "--grace", "2d"}, want: "--grace"},
		"bad drain MTBF":               {args: []string{"--trace", bad, "--format", "csv", "--cluster", "x", "--drain-mtbf", "-1h"}, want: "--drain-mtbf"},
		"negative time-limit factor":   {args: []string{"--trace", bad, "--format", "csv", "--cluster", "x", "--time-limit-factor", "-1"}, want: "--time-limit-factor"},
		"unknown knob":                 {args: []string{"--trace", bad, "--format", "csv", "--cluster", "x", "--set", "magic=1"}, want: "--set"},
		"knob out of range":            {args: []string{"--trace", bad, "--format", "csv", "--cluster", "x", "--set", "fair-share-clamp=0.5"}, want: "--set"},
		"window the wrong way round":   {args: []string{"--trace", bad, "--format", "csv", "--cluster", "x", "--window", "2d,1d"}, want: "--window"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, errOut, code := runCLI(t, append([]string{"sim"}, tc.args...)...)
			if code == 0 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want an error naming %q", code, errOut, tc.want)
			}
		})
	}
	out, errOut, code := runCLI(t, "sim", "--trace", bad, "--format", "csv", "--cluster", "../sim/testdata/tiny-cluster.yaml", "--skip-bad-lines", "--policy", "fifo")
	if code != 0 || !strings.Contains(out, "1 bad lines") {
		t.Errorf("--skip-bad-lines: exit %d, %s%s", code, out, errOut)
	}
}

// TestSimStopsByCode replays the tiny trace with drains and time limits:
// the report names the stops by code, as the server would.
func TestSimStopsByCode(t *testing.T) {
	out, errOut, code := runCLI(t, "sim", "--trace", "../sim/testdata/tiny.csv", "--format", "csv",
		"--cluster", "../sim/testdata/tiny-cluster.yaml", "--policy", "gpufleet", "--estimate-error", "1", "--seed", "5",
		"--drain-mtbf", "2h", "--repair", "30m", "--time-limit-factor", "1.2", "--grace", "1m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"drains ", "stops ", "drain ", "time_limit "} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestSimWindowAndKnobs: --window replays only the arrivals in a time
// window, --set changes a policy knob (and names it in the policy), and
// the restart overhead is not zero unless asked.
func TestSimWindowAndKnobs(t *testing.T) {
	tests := map[string]struct {
		args       []string
		wantJobs   float64
		wantPolicy string
	}{
		"the whole trace":                  {wantJobs: 10, wantPolicy: "gpufleet"},
		"arrivals in the first 10 minutes": {args: []string{"--window", "0,10m"}, wantJobs: 6, wantPolicy: "gpufleet"},
		"a knob":                           {args: []string{"--set", "starvation-slowdown=10"}, wantJobs: 10, wantPolicy: "gpufleet+starvation-slowdown=10"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"sim", "--trace", "../sim/testdata/tiny.csv", "--format", "csv",
				"--cluster", "../sim/testdata/tiny-cluster.yaml", "--policy", "gpufleet", "-o", "json"}, tc.args...)
			out, errOut, code := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var rep struct {
				Jobs   float64 `json:"jobs"`
				Policy string  `json:"policy"`
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Jobs != tc.wantJobs || rep.Policy != tc.wantPolicy {
				t.Errorf("jobs %v policy %q, want %v %q", rep.Jobs, rep.Policy, tc.wantJobs, tc.wantPolicy)
			}
		})
	}
	if f := newSimCmd(&env{}).Flags().Lookup("restart-overhead"); f == nil || f.DefValue != "90s" {
		t.Errorf("--restart-overhead default %v, want 90s", f)
	}
}

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

func TestSubmitFlagsMapToTheRequest(t *testing.T) {
	srv, fake := startFake(t)
	dir := t.TempDir()
	jobFile := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(jobFile, []byte("name: from-file\nresources:\n  gpus: 4\n  node_selector: {rack: r1}\ncommand: [python, file.py]\nenv: {A: \"1\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args []string
		want api.SubmitRequest
	}{
		"every resource flag": {
			args: []string{"--gpus", "16", "--nodes", "2", "--gpu-model", "h100-sxm-80gb, h200-sxm-141gb", "--gpu-memory", "80GiB",
				"--min-compute-capability", "9.0", "--precision", "bf16", "--interconnect", "nvlink", "--sharing", "exclusive",
				"--prefer", "fastest", "--node-selector", "rack=r12", "--node-selector", "zone=a", "--", "torchrun", "train.py"},
			want: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 16, Nodes: 2, GPUModels: []string{"h100-sxm-80gb", "h200-sxm-141gb"},
				GPUMemoryMinBytes: 80 << 30, MinComputeCapability: gpufleet.ComputeCapability{Major: 9, Minor: 0}, Precision: "bf16", Interconnect: "nvlink",
				Prefer: "fastest", NodeSelector: map[string]string{"rack": "r12", "zone": "a"}}, Command: []string{"torchrun", "train.py"}},
		},
		"job fields and human durations": {
			args: []string{"--gpus", "1", "--priority", "interactive", "--team", "team-b", "--time-limit", "4h", "--estimate", "5400",
				"--preemptible", "--grace", "30s", "--retries", "3", "--env", "A=1", "--env", "B=x=y", "--workdir", "/w",
				"--request-id", "r-1", "--sim-load", "memory", "--name", "nb", "--sharing", "mig:1g.18gb", "--", "jupyter", "lab"},
			want: api.SubmitRequest{Name: "nb", Team: "team-b", Priority: "interactive", RequestID: "r-1",
				Resources: gpufleet.Resources{GPUs: 1, Sharing: gpufleet.Sharing{Kind: gpufleet.MIG, Profile: "1g.18gb"}}, Command: []string{"jupyter", "lab"},
				Env: map[string]string{"A": "1", "B": "x=y"}, Workdir: "/w", TimeLimit: gpufleet.Duration(4 * time.Hour), Estimate: gpufleet.Duration(time.Hour + 30*time.Minute),
				Preemptible: true, Grace: gpufleet.Duration(30 * time.Second), Retries: 3, SimLoad: "memory"},
		},
		"stack and component versions": {
			args: []string{"--gpus", "8", "--stack", "prod-550", "--require", "cuda>=12.4", "--require", "torch=2.5", "--require", "nccl>=2.21,<2.23", "--", "torchrun", "x.py"},
			want: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8, Stack: "prod-550",
				Requires: map[string]string{"cuda": ">=12.4", "torch": "2.5", "nccl": ">=2.21,<2.23"}}, Command: []string{"torchrun", "x.py"}},
		},
		"work counter": {
			args: []string{"--gpus", "1", "--prefer", "efficient", "--work-metric", `tokens=(\d+)`, "--work-unit", "tokens", "--", "python", "serve.py"},
			want: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, Prefer: gpufleet.Efficient}, Command: []string{"python", "serve.py"},
				Work: &gpufleet.WorkCounter{Metric: `tokens=(\d+)`, Unit: "tokens"}},
		},
		"planner flags build the model": {
			args: []string{"--gpus", "2", "--precision", "fp8", "--model", "llama-3.1-70b", "--batch", "32", "--input-tokens", "2048",
				"--tp", "2", "--kv-precision", "fp8", "--strict", "--", "vllm", "serve"},
			want: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 2, Precision: "fp8"}, Command: []string{"vllm", "serve"}, Strict: true,
				Model: &api.ModelRequest{Name: "llama-3.1-70b", Mode: "inference", Precision: "fp8", KVPrecision: "fp8", Batch: 32, InputTokens: 2048, TP: 2}},
		},
		"training model": {
			args: []string{"--gpus", "64", "--model", "llama-3.1-8b", "--mode", "training", "--seq", "8192", "--zero", "1", "--global-batch", "256", "--", "x"},
			want: api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 64}, Command: []string{"x"},
				Model: &api.ModelRequest{Name: "llama-3.1-8b", Mode: "training", Seq: 8192, ZeRO: 1, GlobalBatch: 256}},
		},
		"flags override the file, maps merge, -- replaces the command": {
			args: []string{jobFile, "--gpus", "8", "--node-selector", "zone=b", "--env", "B=2", "--", "python", "flag.py"},
			want: api.SubmitRequest{Name: "from-file", Resources: gpufleet.Resources{GPUs: 8, NodeSelector: map[string]string{"rack": "r1", "zone": "b"}},
				Command: []string{"python", "flag.py"}, Env: map[string]string{"A": "1", "B": "2"}},
		},
		"the file alone": {
			args: []string{jobFile},
			want: api.SubmitRequest{Name: "from-file", Resources: gpufleet.Resources{GPUs: 4, NodeSelector: map[string]string{"rack": "r1"}},
				Command: []string{"python", "file.py"}, Env: map[string]string{"A": "1"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"submit", "--server", srv.URL, "--token", fakeAdmin}, tc.args...)
			out, errOut, code := run(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if strings.TrimSpace(out) != "j-42" {
				t.Errorf("stdout %q, want the job id", out)
			}
			if !strings.Contains(errOut, "warning: plan needs 2 GPUs") {
				t.Errorf("stderr %q lacks the warning", errOut)
			}
			if diff := cmp.Diff(tc.want, fake.lastSubmit); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSubmitRejectsBadFlags(t *testing.T) {
	srv, _ := startFake(t)
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"sharing":                      {[]string{"--sharing", "half"}, `--sharing "half": expected exclusive, mig:PROFILE or timeslice:F`},
		"timeslice fraction":           {[]string{"--sharing", "timeslice:2"}, `--sharing "timeslice:2": expected timeslice:F with 0.001 <= F <= 1`},
		"priority":                     {[]string{"--priority", "urgent"}, `--priority "urgent": expected production, interactive, training or batch`},
		"interconnect":                 {[]string{"--interconnect", "pcie"}, `--interconnect "pcie": expected nvlink or any`},
		"size":                         {[]string{"--gpu-memory", "lots"}, `--gpu-memory "lots": expected a form like 80GiB`},
		"duration":                     {[]string{"--time-limit", "soon"}, `--time-limit "soon": expected a form like 90s`},
		"env":                          {[]string{"--env", "NOVALUE"}, `--env "NOVALUE": expected KEY=VALUE`},
		"negative gpus":                {[]string{"--gpus", "-1", "--", "true"}, `--gpus -1: expected 1 to 524288`},
		"too many gpus":                {[]string{"--gpus", "2147483648", "--", "true"}, `--gpus 2147483648: expected 1 to 524288`},
		"precision":                    {[]string{"--precision", "fp12"}, `--precision "fp12"`},
		"unknown model":                {[]string{"--model", "gpt-17"}, `neither a file nor a built-in model`},
		"planner without model":        {[]string{"--batch", "4"}, "need --model"},
		"two files":                    {[]string{"a.yaml", "b.yaml"}, "more than one job file"},
		"require without a component":  {[]string{"--gpus", "1", "--require", ">=12.4", "--", "x"}, `--require: invalid: ">=12.4": expected COMPONENT then a constraint`},
		"require an unknown component": {[]string{"--gpus", "1", "--require", "pytorch>=2.5", "--", "x"}, `resources.requires: invalid: stack component "pytorch"`},
		"require a bad constraint":     {[]string{"--gpus", "1", "--require", "cuda>>12", "--", "x"}, `resources.requires.cuda: version constraint`},
		"missing file":                 {[]string{"nope.yaml"}, "nope.yaml"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"submit", "--server", srv.URL, "--token", fakeAdmin}, tc.args...)
			_, errOut, code := run(t, args...)
			if code == 0 || !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("exit %d, stderr %q, want it to contain %q", code, errOut, tc.wantErr)
			}
		})
	}
}

func TestGlobalFlagsBeforeOrAfterTheCommand(t *testing.T) {
	srv, _ := startFake(t)
	before, _, code1 := run(t, "--server", srv.URL, "--token", fakeAdmin, "-o", "json", "queue")
	after, _, code2 := run(t, "queue", "-o", "json", "--token", fakeAdmin, "--server", srv.URL)
	if code1 != 0 || code2 != 0 || before != after || !json.Valid([]byte(before)) {
		t.Errorf("before (%d) %q\nafter (%d) %q", code1, before, code2, after)
	}
	mixed, errOut, code := run(t, "--server", srv.URL, "nodes", "--token", fakeAdmin, "-o", "wide")
	if code != 0 || !strings.Contains(mixed, "LABELS") || !strings.Contains(mixed, "rack=r1") {
		t.Errorf("mixed (%d): %q %s", code, mixed, errOut)
	}
}

func TestJSONOutputShapes(t *testing.T) {
	srv, _ := startFake(t)
	tests := map[string]struct {
		args     []string
		wantKeys []string // of the object, or of each element of the array
		array    bool
	}{
		"jobs":          {[]string{"jobs"}, []string{"id", "team", "name", "state", "cancel_requested", "priority", "resources", "command", "time_limit_s", "estimate_s", "retries", "submitted_at", "started_at", "finished_at", "plan", "attempts"}, true},
		"job":           {[]string{"job", "j-1"}, []string{"id", "state", "resources", "attempts"}, false},
		"cancel":        {[]string{"cancel", "j-1"}, []string{"id", "cancel_requested"}, false},
		"queue":         {[]string{"queue"}, []string{"id", "team", "priority", "position", "team_position", "reason", "reason_code", "estimated_start"}, true},
		"nodes":         {[]string{"nodes"}, []string{"name", "state", "health", "reason", "heartbeat_age_s", "metrics_url", "labels", "versions", "gpus"}, true},
		"node":          {[]string{"nodes", "n1"}, []string{"name", "gpus"}, false},
		"cordon":        {[]string{"cordon", "n1"}, []string{"name", "state"}, false},
		"teams":         {[]string{"teams", "list"}, []string{"name", "quota", "borrowing_limit", "weight", "used"}, true},
		"teams create":  {[]string{"teams", "create", "team-c", "--quota", "h100=8"}, []string{"name", "quota"}, false},
		"classes":       {[]string{"classes"}, []string{"name", "models"}, true},
		"tokens create": {[]string{"tokens", "create", "--team", "team-a", "--role", "member"}, []string{"id", "token", "team", "role"}, false},
		"tokens list":   {[]string{"tokens", "list"}, []string{"id", "team", "role"}, true},
		"join token":    {[]string{"join-tokens", "create", "--node", "n9"}, []string{"id", "token", "node", "expires_at", "single_use"}, false},
		"usage":         {[]string{"usage"}, []string{"from", "to", "teams"}, false},
		"submit":        {[]string{"submit", "--gpus", "1", "--", "true"}, []string{"id", "state", "warnings"}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"-o", "json", "--server", srv.URL, "--token", fakeAdmin}, tc.args...)
			out, errOut, code := run(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var objs []map[string]any
			if tc.array {
				if err := json.Unmarshal([]byte(out), &objs); err != nil {
					t.Fatalf("not a JSON array: %v\n%s", err, out)
				}
				if len(objs) == 0 {
					t.Fatal("empty array")
				}
			} else {
				var obj map[string]any
				if err := json.Unmarshal([]byte(out), &obj); err != nil {
					t.Fatalf("not one JSON object: %v\n%s", err, out)
				}
				objs = []map[string]any{obj}
			}
			for _, o := range objs {
				for _, k := range tc.wantKeys {
					if _, ok := o[k]; !ok {
						t.Errorf("missing key %q in %v", k, o)
					}
				}
			}
		})
	}
}

func TestJobsFollowsPagesAndPassesFilters(t *testing.T) {
	srv, fake := startFake(t)
	out, errOut, code := run(t, "jobs", "--all", "--team", "team-a", "--state", "running,queued", "--server", srv.URL, "--token", fakeMember)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"ID", "STATE", "j-1", "j-2", "16 on 2 nodes", "10m ago"} {
		if !strings.Contains(out, want) {
			t.Errorf("jobs table lacks %q:\n%s", want, out)
		}
	}
	want := api.JobQuery{Team: "team-a", All: true, States: []gpufleet.JobState{"running", "queued"}, NextToken: "page2"}
	if diff := cmp.Diff(want, fake.lastJobs); diff != "" {
		t.Errorf("last query (-want +got):\n%s", diff)
	}
}

func TestQueueTable(t *testing.T) {
	srv, _ := startFake(t)
	out, errOut, code := run(t, "queue", "--server", srv.URL, "--token", fakeMember)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 rows:\n%s", out)
	}
	for _, col := range []string{"POSITION", "TEAM POS", "JOB", "NAME", "TEAM", "PRIORITY", "GPUS", "REASON", "ETA", "CONFIDENCE", "RUN ESTIMATE"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("header %q lacks %s", lines[0], col)
		}
	}
	if !strings.Contains(lines[1], "in 12m") || !strings.Contains(lines[1], "waiting for 8 h100-sxm-80gb GPUs") ||
		!strings.Contains(lines[1], "uncalibrated") || !strings.Contains(lines[1], "3h (workload, 4 runs)") {
		t.Errorf("row 1 %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 3 || f[len(f)-3] != "unknown" || f[len(f)-2] != "-" || f[len(f)-1] != "-" {
		t.Errorf("row 2 %q: a null ETA is unknown, with no confidence and no run estimate", lines[2])
	}
}

func TestHumanTables(t *testing.T) {
	srv, fake := startFake(t)
	tests := map[string]struct {
		args []string
		want []string
	}{
		"job":     {[]string{"job", "j-1"}, []string{"train", "16 on 2 nodes GPUs", ">=80GiB", "torchrun train.py", "4h", "j-1-a1", "n1,n2"}},
		"nodes":   {[]string{"nodes"}, []string{"2x h100-sxm-80gb", "2s ago", "never", "no heartbeat"}},
		"node":    {[]string{"nodes", "n1"}, []string{"GPU-1", "80GiB", "rack=r1"}},
		"teams":   {[]string{"teams"}, []string{"team-a", "h100=8", "h100=4", "none"}},
		"classes": {[]string{"classes", "list"}, []string{"hopper", "h100-sxm-80gb,h200-sxm-141gb"}},
		"usage":   {[]string{"usage", "--team", "team-a"}, []string{"100.0", "62.5", "62%", "1.00 MWh"}},
		"energy": {[]string{"usage", "--energy", "--by", "gpu-model", "--period", "week"},
			[]string{"PUE 1.58 where a rack gives none, grid 480 g CO2e/kWh", "WEEK", "h100-sxm-80gb  2025-01-06", "50.0 kWh", "79.0 kWh", "37.9 kg", "500 W", "(total)", "75.0 kWh", "375 W"}},
		"energy by job": {[]string{"usage", "--energy", "--by", "job"}, []string{"JOB", "team-a   j-2", "25.0 kWh", "WORK", "ENERGY/UNIT",
			"450M tokens  0.4 J/token", "250 W     -            -"}},
		"cordon":                       {[]string{"drain", "n1"}, []string{"node n1: draining"}},
		"cancel":                       {[]string{"cancel", "j-1"}, []string{"job j-1: running (cancelling)"}},
		"logs":                         {[]string{"logs", "j-1", "-f"}, []string{"epoch 1 loss 2.31", "follow=true previous=false attempt= tail=0"}},
		"logs of the previous attempt": {[]string{"logs", "j-1", "--previous", "--tail", "20"}, []string{"follow=false previous=true attempt= tail=20"}},
		"logs of an attempt":           {[]string{"logs", "j-1", "--attempt", "a-1"}, []string{"attempt=a-1"}},
		"logs since":                   {[]string{"logs", "j-1", "--since", "1d"}, []string{"since=24h0m0s since_time=0001-01-01T00:00:00Z"}},
		"logs since a time":            {[]string{"logs", "j-1", "--since-time", "2026-12-04T10:00:00Z"}, []string{"since=0s since_time=2026-12-04T10:00:00Z"}},
		"revoke":                       {[]string{"tokens", "revoke", "t-a"}, []string{"token t-a: revoked"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, errOut, code := run(t, append(tc.args, "--server", srv.URL, "--token", fakeAdmin)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	if fake.lastAction != "drain n1" {
		t.Errorf("node action %q", fake.lastAction)
	}
	if _, errOut, code := run(t, "drain", "n1", "--reason", "rack r1 maintenance", "--server", srv.URL, "--token", fakeAdmin); code != 0 || fake.lastAction != "drain n1 because rack r1 maintenance" {
		t.Errorf("drain --reason: exit %d %s, action %q", code, errOut, fake.lastAction)
	}
	if _, errOut, code := run(t, "drain", "n1", "--reason", "bad\x00reason", "--server", srv.URL, "--token", fakeAdmin); code == 0 || !strings.Contains(errOut, "--reason") {
		t.Errorf("drain --reason with a NUL: exit %d %s", code, errOut)
	}
}

func TestAdminCommandsSendRequests(t *testing.T) {
	srv, fake := startFake(t)
	base := []string{"--server", srv.URL, "--token", fakeAdmin}
	mustRun := func(args ...string) {
		t.Helper()
		if _, errOut, code := run(t, append(args, base...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	mustRun("teams", "create", "team-c", "--quota", "h100=8", "--quota", "a100=4", "--borrow-limit", "2", "--weight", "2.5")
	two, w := 2, 2.5
	if diff := cmp.Diff(api.TeamRequest{Name: "team-c", Quota: map[string]int{"h100": 8, "a100": 4}, BorrowingLimit: &two, Weight: &w}, fake.lastTeam); diff != "" {
		t.Errorf("team request (-want +got):\n%s", diff)
	}
	mustRun("teams", "create", "team-d", "--no-borrow-limit")
	if fake.lastTeam.BorrowingLimit == nil || *fake.lastTeam.BorrowingLimit != -1 || fake.lastTeam.Weight != nil {
		t.Errorf("no-borrow-limit request %+v", fake.lastTeam)
	}
	mustRun("classes", "create", "hopper", "--models", "h100-sxm-80gb,h200-sxm-141gb")
	if diff := cmp.Diff(gpufleet.Class{Name: "hopper", Models: []string{"h100-sxm-80gb", "h200-sxm-141gb"}}, fake.lastClass); diff != "" {
		t.Errorf("class (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		args []string
		want api.PutRackRequest
	}{
		{[]string{"racks", "create", "r7", "--power-budget", "17.3kW", "--nodes", "n1,n2"},
			api.PutRackRequest{Rack: gpufleet.Rack{Name: "r7", PowerBudgetWatts: 17300, Nodes: []string{"n1", "n2"}}}},
		{[]string{"racks", "create", "r8", "--power-budget", "1W", "--nodes", "n1", "--force"},
			api.PutRackRequest{Rack: gpufleet.Rack{Name: "r8", PowerBudgetWatts: 1, Nodes: []string{"n1"}}, Force: true}},
	} {
		mustRun(tc.args...)
		if diff := cmp.Diff(tc.want, fake.lastRack); diff != "" {
			t.Errorf("%v: rack request (-want +got):\n%s", tc.args, diff)
		}
	}
	mustRun("tokens", "create", "--role", "admin")
	if fake.lastToken.Role != gpufleet.RoleAdmin {
		t.Errorf("token request %+v", fake.lastToken)
	}
	mustRun("tokens", "create", "--role", "monitor")
	if fake.lastToken.Role != gpufleet.RoleMonitor || fake.lastToken.Team != "" {
		t.Errorf("monitor token request %+v", fake.lastToken)
	}
	if _, errOut, code := run(t, append([]string{"tokens", "create", "--role", "root"}, base...)...); code == 0 || !strings.Contains(errOut, `--role "root": expected member, admin or monitor`) {
		t.Errorf("--role root: exit %d, %s", code, errOut)
	}
	mustRun("join-tokens", "create", "--node", "n9", "--ttl", "2d")
	if diff := cmp.Diff(api.JoinTokenRequest{Node: "n9", TTL: gpufleet.Duration(48 * time.Hour)}, fake.lastJoin); diff != "" {
		t.Errorf("join token (-want +got):\n%s", diff)
	}
	mustRun("usage", "--team", "team-a", "--from", "2025-01-01", "--to", "2025-02-01T00:00:00Z")
	if got := fake.lastUsage; got.Team != "team-a" || got.From.Format("2006-01-02") != "2025-01-01" || got.To.Month() != 2 {
		t.Errorf("usage query %+v", got)
	}
	out, _, code := run(t, append([]string{"rollups", "--node", "n1", "--gpu", "GPU-1", "--from", "2025-01-01T10:00:00Z"}, base...)...)
	if code != 0 || !strings.Contains(out, "2025-01-01 10:00:00  n1") || !strings.Contains(out, "42.0%") || !strings.Contains(out, "312 W") ||
		fake.lastRollup.Node != "n1" || fake.lastRollup.GPU != "GPU-1" || fake.lastRollup.From.Hour() != 10 {
		t.Errorf("rollups: exit %d\n%s\nquery %+v", code, out, fake.lastRollup)
	}
	for _, bad := range [][]string{
		{"rollups"},
		{"rollups", "--node", "n1", "--job", "j1"},
		{"rollups", "--job", "j1", "--gpu", "GPU-1"},
		{"teams", "create", "x", "--quota", "h100"},
		{"teams", "create", "x", "--quota", "h100=-1"},
		{"tokens", "create", "--role", "member"},
		{"tokens", "create", "--role", "owner"},
		{"classes", "create", "x"},
		{"usage", "--from", "last tuesday"},
		{"usage", "--period", "week"},
	} {
		if _, _, code := run(t, append(bad, base...)...); code == 0 {
			t.Errorf("%v succeeded", bad)
		}
	}
}

func TestServerErrorsReachStderr(t *testing.T) {
	srv, _ := startFake(t)
	tests := map[string]struct {
		args []string
		want string
	}{
		"not found":     {[]string{"job", "j-404", "--token", fakeAdmin}, `gpufleet: not found: job "j-404"`},
		"forbidden":     {[]string{"cordon", "n1", "--token", fakeMember}, "gpufleet: forbidden: admin token required"},
		"bad token":     {[]string{"nodes", "--token", "wrong"}, "unauthorized"},
		"missing token": {[]string{"nodes"}, "missing credential"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, errOut, code := run(t, append(tc.args, "--server", srv.URL)...)
			if code == 0 || out != "" || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want stderr with %q", code, out, errOut, tc.want)
			}
		})
	}
	isolateClientEnv(t)
	if _, errOut, code := run(t, "jobs"); code == 0 || !strings.Contains(errOut, "no server") {
		t.Errorf("no server: exit %d %q", code, errOut)
	}
}

func TestConnectionPrecedence(t *testing.T) {
	srv, _ := startFake(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	cfg := "current: dev\ncontexts:\n  dev:\n    server: " + srv.URL + "\n    token: " + fakeMember + "\n" +
		"  prod:\n    server: http://127.0.0.1:1\n    token: prod-token\n" +
		"  admin:\n    server: " + srv.URL + "\n    token: " + fakeAdmin + "\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GPUFLEET_CONFIG", cfgPath)
	// The file's current context (a member: cordon is forbidden, listing works).
	if _, errOut, code := run(t, "nodes"); code != 0 {
		t.Fatalf("current context: %s", errOut)
	}
	if _, errOut, _ := run(t, "cordon", "n1"); !strings.Contains(errOut, "forbidden") {
		t.Errorf("current context should be the member: %q", errOut)
	}
	// --context before or after the command.
	for _, args := range [][]string{{"--context", "admin", "cordon", "n1"}, {"cordon", "n1", "--context", "admin"}} {
		if _, errOut, code := run(t, args...); code != 0 {
			t.Errorf("%v: %s", args, errOut)
		}
	}
	// GPUFLEET_CONTEXT names one too; an unknown one is an error listing them.
	t.Setenv("GPUFLEET_CONTEXT", "nope")
	if _, errOut, code := run(t, "nodes"); code == 0 || !strings.Contains(errOut, "admin, dev, prod") {
		t.Errorf("unknown context: %q", errOut)
	}
	t.Setenv("GPUFLEET_CONTEXT", "")
	// Env beats the current context; flags beat env.
	t.Setenv("GPUFLEET_TOKEN", fakeAdmin)
	if _, errOut, code := run(t, "cordon", "n1"); code != 0 {
		t.Errorf("env token: %s", errOut)
	}
	if _, errOut, _ := run(t, "cordon", "n1", "--token", fakeMember); !strings.Contains(errOut, "forbidden") {
		t.Errorf("flag token should beat env: %q", errOut)
	}
	// The current context's token never goes to another server.
	t.Setenv("GPUFLEET_TOKEN", "")
	other := newFakeServer(t, &fakeService{})
	if _, errOut, _ := run(t, "nodes", "--server", other.URL); !strings.Contains(errOut, "missing credential") {
		t.Errorf("context token sent to another server: %q", errOut)
	}
	// A malformed file is an error naming it.
	if err := os.WriteFile(cfgPath, []byte("current: dev\ncontext: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, "nodes"); code == 0 || !strings.Contains(errOut, cfgPath) {
		t.Errorf("bad config: %q", errOut)
	}
}

func TestCompletesJobIDsAndNodeNames(t *testing.T) {
	srv, _ := startFake(t)
	out, errOut, code := run(t, "__complete", "--server", srv.URL, "--token", fakeAdmin, "cordon", "")
	if code != 0 || !strings.Contains(out, "n1\nn2\n") {
		t.Errorf("node completion (%d): %q %s", code, out, errOut)
	}
	out, _, _ = run(t, "__complete", "--server", srv.URL, "--token", fakeAdmin, "logs", "")
	if !strings.Contains(out, "j-1\nj-2\n") {
		t.Errorf("job completion: %q", out)
	}
}

func TestSig3(t *testing.T) {
	for v, want := range map[float64]string{3000: "3000", 0.00134: "0.00134", 12500: "12.5k", 4.5e8: "450M", 0: "0", 999.6: "1000", 1.2345e13: "12.3T", 0.4: "0.4",
		0.00016: "0.00016", 1.0 / 3: "0.333", 123.456: "123", 25: "25"} {
		if got := sig3(v); got != want {
			t.Errorf("sig3(%g) = %q, want %q", v, got, want)
		}
	}
}

// TestCancelMany: several ids, or a selector over the active jobs; every
// job is tried, a failure is reported and exits 1.
func TestEnergyText(t *testing.T) {
	for j, want := range map[float64]string{20000: "5.56 Wh", 50: "0.0139 Wh", 0: "0 Wh", 9e7: "25.0 kWh", 3.6e6: "1.00 kWh", 7.2e9: "2.00 MWh",
		3.5999e9: "1000 kWh"} {
		if got := energyText(j); got != want {
			t.Errorf("energyText(%g J) = %q, want %q", j, got, want)
		}
	}
}

func TestCancelMany(t *testing.T) {
	srv, _ := startFake(t)
	base := []string{"--server", srv.URL, "--token", fakeAdmin}
	out, errOut, code := run(t, append([]string{"cancel", "j-1", "j-404"}, base...)...)
	if code != 1 || !strings.Contains(out, "job j-1: ") || !strings.Contains(errOut, "cancel j-404") || !strings.Contains(errOut, "1 of 2 job(s) not cancelled") {
		t.Errorf("cancel j-1 j-404: exit %d\n%s\n%s", code, out, errOut)
	}
	out, _, code = run(t, append([]string{"cancel", "j-1", "-o", "json"}, base...)...)
	if code != 0 || !strings.HasPrefix(out, "{") {
		t.Errorf("one id -o json is the job object: exit %d %s", code, out)
	}
	out, errOut, code = run(t, append([]string{"cancel", "--name", "train", "--state", "running", "-o", "json"}, base...)...)
	// The fake lists j-1 and j-2 (both named train) but knows only j-1.
	var jobs []gpufleet.Job
	if code != 1 || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 1 || jobs[0].ID != "j-1" || !strings.Contains(errOut, "cancel j-2") {
		t.Errorf("cancel --name train: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, bad := range [][]string{{"cancel"}, {"cancel", "j-1", "--name", "x"}, {"cancel", "--state", "done"}} {
		if _, errOut, code := run(t, append(bad, base...)...); code == 0 || !strings.Contains(errOut, "invalid") {
			t.Errorf("%v: exit %d %q", bad, code, errOut)
		}
	}
}

// TestRepairedWait: repaired --wait exits 0 once the node is ready, and 1
// naming the failure when it falls back out of service.
func TestRepairedWait(t *testing.T) {
	srv, _ := startFake(t)
	base := []string{"--server", srv.URL, "--token", fakeAdmin}
	if out, errOut, code := run(t, append([]string{"repaired", "n1", "--wait"}, base...)...); code != 0 || !strings.Contains(out, "node n1: ready") {
		t.Errorf("repaired n1 --wait: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, errOut, code := run(t, append([]string{"repaired", "n2", "--wait", "--timeout", "30s"}, base...)...); code != 1 || !strings.Contains(errOut, "node n2: validation failed: no heartbeat") {
		t.Errorf("repaired n2 --wait: exit %d\n%s", code, errOut)
	}
}

// TestExplanationAsData: -o json of the queue and of a refused submission
// carry the explanation (nodes evaluated, filtered per code, the dimension
// exhausted) beside the reason; -o wide counts the nodes.
func TestExplanationAsData(t *testing.T) {
	srv, _ := startFake(t)
	want := fakeExplanation("capacity")
	out, errOut, code := run(t, "-o", "json", "--server", srv.URL, "--token", fakeMember, "queue")
	var q []gpufleet.QueueEntry
	if code != 0 || json.Unmarshal([]byte(out), &q) != nil || len(q) == 0 {
		t.Fatalf("queue -o json: exit %d %s %s", code, out, errOut)
	}
	if diff := cmp.Diff(want, q[0].Explanation); diff != "" {
		t.Errorf("queue entry's explanation (-want +got):\n%s", diff)
	}
	out, errOut, code = run(t, "-o", "json", "--server", srv.URL, "--token", fakeMember, "submit", "--gpus", "99", "--", "true")
	var eb api.ErrorBody
	if code == 0 || json.Unmarshal([]byte(out), &eb) != nil || !strings.Contains(errOut, "no node of the fleet") {
		t.Fatalf("refused submit -o json: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	want.Code = "unplaceable"
	if eb.Code != api.CodeUnsatisfiable || eb.ReasonCode != "unplaceable" {
		t.Errorf("refusal body %+v: want code unsatisfiable, reason_code unplaceable", eb)
	}
	if diff := cmp.Diff(want, eb.Explanation); diff != "" {
		t.Errorf("refusal's explanation (-want +got):\n%s", diff)
	}
	out, errOut, code = run(t, "-o", "wide", "--server", srv.URL, "--token", fakeMember, "queue")
	if code != 0 || !strings.Contains(out, "NODES") || !strings.Contains(out, "filtered: selector 1, capacity 2; exhausted gpus (needs 8, most 4)") {
		t.Errorf("queue -o wide: exit %d %s %s", code, out, errOut)
	}
}

// TestExplanationCountsTellTheData: the why of a queued job says the data
// of the reasons that are not about nodes as well as the counts.
func TestExplanationCountsTellTheData(t *testing.T) {
	start := time.Date(2025, 1, 1, 1, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		e    *gpufleet.Explanation
		want string
	}{
		"behind the blocker in strict order": {
			e:    &gpufleet.Explanation{Code: "order", Blocker: &gpufleet.Blocker{Job: "j-big", Position: 1}},
			want: "behind job j-big (position 1)",
		},
		"the reservation it would delay": {
			e:    &gpufleet.Explanation{Code: "reservation", Reservation: &gpufleet.ReservationHold{Job: "j-big", Start: start, EstimateS: 7200}},
			want: "reservation of job j-big at 2025-01-01T01:00:00Z (its estimate 2h0m0s)",
		},
		"the victims it waits for": {
			e:    &gpufleet.Explanation{Code: "preempting", Preemption: &gpufleet.Preemption{Victims: 2, GraceS: 30}},
			want: "victims 2 (grace up to 30s)",
		},
		"a slower model, brief": {
			e:    &gpufleet.Explanation{Code: "slower_model", Brief: true, Slower: &gpufleet.SlowerWait{Model: "k80"}},
			want: "slower model k80 has room",
		},
		"the stack's first node": {
			e: &gpufleet.Explanation{Code: "stack_mismatch", NodesEvaluated: 2, NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterStack, Nodes: 2}},
				Stack: &gpufleet.StackMismatch{Node: "h2", Unmet: "cuda >=13.0: the node has 12.2"}},
			want: "2 nodes evaluated; filtered: stack_mismatch 2; stack: node h2 lacks cuda >=13.0: the node has 12.2",
		},
		"counts, spare and search limit": {
			e: &gpufleet.Explanation{Code: "capacity", NodesEvaluated: 1, Exhausted: gpufleet.DimGPUs, Need: 4, Most: 2,
				NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterCapacity, Nodes: 1}}, SpareHeld: 2, SearchLimit: 1},
			want: "1 nodes evaluated; filtered: capacity 1; exhausted gpus (needs 4, most 2); spare held 2 GPUs; preemption search limit 1",
		},
		"only a code": {e: &gpufleet.Explanation{Code: "capacity"}, want: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := explanationCounts(tc.e); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

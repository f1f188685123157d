package audit

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/capacity"
)

var update = flag.Bool("update", false, "rewrite docs/AUDIT.md")

var t0 = time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)

func node(name, model string, n int, domain string, labels map[string]string) gpufleet.Node {
	nd := gpufleet.Node{Name: name, State: gpufleet.NodeReady, Health: gpufleet.Healthy, Labels: labels, Versions: map[string]string{"driver": "550.54.15"}}
	for i := range n {
		nd.GPUs = append(nd.GPUs, gpufleet.NodeGPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: model, State: gpufleet.NodeReady,
			Health: gpufleet.Healthy, NVLinkDomain: domain})
	}
	return nd
}

// job is a job with one attempt that ran from start for d on the GPUs.
func job(id, team string, prio gpufleet.Priority, nodeName string, gpus []string, start time.Time, d time.Duration) gpufleet.Job {
	end := start.Add(d)
	return gpufleet.Job{ID: id, Team: team, Priority: prio, State: gpufleet.JobSucceeded, Resources: gpufleet.Resources{GPUs: len(gpus)},
		Attempts: []gpufleet.Attempt{{ID: id + "-a1", JobID: id, Node: nodeName, GPUs: gpus, StartedAt: &start, FinishedAt: &end}}}
}

// minutes are the rollups of GPUs held from start for d, every minute
// alike.
func minutes(node, model, team string, gpus []string, start time.Time, d time.Duration, idle float64, dram, tensor *float64, mem int64, power bool) []GPUMinute {
	var out []GPUMinute
	for m := start; m.Before(start.Add(d)); m = m.Add(time.Minute) {
		for _, g := range gpus {
			eff := 0.05
			if idle < 0.5 {
				eff = 0.6
			}
			r := GPUMinute{GPU: g, Node: node, Model: model, Team: team, Minute: m, AllocatedS: 60, IdleAllocatedS: 60 * idle,
				Effective: &eff, DRAMActivity: dram, TensorActivity: tensor, MemoryUsedMax: &mem}
			if power {
				w := 300.0
				r.PowerWatts = &w
			}
			out = append(out, r)
		}
	}
	return out
}

func f(v float64) *float64 { return &v }

// fleet is a small fleet: an NVLink H100 box, a PCIe L4 box, an A100 box
// and a time-sliced vGPU A100 VM.
func fleet() Snapshot {
	return Snapshot{Now: t0, Since: t0.Add(-30 * 24 * time.Hour),
		Nodes: []gpufleet.Node{
			node("h1", "h100-sxm-80gb", 8, "h1-nvl", nil),
			node("l1", "l4", 4, "", nil),
			node("a1", "a100-sxm-80gb", 8, "a1-nvl", nil),
			node("v1", "a100-sxm-80gb", 2, "", map[string]string{"virtualization": "vgpu:A100-80C"}),
		},
		Models: ModelMap(catalog.Default().All()), RunbookXIDs: map[int]bool{79: true, 48: true},
		Lifecycle: &capacity.LifecycleReport{}, Procure: []capacity.Recommendation{},
	}
}

func TestChecks(t *testing.T) {
	start := t0.Add(-time.Hour)
	l4GPUs := []string{"GPU-l1-0", "GPU-l1-1"}
	tests := []struct {
		name string
		edit func(s *Snapshot)
		want map[string]Severity // check -> severity of its one finding
	}{
		{"a healthy fleet has nothing to say", func(s *Snapshot) {}, nil},
		{"idle allocated GPUs, high when idle nearly all the time", func(s *Snapshot) {
			s.Jobs = append(s.Jobs, job("idle", "team-a", gpufleet.Interactive, "h1", []string{"GPU-h1-0"}, start, 30*time.Minute))
			s.Usage = minutes("h1", "h100-sxm-80gb", "team-a", []string{"GPU-h1-0"}, start, 30*time.Minute, 0.95, nil, nil, 60<<30, true)
		}, map[string]Severity{"idle-allocated": High}},
		{"half idle is medium; a short hold is not judged", func(s *Snapshot) {
			s.Jobs = append(s.Jobs, job("half", "team-a", gpufleet.Batch, "h1", []string{"GPU-h1-1"}, start, 20*time.Minute),
				job("short", "team-a", gpufleet.Batch, "h1", []string{"GPU-h1-2"}, start, 3*time.Minute))
			s.Usage = append(minutes("h1", "h100-sxm-80gb", "team-a", []string{"GPU-h1-1"}, start, 20*time.Minute, 0.6, nil, nil, 60<<30, true),
				minutes("h1", "h100-sxm-80gb", "team-a", []string{"GPU-h1-2"}, start, 3*time.Minute, 1, nil, nil, 60<<30, true)...)
		}, map[string]Severity{"idle-allocated": Medium}},
		{"fp8 asked of an A100 through the plan", func(s *Snapshot) {
			j := job("fp8", "team-a", gpufleet.Batch, "a1", []string{"GPU-a1-0"}, start, 10*time.Minute)
			j.Plan = map[string]any{"precision": "fp8", "precision_native": false}
			s.Jobs = append(s.Jobs, j)
		}, map[string]Severity{"precision-not-native": Medium}},
		{"fp8 on an H100 is native", func(s *Snapshot) {
			j := job("fp8", "team-a", gpufleet.Batch, "h1", []string{"GPU-h1-0"}, start, 10*time.Minute)
			j.Resources.Precision = gpufleet.FP8
			s.Jobs = append(s.Jobs, j)
		}, nil},
		{"two L4s over PCIe while the H100 domain was free", func(s *Snapshot) {
			s.Jobs = append(s.Jobs, job("pcie", "team-b", gpufleet.Training, "l1", l4GPUs, start, 10*time.Minute))
		}, map[string]Severity{"pcie-split": Medium}},
		{"no finding for two L4s the job chose by model", func(s *Snapshot) {
			j := job("pcie", "team-b", gpufleet.Training, "l1", l4GPUs, start, 10*time.Minute)
			j.Resources.GPUModels = []string{"l4"} // a model with no NVLink: its own choice
			s.Jobs = append(s.Jobs, j)
		}, nil},
		{"no finding for a job pinned to its nodes by selector", func(s *Snapshot) {
			j := job("pcie", "team-b", gpufleet.Training, "l1", l4GPUs, start, 10*time.Minute)
			j.Resources.NodeSelector = map[string]string{"pool": "inference"}
			s.Jobs = append(s.Jobs, j)
		}, nil},
		{"a job that allowed an NVLink model too is still a finding", func(s *Snapshot) {
			j := job("pcie", "team-b", gpufleet.Training, "l1", l4GPUs, start, 10*time.Minute)
			j.Resources.GPUModels = []string{"l4", "h100-sxm-80gb"}
			s.Jobs = append(s.Jobs, j)
		}, map[string]Severity{"pcie-split": Medium}},
		{"no finding when every NVLink domain was busy", func(s *Snapshot) {
			s.Nodes = s.Nodes[1:2] // the L4 box alone
			s.Jobs = append(s.Jobs, job("pcie", "team-b", gpufleet.Training, "l1", l4GPUs, start, 10*time.Minute))
		}, nil},
		{"production on a time-sliced vGPU, and no spare", func(s *Snapshot) {
			s.Jobs = append(s.Jobs, job("prod", "team-a", gpufleet.Production, "v1", []string{"GPU-v1-0"}, start, 10*time.Minute))
		}, map[string]Severity{"soft-isolation-production": High, "no-spare": High}},
		{"production on bare metal with a spare held", func(s *Snapshot) {
			s.Spare = map[string]int{"h100-sxm-80gb": 1}
			s.Jobs = append(s.Jobs, job("prod", "team-a", gpufleet.Production, "h1", []string{"GPU-h1-0"}, start, 10*time.Minute))
		}, nil},
		{"oversized: 6 GiB on an 80 GB card a MIG slice holds", func(s *Snapshot) {
			s.Jobs = append(s.Jobs, job("small", "team-a", gpufleet.Batch, "a1", []string{"GPU-a1-1"}, start, 20*time.Minute))
			s.Usage = minutes("a1", "a100-sxm-80gb", "team-a", []string{"GPU-a1-1"}, start, 20*time.Minute, 0, nil, nil, 6<<30, true)
		}, map[string]Severity{"memory-oversized": Low}},
		{"memory-bound on an H100 where an L4 moves bytes cheaper", func(s *Snapshot) {
			s.Jobs = append(s.Jobs, job("mb", "team-a", gpufleet.Batch, "h1", []string{"GPU-h1-3"}, start, 20*time.Minute))
			s.Usage = minutes("h1", "h100-sxm-80gb", "team-a", []string{"GPU-h1-3"}, start, 20*time.Minute, 0, f(0.8), f(0.1), 20<<30, true)
		}, map[string]Severity{"memory-bound": Low}},
		{"no power readings", func(s *Snapshot) {
			s.Jobs = append(s.Jobs, job("dark", "team-a", gpufleet.Batch, "h1", []string{"GPU-h1-4"}, start, 20*time.Minute))
			s.Usage = minutes("h1", "h100-sxm-80gb", "team-a", []string{"GPU-h1-4"}, start, 20*time.Minute, 0, nil, nil, 60<<30, false)
		}, map[string]Severity{"energy-unmeasured": Low}},
		{"rack over budget, another near", func(s *Snapshot) {
			s.Racks = []gpufleet.Rack{{Name: "r1", PowerBudgetWatts: 10000, DrawWatts: new(gpufleet.Watts(10500))}, {Name: "r2", PowerBudgetWatts: 10000, DrawWatts: new(gpufleet.Watts(9300))}}
		}, map[string]Severity{"rack-power": High}},
		{"thermal slowdown now", func(s *Snapshot) {
			s.Nodes[0].GPUs[2].Live = &gpufleet.GPULive{ThrottleReasons: []string{"sw_power_cap", "hw_thermal_slowdown"}}
			s.Nodes[0].GPUs[3].Live = &gpufleet.GPULive{ThrottleReasons: []string{"sw_power_cap"}}
		}, map[string]Severity{"throttling": Medium}},
		{"a power brake the health rules caught, cleared since", func(s *Snapshot) {
			// The event the server appends when the rule fires (its reason
			// is the rule's words); the clocks are fine again now.
			s.Events = []gpufleet.Event{{At: start, Kind: "gpu.unhealthy", Object: "GPU-h1-5",
				Detail: "node h1 gpu 5: power brake for 2m (the board forces it to slow down)"}}
		}, map[string]Severity{"throttling": Medium}},
		{"mixed drivers", func(s *Snapshot) {
			s.Nodes = append(s.Nodes, node("h2", "h100-sxm-80gb", 8, "h2-nvl", nil))
			s.Nodes[len(s.Nodes)-1].Versions["driver"] = "535.104.05"
		}, map[string]Severity{"stack-drift": Medium}},
		{"repeated XIDs, one with no runbook, and the breaker", func(s *Snapshot) {
			s.Events = []gpufleet.Event{
				{At: start, Kind: "gpu.unhealthy", Object: "GPU-h1-5", Detail: "node h1 gpu 5: XID 48 (double-bit ECC error)"},
				{At: start.Add(time.Minute), Kind: "gpu.degraded", Object: "GPU-h1-5", Detail: "node h1 gpu 5: XID 1234 (unknown)"},
				{At: start, Kind: "health.quarantine_refused", Object: "a1", Detail: "3 of 4 nodes already out"},
			}
		}, map[string]Severity{"repeated-xid": High, "runbook-missing": Medium, "quarantine-tripped": High}},
		{"a card below its median", func(s *Snapshot) {
			s.Bench = []bench.Result{{Node: "h1", Figure: bench.Figure{Measurement: bench.Measurement{Name: "membw", UUID: "GPU-h1-6", Model: "h100-sxm-80gb"}, Value: 2.1e12},
				Fleet: &bench.Comparison{Median: 3e12, Peers: 7, Fraction: f(0.7), Gate: 0.9, Degraded: true}}}
		}, map[string]Severity{"bench-below-median": Medium}},
		{"an order already late, and a retirement", func(s *Snapshot) {
			cross, by := t0.Add(20*24*time.Hour), t0.Add(-64*24*time.Hour)
			s.Procure = []capacity.Recommendation{{GPUModel: "h100-sxm-80gb", Action: capacity.Order, Nodes: 1, GPUs: 8, Crossing: &cross, OrderBy: &by, LateDays: 64, LeadTimeDays: 84}}
			s.Lifecycle = &capacity.LifecycleReport{Models: []capacity.ModelLifecycle{{GPUModel: "l4", GPUs: 4, Decision: capacity.Retire, Reasons: []string{"2.6% allocated"}}}}
		}, map[string]Severity{"forecast-shortfall": High, "past-break-even": Low}},
		{"a team with no quota waits", func(s *Snapshot) {
			s.Teams = []gpufleet.Team{{Name: "team-a", Quota: map[string]int{"h100-sxm-80gb": 8}}, {Name: "team-b"}}
			s.Queue = []gpufleet.QueueEntry{{ID: "j1", Team: "team-b"}, {ID: "j2", Team: "team-a"}}
		}, map[string]Severity{"no-quota-waiting": Medium}},
		{"waits far past their ETA", func(s *Snapshot) {
			for i := range 6 {
				w := Wait{Predicted: 10 * time.Minute, Actual: 15 * time.Minute}
				if i < 2 {
					w.Actual = 5 * time.Hour
				}
				s.Waits = append(s.Waits, w)
			}
		}, map[string]Severity{"eta-miss": Medium}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := fleet()
			tc.edit(&s)
			r := Run(s)
			got := map[string]Severity{}
			for _, f := range r.Findings {
				if _, dup := got[f.Check]; dup && tc.want[f.Check] != "" && f.Severity.Rank() > got[f.Check].Rank() {
					t.Errorf("%s: a second finding worse than the first (findings are sorted worst first)", f.Check)
				}
				if _, dup := got[f.Check]; !dup {
					got[f.Check] = f.Severity
				}
				if f.Summary == "" || f.Evidence == "" || f.Fix == "" || len(f.Mistakes) == 0 || f.Subject.Name == "" {
					t.Errorf("finding without words: %+v", f)
				}
			}
			for c, sev := range tc.want {
				if got[c] != sev {
					t.Errorf("%s: %q, want %s (findings %v)", c, got[c], sev, got)
				}
			}
			for c := range got {
				if _, ok := tc.want[c]; !ok {
					t.Errorf("unexpected %s finding: %+v", c, r.Findings)
				}
			}
		})
	}
}

// TestIdleFigures: the idle finding's numbers are the rollups'.
func TestIdleFigures(t *testing.T) {
	s := fleet()
	start := t0.Add(-time.Hour)
	s.Jobs = []gpufleet.Job{job("idle", "team-a", gpufleet.Interactive, "h1", []string{"GPU-h1-0", "GPU-h1-1"}, start, 30*time.Minute)}
	s.Usage = minutes("h1", "h100-sxm-80gb", "team-a", []string{"GPU-h1-0", "GPU-h1-1"}, start, 30*time.Minute, 0.9, nil, nil, 60<<30, true)
	r := Run(s)
	if len(r.Findings) != 1 {
		t.Fatalf("findings %+v", r.Findings)
	}
	f := r.Findings[0]
	price := *ModelMap(catalog.Default().All())["h100-sxm-80gb"].PricePerHourUSD
	if *f.GPUHours != 0.9 || *f.CostUSD != round2(0.9*price) || !strings.Contains(f.Evidence, "1 GPU-h held, 0.9 GPU-h of it") {
		t.Errorf("idle figures: %v GPU-h, $%v, %q; want 0.9 GPU-h of 1 held, $%.2f", *f.GPUHours, *f.CostUSD, f.Evidence, 0.9*price)
	}
	if tt := r.ByTeam["team-a"]; tt.Findings != 1 || tt.GPUHours != 0.9 {
		t.Errorf("by team %+v", r.ByTeam)
	}
	if r.Worst() != High || r.Counts[High] != 1 {
		t.Errorf("worst %s, counts %v", r.Worst(), r.Counts)
	}
}

// TestNotMeasured: a check with nothing to read says so instead of ok.
func TestNotMeasured(t *testing.T) {
	s := fleet()
	s.Lifecycle, s.LifecycleErr, s.ProcureErr = nil, "no purchased labels", "no demand history"
	s.UsageFrom = t0.Add(-7 * 24 * time.Hour)
	if r := Run(s); len(r.Notes) != 0 {
		t.Errorf("a note on a fleet with no work before the usage window: %q", r.Notes)
	}
	old := t0.Add(-10 * 24 * time.Hour)
	s.Jobs = []gpufleet.Job{{ID: "old", Attempts: []gpufleet.Attempt{{ID: "a", StartedAt: &old, FinishedAt: &old}}}}
	r := Run(s)
	want := []string{"idle-allocated", "memory-oversized", "memory-bound", "energy-unmeasured", "rack-power", "stack-drift", "bench-below-median",
		"forecast-shortfall", "past-break-even", "eta-miss"}
	var got []string
	for _, c := range r.Checks {
		if c.Status == StatusNotMeasured {
			got = append(got, c.ID)
			if c.NotMeasured == "" {
				t.Errorf("%s: not measured without a why", c.ID)
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("not measured %v, want %v", got, want)
	}
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "kept from 2026-10-26") {
		t.Errorf("notes %q", r.Notes)
	}
}

// TestEveryMistake: each of the twenty-two is checked or said to be
// blind, never both, never neither.
func TestEveryMistake(t *testing.T) {
	for m := 1; m <= 22; m++ {
		checked := slices.ContainsFunc(checks, func(c Check) bool { return slices.Contains(c.Mistakes, m) })
		blinded := slices.ContainsFunc(blind, func(b Blind) bool { return b.Mistake == m })
		if checked == blinded && m != 13 { // 13 is both: runbook-missing sees part of it
			t.Errorf("mistake %d (%s): checked %v, blind %v", m, Mistakes[m], checked, blinded)
		}
	}
	ids := map[string]bool{}
	for _, c := range checks {
		if ids[c.ID] || c.Looks == "" || c.Fix == "" || c.Title == "" {
			t.Errorf("check %s: duplicate or undocumented", c.ID)
		}
		ids[c.ID] = true
	}
}

// TestDoc: docs/AUDIT.md is what the checks render.
func TestDoc(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "AUDIT.md")
	want := Markdown()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Errorf("docs/AUDIT.md is stale or missing: go test ./internal/audit -run TestDoc -update")
	}
}

func TestParseSeverity(t *testing.T) {
	for _, ok := range []string{"high", "Medium", " low "} {
		if _, err := ParseSeverity(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	if _, err := ParseSeverity("critical"); err == nil || !strings.Contains(err.Error(), "severity") {
		t.Errorf("critical: %v", err)
	}
}

// TestGroupFoldsJobsOnOneNode: findings of one check about jobs that ran
// on one node are one row about the node, with the count, the jobs, the
// hours and cost summed and the worst as the sample; a lone job, another
// node and other subjects stay as they are.
func TestGroupFoldsJobsOnOneNode(t *testing.T) {
	h := func(v float64) *float64 { return &v }
	job := func(id, team, node string, sev Severity, hours float64) Finding {
		return Finding{Check: "soft-isolation", Severity: sev, Subject: Subject{Kind: "job", Name: id, Team: team, Node: node},
			Summary: "production job on time-sliced GPUs", Evidence: id + " shared gpu 0", GPUHours: h(hours), CostUSD: h(hours * 2)}
	}
	fs := []Finding{
		job("j-1", "a", "n1", High, 3), job("j-2", "b", "n1", High, 1), job("j-3", "a", "n1", Medium, 2),
		job("j-4", "a", "n2", High, 5),
		{Check: "soft-isolation", Severity: Low, Subject: Subject{Kind: "gpu", Name: "n1 gpu 0", Node: "n1"}},
		{Check: "throttling", Severity: Medium, Subject: Subject{Kind: "gpu", Name: "n2 gpu 0", Node: "n2"}, Summary: "throttled"},
		{Check: "throttling", Severity: Medium, Subject: Subject{Kind: "gpu", Name: "n2 gpu 1", Node: "n2"}, Summary: "throttled"},
		{Check: "idle-allocated", Severity: High, Subject: Subject{Kind: "job", Name: "j-5", Team: "a", Node: "n1"}},
	}
	sortFindings(fs)
	got := group(fs)
	if len(got) != 5 {
		t.Fatalf("%d rows, want 5: %+v", len(got), got)
	}
	if i := slices.IndexFunc(got, func(f Finding) bool { return f.Check == "throttling" }); i < 0 || got[i].Count != 2 ||
		!strings.HasPrefix(got[i].Summary, "2 GPUs of node n2: throttled (gpu n2 gpu 0") {
		t.Errorf("the GPUs of n2 in one row: %+v", got)
	}
	var n1 *Finding
	for i := range got {
		if got[i].Check == "soft-isolation" && got[i].Subject.Kind == "node" {
			n1 = &got[i]
		}
		if got[i].Subject.Name == "j-4" && (got[i].Count != 0 || got[i].Subjects != nil) {
			t.Errorf("a lone job folded: %+v", got[i])
		}
	}
	if n1 == nil || n1.Subject.Name != "n1" || n1.Count != 3 || !slices.Equal(n1.Subjects, []string{"j-1", "j-2", "j-3"}) || n1.Severity != High ||
		value(n1.GPUHours) != 6 || value(n1.CostUSD) != 12 || n1.Subject.Team != "" ||
		!strings.HasPrefix(n1.Summary, "3 jobs on node n1: production job on time-sliced GPUs (job j-1") || !strings.Contains(n1.Evidence, "the others: j-2, j-3") {
		t.Errorf("the n1 row: %+v", n1)
	}
}

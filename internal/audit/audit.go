// Package audit checks a fleet for the mistakes gpufleet exists to prevent
// (docs/DESIGN.md's twenty-two, docs/AUDIT.md): one pure check per
// measurable mistake over a Snapshot of what the store records, each
// finding with its evidence, its cost where one can be put on it, and the
// fix. What gpufleet cannot see is said, per mistake, instead of guessed.
package audit

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/capacity"
)

// Severity ranks a finding: high needs action now (production at risk,
// money burning, hardware failing), medium soon, low when convenient.
type Severity string

// Severities, worst first.
const (
	High   Severity = "high"
	Medium Severity = "medium"
	Low    Severity = "low"
)

// Rank orders severities: high 3, medium 2, low 1, anything else 0.
func (s Severity) Rank() int {
	switch s {
	case High:
		return 3
	case Medium:
		return 2
	case Low:
		return 1
	}
	return 0
}

// ParseSeverity reads a severity name (high, medium, low).
func ParseSeverity(s string) (Severity, error) {
	v := Severity(strings.ToLower(strings.TrimSpace(s)))
	if v.Rank() == 0 {
		return "", fmt.Errorf("%w: severity %s: expected high, medium or low", gpufleet.ErrInvalid, gpufleet.Quote(s))
	}
	return v, nil
}

// Subject is what a finding is about: a job, team, node, gpu, rack, model,
// rule or the fleet, by name (a job by id, a GPU by node and index); Title
// is a job's name; Node the node a GPU is in; Team the team it belongs to,
// when one does.
type Subject struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Title string `json:"title,omitempty"`
	Node  string `json:"node,omitempty"`
	Team  string `json:"team,omitempty"`
}

// Finding is one instance of a mistake.
type Finding struct {
	Check    string   `json:"check"`
	Mistakes []int    `json:"mistakes"`
	Severity Severity `json:"severity"`
	Subject  Subject  `json:"subject"`
	// Summary says what is wrong in one line; Evidence the figures it rests
	// on; Fix what to do.
	Summary  string `json:"summary"`
	Evidence string `json:"evidence"`
	Fix      string `json:"fix"`
	// GPUHours and CostUSD put a size on it where one can be: the GPU-hours
	// concerned, and their price at the catalog's hourly rate (null when the
	// catalog has no price).
	GPUHours *float64 `json:"gpu_hours"`
	CostUSD  *float64 `json:"cost_usd"`
	// Subjects, on a row that folds the findings of one check about the
	// jobs that ran on one node, or about its GPUs (Subject is then the
	// node), are their names (job ids, "n1 gpu 3"); Count how many;
	// GPU-hours and cost are their sums, the summary and evidence the
	// worst one's as a sample.
	Subjects []string `json:"subjects,omitempty"`
	Count    int      `json:"count,omitempty"`
}

// Check is one audit check: what it looks for, and the pure function that
// looks.
type Check struct {
	ID       string
	Title    string
	Mistakes []int
	// Looks says what the check reads and its thresholds, for
	// docs/AUDIT.md; Fix is the remedy it suggests.
	Looks, Fix string
	run        func(*Snapshot) ([]Finding, string)
}

// Blind is a mistake gpufleet records nothing to measure, and why.
type Blind struct {
	Mistake int    `json:"mistake"`
	Why     string `json:"why"`
}

// CheckResult is how one check went: ok, findings, or not measured (with
// why: no data of the kind it reads).
type CheckResult struct {
	ID          string `json:"id"`
	Title       string `json:"title"`
	Mistakes    []int  `json:"mistakes"`
	Status      string `json:"status"`
	Findings    int    `json:"findings"`
	NotMeasured string `json:"not_measured,omitempty"`
}

// Check statuses.
const (
	StatusOK          = "ok"
	StatusFindings    = "findings"
	StatusNotMeasured = "not-measured"
)

// TeamTotal is a team's findings, and the GPU-hours and dollars they put a
// size on.
type TeamTotal struct {
	Findings int      `json:"findings"`
	GPUHours float64  `json:"gpu_hours"`
	CostUSD  *float64 `json:"cost_usd"`
}

// Report is an audit of a fleet.
type Report struct {
	Now      time.Time     `json:"now"`
	Since    time.Time     `json:"since"`
	Findings []Finding     `json:"findings"`
	Checks   []CheckResult `json:"checks"`
	Blind    []Blind       `json:"blind"`
	// Counts is the findings per severity.
	Counts map[Severity]int `json:"counts"`
	// ByTeam is the findings about each team's work.
	ByTeam map[string]TeamTotal `json:"by_team"`
	// Notes say what limits the figures (usage kept for less than the
	// period asked).
	Notes []string `json:"notes"`
}

// Worst is the highest severity among the findings, or "".
func (r Report) Worst() Severity {
	var w Severity
	for _, f := range r.Findings {
		if f.Severity.Rank() > w.Rank() {
			w = f.Severity
		}
	}
	return w
}

// Snapshot is what an audit reads: the store's view of the fleet over
// [Since, Now]. The server assembles it; tests build it by hand.
type Snapshot struct {
	Now, Since time.Time
	Nodes      []gpufleet.Node
	// Jobs are the jobs with an attempt that ran in the period, and the
	// queued ones, with their attempts.
	Jobs []gpufleet.Job
	// Usage is the per-GPU, per-minute rollups of the period.
	Usage []GPUMinute
	// UsageFrom is the oldest minute the store still keeps (rollup
	// retention); zero when it keeps the whole period.
	UsageFrom time.Time
	// Models are catalog entries by id: every model the fleet has, and the
	// others a fix may suggest.
	Models map[string]catalog.GPU
	Teams  []gpufleet.Team
	Queue  []gpufleet.QueueEntry
	// Waits are recent jobs' predicted and actual waits (the ETA they were
	// shown when they queued, and when they started).
	Waits  []Wait
	Racks  []gpufleet.Rack
	Stacks []gpufleet.Stack
	// Bench is each GPU's newest benchmark figures with their comparison
	// against the fleet (bench.Result.Fleet).
	Bench []bench.Result
	// Events are the period's events (health, quarantine).
	Events []gpufleet.Event
	// Spare is the production spare per GPU class or model; Classes the
	// admin-defined GPU classes.
	Spare   map[string]int
	Classes map[string][]string
	// Procure and Lifecycle are the capacity decisions as of Now; the
	// errors say why one could not be made (then its check is not
	// measured).
	Procure      []capacity.Recommendation
	ProcureErr   string
	Lifecycle    *capacity.LifecycleReport
	LifecycleErr string
	// RunbookXIDs are the XIDs the runbooks have a section for.
	RunbookXIDs map[int]bool

	// derived is what the checks share, computed once per Run.
	derived *derived
}

// GPUMinute is one GPU's rollup for one minute.
type GPUMinute struct {
	GPU    string
	Node   string
	Model  string
	Team   string
	Minute time.Time
	// AllocatedS is the seconds of the minute an attempt held the GPU;
	// IdleAllocatedS those under the idle threshold (10% effective).
	AllocatedS, IdleAllocatedS float64
	// Means of the minute; nil where the GPU does not report them.
	Effective, SMActivity, DRAMActivity, TensorActivity, PowerWatts *float64
	MemoryUsedMax                                                   *int64
}

// Wait is one job's wait against the ETA it was shown.
type Wait struct {
	Predicted, Actual time.Duration
	// Censored: the job still waits; Actual is its wait so far.
	Censored bool
}

// Checks lists every check, in the order of the mistakes.
func Checks() []Check { return checks }

// Mistakes names DESIGN.md's twenty-two mistakes, by number.
var Mistakes = map[int]string{
	1: "hardware chosen on compute specs without the model's memory needs", 2: "training memory counted as weights only",
	3: "multi-GPU systems judged without the interconnect", 4: "\"busy\" watched instead of effective compute and bandwidth",
	5: "every generation upgraded, or old cards kept past their value", 6: "sharing without knowing hard vs soft isolation",
	7: "dense racks without power and cooling math", 8: "compute upgraded when the bottleneck is memory bandwidth",
	9: "virtualization not matched to the workload", 10: "uncoordinated driver and firmware updates",
	11: "no redundancy and no early-warning health checks", 12: "vendor benchmarks trusted",
	13: "hardware treated as an abstraction nobody understands", 14: "quantized to a format the card does not support natively",
	15: "horizontal scale where vertical was needed, or the reverse", 16: "new hardware, old software stack",
	17: "reactive procurement", 18: "accelerator vs GPU chosen from vendor claims", 19: "expertise held by one person",
	20: "a homogeneous fleet assumed", 21: "energy as an afterthought", 22: "a shared cluster with no policy and an opaque queue",
}

// blind are the mistakes no check measures.
var blind = []Blind{
	{2, "training memory is sized before submission (gpufleet plan --mode training); the store records what a job used, not how its code counts gradients, optimizer state and activations. The memory-oversized check sees the result."},
	{13, "understanding is not recorded; gpufleet explains every decision (reasons, plans, runbooks), and the runbook-missing check finds the gaps it can see."},
	{15, "whether a job should scale out or up depends on its model's parallel efficiency, which jobs do not report; gpufleet plan compares layouts before submission."},
	{18, "gpufleet bench compares cards on the same workload, but which product was bought on a vendor's claim is not recorded."},
	{20, "placement is heterogeneity-aware, but whether users' code assumes one GPU model (hard-coded batch sizes, kernels) is not visible."},
}

// Run audits a snapshot: every check, its findings by severity (worst
// first, then by cost), and what it could not measure.
func Run(s Snapshot) Report {
	r := Report{Now: s.Now, Since: s.Since, Findings: []Finding{}, Blind: blind, Counts: map[Severity]int{}, ByTeam: map[string]TeamTotal{}, Notes: []string{}}
	if !s.UsageFrom.IsZero() && s.UsageFrom.After(s.Since) && s.ranBefore(s.UsageFrom) {
		r.Notes = append(r.Notes, fmt.Sprintf("usage (rollups) is kept from %s only: the utilization and memory checks cover %s, not the whole period",
			s.UsageFrom.Format(time.DateOnly), s.Now.Sub(s.UsageFrom).Round(time.Hour)))
	}
	for _, c := range checks {
		fs, notMeasured := c.run(&s)
		res := CheckResult{ID: c.ID, Title: c.Title, Mistakes: c.Mistakes, Status: StatusOK, Findings: len(fs)}
		switch {
		case notMeasured != "":
			res.Status, res.NotMeasured = StatusNotMeasured, notMeasured
		case len(fs) > 0:
			res.Status = StatusFindings
		}
		for i := range fs {
			fs[i].Check, fs[i].Mistakes = c.ID, c.Mistakes
			if fs[i].Fix == "" {
				fs[i].Fix = c.Fix
			}
		}
		r.Findings = append(r.Findings, fs...)
		r.Checks = append(r.Checks, res)
	}
	sortFindings(r.Findings)
	for _, f := range r.Findings {
		if t := f.Subject.Team; t != "" {
			tt := r.ByTeam[t]
			tt.Findings++
			tt.GPUHours += value(f.GPUHours)
			if f.CostUSD != nil {
				tt.CostUSD = ptr(value(tt.CostUSD) + *f.CostUSD)
			}
			r.ByTeam[t] = tt
		}
	}
	r.Findings = group(r.Findings)
	for _, f := range r.Findings {
		r.Counts[f.Severity]++
	}
	return r
}

// sortFindings orders findings worst first, then by cost.
func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		if c := cmp.Compare(b.Severity.Rank(), a.Severity.Rank()); c != 0 {
			return c
		}
		return cmp.Compare(value(b.CostUSD), value(a.CostUSD))
	})
}

// group folds the findings of one check about jobs that ran on one node,
// or about GPUs of one node, into one row about the node: an operator
// reads a cause and a place once, with the count and a sample, not a row
// per job or GPU. fs is sorted worst first, so each row keeps its worst
// finding's words and severity.
func group(fs []Finding) []Finding {
	type key struct{ check, kind, node string }
	foldable := func(f Finding) bool {
		return (f.Subject.Kind == "job" || f.Subject.Kind == "gpu") && f.Subject.Node != ""
	}
	at := map[key]int{}
	var out []Finding
	for _, f := range fs {
		if !foldable(f) {
			out = append(out, f)
			continue
		}
		k := key{f.Check, f.Subject.Kind, f.Subject.Node}
		i, ok := at[k]
		if !ok {
			at[k] = len(out)
			f.Subjects, f.Count = []string{f.Subject.Name}, 1
			out = append(out, f)
			continue
		}
		g := &out[i]
		g.Subjects, g.Count = append(g.Subjects, f.Subject.Name), g.Count+1
		if f.GPUHours != nil {
			g.GPUHours = ptr(value(g.GPUHours) + *f.GPUHours)
		}
		if f.CostUSD != nil {
			g.CostUSD = ptr(value(g.CostUSD) + *f.CostUSD)
		}
		if f.Subject.Team != g.Subject.Team {
			g.Subject.Team = "" // several teams'
		}
	}
	for i := range out {
		f := &out[i]
		if f.Count < 2 {
			f.Subjects, f.Count = nil, 0
			continue
		}
		sample, what := f.Subject, "jobs on"
		if sample.Kind == "gpu" {
			what = "GPUs of"
		}
		f.Summary = fmt.Sprintf("%d %s node %s: %s (%s %s, the worst)", f.Count, what, sample.Node, f.Summary, sample.Kind, sample.Name)
		f.Evidence = fmt.Sprintf("%s %s: %s; the others: %s", sample.Kind, sample.Name, f.Evidence, strings.Join(f.Subjects[1:], ", "))
		f.Subject = Subject{Kind: "node", Name: sample.Node, Node: sample.Node, Team: sample.Team}
	}
	sortFindings(out)
	return out
}

// ranBefore reports whether an attempt of the snapshot ran before t: only
// then does a usage window shorter than the period leave work unjudged.
func (s *Snapshot) ranBefore(t time.Time) bool {
	for _, j := range s.Jobs {
		for _, a := range j.Attempts {
			if a.StartedAt != nil && a.StartedAt.Before(t) {
				return true
			}
		}
	}
	return false
}

func value(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func ptr[T any](v T) *T { return &v }

// Markdown renders docs/AUDIT.md from the checks: what each reads, its
// thresholds and its fix, and what no check can see.
func Markdown() string {
	var b strings.Builder
	b.WriteString("<!-- Generated from internal/audit by `go test ./internal/audit -run TestDoc -update`. Do not edit by hand. -->\n\n")
	b.WriteString("# Audit: the fleet against the twenty-two mistakes\n\n")
	b.WriteString("`gpufleet audit [--since 30d] [-o json] [--fail-on high]` (admin) runs every check below over what gpufleet records " +
		"(nodes, jobs and attempts, per-GPU per-minute usage, events, racks, stacks, benchmarks, the procurement and lifecycle decisions) " +
		"and prints each finding with its evidence, its size in GPU-hours and dollars where one can be put on it, and the fix. " +
		"`--fail-on SEVERITY` exits 1 when a finding is that bad or worse, for CI and cron. The dashboard's Audit page shows the same report, " +
		"and the server's `/metrics` exports `gpufleet_audit_findings{check,severity}` from its last audit (every 5 minutes by default).\n\n")
	b.WriteString("Each check is a pure function over a snapshot of the store (`internal/audit`), table-driven tested. A check with nothing to read " +
		"(no benchmarks yet, no stacks registered) says `not-measured` and why, rather than `ok`.\n\n")
	b.WriteString("Findings of one check about the jobs that ran on one node, or about the GPUs of one node, are one row about the node: " +
		"the count, the jobs or GPUs (`subjects`), their GPU-hours and cost summed, and the worst one's summary and evidence as the sample " +
		"(`3 jobs on node n1: ... (job j-1, the worst)`), so that an operator reads each cause and place once.\n\n")
	b.WriteString("| Check | Mistakes | What it reads and when it fires | Fix |\n|---|---|---|---|\n")
	for _, c := range checks {
		var ms []string
		for _, m := range c.Mistakes {
			ms = append(ms, fmt.Sprintf("%d", m))
		}
		fmt.Fprintf(&b, "| `%s`: %s | %s | %s | %s |\n", c.ID, c.Title, strings.Join(ms, ", "), c.Looks, c.Fix)
	}
	b.WriteString("\n## What no check can see\n\n")
	for _, bl := range blind {
		fmt.Fprintf(&b, "- **%d. %s.** %s\n", bl.Mistake, upperFirst(Mistakes[bl.Mistake]), bl.Why)
	}
	b.WriteString("\n## The mistakes and their checks\n\n| # | Mistake | Checks |\n|---|---|---|\n")
	for m := 1; m <= 22; m++ {
		var ids []string
		for _, c := range checks {
			if slices.Contains(c.Mistakes, m) {
				ids = append(ids, "`"+c.ID+"`")
			}
		}
		if len(ids) == 0 {
			ids = []string{"not measured (above)"}
		}
		fmt.Fprintf(&b, "| %d | %s | %s |\n", m, upperFirst(Mistakes[m]), strings.Join(ids, ", "))
	}
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	if s[0] == '"' {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/audit"
)

// newAuditCmd is `gpufleet audit`: the fleet checked against the
// twenty-two mistakes.
func newAuditCmd(e *env) *cobra.Command {
	c := &clientEnv{env: e, now: time.Now}
	var (
		since  time.Duration
		failOn string
	)
	cmd := &cobra.Command{
		Use:   "audit [--since 30d] [--fail-on high] [-o json]",
		Short: "Check the fleet for the mistakes gpufleet exists to prevent: idle allocated GPUs, wrong formats, PCIe splits, soft isolation under production, ...",
		Long: `Runs every audit check (admin) over what the server recorded in the period:
nodes, jobs and attempts, per-GPU per-minute usage, events, racks, stacks,
benchmarks, and the procurement and lifecycle decisions. Each finding has its
evidence, its size in GPU-hours and dollars where one can be put on it, and
the fix; findings come worst first. Checks with nothing to read say so
(not-measured), and the mistakes no check can see are listed with why.
docs/AUDIT.md lists the checks and their thresholds.

--fail-on SEVERITY exits 1 when a finding is that bad or worse (high,
medium or low), after printing the report: for CI and cron.`,
		Example: `  gpufleet audit
  gpufleet audit --since 7d --fail-on high
  gpufleet audit -o json | jq '.findings[] | select(.check == "idle-allocated")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			days := since / (24 * time.Hour)
			if since%(24*time.Hour) != 0 || days < 1 || days > api.MaxAuditDays {
				return usageErr("--since %s: expected whole days from 1d to %dd", since, api.MaxAuditDays)
			}
			var fail audit.Severity
			if failOn != "" {
				var err error
				if fail, err = audit.ParseSeverity(failOn); err != nil {
					return usageErr("--fail-on %s: expected high, medium or low", failOn)
				}
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			rep, err := cl.Audit(cmd.Context(), api.AuditQuery{SinceDays: int(days)})
			if err != nil {
				return err
			}
			if e.output == outputJSON {
				err = writeJSON(e.stdout, rep)
			} else {
				err = printAudit(e.stdout, rep, e.output == outputWide)
			}
			if err != nil {
				return err
			}
			if fail != "" && rep.Worst().Rank() >= fail.Rank() {
				return &exitError{code: 1, err: fmt.Errorf("audit: %d finding(s) at %s or worse", atLeast(rep, fail), fail)}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	durationFlag(fs, &since, "since", 30*24*time.Hour, "the period audited, in whole days (30d)")
	fs.StringVar(&failOn, "fail-on", "", "exit 1 when a finding is this severe or worse: high, medium or low")
	_ = cmd.RegisterFlagCompletionFunc("fail-on", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"high", "medium", "low"}, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func atLeast(r audit.Report, s audit.Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity.Rank() >= s.Rank() {
			n++
		}
	}
	return n
}

// printAudit writes the findings, then the checks that found nothing or
// could not look, then what no check can see. wide adds the evidence and
// fix columns' full text on lines of their own.
func printAudit(w io.Writer, r audit.Report, wide bool) error {
	fmt.Fprintf(w, "Audit of %s to %s: %d high, %d medium, %d low\n", r.Since.Format(time.DateOnly), r.Now.Format(time.DateOnly),
		r.Counts[audit.High], r.Counts[audit.Medium], r.Counts[audit.Low])
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if len(r.Findings) > 0 {
		fmt.Fprintln(w)
		t := newTable(w, "SEVERITY", "CHECK", "MISTAKE", "SUBJECT", "TEAM", "GPU-H", "COST", "FINDING")
		for _, f := range r.Findings {
			t.row(string(f.Severity), f.Check, mistakes(f.Mistakes), f.Subject.Kind+" "+f.Subject.Name, orDash(f.Subject.Team),
				optNum(f.GPUHours), optUSD(f.CostUSD), f.Summary)
		}
		if err := t.flush(); err != nil {
			return err
		}
		fmt.Fprintln(w)
		for i, f := range r.Findings {
			if !wide && i >= 10 {
				fmt.Fprintf(w, "... and %d more: -o wide shows every finding's evidence and fix\n", len(r.Findings)-i)
				break
			}
			fmt.Fprintf(w, "%s %s %s: %s\n  evidence: %s\n  fix: %s\n", f.Severity, f.Check, f.Subject.Name, f.Summary, f.Evidence, f.Fix)
		}
	}
	if len(r.ByTeam) > 0 {
		fmt.Fprintln(w)
		t := newTable(w, "TEAM", "FINDINGS", "GPU-H", "COST")
		for _, name := range slices.Sorted(maps.Keys(r.ByTeam)) {
			tt := r.ByTeam[name]
			t.row(name, strconv.Itoa(tt.Findings), strconv.FormatFloat(tt.GPUHours, 'g', 3, 64), optUSD(tt.CostUSD))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	t := newTable(w, "CHECK", "MISTAKE", "STATUS", "FINDINGS", "WHY NOT MEASURED")
	for _, c := range r.Checks {
		t.row(c.ID, mistakes(c.Mistakes), c.Status, strconv.Itoa(c.Findings), orDash(c.NotMeasured))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	var blind []string
	for _, b := range r.Blind {
		blind = append(blind, strconv.Itoa(b.Mistake))
	}
	_, err := fmt.Fprintf(w, "Not measurable from what gpufleet records: mistakes %s (docs/AUDIT.md says why).\n", strings.Join(blind, ", "))
	return err
}

func mistakes(ms []int) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = strconv.Itoa(m)
	}
	return strings.Join(parts, ",")
}

func optNum(p *float64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(*p, 'g', 3, 64)
}

func optUSD(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("$%.2f", *p)
}

package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/audit"
)

// auditView is the Audit page: the fleet checked against the twenty-two
// mistakes, findings by severity with links to what they are about
// (docs/AUDIT.md).
type auditView struct {
	Admin  bool
	Err    string
	Since  string
	Counts []auditCount
	Groups []auditGroup
	Checks []audit.CheckResult
	Blind  []audit.Blind
	Notes  []string
}

type auditCount struct {
	Severity string
	N        int
}

type auditGroup struct {
	Severity string
	Rows     []auditRow
}

type auditRow struct {
	Check, Mistakes, Subject, Href, Team string
	Summary, Evidence, Fix               string
	GPUHours, Cost                       string
}

// auditHref is the page of what a finding is about, or "".
func auditHref(s audit.Subject) string {
	switch s.Kind {
	case "job":
		return "/jobs/" + url.PathEscape(s.Name)
	case "node":
		return "/nodes/" + url.PathEscape(s.Name)
	case "gpu":
		if s.Node != "" {
			return "/nodes/" + url.PathEscape(s.Node)
		}
	case "team":
		return "/teams"
	case "model":
		return "/capacity"
	case "rack":
		return "/"
	case "fleet":
		return "/queue"
	}
	return ""
}

func (u *UI) auditPage(r *http.Request, v *viewer) (view, error) {
	av := auditView{Admin: v.Admin()}
	out := view{page: "audit", title: "Audit", nav: "audit", data: &av}
	if !av.Admin {
		av.Err = "The audit reads every team's work: it is shown to administrators."
		return out, nil
	}
	as, ok := u.svc.(api.AuditService)
	if !ok {
		av.Err = "This server audits nothing."
		return out, nil
	}
	days := 30
	if s := r.URL.Query().Get("since"); s != "" {
		d, err := gpufleet.ParseDuration(s)
		if err != nil || d%(24*time.Hour) != 0 || d <= 0 || int(d.Hours()/24) > api.MaxAuditDays {
			av.Err = fmt.Sprintf("since %s: expected whole days from 1d to %dd", gpufleet.Quote(s), api.MaxAuditDays)
			return out, nil
		}
		days = int(d.Hours() / 24)
	}
	rep, err := as.Audit(r.Context(), v.P, api.AuditQuery{SinceDays: days})
	if errors.Is(err, gpufleet.ErrInvalid) {
		av.Err = err.Error()
		return out, nil
	}
	if err != nil {
		return view{}, fmt.Errorf("audit: %w", err)
	}
	av.Since = fmt.Sprintf("%s to %s (%dd)", rep.Since.Format("2006-01-02"), rep.Now.Format("2006-01-02 15:04 MST"), days)
	av.Checks, av.Blind, av.Notes = rep.Checks, rep.Blind, rep.Notes
	for _, sev := range []audit.Severity{audit.High, audit.Medium, audit.Low} {
		av.Counts = append(av.Counts, auditCount{string(sev), rep.Counts[sev]})
		g := auditGroup{Severity: string(sev)}
		for _, f := range rep.Findings {
			if f.Severity != sev {
				continue
			}
			subject := f.Subject.Kind + " " + f.Subject.Name
			if f.Subject.Title != "" {
				subject += " (" + f.Subject.Title + ")"
			}
			row := auditRow{Check: f.Check, Mistakes: mistakeList(f.Mistakes), Subject: subject, Href: auditHref(f.Subject),
				Team: orDash(f.Subject.Team), Summary: f.Summary, Evidence: f.Evidence, Fix: f.Fix, GPUHours: dash, Cost: dash}
			if f.GPUHours != nil {
				row.GPUHours = strconv.FormatFloat(*f.GPUHours, 'g', 3, 64)
			}
			if f.CostUSD != nil {
				row.Cost = fmt.Sprintf("$%.2f", *f.CostUSD)
			}
			g.Rows = append(g.Rows, row)
		}
		if len(g.Rows) > 0 {
			av.Groups = append(av.Groups, g)
		}
	}
	return out, nil
}

func mistakeList(ms []int) string {
	s := ""
	for i, m := range ms {
		if i > 0 {
			s += ", "
		}
		s += strconv.Itoa(m)
	}
	return s
}

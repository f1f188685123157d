package web

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// pendingRow is one queued job.
type pendingRow struct {
	ID, Name, Team, Priority string
	Position, TeamPosition   int
	GPUs                     int
	Reason, ReasonCode       string
	ETA, ETATitle            string
	Waiting                  string
	// The reason as data: nodes evaluated, left out per filter, and the
	// dimension exhausted with what the job needs and the most there is.
	Evaluated int
	Filtered  []gpufleet.FilterCount
	Exhausted string
	// Holds is what holds it that is not about nodes: the job it waits
	// behind, the reservation, the victims, the slower model, the stack.
	Holds []hold
}

// hold is one datum of what holds a queued job: Key names the
// explanation's field (data-held), Text says it, Job is a job it names.
type hold struct {
	Key, Text, Job string
}

// explained fills a row's counts from its queue entry's explanation.
func (r *pendingRow) explained(e *gpufleet.Explanation) {
	if e == nil {
		return
	}
	r.Evaluated, r.Filtered = e.NodesEvaluated, e.NodesFiltered
	switch e.Exhausted {
	case "":
	case gpufleet.DimRackPower:
		r.Exhausted = "rack power"
		if e.Rack != nil {
			r.Exhausted += " (rack " + e.Rack.Rack + ")"
		}
	case gpufleet.DimQuota:
		r.Exhausted = "quota"
	default:
		r.Exhausted = fmt.Sprintf("%s (needs %d, most %d)", e.Exhausted, e.Need, e.Most)
	}
	r.Holds = holdsOf(e)
}

// holdsOf is an explanation's data of the reasons not about nodes.
func holdsOf(e *gpufleet.Explanation) []hold {
	var out []hold
	if b := e.Blocker; b != nil {
		out = append(out, hold{Key: "blocker", Text: fmt.Sprintf("behind (position %d)", b.Position), Job: b.Job})
	}
	if r := e.Reservation; r != nil {
		out = append(out, hold{Key: "reservation", Text: "reserved at " + r.Start.UTC().Format(time.RFC3339) + " for", Job: r.Job})
	}
	if p := e.Preemption; p != nil {
		out = append(out, hold{Key: "preemption", Text: fmt.Sprintf("%d victims, grace up to %s", p.Victims, time.Duration(p.GraceS*float64(time.Second)).Round(time.Second))})
	}
	if s := e.Slower; s != nil {
		out = append(out, hold{Key: "slower", Text: "slower " + s.Model + " has room"})
	}
	if s := e.Stack; s != nil && s.Node != "" {
		out = append(out, hold{Key: "stack", Text: "node " + s.Node + " lacks " + s.Unmet})
	}
	if e.CycleLimit > 0 {
		out = append(out, hold{Key: "cycle_limit", Text: fmt.Sprintf("cycle limit %d", e.CycleLimit)})
	}
	if e.SpareHeld > 0 {
		out = append(out, hold{Key: "spare_held", Text: fmt.Sprintf("%d GPUs held spare", e.SpareHeld)})
	}
	if e.SearchLimit > 0 {
		out = append(out, hold{Key: "search_limit", Text: fmt.Sprintf("preemption search limit %d", e.SearchLimit)})
	}
	return out
}

// runningRow is one job holding GPUs.
type runningRow struct {
	ID, Name, Team, Priority, State string
	Where                           string
	GPUs                            int
	Started                         string
	Elapsed                         string
	Estimate                        string
	Limit                           string
	CancelRequested                 bool
}

// queueView is the queue page.
type queueView struct {
	Pending []pendingRow
	Running []runningRow
}

// etaText says when a queued job should start, in words, with the
// absolute time for the tooltip.
// etaText is a queue entry's estimated start in words, and the title that
// explains it: the median, the p90 and how often the median was right for
// similar recent jobs.
func etaText(e gpufleet.QueueEntry, now time.Time) (string, string) {
	eta := e.EstimatedStart
	if eta == nil && scheduler.NeverStarts(e.ReasonCode) {
		return "never, as submitted", "No node of the fleet can ever run this job as submitted (or its team's quota never allows it); change its request."
	}
	if eta == nil {
		return "no estimate yet", "The scheduler has no start estimate for this job: nothing running now frees enough GPUs for it."
	}
	in := func(t time.Time) string {
		if d := t.Sub(now); d > 0 {
			return "in " + gpufleet.FormatDuration(d)
		}
		return "any moment"
	}
	text, title := in(*eta), "Median estimated start "+fmtClock(*eta)
	if p := e.EstimatedStartP90; p != nil && p.After(*eta) {
		text += " (90% by " + strings.TrimPrefix(in(*p), "in ") + ")"
		title += "; 9 in 10 similar jobs started by " + fmtClock(*p)
	}
	if c := e.ETAConfidence; c != nil {
		title += fmt.Sprintf("; %.0f%% of similar recent jobs started within an hour or 25%% of their median", *c*100)
		if *c < 0.3 {
			text += ", uncertain"
		}
	} else {
		title += "; not calibrated yet: too few jobs have started since this server began to lead, so this is the scheduler's simulation alone"
	}
	if e.Estimate != nil {
		title += "; planned on a run of " + e.Estimate.String()
	}
	return text, title + "."
}

func (u *UI) queuePage(r *http.Request, v *viewer) (view, error) {
	ctx := r.Context()
	entries, err := u.svc.Queue(ctx, v.P)
	if err != nil {
		return view{}, fmt.Errorf("queue: %w", err)
	}
	active, err := u.svc.Jobs(ctx, v.P, api.JobQuery{States: []gpufleet.JobState{gpufleet.JobQueued, gpufleet.JobScheduled, gpufleet.JobRunning}, Limit: api.MaxPageLimit})
	if err != nil {
		return view{}, fmt.Errorf("jobs: %w", err)
	}
	byID := map[string]gpufleet.Job{}
	for _, j := range active.Jobs {
		byID[j.ID] = j
	}
	now := u.now()
	var qv queueView
	for _, e := range entries {
		row := pendingRow{ID: e.ID, Team: e.Team, Priority: string(e.Priority), Position: e.Position, TeamPosition: e.TeamPosition,
			Reason: e.Reason, ReasonCode: e.ReasonCode}
		row.explained(e.Explanation)
		if j, ok := byID[e.ID]; ok {
			row.Name, row.GPUs = j.Name, j.Resources.GPUs
			row.Waiting = gpufleet.FormatDuration(now.Sub(j.SubmittedAt))
		}
		row.ETA, row.ETATitle = etaText(e, now)
		qv.Pending = append(qv.Pending, row)
	}
	for _, j := range active.Jobs {
		if j.State == gpufleet.JobQueued {
			continue
		}
		qv.Running = append(qv.Running, newRunningRow(j, now))
	}
	slices.SortFunc(qv.Running, func(a, b runningRow) int { return strings.Compare(a.ID, b.ID) })
	return view{page: "queue", title: "Queue", nav: "queue", live: "/ui/queue", data: qv}, nil
}

func newRunningRow(j gpufleet.Job, now time.Time) runningRow {
	row := runningRow{ID: j.ID, Name: j.Name, Team: j.Team, Priority: string(j.Priority), State: string(j.State),
		GPUs: j.Resources.GPUs, Started: dash, Elapsed: dash, Estimate: dash, Limit: fmtSecondsPtr(j.TimeLimitS),
		CancelRequested: j.CancelRequested}
	if a := lastAttempt(j); a != nil {
		var where []string
		for _, n := range a.Nodes {
			where = append(where, fmt.Sprintf("%s (%d)", n.Name, len(n.GPUs)))
		}
		if len(where) == 0 && a.Node != "" {
			where = append(where, fmt.Sprintf("%s (%d)", a.Node, len(a.GPUs)))
		}
		row.Where = strings.Join(where, ", ")
	}
	start := j.StartedAt
	if a := lastAttempt(j); a != nil && a.StartedAt != nil {
		start = a.StartedAt
	}
	if start != nil {
		row.Started = fmtClock(*start)
		el := now.Sub(*start)
		row.Elapsed = gpufleet.FormatDuration(el)
		if j.EstimateS != nil {
			left := time.Duration(*j.EstimateS*float64(time.Second)) - el
			if left >= 0 {
				row.Estimate = "about " + gpufleet.FormatDuration(left) + " left"
			} else {
				row.Estimate = gpufleet.FormatDuration(-left) + " over its estimate"
			}
		}
	}
	return row
}

// lastAttempt is the job's latest attempt, or nil.
func lastAttempt(j gpufleet.Job) *gpufleet.Attempt {
	if len(j.Attempts) == 0 {
		return nil
	}
	return &j.Attempts[len(j.Attempts)-1]
}

// jobRow is one line of the jobs list.
type jobRow struct {
	ID, Name, Team, State, Priority string
	GPUs                            int
	Submitted                       string
	Took                            string
	Terminal                        bool
}

// jobsView is the jobs list.
type jobsView struct {
	Jobs  []jobRow
	All   bool
	Total int
}

func (u *UI) jobsPage(r *http.Request, v *viewer) (view, error) {
	all := r.URL.Query().Get("all") != "0"
	list, err := u.svc.Jobs(r.Context(), v.P, api.JobQuery{All: all, Limit: 200})
	if err != nil {
		return view{}, fmt.Errorf("jobs: %w", err)
	}
	now := u.now()
	jv := jobsView{All: all}
	jobs := list.Jobs
	slices.SortStableFunc(jobs, func(a, b gpufleet.Job) int { return b.SubmittedAt.Compare(a.SubmittedAt) })
	for _, j := range jobs {
		row := jobRow{ID: j.ID, Name: j.Name, Team: j.Team, State: string(j.State), Priority: string(j.Priority),
			GPUs: j.Resources.GPUs, Submitted: fmtClock(j.SubmittedAt), Took: dash, Terminal: j.State.Terminal()}
		if j.StartedAt != nil {
			end := now
			if j.FinishedAt != nil {
				end = *j.FinishedAt
			}
			row.Took = gpufleet.FormatDuration(end.Sub(*j.StartedAt))
		}
		jv.Jobs = append(jv.Jobs, row)
	}
	jv.Total = len(jv.Jobs)
	live := "/ui/jobs"
	if !all {
		live += "?all=0"
	}
	return view{page: "jobs", title: "Jobs", nav: "jobs", live: live, data: jv}, nil
}

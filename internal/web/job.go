package web

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// specRow is one line of a job's spec.
type specRow struct{ Key, Value string }

// attemptRow is one attempt of a job.
type attemptRow struct {
	ID, State, Node, GPUs, GPUsTitle string
	// GPUCount and GPUList are GPUs as a count and the short ids, each
	// kept whole in its cell.
	GPUCount                 int
	GPUList                  []string
	Started, Finished, Took  string
	Exit, Reason, ReasonCode string
	Energy, Work, PerUnit    string
	// Isolation is what the attempt got (mechanism and isolation), and
	// IsolationTitle says it in full.
	Isolation, IsolationTitle string
}

// jobView is the job page.
type jobView struct {
	ID, Name, Team, State, Priority string
	CancelRequested, CanCancel      bool
	Spec                            []specRow
	Command                         string
	Queue                           *pendingRow
	Attempts                        []attemptRow
	Util, Memory                    lineChart
	// PerGPU is set when the page shows each GPU on its own small chart
	// (?per_gpu=1): UtilPerGPU and MemoryPerGPU, in GPU order. GPUCount
	// is how many GPUs the charts cover; PerGPUURL and BandURL switch
	// between the views.
	PerGPU                   bool
	UtilPerGPU, MemoryPerGPU []lineChart
	GPUCount                 int
	PerGPUURL, BandURL       string
	HasLogs                  bool
	Window                   string
	// ChartsLive is the charts' fragment URL; ChartsPollMS its interval.
	ChartsLive   string
	ChartsPollMS int
	// LogLive is the log tail's URL.
	LogLive string
}

// chartWindow is how far back the job charts reach at most.
const chartWindow = 6 * time.Hour

func (u *UI) jobPage(r *http.Request, v *viewer) (view, error) { return u.job(r, v, true) }

// jobFragment is the job page's live region, without the charts.
func (u *UI) jobFragment(r *http.Request, v *viewer) (view, error) { return u.job(r, v, false) }

// jobChartsFragment is the job page's charts alone.
func (u *UI) jobChartsFragment(r *http.Request, v *viewer) (view, error) {
	vw, err := u.job(r, v, true)
	vw.tmpl = "charts"
	return vw, err
}

// job builds the job page, with the charts (two more service calls) when
// asked.
func (u *UI) job(r *http.Request, v *viewer, charts bool) (view, error) {
	ctx := r.Context()
	id := r.PathValue("id")
	j, err := u.svc.Job(ctx, v.P, id)
	if err != nil {
		return view{}, fmt.Errorf("job %s: %w", id, err)
	}
	now := u.now()
	perGPU := r.URL.Query().Get("per_gpu") == "1"
	jv := jobView{ID: j.ID, Name: j.Name, Team: j.Team, State: string(j.State), Priority: string(j.Priority),
		CancelRequested: j.CancelRequested, CanCancel: !j.State.Terminal() && !j.CancelRequested, HasLogs: u.logs != nil,
		ChartsLive: "/ui/jobs/" + url.PathEscape(j.ID) + "/charts", ChartsPollMS: chartPollMS,
		LogLive: "/ui/jobs/" + url.PathEscape(j.ID) + "/log", PerGPU: perGPU,
		PerGPUURL: "/jobs/" + url.PathEscape(j.ID) + "?per_gpu=1#charts-h", BandURL: "/jobs/" + url.PathEscape(j.ID) + "#charts-h"}
	if perGPU {
		jv.ChartsLive += "?per_gpu=1"
	}
	jv.Spec = jobSpec(j)
	jv.Command = shellJoin(j.Command)
	if j.Queue != nil {
		e := *j.Queue
		row := pendingRow{ID: j.ID, Position: e.Position, TeamPosition: e.TeamPosition, Reason: e.Reason, ReasonCode: e.ReasonCode}
		row.explained(e.Explanation)
		row.ETA, row.ETATitle = etaText(e, now)
		jv.Queue = &row
	} else if j.State == gpufleet.JobQueued {
		jv.Queue = &pendingRow{ID: j.ID, Reason: "waiting for the scheduler", ETA: "no estimate yet"}
	}
	for _, a := range j.Attempts {
		jv.Attempts = append(jv.Attempts, newAttemptRow(a, j.Work.UnitName(), now))
	}
	if charts && len(j.Attempts) > 0 {
		u.jobCharts(r, v, j, &jv, now)
	}
	return view{page: "job", title: "Job " + j.ID, nav: "jobs", live: "/ui/jobs/" + url.PathEscape(j.ID), data: jv}, nil
}

// shellJoin writes a command as a shell would take it, quoting the
// arguments that need it.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && !strings.ContainsFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@%+", r))
		}) {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

func jobSpec(j gpufleet.Job) []specRow {
	res := j.Resources
	rows := []specRow{
		{"GPUs", strconv.Itoa(res.GPUs)},
		{"Submitted", fmtClock(j.SubmittedAt)},
		// The job's started_at is when its first attempt began running
		// on its node; an attempt's start is when the scheduler placed
		// it (its GPUs held from then), a little earlier.
		{"First running", fmtClockPtr(j.StartedAt)},
		{"Finished", fmtClockPtr(j.FinishedAt)},
		{"Time limit", fmtSecondsPtr(j.TimeLimitS)},
		{"Estimate", fmtSecondsPtr(j.EstimateS)},
		{"Preemptible", strconv.FormatBool(j.Preemptible)},
		{"Retries", j.Retries.String()},
		{"Interruptions", strconv.Itoa(j.Interruptions)},
	}
	opt := func(k, v string) {
		if v != "" {
			rows = append(rows, specRow{k, v})
		}
	}
	if res.Nodes > 0 {
		opt("Nodes", strconv.Itoa(res.Nodes))
	}
	opt("GPU models", strings.Join(res.GPUModels, ", "))
	if res.GPUMemoryMinBytes > 0 {
		opt("GPU memory at least", fmtBytes(int64(res.GPUMemoryMinBytes)))
	}
	opt("Compute capability at least", res.MinComputeCapability.String())
	opt("Precision", string(res.Precision))
	opt("Interconnect", string(res.Interconnect))
	if !res.Sharing.IsZero() {
		opt("Sharing", res.Sharing.String())
	}
	opt("Prefer", string(res.Prefer))
	var sel []string
	for _, k := range slices.Sorted(maps.Keys(res.NodeSelector)) {
		sel = append(sel, k+"="+res.NodeSelector[k])
	}
	opt("Node selector", strings.Join(sel, ", "))
	opt("Workdir", j.Workdir)
	if j.Container() {
		opt("Image", j.Image+" (pull "+string(j.ImagePullPolicy.Or())+")")
	}
	var mounts []string
	for _, m := range j.Mounts {
		mounts = append(mounts, m.String())
	}
	opt("Mounts", strings.Join(mounts, ", "))
	if j.ShmSize > 0 {
		opt("Shared memory", fmt.Sprintf("%.1f GiB", float64(j.ShmSize)/(1<<30)))
	}
	opt("Stops", gpufleet.StopProtocol(j.StopSignal))
	opt("Simulated load", string(j.SimLoad))
	if j.Work != nil {
		opt("Work counter", fmt.Sprintf("%s, in %s", j.Work.Metric, j.Work.UnitName()))
	}
	opt("Request id", j.RequestID)
	return rows
}

func newAttemptRow(a gpufleet.Attempt, unit string, now time.Time) attemptRow {
	row := attemptRow{ID: a.ID, State: string(a.State), Node: a.Node, Started: fmtClockPtr(a.StartedAt),
		Finished: fmtClockPtr(a.FinishedAt), Took: dash, Exit: dash, Reason: a.Reason, ReasonCode: a.ReasonCode,
		Energy: fmtEnergy(a.EnergyJoules), Work: dash, PerUnit: dash, Isolation: dash}
	if m := a.Mechanism; m != nil {
		row.Isolation, row.IsolationTitle = m.Short()+" · "+m.Name, m.Describe()
	}
	if a.Work != nil {
		row.Work = strconv.FormatFloat(*a.Work, 'g', 4, 64) + " " + unit
		if *a.Work > 0 {
			row.PerUnit = strconv.FormatFloat(a.EnergyJoules / *a.Work, 'g', 3, 64) + " J"
		}
	}
	var gpus, short []string
	nodes := a.Nodes
	if len(nodes) == 0 && a.Node != "" {
		nodes = []gpufleet.AttemptNode{{Name: a.Node, GPUs: a.GPUs}}
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
		gpus = append(gpus, n.GPUs...)
		for _, g := range n.GPUs {
			short = append(short, shortID(g))
		}
	}
	row.Node = strings.Join(names, ", ")
	row.GPUs = fmt.Sprintf("%d: %s", len(gpus), strings.Join(short, " "))
	row.GPUCount, row.GPUList = len(gpus), short
	row.GPUsTitle = strings.Join(gpus, " ")
	if a.StartedAt != nil {
		end := now
		if a.FinishedAt != nil {
			end = *a.FinishedAt
		}
		row.Took = gpufleet.FormatDuration(end.Sub(*a.StartedAt))
	}
	if a.ExitCode != nil {
		row.Exit = gpufleet.ExitText(*a.ExitCode)
	}
	return row
}

// jobCharts draws the job's effective utilization and memory from the
// per-minute rollups of the GPUs its attempts held: by default the mean
// across its GPUs with their lowest-to-highest range as a band, and with
// ?per_gpu=1 one small chart per GPU.
func (u *UI) jobCharts(r *http.Request, v *viewer, j gpufleet.Job, jv *jobView, now time.Time) {
	from := now.Add(-chartWindow)
	if first := j.Attempts[0].StartedAt; first != nil && first.After(from) {
		from = first.Truncate(time.Minute)
	}
	to := now
	if j.FinishedAt != nil && j.FinishedAt.Before(now) {
		to = j.FinishedAt.Add(time.Minute)
	}
	if to.Sub(from) < 10*time.Minute { // a readable minimum window
		from = to.Add(-10 * time.Minute)
	}
	jv.Window = fmtClock(from) + " to " + fmtClock(to)
	rs, err := u.svc.Rollups(r.Context(), v.P, api.RollupQuery{JobID: j.ID, From: from, To: to})
	if err != nil {
		u.log.LogAttrs(r.Context(), slog.LevelWarn, "job rollups", slog.String("job", j.ID), slog.Any("err", err))
		jv.Util.Empty, jv.Memory.Empty = "Utilization history is unavailable.", "Memory history is unavailable."
		jv.Util.W, jv.Memory.W, jv.Util.H, jv.Memory.H = chartW, chartW, 40, 40
		return
	}
	util, mem, memMax := rollupSeries(rs, u.gpuNames(r, v))
	jv.GPUCount = len(util)
	pct := func(x float64) string { return strconv.Itoa(int(math.Round(x*100))) + "%" }
	gib := func(x float64) string { return fmtBytes(x) }
	const gap = 150 * time.Second
	if jv.PerGPU && len(util) > 1 {
		jv.UtilPerGPU = buildSmallMultiples(from, to, 1, pct, util, gap)
		jv.MemoryPerGPU = buildSmallMultiples(from, to, memMax, gib, mem, gap)
		return
	}
	utilTitle, memTitle := "Effective utilization", "Memory used"
	utilDesc, memDesc := "Effective utilization (SM activity where the GPU reports it, else utilization) of the job's GPU, per minute.",
		"Peak memory used on the job's GPU, per minute."
	if len(util) > 1 {
		of := gpusCharted(len(util), j.Resources.GPUs)
		utilTitle = "Effective utilization, mean and range of " + of
		memTitle = "Memory used, mean and range of " + of
		utilDesc = "Effective utilization (SM activity where the GPU reports it, else utilization) per minute: the mean across the job's GPUs as a line, the lowest to the highest GPU as a band."
		memDesc = "Peak memory used per minute: the mean across the job's GPUs as a line, the lowest to the highest GPU as a band."
	}
	jv.Util = buildBandChart(utilTitle, utilDesc, from, to, 1, pct, util, gap)
	jv.Memory = buildBandChart(memTitle, memDesc, from, to, memMax, gib, mem, gap)
}

// gpusCharted names the GPUs a job's charts average: a job requeued onto
// other GPUs has rollups of more GPUs than it holds at a time, "the 16
// GPUs its attempts held, 8 at a time", not "16 GPUs" for an 8-GPU job.
func gpusCharted(charted, held int) string {
	if held > 0 && charted > held {
		return fmt.Sprintf("the %d GPUs its attempts held, %d at a time", charted, held)
	}
	return fmt.Sprintf("%d GPUs", charted)
}

// gpuName is how a chart names a GPU or MIG instance, and where it sorts:
// by node, then GPU index, then MIG instance.
type gpuName struct {
	Label      string
	Node       string
	Index, MIG int
}

// gpuNames maps GPU and MIG UUIDs to "node GPU n" from the nodes the
// viewer may see.
func (u *UI) gpuNames(r *http.Request, v *viewer) map[string]gpuName {
	out := map[string]gpuName{}
	nodes, err := u.svc.Nodes(r.Context(), v.P)
	if err != nil {
		return out
	}
	for _, n := range nodes {
		for _, g := range n.GPUs {
			out[g.UUID] = gpuName{Label: fmt.Sprintf("%s GPU %d", n.Name, g.Index), Node: n.Name, Index: g.Index, MIG: -1}
			for i, m := range g.MIGInstances {
				out[m.UUID] = gpuName{Label: fmt.Sprintf("%s GPU %d MIG %d (%s)", n.Name, g.Index, i, m.Profile), Node: n.Name, Index: g.Index, MIG: i}
			}
		}
	}
	return out
}

// rollupSeries splits rollups into one utilization and one memory series
// per GPU, ordered by node and GPU index (GPUs the viewer cannot name
// last, by UUID), and returns the memory axis' top (the largest reading,
// rounded up).
func rollupSeries(rs []api.GPURollup, names map[string]gpuName) (util, mem []seriesData, memMax float64) {
	type gpuSeries struct {
		uuid      string
		name      gpuName
		util, mem seriesData
	}
	byGPU := map[string]*gpuSeries{}
	for _, x := range rs {
		g := byGPU[x.GPU]
		if g == nil {
			n, ok := names[x.GPU]
			if !ok {
				n = gpuName{Label: x.Node + " " + shortID(x.GPU), Node: x.Node, Index: math.MaxInt, MIG: -1}
			}
			g = &gpuSeries{uuid: x.GPU, name: n, util: seriesData{Name: n.Label}, mem: seriesData{Name: n.Label}}
			byGPU[x.GPU] = g
		}
		uv, mv := math.NaN(), math.NaN()
		if x.EffectiveUtilization != nil {
			uv = *x.EffectiveUtilization
		}
		if x.MemoryUsedBytesMax != nil {
			mv = float64(*x.MemoryUsedBytesMax)
			memMax = math.Max(memMax, mv)
		}
		g.util.Points = append(g.util.Points, point{T: x.Minute, V: uv})
		g.mem.Points = append(g.mem.Points, point{T: x.Minute, V: mv})
	}
	gs := slices.Collect(maps.Values(byGPU))
	slices.SortFunc(gs, func(a, b *gpuSeries) int {
		return cmp.Or(strings.Compare(a.name.Node, b.name.Node), cmp.Compare(a.name.Index, b.name.Index),
			cmp.Compare(a.name.MIG, b.name.MIG), strings.Compare(a.uuid, b.uuid))
	})
	for _, g := range gs {
		byTime := func(a, b point) int { return a.T.Compare(b.T) }
		slices.SortStableFunc(g.util.Points, byTime)
		slices.SortStableFunc(g.mem.Points, byTime)
		util, mem = append(util, g.util), append(mem, g.mem)
	}
	const gib = 1 << 30
	memMax = math.Max(gib, math.Ceil(memMax/(8*gib))*8*gib)
	return util, mem, memMax
}

// logTail is how much of a job's log the page shows.
const logTail = 32 << 10

// tailWriter keeps the last n bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
	n   int
	cut bool
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.n {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.n:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > t.n {
		b, t.cut = b[len(b)-t.n:], true
	}
	if t.cut {
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
		return "[… earlier output cut; the CLI's `gpufleet logs` has all of it]\n" + strings.ToValidUTF8(string(b), "�")
	}
	return strings.ToValidUTF8(string(b), "�")
}

// jobLog is the live log tail fragment: plain text, the last 32 KiB of the
// latest attempt's log.
func (u *UI) jobLog(r *http.Request, v *viewer) (view, error) {
	id := r.PathValue("id")
	if u.logs == nil {
		return view{data: "(logs are not available on this server)"}, nil
	}
	t := &tailWriter{n: logTail}
	if err := u.logs.Logs(r.Context(), v.P, id, api.LogQuery{}, t); err != nil {
		if errors.Is(err, gpufleet.ErrNotFound) {
			// A job that exists but has not started has no log yet.
			if _, jerr := u.svc.Job(r.Context(), v.P, id); jerr == nil {
				return view{data: "(no output yet)"}, nil
			}
		}
		return view{}, fmt.Errorf("logs of %s: %w", id, err)
	}
	s := t.String()
	if s == "" {
		s = "(no output yet)"
	}
	return view{data: s}, nil
}

// confirmData is the confirmation page of an action.
type confirmData struct {
	Heading, Message, Action, Button, Back string
	Danger                                 bool
}

func (u *UI) cancelConfirm(r *http.Request, v *viewer) (view, error) {
	id := r.PathValue("id")
	j, err := u.svc.Job(r.Context(), v.P, id)
	if err != nil {
		return view{}, fmt.Errorf("job %s: %w", id, err)
	}
	name := j.ID
	if j.Name != "" {
		name += " (" + j.Name + ")"
	}
	cd := confirmData{Heading: "Cancel job " + name + "?",
		Message: "Its running attempt gets the stop signal and its grace period; the job then turns cancelled. This cannot be undone.",
		Action:  "/jobs/" + url.PathEscape(j.ID) + "/cancel", Button: "Cancel job", Back: "/jobs/" + url.PathEscape(j.ID), Danger: true}
	return view{page: "confirm", title: "Cancel job " + j.ID, nav: "jobs", data: cd}, nil
}

func (u *UI) cancelJob(_ http.ResponseWriter, r *http.Request, v *viewer) (string, error) {
	id := r.PathValue("id")
	j, err := u.svc.CancelJob(r.Context(), v.P, id)
	if err != nil {
		return "", fmt.Errorf("cancel %s: %w", id, err)
	}
	u.log.LogAttrs(r.Context(), slog.LevelInfo, "job cancel requested", slog.String("job", j.ID), slog.String("by", v.P.TokenID))
	return "/jobs/" + url.PathEscape(j.ID) + "?done=cancel", nil
}

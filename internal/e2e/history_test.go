package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// The history checker verifies a run's at-most-once invariants twice: from
// the server's records (jobs, attempts and audit events) and from what the
// attempts' processes really did (beat files they append to while they
// run). docs/RELIABILITY.md lists the invariants.
//
// A test makes its jobs run beatCommand, cancels or
// finishes them, and calls checkHistory at the end:
//
//	beats := outDir(t)
//	r, _ := member.SubmitJob(ctx, api.SubmitRequest{..., Command: beatCommand(beats)})
//	...
//	checkHistory(t, admin, beats)

// beatEvery is the period of the beat commands' lines.
const beatEvery = 100 * time.Millisecond

// beatCommand is a job command that appends "<unix-nanos> <attempt id>" to
// DIR/<job id>.beats every 100ms until it is stopped. DIR must be writable
// by the attempts' user (nobody when the agent is root): see outDir.
func beatCommand(dir string) []string {
	return []string{"sh", "-c", `while :; do echo "$(date +%s%N) $GPUFLEET_ATTEMPT_ID" >> '` + dir +
		`'/"$GPUFLEET_JOB_ID".beats; sleep 0.1; done`}
}

// beatSpan is the first and last beat of one attempt.
type beatSpan struct {
	First, Last time.Time
	N           int
}

// readBeats reads DIR/<job>.beats: each attempt's span. A line cut short
// by a concurrent writer is skipped.
func readBeats(dir, job string) (map[string]beatSpan, error) {
	f, err := os.Open(filepath.Join(dir, job+".beats"))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]beatSpan{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]beatSpan{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ns, attempt, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		n, err := strconv.ParseInt(ns, 10, 64)
		if !ok || err != nil || attempt == "" || strings.Contains(attempt, " ") {
			continue
		}
		at := time.Unix(0, n)
		s, seen := out[attempt]
		if !seen || at.Before(s.First) {
			s.First = at
		}
		if at.After(s.Last) {
			s.Last = at
		}
		s.N++
		out[attempt] = s
	}
	return out, sc.Err()
}

// lastBeat is the newest beat of attempt in DIR/<job>.beats (zero if none).
func lastBeat(t *testing.T, dir, job, attempt string) time.Time {
	t.Helper()
	b, err := readBeats(dir, job)
	if err != nil {
		t.Fatal(err)
	}
	return b[attempt].Last
}

// historyReport is what checkHistory read, for a test's own assertions.
type historyReport struct {
	Jobs   map[string]gpufleet.Job
	Events []gpufleet.Event
	// Beats holds, per job, each attempt's beat span (with a beats dir).
	Beats map[string]map[string]beatSpan
}

// historySettle is how long checkHistory waits for jobs that are still
// being cancelled or placed to reach a resting state.
const historySettle = 20 * time.Second

// checkHistory verifies, over every job the server holds (finished ones
// included) and every audit event:
//
//  1. no job ever had two attempts at once: its attempts' intervals
//     [started_at, finished_at) are disjoint, and the beats of different
//     attempts never interleave;
//  2. no GPU was held by two attempts at once: the intervals of the
//     exclusive attempts that held a GPU (or MIG instance) are disjoint,
//     and so are their beats;
//  3. every accepted job ended (succeeded, failed, cancelled) or is still
//     queued, with no attempt left running; every id in accepted exists;
//  4. no attempt was lost, stopped or failed without an audit event
//     naming it; and no attempt's process beat outside the interval the
//     server recorded for it (a process still running after the server
//     declared it lost would break at-most-once).
//
// beatsDir may be empty (no process evidence). Jobs still running when it
// is called violate 3: cancel or finish them first (it waits up to
// historySettle for cancels and placements in flight).
func checkHistory(t *testing.T, admin *api.Client, beatsDir string, accepted ...string) historyReport {
	t.Helper()
	ctx := t.Context()
	rep := historyReport{Jobs: map[string]gpufleet.Job{}, Beats: map[string]map[string]beatSpan{}}

	// Let cancels and placements in flight come to rest.
	var jobs []gpufleet.Job
	deadline := time.Now().Add(historySettle)
	for {
		var err error
		if jobs, err = admin.AllJobs(ctx, api.JobQuery{All: true}); err != nil {
			t.Fatalf("history: list jobs: %v", err)
		}
		busy := slices.ContainsFunc(jobs, func(j gpufleet.Job) bool { return !restingJob(j) })
		if !busy || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, j := range jobs {
		rep.Jobs[j.ID] = j
	}
	events, err := allEvents(ctx, admin)
	if err != nil {
		t.Fatalf("history: read events: %v", err)
	}
	rep.Events = events
	named := map[string][]gpufleet.Event{} // attempt id -> events naming it
	for _, e := range events {
		named[e.Object] = append(named[e.Object], e)
	}

	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("history: "+format, args...)
	}
	for _, id := range accepted {
		if _, ok := rep.Jobs[id]; !ok {
			fail("accepted job %s is not in the server's list", id)
		}
	}

	type span struct {
		job, attempt string
		from, to     time.Time // to is zero while the attempt is active
		fraction     float64
	}
	open := func(s span) time.Time {
		if s.to.IsZero() {
			return time.Unix(1<<40, 0)
		}
		return s.to
	}
	overlap := func(a, b span) bool { return a.from.Before(open(b)) && b.from.Before(open(a)) }
	byGPU := map[string][]span{}
	attemptOf := map[string]gpufleet.Attempt{}
	for _, j := range jobs {
		var spans []span
		active := 0
		for _, a := range j.Attempts {
			attemptOf[a.ID] = a
			if a.StartedAt == nil {
				fail("job %s attempt %s (%s) has no started_at", j.ID, a.ID, a.State)
				continue
			}
			s := span{job: j.ID, attempt: a.ID, from: *a.StartedAt, fraction: a.Fraction}
			if a.State.Terminal() {
				if a.FinishedAt == nil {
					fail("job %s attempt %s is %s without finished_at", j.ID, a.ID, a.State)
					continue
				}
				s.to = *a.FinishedAt
			} else {
				active++
			}
			spans = append(spans, s)
			nodes := a.Nodes
			if len(nodes) == 0 && a.Node != "" {
				nodes = []gpufleet.AttemptNode{{Name: a.Node, GPUs: a.GPUs}}
			}
			for _, n := range nodes {
				for _, g := range n.GPUs {
					byGPU[g] = append(byGPU[g], s)
				}
			}
			// 4: an attempt that ended other than by succeeding is named
			// by an event saying so.
			if a.State == gpufleet.AttemptLost || a.State == gpufleet.AttemptStopped || a.State == gpufleet.AttemptFailed {
				kind := "attempt." + string(a.State)
				if !slices.ContainsFunc(named[a.ID], func(e gpufleet.Event) bool { return e.Kind == kind }) {
					fail("job %s attempt %s is %s (%s: %s) but no %s event names it", j.ID, a.ID, a.State, a.ReasonCode, a.Reason, kind)
				}
			}
		}
		// 1: one attempt at a time.
		if active > 1 {
			fail("job %s has %d active attempts", j.ID, active)
		}
		sort.Slice(spans, func(a, b int) bool { return spans[a].from.Before(spans[b].from) })
		for i := 1; i < len(spans); i++ {
			if overlap(spans[i-1], spans[i]) {
				fail("job %s: attempt %s [%s, %s] overlaps attempt %s from %s", j.ID, spans[i-1].attempt,
					stamp(spans[i-1].from), stamp(spans[i-1].to), spans[i].attempt, stamp(spans[i].from))
			}
		}
		// 3: every job rests: ended, or queued with nothing running.
		switch {
		case j.State == gpufleet.JobSucceeded || j.State == gpufleet.JobFailed || j.State == gpufleet.JobCancelled || j.State == gpufleet.JobQueued:
			if active > 0 {
				fail("job %s is %s but has an active attempt", j.ID, j.State)
			}
			if j.State == gpufleet.JobSucceeded && (len(j.Attempts) == 0 || j.Attempts[len(j.Attempts)-1].State != gpufleet.AttemptSucceeded) {
				fail("job %s succeeded but its last attempt did not", j.ID)
			}
		default:
			fail("job %s is still %s at the end of the run (cancel_requested %v)", j.ID, j.State, j.CancelRequested)
		}
	}
	// 2: one exclusive holder per GPU at a time.
	for g, spans := range byGPU {
		sort.Slice(spans, func(a, b int) bool { return spans[a].from.Before(spans[b].from) })
		for i := range spans {
			for k := i + 1; k < len(spans) && spans[k].from.Before(open(spans[i])); k++ {
				if spans[i].fraction < 1 && spans[k].fraction < 1 && spans[i].fraction > 0 && spans[k].fraction > 0 {
					continue // time-sliced shares
				}
				fail("gpu %s held by attempt %s (job %s) and attempt %s (job %s) at once, from %s", g, spans[i].attempt, spans[i].job,
					spans[k].attempt, spans[k].job, stamp(spans[k].from))
			}
		}
	}

	if beatsDir == "" {
		return rep
	}
	files, err := filepath.Glob(filepath.Join(beatsDir, "*.beats"))
	if err != nil {
		t.Fatal(err)
	}
	gpuBeats := map[string]map[string]beatSpan{} // GPU -> exclusive attempt -> span
	for _, file := range files {
		job := strings.TrimSuffix(filepath.Base(file), ".beats")
		j, ok := rep.Jobs[job]
		if !ok {
			fail("beats of job %s, which the server does not know", job)
			continue
		}
		beats, err := readBeats(beatsDir, job)
		if err != nil {
			t.Fatal(err)
		}
		rep.Beats[job] = beats
		for id, s := range beats {
			a, ok := attemptOf[id]
			if !ok || !slices.ContainsFunc(j.Attempts, func(x gpufleet.Attempt) bool { return x.ID == id }) {
				fail("job %s: %d beats from attempt %s, which the server never placed for it", job, s.N, id)
				continue
			}
			// 4: the process ran only inside the server's record of it.
			if a.StartedAt != nil && s.First.Before(*a.StartedAt) {
				fail("job %s attempt %s beat at %s, before the server started it at %s", job, id, stamp(s.First), stamp(*a.StartedAt))
			}
			if a.State.Terminal() && a.FinishedAt != nil && s.Last.After(*a.FinishedAt) {
				fail("job %s attempt %s beat at %s, after the server recorded it %s at %s", job, id, stamp(s.Last), a.State, stamp(*a.FinishedAt))
			}
			if a.Fraction == 0 || a.Fraction >= 1 {
				for _, n := range a.Nodes {
					for _, g := range n.GPUs {
						if gpuBeats[g] == nil {
							gpuBeats[g] = map[string]beatSpan{}
						}
						gpuBeats[g][id] = s
					}
				}
			}
		}
		// 1, from the processes: the beats of two attempts never interleave.
		for _, o := range beatOverlaps(beats) {
			fail("job %s: %s", job, o)
		}
	}
	// 2, from the processes: one exclusive attempt beating per GPU.
	for g, bs := range gpuBeats {
		for _, o := range beatOverlaps(bs) {
			fail("gpu %s: %s", g, o)
		}
	}
	return rep
}

// beatOverlaps says where the beats of two attempts interleave: one
// attempt's first beat comes before the last beat of an attempt that began
// beating earlier. Equal instants (the clock's resolution) do not count.
func beatOverlaps(spans map[string]beatSpan) []string {
	ids := make([]string, 0, len(spans))
	for id := range spans {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return spans[ids[a]].First.Before(spans[ids[b]].First) })
	var out []string
	for i := range ids {
		for k := i + 1; k < len(ids); k++ {
			prev, next := spans[ids[i]], spans[ids[k]]
			if next.First.Before(prev.Last) {
				out = append(out, fmt.Sprintf("attempt %s beat from %s while attempt %s still beat until %s (overlap %s)", ids[k],
					stamp(next.First), ids[i], stamp(prev.Last), prev.Last.Sub(next.First)))
			}
		}
	}
	return out
}

// restingJob reports whether a job needs nothing more to happen: ended, or
// queued with no attempt going and no cancel pending.
func restingJob(j gpufleet.Job) bool {
	switch j.State {
	case gpufleet.JobSucceeded, gpufleet.JobFailed, gpufleet.JobCancelled:
		return true
	case gpufleet.JobQueued:
		return !j.CancelRequested
	}
	return false
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "(open)"
	}
	return t.UTC().Format("15:04:05.000000")
}

// allEvents reads every stored audit event, page by page.
func allEvents(ctx context.Context, admin *api.Client) ([]gpufleet.Event, error) {
	var out []gpufleet.Event
	var since int64
	for {
		page, err := admin.Events(ctx, api.EventQuery{Since: since, Limit: 1000})
		if err != nil {
			return nil, err
		}
		out = append(out, page.Events...)
		next, _ := strconv.ParseInt(page.NextToken, 10, 64)
		if page.NextToken == "" || next <= since {
			return out, nil
		}
		since = next
	}
}

// TestHistoryEventsArePaged checks what the history checker relies on:
// GET /api/v1/events without watch lists the stored events, oldest first,
// page by page (docs/SERVER.md, the API document), so a run's whole audit
// log can be read back, its first event included.
func TestHistoryEventsArePaged(t *testing.T) {
	p := startServer(t, t.TempDir(), nil)
	f := setupTeams(t, p, "team-a", "team-b", "team-c")
	ctx := t.Context()
	var all []gpufleet.Event
	var since int64
	for range 100 {
		page, err := f.admin.Events(ctx, api.EventQuery{Since: since, Limit: 2})
		if err != nil {
			t.Fatalf("GET /api/v1/events?since=%d&limit=2: %v (the server must list stored events without watch=1)", since, err)
		}
		if len(page.Events) > 2 {
			t.Fatalf("page of %d events, limit 2", len(page.Events))
		}
		all = append(all, page.Events...)
		if page.NextToken == "" {
			break
		}
		if since, _ = strconv.ParseInt(page.NextToken, 10, 64); since == 0 {
			t.Fatalf("next_token %q is not an event id", page.NextToken)
		}
	}
	if len(all) < 6 {
		t.Fatalf("%d events for three teams and three tokens: %+v", len(all), all)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID {
			t.Fatalf("events out of order: %d after %d", all[i].ID, all[i-1].ID)
		}
	}
	if all[0].ID != 1 {
		t.Errorf("the first page starts at event %d, not 1", all[0].ID)
	}
}

// TestHistoryCheckerCatchesOverlap feeds the beat rules a job whose two
// attempts interleave and one whose attempts follow each other, and checks
// that they tell them apart (no server needed).
func TestHistoryCheckerCatchesOverlap(t *testing.T) {
	dir := t.TempDir()
	write := func(job string, lines ...string) {
		if err := os.WriteFile(filepath.Join(dir, job+".beats"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("j-ok", "1000 a-1", "2000 a-1", "garbage", "3000 a-2", "4000 a-2", "5000 a-3", "5000 a-2", "12")
	write("j-bad", "1000 a-4", "3000 a-5", "2000 a-4", "4000 a-4")
	for job, want := range map[string]int{"j-ok": 0, "j-bad": 1} {
		beats, err := readBeats(dir, job)
		if err != nil {
			t.Fatal(err)
		}
		if got := beatOverlaps(beats); len(got) != want {
			t.Errorf("%s: overlaps %q, want %d (%+v)", job, got, want, beats)
		}
	}
	if b, _ := readBeats(dir, "j-ok"); b["a-1"].N != 2 || !b["a-2"].First.Equal(time.Unix(0, 3000)) || !b["a-2"].Last.Equal(time.Unix(0, 5000)) {
		t.Errorf("parsed %+v", b)
	}
	if b, _ := readBeats(dir, "j-none"); len(b) != 0 {
		t.Errorf("missing file: %+v", b)
	}
}

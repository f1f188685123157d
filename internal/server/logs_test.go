package server

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

func TestTailOffset(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		text string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"}, {"a\nb\nc", 2, "b\nc"}, {"a\nb\n", 5, "a\nb\n"}, {"", 3, ""},
		{"one line\n", 1, "one line\n"}, {strings.Repeat("x\n", 70000) + "end\n", 1, "end\n"},
	} {
		path := filepath.Join(dir, "log")
		os.WriteFile(path, []byte(tc.text), 0o644)
		off, err := tailOffset(path, tc.n)
		if err != nil || tc.text[off:] != tc.want {
			t.Errorf("tail %d of %.20q: %q, %v; want %q", tc.n, tc.text, tc.text[off:], err, tc.want)
		}
	}
	if off, err := tailOffset(filepath.Join(dir, "missing"), 3); off != 0 || err != nil {
		t.Errorf("missing file: %d %v", off, err)
	}
}

// logFixture is a server keeping logs, with team-a's 8-GPU job placed on
// n1: the fixture, the member, the node's credential, the job and the
// attempt the node was told to start.
func logFixture(t *testing.T) (*fixture, api.Principal, api.Principal, gpufleet.Job, api.Assignment) {
	t.Helper()
	f := newFixture(t)
	f.srv.cfg.LogDir = t.TempDir()
	a := f.team("team-a", nil)
	n1 := f.node("n1", "h100-sxm-80gb", 8)
	j := f.submit(a, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 8}})
	f.cycle()
	hb, err := f.srv.Heartbeat(t.Context(), n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion})
	if err != nil || len(hb.Start) == 0 {
		t.Fatalf("heartbeat: %+v, %v", hb, err)
	}
	return f, a, n1, j, hb.Start[0]
}

// TestLogsOfEveryAttempt: after a drain the stopped attempt's log is still
// readable (previous, or by id), and --tail cuts lines.
func TestLogsOfEveryAttempt(t *testing.T) {
	f, a, n1, j, first := logFixture(t)
	ctx := t.Context()
	run := []api.AttemptReport{{AttemptID: first.AttemptID, JobID: j.ID, State: gpufleet.AttemptRunning}}
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: run})
	if _, err := f.srv.NodeAction(ctx, f.admin, "n1", api.Drain); err != nil {
		t.Fatal(err)
	}
	f.cycle()
	f.srv.Heartbeat(ctx, n1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Attempts: []api.AttemptReport{{AttemptID: first.AttemptID, JobID: j.ID, State: gpufleet.AttemptStopped, Reason: "drained"}}})
	if _, err := f.srv.NodeAction(ctx, f.admin, "n1", api.Uncordon); err != nil {
		t.Fatal(err)
	}
	f.cycle()
	got := f.job(j.ID)
	if len(got.Attempts) != 2 {
		t.Fatalf("attempts %+v", got.Attempts)
	}
	second := got.Attempts[1].ID
	rec := httptest.NewRecorder()
	f.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `gpufleet_attempts_ended_total{reason_code="drain",state="stopped"} 1`) {
		t.Errorf("/metrics lacks the drained attempt:\n%s", rec.Body.String())
	}
	os.WriteFile(f.srv.logPath(first.AttemptID), []byte("step 1\nstep 2\nSIGTERM: checkpointing\n"), 0o644)
	os.WriteFile(f.srv.logPath(second), []byte("resumed from checkpoint\n"), 0o644)
	read := func(q api.LogQuery) (string, error) {
		var b bytes.Buffer
		err := f.srv.Logs(ctx, a, j.ID, q, &b)
		return b.String(), err
	}
	for _, tc := range []struct {
		q    api.LogQuery
		want string
	}{
		{api.LogQuery{}, "resumed from checkpoint\n"},
		{api.LogQuery{Previous: true}, "step 1\nstep 2\nSIGTERM: checkpointing\n"},
		{api.LogQuery{Attempt: first.AttemptID, Tail: 1}, "SIGTERM: checkpointing\n"},
		{api.LogQuery{Previous: true, Follow: true}, "step 1\nstep 2\nSIGTERM: checkpointing\n"}, // ended: follow returns
	} {
		if out, err := read(tc.q); err != nil || out != tc.want {
			t.Errorf("%+v: %q, %v; want %q", tc.q, out, err, tc.want)
		}
	}
	if _, err := read(api.LogQuery{Attempt: "a-other"}); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("another job's attempt: %v", err)
	}
	if _, err := read(api.LogQuery{Attempt: first.AttemptID, Previous: true}); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("attempt and previous: %v", err)
	}
}

// TestLogsSince: the server times each chunk an agent ships; since keeps
// the lines that arrived in the window, whole lines, with tail after it.
func TestLogsSince(t *testing.T) {
	f, a, n1, j, started := logFixture(t)
	ctx := t.Context()
	at := started.AttemptID
	start := f.clk.Now()
	var size int64
	for _, chunk := range []string{"boot\nepoch 1\n", "epoch 2\nepo", "ch 3\n", "epoch 4\n"} {
		var err error
		if size, err = f.srv.AgentLog(ctx, n1, at, size, strings.NewReader(chunk)); err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(5 * time.Minute)
	}
	// Chunks arrived at start, +5m, +10m and +15m; now is +20m.
	read := func(q api.LogQuery) string {
		var b bytes.Buffer
		if err := f.srv.Logs(ctx, a, j.ID, q, &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for _, tc := range []struct {
		q    api.LogQuery
		want string
	}{
		{api.LogQuery{Since: time.Minute}, ""},
		{api.LogQuery{Since: 6 * time.Minute}, "epoch 4\n"},
		{api.LogQuery{Since: 10 * time.Minute}, "epoch 3\nepoch 4\n"}, // the chunk began mid-line: the whole line
		{api.LogQuery{Since: 15 * time.Minute}, "epoch 2\nepoch 3\nepoch 4\n"},
		{api.LogQuery{Since: time.Hour}, "boot\nepoch 1\nepoch 2\nepoch 3\nepoch 4\n"},
		{api.LogQuery{SinceTime: start.Add(9 * time.Minute)}, "epoch 3\nepoch 4\n"},
		{api.LogQuery{Since: time.Hour, Tail: 2}, "epoch 3\nepoch 4\n"},
		{api.LogQuery{Since: 6 * time.Minute, Tail: 3}, "epoch 4\n"},
	} {
		if got := read(tc.q); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.q, got, tc.want)
		}
	}
	// A log written before times were kept is shown whole.
	os.Remove(f.srv.logPath(at) + ".times")
	if got := read(api.LogQuery{Since: time.Minute}); got != "boot\nepoch 1\nepoch 2\nepoch 3\nepoch 4\n" {
		t.Errorf("untimed log: %q", got)
	}
}

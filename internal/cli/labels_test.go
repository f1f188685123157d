package cli

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/server"
	"github.com/gpufleet/gpufleet/internal/store"
)

// TestSubmitLabels: -l takes KEY=VALUE pairs, repeatable and
// comma-separated as kubectl's; they merge over the job file's labels.
func TestSubmitLabels(t *testing.T) {
	srv, fake := startFake(t)
	file := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(file, []byte("labels: {team: nlp, run: \"1\"}\nresources: {gpus: 1}\ncommand: [x]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args []string
		want map[string]string
	}{
		"repeatable":             {args: []string{"--gpus", "1", "-l", "team=nlp", "-l", "run=7", "--", "x"}, want: map[string]string{"team": "nlp", "run": "7"}},
		"comma-separated":        {args: []string{"--gpus", "1", "--labels", "team=nlp, run=7,canary=", "--", "x"}, want: map[string]string{"team": "nlp", "run": "7", "canary": ""}},
		"from the job file":      {args: []string{file}, want: map[string]string{"team": "nlp", "run": "1"}},
		"flags over the file":    {args: []string{file, "-l", "run=2,owner=ana"}, want: map[string]string{"team": "nlp", "run": "2", "owner": "ana"}},
		"prefixed key, no value": {args: []string{"--gpus", "1", "-l", "example.com/sweep=", "--", "x"}, want: map[string]string{"example.com/sweep": ""}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, errOut, code := run(t, append([]string{"submit", "--server", srv.URL, "--token", fakeAdmin}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if diff := cmp.Diff(tc.want, fake.lastSubmit.Labels); diff != "" {
				t.Errorf("labels sent (-want +got):\n%s", diff)
			}
		})
	}
	bad := map[string]struct {
		args    []string
		wantErr string
	}{
		"no value":            {args: []string{"-l", "team"}, wantErr: `--labels "team": expected KEY=VALUE`},
		"key twice in one":    {args: []string{"-l", "a=1,a=2"}, wantErr: `key "a" given twice`},
		"key twice in two":    {args: []string{"-l", "a=1", "-l", "a=2"}, wantErr: `label key "a" given twice`},
		"bad value":           {args: []string{"-l", "team=a b"}, wantErr: `labels.team "a b": expected a label value`},
		"bad key":             {args: []string{"-l", "Team Name=a"}, wantErr: `labels "Team Name": expected a label key`},
		"bad key in the file": {args: []string{file, "-l", "x/y/z=1"}, wantErr: `labels "x/y/z"`},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"submit", "--server", srv.URL, "--token", fakeAdmin, "--gpus", "1"}, tc.args...)
			if !slices.Contains(tc.args, file) {
				args = append(args, "--", "x")
			}
			_, errOut, code := run(t, args...)
			if code == 0 || !strings.Contains(errOut, "invalid") || !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("exit %d, stderr %q; want an invalid-input error with %q", code, errOut, tc.wantErr)
			}
		})
	}
	if _, errOut, code := run(t, "submit", "--server", srv.URL, "--token", fakeAdmin, "--gpus", "1", "-l", "bad key=x", "--", "x"); code == 0 ||
		fake.lastSubmit.Labels["bad key"] != "" {
		t.Errorf("a refused label reached the server: exit %d %s", code, errOut)
	}
}

// TestSelectorFlags: jobs -l and cancel -l send the selector parsed once
// (repeated -l all hold); cancel -l asks the server to cancel by it.
func TestSelectorFlags(t *testing.T) {
	srv, fake := startFake(t)
	base := []string{"--server", srv.URL, "--token", fakeMember}
	sel := func(s string) gpufleet.LabelSelector {
		v, err := gpufleet.ParseLabelSelector(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	out, errOut, code := run(t, append([]string{"jobs", "-l", "sweep=lr-7,run!=3", "-l", "tier in (a, b)"}, base...)...)
	if code != 0 {
		t.Fatalf("jobs -l: exit %d: %s", code, errOut)
	}
	if diff := cmp.Diff(sel("sweep=lr-7,run!=3,tier in (a,b)"), fake.lastJobs.Selector); diff != "" {
		t.Errorf("jobs -l selector (-want +got):\n%s", diff)
	}
	if !strings.Contains(out, "j-1") {
		t.Errorf("jobs -l table:\n%s", out)
	}
	out, errOut, code = run(t, append([]string{"cancel", "-l", "sweep=lr-7", "--state", "queued", "--team", "team-a"}, base...)...)
	if code != 0 {
		t.Fatalf("cancel -l: exit %d: %s", code, errOut)
	}
	want := api.JobQuery{Selector: sel("sweep=lr-7"), Team: "team-a", States: []gpufleet.JobState{gpufleet.JobQueued}}
	if diff := cmp.Diff(want, fake.lastCancel); diff != "" {
		t.Errorf("cancel -l query (-want +got):\n%s", diff)
	}
	if out != "job j-1: running (cancelling)\njob j-2: running (cancelling)\n" {
		t.Errorf("cancel -l printed %q", out)
	}
	out, _, code = run(t, append([]string{"cancel", "-l", "sweep=lr-7", "-o", "name"}, base...)...)
	if code != 0 || out != "job/j-1\njob/j-2\n" {
		t.Errorf("cancel -l -o name: exit %d %q", code, out)
	}
	for name, tc := range map[string]struct {
		args    []string
		wantErr string
	}{
		"jobs, bad selector":       {[]string{"jobs", "-l", "a b"}, `--selector "a b": expected KEY`},
		"cancel, ids and selector": {[]string{"cancel", "j-1", "-l", "a=1"}, "give ids or a selector"},
		"cancel, empty selector":   {[]string{"cancel", "-l", " "}, "--selector: empty: it would cancel every job"},
		"cancel, bad selector":     {[]string{"cancel", "-l", "a in (b"}, `--selector "a in (b": a '(' without its ')'`},
	} {
		t.Run(name, func(t *testing.T) {
			if _, errOut, code := run(t, append(tc.args, base...)...); code == 0 || !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("exit %d, stderr %q; want %q", code, errOut, tc.wantErr)
			}
		})
	}
}

// TestCancelBySelectorAgainstTheServer runs `gpufleet cancel -l` as a
// member against the real server: it cancels exactly its own team's jobs
// the selector matches, and nothing of another team's that carry the same
// labels, nor its own that do not match.
func TestCancelBySelectorAgainstTheServer(t *testing.T) {
	hsURL, tokens := realServer(t, "team-a", "team-b")

	submit := func(team, name, labels string) string {
		t.Helper()
		out, errOut, code := run(t, "submit", "--server", hsURL, "--token", tokens[team], "--name", name, "-l", labels,
			"--gpus", "1", "--queue-anyway", "--", "sleep", "60")
		if code != 0 {
			t.Fatalf("submit %s: exit %d: %s", name, code, errOut)
		}
		return strings.TrimSpace(out)
	}
	ids := map[string]string{
		"a-x1": submit("team-a", "a-x1", "team=x,run=1"),
		"a-x2": submit("team-a", "a-x2", "team=x,run=2"),
		"a-y":  submit("team-a", "a-y", "team=y"),
		"b-x":  submit("team-b", "b-x", "team=x,run=1"),
	}
	out, errOut, code := run(t, "jobs", "-l", "team=x", "-o", "name", "--server", hsURL, "--token", tokens["team-a"])
	if wantOut := "job/" + ids["a-x1"] + "\njob/" + ids["a-x2"] + "\n"; code != 0 || out != wantOut {
		t.Errorf("jobs -l team=x -o name as team-a: exit %d %q (%s), want %q", code, out, errOut, wantOut)
	}
	out, errOut, code = run(t, "cancel", "-l", "team=x", "--server", hsURL, "--token", tokens["team-a"])
	if code != 0 {
		t.Fatalf("cancel -l team=x: exit %d: %s", code, errOut)
	}
	if wantOut := "job " + ids["a-x1"] + ": cancelled\njob " + ids["a-x2"] + ": cancelled\n"; out != wantOut {
		t.Errorf("cancel -l team=x printed %q, want %q", out, wantOut)
	}
	// Naming the other team picks nothing of it.
	if out, errOut, code := run(t, "cancel", "-l", "team=x", "--team", "team-b", "--server", hsURL, "--token", tokens["team-a"]); code != 0 || out != "" ||
		!strings.Contains(errOut, "no active job matches") {
		t.Errorf("cancel -l team=x --team team-b as team-a: exit %d %q %q", code, out, errOut)
	}
	out, errOut, code = run(t, "jobs", "--all", "-o", "json", "--server", hsURL, "--token", tokens["admin"])
	var list []gpufleet.Job
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("jobs --all as admin: exit %d %v %s", code, err, errOut)
	}
	got := map[string]gpufleet.JobState{}
	for _, j := range list {
		got[j.Name] = j.State
	}
	want := map[string]gpufleet.JobState{"a-x1": gpufleet.JobCancelled, "a-x2": gpufleet.JobCancelled, "a-y": gpufleet.JobQueued, "b-x": gpufleet.JobQueued}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("job states after cancel -l team=x as team-a (-want +got):\n%s", diff)
	}
}

// realServer starts a real server (SQLite, the real HTTP handler) for the
// command line to talk to, with a member token for each team named; the
// admin token is tokens["admin"].
func realServer(t *testing.T, teams ...string) (url string, tokens map[string]string) {
	t.Helper()
	isolateClientEnv(t)
	ctx := t.Context()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "gpufleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const adminToken = "admin-token-for-cli-tests-0123456789"
	srv, err := server.New(ctx, server.Default(), st, catalog.Default(), adminToken, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := srv.Authenticate(ctx, adminToken)
	if err != nil {
		t.Fatal(err)
	}
	tokens = map[string]string{"admin": adminToken}
	for _, team := range teams {
		if _, err := srv.PutTeam(ctx, admin, api.TeamRequest{Name: team}); err != nil {
			t.Fatal(err)
		}
		tok, err := srv.CreateToken(ctx, admin, api.TokenRequest{Team: team, Role: gpufleet.RoleMember})
		if err != nil {
			t.Fatal(err)
		}
		tokens[team] = tok.Token
	}
	hs := httptest.NewServer(api.NewHandler(srv, srv, srv, srv, api.HandlerOptions{}))
	t.Cleanup(hs.Close)
	return hs.URL, tokens
}

package server

import (
	"errors"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// TestLabelsThroughTheAPI submits labelled jobs of two teams through the
// real handler and server, then lists and cancels them by selector: the
// labels come back as sent, a selector picks exactly the jobs it matches
// (page by page), and a member's selector never reaches another team's
// jobs, even those carrying the same labels.
func TestLabelsThroughTheAPI(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	f.node("n1", "h100-sxm-80gb", 8)
	srv := httptest.NewServer(api.NewHandler(f.srv, f.srv, f.srv, f.srv, api.HandlerOptions{}))
	defer srv.Close()
	client := func(token string) *api.Client {
		c, err := api.NewClient([]string{srv.URL}, token)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b, admin := client(f.teamToken("team-a")), client(f.teamToken("team-b")), client(testAdmin)

	names := map[string]string{} // id: name
	submit := func(c *api.Client, name string, labels map[string]string) gpufleet.Job {
		t.Helper()
		resp, err := c.SubmitJob(ctx, api.SubmitRequest{Name: name, Labels: labels, Command: []string{"true"}, Resources: gpufleet.Resources{GPUs: 1}})
		if err != nil {
			t.Fatalf("submit %s: %v", name, err)
		}
		if diff := cmp.Diff(labels, resp.Labels); diff != "" {
			t.Errorf("submit %s: labels (-sent +returned):\n%s", name, diff)
		}
		names[resp.ID] = name
		return resp.Job
	}
	submit(a, "a-x1", map[string]string{"sweep": "x", "run": "1"})
	submit(a, "a-x2", map[string]string{"sweep": "x", "run": "2", "example.com/owner": "ana"})
	submit(a, "a-y", map[string]string{"sweep": "y"})
	submit(a, "a-none", nil)
	submit(b, "b-x", map[string]string{"sweep": "x", "run": "1"})
	if j, err := a.Job(ctx, firstID(names, "a-x2")); err != nil || j.Labels["example.com/owner"] != "ana" {
		t.Errorf("job a-x2 read back with labels %v, %v", j.Labels, err)
	}

	list := func(c *api.Client, selector string, limit int) []string {
		t.Helper()
		sel, err := gpufleet.ParseLabelSelector(selector)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		q := api.JobQuery{Selector: sel, All: true, Limit: limit}
		for range 10 {
			page, err := c.Jobs(ctx, q)
			if err != nil {
				t.Fatalf("list %q: %v", selector, err)
			}
			if limit > 0 && len(page.Jobs) > limit {
				t.Errorf("list %q: a page of %d, limit %d", selector, len(page.Jobs), limit)
			}
			for _, j := range page.Jobs {
				got = append(got, names[j.ID])
			}
			if page.NextToken == "" {
				break
			}
			q.NextToken = page.NextToken
		}
		slices.Sort(got)
		return got
	}
	for name, tc := range map[string]struct {
		c        *api.Client
		selector string
		limit    int
		want     []string
	}{
		"member, equals":              {c: a, selector: "sweep=x", want: []string{"a-x1", "a-x2"}},
		"member, one per page":        {c: a, selector: "sweep=x", limit: 1, want: []string{"a-x1", "a-x2"}},
		"member, not equal or absent": {c: a, selector: "sweep!=x", want: []string{"a-none", "a-y"}},
		"member, in":                  {c: a, selector: "sweep in (x,y),run notin (2)", want: []string{"a-x1", "a-y"}},
		"member, exists":              {c: a, selector: "example.com/owner", want: []string{"a-x2"}},
		"member, absent":              {c: a, selector: "!sweep", want: []string{"a-none"}},
		"other member, same labels":   {c: b, selector: "sweep=x", want: []string{"b-x"}},
		"admin sees every team":       {c: admin, selector: "sweep=x,run=1", want: []string{"a-x1", "b-x"}},
		"no selector lists all":       {c: a, selector: "", want: []string{"a-none", "a-x1", "a-x2", "a-y"}},
		"nothing matches":             {c: admin, selector: "sweep=z", want: nil},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, list(tc.c, tc.selector, tc.limit)); diff != "" {
				t.Errorf("jobs picked (-want +got):\n%s", diff)
			}
		})
	}

	// A cancel by selector: team-a's sweep x, and nothing of team-b's.
	if _, err := a.CancelJobs(ctx, api.JobQuery{}); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("cancel with an empty selector: %v, want invalid", err)
	}
	sweepX, _ := gpufleet.ParseLabelSelector("sweep=x")
	if got, err := a.CancelJobs(ctx, api.JobQuery{Selector: sweepX, Team: "team-b"}); err != nil || len(got.Jobs) != 0 {
		t.Errorf("team-a cancelling by selector in team-b: %d jobs, %v; want none", len(got.Jobs), err)
	}
	got, err := a.CancelJobs(ctx, api.JobQuery{Selector: sweepX})
	if err != nil {
		t.Fatal(err)
	}
	var cancelled []string
	for _, j := range got.Jobs {
		cancelled = append(cancelled, names[j.ID])
		if j.State != gpufleet.JobCancelled {
			t.Errorf("%s: state %s after the cancel, want cancelled (it was queued)", names[j.ID], j.State)
		}
	}
	if diff := cmp.Diff([]string{"a-x1", "a-x2"}, cancelled); diff != "" {
		t.Errorf("cancelled (-want +got):\n%s", diff)
	}
	all, err := admin.AllJobs(ctx, api.JobQuery{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range all {
		want := gpufleet.JobQueued
		if names[j.ID] == "a-x1" || names[j.ID] == "a-x2" {
			want = gpufleet.JobCancelled
		}
		if j.State != want {
			t.Errorf("%s (team %s): %s, want %s", names[j.ID], j.Team, j.State, want)
		}
	}
	again, err := a.CancelJobs(ctx, api.JobQuery{Selector: sweepX})
	if err != nil || len(again.Jobs) != 0 {
		t.Errorf("cancelling again picks %d jobs (%v): the cancelled ones are no longer active", len(again.Jobs), err)
	}
}

// firstID is the id of the job named name.
func firstID(names map[string]string, name string) string {
	for id, n := range names {
		if n == name {
			return id
		}
	}
	return ""
}

package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// TestExplanationThroughTheAPI: a job two nodes carry the selector of,
// but whose overhead cap their mechanism exceeds, is refused at submission
// with the reason as data in the 422's body (the selector left out one
// node, the overhead two; what the vGPU mechanism gives against the cap),
// and, queued anyway, the queue and the job carry
// the same explanation, stored with the queue entry.
func TestExplanationThroughTheAPI(t *testing.T) {
	f := newFixture(t)
	member := f.teamToken("team-a")
	f.registerLabelled("b1", "h100-sxm-80gb", 4, map[string]string{"virtualization": "bare-metal"})
	f.registerLabelled("v1", "h100-sxm-80gb", 4, map[string]string{"virtualization": "vgpu:H100-80C", "pool": "x"})
	f.registerLabelled("v2", "h100-sxm-80gb", 4, map[string]string{"virtualization": "vgpu:H100-80C", "pool": "x"})
	f.cycle()
	h := api.NewHandler(f.srv, f.srv, f.srv, f.srv, api.HandlerOptions{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	do := func(method, path, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+member)
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, path, raw, err)
		}
		return resp.StatusCode
	}
	onePct := 0.01
	want := &gpufleet.Explanation{Code: scheduler.ReasonIsolation, NodesEvaluated: 3, Never: true,
		NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterSelector, Nodes: 1}, {Code: gpufleet.FilterOverhead, Nodes: 2}},
		Isolation: &gpufleet.IsolationShortfall{OverheadMax: &onePct,
			Mechanisms: []gpufleet.MechanismShortfall{{Name: "vgpu:H100-80C/exclusive", Isolation: gpufleet.IsolationSoft, Overhead: 0.05}}}}
	counts := cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Detail" }, cmp.Ignore())

	job := `{"command":["true"],"resources":{"gpus":1,"node_selector":{"pool":"x"},"overhead":"<=1%"}`
	var eb api.ErrorBody
	if st := do("POST", "/api/v1/jobs", job+`}`, &eb); st != http.StatusUnprocessableEntity || eb.Code != api.CodeUnsatisfiable {
		t.Fatalf("submit: %d %+v, want 422 unsatisfiable", st, eb)
	}
	if eb.ReasonCode != scheduler.ReasonIsolation || strings.Contains(eb.Error, "node_selector") {
		t.Errorf("refusal %q (reason_code %q): want isolation, not the selector", eb.Error, eb.ReasonCode)
	}
	if diff := cmp.Diff(want, eb.Explanation, counts); diff != "" {
		t.Errorf("refusal's explanation (-want +got):\n%s", diff)
	}

	var queued gpufleet.Job
	if st := do("POST", "/api/v1/jobs", job+`,"allow_unsatisfiable":true}`, &queued); st != http.StatusCreated && st != http.StatusOK {
		t.Fatalf("submit with allow_unsatisfiable: %d", st)
	}
	f.cycle()
	var q api.QueueList
	if st := do("GET", "/api/v1/queue", "", &q); st != http.StatusOK || len(q.Queue) != 1 {
		t.Fatalf("queue: %d %+v", st, q)
	}
	if e := q.Queue[0]; e.ReasonCode != scheduler.ReasonIsolation || e.Explanation == nil || e.Reason != e.Explanation.String() {
		t.Errorf("queue entry %+v: want reason isolation rendered from its explanation", e)
	}
	if diff := cmp.Diff(want, q.Queue[0].Explanation, counts); diff != "" {
		t.Errorf("queue entry's explanation (-want +got):\n%s", diff)
	}
	var got gpufleet.Job
	if st := do("GET", "/api/v1/jobs/"+queued.ID, "", &got); st != http.StatusOK || got.Queue == nil {
		t.Fatalf("job: %d %+v", st, got.Queue)
	}
	if diff := cmp.Diff(want, got.Queue.Explanation, counts); diff != "" {
		t.Errorf("job's explanation (-want +got):\n%s", diff)
	}
}

// TestReservationAsDataThroughTheAPI: a job that fits now but would run
// past the backfill reservation of the job ahead of it waits as
// reservation, and the queue's JSON carries the reservation as data (the
// job it is for, its start, the waiting job's estimate) from which the
// sentence is written.
func TestReservationAsDataThroughTheAPI(t *testing.T) {
	f := newFixture(t)
	member := f.teamToken("team-a")
	f.registerLabelled("n1", "h100-sxm-80gb", 8, map[string]string{"rack": "r1"})
	srv := httptest.NewServer(api.NewHandler(f.srv, f.srv, f.srv, f.srv, api.HandlerOptions{}))
	defer srv.Close()
	submit := func(body string) string {
		t.Helper()
		st, raw, eb := callAPI(t, srv, "POST", "/api/v1/jobs", member, "", body)
		var j gpufleet.Job
		if st != http.StatusCreated && st != http.StatusOK || json.Unmarshal(raw, &j) != nil {
			t.Fatalf("submit %s: %d %+v", body, st, eb)
		}
		return j.ID
	}
	submit(`{"command":["true"],"resources":{"gpus":4},"estimate":"10h"}`)
	f.cycle()
	big := submit(`{"command":["true"],"resources":{"gpus":8},"estimate":"1h"}`)
	long := submit(`{"command":["true"],"resources":{"gpus":4},"estimate":"20h"}`)
	f.cycle()
	st, raw, _ := callAPI(t, srv, "GET", "/api/v1/queue", member, "-", "")
	var q struct {
		Queue []struct {
			ID          string                `json:"id"`
			ReasonCode  string                `json:"reason_code"`
			Reason      string                `json:"reason"`
			Explanation *gpufleet.Explanation `json:"explanation"`
		} `json:"queue"`
	}
	if st != http.StatusOK || json.Unmarshal(raw, &q) != nil || len(q.Queue) != 2 {
		t.Fatalf("queue: %d %s", st, raw)
	}
	e := q.Queue[1]
	if e.ID != long || e.ReasonCode != scheduler.ReasonReservation || e.Explanation == nil || e.Reason != e.Explanation.String() {
		t.Fatalf("queue entry %+v: want %s waiting as reservation, its reason written from its explanation", e, long)
	}
	r := e.Explanation.Reservation
	if r == nil || r.Job != big || r.EstimateS != 20*3600 || !r.Start.After(f.clk.Now()) {
		t.Errorf("reservation %+v: want job %s's, a start ahead, and the estimate 72000 s", r, big)
	}
	if !strings.Contains(string(raw), `"reservation":{"job":"`+big+`"`) {
		t.Errorf("the queue's JSON lacks explanation.reservation.job:\n%s", raw)
	}
}

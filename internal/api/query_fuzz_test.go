package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/server"
	"github.com/gpufleet/gpufleet/internal/store"
)

// queryRoute is one route whose query parameters the fuzz target varies,
// with the credential it is called with.
type queryRoute struct {
	method, path, auth string // auth: "member", "admin" or "agent"
}

// queryFleet is a real server (sqlite store, leader cycle run once) with
// two teams, two nodes, jobs queued, running and cancelled, and the events
// they left, behind the real HTTP handler.
type queryFleet struct {
	h      http.Handler
	tokens map[string]string
	routes []queryRoute
}

const fuzzAdminToken = "gpa_fuzz_admin_token_0123456789"

func newQueryFleet(t testing.TB) *queryFleet {
	t.Helper()
	ctx := t.Context()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "gpufleet.db"), store.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := server.Default()
	cfg.Now, cfg.LogDir = clock, filepath.Join(dir, "logs")
	if err := os.MkdirAll(cfg.LogDir, 0o700); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	srv, err := server.New(ctx, cfg, st, catalog.Default(), fuzzAdminToken, log)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := srv.Authenticate(ctx, fuzzAdminToken)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	q := &queryFleet{tokens: map[string]string{"admin": fuzzAdminToken}}
	for _, team := range []string{"team-a", "team-b"} {
		_, err := srv.PutTeam(ctx, admin, api.TeamRequest{Name: team})
		must(err)
	}
	tok, err := srv.CreateToken(ctx, admin, api.TokenRequest{Team: "team-a", Role: gpufleet.RoleMember})
	must(err)
	q.tokens["member"] = tok.Token
	for _, node := range []string{"n1", "n2"} {
		jt, err := srv.CreateJoinToken(ctx, admin, api.JoinTokenRequest{})
		must(err)
		var gpus []gpufleet.NodeGPU
		for i := range 4 {
			gpus = append(gpus, gpufleet.NodeGPU{Index: i, UUID: "GPU-" + node + "-" + string(rune('a'+i)), Model: "h100-sxm-80gb",
				MemoryBytes: 80 << 30, NVLinkDomain: node + "-nvl", State: gpufleet.NodeReady, Health: gpufleet.Healthy})
		}
		resp, err := srv.Register(ctx, jt.Token, api.RegisterRequest{ProtocolVersion: api.ProtocolVersion, Node: node, GPUs: gpus,
			Labels: map[string]string{"rack": "r1"}, Versions: map[string]string{"driver": "580.65"}})
		must(err)
		if node == "n1" {
			q.tokens["agent"] = resp.Credential
		}
	}
	member, err := srv.Authenticate(ctx, q.tokens["member"])
	must(err)
	var jobs []string
	for i, gpus := range []int{4, 4, 8, 2} {
		resp, err := srv.SubmitJob(ctx, member, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: gpus}, Command: []string{"python", "train.py"},
			Labels: map[string]string{"sweep": []string{"a", "b"}[i%2], "example.com/run": string(rune('0' + i))}})
		must(err)
		jobs = append(jobs, resp.Job.ID)
	}
	must(srv.Cycle(ctx))
	_, err = srv.CancelJob(ctx, member, jobs[3])
	must(err)
	attempt := ""
	if j, err := srv.Job(ctx, admin, jobs[0]); err == nil && len(j.Attempts) > 0 {
		attempt = j.Attempts[0].ID
	}
	if attempt == "" {
		t.Fatalf("job %s did not start", jobs[0])
	}
	q.h = api.NewHandler(srv, srv, srv, srv, api.HandlerOptions{Logger: log})
	q.routes = []queryRoute{
		{"GET", "/api/v1/jobs", "member"}, {"GET", "/api/v1/jobs", "admin"}, {"GET", "/api/v1/nodes", "member"},
		{"GET", "/api/v1/teams", "member"}, {"GET", "/api/v1/teams", "admin"}, {"GET", "/api/v1/events", "member"},
		{"GET", "/api/v1/events", "admin"}, {"GET", "/api/v1/queue", "member"}, {"GET", "/api/v1/classes", "member"},
		{"GET", "/api/v1/tokens", "admin"}, {"GET", "/api/v1/usage", "member"}, {"GET", "/api/v1/nodes/n1/rollups", "member"},
		{"GET", "/api/v1/jobs/" + jobs[0] + "/rollups", "member"}, {"GET", "/api/v1/plan", "member"}, {"GET", "/api/v1/plan", "admin"},
		{"DELETE", "/api/v1/nodes/n1/faults", "admin"}, {"POST", "/api/v1/agent/logs/" + attempt, "agent"},
		{"GET", "/api/v1/forecast", "member"}, {"GET", "/api/v1/procure", "admin"}, {"GET", "/api/v1/lifecycle", "admin"},
		{"GET", "/api/v1/audit", "admin"}, {"GET", "/api/v1/sd/agents", "admin"},
		{"GET", "/api/v1/bench/results", "member"}, {"GET", "/api/v1/stacks/check", "member"}, {"GET", "/api/v1/racks", "member"},
		{"GET", "/api/v1/stacks", "member"}, {"GET", "/api/v1/rollouts", "member"}, {"GET", "/api/v1/jobs/" + jobs[0], "member"},
		{"GET", "/api/v1/bench/workloads", "member"}, {"POST", "/api/v1/jobs/cancel", "member"},
	}
	return q
}

// cancelOnWrite ends the request once the handler writes its body: a
// watched list or event stream sends its first frame and returns, instead
// of streaming until the fuzz run ends.
type cancelOnWrite struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (w cancelOnWrite) Write(b []byte) (int, error) {
	defer w.cancel()
	return w.ResponseRecorder.Write(b)
}

func (w cancelOnWrite) Flush() { w.ResponseRecorder.Flush() }

// serve sends one request and returns the recorded answer.
func (q *queryFleet) serve(rt queryRoute, rawQuery, lastEventID string) *httptest.ResponseRecorder {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, rt.method, rt.path, nil)
	req.URL.RawQuery = rawQuery
	req.Header.Set("Authorization", "Bearer "+q.tokens[rt.auth])
	if rt.method == "POST" {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if lastEventID != "" {
		req.Header["Last-Event-Id"] = []string{lastEventID}
	}
	rec := httptest.NewRecorder()
	q.h.ServeHTTP(cancelOnWrite{rec, cancel}, req)
	return rec
}

// TestEveryRouteRefusesUnknownQueryParameters: a parameter a route does
// not declare in openapi.json is a 400 naming it on every route, before
// the route does anything.
func TestEveryRouteRefusesUnknownQueryParameters(t *testing.T) {
	q := newQueryFleet(t)
	for _, rt := range api.Routes() {
		auth := map[api.AuthKind]string{api.AuthMember: "member", api.AuthAdmin: "admin", api.AuthMonitor: "admin", api.AuthAgent: "agent", api.AuthNone: "admin"}[rt.Auth]
		if auth == "" {
			continue // a join token is used up by the request
		}
		path := strings.NewReplacer("{id}", "x-1", "{name}", "n1").Replace(rt.Pattern)
		rec := q.serve(queryRoute{rt.Method, path, auth}, "quantlie=0.9", "")
		var e api.ErrorBody
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != http.StatusBadRequest || !strings.Contains(e.Error, `unknown query parameter "quantlie"`) {
			t.Errorf("%s %s?quantlie=0.9: %d %.200s, want 400 naming quantlie", rt.Method, rt.Pattern, rec.Code, rec.Body.Bytes())
		}
	}
}

// FuzzListQuery sends random query strings to the list routes (and the
// other routes that read query parameters: usage, rollups, fault clearing,
// agent log shipping; not a job's log, whose follow=1 waits for output) of
// a real server through the real HTTP
// handler. Every answer is 2xx or 4xx, never 5xx or a panic; a 4xx is a
// JSON error of at most 1,200 bytes (the handler quotes at most
// gpufleet.QuoteLimit bytes of what it was sent); and a page's next_token
// is accepted when sent back.
func FuzzListQuery(f *testing.F) {
	q := newQueryFleet(f)
	for _, s := range []string{
		"", "limit=1", "limit=0", "limit=-1", "limit=1001", "limit=99999999999999999999", "limit=abc", "limit=1&limit=x",
		"next_token=b2ZmOjE", "next_token=b2ZmOi0x", "next_token=b2ZmOjk5OTk5OTk5OTk5OTk5OTk5OTk5", "next_token=%ff%fe", "next_token=j-01jdq9x2m8abcdef",
		"all=1", "all=true", "all=maybe", "all=", "watch=1", "watch=0", "watch=yes", "state=queued,running", "state=bogus", "state=,,,",
		"team=team-a", "team=team-b&all=1", "since=0", "since=-1", "since=9223372036854775807", "since=9223372036854775808", "since=1&limit=1",
		"from=2026-11-30T00:00:00Z&to=2026-11-30T13:00:00Z", "from=2026-11-30T13:00:00Z&to=2026-11-30T00:00:00Z", "from=0000-01-01T00:00:00Z",
		"from=9999-12-31T23:59:59Z", "to=yesterday", "gpu=GPU-n1-a", "gpu=0", "gpu=-1", "gpu=4", "gpu=99999999999999999999",
		"offset=0", "offset=-1", "offset=1", "offset=9223372036854775807", "offset=x",
		"model=llama-3.1-8b", "model=llama-3.1-405b&mode=training&gpus=524288&seq=16777216", "model=mixtral-8x7b-v0.1&engine=sglang&memory_headroom=0.5",
		"model=llama-3.1-70b&gpu=h100-sxm-80gb,l4&tp=3", "model=x&memory_headroom=NaN", "model=llama-3.1-8b&gpu=" + strings.Repeat("h100,", 100),
		"model=llama-3.1-8b&team=team-b", "model=../etc/passwd", "model=llama-3.1-8b&batch=1048576&input_tokens=16777216",
		"limit=" + strings.Repeat("9", 5000), "next_token=" + strings.Repeat("\x00", 3000), "state=" + strings.Repeat("queued,", 5000),
		"horizon=180d", "horizon=3y", "horizon=6d", "horizon=99999999d", "horizon=1.5d", "target=p90-wait:training<4h", "target=allocation<85%25",
		"target=allocation<NaN", "target=p0-wait<1s", "quantile=0.99", "quantile=1", "quantile=NaN", "lead_time=h100-sxm-80gb=30d", "lead_time=nope=30d",
		"lead_time=h100-sxm-80gb=0d", "lead_time==", "price=h100-sxm-80gb=25000", "price=h100-sxm-80gb=-1", "price=h100-sxm-80gb=1e400",
		"since=30d", "since=0d", "energy_price=0.2", "energy_price=Inf", "depreciation_years=0", "repair_hours=1e9", "gpu_model=h100-sxm-80gb",
		"%zz=1&limit=2", "limit=1;all=1", "quantlie=0.9", "context=1000000000000", "x=1", "horizon=28d&horizon=7d", "node=n1&history=1&limit=5",
		"history=maybe", "limit=100001", "team=%ff%fe", "gpu_model=\x1b[2J", "watch=1&since=1", "a=1&a=2&" + strings.Repeat("b=1&", 2000),
		"selector=sweep%3Da", "selector=sweep!%3Da&all=1", "selector=sweep+in+(a,b),!gone&limit=1", "selector=example.com/run+notin+(0)",
		"selector=sweep%3Db&state=queued", "selector=sweep%3Db&state=succeeded", "selector=", "selector=%20", "selector=a&selector=b",
		"selector=a+in+((b))", "selector=" + strings.Repeat("a,", 100), "selector=" + strings.Repeat("x", 5000), "selector=a%3D%ff",
	} {
		for route := range len(q.routes) {
			f.Add(uint8(route), s, "")
		}
	}
	f.Add(uint8(5), "watch=1", "3")
	f.Add(uint8(5), "watch=1", "\xff\n")
	f.Fuzz(func(t *testing.T, route uint8, rawQuery, lastEventID string) {
		rt := q.routes[int(route)%len(q.routes)]
		rec := q.serve(rt, rawQuery, lastEventID)
		body := rec.Body.Bytes()
		switch code := rec.Code; {
		case code >= 200 && code < 300:
		case code >= 400 && code < 500:
			var e api.ErrorBody
			if len(body) > 1200 || json.Unmarshal(body, &e) != nil || e.Code == "" || e.Error == "" {
				t.Fatalf("%s %s?%.200q: %d with a %d-byte body %.300q: want a JSON error of at most 1200 bytes", rt.method, rt.path, rawQuery, code, len(body), body)
			}
			return
		default:
			t.Fatalf("%s %s?%.200q: %d %.500s", rt.method, rt.path, rawQuery, code, body)
		}
		if !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			return // a stream or a log
		}
		if !json.Valid(body) {
			t.Fatalf("%s %s?%.200q: %d with a body that is not JSON", rt.method, rt.path, rawQuery, rec.Code)
		}
		if bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")) {
			return // a whole list (service discovery), not a page
		}
		var page struct {
			NextToken string `json:"next_token"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatalf("%s %s?%.200q: %d with a body that is not JSON: %v", rt.method, rt.path, rawQuery, rec.Code, err)
		}
		if page.NextToken == "" {
			return
		}
		// The next page is there for the asking.
		v, _ := url.ParseQuery(rawQuery)
		v.Set("next_token", page.NextToken)
		if next := q.serve(rt, v.Encode(), ""); next.Code != http.StatusOK {
			t.Fatalf("%s %s?%.200q gave next_token %q, which %s refuses: %d %.300s", rt.method, rt.path, rawQuery, page.NextToken, v.Encode(), next.Code, next.Body)
		}
	})
}

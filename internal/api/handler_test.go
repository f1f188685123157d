package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/store"
)

// newTestServer serves NewHandler over a memService.
func newTestServer(t *testing.T, opts HandlerOptions) (*httptest.Server, *memService) {
	t.Helper()
	svc := newMemService()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	srv := httptest.NewServer(NewHandler(svc, svc, svc, svc, opts))
	t.Cleanup(srv.Close)
	return srv, svc
}

type httpResult struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, srv *httptest.Server, method, path, token, body string) httpResult {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpResult{resp.StatusCode, resp.Header, string(b)}
}

func errorOf(t *testing.T, r httpResult) ErrorBody {
	t.Helper()
	var b ErrorBody
	if err := json.Unmarshal([]byte(r.body), &b); err != nil {
		t.Fatalf("error body %q is not JSON: %v", r.body, err)
	}
	return b
}

func TestAuthentication(t *testing.T) {
	srv, _ := newTestServer(t, HandlerOptions{})
	tests := map[string]struct {
		method, path, token, body string
		header                    string // raw Authorization header, overrides token
		wantStatus                int
		wantCode                  string
	}{
		"health needs no token":                {method: "GET", path: "/healthz", wantStatus: 200},
		"ready needs no token":                 {method: "GET", path: "/readyz", wantStatus: 200},
		"openapi needs no token":               {method: "GET", path: "/api/v1/openapi.json", wantStatus: 200},
		"missing token is 401":                 {method: "GET", path: "/api/v1/jobs", wantStatus: 401, wantCode: CodeUnauthorized},
		"unknown token is 401":                 {method: "GET", path: "/api/v1/jobs", token: unusedTok, wantStatus: 401, wantCode: CodeUnauthorized},
		"basic auth is 401":                    {method: "GET", path: "/api/v1/jobs", header: "Basic Zm9vOmJhcg==", wantStatus: 401, wantCode: CodeUnauthorized},
		"empty bearer is 401":                  {method: "GET", path: "/api/v1/jobs", header: "Bearer ", wantStatus: 401, wantCode: CodeUnauthorized},
		"bearer scheme is case-insensitive":    {method: "GET", path: "/api/v1/jobs", header: "bearer " + memberA, wantStatus: 200},
		"member lists jobs":                    {method: "GET", path: "/api/v1/jobs", token: memberA, wantStatus: 200},
		"member cannot cordon":                 {method: "POST", path: "/api/v1/nodes/n1/cordon", token: memberA, wantStatus: 403, wantCode: CodeForbidden},
		"member cannot list tokens":            {method: "GET", path: "/api/v1/tokens", token: memberA, wantStatus: 403, wantCode: CodeForbidden},
		"member cannot read metrics":           {method: "GET", path: "/metrics", token: memberA, wantStatus: 403, wantCode: CodeForbidden},
		"admin cordons":                        {method: "POST", path: "/api/v1/nodes/n1/cordon", token: adminTok, wantStatus: 200},
		"node credential on user route is 403": {method: "GET", path: "/api/v1/jobs", token: agentTok, wantStatus: 403, wantCode: CodeForbidden},
		"user token on heartbeat is 403":       {method: "POST", path: "/api/v1/agent/heartbeat", token: adminTok, body: `{}`, wantStatus: 403, wantCode: CodeForbidden},
		"node credential heartbeats":           {method: "POST", path: "/api/v1/agent/heartbeat", token: agentTok, body: `{"node":"n1"}`, wantStatus: 200},
		"heartbeat for another node is 403":    {method: "POST", path: "/api/v1/agent/heartbeat", token: agentTok, body: `{"node":"n2"}`, wantStatus: 403, wantCode: CodeForbidden},
		"register without token is 401":        {method: "POST", path: "/api/v1/agent/register", body: `{}`, wantStatus: 401, wantCode: CodeUnauthorized},
		"register with bad join token is 401":  {method: "POST", path: "/api/v1/agent/register", token: "wrong", body: `{"node":"n9"}`, wantStatus: 401, wantCode: CodeUnauthorized},
		"register with join token":             {method: "POST", path: "/api/v1/agent/register", token: joinTok, body: `{"node":"n9"}`, wantStatus: 200},
		"metrics disabled is 404":              {method: "GET", path: "/metrics", token: adminTok, wantStatus: 404, wantCode: CodeNotFound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			switch {
			case tc.header != "":
				req.Header.Set("Authorization", tc.header)
			case tc.token != "":
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if tc.wantCode == "" {
				return
			}
			r := httpResult{resp.StatusCode, resp.Header, string(body)}
			if got := errorOf(t, r); got.Code != tc.wantCode || got.Error == "" {
				t.Errorf("error body %+v, want code %s", got, tc.wantCode)
			}
			if tc.wantStatus == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

func TestErrorStatus(t *testing.T) {
	tests := map[string]struct {
		err        error
		wantStatus int
		wantCode   string
	}{
		"not found":        {fmt.Errorf("%w: job j1", gpufleet.ErrNotFound), 404, CodeNotFound},
		"invalid":          {fmt.Errorf("%w: resources.gpus", gpufleet.ErrInvalid), 400, CodeInvalid},
		"unsupported":      {fmt.Errorf("x: %w", gpufleet.ErrUnsupported), 422, CodeUnsupported},
		"forbidden":        {fmt.Errorf("%w: admin only", ErrForbidden), 403, CodeForbidden},
		"unauthorized":     {ErrUnauthorized, 401, CodeUnauthorized},
		"fenced":           {fmt.Errorf("apply: %w", store.ErrFenced), 503, CodeUnavailable},
		"not leader":       {fmt.Errorf("%w: not leader", ErrUnavailable), 503, CodeUnavailable},
		"deadline":         {context.DeadlineExceeded, 503, CodeUnavailable},
		"body too large":   {fmt.Errorf("read: %w", &http.MaxBytesError{Limit: 10}), 413, CodeTooLarge},
		"anything else":    {errors.New("disk on fire"), 500, CodeInternal},
		"joined not found": {errors.Join(errors.New("a"), gpufleet.ErrNotFound), 404, CodeNotFound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			status, code := errorStatus(tc.err)
			if status != tc.wantStatus || code != tc.wantCode {
				t.Errorf("errorStatus = %d %s, want %d %s", status, code, tc.wantStatus, tc.wantCode)
			}
		})
	}
}

func TestInternalErrorsAreGeneric(t *testing.T) {
	var logs strings.Builder
	srv, svc := newTestServer(t, HandlerOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	svc.failWith = errors.New("sqlite: database disk image is malformed")
	r := call(t, srv, "GET", "/api/v1/jobs", memberA, "")
	if r.status != 500 {
		t.Fatalf("status %d", r.status)
	}
	if b := errorOf(t, r); b.Error != "internal error" || b.Code != CodeInternal {
		t.Errorf("body %+v leaks or misses", b)
	}
	if !strings.Contains(logs.String(), "malformed") {
		t.Errorf("the internal error was not logged: %q", logs.String())
	}
	svc.failWith = fmt.Errorf("schedule: %w", store.ErrFenced)
	r = call(t, srv, "GET", "/api/v1/jobs", memberA, "")
	if r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Errorf("fenced: status %d, Retry-After %q", r.status, r.header.Get("Retry-After"))
	}
}

func TestStrictBodies(t *testing.T) {
	srv, _ := newTestServer(t, HandlerOptions{})
	tests := map[string]struct {
		path, body string
		wantStatus int
		wantMsg    string
	}{
		"valid submit":            {"/api/v1/jobs", `{"resources":{"gpus":1},"command":["true"]}`, 201, ""},
		"unknown top-level field": {"/api/v1/jobs", `{"gpu":1,"resources":{"gpus":1}}`, 400, `unknown field "gpu"`},
		"unknown nested field":    {"/api/v1/jobs", `{"resources":{"gpus":1,"gpu_memory":"80GiB"}}`, 400, `unknown field "resources.gpu_memory"`},
		"wrong type names field":  {"/api/v1/jobs", `{"resources":{"gpus":"four"}}`, 400, `resources.gpus: expected an integer`},
		"trailing data":           {"/api/v1/jobs", `{"resources":{"gpus":1}} {}`, 400, "unexpected data after the JSON value"},
		"empty body":              {"/api/v1/jobs", ``, 400, "empty body"},
		"null body":               {"/api/v1/jobs", `null`, 400, "expected a JSON object"},
		"array body":              {"/api/v1/jobs", ` [1]`, 400, "expected a JSON object"},
		"syntax error":            {"/api/v1/jobs", `{"resources":`, 400, "truncated"},
		"unknown team field":      {"/api/v1/teams", `{"name":"x","quotas":{}}`, 400, `unknown field "quotas"`},
		"unknown token field":     {"/api/v1/tokens", `{"role":"member","teem":"a"}`, 400, `unknown field "teem"`},
		"bad join ttl":            {"/api/v1/join-tokens", `{"ttl":"soon"}`, 400, `ttl "soon": expected a form like 90s`},
		"class unknown field":     {"/api/v1/classes", `{"name":"h","models":[],"gpus":1}`, 400, `unknown field "gpus"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := call(t, srv, "POST", tc.path, adminTok, tc.body)
			if r.status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", r.status, tc.wantStatus, r.body)
			}
			if tc.wantMsg != "" {
				if b := errorOf(t, r); !strings.Contains(b.Error, tc.wantMsg) || b.Code != CodeInvalid {
					t.Errorf("error %+v, want it to contain %q", b, tc.wantMsg)
				}
			}
		})
	}
}

func TestAgentBodiesAreLenient(t *testing.T) {
	srv, svc := newTestServer(t, HandlerOptions{})
	r := call(t, srv, "POST", "/api/v1/agent/heartbeat", agentTok,
		`{"protocol_version":2,"node":"n1","field_from_the_future":{"x":1},"samples":[{"uuid":"GPU-1","new_reading":3}]}`)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if svc.lastHeartbeat.ProtocolVersion != 2 || len(svc.lastHeartbeat.Samples) != 1 {
		t.Errorf("heartbeat decoded as %+v", svc.lastHeartbeat)
	}
}

func TestBodyTooLarge(t *testing.T) {
	srv, _ := newTestServer(t, HandlerOptions{MaxBodyBytes: 64})
	body := `{"name":"` + strings.Repeat("x", 100) + `","resources":{"gpus":1}}`
	r := call(t, srv, "POST", "/api/v1/jobs", memberA, body)
	if r.status != http.StatusRequestEntityTooLarge || errorOf(t, r).Code != CodeTooLarge {
		t.Errorf("status %d body %s, want 413 too_large", r.status, r.body)
	}
	// Agents are capped too.
	r = call(t, srv, "POST", "/api/v1/agent/heartbeat", agentTok, `{"node":"n1","health_reason":"`+strings.Repeat("y", 100)+`"}`)
	if r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("agent status %d, want 413", r.status)
	}
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	srv, _ := newTestServer(t, HandlerOptions{})
	r := call(t, srv, "GET", "/api/v1/nope", adminTok, "")
	if r.status != 404 || errorOf(t, r).Code != CodeNotFound {
		t.Errorf("unknown path: %d %s", r.status, r.body)
	}
	r = call(t, srv, "PUT", "/api/v1/jobs", adminTok, "{}")
	if r.status != 405 || errorOf(t, r).Code != CodeMethodNotAllowed || !strings.Contains(r.header.Get("Allow"), "GET") {
		t.Errorf("wrong method: %d %v %s", r.status, r.header, r.body)
	}
}

func TestMembersGet404ForOtherTeams(t *testing.T) {
	srv, _ := newTestServer(t, HandlerOptions{})
	r := call(t, srv, "POST", "/api/v1/jobs", memberA, `{"resources":{"gpus":1},"command":["true"]}`)
	if r.status != 201 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var job SubmitResponse
	_ = json.Unmarshal([]byte(r.body), &job)
	for _, path := range []string{"/api/v1/jobs/" + job.ID, "/api/v1/jobs/" + job.ID + "/logs"} {
		if r := call(t, srv, "GET", path, memberB, ""); r.status != 404 {
			t.Errorf("team-b GET %s: %d, want 404", path, r.status)
		}
	}
	if r := call(t, srv, "POST", "/api/v1/jobs/"+job.ID+"/cancel", memberB, ""); r.status != 404 {
		t.Errorf("team-b cancel: %d, want 404", r.status)
	}
	if r := call(t, srv, "GET", "/api/v1/jobs/"+job.ID, memberA, ""); r.status != 200 {
		t.Errorf("team-a GET: %d", r.status)
	}
}

func TestPagination(t *testing.T) {
	srv, _ := newTestServer(t, HandlerOptions{})
	var names []string
	token := ""
	for range 10 {
		r := call(t, srv, "GET", "/api/v1/nodes?limit=2&next_token="+token, memberA, "")
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var page NodeList
		if err := json.Unmarshal([]byte(r.body), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Nodes) > 2 {
			t.Fatalf("page of %d with limit 2", len(page.Nodes))
		}
		for _, n := range page.Nodes {
			names = append(names, n.Name)
		}
		if token = page.NextToken; token == "" {
			break
		}
	}
	if diff := cmp.Diff([]string{"n1", "n2", "n3", "n4", "n5"}, names); diff != "" {
		t.Errorf("paged nodes (-want +got):\n%s", diff)
	}
	for _, q := range []string{"limit=-1", "limit=x", "next_token=garbage"} {
		if r := call(t, srv, "GET", "/api/v1/nodes?"+q, memberA, ""); r.status != 400 {
			t.Errorf("%s: status %d, want 400", q, r.status)
		}
	}
	// The client follows pages.
	c, err := NewClient([]string{srv.URL}, memberA)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := c.Nodes(t.Context())
	if err != nil || len(nodes) != 5 {
		t.Errorf("client Nodes: %d nodes, %v", len(nodes), err)
	}
	// Empty lists are [], never null.
	r := call(t, srv, "GET", "/api/v1/classes", memberA, "")
	if !strings.Contains(r.body, `"classes":[]`) {
		t.Errorf("empty list body %s", r.body)
	}
}

func TestListQueryParameters(t *testing.T) {
	srv, svc := newTestServer(t, HandlerOptions{})
	r := call(t, srv, "GET", "/api/v1/jobs?team=team-a&state=queued,running&all=1&limit=7&next_token=b2ZmOjA", adminTok, "")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	want := JobQuery{Team: "team-a", States: []gpufleet.JobState{"queued", "running"}, All: true, Limit: 7, NextToken: "b2ZmOjA"}
	if diff := cmp.Diff(want, svc.lastJobQuery); diff != "" {
		t.Errorf("job query (-want +got):\n%s", diff)
	}
	r = call(t, srv, "GET", "/api/v1/usage?team=team-a&from=2025-01-01T00:00:00Z&to=2025-02-01T00:00:00%2B01:00", memberA, "")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	wantU := UsageQuery{Team: "team-a", From: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2025, 1, 31, 23, 0, 0, 0, time.UTC), By: "team", Period: "all"}
	if diff := cmp.Diff(wantU, svc.lastUsage); diff != "" {
		t.Errorf("usage query (-want +got):\n%s", diff)
	}
	if r := call(t, srv, "GET", "/api/v1/usage?by=gpu-model&period=week", memberA, ""); r.status != 200 || svc.lastUsage.By != "gpu-model" || svc.lastUsage.Period != "week" {
		t.Errorf("usage by model per week: %d %s, query %+v", r.status, r.body, svc.lastUsage)
	}
	for q, field := range map[string]string{"from=yesterday": "from", "from=2025-02-01T00:00:00Z&to=2025-01-01T00:00:00Z": "to",
		"by=rack": "by", "period=fortnight": "period"} {
		if r := call(t, srv, "GET", "/api/v1/usage?"+q, memberA, ""); r.status != 400 || !strings.Contains(r.body, field) {
			t.Errorf("usage?%s: %d %s, want 400 naming %s", q, r.status, r.body, field)
		}
	}
}

func TestPlanQueryParameters(t *testing.T) {
	srv, svc := newTestServer(t, HandlerOptions{})
	r := call(t, srv, "GET", "/api/v1/plan?model=llama-3.1-70b&gpu=h100-sxm-80gb,l4&gpu=h200-sxm-141gb&gpus=8&precision=fp8&input_tokens=2048&tp=2&engine=sglang&memory_headroom=0.15"+
		"&dp=2&cp=2&ep=4&tokens=300000000000&fp32_grad_accum=true&scenario=server&tpot_target_ms=30&ttft_target_ms=500", memberA, "")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	want := PlanQuery{GPUModels: []string{"h100-sxm-80gb", "l4", "h200-sxm-141gb"}, GPUs: 8,
		Model: ModelRequest{Name: "llama-3.1-70b", Precision: "fp8", InputTokens: 2048, TP: 2, Engine: "sglang", MemoryHeadroom: 0.15,
			DP: 2, CP: 2, EP: 4, Tokens: 3e11, FP32GradAccum: true, Scenario: "server", TPOTTargetMS: 30, TTFTTargetMS: 500}}
	svc.mu.Lock()
	got := svc.lastPlan
	svc.mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plan query (-want +got):\n%s", diff)
	}
	for q, field := range map[string]string{"": "model", "model=x&gpus=many": "gpus", "model=x&gpus=-1": "gpus", "model=x&tp=1e9": "tp",
		"model=x&memory_headroom=0.95": "memory_headroom", "model=x&memory_headroom=half": "memory_headroom", "model=x&gpu=%00": "gpu",
		"model=x&batch=99999999999": "batch"} {
		if r := call(t, srv, "GET", "/api/v1/plan?"+q, memberA, ""); r.status != 400 || !strings.Contains(r.body, field) {
			t.Errorf("plan?%s: %d %s, want 400 naming %s", q, r.status, r.body, field)
		}
	}
}

func TestTokenSecretsNeverListed(t *testing.T) {
	srv, _ := newTestServer(t, HandlerOptions{})
	r := call(t, srv, "GET", "/api/v1/tokens", adminTok, "")
	if strings.Contains(r.body, "leaked-secret") {
		t.Errorf("token list shows a secret: %s", r.body)
	}
}

func TestReadyAndMetrics(t *testing.T) {
	ready := errors.New("store not open")
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "gpufleet_up 1") })
	srv, _ := newTestServer(t, HandlerOptions{Ready: func() error { return ready }, MetricsHandler: metrics})
	if r := call(t, srv, "GET", "/readyz", "", ""); r.status != 503 || !strings.Contains(r.body, "store not open") {
		t.Errorf("not ready: %d %s", r.status, r.body)
	}
	ready = nil
	if r := call(t, srv, "GET", "/readyz", "", ""); r.status != 200 {
		t.Errorf("ready: %d %s", r.status, r.body)
	}
	if r := call(t, srv, "GET", "/metrics", "", ""); r.status != 401 {
		t.Errorf("metrics without token: %d", r.status)
	}
	for _, tok := range []string{adminTok, monitor} {
		if r := call(t, srv, "GET", "/metrics", tok, ""); r.status != 200 || !strings.Contains(r.body, "gpufleet_up 1") {
			t.Errorf("metrics with %s: %d %s", tok, r.status, r.body)
		}
	}
}

// TestFollowedLogStaysQuiet: a followed log may be quiet for longer than
// the per-write timeout (a job that prints once, then sleeps) and still
// ends cleanly: the deadline of one write must not outlive it.
func TestFollowedLogStaysQuiet(t *testing.T) {
	srv, svc := newTestServer(t, HandlerOptions{StreamWriteTimeout: 50 * time.Millisecond})
	svc.jobs["j-1"] = gpufleet.Job{ID: "j-1", Team: "team-a"}
	svc.logs["j-1"] = "CUDA_VISIBLE_DEVICES=GPU-1\ndone\n"
	svc.logGap = 300 * time.Millisecond
	c, _ := NewClient([]string{srv.URL}, memberA)
	var out strings.Builder
	if err := c.Logs(t.Context(), "j-1", LogQuery{Follow: true}, &out); err != nil || out.String() != svc.logs["j-1"] {
		t.Errorf("follow across a quiet spell: %q, %v", out.String(), err)
	}
}

func TestLogs(t *testing.T) {
	srv, svc := newTestServer(t, HandlerOptions{})
	svc.jobs["j-1"] = gpufleet.Job{ID: "j-1", Team: "team-a"}
	svc.logs["j-1"] = "step 1\nstep 2\nstep 3\n"
	r := call(t, srv, "GET", "/api/v1/jobs/j-1/logs", memberA, "")
	if r.status != 200 || r.body != svc.logs["j-1"] || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Errorf("logs: %d %q %v", r.status, r.body, r.header)
	}
	c, _ := NewClient([]string{srv.URL}, memberA)
	var out strings.Builder
	if err := c.Logs(t.Context(), "j-1", LogQuery{Follow: true}, &out); err != nil || out.String() != svc.logs["j-1"] {
		t.Errorf("follow: %q, %v", out.String(), err)
	}
	if err := c.Logs(t.Context(), "j-404", LogQuery{}, &out); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("missing job logs: %v", err)
	}
	// since and since_time reach the service as a duration and a time.
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for _, q := range []LogQuery{{Since: 15 * time.Minute}, {SinceTime: at}, {Since: 90 * time.Second, Tail: 5}} {
		if err := c.Logs(t.Context(), "j-1", q, io.Discard); err != nil || svc.lastLogs != q {
			t.Errorf("client %+v: service got %+v, %v", q, svc.lastLogs, err)
		}
	}
	for query, want := range map[string]string{
		"since=soon":           "duration",
		"since=-5m":            "duration",
		"since_time=yesterday": "since_time",
		"since=5m&since_time=2026-12-04T10:00:00Z": "give one",
	} {
		r := call(t, srv, "GET", "/api/v1/jobs/j-1/logs?"+query, memberA, "")
		if r.status != 400 || !strings.Contains(r.body, want) {
			t.Errorf("%s: %d %s, want 400 naming %s", query, r.status, r.body, want)
		}
	}
}

func TestEventList(t *testing.T) {
	srv, svc := newTestServer(t, HandlerOptions{})
	for i := range 5 {
		svc.events = append(svc.events, gpufleet.Event{ID: int64(i + 1), Kind: "job.submitted", Team: "team-a"})
	}
	svc.events = append(svc.events, gpufleet.Event{ID: 6, Kind: "job.submitted", Team: "team-b"})
	c, _ := NewClient([]string{srv.URL}, memberA)
	page, err := c.Events(t.Context(), EventQuery{Since: 1, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 2 || page.Events[0].ID != 2 || page.NextToken != "3" {
		t.Errorf("page %+v", page)
	}
	if r := call(t, srv, "GET", "/api/v1/events?since=x", memberA, ""); r.status != 400 {
		t.Errorf("since=x: %d", r.status)
	}
}

// readSSE reads server-sent events until n data events have arrived.
func readSSE(t *testing.T, body io.Reader, n int) (events []gpufleet.Event, comments []string, raw string) {
	t.Helper()
	sc := bufio.NewScanner(body)
	var b strings.Builder
	for sc.Scan() && len(events) < n {
		line := sc.Text()
		b.WriteString(line + "\n")
		switch {
		case strings.HasPrefix(line, ":"):
			comments = append(comments, line)
		case strings.HasPrefix(line, "data: "):
			var ev gpufleet.Event
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("data line %q: %v", line, err)
			}
			events = append(events, ev)
		}
	}
	return events, comments, b.String()
}

func TestWatchServerSentEvents(t *testing.T) {
	svc := newMemService()
	svc.events = []gpufleet.Event{
		{ID: 1, Kind: "job.submitted", Team: "team-a", Object: "j-1"},
		{ID: 2, Kind: "job.submitted", Team: "team-b", Object: "j-2"},
		{ID: 3, Kind: "attempt.started", Team: "team-a", Object: "a-1"},
	}
	h := NewHandler(svc, svc, svc, svc, HandlerOptions{KeepAlive: 20 * time.Millisecond})
	// A real http.Server with the production settings but a short read
	// timeout: a stream must outlive it.
	hs := NewHTTPServer("", h)
	hs.ReadTimeout, hs.WriteTimeout = 50*time.Millisecond, 50*time.Millisecond
	srv := httptest.NewUnstartedServer(h)
	srv.Config = hs
	srv.Start()
	t.Cleanup(srv.Close)

	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/api/v1/events?watch=1", nil)
	req.Header.Set("Authorization", "Bearer "+memberA)
	req.Header.Set("Last-Event-ID", "1")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	go func() {
		time.Sleep(200 * time.Millisecond) // beyond the read and write timeouts
		svc.eventCh <- gpufleet.Event{ID: 4, Kind: "job.finished", Team: "team-b"}
		svc.eventCh <- gpufleet.Event{ID: 5, Kind: "job.finished", Team: "team-a", Object: "j-1"}
	}()
	events, comments, raw := readSSE(t, resp.Body, 2)
	var ids []int64
	for _, ev := range events {
		ids = append(ids, ev.ID)
	}
	if diff := cmp.Diff([]int64{3, 5}, ids); diff != "" {
		t.Errorf("event ids (-want +got):\n%s\n%s", diff, raw)
	}
	if !strings.Contains(raw, "id: 3\nevent: attempt.started\ndata: {") {
		t.Errorf("framing:\n%s", raw)
	}
	var keepalives int
	for _, c := range comments {
		if c == ": keepalive" {
			keepalives++
		}
	}
	if keepalives == 0 {
		t.Errorf("no keepalive comment in 200ms with a 20ms interval:\n%s", raw)
	}
}

func TestClientWatchResumes(t *testing.T) {
	srv, svc := newTestServer(t, HandlerOptions{KeepAlive: 10 * time.Millisecond})
	svc.events = []gpufleet.Event{{ID: 1, Kind: "a", Team: "team-a"}, {ID: 2, Kind: "b", Team: "team-a"}}
	c, _ := NewClient([]string{srv.URL}, memberA, WithBackoff(time.Millisecond, time.Millisecond))
	var got []int64
	stop := errors.New("enough")
	err := c.Watch(t.Context(), 0, func(ev gpufleet.Event) error {
		got = append(got, ev.ID)
		if len(got) == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || len(got) != 2 {
		t.Errorf("watch: %v %v", got, err)
	}
	// A member token the server rejects ends the watch with the error.
	bad, _ := NewClient([]string{srv.URL}, "nope")
	if err := bad.Watch(t.Context(), 0, func(gpufleet.Event) error { return nil }); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("watch with a bad token: %v", err)
	}
}

func TestSSEFrameEscapesKind(t *testing.T) {
	got := string(sseFrame(gpufleet.Event{ID: 7, Kind: "a\nb", Detail: "line1\nline2"}))
	if strings.Count(got, "\n") != 4 || !strings.HasPrefix(got, "id: 7\nevent: a b\ndata: {") {
		t.Errorf("frame %q", got)
	}
}

func TestOptionalServicesMayBeNil(t *testing.T) {
	svc := newMemService()
	srv := httptest.NewServer(NewHandler(svc, nil, nil, nil, HandlerOptions{}))
	t.Cleanup(srv.Close)
	for _, rc := range []struct{ method, path, token string }{
		{"GET", "/api/v1/jobs/j-1/logs", memberA},
		{"GET", "/api/v1/events?watch=1", memberA},
		{"POST", "/api/v1/agent/register", joinTok},
		{"POST", "/api/v1/agent/heartbeat", agentTok},
	} {
		if r := call(t, srv, rc.method, rc.path, rc.token, "{}"); r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s %s: %d %s, want 422", rc.method, rc.path, r.status, r.body)
		}
	}
}

// TestObserveRequest: every API request reaches the observer with its
// route pattern (not its path), method and status.
func TestObserveRequest(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv, _ := newTestServer(t, HandlerOptions{ObserveRequest: func(route, method string, code int, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s %s %d", method, route, code))
	}})
	for _, p := range []string{"/healthz", "/api/v1/jobs/j-404"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"GET /healthz 200", "GET /api/v1/jobs/{id} 401"}; !slices.Equal(seen, want) {
		t.Errorf("observed %q, want %q", seen, want)
	}
}

// TestFollowerForwards: with a LeaderFunc, a follower answers its own
// health, readiness and metrics, forwards everything else to the leader
// once (a forwarded request is not forwarded again), and says 503 when
// nobody leads.
func TestFollowerForwards(t *testing.T) {
	var got []string
	leaderSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI()+" fwd="+r.Header.Get("X-Gpufleet-Forwarded"))
		w.Header().Set(LeaderHeader, "http://leader")
		w.WriteHeader(http.StatusTeapot)
	}))
	defer leaderSrv.Close()
	leads := func(context.Context) (string, bool, error) { return leaderSrv.URL, false, nil }
	nobody := func(context.Context) (string, bool, error) {
		return "", false, fmt.Errorf("%w: no replica leads now", ErrUnavailable)
	}
	for _, tc := range []struct {
		name   string
		leader LeaderFunc
		method string
		path   string
		hdr    string
		status int
	}{
		{"health is its own", leads, "GET", "/healthz", "", 200},
		{"a read goes to the leader", leads, "GET", "/api/v1/nodes?watch=1", "", http.StatusTeapot},
		{"a write goes to the leader", leads, "POST", "/api/v1/jobs", "", http.StatusTeapot},
		{"the dashboard goes to the leader", leads, "GET", "/nodes", "", http.StatusTeapot},
		{"forwarded once only", leads, "GET", "/api/v1/nodes", "1", http.StatusServiceUnavailable},
		{"nobody leads", nobody, "GET", "/api/v1/nodes", "", http.StatusServiceUnavailable},
		{"nobody leads, health still answers", nobody, "GET", "/healthz", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			h := NewHandler(nil, nil, nil, nil, HandlerOptions{Leader: tc.leader})
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader("{}"))
			if tc.hdr != "" {
				req.Header.Set("X-Gpufleet-Forwarded", tc.hdr)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if tc.status == http.StatusTeapot {
				if len(got) != 1 || got[0] != tc.method+" "+tc.path+" fwd=1" || w.Header().Get(LeaderHeader) != "http://leader" {
					t.Errorf("the leader saw %q and answered with leader %q", got, w.Header().Get(LeaderHeader))
				}
			} else if len(got) != 0 {
				t.Errorf("forwarded %q", got)
			}
		})
	}
}

// TestClientPlanSendsTheWholeModelBlock: what the client sends is what the
// handler reads back, every key of the model block included.
func TestClientPlanSendsTheWholeModelBlock(t *testing.T) {
	srv, svc := newTestServer(t, HandlerOptions{})
	c, err := NewClient([]string{srv.URL}, memberA)
	if err != nil {
		t.Fatal(err)
	}
	want := PlanQuery{GPUModels: []string{"h100-sxm-80gb", "l4"}, GPUs: 16,
		Model: ModelRequest{Name: "llama-3.1-70b", Mode: "training", Precision: "bf16", KVPrecision: "fp8", Batch: 4, InputTokens: 100, OutputTokens: 50,
			Seq: 8192, MicroBatch: 2, GlobalBatch: 256, Optimizer: "sgd", ZeRO: 1, Recompute: "full", TP: 4, PP: 2, DP: 2, CP: 2, EP: 1,
			Tokens: 2e12, FP32GradAccum: true, Scenario: "offline", TPOTTargetMS: 25.5, TTFTTargetMS: 400, Engine: "vllm@0.6", MemoryHeadroom: 0.2,
			MaxModelLen: 8192, MaxNumBatchedTokens: 4096, MaxNumSeqs: 128}}
	if _, err := c.Plan(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	svc.mu.Lock()
	got := svc.lastPlan
	svc.mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plan query (-sent +read):\n%s", diff)
	}
}

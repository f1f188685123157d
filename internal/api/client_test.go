package api

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
)

// deadURL is an address nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestClientRoundTrips(t *testing.T) {
	srv, svc := newTestServer(t, HandlerOptions{})
	admin, err := NewClient([]string{srv.URL}, adminTok)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	sub, err := admin.SubmitJob(ctx, SubmitRequest{Team: "team-a", Resources: gpufleet.Resources{GPUs: 2}, Command: []string{"sleep", "1"}})
	if err != nil || sub.ID == "" || len(sub.Warnings) != 1 {
		t.Fatalf("submit: %+v %v", sub, err)
	}
	if svc.lastSubmit.Resources.GPUs != 2 {
		t.Errorf("server saw %+v", svc.lastSubmit)
	}
	if j, err := admin.Job(ctx, sub.ID); err != nil || j.ID != sub.ID {
		t.Errorf("job: %+v %v", j, err)
	}
	if jobs, err := admin.AllJobs(ctx, JobQuery{}); err != nil || len(jobs) != 1 {
		t.Errorf("jobs: %v %v", jobs, err)
	}
	if j, err := admin.CancelJob(ctx, sub.ID); err != nil || !j.CancelRequested {
		t.Errorf("cancel: %+v %v", j, err)
	}
	if q, err := admin.Queue(ctx); err != nil || len(q) != 1 {
		t.Errorf("queue: %v %v", q, err)
	}
	if n, err := admin.NodeAction(ctx, "n2", Drain); err != nil || n.State != gpufleet.NodeDraining {
		t.Errorf("drain: %+v %v", n, err)
	}
	if _, err := admin.NodeAction(ctx, "n2", "explode"); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("bad action: %v", err)
	}
	if n, err := admin.Node(ctx, "n2"); err != nil || n.State != gpufleet.NodeDraining {
		t.Errorf("node: %+v %v", n, err)
	}
	w := 2.0
	if tm, err := admin.PutTeam(ctx, TeamRequest{Name: "team-c", Quota: map[string]int{"h100": 8}, Weight: &w}); err != nil || tm.Weight != 2 {
		t.Errorf("put team: %+v %v", tm, err)
	}
	if ts, err := admin.Teams(ctx); err != nil || len(ts) != 3 {
		t.Errorf("teams: %v %v", ts, err)
	}
	if _, err := admin.PutClass(ctx, gpufleet.Class{Name: "big", Models: []string{"h100-sxm-80gb"}}); err != nil {
		t.Error(err)
	}
	if cs, err := admin.Classes(ctx); err != nil || len(cs) != 1 {
		t.Errorf("classes: %v %v", cs, err)
	}
	if tok, err := admin.CreateToken(ctx, TokenRequest{Team: "team-a", Role: gpufleet.RoleMember}); err != nil || tok.Token == "" {
		t.Errorf("create token: %+v %v", tok, err)
	}
	if toks, err := admin.Tokens(ctx); err != nil || len(toks) != 1 || toks[0].Token != "" {
		t.Errorf("tokens: %+v %v", toks, err)
	}
	if err := admin.RevokeToken(ctx, "t-a"); err != nil {
		t.Error(err)
	}
	if err := admin.RevokeToken(ctx, "t-zzz"); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("revoke missing: %v", err)
	}
	if jt, err := admin.CreateJoinToken(ctx, JoinTokenRequest{Node: "n7", TTL: gpufleet.Duration(time.Hour)}); err != nil || jt.Token == "" {
		t.Errorf("join token: %+v %v", jt, err)
	}
	from := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if u, err := admin.Usage(ctx, UsageQuery{Team: "team-a", From: from}); err != nil || len(u.Teams) != 1 || !svc.lastUsage.From.Equal(from) {
		t.Errorf("usage: %+v %v", u, err)
	}
	to := from.Add(time.Hour)
	if r, err := admin.Rollups(ctx, RollupQuery{Node: "n1", GPU: "GPU-1", From: from, To: to}); err != nil || len(r) != 1 || *r[0].Utilization != 0.5 ||
		cmp.Diff(RollupQuery{Node: "n1", GPU: "GPU-1", From: from, To: to}, svc.lastRollups) != "" {
		t.Errorf("node rollups: %+v %v (query %+v)", r, err, svc.lastRollups)
	}
	if _, err := admin.Rollups(ctx, RollupQuery{JobID: "no-such-job"}); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("rollups of a missing job: %v", err)
	}
	reg, err := admin.Register(ctx, joinTok, RegisterRequest{Node: "n1"})
	if err != nil || reg.Credential == "" {
		t.Fatalf("register: %+v %v", reg, err)
	}
	agent := admin.WithToken(reg.Credential)
	if rn, err := agent.RenewCredential(ctx); err != nil || rn.Credential == "" || rn.Node != "n1" {
		t.Errorf("renew: %+v %v", rn, err)
	}
	if _, err := admin.RenewCredential(ctx); !errors.Is(err, ErrForbidden) {
		t.Errorf("renew with an admin token: %v", err)
	}
	if _, err := agent.Heartbeat(ctx, HeartbeatRequest{Node: "n1"}); err != nil {
		t.Errorf("heartbeat: %v", err)
	}
	if svc.lastHeartbeat.ProtocolVersion != ProtocolVersion {
		t.Errorf("heartbeat protocol version %d", svc.lastHeartbeat.ProtocolVersion)
	}
	if err := admin.Ready(ctx); err != nil {
		t.Error(err)
	}
}

func TestClientErrorsWrapSentinels(t *testing.T) {
	srv, _ := newTestServer(t, HandlerOptions{})
	member, _ := NewClient([]string{srv.URL}, memberA)
	tests := map[string]struct {
		call func() error
		want error
		msg  string
	}{
		"missing job":     {func() error { _, err := member.Job(t.Context(), "j-404"); return err }, gpufleet.ErrNotFound, `job "j-404"`},
		"admin only":      {func() error { _, err := member.Tokens(t.Context()); return err }, ErrForbidden, "admin token required"},
		"invalid request": {func() error { _, err := member.SubmitJob(t.Context(), SubmitRequest{}); return err }, gpufleet.ErrInvalid, "resources.gpus"},
		"bad token": {func() error {
			c, _ := NewClient([]string{srv.URL}, "nope")
			_, err := c.Nodes(t.Context())
			return err
		}, ErrUnauthorized, "invalid, expired or revoked token"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %v, want %v containing %q", err, tc.want, tc.msg)
			}
			var apiErr *Error
			if !errors.As(err, &apiErr) || apiErr.Code == "" {
				t.Errorf("error %T %v is not an *Error with a code", err, err)
			}
		})
	}
}

func TestClientFailover(t *testing.T) {
	good, _ := newTestServer(t, HandlerOptions{})
	var hits503 atomic.Int32
	notLeader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits503.Add(1)
		writeErrorBody(w, http.StatusServiceUnavailable, CodeUnavailable, "unavailable: not the leader")
	}))
	t.Cleanup(notLeader.Close)

	c, err := NewClient([]string{deadURL(t), notLeader.URL, good.URL}, adminTok, WithBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// A non-idempotent submit still fails over: a refused connection and a
	// 503 both mean the request was not acted on.
	if _, err := c.SubmitJob(t.Context(), SubmitRequest{Team: "team-a", Resources: gpufleet.Resources{GPUs: 1}}); err != nil {
		t.Fatalf("submit through failover: %v", err)
	}
	if hits503.Load() != 1 {
		t.Errorf("503 server hit %d times, want 1", hits503.Load())
	}
	// The client sticks to the server that answered.
	if _, err := c.Nodes(t.Context()); err != nil || hits503.Load() != 1 {
		t.Errorf("second call: %v, 503 hits %d", err, hits503.Load())
	}
	// All servers unavailable: the error says so and wraps ErrUnavailable.
	down, _ := NewClient([]string{notLeader.URL}, adminTok, WithRetries(3), WithBackoff(time.Millisecond, time.Millisecond))
	hits503.Store(0)
	if _, err := down.Nodes(t.Context()); !errors.Is(err, ErrUnavailable) || hits503.Load() != 3 {
		t.Errorf("all down: %v after %d tries, want ErrUnavailable after 3", err, hits503.Load())
	}
}

func TestClientRetriesOnlyIdempotentRequests(t *testing.T) {
	var posts, gets atomic.Int32
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := gets.Load()
		if r.Method == http.MethodPost {
			posts.Add(1)
		} else {
			n = gets.Add(1)
		}
		if r.Method == http.MethodGet && n >= 3 {
			_ = json.NewEncoder(w).Encode(NodeList{Nodes: []gpufleet.Node{{Name: "n1"}}})
			return
		}
		// Drop the connection mid-request: the server may have acted.
		hj, _ := w.(http.Hijacker)
		conn, _, _ := hj.Hijack()
		conn.Close()
	}))
	t.Cleanup(flaky.Close)
	c, _ := NewClient([]string{flaky.URL}, adminTok, WithRetries(4), WithBackoff(time.Millisecond, time.Millisecond))
	nodes, err := c.Nodes(t.Context())
	if err != nil || len(nodes) != 1 || gets.Load() != 3 {
		t.Errorf("GET retried: %v %v after %d tries", nodes, err, gets.Load())
	}
	if _, err := c.CreateToken(t.Context(), TokenRequest{Role: gpufleet.RoleAdmin}); err == nil || posts.Load() != 1 {
		t.Errorf("POST create token: %v after %d tries, want one try", err, posts.Load())
	}
	// With a request_id a submit is idempotent, so it is retried.
	posts.Store(0)
	_, _ = c.SubmitJob(t.Context(), SubmitRequest{RequestID: "r-1", Resources: gpufleet.Resources{GPUs: 1}})
	if posts.Load() != 4 {
		t.Errorf("submit with request_id tried %d times, want 4", posts.Load())
	}
}

func TestNewClientValidatesServers(t *testing.T) {
	for _, servers := range [][]string{nil, {""}, {"ftp://x"}, {"http://"}} {
		if _, err := NewClient(servers, "t"); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("NewClient(%q): %v", servers, err)
		}
	}
	c, err := NewClient([]string{"127.0.0.1:8080/", " https://a.example "}, "t")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Servers(), ","); got != "http://127.0.0.1:8080,https://a.example" {
		t.Errorf("servers %q", got)
	}
}

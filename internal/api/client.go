package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/rollout"
)

// Client is a typed client for the API. It fails over between several
// server URLs (on connection errors and 503) and retries idempotent requests
// with exponential backoff. Errors from the server are *Error values that
// wrap the matching sentinel (gpufleet.ErrNotFound, ErrForbidden, ...). A
// Client is safe for concurrent use.
type Client struct {
	servers    []string // base URLs without a trailing slash
	token      string
	hc         *http.Client
	attempts   int
	backoff    time.Duration
	maxBackoff time.Duration
	timeout    time.Duration
	userAgent  string
	log        *slog.Logger
	// current is the index of the server that answered last, or of the
	// leader its answer named (LeaderHeader) when that is one of servers;
	// leader is the last leader named.
	current *atomic.Int32
	leader  *atomic.Pointer[string]
}

// ClientOption configures NewClient.
type ClientOption func(*Client)

// WithHTTPClient sets the http.Client (its Timeout must be 0: streams are
// long; WithTimeout bounds the other requests).
func WithHTTPClient(hc *http.Client) ClientOption { return func(c *Client) { c.hc = hc } }

// WithRetries sets how many rounds over all servers a request may take
// (default 4; 1 means no retry).
func WithRetries(n int) ClientOption {
	return func(c *Client) { c.attempts = max(n, 1) }
}

// WithBackoff sets the first pause between rounds and its cap (defaults
// 200ms and 5s); it doubles each round.
func WithBackoff(first, maxPause time.Duration) ClientOption {
	return func(c *Client) { c.backoff, c.maxBackoff = first, maxPause }
}

// WithTimeout bounds each non-streaming request (default 30s; 0: none).
func WithTimeout(d time.Duration) ClientOption { return func(c *Client) { c.timeout = d } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) ClientOption { return func(c *Client) { c.userAgent = ua } }

// WithLogger logs retries and failovers at debug level.
func WithLogger(l *slog.Logger) ClientOption { return func(c *Client) { c.log = l } }

// NewClient returns a client for servers (base URLs such as
// https://gpufleet.example:8443; a bare host:port means http) that sends
// token as Authorization: Bearer.
func NewClient(servers []string, token string, opts ...ClientOption) (*Client, error) {
	c := &Client{
		token: token, hc: &http.Client{}, attempts: 4,
		backoff: 200 * time.Millisecond, maxBackoff: 5 * time.Second, timeout: 30 * time.Second,
		userAgent: "gpufleet/" + gpufleet.Version, log: slog.New(slog.DiscardHandler),
		current: new(atomic.Int32), leader: new(atomic.Pointer[string]),
	}
	for _, s := range servers {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = "http://" + s
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: server %q: expected a URL such as https://host:port", gpufleet.ErrInvalid, s)
		}
		c.servers = append(c.servers, strings.TrimRight(u.String(), "/"))
	}
	if len(c.servers) == 0 {
		return nil, fmt.Errorf("%w: no server URL given", gpufleet.ErrInvalid)
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// WithToken returns a copy of the client that sends another token (an agent
// switches from its join token to its node credential).
func (c *Client) WithToken(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

// Leader is the base URL of the replica that led when a server last
// answered ("" before any said: a single server, or an older one).
func (c *Client) Leader() string {
	if l := c.leader.Load(); l != nil {
		return *l
	}
	return ""
}

// Servers returns the base URLs the client fails over between.
func (c *Client) Servers() []string { return append([]string(nil), c.servers...) }

// rawBody is a request body sent as is (application/octet-stream).
type rawBody []byte

// request is one API call.
type request struct {
	method, path string
	query        url.Values
	body         any
	// idempotent requests are retried after any transport error; others
	// only when the server surely did not get them (dial errors, 503).
	idempotent bool
	stream     bool   // no timeout: events, followed logs
	token      string // overrides the client's token (registration)
}

// do sends req and decodes a 2xx JSON body into out (unless out is nil).
func (c *Client) do(ctx context.Context, req request, out any) error {
	resp, cancel, err := c.send(ctx, req)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", req.method, req.path, err)
	}
	return nil
}

// send performs req with failover and retries and returns a 2xx response;
// the caller closes its body and then calls cancel.
func (c *Client) send(ctx context.Context, req request) (*http.Response, context.CancelFunc, error) {
	var payload []byte
	if rb, ok := req.body.(rawBody); ok {
		payload = append([]byte{}, rb...)
	} else if req.body != nil {
		var err error
		if payload, err = json.Marshal(req.body); err != nil {
			return nil, nil, fmt.Errorf("%s %s: encode body: %w", req.method, req.path, err)
		}
	}
	pause := c.backoff
	var lastErr error
	for round := 0; round < c.attempts; round++ {
		if round > 0 {
			c.log.LogAttrs(ctx, slog.LevelDebug, "retrying", slog.String("path", req.path), slog.Int("round", round), slog.Any("err", lastErr))
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, nil, errors.Join(ctx.Err(), lastErr)
			case <-t.C:
			}
			pause = min(pause*2, c.maxBackoff)
		}
		start := int(c.current.Load())
		for i := range c.servers {
			idx := (start + i) % len(c.servers)
			resp, cancel, err := c.once(ctx, c.servers[idx], req, payload)
			if err == nil {
				c.current.Store(int32(idx))
				if l := strings.TrimRight(resp.Header.Get(LeaderHeader), "/"); l != "" {
					c.leader.Store(&l)
					if k := slices.Index(c.servers, l); k >= 0 {
						c.current.Store(int32(k)) // straight to the leader next time
					}
				}
				return resp, cancel, nil
			}
			lastErr = err
			if ctx.Err() != nil {
				return nil, nil, err
			}
			if !c.retryable(req, err) {
				return nil, nil, err
			}
			c.log.LogAttrs(ctx, slog.LevelDebug, "server failed, trying the next", slog.String("server", c.servers[idx]), slog.Any("err", err))
		}
	}
	return nil, nil, lastErr
}

// retryable says whether err may be retried on another server or later.
func (c *Client) retryable(req request, err error) bool {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		// 503: the server did not act (not the leader, not ready).
		return apiErr.Status == http.StatusServiceUnavailable ||
			(req.idempotent && (apiErr.Status == http.StatusBadGateway || apiErr.Status == http.StatusGatewayTimeout))
	}
	if req.idempotent {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// once sends req to one server.
func (c *Client) once(ctx context.Context, base string, req request, payload []byte) (*http.Response, context.CancelFunc, error) {
	cancel := context.CancelFunc(func() {})
	if !req.stream && c.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	u := base + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u, body)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("%s %s: %w", req.method, req.path, err)
	}
	if _, raw := req.body.(rawBody); raw {
		hr.Header.Set("Content-Type", "application/octet-stream")
	} else if payload != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	tok := c.token
	if req.token != "" {
		tok = req.token
	}
	if tok != "" {
		hr.Header.Set("Authorization", "Bearer "+tok)
	}
	hr.Header.Set("User-Agent", c.userAgent)
	if req.stream && req.path == "/api/v1/events" {
		hr.Header.Set("Accept", "text/event-stream")
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		cancel()
		return nil, nil, err // a *url.Error: it names the method and URL
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, cancel, nil
	}
	defer cancel()
	defer resp.Body.Close()
	return nil, nil, readError(resp)
}

// readError turns a non-2xx response into an *Error. The message is what
// a terminal can show: at most as long as the server's own (writeErrorBody
// cuts at maxErrorMessage and adds "..."), valid UTF-8, and without
// control characters but newlines and tabs (a broken server or a proxy in
// between must not write escape sequences to the user's terminal).
func readError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Status: resp.StatusCode}
	var b ErrorBody
	if json.Unmarshal(data, &b) == nil && (b.Error != "" || b.Code != "") {
		e.Code, e.Message = cleanMessage(b.Code, maxCodeLen), cleanMessage(b.Error, maxErrorMessage+len("..."))
		e.Explanation = b.Explanation
	} else {
		e.Message = strings.TrimSpace(string(data))
		if e.Message == "" || len(e.Message) > 200 {
			e.Message = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		}
		e.Message = cleanMessage(e.Message, maxErrorMessage)
	}
	return e
}

// maxCodeLen bounds the error code an *Error keeps (the API's are short
// words such as not_found).
const maxCodeLen = 64

// cleanMessage makes s safe to print: invalid UTF-8 and control characters
// other than newline and tab become U+FFFD, and a text longer than maxLen
// bytes is cut (at a character) to end in "..." within maxLen.
func cleanMessage(s string, maxLen int) string {
	s = strings.Map(func(r rune) rune {
		if r != '\n' && r != '\t' && unicode.IsControl(r) {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, string(utf8.RuneError)))
	if len(s) <= maxLen {
		return s
	}
	cut := max(maxLen-len("..."), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// SubmitJob submits a job. It is retried only when r carries a request_id
// (the server then deduplicates) or the server surely did not receive it.
func (c *Client) SubmitJob(ctx context.Context, r SubmitRequest) (SubmitResponse, error) {
	var out SubmitResponse
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/jobs", body: r, idempotent: r.RequestID != ""}, &out)
	return out, err
}

// setStates sets ?state= to the states, comma-separated (none: unset).
func setStates(v url.Values, states []gpufleet.JobState) {
	if len(states) == 0 {
		return
	}
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	v.Set("state", strings.Join(s, ","))
}

// Jobs returns one page of jobs; pass the page's NextToken back in
// q.NextToken for the next.
func (c *Client) Jobs(ctx context.Context, q JobQuery) (JobList, error) {
	v := url.Values{}
	setNonEmpty(v, "team", q.Team)
	setStates(v, q.States)
	if q.All {
		v.Set("all", "1")
	}
	if !q.Selector.Empty() {
		v.Set("selector", q.Selector.String())
	}
	setPage(v, q.Limit, q.NextToken)
	var out JobList
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/jobs", query: v, idempotent: true}, &out)
	return out, err
}

// AllJobs follows every page of Jobs. An empty result is an empty slice,
// never nil, so it encodes as [].
func (c *Client) AllJobs(ctx context.Context, q JobQuery) ([]gpufleet.Job, error) {
	all := []gpufleet.Job{}
	for {
		page, err := c.Jobs(ctx, q)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Jobs...)
		if page.NextToken == "" || page.NextToken == q.NextToken {
			return all, nil
		}
		q.NextToken = page.NextToken
	}
}

// Job returns one job with its attempts.
func (c *Client) Job(ctx context.Context, id string) (gpufleet.Job, error) {
	var out gpufleet.Job
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/jobs/" + url.PathEscape(id), idempotent: true}, &out)
	return out, err
}

// CancelJob requests a job's cancellation (idempotent).
func (c *Client) CancelJob(ctx context.Context, id string) (gpufleet.Job, error) {
	var out gpufleet.Job
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/jobs/" + url.PathEscape(id) + "/cancel", idempotent: true}, &out)
	return out, err
}

// CancelJobs cancels every active job that q's label selector (required)
// picks, narrowed by q.Team and q.States, and returns them as the cancel
// left them (idempotent).
func (c *Client) CancelJobs(ctx context.Context, q JobQuery) (JobList, error) {
	v := url.Values{}
	v.Set("selector", q.Selector.String())
	setNonEmpty(v, "team", q.Team)
	setStates(v, q.States)
	var out JobList
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/jobs/cancel", query: v, idempotent: true}, &out)
	return out, err
}

// Logs copies a job's log to w; with follow it keeps copying until the
// attempt ends or ctx is done.
func (c *Client) Logs(ctx context.Context, id string, q LogQuery, w io.Writer) error {
	v := url.Values{}
	if q.Follow {
		v.Set("follow", "1")
	}
	if q.Previous {
		v.Set("previous", "1")
	}
	if q.Attempt != "" {
		v.Set("attempt", q.Attempt)
	}
	if q.Tail > 0 {
		v.Set("tail", strconv.Itoa(q.Tail))
	}
	if q.Since > 0 {
		v.Set("since", strconv.FormatFloat(q.Since.Seconds(), 'f', -1, 64))
	}
	if !q.SinceTime.IsZero() {
		v.Set("since_time", q.SinceTime.UTC().Format(time.RFC3339Nano))
	}
	resp, cancel, err := c.send(ctx, request{method: http.MethodGet, path: "/api/v1/jobs/" + url.PathEscape(id) + "/logs",
		query: v, idempotent: true, stream: q.Follow})
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil && ctx.Err() == nil {
		return fmt.Errorf("read log of job %s: %w", id, err)
	}
	return nil
}

// Queue returns the whole queue, in cluster order.
func (c *Client) Queue(ctx context.Context) ([]gpufleet.QueueEntry, error) {
	return allPages(ctx, c, "/api/v1/queue", func(l *QueueList) ([]gpufleet.QueueEntry, string) { return l.Queue, l.NextToken })
}

// Nodes returns every node.
func (c *Client) Nodes(ctx context.Context) ([]gpufleet.Node, error) {
	return allPages(ctx, c, "/api/v1/nodes", func(l *NodeList) ([]gpufleet.Node, string) { return l.Nodes, l.NextToken })
}

// Node returns one node.
func (c *Client) Node(ctx context.Context, name string) (gpufleet.Node, error) {
	var out gpufleet.Node
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/nodes/" + url.PathEscape(name), idempotent: true}, &out)
	return out, err
}

// NodeAction cordons, uncordons or drains a node (admin).
func (c *Client) NodeAction(ctx context.Context, name string, a NodeAction) (gpufleet.Node, error) {
	return c.NodeActionBecause(ctx, name, a, "")
}

// NodeActionBecause is NodeAction with the admin's reason (none when
// empty), which the node's state reason and the event log keep.
func (c *Client) NodeActionBecause(ctx context.Context, name string, a NodeAction, reason string) (gpufleet.Node, error) {
	switch a {
	case Cordon, Uncordon, Drain, Repaired:
	default:
		return gpufleet.Node{}, fmt.Errorf("%w: node action %q: expected cordon, uncordon, drain or repaired", gpufleet.ErrInvalid, a)
	}
	var out gpufleet.Node
	var q url.Values
	if reason != "" {
		q = url.Values{"reason": {reason}}
	}
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/nodes/" + url.PathEscape(name) + "/" + string(a), query: q, idempotent: true}, &out)
	return out, err
}

// Teams returns the teams the token may see.
func (c *Client) Teams(ctx context.Context) ([]gpufleet.Team, error) {
	return allPages(ctx, c, "/api/v1/teams", func(l *TeamList) ([]gpufleet.Team, string) { return l.Teams, l.NextToken })
}

// PutTeam creates or updates a team (admin).
func (c *Client) PutTeam(ctx context.Context, r TeamRequest) (gpufleet.Team, error) {
	var out gpufleet.Team
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/teams", body: r, idempotent: true}, &out)
	return out, err
}

// Classes returns the GPU classes.
func (c *Client) Classes(ctx context.Context) ([]gpufleet.Class, error) {
	return allPages(ctx, c, "/api/v1/classes", func(l *ClassList) ([]gpufleet.Class, string) { return l.Classes, l.NextToken })
}

// Racks lists the racks with their budgets, members and draw.
func (c *Client) Racks(ctx context.Context) ([]gpufleet.Rack, error) {
	return allPages(ctx, c, "/api/v1/racks", func(l *RackList) ([]gpufleet.Rack, string) { return l.Racks, l.NextToken })
}

// PutRack creates or replaces a rack (admin); r.Force makes a change that
// moves nodes from another rack or leaves the rack over its budget.
func (c *Client) PutRack(ctx context.Context, r PutRackRequest) (gpufleet.Rack, error) {
	var out gpufleet.Rack
	err := c.do(ctx, request{method: http.MethodPut, path: "/api/v1/racks/" + url.PathEscape(r.Name), body: r, idempotent: true}, &out)
	return out, err
}

// Stacks lists the named stacks with the nodes running each.
func (c *Client) Stacks(ctx context.Context) ([]gpufleet.Stack, error) {
	return allPages(ctx, c, "/api/v1/stacks", func(l *StackList) ([]gpufleet.Stack, string) { return l.Stacks, l.NextToken })
}

// CreateStack records a stack (admin); the same versions again return it.
func (c *Client) CreateStack(ctx context.Context, req CreateStackRequest) (gpufleet.Stack, error) {
	var out gpufleet.Stack
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/stacks", body: req, idempotent: true}, &out)
	return out, err
}

// ValidateStack validates a stack for a GPU model from its nodes that ran
// it healthy for the bake time (admin).
func (c *Client) ValidateStack(ctx context.Context, name, gpuModel string, bake time.Duration) (gpufleet.Stack, error) {
	var out gpufleet.Stack
	b := bake.Seconds()
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/stacks/" + url.PathEscape(name) + "/validate",
		body: StackValidateRequest{GPUModel: gpuModel, BakeS: &b}, idempotent: true}, &out)
	return out, err
}

// RetireStack retires a stack (admin).
func (c *Client) RetireStack(ctx context.Context, name string) error {
	return c.do(ctx, request{method: http.MethodPost, path: "/api/v1/stacks/" + url.PathEscape(name) + "/retire", idempotent: true}, nil)
}

// StackCheck judges every node's stack by the compatibility rules.
func (c *Client) StackCheck(ctx context.Context) ([]NodeStack, error) {
	return allPages(ctx, c, "/api/v1/stacks/check", func(l *NodeStackList) ([]NodeStack, string) { return l.Nodes, l.NextToken })
}

// StartRollout starts moving nodes to a stack (admin).
func (c *Client) StartRollout(ctx context.Context, r RolloutRequest) (rollout.Rollout, error) {
	var out rollout.Rollout
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/rollouts", body: r}, &out)
	return out, err
}

// Rollouts lists the rollouts, newest first.
func (c *Client) Rollouts(ctx context.Context) ([]rollout.Rollout, error) {
	return allPages(ctx, c, "/api/v1/rollouts", func(l *RolloutList) ([]rollout.Rollout, string) { return l.Rollouts, l.NextToken })
}

// Rollout reads one rollout.
func (c *Client) Rollout(ctx context.Context, id string) (rollout.Rollout, error) {
	var out rollout.Rollout
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/rollouts/" + url.PathEscape(id), idempotent: true}, &out)
	return out, err
}

// RolloutAction pauses, resumes, aborts or rolls back a rollout (admin).
func (c *Client) RolloutAction(ctx context.Context, id, action string) (rollout.Rollout, error) {
	var out rollout.Rollout
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/rollouts/" + url.PathEscape(id) + "/" + url.PathEscape(action)}, &out)
	return out, err
}

// DeleteRack deletes a rack (admin).
func (c *Client) DeleteRack(ctx context.Context, name string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/api/v1/racks/" + url.PathEscape(name), idempotent: true}, nil)
}

// PutClass creates or updates a GPU class (admin).
func (c *Client) PutClass(ctx context.Context, cl gpufleet.Class) (gpufleet.Class, error) {
	var out gpufleet.Class
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/classes", body: cl, idempotent: true}, &out)
	return out, err
}

// Tokens lists API tokens without their secrets (admin).
func (c *Client) Tokens(ctx context.Context) ([]gpufleet.Token, error) {
	return allPages(ctx, c, "/api/v1/tokens", func(l *TokenList) ([]gpufleet.Token, string) { return l.Tokens, l.NextToken })
}

// CreateToken creates an API token; the secret is in the result's Token
// field, once (admin).
func (c *Client) CreateToken(ctx context.Context, r TokenRequest) (gpufleet.Token, error) {
	var out gpufleet.Token
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/tokens", body: r}, &out)
	return out, err
}

// RevokeToken revokes an API token (admin).
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/api/v1/tokens/" + url.PathEscape(id), idempotent: true}, nil)
}

// CreateJoinToken creates an agent join token (admin).
func (c *Client) CreateJoinToken(ctx context.Context, r JoinTokenRequest) (JoinTokenResponse, error) {
	var out JoinTokenResponse
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/join-tokens", body: r}, &out)
	return out, err
}

// ReplaceNode revokes a node's credential and returns a join token bound
// to its name, for the machine that replaces it (admin).
func (c *Client) ReplaceNode(ctx context.Context, name string) (JoinTokenResponse, error) {
	var out JoinTokenResponse
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/nodes/" + url.PathEscape(name) + "/replace"}, &out)
	return out, err
}

// Usage returns accounting by team over [q.From, q.To) (zero times: the
// server's default period).
func (c *Client) Usage(ctx context.Context, q UsageQuery) (UsageReport, error) {
	v := url.Values{}
	setNonEmpty(v, "team", q.Team)
	setNonEmpty(v, "by", q.By)
	setNonEmpty(v, "period", q.Period)
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339))
	}
	var out UsageReport
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/usage", query: v, idempotent: true}, &out)
	return out, err
}

// Plan asks the server for a plan (GET /api/v1/plan).
func (c *Client) Plan(ctx context.Context, q PlanQuery) (PlanResponse, error) {
	v := url.Values{}
	m := q.Model
	for k, s := range map[string]string{"model": m.Name, "mode": m.Mode, "precision": m.Precision, "kv_precision": m.KVPrecision,
		"optimizer": m.Optimizer, "recompute": m.Recompute, "engine": m.Engine, "scenario": m.Scenario, "team": q.Team} {
		setNonEmpty(v, k, s)
	}
	for k, n := range map[string]int{"gpus": q.GPUs, "batch": m.Batch, "input_tokens": m.InputTokens, "output_tokens": m.OutputTokens,
		"seq": m.Seq, "micro_batch": m.MicroBatch, "global_batch": m.GlobalBatch, "zero": m.ZeRO, "tp": m.TP, "pp": m.PP,
		"dp": m.DP, "cp": m.CP, "ep": m.EP, "max_model_len": m.MaxModelLen, "max_num_batched_tokens": m.MaxNumBatchedTokens, "max_num_seqs": m.MaxNumSeqs} {
		if n != 0 {
			v.Set(k, strconv.Itoa(n))
		}
	}
	if m.Tokens != 0 {
		v.Set("tokens", strconv.FormatInt(m.Tokens, 10))
	}
	if m.FP32GradAccum {
		v.Set("fp32_grad_accum", "true")
	}
	for k, f := range map[string]float64{"memory_headroom": m.MemoryHeadroom, "tpot_target_ms": m.TPOTTargetMS, "ttft_target_ms": m.TTFTTargetMS} {
		if f != 0 {
			v.Set(k, strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	if len(q.GPUModels) > 0 {
		v.Set("gpu", strings.Join(q.GPUModels, ","))
	}
	var out PlanResponse
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/plan", query: v, idempotent: true}, &out)
	return out, err
}

// Rollups returns per-GPU one-minute rollups of a node (q.Node, q.GPU) or
// of a job's GPUs (q.JobID).
func (c *Client) Rollups(ctx context.Context, q RollupQuery) ([]GPURollup, error) {
	v := url.Values{}
	setNonEmpty(v, "gpu", q.GPU)
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339))
	}
	path := "/api/v1/nodes/" + url.PathEscape(q.Node) + "/rollups"
	if q.JobID != "" {
		path = "/api/v1/jobs/" + url.PathEscape(q.JobID) + "/rollups"
	}
	var out RollupList
	err := c.do(ctx, request{method: http.MethodGet, path: path, query: v, idempotent: true}, &out)
	return out.Rollups, err
}

// Events returns one page of stored events after q.Since.
func (c *Client) Events(ctx context.Context, q EventQuery) (EventList, error) {
	v := url.Values{}
	if q.Since > 0 {
		v.Set("since", strconv.FormatInt(q.Since, 10))
	}
	setPage(v, q.Limit, "")
	var out EventList
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/events", query: v, idempotent: true}, &out)
	return out, err
}

// Register joins a node with a join token and returns its credential. The
// request carries joinToken instead of the client's token.
func (c *Client) Register(ctx context.Context, joinToken string, r RegisterRequest) (RegisterResponse, error) {
	if r.ProtocolVersion == 0 {
		r.ProtocolVersion = ProtocolVersion
	}
	var out RegisterResponse
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/agent/register", body: r, token: joinToken}, &out)
	return out, err
}

// RenewCredential swaps the client's node credential for a fresh one.
func (c *Client) RenewCredential(ctx context.Context) (RegisterResponse, error) {
	var out RegisterResponse
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/agent/renew"}, &out)
	return out, err
}

// Heartbeat sends the agent's report with the client's token (the node
// credential) and returns the node's work.
func (c *Client) Heartbeat(ctx context.Context, r HeartbeatRequest) (HeartbeatResponse, error) {
	if r.ProtocolVersion == 0 {
		r.ProtocolVersion = ProtocolVersion
	}
	var out HeartbeatResponse
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/agent/heartbeat", body: r, idempotent: true}, &out)
	return out, err
}

// Ready checks the server's /readyz.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, request{method: http.MethodGet, path: "/readyz", idempotent: true}, nil)
}

// allPages follows next_token over a list endpoint.
func allPages[L any, T any](ctx context.Context, c *Client, path string, items func(*L) ([]T, string)) ([]T, error) {
	var all []T
	token := ""
	for {
		v := url.Values{}
		setPage(v, 0, token)
		var page L
		if err := c.do(ctx, request{method: http.MethodGet, path: path, query: v, idempotent: true}, &page); err != nil {
			return nil, err
		}
		got, next := items(&page)
		all = append(all, got...)
		if next == "" || next == token {
			if all == nil {
				all = []T{}
			}
			return all, nil
		}
		token = next
	}
}

func setNonEmpty(v url.Values, k, s string) {
	if s != "" {
		v.Set(k, s)
	}
}

func setPage(v url.Values, limit int, token string) {
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	setNonEmpty(v, "next_token", token)
}

// ShipLog sends a chunk of an attempt's log that starts at byte offset,
// with the client's token (the node credential), and returns the size the
// server now holds: the next chunk starts there.
func (c *Client) ShipLog(ctx context.Context, attempt string, offset int64, data []byte) (int64, error) {
	v := url.Values{}
	v.Set("offset", strconv.FormatInt(offset, 10))
	var out LogChunkResponse
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/agent/logs/" + url.PathEscape(attempt), query: v,
		body: rawBody(data), idempotent: true}, &out)
	return out.SizeBytes, err
}

// InjectFault asks a simulated node to inject a fault into one GPU (admin).
func (c *Client) InjectFault(ctx context.Context, node string, r FaultRequest) (FaultOrder, error) {
	var out FaultOrder
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/nodes/" + url.PathEscape(node) + "/faults", body: r}, &out)
	return out, err
}

// ClearFaults asks a simulated node to clear every fault of one GPU (admin).
func (c *Client) ClearFaults(ctx context.Context, node string, gpu int) (FaultOrder, error) {
	v := url.Values{}
	v.Set("gpu", strconv.Itoa(gpu))
	var out FaultOrder
	err := c.do(ctx, request{method: http.MethodDelete, path: "/api/v1/nodes/" + url.PathEscape(node) + "/faults", query: v, idempotent: true}, &out)
	return out, err
}

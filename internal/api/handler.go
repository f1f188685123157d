package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// HandlerOptions configures NewHandler. The zero value is usable.
type HandlerOptions struct {
	// Logger receives request logs (debug) and internal errors (error).
	// Nil discards them.
	Logger *slog.Logger
	// MaxBodyBytes caps request bodies; larger ones get 413. Default 1 MiB.
	MaxBodyBytes int64
	// MetricsHandler serves /metrics to admin tokens. Nil: /metrics is 404.
	MetricsHandler http.Handler
	// Ready reports whether the server can serve (/readyz). Nil: always ready.
	Ready func() error
	// KeepAlive is how often an idle event stream gets a comment line so
	// proxies keep it open. Default 15s.
	KeepAlive time.Duration
	// StreamWriteTimeout bounds each write of a stream (events, followed
	// logs), replacing the server's WriteTimeout there. Default 30s.
	StreamWriteTimeout time.Duration
	// WatchInterval is how often a watched list (jobs, queue, nodes with
	// ?watch=1) is read again; a snapshot is sent when it changed.
	WatchInterval time.Duration
	// ObserveRequest, when set, is told of every API request: its route
	// pattern, method, status code and duration (the server's request
	// latency histogram). Streams are observed when they end.
	ObserveRequest func(route, method string, code int, d time.Duration)
	// UI serves every path outside the API (/api/..., /healthz, /readyz,
	// /metrics, /openapi.json): the web dashboard. Nil: those paths are
	// JSON 404s.
	UI http.Handler
	// Leader, when set, makes a follower a proxy of the leader: every
	// request but /healthz, /readyz, /metrics and the API document,
	// dashboard and agents included, is answered by the leader, so that a
	// follower never shows what only the leader knows (liveness, live
	// telemetry, orders) from its own stale memory. Nil: this replica
	// answers everything (a single server).
	Leader LeaderFunc
}

// DefaultMaxBodyBytes is the request body cap when HandlerOptions leaves it 0.
const DefaultMaxBodyBytes = 1 << 20

// handler serves the API. Routes come from one table (table), which both
// registers them with the mux and feeds Routes().
type handler struct {
	svc    Service
	agents AgentService
	logs   LogService
	watch  WatchService
	opts   HandlerOptions
	fwd    *forwarder // nil: no forwarding
	log    *slog.Logger
	mux    *http.ServeMux
	// registered lists what was handed to the mux, for the route test.
	registered []Route
}

// routeFunc handles one route for an authenticated principal. A returned
// error becomes the JSON error response (unless the handler already began
// writing, as streams do).
type routeFunc func(w http.ResponseWriter, r *http.Request, p Principal) error

type routeDef struct {
	Route
	fn routeFunc
}

// NewHandler returns the HTTP API over the control plane's services:
// /api/v1/..., /healthz, /readyz and /metrics. Every /api/v1 route but the
// API document takes Authorization: Bearer TOKEN; errors are JSON
// {"error", "code"} with the status errorStatus picks. agents, logs and
// watch may be nil: their routes then answer 422.
func NewHandler(svc Service, agents AgentService, logs LogService, watch WatchService, opts HandlerOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 15 * time.Second
	}
	if opts.WatchInterval <= 0 {
		opts.WatchInterval = time.Second
	}
	if opts.StreamWriteTimeout <= 0 {
		opts.StreamWriteTimeout = 30 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &handler{svc: svc, agents: agents, logs: logs, watch: watch, opts: opts,
		log: log.With("component", "api"), mux: http.NewServeMux()}
	if opts.Leader != nil {
		h.fwd = &forwarder{leader: opts.Leader}
	}
	for _, rt := range h.table() {
		h.mux.Handle(rt.Method+" "+rt.Pattern, h.wrap(rt))
		h.registered = append(h.registered, rt.Route)
	}
	return h
}

// Routes lists every route NewHandler serves, with the credential each
// takes. The OpenAPI document covers exactly these; tests walk them.
func Routes() []Route {
	defs := (*handler)(nil).table()
	out := make([]Route, len(defs))
	for i, d := range defs {
		out[i] = d.Route
	}
	return out
}

// table is the route table: the one place a route is declared.
func (h *handler) table() []routeDef {
	r := func(method, pattern string, auth AuthKind, summary string, fn routeFunc) routeDef {
		return routeDef{Route{Method: method, Pattern: pattern, Auth: auth, Summary: summary}, fn}
	}
	const v1 = "/api/v1"
	return []routeDef{
		r("GET", "/healthz", AuthNone, "Liveness: always 200 ok", h.healthz),
		r("GET", "/readyz", AuthNone, "Readiness: 200 when the server can serve, else 503", h.readyz),
		r("GET", "/metrics", AuthMonitor, "Prometheus metrics", h.metrics),
		r("GET", v1+"/sd/agents", AuthMonitor, "Prometheus HTTP service discovery: every agent's metrics endpoint with its node's labels", h.scrapeTargets),
		r("GET", v1+"/openapi.json", AuthNone, "This API's OpenAPI 3.1 document", h.openapi),

		r("POST", v1+"/jobs", AuthMember, "Submit a job", h.submitJob),
		r("GET", v1+"/jobs", AuthMember, "List jobs (selector= picks them by label); watch=1 streams snapshots as server-sent events", h.listJobs),
		r("GET", v1+"/jobs/{id}", AuthMember, "Get a job with its attempts", h.getJob),
		r("POST", v1+"/jobs/{id}/cancel", AuthMember, "Request a job's cancellation", h.cancelJob),
		r("POST", v1+"/jobs/cancel", AuthMember, "Cancel every active job a label selector picks (selector=, required; members: their team's)", h.cancelJobs),
		r("GET", v1+"/jobs/{id}/logs", AuthMember, "A job's log (latest attempt, previous=1 or attempt=ID; tail=N lines; since=10m or since_time=T); follow=1 streams it", h.jobLogs),
		r("GET", v1+"/queue", AuthMember, "The queue with positions, reasons and ETAs; watch=1 streams snapshots", h.queue),

		r("GET", v1+"/nodes", AuthMember, "List nodes; watch=1 streams snapshots", h.listNodes),
		r("GET", v1+"/nodes/{name}", AuthMember, "Get a node", h.getNode),
		r("POST", v1+"/nodes/{name}/cordon", AuthAdmin, "Stop placing work on a node", h.nodeAction(Cordon)),
		r("POST", v1+"/nodes/{name}/uncordon", AuthAdmin, "Return a node to ready", h.nodeAction(Uncordon)),
		r("POST", v1+"/nodes/{name}/drain", AuthAdmin, "Cordon a node and stop its attempts (they requeue)", h.nodeAction(Drain)),
		r("POST", v1+"/nodes/{name}/repaired", AuthAdmin, "Mark a node (or its GPUs in repair) repaired: validating, then ready once the agent's check passes", h.nodeAction(Repaired)),
		r("POST", v1+"/nodes/{name}/replace", AuthAdmin, "Replace a node by another machine of the same name: revoke its credential and issue a join token bound to the name", h.replaceNode),
		r("POST", v1+"/nodes/{name}/faults", AuthAdmin, "Inject a fault into a simulated node's GPU", h.injectFault),
		r("DELETE", v1+"/nodes/{name}/faults", AuthAdmin, "Clear the faults of a simulated node's GPU (?gpu=INDEX)", h.clearFaults),
		r("POST", v1+"/nodes/{name}/bench", AuthAdmin, "Run microbenchmarks on a node's idle GPUs (cordon it first)", h.orderBench),
		r("GET", v1+"/bench/results", AuthMember, "Benchmark figures per GPU against the spec and the model's fleet median (?node=&gpu_model=&history=1)", h.benchResults),
		r("POST", v1+"/bench/workloads", AuthMember, "Run a workload bench: the same job on each GPU model, throughput joined with telemetry and priced", h.startWorkloadBench),
		r("GET", v1+"/bench/workloads", AuthMember, "List workload benches with their reports", h.listWorkloadBenches),
		r("GET", v1+"/bench/workloads/{id}", AuthMember, "A workload bench's report", h.getWorkloadBench),
		r("POST", v1+"/bench/allreduce", AuthAdmin, "Run an all-reduce across cordoned nodes (a rack, an NVLink domain or a list), judged against the fleet's runs of the same shape", h.startAllReduceBench),
		r("GET", v1+"/bench/allreduce", AuthMember, "List the all-reduces across nodes this server follows", h.listAllReduceBenches),
		r("GET", v1+"/bench/allreduce/{id}", AuthMember, "An all-reduce across nodes: state, members, figure", h.getAllReduceBench),

		r("GET", v1+"/teams", AuthMember, "List teams (members see their own)", h.listTeams),
		r("POST", v1+"/teams", AuthAdmin, "Create or update a team", h.putTeam),
		r("GET", v1+"/classes", AuthMember, "List GPU classes", h.listClasses),
		r("POST", v1+"/classes", AuthAdmin, "Create or update a GPU class", h.putClass),
		r("GET", v1+"/racks", AuthMember, "List racks: budgets, members, rated and projected draw", h.listRacks),
		r("PUT", v1+"/racks/{name}", AuthAdmin, "Create or replace a rack's power budget", h.putRack),
		r("DELETE", v1+"/racks/{name}", AuthAdmin, "Delete a rack", h.deleteRack),
		r("GET", v1+"/stacks", AuthMember, "List the named stacks (versions, state, evidence, nodes running each)", h.listStacks),
		r("POST", v1+"/stacks", AuthAdmin, "Record a stack, a candidate until validated", h.createStack),
		r("POST", v1+"/stacks/{name}/validate", AuthAdmin, "Validate a stack for a GPU model from its nodes' evidence", h.validateStack),
		r("POST", v1+"/stacks/{name}/retire", AuthAdmin, "Retire a stack", h.retireStack),
		r("GET", v1+"/stacks/check", AuthMember, "Judge every node's stack by the compatibility rules", h.stackCheck),
		r("POST", v1+"/rollouts", AuthAdmin, "Start moving nodes to a stack in waves", h.startRollout),
		r("GET", v1+"/rollouts", AuthMember, "List rollouts, newest first", h.listRollouts),
		r("GET", v1+"/rollouts/{id}", AuthMember, "Show a rollout: waves, nodes, gates and reasons", h.getRollout),
		r("POST", v1+"/rollouts/{id}/pause", AuthAdmin, "Pause a rollout: no new node starts", h.rolloutAction("pause")),
		r("POST", v1+"/rollouts/{id}/resume", AuthAdmin, "Resume a paused rollout", h.rolloutAction("resume")),
		r("POST", v1+"/rollouts/{id}/abort", AuthAdmin, "Abort a rollout", h.rolloutAction("abort")),
		r("POST", v1+"/rollouts/{id}/rollback", AuthAdmin, "Return a rollout's updated nodes to their previous versions", h.rolloutAction("rollback")),
		r("GET", v1+"/tokens", AuthAdmin, "List API tokens (never their secrets)", h.listTokens),
		r("POST", v1+"/tokens", AuthAdmin, "Create an API token (the secret is shown once)", h.createToken),
		r("DELETE", v1+"/tokens/{id}", AuthAdmin, "Revoke an API token", h.revokeToken),
		r("POST", v1+"/join-tokens", AuthAdmin, "Create an agent join token", h.createJoinToken),
		r("GET", v1+"/plan", AuthMember, "Plan a model: fit, layout, speed, cost and energy on the fleet's GPU models (or those named)", h.plan),
		r("GET", v1+"/forecast", AuthMember, "Daily GPU demand from the store's jobs, forecast with 80% and 95% intervals (?gpu_model=&team=&horizon=28d)", h.forecast),
		r("GET", v1+"/procure", AuthAdmin, "What GPUs to order and by when, checked by replaying forecast demand through the scheduler (?gpu_model=&horizon=180d&target=p90-wait:training<4h&quantile=0.8&lead_time=MODEL=DAYSd)", h.procure),
		r("GET", v1+"/lifecycle", AuthAdmin, "Keep, redeploy, replace or retire each GPU model: age, depreciation, failures, energy and cost per unit against newer models (?horizon=3y&since=30d&price=MODEL=USD&energy_price=)", h.lifecycle),
		r("GET", v1+"/audit", AuthAdmin, "The fleet checked against the twenty-two mistakes (docs/AUDIT.md): findings with evidence, cost and fix (?since=30d)", h.audit),
		r("GET", v1+"/usage", AuthMember, "GPU-hours, effective GPU-hours, idle allocated GPU-hours and energy by team and GPU model", h.usage),
		r("GET", v1+"/nodes/{name}/rollups", AuthMember, "Per-GPU one-minute rollups of a node (?gpu=UUID&from=&to=, default the last hour)", h.rollups("name")),
		r("GET", v1+"/jobs/{id}/rollups", AuthMember, "Per-GPU one-minute rollups of the GPUs a job held, while it held them (?from=&to=)", h.rollups("id")),
		r("GET", v1+"/events", AuthMember, "Audit events; watch=1 streams them as server-sent events", h.events),

		r("POST", v1+"/agent/register", AuthJoin, "Agent registration with a join token", h.register),
		r("POST", v1+"/agent/renew", AuthAgent, "Agent credential renewal: a fresh node credential for the current one", h.renew),
		r("POST", v1+"/agent/heartbeat", AuthAgent, "Agent heartbeat: samples and attempt reports in, assignments out", h.heartbeat),
		r("POST", v1+"/agent/logs/{id}", AuthAgent, "Agent log shipping: a chunk of an attempt's log from ?offset=", h.agentLog),
	}
}

// ServeHTTP answers unknown paths and methods with JSON errors and hands
// everything else to the mux.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.fwd != nil && h.fwd.serve(w, r) {
		return // the leader's answer, its headers with it
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if h.opts.UI != nil && !isAPIPath(r.URL.Path) {
		h.opts.UI.ServeHTTP(w, r)
		return
	}
	if mh, pattern := h.mux.Handler(r); pattern == "" {
		probe := &probeWriter{header: http.Header{}}
		mh.ServeHTTP(probe, r)
		if probe.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", probe.header.Get("Allow"))
			writeErrorBody(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed,
				fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path))
			return
		}
		writeErrorBody(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// isAPIPath reports whether a path belongs to the API rather than the UI.
func isAPIPath(p string) bool {
	switch p {
	case "/healthz", "/readyz", "/metrics", "/openapi.json", "/api":
		return true
	}
	return strings.HasPrefix(p, "/api/")
}

// probeWriter records what the mux's own 404/405 handler would write.
type probeWriter struct {
	header http.Header
	status int
}

func (p *probeWriter) Header() http.Header         { return p.header }
func (p *probeWriter) Write(b []byte) (int, error) { return len(b), nil }
func (p *probeWriter) WriteHeader(status int)      { p.status = status }

// wrap adds authentication, the body cap, error mapping and a request log
// line around a route.
func (h *handler) wrap(rt routeDef) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		if strings.HasPrefix(rt.Pattern, "/api/") {
			sw.Header().Set("Cache-Control", "no-store")
		}
		p, err := h.authenticate(r, rt.Auth)
		if err == nil {
			err = h.checkQuery(rt, r)
		}
		if err == nil {
			if r.Body != nil {
				r.Body = http.MaxBytesReader(sw, r.Body, h.opts.MaxBodyBytes)
			}
			err = rt.fn(sw, r, p)
		}
		if err != nil {
			h.fail(sw, r, rt, err)
		}
		if h.opts.ObserveRequest != nil {
			h.opts.ObserveRequest(rt.Pattern, r.Method, sw.statusCode(), time.Since(start))
		}
		h.log.LogAttrs(r.Context(), slog.LevelDebug, "request",
			slog.String("method", r.Method), slog.String("route", rt.Pattern), slog.String("path", r.URL.Path),
			slog.Int("status", sw.statusCode()), slog.Duration("duration", time.Since(start)),
			slog.String("principal", principalName(p)))
	})
}

func principalName(p Principal) string {
	switch {
	case p.Node != "":
		return "agent:" + p.Node
	case p.TokenID != "":
		return p.TokenID
	}
	return ""
}

// fail writes err as a JSON error response, or only logs it when the
// response has already begun.
func (h *handler) fail(w *statusWriter, r *http.Request, rt routeDef, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away
	}
	status, code := errorStatus(err)
	msg := err.Error()
	if status >= 500 {
		h.log.LogAttrs(r.Context(), slog.LevelError, "request failed",
			slog.String("method", r.Method), slog.String("route", rt.Pattern), slog.Any("err", err))
		if status == http.StatusInternalServerError {
			msg = "internal error"
		}
	}
	if w.wrote {
		return
	}
	switch status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpufleet"`)
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	}
	body := ErrorBody{Code: code}
	var ex *gpufleet.ExplainedError
	if status < 500 && errors.As(err, &ex) && ex.Explanation != nil {
		body.ReasonCode, body.Explanation = ex.Explanation.Code, ex.Explanation
	}
	writeBody(w, status, body, msg)
}

// maxErrorMessage bounds an error message in a response: messages quote
// at most gpufleet.QuoteLimit bytes of any input, and this is the net
// under that rule.
const maxErrorMessage = 2048

func writeErrorBody(w http.ResponseWriter, status int, code, msg string) {
	writeBody(w, status, ErrorBody{Code: code}, msg)
}

// writeBody writes an error body with its message cut to maxErrorMessage.
func writeBody(w http.ResponseWriter, status int, b ErrorBody, msg string) {
	if len(msg) > maxErrorMessage {
		msg = strings.ToValidUTF8(msg[:maxErrorMessage], "") + "..."
	}
	b.Error = msg
	body, _ := encodeJSON(b)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeJSON writes v as the response body with status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	body, err := encodeJSON(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return nil
}

// statusWriter remembers the status and whether the response has begun.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if !s.wrote {
		s.status, s.wrote = http.StatusOK, true
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flush, deadlines).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) statusCode() int {
	if !s.wrote {
		return http.StatusOK
	}
	return s.status
}

// bearer returns the token of an Authorization: Bearer header.
func bearer(r *http.Request) (string, error) {
	v := r.Header.Get("Authorization")
	if v == "" {
		return "", fmt.Errorf("%w: missing credential: send Authorization: Bearer TOKEN", ErrUnauthorized)
	}
	scheme, tok, ok := strings.Cut(v, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", fmt.Errorf("%w: malformed Authorization header: expected Bearer TOKEN", ErrUnauthorized)
	}
	return tok, nil
}

// authenticate resolves the request's credential and checks it fits the
// route's auth kind.
func (h *handler) authenticate(r *http.Request, kind AuthKind) (Principal, error) {
	switch kind {
	case AuthNone:
		return Principal{}, nil
	case AuthJoin:
		_, err := bearer(r)
		return Principal{}, err
	}
	tok, err := bearer(r)
	if err != nil {
		return Principal{}, err
	}
	p, err := h.svc.Authenticate(r.Context(), tok)
	if err != nil {
		if status, _ := errorStatus(err); status >= 500 && !errors.Is(err, ErrUnauthorized) {
			return Principal{}, fmt.Errorf("authenticate: %w", err)
		}
		return Principal{}, fmt.Errorf("%w: invalid, expired or revoked token", ErrUnauthorized)
	}
	switch {
	case p.Node == "" && p.Role == "":
		return Principal{}, fmt.Errorf("%w: token has no role", ErrUnauthorized)
	case kind == AuthAgent && p.Node == "":
		return Principal{}, fmt.Errorf("%w: agent endpoints take a node credential, not a user token", ErrForbidden)
	case kind != AuthAgent && p.Node != "":
		return Principal{}, fmt.Errorf("%w: node credentials work only on agent endpoints", ErrForbidden)
	case kind == AuthMonitor && !p.IsAdmin() && !p.IsMonitor():
		return Principal{}, fmt.Errorf("%w: admin or monitor token required", ErrForbidden)
	case kind != AuthMonitor && p.IsMonitor():
		return Principal{}, fmt.Errorf("%w: a monitor token reads only /metrics and service discovery", ErrForbidden)
	case kind == AuthAdmin && !p.IsAdmin():
		return Principal{}, fmt.Errorf("%w: admin token required", ErrForbidden)
	}
	return p, nil
}

package api

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/power"
)

// Page sizes for list endpoints: ?limit= defaults to DefaultPageLimit and
// is capped at MaxPageLimit.
const (
	DefaultPageLimit = 500
	MaxPageLimit     = 1000
)

func (h *handler) healthz(w http.ResponseWriter, _ *http.Request, _ Principal) error {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
	return nil
}

func (h *handler) readyz(w http.ResponseWriter, _ *http.Request, _ Principal) error {
	if h.opts.Ready != nil {
		if err := h.opts.Ready(); err != nil {
			return fmt.Errorf("%w: not ready: %v", ErrUnavailable, err)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
	return nil
}

func (h *handler) metrics(w http.ResponseWriter, r *http.Request, _ Principal) error {
	if h.opts.MetricsHandler == nil {
		return fmt.Errorf("%w: metrics are not enabled on this server", gpufleet.ErrNotFound)
	}
	h.opts.MetricsHandler.ServeHTTP(w, r)
	return nil
}

func (h *handler) openapi(w http.ResponseWriter, _ *http.Request, _ Principal) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiJSON)
	return nil
}

func (h *handler) submitJob(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req SubmitRequest
	if err := decodeStrict(r, &req); err != nil {
		return err
	}
	resp, err := h.svc.SubmitJob(r.Context(), p, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, resp)
}

func (h *handler) listJobs(w http.ResponseWriter, r *http.Request, p Principal) error {
	q := r.URL.Query()
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	jq := JobQuery{Team: q.Get("team"), NextToken: token, Limit: limit}
	if jq.All, err = boolParam(r, "all"); err != nil {
		return err
	}
	if jq.Selector, err = selectorParam(r); err != nil {
		return err
	}
	for _, s := range splitList(q["state"]) {
		jq.States = append(jq.States, gpufleet.JobState(s))
	}
	fetch := func() (any, error) {
		list, err := h.svc.Jobs(r.Context(), p, jq)
		if list.Jobs == nil {
			list.Jobs = []gpufleet.Job{}
		}
		return list, err
	}
	return h.listOrWatch(w, r, fetch)
}

func (h *handler) getJob(w http.ResponseWriter, r *http.Request, p Principal) error {
	job, err := h.svc.Job(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, job)
}

func (h *handler) cancelJob(w http.ResponseWriter, r *http.Request, p Principal) error {
	job, err := h.svc.CancelJob(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, job)
}

// cancelJobs cancels the active jobs a label selector picks, as
// GET /api/v1/jobs?selector= would list them.
func (h *handler) cancelJobs(w http.ResponseWriter, r *http.Request, p Principal) error {
	jc, ok := h.svc.(JobCanceller)
	if !ok {
		return fmt.Errorf("%w: this server cancels by id only", gpufleet.ErrUnsupported)
	}
	q := r.URL.Query()
	sel, err := selectorParam(r)
	if err != nil {
		return err
	}
	if sel.Empty() {
		return fmt.Errorf("%w: selector: required (an empty selector would cancel every job; cancel by id instead)", gpufleet.ErrInvalid)
	}
	jq := JobQuery{Team: q.Get("team"), Selector: sel}
	for _, s := range splitList(q["state"]) {
		jq.States = append(jq.States, gpufleet.JobState(s))
	}
	list, err := jc.CancelJobs(r.Context(), p, jq)
	if err != nil {
		return err
	}
	if list.Jobs == nil {
		list.Jobs = []gpufleet.Job{}
	}
	return writeJSON(w, http.StatusOK, list)
}

// selectorParam reads ?selector=, a label selector (gpufleet.ParseLabelSelector);
// absent or blank is the empty selector. It may be given once.
func selectorParam(r *http.Request) (gpufleet.LabelSelector, error) {
	vals := r.URL.Query()["selector"]
	switch len(vals) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, fmt.Errorf("%w: selector given %d times: join its requirements with commas", gpufleet.ErrInvalid, len(vals))
	}
	return gpufleet.ParseLabelSelector(vals[0])
}

func (h *handler) queue(w http.ResponseWriter, r *http.Request, p Principal) error {
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	fetch := func() (any, error) {
		entries, err := h.svc.Queue(r.Context(), p)
		if err != nil {
			return nil, err
		}
		page, next, err := paginate(entries, limit, token)
		return QueueList{Queue: page, NextToken: next}, err
	}
	return h.listOrWatch(w, r, fetch)
}

func (h *handler) listNodes(w http.ResponseWriter, r *http.Request, p Principal) error {
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	fetch := func() (any, error) {
		nodes, err := h.svc.Nodes(r.Context(), p)
		if err != nil {
			return nil, err
		}
		page, next, err := paginate(nodes, limit, token)
		return NodeList{Nodes: page, NextToken: next}, err
	}
	return h.listOrWatch(w, r, fetch)
}

func (h *handler) getNode(w http.ResponseWriter, r *http.Request, p Principal) error {
	n, err := h.svc.Node(r.Context(), p, r.PathValue("name"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, n)
}

// NodeReasonService takes an admin's reason with a node action (?reason=),
// recorded as the node's state reason and in the event log.
type NodeReasonService interface {
	NodeActionBecause(ctx context.Context, p Principal, name string, a NodeAction, reason string) (gpufleet.Node, error)
}

// MaxReasonLen bounds an admin's reason for a node action.
const MaxReasonLen = 200

func (h *handler) nodeAction(a NodeAction) routeFunc {
	return func(w http.ResponseWriter, r *http.Request, p Principal) error {
		var (
			n   gpufleet.Node
			err error
		)
		reason := r.URL.Query().Get("reason")
		if reason == "" {
			n, err = h.svc.NodeAction(r.Context(), p, r.PathValue("name"), a)
		} else {
			rs, ok := h.svc.(NodeReasonService)
			if !ok {
				return fmt.Errorf("%w: this server takes no reason with a node action", gpufleet.ErrUnsupported)
			}
			if err := gpufleet.CheckText("reason", reason, MaxReasonLen, false); err != nil {
				return err
			}
			n, err = rs.NodeActionBecause(r.Context(), p, r.PathValue("name"), a, reason)
		}
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, n)
	}
}

func (h *handler) listTeams(w http.ResponseWriter, r *http.Request, p Principal) error {
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	teams, err := h.svc.Teams(r.Context(), p)
	if err != nil {
		return err
	}
	page, next, err := paginate(teams, limit, token)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, TeamList{Teams: page, NextToken: next})
}

func (h *handler) putTeam(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req TeamRequest
	if err := decodeStrict(r, &req); err != nil {
		return err
	}
	t, err := h.svc.PutTeam(r.Context(), p, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, t)
}

func (h *handler) listClasses(w http.ResponseWriter, r *http.Request, p Principal) error {
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	classes, err := h.svc.Classes(r.Context(), p)
	if err != nil {
		return err
	}
	page, next, err := paginate(classes, limit, token)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ClassList{Classes: page, NextToken: next})
}

func (h *handler) putClass(w http.ResponseWriter, r *http.Request, p Principal) error {
	var c gpufleet.Class
	if err := decodeStrict(r, &c); err != nil {
		return err
	}
	out, err := h.svc.PutClass(r.Context(), p, c)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *handler) listRacks(w http.ResponseWriter, r *http.Request, p Principal) error {
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	racks, err := h.svc.Racks(r.Context(), p)
	if err != nil {
		return err
	}
	page, next, err := paginate(racks, limit, token)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, RackList{Racks: page, NextToken: next})
}

func (h *handler) putRack(w http.ResponseWriter, r *http.Request, p Principal) error {
	var k PutRackRequest
	if err := decodeStrict(r, &k); err != nil {
		return err
	}
	if name := r.PathValue("name"); k.Name == "" {
		k.Name = name
	} else if k.Name != name {
		return fmt.Errorf("%w: name %s: the path names rack %s", gpufleet.ErrInvalid, gpufleet.Quote(k.Name), gpufleet.Quote(name))
	}
	out, err := h.svc.PutRack(r.Context(), p, k)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *handler) deleteRack(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := h.svc.DeleteRack(r.Context(), p, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *handler) listStacks(w http.ResponseWriter, r *http.Request, p Principal) error {
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	stacks, err := h.svc.Stacks(r.Context(), p)
	if err != nil {
		return err
	}
	page, next, err := paginate(stacks, limit, token)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, StackList{Stacks: page, NextToken: next})
}

func (h *handler) createStack(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req CreateStackRequest
	if err := decodeStrict(r, &req); err != nil {
		return err
	}
	out, err := h.svc.CreateStack(r.Context(), p, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *handler) validateStack(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req StackValidateRequest
	if err := decodeStrict(r, &req); err != nil {
		return err
	}
	bake := DefaultStackBake
	if req.BakeS != nil {
		if !(*req.BakeS >= 0 && *req.BakeS <= 30*86400) {
			return fmt.Errorf("%w: bake_s %g: expected 0 to 30 days in seconds", gpufleet.ErrInvalid, *req.BakeS)
		}
		bake = time.Duration(*req.BakeS * float64(time.Second))
	}
	out, err := h.svc.ValidateStack(r.Context(), p, r.PathValue("name"), req.GPUModel, bake)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *handler) retireStack(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := h.svc.RetireStack(r.Context(), p, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *handler) stackCheck(w http.ResponseWriter, r *http.Request, p Principal) error {
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	nodes, err := h.svc.StackCheck(r.Context(), p)
	if err != nil {
		return err
	}
	page, next, err := paginate(nodes, limit, token)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, NodeStackList{Nodes: page, NextToken: next})
}

func (h *handler) startRollout(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req RolloutRequest
	if err := decodeStrict(r, &req); err != nil {
		return err
	}
	out, err := h.svc.StartRollout(r.Context(), p, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *handler) listRollouts(w http.ResponseWriter, r *http.Request, p Principal) error {
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	all, err := h.svc.Rollouts(r.Context(), p)
	if err != nil {
		return err
	}
	page, next, err := paginate(all, limit, token)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, RolloutList{Rollouts: page, NextToken: next})
}

func (h *handler) getRollout(w http.ResponseWriter, r *http.Request, p Principal) error {
	out, err := h.svc.Rollout(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *handler) rolloutAction(action string) func(http.ResponseWriter, *http.Request, Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p Principal) error {
		out, err := h.svc.RolloutAction(r.Context(), p, r.PathValue("id"), action)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, out)
	}
}

func (h *handler) listTokens(w http.ResponseWriter, r *http.Request, p Principal) error {
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	toks, err := h.svc.Tokens(r.Context(), p)
	if err != nil {
		return err
	}
	for i := range toks {
		toks[i].Token = "" // secrets appear once, at creation
	}
	page, next, err := paginate(toks, limit, token)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, TokenList{Tokens: page, NextToken: next})
}

func (h *handler) createToken(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req TokenRequest
	if err := decodeStrict(r, &req); err != nil {
		return err
	}
	t, err := h.svc.CreateToken(r.Context(), p, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, t)
}

func (h *handler) revokeToken(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := h.svc.RevokeToken(r.Context(), p, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *handler) createJoinToken(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req JoinTokenRequest
	if err := decodeStrict(r, &req); err != nil {
		return err
	}
	resp, err := h.svc.CreateJoinToken(r.Context(), p, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, resp)
}

func (h *handler) usage(w http.ResponseWriter, r *http.Request, p Principal) error {
	q := r.URL.Query()
	uq := UsageQuery{Team: q.Get("team"), By: cmp.Or(q.Get("by"), EnergyByTeam)}
	switch uq.By {
	case EnergyByTeam, EnergyByJob, EnergyByModel:
	default:
		return fmt.Errorf("%w: by %s: expected team, job or gpu-model", gpufleet.ErrInvalid, gpufleet.Quote(uq.By))
	}
	period, err := power.ParsePeriod(q.Get("period"))
	if err != nil {
		return err
	}
	uq.Period = string(period)
	if uq.From, uq.To, err = windowParams(r); err != nil {
		return err
	}
	rep, err := h.svc.Usage(r.Context(), p, uq)
	if err != nil {
		return err
	}
	if rep.Teams == nil {
		rep.Teams = []TeamUsage{}
	}
	if rep.Energy == nil {
		rep.Energy = []EnergyRow{}
	}
	return writeJSON(w, http.StatusOK, rep)
}

// rollups serves a node's or a job's per-GPU rollups; key names the path
// value ("name" for a node, "id" for a job).
func (h *handler) rollups(key string) func(w http.ResponseWriter, r *http.Request, p Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p Principal) error {
		q := RollupQuery{GPU: r.URL.Query().Get("gpu")}
		if key == "name" {
			q.Node = r.PathValue(key)
		} else {
			q.JobID = r.PathValue(key)
		}
		var err error
		if q.From, q.To, err = windowParams(r); err != nil {
			return err
		}
		out, err := h.svc.Rollups(r.Context(), p, q)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, RollupList{Rollups: out})
	}
}

func (h *handler) register(w http.ResponseWriter, r *http.Request, _ Principal) error {
	if h.agents == nil {
		return fmt.Errorf("%w: this server takes no agents", gpufleet.ErrUnsupported)
	}
	tok, err := bearer(r)
	if err != nil {
		return err
	}
	var req RegisterRequest
	if err := decodeLenient(r, &req); err != nil {
		return err
	}
	resp, err := h.agents.Register(r.Context(), tok, req)
	if err != nil {
		if errors.Is(err, gpufleet.ErrNotFound) {
			// An unknown join token is a credential problem, not a missing object.
			return fmt.Errorf("%w: invalid, used or expired join token", ErrUnauthorized)
		}
		return err
	}
	return writeJSON(w, http.StatusOK, resp)
}

func (h *handler) renew(w http.ResponseWriter, r *http.Request, p Principal) error {
	if h.agents == nil {
		return fmt.Errorf("%w: this server takes no agents", gpufleet.ErrUnsupported)
	}
	resp, err := h.agents.RenewCredential(r.Context(), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, resp)
}

func (h *handler) heartbeat(w http.ResponseWriter, r *http.Request, p Principal) error {
	if h.agents == nil {
		return fmt.Errorf("%w: this server takes no agents", gpufleet.ErrUnsupported)
	}
	var req HeartbeatRequest
	if err := decodeLenient(r, &req); err != nil {
		return err
	}
	if req.Node != "" && req.Node != p.Node {
		return fmt.Errorf("%w: credential is for node %q, heartbeat names %q", ErrForbidden, p.Node, req.Node)
	}
	req.Node = p.Node
	resp, err := h.agents.Heartbeat(r.Context(), p, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, resp)
}

// pageParams reads ?limit= and ?next_token=.
func pageParams(r *http.Request) (int, string, error) {
	q := r.URL.Query()
	limit := 0
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, "", fmt.Errorf("%w: limit %s: expected a non-negative integer", gpufleet.ErrInvalid, gpufleet.Quote(s))
		}
		limit = min(n, MaxPageLimit)
	}
	return limit, q.Get("next_token"), nil
}

// paginate serves a page of a whole list the service returned. Its tokens
// are opaque offsets.
func paginate[T any](items []T, limit int, token string) ([]T, string, error) {
	if limit == 0 {
		limit = DefaultPageLimit
	}
	off := 0
	if token != "" {
		raw, err := base64.RawURLEncoding.DecodeString(token)
		s, ok := strings.CutPrefix(string(raw), "off:")
		n, aerr := strconv.Atoi(s)
		if err != nil || !ok || aerr != nil || n < 0 {
			return nil, "", fmt.Errorf("%w: next_token %s: not a token this server issued", gpufleet.ErrInvalid, gpufleet.Quote(token))
		}
		off = n
	}
	if off > len(items) {
		off = len(items)
	}
	end := min(off+limit, len(items))
	page := items[off:end]
	if page == nil {
		page = []T{}
	}
	next := ""
	if end < len(items) {
		next = base64.RawURLEncoding.EncodeToString([]byte("off:" + strconv.Itoa(end)))
	}
	return page, next, nil
}

// plan answers GET /api/v1/plan: the model block of a job as parameters
// (model, mode, precision, kv_precision, batch, input_tokens, ...), the
// GPU models to compare (gpu, comma-separated or repeated) and the GPU
// count (gpus).
func (h *handler) plan(w http.ResponseWriter, r *http.Request, p Principal) error {
	q := r.URL.Query()
	pq := PlanQuery{Team: q.Get("team"), GPUModels: splitList(q["gpu"])}
	m := &pq.Model
	m.Name, m.Mode, m.Precision, m.KVPrecision = q.Get("model"), q.Get("mode"), q.Get("precision"), q.Get("kv_precision")
	m.Optimizer, m.Recompute, m.Engine, m.Scenario = q.Get("optimizer"), q.Get("recompute"), q.Get("engine"), q.Get("scenario")
	for _, f := range []struct {
		name string
		dst  *int
	}{{"gpus", &pq.GPUs}, {"batch", &m.Batch}, {"input_tokens", &m.InputTokens}, {"output_tokens", &m.OutputTokens},
		{"seq", &m.Seq}, {"micro_batch", &m.MicroBatch}, {"global_batch", &m.GlobalBatch}, {"zero", &m.ZeRO},
		{"tp", &m.TP}, {"pp", &m.PP}, {"dp", &m.DP}, {"cp", &m.CP}, {"ep", &m.EP},
		{"max_model_len", &m.MaxModelLen}, {"max_num_batched_tokens", &m.MaxNumBatchedTokens}, {"max_num_seqs", &m.MaxNumSeqs}} {
		s := q.Get(f.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%w: %s %s: expected a whole number", gpufleet.ErrInvalid, f.name, gpufleet.Quote(s))
		}
		*f.dst = n
	}
	if s := q.Get("tokens"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: tokens %s: expected a whole number", gpufleet.ErrInvalid, gpufleet.Quote(s))
		}
		m.Tokens = n
	}
	for _, f := range []struct {
		name string
		dst  *float64
	}{{"memory_headroom", &m.MemoryHeadroom}, {"tpot_target_ms", &m.TPOTTargetMS}, {"ttft_target_ms", &m.TTFTTargetMS}} {
		if s := q.Get(f.name); s != "" {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return fmt.Errorf("%w: %s %s: expected a number", gpufleet.ErrInvalid, f.name, gpufleet.Quote(s))
			}
			*f.dst = v
		}
	}
	var err error
	if m.FP32GradAccum, err = boolParam(r, "fp32_grad_accum"); err != nil {
		return err
	}
	if m.Name == "" {
		return fmt.Errorf("%w: model: required (a built-in model name)", gpufleet.ErrInvalid)
	}
	if err := m.Validate(); err != nil {
		return err
	}
	if len(pq.GPUModels) > gpufleet.MaxListLen {
		return fmt.Errorf("%w: gpu: %d models, at most %d", gpufleet.ErrInvalid, len(pq.GPUModels), gpufleet.MaxListLen)
	}
	for _, g := range pq.GPUModels {
		if err := gpufleet.CheckText("gpu", g, gpufleet.MaxWordLen, false); err != nil {
			return err
		}
	}
	if err := gpufleet.ValidateCount("gpus", pq.GPUs, 0, gpufleet.MaxFleetGPUs); err != nil {
		return err
	}
	resp, err := h.svc.Plan(r.Context(), p, pq)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, resp)
}

// boolParam reads ?name=1|true|0|false (absent: false).
func boolParam(r *http.Request, name string) (bool, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%w: %s %s: expected 1, true, 0 or false", gpufleet.ErrInvalid, name, gpufleet.Quote(s))
	}
	return b, nil
}

// timeParam reads an RFC 3339 time (absent: zero).
func timeParam(r *http.Request, name string) (time.Time, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if y := t.UTC().Year(); err == nil && (y < 1 || y > 9999) {
		err = fmt.Errorf("year %d in UTC", y) // beyond what RFC 3339 can write back
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s %s: expected an RFC 3339 time from year 1 to 9999, such as 2025-01-31T00:00:00Z", gpufleet.ErrInvalid, name, gpufleet.Quote(s))
	}
	return t.UTC(), nil
}

// windowParams reads ?from= and ?to= (RFC 3339, each optional), refusing
// a window that ends before it begins.
func windowParams(r *http.Request) (from, to time.Time, err error) {
	if from, err = timeParam(r, "from"); err != nil {
		return from, to, err
	}
	if to, err = timeParam(r, "to"); err != nil {
		return from, to, err
	}
	if !from.IsZero() && !to.IsZero() && to.Before(from) {
		return from, to, fmt.Errorf("%w: to %s is before from %s", gpufleet.ErrInvalid, to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	return from, to, nil
}

// splitList flattens repeated and comma-separated query values, each
// once, in the order given.
func splitList(vals []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range vals {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" && !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// listOrWatch answers a list request with fetch's result, or with
// ?watch=1 streams it as server-sent snapshots.
func (h *handler) listOrWatch(w http.ResponseWriter, r *http.Request, fetch func() (any, error)) error {
	watch, err := boolParam(r, "watch")
	if err != nil {
		return err
	}
	if watch {
		return h.watchSnapshots(w, r, fetch)
	}
	list, err := fetch()
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, list)
}

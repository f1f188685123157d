package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/store"
)

// liveNode is what the server keeps in memory about a node between
// heartbeats; it is persisted only when something changes.
type liveNode struct {
	lastSeen   time.Time
	metricsURL string
	samples    []api.GPUSample
	// reported is the last state the agent reported per attempt.
	reported map[string]gpufleet.AttemptState
	// totals are the last accounting totals reported per attempt.
	totals map[string]api.AttemptReport
	// energy is each GPU's last energy counter reading (joules), and xids
	// its XIDs of the last hour.
	energy map[string]float64
	xids   map[string][]xidAt
	// prevBeat is when the samples last folded into rollups arrived.
	prevBeat time.Time
}

// heartbeatAge returns how long the node has been silent, measured from
// the later of its last heartbeat and this replica's leadership start (a
// new leader gives every node a grace window).
func (s *Server) heartbeatAge(name string, now time.Time) (time.Duration, bool) {
	age, known, _ := s.live.silence(name, now)
	return age, known
}

// view fills the live parts of a stored node: heartbeat age, the derived
// down state and the metrics URL.
func (s *Server) view(n gpufleet.Node, now time.Time) gpufleet.Node {
	age, known, led := s.live.silence(n.Name, now)
	if known {
		a := age.Seconds()
		n.HeartbeatAgeS = &a
	}
	if age > s.cfg.HeartbeatGrace || (!known && !led) {
		if n.State == gpufleet.NodeReady || n.State == gpufleet.NodeDraining || n.State == gpufleet.NodeCordoned {
			n.State = gpufleet.NodeDown
			n.Reason = fmt.Sprintf("no heartbeat for %s", age.Round(time.Second))
			if !known {
				n.Reason = "no heartbeat since the server started"
			}
			n.StateReason = n.Reason
		}
	}
	s.live.mu.Lock()
	if ln := s.live.nodes[n.Name]; ln != nil && ln.metricsURL != "" {
		n.MetricsURL = ln.metricsURL
	}
	s.live.mu.Unlock()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Versions == nil {
		n.Versions = map[string]string{}
	}
	for i := range n.GPUs {
		if n.GPUs[i].MIGInstances == nil {
			n.GPUs[i].MIGInstances = []gpufleet.MIGInstance{}
		}
	}
	return n
}

// Nodes lists the fleet with each node's state, health and heartbeat age.
func (s *Server) Nodes(ctx context.Context, p api.Principal) ([]gpufleet.Node, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	drift, err := s.drift(ctx, nodes)
	if err != nil {
		return nil, err
	}
	out := make([]gpufleet.Node, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, s.withLive(p, withDrift(s.view(n, now), drift[n.Name])))
	}
	return out, nil
}

// Node returns one node.
func (s *Server) Node(ctx context.Context, p api.Principal, name string) (gpufleet.Node, error) {
	if err := requireUser(p); err != nil {
		return gpufleet.Node{}, err
	}
	n, err := s.st.Node(ctx, name)
	if err != nil {
		return gpufleet.Node{}, err
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return gpufleet.Node{}, err
	}
	drift, err := s.drift(ctx, nodes)
	if err != nil {
		return gpufleet.Node{}, err
	}
	return s.withLive(p, withDrift(s.view(n, s.now()), drift[name])), nil
}

// NodeAction cordons (no new work), uncordons (back to ready) or drains
// (no new work, running attempts stopped and requeued) a node.
func (s *Server) NodeAction(ctx context.Context, p api.Principal, name string, a api.NodeAction) (gpufleet.Node, error) {
	return s.NodeActionBecause(ctx, p, name, a, "")
}

// NodeActionBecause is NodeAction with the admin's reason: the node's
// state reason becomes "by ACTOR: REASON" (drained attempts' stops name
// it) and the event log keeps it. Marking a node repaired takes none.
func (s *Server) NodeActionBecause(ctx context.Context, p api.Principal, name string, a api.NodeAction, reason string) (gpufleet.Node, error) {
	if err := requireAdmin(p); err != nil {
		return gpufleet.Node{}, err
	}
	n, err := s.st.Node(ctx, name)
	if err != nil {
		return gpufleet.Node{}, err
	}
	var state gpufleet.NodeState
	switch a {
	case api.Cordon:
		state = gpufleet.NodeCordoned
	case api.Uncordon:
		if n.State == gpufleet.NodeRepairing || n.State == gpufleet.NodeValidating {
			return gpufleet.Node{}, fmt.Errorf("%w: node %s %v", gpufleet.ErrInvalid, gpufleet.Quote(name), errInRepair)
		}
		state = gpufleet.NodeReady
	case api.Drain:
		state = gpufleet.NodeDraining
	case api.Repaired:
		if reason != "" {
			return gpufleet.Node{}, fmt.Errorf("%w: reason: marking a node repaired takes no reason (its validation decides)", gpufleet.ErrInvalid)
		}
		if err := s.health.markRepaired(ctx, actor(p), name, s.now()); err != nil {
			return gpufleet.Node{}, err
		}
		s.nudge()
		return s.Node(ctx, p, name)
	default:
		return gpufleet.Node{}, fmt.Errorf("%w: node action %s: expected cordon, uncordon, drain or repaired", gpufleet.ErrInvalid, gpufleet.Quote(string(a)))
	}
	why := "by " + actor(p)
	if reason != "" {
		why += ": " + reason
	}
	if err := s.st.SetNodeState(ctx, name, state, gpufleet.CauseOperator, why, actor(p), s.now()); err != nil {
		return gpufleet.Node{}, err
	}
	s.nudge()
	return s.Node(ctx, p, name)
}

// Register admits an agent with a join token and returns its node
// credential. A node that registers again (after an agent restart) keeps
// its state and reconciles its attempts at the next heartbeat.
func (s *Server) Register(ctx context.Context, joinToken string, r api.RegisterRequest) (api.RegisterResponse, error) {
	id, secret, ok := strings.Cut(strings.TrimPrefix(joinToken, joinPrefix), "_")
	if !strings.HasPrefix(joinToken, joinPrefix) || !ok {
		return api.RegisterResponse{}, errUnauthorized
	}
	if err := r.Validate(); err != nil {
		return api.RegisterResponse{}, err
	}
	now := s.now()
	old, err := s.st.Node(ctx, r.Node)
	exists := err == nil
	if err != nil && !errors.Is(err, gpufleet.ErrNotFound) {
		return api.RegisterResponse{}, err
	}
	proven := exists && s.provesNode(ctx, r)
	if proven {
		if why := hardwareChange(old.GPUs, r.GPUs); why != "" {
			return api.RegisterResponse{}, fmt.Errorf("%w: node %s registers with %s: a change of hardware is held for an admin; "+
				"if another machine now carries the name, run gpufleet nodes replace %s and join it with the token that prints",
				api.ErrForbidden, gpufleet.Quote(r.Node), why, r.Node)
		}
	}
	jt, err := s.st.UseJoinToken(ctx, id, hashSecret(secret), r.Node, now, proven)
	if err != nil {
		switch {
		case errors.Is(err, gpufleet.ErrNotFound):
			return api.RegisterResponse{}, errUnauthorized
		case errors.Is(err, store.ErrNameInUse):
			seen := "has not heartbeated since this server started"
			if age, known := s.heartbeatAge(r.Node, now); known {
				seen = "heartbeated " + gpufleet.FormatDuration(age) + " ago"
			}
			return api.RegisterResponse{}, fmt.Errorf("%w: node %s exists (it %s): a join token does not take over an existing node, live or quiet. "+
				"The node's own agent comes back with its stored credential; to put another machine in its place, an admin runs gpufleet nodes replace %s",
				api.ErrForbidden, gpufleet.Quote(r.Node), seen, r.Node)
		}
		return api.RegisterResponse{}, err
	}
	if exists && !proven {
		// The replacement nodes replace admitted.
		if err := s.st.AppendEvent(ctx, gpufleet.Event{At: now, Actor: "agent:" + r.Node, Kind: "node.replaced", Object: r.Node,
			Detail: fmt.Sprintf("another machine took the name with join token %s: %s", jt.ID, inventory(r.GPUs))}); err != nil {
			return api.RegisterResponse{}, err
		}
	}
	for _, g := range r.GPUs {
		if _, err := s.cat.Lookup(g.Model); err != nil {
			s.log.Warn("unknown gpu model", "node", r.Node, "model", g.Model)
		}
	}
	n := gpufleet.Node{Name: r.Node, State: gpufleet.NodeReady, Health: gpufleet.Healthy, Labels: r.Labels, Versions: r.Versions, GPUs: r.GPUs}
	if err := s.st.PutNode(ctx, n); err != nil {
		return api.RegisterResponse{}, err
	}
	if !exists {
		// A rack label is the node's first rack, nothing more: later
		// registrations leave the racks' lists alone.
		if err := s.racks.assign(ctx, r.Node, r.Labels, now); err != nil {
			return api.RegisterResponse{}, err
		}
	}
	cred, secretOut := s.nodeCredential(r.Node)
	cred.ExpiresAt = now.Add(s.cfg.CredentialTTL)
	if err := s.st.PutNodeCredential(ctx, cred); err != nil {
		return api.RegisterResponse{}, err
	}
	s.forget(nodePrefix + r.Node)
	s.live.mu.Lock()
	ln := s.live.node(r.Node)
	ln.lastSeen, ln.metricsURL = now, r.MetricsURL
	s.live.mu.Unlock()
	s.health.forget(r.Node) // the inventory may have changed
	if r.Bench != nil && len(r.Bench.Measurements) > 0 {
		if _, err := s.recordBench(ctx, r.Node, bench.TriggerJoin, *r.Bench, now); err != nil {
			return api.RegisterResponse{}, err
		}
	}
	s.nudge()
	return api.RegisterResponse{ProtocolVersion: api.ProtocolVersion, Node: r.Node, Credential: secretOut,
		ExpiresAt: cred.ExpiresAt, HeartbeatS: s.cfg.Heartbeat.Seconds(), FenceAfterS: s.cfg.FenceAfter.Seconds()}, nil
}

// provesNode reports whether the registering agent shows the node's own
// credential: it is that node, restarted. The node's latest credential
// proves it even past its expiry (a machine switched off for longer than
// the credential lasts comes back as itself, with its join token); nodes
// replace revokes it by replacing it.
func (s *Server) provesNode(ctx context.Context, r api.RegisterRequest) bool {
	rest, ok := strings.CutPrefix(r.Credential, nodePrefix)
	i := strings.LastIndexByte(rest, '.') // node names may hold dots; secrets do not
	if !ok || i <= 0 || rest[:i] != r.Node {
		return false
	}
	node, secret := rest[:i], rest[i+1:]
	if p, err := s.Authenticate(ctx, r.Credential); err == nil {
		return p.Node == r.Node
	}
	cred, err := s.st.NodeCredential(ctx, node)
	return err == nil && subtle.ConstantTimeCompare(hashSecret(secret), cred.Hash) == 1
}

// hardwareChange says how a node's GPUs as it registers again differ from
// what it had in count or models ("" when they do not): a restarted node
// claims the hardware it had.
func hardwareChange(had, claims []gpufleet.NodeGPU) string {
	if len(had) == 0 || inventory(had) == inventory(claims) {
		return ""
	}
	return fmt.Sprintf("%s where it had %s", inventory(claims), inventory(had))
}

// inventory is GPUs in words, by model in index order: "8 x h100-sxm-80gb".
func inventory(gpus []gpufleet.NodeGPU) string {
	if len(gpus) == 0 {
		return "no GPUs"
	}
	sorted := slices.SortedFunc(slices.Values(gpus), func(a, b gpufleet.NodeGPU) int { return a.Index - b.Index })
	var parts []string
	for i := 0; i < len(sorted); {
		j := i
		for j < len(sorted) && sorted[j].Model == sorted[i].Model {
			j++
		}
		parts = append(parts, fmt.Sprintf("%d x %s", j-i, sorted[i].Model))
		i = j
	}
	return strings.Join(parts, " + ")
}

// ReplaceNode is `gpufleet nodes replace NAME`: the node's credential is
// revoked at once and every join token bound to the name expires (its
// agent can no longer act as the node, nor register as it again), and a
// single-use join token bound to the name is issued for the machine that
// replaces it; an event records who did it.
func (s *Server) ReplaceNode(ctx context.Context, p api.Principal, name string) (api.JoinTokenResponse, error) {
	if err := requireAdmin(p); err != nil {
		return api.JoinTokenResponse{}, err
	}
	if _, err := s.st.Node(ctx, name); err != nil {
		return api.JoinTokenResponse{}, err
	}
	cred, _ := s.nodeCredential(name) // a secret nobody holds
	cred.ExpiresAt = s.now()
	if err := s.st.PutNodeCredential(ctx, cred); err != nil {
		return api.JoinTokenResponse{}, err
	}
	s.forget(nodePrefix + name)
	expired, err := s.st.ExpireJoinTokens(ctx, name, s.now(), actor(p))
	if err != nil {
		return api.JoinTokenResponse{}, err
	}
	exp := s.now().Add(time.Hour)
	jt, err := s.issueJoinToken(ctx, store.JoinToken{Node: name, SingleUse: true, Replaces: true, ExpiresAt: &exp, CreatedAt: s.now()}, actor(p))
	if err != nil {
		return api.JoinTokenResponse{}, err
	}
	if err := s.st.AppendEvent(ctx, gpufleet.Event{At: s.now(), Actor: actor(p), Kind: "node.replace", Object: name,
		Detail: fmt.Sprintf("credential revoked, %d join tokens bound to the name expired; join token %s bound to the name issued for its replacement",
			expired, jt.ID)}); err != nil {
		return api.JoinTokenResponse{}, err
	}
	return jt, nil
}

// RenewCredential gives an agent a fresh node credential for its current
// one, without the join token. The previous credential stays valid until
// its own expiry, so an agent that loses this answer keeps working.
func (s *Server) RenewCredential(ctx context.Context, p api.Principal) (api.RegisterResponse, error) {
	if p.Node == "" {
		return api.RegisterResponse{}, fmt.Errorf("%w: only an agent's node credential can be renewed", api.ErrForbidden)
	}
	old, err := s.st.NodeCredential(ctx, p.Node)
	if err != nil {
		return api.RegisterResponse{}, err
	}
	now := s.now()
	cred, secret := s.nodeCredential(p.Node)
	cred.ExpiresAt = now.Add(s.cfg.CredentialTTL)
	cred.PrevHash, cred.PrevExpiresAt = old.Hash, old.ExpiresAt
	if err := s.st.PutNodeCredential(ctx, cred); err != nil {
		return api.RegisterResponse{}, err
	}
	s.forget(nodePrefix + p.Node)
	s.log.Info("renewed node credential", "node", p.Node, "expires", cred.ExpiresAt)
	return api.RegisterResponse{ProtocolVersion: api.ProtocolVersion, Node: p.Node, Credential: secret,
		ExpiresAt: cred.ExpiresAt, HeartbeatS: s.cfg.Heartbeat.Seconds(), FenceAfterS: s.cfg.FenceAfter.Seconds()}, nil
}

func (s *Server) nodeCredential(node string) (store.NodeCredential, string) {
	secret := randomString(32)
	return store.NodeCredential{Node: node, Hash: hashSecret(secret)}, nodePrefix + node + "." + secret
}

// Heartbeat records a node's report and answers with the attempts it must
// start or stop. It touches the store only when something changed. The
// steps: check who reports, record the beat in memory (liveness,
// telemetry, accounting), judge the node's health, store the attempts'
// new states, and answer with the node's orders.
func (s *Server) Heartbeat(ctx context.Context, p api.Principal, r api.HeartbeatRequest) (api.HeartbeatResponse, error) {
	if err := s.mayReport(p, r); err != nil {
		return api.HeartbeatResponse{}, err
	}
	now := s.now()
	ln, changed := s.recordBeat(p.Node, r, now)
	if err := s.judgeBeat(ctx, p.Node, r, now); err != nil {
		return api.HeartbeatResponse{}, err
	}
	if err := s.storeReports(ctx, p, ln, changed, now); err != nil {
		return api.HeartbeatResponse{}, err
	}
	if err := s.storeAttemptEvents(ctx, p.Node, r.Attempts); err != nil {
		return api.HeartbeatResponse{}, err
	}
	if err := s.updated(ctx, p.Node, r.Updates, now); err != nil {
		return api.HeartbeatResponse{}, err
	}
	if err := s.storePowerCapFailures(ctx, p.Node, r.PowerCapFailures); err != nil {
		return api.HeartbeatResponse{}, err
	}
	resp := s.ordersFor(p.Node, ln, r.Attempts)
	resp.PowerCaps = s.powerCaps(r.Samples)
	resp.Update = s.updateOrders(p.Node)
	resp.Faults = s.relayFaults(p.Node, r.FaultAcks)
	resp.FullEvidence = s.health.wantsEvidence(p.Node, r)
	return resp, nil
}

// mayReport checks a heartbeat's sender and body: a node reports for
// itself, to the leader.
func (s *Server) mayReport(p api.Principal, r api.HeartbeatRequest) error {
	if p.Node == "" || (r.Node != "" && r.Node != p.Node) {
		return fmt.Errorf("%w: a node may only report for itself", api.ErrForbidden)
	}
	if err := r.Validate(); err != nil {
		return err
	}
	if !s.Leader() {
		// Liveness and orders live with the leader: a follower sends the
		// agent on to another replica (the client fails over on 503).
		return fmt.Errorf("%w: this replica is not the leader", api.ErrUnavailable)
	}
	return nil
}

// recordBeat keeps what the beat says in memory: the node is alive, its
// samples fold into the minute rollups, its attempts' totals into
// accounting. It returns the node's record and the attempts whose state
// changed since the node last reported them.
func (s *Server) recordBeat(node string, r api.HeartbeatRequest, now time.Time) (*liveNode, []api.AttemptReport) {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	ln := s.live.node(node)
	if now.Sub(ln.lastSeen) > s.cfg.HeartbeatGrace {
		defer s.nudge() // back from down (or first seen since a restart): place work there
	}
	ln.lastSeen = now
	ln.samples = r.Samples
	s.fold(node, ln, r.Samples, now)
	if r.MetricsURL != "" {
		ln.metricsURL = r.MetricsURL
	}
	var changed []api.AttemptReport
	for _, a := range r.Attempts {
		if ln.reported[a.AttemptID] != a.State {
			changed = append(changed, a)
		}
		ln.totals[a.AttemptID] = a
	}
	s.acct.account(node, r.Attempts, now)
	return ln, changed
}

// judgeBeat applies the node's validation results and runs the health
// rules over the beat.
func (s *Server) judgeBeat(ctx context.Context, node string, r api.HeartbeatRequest, now time.Time) error {
	if len(r.Validations) > 0 {
		if err := s.validated(ctx, node, r.Validations, now); err != nil {
			return err
		}
	}
	if len(r.Bench) > 0 {
		if err := s.takeBenchReports(ctx, node, r.Bench, now); err != nil {
			return err
		}
	}
	return s.health.judge(ctx, node, r, now)
}

// storeReports writes the attempts' new states, each only if the attempt
// is placed on the reporting node.
func (s *Server) storeReports(ctx context.Context, p api.Principal, ln *liveNode, changed []api.AttemptReport, now time.Time) error {
	for _, a := range changed {
		rec, err := s.st.Attempt(ctx, a.AttemptID)
		if errors.Is(err, gpufleet.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(rec.Nodes, func(n gpufleet.AttemptNode) bool { return n.Name == p.Node }) {
			s.log.Warn("agent reported another node's attempt", "node", p.Node, "attempt", a.AttemptID)
			continue
		}
		_, err = s.st.UpdateAttempt(ctx, store.AttemptUpdate{
			AttemptID: a.AttemptID, Node: p.Node, State: a.State, At: now, ExitCode: a.ExitCode, Reason: a.Reason, ReasonCode: a.ReasonCode,
			GPUSeconds: a.GPUSeconds, EffectiveGPUSeconds: a.EffectiveGPUSeconds, EnergyJoules: a.EnergyJoules, Work: a.Work, Actor: actor(p),
		})
		if err != nil && !errors.Is(err, gpufleet.ErrNotFound) && !errors.Is(err, gpufleet.ErrInvalid) {
			return err
		}
		if err == nil && a.State.Terminal() && !rec.State.Terminal() {
			code := a.ReasonCode
			if code == "" {
				code = rec.StopReasonCode
			}
			s.metrics.ended.WithLabelValues(string(a.State), code).Inc()
		}
		s.live.mu.Lock()
		ln.reported[a.AttemptID] = a.State
		if a.State.Terminal() {
			delete(ln.totals, a.AttemptID)
		}
		s.live.mu.Unlock()
		if a.State.Terminal() {
			s.nudge()
		}
	}
	return nil
}

// ordersFor answers a node with its orders: the starts it has not
// reported yet, the stops, a validation, and the attempts it runs that
// the leader does not know.
func (s *Server) ordersFor(node string, ln *liveNode, running []api.AttemptReport) api.HeartbeatResponse {
	resp := api.HeartbeatResponse{ProtocolVersion: api.ProtocolVersion, HeartbeatS: s.cfg.Heartbeat.Seconds(), FenceAfterS: s.cfg.FenceAfter.Seconds()}
	s.lead.mu.Lock()
	o, ready := s.lead.orders[node], s.lead.ready
	s.lead.mu.Unlock()
	s.live.mu.Lock()
	for _, as := range o.start {
		if _, seen := ln.reported[as.AttemptID]; !seen {
			resp.Start = append(resp.Start, as)
		}
	}
	s.live.mu.Unlock()
	resp.Stop = slices.Clone(o.stop)
	if o.validate != nil {
		resp.Validate = []api.ValidationOrder{*o.validate}
	}
	resp.Bench = s.benchOrders(node)
	for _, a := range running {
		if !a.State.Terminal() && ready && !o.active[a.AttemptID] {
			resp.Unknown = append(resp.Unknown, a.AttemptID)
		}
	}
	return resp
}

// ScrapeTargets lists every agent's metrics endpoint for Prometheus
// service discovery (admin or monitor): agents' ports change as they restart, and a
// node that joins is scraped without editing Prometheus' configuration.
func (s *Server) ScrapeTargets(ctx context.Context, p api.Principal) ([]api.SDTarget, error) {
	if !p.IsAdmin() && !p.IsMonitor() {
		return nil, fmt.Errorf("%w: admin or monitor token required", api.ErrForbidden)
	}
	// Every node, with what its agent last said, its metrics URL among it.
	nodes, err := s.Nodes(ctx, api.Principal{Role: gpufleet.RoleAdmin})
	if err != nil {
		return nil, err
	}
	return api.NodeTargets(nodes), nil
}

// storeAttemptEvents appends what the node reports happened to its
// attempts (image pulls) to the job's events, each attempt only when it is
// placed on the reporting node.
func (s *Server) storeAttemptEvents(ctx context.Context, node string, reps []api.AttemptReport) error {
	for _, a := range reps {
		if len(a.Events) == 0 {
			continue
		}
		rec, err := s.st.Attempt(ctx, a.AttemptID)
		if errors.Is(err, gpufleet.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(rec.Nodes, func(n gpufleet.AttemptNode) bool { return n.Name == node }) {
			continue
		}
		for _, e := range a.Events {
			if err := s.st.AppendEvent(ctx, gpufleet.Event{At: e.At, Actor: "agent:" + node, Kind: e.Kind, Object: rec.JobID,
				Team: rec.Team, Detail: a.AttemptID + ": " + e.Detail}); err != nil {
				return err
			}
		}
	}
	return nil
}

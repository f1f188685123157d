package api

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/rollout"
)

// memService is a transitional in-memory test double for the handler's
// mechanics (auth headers, error mapping, strict decoding, pagination,
// streams). It is not the control plane: end-to-end tests run against the
// real server and store.
type memService struct {
	lastPlan PlanQuery // the last plan asked
	mu       sync.Mutex
	tokens   map[string]Principal // secret -> principal
	jobs     map[string]gpufleet.Job
	nodes    []gpufleet.Node
	teams    []gpufleet.Team
	classes  []gpufleet.Class
	racks    []gpufleet.Rack
	stacks   []gpufleet.Stack
	events   []gpufleet.Event
	logs     map[string]string
	// eventCh feeds Watch streams.
	eventCh chan gpufleet.Event
	// failWith, when set, is returned by every Service method but Authenticate.
	failWith error
	// last holds the last request each method received.
	lastSubmit    SubmitRequest
	lastJobQuery  JobQuery
	lastUsage     UsageQuery
	lastRollups   RollupQuery
	lastHeartbeat HeartbeatRequest
	lastLogs      LogQuery
	logGap        time.Duration // between followed lines; 1 ms when 0
	nextID        int
}

const (
	adminTok  = "admin-token-0123456789"
	memberA   = "member-a-0123456789"
	memberB   = "member-b-0123456789"
	monitor   = "monitor-0123456789"
	agentTok  = "node-cred-n1"
	joinTok   = "join-0123456789"
	unusedTok = "nobody"
)

func newMemService() *memService {
	s := &memService{
		tokens: map[string]Principal{
			adminTok: {TokenID: "t-admin", Role: gpufleet.RoleAdmin},
			memberA:  {TokenID: "t-a", Role: gpufleet.RoleMember, Team: "team-a"},
			memberB:  {TokenID: "t-b", Role: gpufleet.RoleMember, Team: "team-b"},
			monitor:  {TokenID: "t-m", Role: gpufleet.RoleMonitor},
			agentTok: {TokenID: "c-n1", Node: "n1"},
		},
		jobs:    map[string]gpufleet.Job{},
		logs:    map[string]string{},
		eventCh: make(chan gpufleet.Event, 16),
	}
	for i := range 5 {
		s.nodes = append(s.nodes, gpufleet.Node{Name: fmt.Sprintf("n%d", i+1), State: gpufleet.NodeReady, Health: gpufleet.Healthy})
	}
	s.teams = []gpufleet.Team{{Name: "team-a", Weight: 1}, {Name: "team-b", Weight: 1}}
	return s
}

var (
	_ Service      = (*memService)(nil)
	_ AgentService = (*memService)(nil)
	_ LogService   = (*memService)(nil)
	_ WatchService = (*memService)(nil)
	_ EventLister  = (*memService)(nil)
)

func (s *memService) Authenticate(_ context.Context, bearer string) (Principal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.tokens[bearer]
	if !ok {
		return Principal{}, fmt.Errorf("%w: token", gpufleet.ErrNotFound)
	}
	return p, nil
}

func (s *memService) visible(p Principal, team string) bool { return p.IsAdmin() || p.Team == team }

func (s *memService) SubmitJob(_ context.Context, p Principal, r SubmitRequest) (SubmitResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWith != nil {
		return SubmitResponse{}, s.failWith
	}
	s.lastSubmit = r
	team := r.Team
	if !p.IsAdmin() {
		if team != "" && team != p.Team {
			return SubmitResponse{}, fmt.Errorf("%w: team %q", gpufleet.ErrNotFound, team)
		}
		team = p.Team
	}
	if r.Resources.GPUs <= 0 {
		return SubmitResponse{}, fmt.Errorf("%w: resources.gpus: expected a positive integer", gpufleet.ErrInvalid)
	}
	s.nextID++
	j := gpufleet.Job{ID: fmt.Sprintf("j-%d", s.nextID), Team: team, Name: r.Name, State: gpufleet.JobQueued,
		Priority: r.Priority, Resources: r.Resources, Command: r.Command, SubmittedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.jobs[j.ID] = j
	return SubmitResponse{Job: j, Warnings: []string{"example warning"}}, nil
}

func (s *memService) Jobs(_ context.Context, p Principal, q JobQuery) (JobList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWith != nil {
		return JobList{}, s.failWith
	}
	s.lastJobQuery = q
	var out []gpufleet.Job
	for _, j := range s.jobs {
		if s.visible(p, j.Team) && (q.Team == "" || q.Team == j.Team) {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b gpufleet.Job) int { return strings.Compare(a.ID, b.ID) })
	page, next, err := paginate(out, q.Limit, q.NextToken)
	return JobList{Jobs: page, NextToken: next}, err
}

func (s *memService) Job(_ context.Context, p Principal, id string) (gpufleet.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWith != nil {
		return gpufleet.Job{}, s.failWith
	}
	j, ok := s.jobs[id]
	if !ok || !s.visible(p, j.Team) {
		return gpufleet.Job{}, fmt.Errorf("%w: job %q", gpufleet.ErrNotFound, id)
	}
	return j, nil
}

func (s *memService) CancelJob(ctx context.Context, p Principal, id string) (gpufleet.Job, error) {
	j, err := s.Job(ctx, p, id)
	if err != nil {
		return j, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j.CancelRequested = true
	s.jobs[id] = j
	return j, nil
}

func (s *memService) Queue(_ context.Context, p Principal) ([]gpufleet.QueueEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWith != nil {
		return nil, s.failWith
	}
	var out []gpufleet.QueueEntry
	for i, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range s.jobs {
			if !yield(id) {
				return
			}
		}
	}) {
		j := s.jobs[id]
		if s.visible(p, j.Team) && j.State == gpufleet.JobQueued {
			out = append(out, gpufleet.QueueEntry{ID: j.ID, Team: j.Team, Priority: j.Priority, Position: i + 1, TeamPosition: 1, Reason: "waiting for 8 free h100 GPUs", ReasonCode: "capacity"})
		}
	}
	return out, nil
}

func (s *memService) Nodes(_ context.Context, _ Principal) ([]gpufleet.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWith != nil {
		return nil, s.failWith
	}
	return slices.Clone(s.nodes), nil
}

func (s *memService) Node(_ context.Context, _ Principal, name string) (gpufleet.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return gpufleet.Node{}, fmt.Errorf("%w: node %q", gpufleet.ErrNotFound, name)
}

func (s *memService) NodeAction(_ context.Context, p Principal, name string, a NodeAction) (gpufleet.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !p.IsAdmin() {
		return gpufleet.Node{}, fmt.Errorf("%w: admin only", ErrForbidden)
	}
	for i, n := range s.nodes {
		if n.Name == name {
			switch a {
			case Cordon:
				n.State = gpufleet.NodeCordoned
			case Uncordon:
				n.State = gpufleet.NodeReady
			case Drain:
				n.State = gpufleet.NodeDraining
			}
			s.nodes[i] = n
			return n, nil
		}
	}
	return gpufleet.Node{}, fmt.Errorf("%w: node %q", gpufleet.ErrNotFound, name)
}

func (s *memService) Teams(_ context.Context, p Principal) ([]gpufleet.Team, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []gpufleet.Team
	for _, t := range s.teams {
		if s.visible(p, t.Name) {
			out = append(out, t)
		}
	}
	return out, nil
}

func (s *memService) PutTeam(_ context.Context, _ Principal, r TeamRequest) (gpufleet.Team, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := gpufleet.Team{Name: r.Name, Quota: r.Quota, BorrowingLimit: -1, Weight: 1}
	if r.BorrowingLimit != nil {
		t.BorrowingLimit = *r.BorrowingLimit
	}
	if r.Weight != nil {
		t.Weight = *r.Weight
	}
	s.teams = append(s.teams, t)
	return t, nil
}

func (s *memService) Classes(context.Context, Principal) ([]gpufleet.Class, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.classes), nil
}

func (s *memService) PutClass(_ context.Context, _ Principal, c gpufleet.Class) (gpufleet.Class, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.classes = append(s.classes, c)
	return c, nil
}

func (s *memService) Racks(context.Context, Principal) ([]gpufleet.Rack, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.racks), nil
}

func (s *memService) PutRack(_ context.Context, _ Principal, r PutRackRequest) (gpufleet.Rack, error) {
	if err := r.Validate(); err != nil {
		return gpufleet.Rack{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.racks = append(s.racks, r.Rack)
	return r.Rack, nil
}

func (s *memService) DeleteRack(_ context.Context, _ Principal, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.racks)
	s.racks = slices.DeleteFunc(s.racks, func(r gpufleet.Rack) bool { return r.Name == name })
	if len(s.racks) == n {
		return gpufleet.ErrNotFound
	}
	return nil
}

func (s *memService) Tokens(context.Context, Principal) ([]gpufleet.Token, error) {
	return []gpufleet.Token{{ID: "t-a", Token: "leaked-secret", Team: "team-a", Role: gpufleet.RoleMember}}, nil
}

func (s *memService) CreateToken(_ context.Context, _ Principal, r TokenRequest) (gpufleet.Token, error) {
	return gpufleet.Token{ID: "t-new", Token: "secret-new", Team: r.Team, Role: r.Role}, nil
}

func (s *memService) RevokeToken(_ context.Context, _ Principal, id string) error {
	if id != "t-a" {
		return fmt.Errorf("%w: token %q", gpufleet.ErrNotFound, id)
	}
	return nil
}

func (s *memService) CreateJoinToken(_ context.Context, _ Principal, r JoinTokenRequest) (JoinTokenResponse, error) {
	return JoinTokenResponse{ID: "jt-1", Token: "join-secret", Node: r.Node, SingleUse: r.TTL == 0}, nil
}

func (s *memService) Usage(_ context.Context, p Principal, q UsageQuery) (UsageReport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastUsage = q
	return UsageReport{From: q.From, To: q.To, Teams: []TeamUsage{{Team: "team-a", GPUHours: 12.5, EffectiveGPUHours: 8}}}, nil
}

func (s *memService) Rollups(ctx context.Context, p Principal, q RollupQuery) ([]GPURollup, error) {
	if q.JobID != "" {
		if _, err := s.Job(ctx, p, q.JobID); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastRollups = q
	u := 0.5
	return []GPURollup{{Node: "n1", GPU: "GPU-1", Minute: q.From, Samples: 12, Utilization: &u, EffectiveUtilization: &u}}, nil
}

func (s *memService) RenewCredential(_ context.Context, p Principal) (RegisterResponse, error) {
	if p.Node == "" {
		return RegisterResponse{}, fmt.Errorf("%w: agents only", ErrForbidden)
	}
	return RegisterResponse{ProtocolVersion: ProtocolVersion, Node: p.Node, Credential: agentTok, HeartbeatS: 5, FenceAfterS: 60}, nil
}

func (s *memService) Register(_ context.Context, joinToken string, r RegisterRequest) (RegisterResponse, error) {
	if joinToken != joinTok {
		return RegisterResponse{}, fmt.Errorf("%w: join token", ErrUnauthorized)
	}
	return RegisterResponse{ProtocolVersion: ProtocolVersion, Node: r.Node, Credential: agentTok, HeartbeatS: 5, FenceAfterS: 60}, nil
}

func (s *memService) Heartbeat(_ context.Context, p Principal, r HeartbeatRequest) (HeartbeatResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastHeartbeat = r
	return HeartbeatResponse{ProtocolVersion: ProtocolVersion}, nil
}

func (s *memService) Logs(ctx context.Context, p Principal, jobID string, q LogQuery, w io.Writer) error {
	follow := q.Follow
	s.mu.Lock()
	s.lastLogs = q
	s.mu.Unlock()
	if _, err := s.Job(ctx, p, jobID); err != nil {
		return err
	}
	s.mu.Lock()
	text := s.logs[jobID]
	s.mu.Unlock()
	for _, line := range strings.SplitAfter(text, "\n") {
		if line == "" {
			continue
		}
		if _, err := io.WriteString(w, line); err != nil {
			return err
		}
		if follow {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(max(s.logGap, time.Millisecond)):
			}
		}
	}
	return nil
}

func (s *memService) Watch(ctx context.Context, p Principal, since int64) (<-chan gpufleet.Event, error) {
	out := make(chan gpufleet.Event)
	s.mu.Lock()
	var backlog []gpufleet.Event
	for _, ev := range s.events {
		if ev.ID > since && s.visible(p, ev.Team) {
			backlog = append(backlog, ev)
		}
	}
	s.mu.Unlock()
	go func() {
		defer close(out)
		for _, ev := range backlog {
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
		for {
			select {
			case ev := <-s.eventCh:
				if !s.visible(p, ev.Team) {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (s *memService) Events(_ context.Context, p Principal, q EventQuery) (EventList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := q.Limit
	if limit == 0 {
		limit = 100
	}
	var out EventList
	for _, ev := range s.events {
		if ev.ID > q.Since && s.visible(p, ev.Team) {
			if len(out.Events) == limit {
				out.NextToken = fmt.Sprint(out.Events[len(out.Events)-1].ID)
				break
			}
			out.Events = append(out.Events, ev)
		}
	}
	return out, nil
}

// Plan echoes what it was asked: the handler's parsing is what the tests
// check; the server runs the planner.
func (s *memService) Plan(_ context.Context, _ Principal, q PlanQuery) (PlanResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastPlan = q
	return PlanResponse{Scope: "given", Compared: q.GPUModels}, nil
}

func (s *memService) Stacks(context.Context, Principal) ([]gpufleet.Stack, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.stacks), nil
}

func (s *memService) CreateStack(_ context.Context, p Principal, req CreateStackRequest) (gpufleet.Stack, error) {
	st := req.Stack
	if p.Role != gpufleet.RoleAdmin {
		return st, ErrForbidden
	}
	if err := st.Validate(); err != nil {
		return st, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.State = gpufleet.StackCandidate
	s.stacks = append(s.stacks, st)
	return st, nil
}

func (s *memService) ValidateStack(_ context.Context, _ Principal, name, gpuModel string, _ time.Duration) (gpufleet.Stack, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.stacks {
		if s.stacks[i].Name == name {
			s.stacks[i].State = gpufleet.StackValidated
			s.stacks[i].Validated = append(s.stacks[i].Validated, gpufleet.StackValidation{GPUModel: gpuModel})
			return s.stacks[i], nil
		}
	}
	return gpufleet.Stack{}, gpufleet.ErrNotFound
}

func (s *memService) RetireStack(_ context.Context, _ Principal, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.stacks {
		if s.stacks[i].Name == name {
			s.stacks[i].State = gpufleet.StackRetired
			return nil
		}
	}
	return gpufleet.ErrNotFound
}

func (s *memService) StackCheck(context.Context, Principal) ([]NodeStack, error) {
	return []NodeStack{}, nil
}

func (s *memService) StartRollout(_ context.Context, p Principal, r RolloutRequest) (rollout.Rollout, error) {
	if p.Role != gpufleet.RoleAdmin {
		return rollout.Rollout{}, ErrForbidden
	}
	if err := r.Validate(); err != nil {
		return rollout.Rollout{}, err
	}
	return rollout.Rollout{ID: "ro-1", Stack: r.Stack, State: rollout.Running}, nil
}

func (s *memService) Rollouts(context.Context, Principal) ([]rollout.Rollout, error) {
	return []rollout.Rollout{}, nil
}

func (s *memService) Rollout(_ context.Context, _ Principal, id string) (rollout.Rollout, error) {
	return rollout.Rollout{}, fmt.Errorf("%w: rollout %s", gpufleet.ErrNotFound, id)
}

func (s *memService) RolloutAction(_ context.Context, _ Principal, id, _ string) (rollout.Rollout, error) {
	return rollout.Rollout{}, fmt.Errorf("%w: rollout %s", gpufleet.ErrNotFound, id)
}

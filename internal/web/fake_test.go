package web

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/capacity"
	"github.com/gpufleet/gpufleet/internal/forecast"
	"github.com/gpufleet/gpufleet/internal/rollout"
	"github.com/gpufleet/gpufleet/internal/stack"
)

// fakeService is a small api.Service with the real one's tenancy rules: a
// member sees and touches only its own team's jobs (ErrNotFound for the
// others) and admin-only methods answer ErrForbidden. It records the
// principal of every call.
type fakeService struct {
	mu      sync.Mutex
	tokens  map[string]api.Principal
	jobs    []gpufleet.Job
	nodes   []gpufleet.Node
	calls   []api.Principal
	actions []string
	now     time.Time
}

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }

func newFakeService(now time.Time) *fakeService {
	eta := now.Add(25 * time.Minute)
	started := now.Add(-10 * time.Minute)
	s := &fakeService{now: now, tokens: map[string]api.Principal{
		"admin-token-0123456789": {TokenID: "tok-admin", Role: gpufleet.RoleAdmin},
		"member-a-0123456789":    {TokenID: "tok-a", Role: gpufleet.RoleMember, Team: "team-a"},
		"member-b-0123456789":    {TokenID: "tok-b", Role: gpufleet.RoleMember, Team: "team-b"},
		"node-credential-01234":  {TokenID: "node-1", Node: "n1"},
	}}
	s.jobs = []gpufleet.Job{
		{ID: "j-a1", Team: "team-a", Name: "alpha-train", State: gpufleet.JobQueued, Priority: "batch", SubmittedAt: now.Add(-time.Minute),
			Resources: gpufleet.Resources{GPUs: 16, Interconnect: "nvlink"}, Command: []string{"sleep", "60"},
			Queue: &gpufleet.QueueEntry{ID: "j-a1", Team: "team-a", Priority: "batch", Position: 2, TeamPosition: 1,
				Reason: "no node has 16 free GPUs in one NVLink domain", ReasonCode: "no_fit", EstimatedStart: &eta,
				Explanation: &gpufleet.Explanation{Code: "topology", NodesEvaluated: 2, Exhausted: gpufleet.DimNVLinkDomain, Need: 16, Most: 8,
					NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterCapacity, Nodes: 1}, {Code: gpufleet.FilterTopology, Nodes: 1}}}}},
		{ID: "j-a2", Team: "team-a", Name: "alpha-serve", State: gpufleet.JobRunning, Priority: "production", SubmittedAt: started,
			StartedAt: &started, EstimateS: f64(3600), Resources: gpufleet.Resources{GPUs: 2}, Command: []string{"serve"},
			Attempts: []gpufleet.Attempt{{ID: "att-1", JobID: "j-a2", State: gpufleet.AttemptRunning, Node: "n1", GPUs: []string{"GPU-1", "GPU-2"},
				Nodes: []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"GPU-1", "GPU-2"}}}, StartedAt: &started}}},
		bigJob(now), shortJob(now),
		{ID: "j-b1", Team: "team-b", Name: "secret-b", State: gpufleet.JobQueued, Priority: "batch", SubmittedAt: now,
			Resources: gpufleet.Resources{GPUs: 1}, Command: []string{"true"},
			Queue: &gpufleet.QueueEntry{ID: "j-b1", Team: "team-b", Priority: "batch", Position: 1, TeamPosition: 1, Reason: "quota", ReasonCode: "quota"}},
	}
	gpu := func(i int, eff float64, alloc bool, team string) gpufleet.NodeGPU {
		return gpufleet.NodeGPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: "h100-sxm-80gb", MemoryBytes: 80 << 30,
			State: gpufleet.NodeReady, Health: gpufleet.Healthy, NVLinkDomain: "n1-nvl",
			Live: &gpufleet.GPULive{Utilization: f64(eff), EffectiveUtilization: f64(eff), PowerWatts: f64(300), TemperatureC: f64(60),
				MemoryUsedBytes: i64(10 << 30), Allocated: alloc, Team: team}}
	}
	n1 := gpufleet.Node{Name: "n1", State: gpufleet.NodeReady, Health: gpufleet.Healthy, HeartbeatAgeS: f64(0.5),
		Versions: map[string]string{"driver": "550.54", "cuda": "12.4", "vbios": "96.00"}, Labels: map[string]string{"rack": "r1"},
		GPUs: []gpufleet.NodeGPU{gpu(0, 0.9, false, ""), gpu(1, 0.5, true, "team-a"), gpu(2, 0.01, true, "team-a"), gpu(3, 0, false, "")}}
	n1.GPUs[3].Health, n1.GPUs[3].Reason = gpufleet.Unhealthy, "XID 79"
	n1.GPUs[3].Live.RecentXIDs = []int{79}
	n1.GPUs[1].Live.ThrottleReasons = []string{"sw_power_cap", "sync_boost"}
	n2 := gpufleet.Node{Name: "n2", State: gpufleet.NodeCordoned, Health: gpufleet.Healthy,
		GPUs: []gpufleet.NodeGPU{{Index: 0, UUID: "GPU-L4", Model: "l4", State: gpufleet.NodeReady, Health: gpufleet.Healthy,
			MIGInstances: []gpufleet.MIGInstance{{UUID: "MIG-1", Profile: "1g.10gb"}}}}}
	s.nodes = []gpufleet.Node{n1, n2}
	return s
}

// bigJob is team-a's 16-GPU job over two nodes the viewer cannot name
// (GPU-n3-0 … GPU-n4-7), running for 20 minutes.
func bigJob(now time.Time) gpufleet.Job {
	started := now.Add(-20 * time.Minute)
	var nodes []gpufleet.AttemptNode
	for _, n := range []string{"n3", "n4"} {
		an := gpufleet.AttemptNode{Name: n}
		for i := range 8 {
			an.GPUs = append(an.GPUs, fmt.Sprintf("GPU-%s-%d", n, i))
		}
		nodes = append(nodes, an)
	}
	return gpufleet.Job{ID: "j-a3", Team: "team-a", Name: "alpha-big", State: gpufleet.JobRunning, Priority: "training", SubmittedAt: started,
		StartedAt: &started, Resources: gpufleet.Resources{GPUs: 16}, Command: []string{"train"},
		Attempts: []gpufleet.Attempt{{ID: "att-3", JobID: "j-a3", State: gpufleet.AttemptRunning, Node: "n3", GPUs: nodes[0].GPUs, Nodes: nodes, StartedAt: &started}}}
}

// shortJob is team-a's job that ran 40 seconds on one GPU, five minutes
// ago: placed 2 s before it ran.
func shortJob(now time.Time) gpufleet.Job {
	placed := now.Add(-5 * time.Minute).Truncate(time.Minute).Add(10 * time.Second)
	running, done := placed.Add(2*time.Second), placed.Add(40*time.Second)
	code := 0
	return gpufleet.Job{ID: "j-a4", Team: "team-a", Name: "alpha-quick", State: gpufleet.JobSucceeded, Priority: "batch", SubmittedAt: placed.Add(-time.Second),
		StartedAt: &running, FinishedAt: &done, Resources: gpufleet.Resources{GPUs: 1}, Command: []string{"true"},
		Attempts: []gpufleet.Attempt{{ID: "att-4", JobID: "j-a4", State: gpufleet.AttemptSucceeded, Node: "n1", GPUs: []string{"GPU-1"},
			Nodes: []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"GPU-1"}}}, StartedAt: &placed, FinishedAt: &done, ExitCode: &code}}}
}

// bigJobUtil is the fake effective utilization of GPU i (of 16) of the
// big job in any minute: 0.30 to 0.90, so the mean is 0.60.
func bigJobUtil(i int) float64 { return 0.3 + 0.04*float64(i) }

func (s *fakeService) record(p api.Principal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, p)
	if p.Role == "" {
		return api.ErrUnauthorized
	}
	return nil
}

func (s *fakeService) principals() []api.Principal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func visibleTo(p api.Principal, team string) bool { return p.IsAdmin() || p.Team == team }

func (s *fakeService) SubmitJob(_ context.Context, p api.Principal, _ api.SubmitRequest) (api.SubmitResponse, error) {
	return api.SubmitResponse{}, s.record(p)
}

func (s *fakeService) Jobs(_ context.Context, p api.Principal, q api.JobQuery) (api.JobList, error) {
	if err := s.record(p); err != nil {
		return api.JobList{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []gpufleet.Job
	for _, j := range s.jobs {
		if !visibleTo(p, j.Team) || (!q.All && j.State.Terminal()) {
			continue
		}
		if len(q.States) > 0 && !slices.Contains(q.States, j.State) {
			continue
		}
		out = append(out, j)
	}
	return api.JobList{Jobs: out}, nil
}

func (s *fakeService) Job(_ context.Context, p api.Principal, id string) (gpufleet.Job, error) {
	if err := s.record(p); err != nil {
		return gpufleet.Job{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.jobs {
		if j.ID == id && visibleTo(p, j.Team) {
			return j, nil
		}
	}
	return gpufleet.Job{}, fmt.Errorf("%w: job %s", gpufleet.ErrNotFound, id)
}

func (s *fakeService) CancelJob(ctx context.Context, p api.Principal, id string) (gpufleet.Job, error) {
	j, err := s.Job(ctx, p, id)
	if err != nil {
		return j, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.actions = append(s.actions, "cancel "+id)
	for i := range s.jobs {
		if s.jobs[i].ID == id {
			s.jobs[i].CancelRequested = true
			j = s.jobs[i]
		}
	}
	return j, nil
}

func (s *fakeService) Queue(_ context.Context, p api.Principal) ([]gpufleet.QueueEntry, error) {
	if err := s.record(p); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []gpufleet.QueueEntry{}
	for _, j := range s.jobs {
		if j.Queue != nil && visibleTo(p, j.Team) {
			out = append(out, *j.Queue)
		}
	}
	return out, nil
}

func (s *fakeService) Nodes(_ context.Context, p api.Principal) ([]gpufleet.Node, error) {
	if err := s.record(p); err != nil {
		return nil, err
	}
	out := slices.Clone(s.nodes)
	if !p.IsAdmin() { // like the server: a GPU's team shows to that team only
		for i := range out {
			out[i].GPUs = slices.Clone(out[i].GPUs)
			for k := range out[i].GPUs {
				if l := out[i].GPUs[k].Live; l != nil && l.Team != p.Team {
					c := *l
					c.Team = ""
					out[i].GPUs[k].Live = &c
				}
			}
		}
	}
	return out, nil
}

func (s *fakeService) Node(ctx context.Context, p api.Principal, name string) (gpufleet.Node, error) {
	nodes, err := s.Nodes(ctx, p)
	if err != nil {
		return gpufleet.Node{}, err
	}
	for _, n := range nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return gpufleet.Node{}, fmt.Errorf("%w: node %s", gpufleet.ErrNotFound, name)
}

func (s *fakeService) NodeAction(ctx context.Context, p api.Principal, name string, a api.NodeAction) (gpufleet.Node, error) {
	if err := s.record(p); err != nil {
		return gpufleet.Node{}, err
	}
	if !p.IsAdmin() {
		return gpufleet.Node{}, fmt.Errorf("%w: admin only", api.ErrForbidden)
	}
	s.mu.Lock()
	s.actions = append(s.actions, string(a)+" "+name)
	s.mu.Unlock()
	return s.Node(ctx, p, name)
}

func (s *fakeService) Teams(_ context.Context, p api.Principal) ([]gpufleet.Team, error) {
	if err := s.record(p); err != nil {
		return nil, err
	}
	var out []gpufleet.Team
	for _, t := range []gpufleet.Team{
		{Name: "team-a", Quota: map[string]int{"h100-sxm-80gb": 8}, Used: map[string]int{"h100-sxm-80gb": 2}, BorrowingLimit: -1, Weight: 1},
		{Name: "team-b", Quota: map[string]int{"big": 4}, Used: map[string]int{"l4": 1}, BorrowingLimit: 2, Weight: 2},
		{Name: "team-c", Quota: map[string]int{}, Used: map[string]int{"l4": 1}, BorrowingLimit: -1, Weight: 1},
	} {
		if visibleTo(p, t.Name) {
			out = append(out, t)
		}
	}
	return out, nil
}

func (s *fakeService) PutTeam(_ context.Context, p api.Principal, _ api.TeamRequest) (gpufleet.Team, error) {
	return gpufleet.Team{}, s.record(p)
}

func (s *fakeService) Classes(_ context.Context, p api.Principal) ([]gpufleet.Class, error) {
	return []gpufleet.Class{{Name: "big", Models: []string{"h100-sxm-80gb", "l4"}}}, s.record(p)
}

func (s *fakeService) Racks(_ context.Context, p api.Principal) ([]gpufleet.Rack, error) {
	draw := gpufleet.Watts(9800)
	return []gpufleet.Rack{{Name: "r1", PowerBudgetWatts: 10000, RatedWatts: 10200, DrawWatts: &draw, Members: []string{"n1"}}}, s.record(p)
}

func (s *fakeService) PutRack(_ context.Context, _ api.Principal, r api.PutRackRequest) (gpufleet.Rack, error) {
	return r.Rack, nil
}

func (s *fakeService) DeleteRack(context.Context, api.Principal, string) error { return nil }

func (s *fakeService) PutClass(_ context.Context, p api.Principal, c gpufleet.Class) (gpufleet.Class, error) {
	return c, s.record(p)
}

func (s *fakeService) Tokens(_ context.Context, p api.Principal) ([]gpufleet.Token, error) {
	return nil, s.record(p)
}

func (s *fakeService) CreateToken(_ context.Context, p api.Principal, _ api.TokenRequest) (gpufleet.Token, error) {
	return gpufleet.Token{}, s.record(p)
}

func (s *fakeService) RevokeToken(_ context.Context, p api.Principal, _ string) error {
	return s.record(p)
}

func (s *fakeService) CreateJoinToken(_ context.Context, p api.Principal, _ api.JoinTokenRequest) (api.JoinTokenResponse, error) {
	return api.JoinTokenResponse{}, s.record(p)
}

func (s *fakeService) Usage(_ context.Context, p api.Principal, q api.UsageQuery) (api.UsageReport, error) {
	if err := s.record(p); err != nil {
		return api.UsageReport{}, err
	}
	rep := api.UsageReport{From: q.From, To: q.To}
	for _, t := range []api.TeamUsage{
		{Team: "team-a", GPUHours: 10.06, EffectiveGPUHours: 6, IdleAllocatedGPUHour: 2.06, IdleAllocatedUSD: 5.5, EnergyJoules: 3.6e7 + 5e5,
			Models: []api.ModelUsage{{Model: "a100-sxm-80gb", GPUHours: 0.06, IdleAllocatedGPUHour: 0.06, EnergyJoules: 5e5},
				{Model: "h100-sxm-80gb", GPUHours: 10, EffectiveGPUHours: 6, IdleAllocatedGPUHour: 2, IdleAllocatedUSD: 5.5, EnergyJoules: 3.6e7}}},
		{Team: "team-b", GPUHours: 1, EffectiveGPUHours: 1},
		{Team: "team-c", GPUHours: 0.074, EffectiveGPUHours: 0.05, IdleAllocatedGPUHour: 0.01, EnergyJoules: 900,
			Models: []api.ModelUsage{{Model: "l4", GPUHours: 0.074, EffectiveGPUHours: 0.05, IdleAllocatedGPUHour: 0.01, EnergyJoules: 900}}},
	} {
		if visibleTo(p, t.Team) {
			rep.Teams = append(rep.Teams, t)
		}
	}
	rep.PUE, rep.GridIntensity = 1.5, 400
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for i, kwh := range []float64{4, 6} {
		d := day.AddDate(0, 0, i)
		e := api.EnergyRow{Team: "team-a", PeriodStart: &d, GPUHours: kwh * 2, GPUEnergyKWh: kwh, FacilityEnergyKWh: 1.5 * kwh, CO2eKg: 1.5 * kwh * 0.4, AvgGPUWatts: 500}
		if q.By == api.EnergyByTeam && q.Period == "day" && visibleTo(p, e.Team) {
			rep.Energy = append(rep.Energy, e)
		}
	}
	return rep, nil
}

func (s *fakeService) Rollups(_ context.Context, p api.Principal, q api.RollupQuery) ([]api.GPURollup, error) {
	if err := s.record(p); err != nil {
		return nil, err
	}
	if q.JobID != "" {
		j, err := s.Job(context.Background(), p, q.JobID)
		if err != nil {
			return nil, err
		}
		return s.jobRollups(j), nil
	}
	var out []api.GPURollup
	for m := 10; m > 0; m-- {
		minute := s.now.Truncate(time.Minute).Add(-time.Duration(m) * time.Minute)
		for _, g := range []string{"GPU-1", "GPU-2"} {
			out = append(out, api.GPURollup{Node: "n1", GPU: g, Model: "h100-sxm-80gb", Minute: minute, Samples: 12,
				EffectiveUtilization: f64(float64(m) / 10), MemoryUsedBytesMax: i64(int64(m) << 30), PowerWatts: f64(300), EnergyJoules: 18000})
		}
	}
	return out, nil
}

// jobRollups are the rollups of the minutes a job's attempts held their
// GPUs, in the server's order (by GPU UUID, then minute): the big job's
// GPU i at bigJobUtil(i) and i GiB, the others' as the node's.
func (s *fakeService) jobRollups(j gpufleet.Job) []api.GPURollup {
	var out []api.GPURollup
	for _, a := range j.Attempts {
		end := s.now
		if a.FinishedAt != nil {
			end = *a.FinishedAt
		}
		var gpus []string
		for _, n := range a.Nodes {
			gpus = append(gpus, n.GPUs...)
		}
		for i, g := range gpus {
			node := a.Nodes[0].Name
			for _, n := range a.Nodes {
				if slices.Contains(n.GPUs, g) {
					node = n.Name
				}
			}
			for m := a.StartedAt.Truncate(time.Minute); !m.After(end); m = m.Add(time.Minute) {
				util, mem := float64(m.Minute()%10)/10, int64(m.Minute()%10)<<30
				if j.ID == "j-a3" {
					util, mem = bigJobUtil(i), int64(i)<<30
				}
				out = append(out, api.GPURollup{Node: node, GPU: g, Model: "h100-sxm-80gb", Minute: m, Samples: 12,
					EffectiveUtilization: f64(util), MemoryUsedBytesMax: i64(mem), PowerWatts: f64(300), EnergyJoules: 18000})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b api.GPURollup) int { return strings.Compare(a.GPU, b.GPU) })
	return out
}

func (s *fakeService) Authenticate(_ context.Context, bearer string) (api.Principal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.tokens[bearer]
	if !ok {
		return api.Principal{}, fmt.Errorf("%w: unknown token", api.ErrUnauthorized)
	}
	return p, nil
}

func (s *fakeService) revoke(token string) {
	s.mu.Lock()
	delete(s.tokens, token)
	s.mu.Unlock()
}

// Logs implements api.LogService: the job's id as its output.
func (s *fakeService) Logs(ctx context.Context, p api.Principal, jobID string, _ api.LogQuery, w io.Writer) error {
	j, err := s.Job(ctx, p, jobID)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "hello from %s\n<script>alert(1)</script>\n", j.ID)
	return err
}

func (s *fakeService) Plan(_ context.Context, p api.Principal, q api.PlanQuery) (api.PlanResponse, error) {
	return api.PlanResponse{Scope: "given", Compared: q.GPUModels}, s.record(p)
}

func (s *fakeService) Stacks(context.Context, api.Principal) ([]gpufleet.Stack, error) {
	return []gpufleet.Stack{{Name: "prod-550", State: gpufleet.StackValidated, Versions: map[string]string{"driver": "550.54.15", "cuda": "12.4"},
		Validated: []gpufleet.StackValidation{{GPUModel: "h100-sxm-80gb", Nodes: []string{"n1"}}}, Nodes: []string{"n1"}}}, nil
}
func (s *fakeService) CreateStack(_ context.Context, _ api.Principal, req api.CreateStackRequest) (gpufleet.Stack, error) {
	return req.Stack, nil
}
func (s *fakeService) ValidateStack(context.Context, api.Principal, string, string, time.Duration) (gpufleet.Stack, error) {
	return gpufleet.Stack{}, gpufleet.ErrNotFound
}
func (s *fakeService) RetireStack(context.Context, api.Principal, string) error { return nil }
func (s *fakeService) StackCheck(context.Context, api.Principal) ([]api.NodeStack, error) {
	return []api.NodeStack{{Node: "n2", Findings: []stack.Finding{{Severity: stack.Risk, Component: gpufleet.StackDriver,
		Message: "CUDA toolkit 12.4 runs on driver 535.104.05 only through minor version compatibility", Source: stack.SourceMinorCompat}}}}, nil
}

func (s *fakeService) StartRollout(context.Context, api.Principal, api.RolloutRequest) (rollout.Rollout, error) {
	return rollout.Rollout{}, nil
}
func (s *fakeService) Rollouts(context.Context, api.Principal) ([]rollout.Rollout, error) {
	return []rollout.Rollout{{ID: "ro-1", Stack: "bad-117", State: rollout.Halted, Reason: "node n1 failed a gate: validation: CUDA toolkit 11.7 cannot run on Ada",
		Waves: []float64{1}, BakeS: 600, Nodes: []rollout.Node{{Name: "n1", Phase: rollout.Failed, Reason: "validation: CUDA toolkit 11.7 cannot run on Ada"},
			{Name: "n2", Wave: 1, Phase: rollout.Pending}}},
		{ID: "ro-0", Stack: "prod-560", State: rollout.RolledBack, Halt: "node n3 failed a gate: health unhealthy during the bake: XID 48",
			Waves: []float64{1}, Wave: 2, BakeS: 600, DrainPolicy: rollout.DefaultDrainPolicy, Nodes: []rollout.Node{{Name: "n3", Wave: 1, Phase: rollout.Complete}}}}, nil
}
func (s *fakeService) Rollout(context.Context, api.Principal, string) (rollout.Rollout, error) {
	return rollout.Rollout{}, gpufleet.ErrNotFound
}
func (s *fakeService) RolloutAction(context.Context, api.Principal, string, string) (rollout.Rollout, error) {
	return rollout.Rollout{}, gpufleet.ErrNotFound
}

// Forecast answers a member with its team's demand, as the server does.
func (s *fakeService) Forecast(_ context.Context, p api.Principal, q api.ForecastQuery) (api.ForecastResponse, error) {
	if err := s.record(p); err != nil {
		return api.ForecastResponse{}, err
	}
	hist := forecast.Series{Start: s.now.AddDate(0, 0, -21).UTC().Truncate(24 * time.Hour)}
	for i := range 21 {
		hist.Values = append(hist.Values, float64(10+i))
	}
	fc, err := forecast.HoltWinters(hist, q.HorizonDays)
	return api.ForecastResponse{Team: p.Team, History: hist, Forecast: fc}, err
}

// Procure is admin-only: an order of one H100 node.
func (s *fakeService) Procure(_ context.Context, p api.Principal, q api.ProcureQuery) (api.ProcureResponse, error) {
	if err := s.record(p); err != nil {
		return api.ProcureResponse{}, err
	}
	if !p.IsAdmin() {
		return api.ProcureResponse{}, api.ErrForbidden
	}
	hist := forecast.Series{Start: s.now.AddDate(0, 0, -28).UTC().Truncate(24 * time.Hour)}
	for i := range 28 {
		hist.Values = append(hist.Values, float64(100+5*i))
	}
	fc, err := forecast.HoltWinters(hist, q.HorizonDays)
	if err != nil {
		return api.ProcureResponse{}, err
	}
	cross, by := s.now.AddDate(0, 0, 21), s.now.AddDate(0, 0, -63)
	rec := capacity.Recommendation{GPUModel: "h100-sxm-80gb", Action: capacity.Order, Nodes: 1, GPUs: 8, Crossing: &cross, OrderBy: &by,
		LateDays: 63, Probability: 0.7, LeadTimeDays: 84, Target: q.Target, TargetText: q.Target.String(),
		Without: &capacity.Replay{GPUs: 16, Allocation: 0.8, WaitP90S: 6 * 3600}, With: &capacity.Replay{GPUs: 24, Allocation: 0.55, WaitP90S: 3600, Meets: true},
		Reasons: []string{"replayed: 1 more node meets it"}}
	return api.ProcureResponse{At: s.now, Models: []api.ProcureModel{{Recommendation: rec, History: hist, Forecast: fc, CapacityGPUHoursPerDay: 384, PoolJobs: 10}},
		Skipped: map[string]string{"l4": "no finished jobs on it to replay"}}, nil
}

// Lifecycle is admin-only: an L4 to retire.
func (s *fakeService) Lifecycle(_ context.Context, p api.Principal, q api.LifecycleQuery) (capacity.LifecycleReport, error) {
	if err := s.record(p); err != nil {
		return capacity.LifecycleReport{}, err
	}
	if !p.IsAdmin() {
		return capacity.LifecycleReport{}, api.ErrForbidden
	}
	age := 3.4
	return capacity.LifecycleReport{At: s.now, HorizonMonths: q.HorizonMonths, Unit: "one H100 SXM5 80GB GPU-hour of the fleet's mix",
		Models: []capacity.ModelLifecycle{{GPUModel: "l4", GPUs: 4, AgeYears: &age, Allocation: 0.02, Decision: capacity.Retire,
			Reasons: []string{"jobs held 2.0% of its GPU time"}}}}, nil
}

func (s *fakeService) Audit(_ context.Context, p api.Principal, q api.AuditQuery) (audit.Report, error) {
	if err := s.record(p); err != nil {
		return audit.Report{}, err
	}
	if !p.IsAdmin() {
		return audit.Report{}, api.ErrForbidden
	}
	idle, cost := 0.9, 2.43
	return audit.Report{Now: s.now, Since: s.now.Add(-time.Duration(q.SinceDays) * 24 * time.Hour),
		Findings: []audit.Finding{
			{Check: "idle-allocated", Mistakes: []int{4}, Severity: audit.High, Subject: audit.Subject{Kind: "job", Name: "j-b1", Title: "secret-b", Team: "team-b"},
				Summary: "held 2 h100-sxm-80gb GPU(s) that idled 95% of the time", Evidence: "1 GPU-h held", Fix: "release what is not used", GPUHours: &idle, CostUSD: &cost},
			{Check: "repeated-xid", Mistakes: []int{11}, Severity: audit.High, Subject: audit.Subject{Kind: "gpu", Name: "n1 gpu 3", Node: "n1"},
				Summary: "2 XIDs on one GPU", Evidence: "XIDs 79, 79", Fix: "drain it"},
			{Check: "stack-drift", Mistakes: []int{10, 16}, Severity: audit.Medium, Subject: audit.Subject{Kind: "model", Name: "h100-sxm-80gb"},
				Summary: "2 driver versions on h100-sxm-80gb nodes", Evidence: "550 on n1; 535 on n2", Fix: "roll out one"},
		},
		Checks: []audit.CheckResult{{ID: "idle-allocated", Title: "allocated GPUs that idle", Mistakes: []int{4}, Status: audit.StatusFindings, Findings: 1},
			{ID: "bench-below-median", Title: "cards below their model's bench median", Mistakes: []int{12}, Status: audit.StatusNotMeasured, NotMeasured: "no benchmark figures recorded"}},
		Blind:  []audit.Blind{{Mistake: 15, Why: "parallel efficiency is not reported"}},
		Counts: map[audit.Severity]int{audit.High: 2, audit.Medium: 1}}, nil
}

// The bench service: two all-reduce runs across nodes (one under the gate,
// one failed), no workload bench.
var _ api.BenchService = (*fakeService)(nil)

func (s *fakeService) OrderBench(_ context.Context, p api.Principal, _ string, _ api.BenchRequest) (api.BenchOrder, error) {
	s.record(p)
	return api.BenchOrder{}, api.ErrForbidden
}

func (s *fakeService) BenchResults(_ context.Context, p api.Principal, _ api.BenchQuery) (api.BenchResultList, error) {
	s.record(p)
	return api.BenchResultList{Results: []bench.Result{}}, nil
}

func (s *fakeService) StartWorkloadBench(_ context.Context, p api.Principal, _ api.WorkloadBenchRequest) (bench.WorkloadReport, error) {
	s.record(p)
	return bench.WorkloadReport{}, gpufleet.ErrUnsupported
}

func (s *fakeService) WorkloadBench(_ context.Context, p api.Principal, id string) (bench.WorkloadReport, error) {
	s.record(p)
	return bench.WorkloadReport{}, fmt.Errorf("%w: workload bench %s", gpufleet.ErrNotFound, id)
}

func (s *fakeService) WorkloadBenches(_ context.Context, p api.Principal) ([]bench.WorkloadReport, error) {
	s.record(p)
	return nil, nil
}

func (s *fakeService) StartAllReduceBench(_ context.Context, p api.Principal, _ api.AllReduceBenchRequest) (bench.GroupReport, error) {
	s.record(p)
	return bench.GroupReport{}, api.ErrForbidden
}

func (s *fakeService) AllReduceBench(ctx context.Context, p api.Principal, id string) (bench.GroupReport, error) {
	runs, _ := s.AllReduceBenches(ctx, p)
	for _, r := range runs {
		if r.ID == id {
			return r, nil
		}
	}
	return bench.GroupReport{}, fmt.Errorf("%w: all-reduce %s", gpufleet.ErrNotFound, id)
}

func (s *fakeService) AllReduceBenches(_ context.Context, p api.Principal) ([]bench.GroupReport, error) {
	s.record(p)
	frac := 0.25
	fig := bench.Figure{Measurement: bench.Measurement{Name: "allreduce-2x4", Test: bench.AllReduce, GPUs: 8, Nodes: 2, Unit: bench.BytesPerS}, Value: 42.6e9}
	return []bench.GroupReport{
		{ID: "ar-2-slow", State: bench.GroupDone, Nodes: []string{"n1", "n2"}, GPUModel: "h100-sxm-80gb", GPUsPerNode: 4, Fabric: bench.FabricNetwork,
			Started: s.now.Add(-time.Minute), Figure: &fig, Fleet: &bench.Comparison{Median: 169e9, Peers: 2, Fraction: &frac, Gate: 0.9, Degraded: true}},
		{ID: "ar-1-gone", State: bench.GroupFailed, Nodes: []string{"n1", "n3"}, GPUModel: "h100-sxm-80gb", GPUsPerNode: 4, Fabric: bench.FabricNetwork,
			Started: s.now.Add(-time.Hour), Detail: "no answer from n3 within 5m0s (their parts): are their agents running?"},
	}, nil
}

package cli

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/rollout"
	"github.com/gpufleet/gpufleet/internal/stack"
)

// fakeService is a transitional test double behind the real API handler:
// it records what the CLI sent and answers with canned objects. The CLI's
// end-to-end tests against the real server live with the server.
type fakeService struct {
	mu          sync.Mutex
	lastSubmit  api.SubmitRequest
	lastJobs    api.JobQuery
	lastCancel  api.JobQuery
	lastUsage   api.UsageQuery
	lastRollup  api.RollupQuery
	lastTeam    api.TeamRequest
	lastClass   gpufleet.Class
	racks       []gpufleet.Rack
	lastRack    api.PutRackRequest
	stacks      []gpufleet.Stack
	lastRollout api.RolloutRequest
	lastToken   api.TokenRequest
	lastJoin    api.JoinTokenRequest
	lastAction  string
	now         time.Time
}

const (
	fakeAdmin  = "admin-secret-0123456789"
	fakeMember = "member-secret-0123456789"
)

var (
	_ api.Service      = (*fakeService)(nil)
	_ api.LogService   = (*fakeService)(nil)
	_ api.WatchService = (*fakeService)(nil)
	_ api.JobCanceller = (*fakeService)(nil)
)

// startFake serves the API over a fakeService and isolates the test from
// the caller's environment and config file.
func startFake(t *testing.T) (*httptest.Server, *fakeService) {
	t.Helper()
	isolateClientEnv(t)
	f := &fakeService{}
	return newFakeServer(t, f), f
}

// newFakeServer serves the API over f.
func newFakeServer(t *testing.T, f *fakeService) *httptest.Server {
	t.Helper()
	f.now = time.Now()
	srv := httptest.NewServer(api.NewHandler(f, nil, f, f, api.HandlerOptions{}))
	t.Cleanup(srv.Close)
	return srv
}

func isolateClientEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"GPUFLEET_SERVER", "GPUFLEET_TOKEN", "GPUFLEET_CONTEXT"} {
		t.Setenv(k, "")
	}
	t.Setenv("GPUFLEET_CONFIG", filepath.Join(t.TempDir(), "absent.yaml"))
}

func (f *fakeService) Authenticate(_ context.Context, bearer string) (api.Principal, error) {
	switch bearer {
	case fakeAdmin:
		return api.Principal{TokenID: "t-admin", Role: gpufleet.RoleAdmin}, nil
	case fakeMember:
		return api.Principal{TokenID: "t-a", Role: gpufleet.RoleMember, Team: "team-a"}, nil
	}
	return api.Principal{}, api.ErrUnauthorized
}

func (f *fakeService) job(id string) gpufleet.Job {
	started := f.now.Add(-5 * time.Minute)
	limit := 14400.0
	exit := 0
	return gpufleet.Job{
		ID: id, Team: "team-a", Name: "train", State: gpufleet.JobRunning, Priority: "training", Labels: map[string]string{"sweep": "lr-7", "run": id},
		Resources:   gpufleet.Resources{GPUs: 16, Nodes: 2, GPUModels: []string{"h100-sxm-80gb"}, GPUMemoryMinBytes: 80 << 30},
		Command:     []string{"torchrun", "train.py"},
		TimeLimitS:  &limit,
		SubmittedAt: f.now.Add(-10 * time.Minute), StartedAt: &started,
		Attempts: []gpufleet.Attempt{{ID: id + "-a1", JobID: id, State: gpufleet.AttemptRunning, Node: "n1",
			GPUs: []string{"GPU-1"}, Nodes: []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"GPU-1"}}, {Name: "n2", GPUs: []string{"GPU-9"}}},
			StartedAt: &started, ExitCode: &exit}},
	}
}

func (f *fakeService) SubmitJob(_ context.Context, p api.Principal, r api.SubmitRequest) (api.SubmitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastSubmit = r
	if r.Resources.GPUs == 99 {
		return api.SubmitResponse{}, &gpufleet.ExplainedError{Err: fmt.Errorf("%w: no node of the fleet can ever run this job as submitted", gpufleet.ErrUnsatisfiable),
			Explanation: fakeExplanation("unplaceable")}
	}
	j := f.job("j-42")
	j.State, j.StartedAt, j.Attempts = gpufleet.JobQueued, nil, nil
	return api.SubmitResponse{Job: j, Warnings: []string{"plan needs 2 GPUs, request has 1"}}, nil
}

func (f *fakeService) Jobs(_ context.Context, _ api.Principal, q api.JobQuery) (api.JobList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastJobs = q
	if q.NextToken == "" {
		return api.JobList{Jobs: []gpufleet.Job{f.job("j-1")}, NextToken: "page2"}, nil
	}
	return api.JobList{Jobs: []gpufleet.Job{f.job("j-2")}}, nil
}

func (f *fakeService) Job(_ context.Context, _ api.Principal, id string) (gpufleet.Job, error) {
	if id != "j-1" {
		return gpufleet.Job{}, fmt.Errorf("%w: job %q", gpufleet.ErrNotFound, id)
	}
	return f.job(id), nil
}

func (f *fakeService) CancelJob(ctx context.Context, p api.Principal, id string) (gpufleet.Job, error) {
	j, err := f.Job(ctx, p, id)
	j.CancelRequested = true
	return j, err
}

// CancelJobs records the query and answers as if j-1 and j-2 matched.
func (f *fakeService) CancelJobs(_ context.Context, _ api.Principal, q api.JobQuery) (api.JobList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastCancel = q
	var out []gpufleet.Job
	for _, id := range []string{"j-1", "j-2"} {
		j := f.job(id)
		j.CancelRequested = true
		out = append(out, j)
	}
	return api.JobList{Jobs: out}, nil
}

func (f *fakeService) Queue(context.Context, api.Principal) ([]gpufleet.QueueEntry, error) {
	eta := f.now.Add(12*time.Minute + 30*time.Second)
	return []gpufleet.QueueEntry{
		{ID: "j-7", Team: "team-a", Priority: "training", Position: 1, TeamPosition: 1, Reason: "waiting for 8 h100-sxm-80gb GPUs (4 free)", ReasonCode: "capacity", EstimatedStart: &eta,
			Explanation: fakeExplanation("capacity"), Estimate: &gpufleet.RunEstimate{Seconds: 3 * 3600, From: gpufleet.EstimateWorkload, Runs: 4}},
		{ID: "j-8", Team: "team-b", Priority: "batch", Position: 2, TeamPosition: 1, Reason: "team-b is over its quota", ReasonCode: "quota"},
	}, nil
}

func (f *fakeService) Nodes(context.Context, api.Principal) ([]gpufleet.Node, error) {
	age := 2.0
	gpus := []gpufleet.NodeGPU{{Index: 0, UUID: "GPU-1", Model: "h100-sxm-80gb", MemoryBytes: 80 << 30, State: gpufleet.NodeReady, Health: gpufleet.Healthy}}
	return []gpufleet.Node{
		{Name: "n1", State: gpufleet.NodeReady, Health: gpufleet.Healthy, HeartbeatAgeS: &age, GPUs: append(gpus, gpus[0]), Labels: map[string]string{"rack": "r1"}},
		{Name: "n2", State: gpufleet.NodeDown, Health: gpufleet.Degraded, Reason: "no heartbeat"},
	}, nil
}

func (f *fakeService) Node(ctx context.Context, p api.Principal, name string) (gpufleet.Node, error) {
	nodes, _ := f.Nodes(ctx, p)
	for _, n := range nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return gpufleet.Node{}, fmt.Errorf("%w: node %q", gpufleet.ErrNotFound, name)
}

func (f *fakeService) NodeAction(ctx context.Context, p api.Principal, name string, a api.NodeAction) (gpufleet.Node, error) {
	f.mu.Lock()
	f.lastAction = string(a) + " " + name
	f.mu.Unlock()
	n, err := f.Node(ctx, p, name)
	n.State = map[api.NodeAction]gpufleet.NodeState{api.Cordon: gpufleet.NodeCordoned, api.Uncordon: gpufleet.NodeReady, api.Drain: gpufleet.NodeDraining}[a]
	return n, err
}

func (f *fakeService) NodeActionBecause(ctx context.Context, p api.Principal, name string, a api.NodeAction, reason string) (gpufleet.Node, error) {
	n, err := f.NodeAction(ctx, p, name, a)
	f.mu.Lock()
	f.lastAction += " because " + reason
	f.mu.Unlock()
	return n, err
}

func (f *fakeService) Teams(context.Context, api.Principal) ([]gpufleet.Team, error) {
	return []gpufleet.Team{{Name: "team-a", Quota: map[string]int{"h100": 8}, BorrowingLimit: -1, Weight: 1, Used: map[string]int{"h100": 4}}}, nil
}

func (f *fakeService) PutTeam(_ context.Context, _ api.Principal, r api.TeamRequest) (gpufleet.Team, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastTeam = r
	return gpufleet.Team{Name: r.Name, Quota: r.Quota, Weight: 1}, nil
}

func (f *fakeService) Classes(context.Context, api.Principal) ([]gpufleet.Class, error) {
	return []gpufleet.Class{{Name: "hopper", Models: []string{"h100-sxm-80gb", "h200-sxm-141gb"}}}, nil
}

func (f *fakeService) Racks(context.Context, api.Principal) ([]gpufleet.Rack, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.racks, nil
}

func (f *fakeService) PutRack(_ context.Context, _ api.Principal, r api.PutRackRequest) (gpufleet.Rack, error) {
	if err := r.Validate(); err != nil {
		return gpufleet.Rack{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.racks = append(f.racks, r.Rack)
	f.lastRack = r
	return r.Rack, nil
}

func (f *fakeService) DeleteRack(context.Context, api.Principal, string) error { return nil }

func (f *fakeService) PutClass(_ context.Context, _ api.Principal, c gpufleet.Class) (gpufleet.Class, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastClass = c
	return c, nil
}

func (f *fakeService) Tokens(context.Context, api.Principal) ([]gpufleet.Token, error) {
	return []gpufleet.Token{{ID: "t-a", Team: "team-a", Role: gpufleet.RoleMember, CreatedAt: f.now.Add(-time.Hour)}}, nil
}

func (f *fakeService) CreateToken(_ context.Context, _ api.Principal, r api.TokenRequest) (gpufleet.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastToken = r
	return gpufleet.Token{ID: "t-new", Token: "s3cret", Team: r.Team, Role: r.Role, CreatedAt: f.now}, nil
}

func (f *fakeService) RevokeToken(_ context.Context, _ api.Principal, id string) error {
	if id != "t-a" {
		return fmt.Errorf("%w: token %q", gpufleet.ErrNotFound, id)
	}
	return nil
}

func (f *fakeService) CreateJoinToken(_ context.Context, _ api.Principal, r api.JoinTokenRequest) (api.JoinTokenResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastJoin = r
	return api.JoinTokenResponse{ID: "jt-1", Token: "join-s3cret", Node: r.Node, SingleUse: r.TTL == 0}, nil
}

func (f *fakeService) Rollups(_ context.Context, _ api.Principal, q api.RollupQuery) ([]api.GPURollup, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastRollup = q
	u, w := 0.42, 312.0
	return []api.GPURollup{{Node: "n1", GPU: "GPU-1", Model: "h100-sxm-80gb", Minute: time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC),
		Team: "team-a", Samples: 12, Utilization: &u, EffectiveUtilization: &u, PowerWatts: &w, EnergyJoules: 18720}}, nil
}

func (f *fakeService) Usage(_ context.Context, _ api.Principal, q api.UsageQuery) (api.UsageReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastUsage = q
	rep := api.UsageReport{From: q.From, To: q.To, Teams: []api.TeamUsage{{Team: "team-a", GPUHours: 100, EffectiveGPUHours: 62.5, EnergyJoules: 3.6e9}},
		PUE: 1.58, GridIntensity: 480, By: q.By, Period: q.Period}
	day := time.Date(2025, 1, 6, 0, 0, 0, 0, time.UTC)
	for i, key := range []string{"h100-sxm-80gb", "l4"} {
		r := api.EnergyRow{GPUHours: 100, GPUEnergyKWh: 50 / float64(i+1), AvgGPUWatts: 500 / float64(i+1)}
		r.FacilityEnergyKWh, r.CO2eKg = 1.58*r.GPUEnergyKWh, 1.58*r.GPUEnergyKWh*0.48
		switch q.By {
		case api.EnergyByModel:
			r.Model = key
		case api.EnergyByJob:
			r.Team, r.Job = "team-a", fmt.Sprintf("j-%d", i+1)
			if i == 0 { // 50 kWh over 4.5e8 tokens: 0.4 J/token
				w, per := 4.5e8, 50*3.6e6/4.5e8
				r.Work, r.WorkUnit, r.JoulesPerUnit = &w, "tokens", &per
			}
		default:
			r.Team = "team-" + string(rune('a'+i))
		}
		if q.Period == "week" {
			r.PeriodStart = &day
		}
		rep.Energy = append(rep.Energy, r)
	}
	return rep, nil
}

func (f *fakeService) Logs(_ context.Context, _ api.Principal, id string, q api.LogQuery, w io.Writer) error {
	if id != "j-1" {
		return fmt.Errorf("%w: job %q", gpufleet.ErrNotFound, id)
	}
	_, err := fmt.Fprintf(w, "epoch 1 loss 2.31\nfollow=%v previous=%v attempt=%s tail=%d\n", q.Follow, q.Previous, q.Attempt, q.Tail)
	if err == nil && (q.Since != 0 || !q.SinceTime.IsZero()) {
		_, err = fmt.Fprintf(w, "since=%s since_time=%s\n", q.Since, q.SinceTime.Format(time.RFC3339))
	}
	return err
}

func (f *fakeService) Watch(ctx context.Context, _ api.Principal, _ int64) (<-chan gpufleet.Event, error) {
	ch := make(chan gpufleet.Event)
	go func() {
		defer close(ch)
		select {
		case ch <- gpufleet.Event{ID: 1, Kind: "job.started", Object: "j-1"}:
		case <-ctx.Done():
		}
		<-ctx.Done()
	}()
	return ch, nil
}

func (f *fakeService) Plan(_ context.Context, _ api.Principal, q api.PlanQuery) (api.PlanResponse, error) {
	return api.PlanResponse{Scope: "given", Compared: q.GPUModels}, nil
}

func (f *fakeService) Stacks(context.Context, api.Principal) ([]gpufleet.Stack, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stacks, nil
}

func (f *fakeService) CreateStack(_ context.Context, _ api.Principal, req api.CreateStackRequest) (gpufleet.Stack, error) {
	st := req.Stack
	if err := st.Validate(); err != nil {
		return st, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st.State, st.Validated, st.Nodes = gpufleet.StackCandidate, []gpufleet.StackValidation{}, []string{}
	f.stacks = append(f.stacks, st)
	return st, nil
}

func (f *fakeService) ValidateStack(_ context.Context, _ api.Principal, name, gpuModel string, _ time.Duration) (gpufleet.Stack, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.stacks {
		if f.stacks[i].Name == name {
			f.stacks[i].State = gpufleet.StackValidated
			f.stacks[i].Validated = append(f.stacks[i].Validated, gpufleet.StackValidation{GPUModel: gpuModel, Nodes: []string{"n1"}, Evidence: "every node ready and healthy"})
			return f.stacks[i], nil
		}
	}
	return gpufleet.Stack{}, fmt.Errorf("%w: stack %s", gpufleet.ErrNotFound, name)
}

func (f *fakeService) RetireStack(context.Context, api.Principal, string) error { return nil }

func (f *fakeService) StackCheck(context.Context, api.Principal) ([]api.NodeStack, error) {
	return []api.NodeStack{{Node: "n1", GPUModels: []string{"h100-sxm-80gb"}, Versions: gpufleet.StackVersions{"driver": "535.104.05", "cuda_toolkit": "12.4"},
		Stacks: []string{}, Findings: []stack.Finding{{Severity: stack.Risk, Component: "driver", Message: "CUDA toolkit 12.4 runs on driver 535.104.05 only through minor version compatibility", Source: stack.SourceMinorCompat}}}}, nil
}

func (f *fakeService) StartRollout(_ context.Context, _ api.Principal, r api.RolloutRequest) (rollout.Rollout, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastRollout = r
	return rollout.Rollout{ID: "ro-1", Stack: r.Stack, State: rollout.Running, Canary: r.Canary, Waves: r.Waves,
		Nodes: []rollout.Node{{Name: "n1", Wave: 0, Phase: rollout.Draining}, {Name: "n2", Wave: 1, Phase: rollout.Pending}}}, nil
}

func (f *fakeService) Rollouts(context.Context, api.Principal) ([]rollout.Rollout, error) {
	return []rollout.Rollout{{ID: "ro-1", Stack: "prod-550", State: rollout.Halted, Reason: "node n1 failed a gate: validation: unhealthy",
		Nodes: []rollout.Node{{Name: "n1", Wave: 0, Phase: rollout.Failed, Reason: "validation: unhealthy"}, {Name: "n2", Wave: 1, Phase: rollout.Pending}}}}, nil
}

func (f *fakeService) Rollout(ctx context.Context, p api.Principal, id string) (rollout.Rollout, error) {
	all, _ := f.Rollouts(ctx, p)
	for _, r := range all {
		if r.ID == id {
			return r, nil
		}
	}
	return rollout.Rollout{}, fmt.Errorf("%w: rollout %s", gpufleet.ErrNotFound, id)
}

func (f *fakeService) RolloutAction(ctx context.Context, p api.Principal, id, action string) (rollout.Rollout, error) {
	f.mu.Lock()
	f.lastAction = action
	f.mu.Unlock()
	return f.Rollout(ctx, p, id)
}

// fakeExplanation is a reason as data: of 3 nodes the selector left out
// one and capacity two, whose most free is 4 of the 8 GPUs asked.
func fakeExplanation(code string) *gpufleet.Explanation {
	return &gpufleet.Explanation{Code: code, NodesEvaluated: 3, Exhausted: gpufleet.DimGPUs, Need: 8, Most: 4,
		NodesFiltered: []gpufleet.FilterCount{{Code: gpufleet.FilterSelector, Nodes: 1}, {Code: gpufleet.FilterCapacity, Nodes: 2}}}
}

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/model"
	"github.com/gpufleet/gpufleet/planner"
)

// admission is what memory-fit admission decided for a job.
type admission struct {
	resources gpufleet.Resources
	warnings  []string
	plan      *AdmissionPlan
	// joulesPerToken is the planner's energy per token on each GPU model
	// that fits.
	joulesPerToken map[string]float64
}

// AdmissionPlan is the plan a job was admitted with, stored on the job.
type AdmissionPlan struct {
	Model           string   `json:"model"`
	Mode            string   `json:"mode"`
	Precision       string   `json:"precision"`
	GPU             string   `json:"gpu"`
	GPUs            int      `json:"gpus"`
	TP              int      `json:"tp"`
	PP              int      `json:"pp"`
	DP              int      `json:"dp"`
	MemoryPerGPU    int64    `json:"memory_per_gpu_bytes"`
	CapacityPerGPU  int64    `json:"capacity_per_gpu_bytes"`
	PrecisionNative bool     `json:"precision_native"`
	Candidates      []string `json:"candidates"` // GPU models that fit
	Reason          string   `json:"reason"`
}

// modelConfig loads the model a submission names or carries inline.
func modelConfig(m *api.ModelRequest) (*model.Config, error) {
	switch {
	case m.Name != "" && m.Config != nil:
		return nil, fmt.Errorf("%w: model: give name or config, not both", gpufleet.ErrInvalid)
	case m.Name != "":
		return model.Builtin(m.Name)
	case m.Config != nil:
		data, err := json.Marshal(m.Config)
		if err != nil {
			return nil, fmt.Errorf("%w: model.config: %v", gpufleet.ErrInvalid, err)
		}
		cfg, err := model.Parse("inline", data)
		if err != nil {
			return nil, fmt.Errorf("model.config: %w", err)
		}
		return cfg, nil
	}
	return nil, fmt.Errorf("%w: model: expected a built-in name or an inline config", gpufleet.ErrInvalid)
}

// planRequest turns the job's model block into a planner request, its
// refusals naming the block's fields (model.kv_precision).
func planRequest(cfg *model.Config, m *api.ModelRequest) (planner.Request, error) {
	return planner.SpecOf(m).Request(cfg, nil, func(key string) string { return "model." + key })
}

// teamModels lists the GPU models the fleet has and the team may use (its
// quota classes, or every model when it may borrow or has no quota; every
// model for no team), with how many GPUs of each the fleet has on nodes
// whose mechanism meets the request's isolation (need; nil: any node),
// and per model the least overhead among those nodes (absent: bare metal).
func (s *Server) teamModels(ctx context.Context, team string, allow []string, need *gpufleet.Resources) ([]catalog.GPU, map[string]int, map[string]float64, error) {
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	var t gpufleet.Team
	if team != "" {
		if t, err = s.st.Team(ctx, team); err != nil {
			return nil, nil, nil, err
		}
	}
	classes, err := s.st.Classes(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	expand := func(names []string) map[string]bool {
		out := map[string]bool{}
		for _, n := range names {
			out[n] = true
			for _, c := range classes {
				if c.Name == n {
					for _, m := range c.Models {
						out[m] = true
					}
				}
			}
		}
		return out
	}
	var quota []string
	for c := range t.Quota {
		quota = append(quota, c)
	}
	permitted := expand(quota)
	anyModel := len(quota) == 0 || t.BorrowingLimit != 0
	allowed := expand(allow)
	count := map[string]int{}
	var out []catalog.GPU
	overhead := map[string]float64{}
	for _, n := range nodes {
		m := gpufleet.MechanismOf(gpufleet.NodeVirtualization(n.Labels), gpufleet.Sharing{})
		if need != nil {
			m = gpufleet.MechanismOf(gpufleet.NodeVirtualization(n.Labels), need.Sharing)
			if !m.Meets(need.Isolation, need.Overhead) {
				continue
			}
		}
		for _, g := range n.GPUs {
			if (!anyModel && !permitted[g.Model]) || (len(allow) > 0 && !allowed[g.Model]) {
				continue
			}
			cg, err := s.cat.Lookup(g.Model)
			if err != nil {
				continue
			}
			if count[cg.ID] == 0 {
				out = append(out, cg)
				overhead[cg.ID] = m.Overhead
			}
			overhead[cg.ID] = min(overhead[cg.ID], m.Overhead)
			count[cg.ID]++
		}
	}
	slices.SortFunc(out, func(a, b catalog.GPU) int { return strings.Compare(a.ID, b.ID) })
	maps.DeleteFunc(overhead, func(_ string, o float64) bool { return o == 0 })
	return out, count, overhead, nil
}

// admit runs the planner for a job that describes its model. It rejects a
// job that cannot fit anything the team may use, fills in a job that gave
// no GPU count, and warns about (or, strict, rejects) a request smaller
// than its plan.
func (s *Server) admit(ctx context.Context, team string, r api.SubmitRequest) (admission, error) {
	cfg, err := modelConfig(r.Model)
	if err != nil {
		return admission{}, err
	}
	req, err := planRequest(cfg, r.Model)
	if err != nil {
		return admission{}, err
	}
	// Admission promises what the engine will surely give: the low end of
	// its profile's KV cache.
	req.KVLowEnd = true
	need := r.Resources
	if need.Isolation == "" {
		need.Isolation = s.cfg.DefaultIsolation[r.Priority]
		if r.Priority == "" {
			need.Isolation = s.cfg.DefaultIsolation[gpufleet.Batch]
		}
	}
	gpus, avail, overhead, err := s.teamModels(ctx, team, r.Resources.GPUModels, &need)
	if err != nil {
		return admission{}, err
	}
	if len(gpus) == 0 {
		return admission{}, fmt.Errorf("%w: admission: the fleet has no GPU model team %s may use", gpufleet.ErrInvalid, gpufleet.Quote(team))
	}
	req.GPUs, req.Available, req.Overhead = gpus, avail, overhead
	plan, err := planner.Run(req, nil)
	if err != nil {
		return admission{}, fmt.Errorf("admission: %w", err)
	}
	if plan.Recommendation == nil {
		return admission{}, fmt.Errorf("%w: %s", gpufleet.ErrInvalid, s.rejection(cfg, req, plan))
	}
	var pick planner.Candidate
	var fitting []string
	joules := map[string]float64{}
	for _, c := range plan.Candidates {
		if c.GPU == plan.Recommendation.GPU {
			pick = c
		}
		if c.Fits && c.PrecisionFallback == nil || (c.Fits && *c.PrecisionFallback != planner.FallbackUnsupported) {
			fitting = append(fitting, c.GPU)
			if c.JoulesPerToken != nil && *c.JoulesPerToken > 0 {
				joules[c.GPU] = *c.JoulesPerToken
			}
		}
	}
	replica := pick.TP * pick.PP
	if req.Mode == planner.Training {
		replica = pick.GPUs
	}
	a := admission{resources: r.Resources, plan: &AdmissionPlan{
		Model: cfg.Name, Mode: string(plan.Mode), Precision: string(plan.Workload.Precision), GPU: pick.GPU,
		GPUs: replica, TP: pick.TP, PP: pick.PP, DP: pick.DP, MemoryPerGPU: pick.MemoryPerGPU.TotalBytes,
		CapacityPerGPU: pick.MemoryPerGPU.CapacityBytes, PrecisionNative: pick.PrecisionNative, Candidates: fitting,
		Reason: plan.Recommendation.Reason,
	}, joulesPerToken: joules}
	res := &a.resources
	var smaller []string
	if res.GPUs == 0 {
		res.GPUs = replica
	} else if res.GPUs < replica {
		smaller = append(smaller, fmt.Sprintf("resources.gpus %d is below the plan's %d (%s: tp %d x pp %d)", res.GPUs, replica, pick.GPU, pick.TP, pick.PP))
	}
	if res.GPUMemoryMinBytes == 0 {
		res.GPUMemoryMinBytes = gpufleet.Bytes(pick.MemoryPerGPU.TotalBytes)
	} else if int64(res.GPUMemoryMinBytes) < pick.MemoryPerGPU.TotalBytes {
		smaller = append(smaller, fmt.Sprintf("resources.gpu_memory_min_bytes %d is below the %d per GPU the plan needs", res.GPUMemoryMinBytes, pick.MemoryPerGPU.TotalBytes))
	}
	if p, err := gpufleet.ParsePrecision(string(plan.Workload.Precision)); err == nil && res.Precision == "" && pick.PrecisionNative {
		res.Precision = p // int4 weights name no native precision
	}
	if res.Interconnect == "" && pick.TP > 1 && res.GPUs <= 8 {
		if g, err := s.cat.Lookup(pick.GPU); err == nil && g.DomainSize > 1 {
			res.Interconnect = gpufleet.NVLink
		}
	}
	if len(smaller) > 0 {
		msg := "request smaller than its plan: " + strings.Join(smaller, "; ")
		if r.Strict {
			return admission{}, fmt.Errorf("%w: %s (strict)", gpufleet.ErrInvalid, msg)
		}
		a.warnings = append(a.warnings, msg)
	}
	return a, nil
}

// rejection explains why no GPU the team may use holds the model: what it
// needs against what the largest option holds, and what would fit instead.
func (s *Server) rejection(cfg *model.Config, req planner.Request, plan *planner.Plan) string {
	var largest planner.Candidate
	need := int64(0)
	for _, c := range plan.Candidates {
		if c.MemoryPerGPU.CapacityBytes > largest.MemoryPerGPU.CapacityBytes {
			largest = c
		}
	}
	need = largest.MemoryPerGPU.TotalBytes
	var b strings.Builder
	fmt.Fprintf(&b, "admission: %s (%s, %s) does not fit any GPU this team may use: on %s it needs %s per GPU with %d GPUs (tp %d, pp %d), and the card holds %s",
		cfg.Name, plan.Mode, plan.Workload.Precision, largest.GPU, gib(need), largest.GPUs, largest.TP, largest.PP, gib(largest.MemoryPerGPU.CapacityBytes))
	if r := largest.MemoryPerGPU.Reserve; r != nil {
		fmt.Fprintf(&b, " (%s keeps %s of it free)", req.Engine, gib(int64((1-r.Cap)*float64(largest.MemoryPerGPU.CapacityBytes))))
	}
	// What would fit instead: more GPUs, a narrower format, other hardware.
	var alts []string
	{
		r2 := req
		r2.GPUCount, r2.Available = 0, nil
		if p2, err := planner.Run(r2, nil); err == nil && p2.Recommendation != nil {
			alts = append(alts, fmt.Sprintf("%d x %s (the fleet has %d)", p2.Recommendation.GPUs, p2.Recommendation.GPU, req.Available[p2.Recommendation.GPU]))
		}
	}
	for _, f := range []planner.Format{planner.FormatFP8, planner.FormatINT4} {
		if req.Mode == planner.Training || f.BytesPerElement() >= plan.Workload.Precision.BytesPerElement() {
			continue
		}
		r2 := req
		r2.Precision, r2.GPUCount = f, 0
		if p2, err := planner.Run(r2, nil); err == nil && p2.Recommendation != nil {
			alts = append(alts, fmt.Sprintf("%s weights on %d x %s", f, p2.Recommendation.GPUs, p2.Recommendation.GPU))
			break
		}
	}
	r2 := req
	r2.GPUs, r2.GPUCount, r2.Available = nil, 0, nil
	if p2, err := planner.Run(r2, s.cat.All()); err == nil && p2.Recommendation != nil {
		alts = append(alts, fmt.Sprintf("%d x %s (not in this team's fleet)", p2.Recommendation.GPUs, p2.Recommendation.GPU))
	}
	if len(alts) > 0 {
		b.WriteString("; would fit: " + strings.Join(alts, ", or "))
	}
	return b.String()
}

func gib(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// Plan runs the planner for a user: the model as a job describes it, on
// the GPU models named or, without them, those of the fleet the team may
// use (every model of the fleet for an admin who names no team), with the
// fleet's counts as the limit; on the whole catalog when the fleet has
// none. The answer says which.
func (s *Server) Plan(ctx context.Context, p api.Principal, q api.PlanQuery) (api.PlanResponse, error) {
	if err := requireUser(p); err != nil {
		return api.PlanResponse{}, err
	}
	team := q.Team
	if !p.IsAdmin() {
		var err error
		if team, err = teamOf(p, q.Team); err != nil {
			return api.PlanResponse{}, err
		}
	}
	cfg, err := modelConfig(&q.Model)
	if err != nil {
		return api.PlanResponse{}, err
	}
	req, err := planRequest(cfg, &q.Model)
	if err != nil {
		return api.PlanResponse{}, err
	}
	req.GPUCount = q.GPUs
	resp := api.PlanResponse{Scope: "given"}
	if len(q.GPUModels) > 0 {
		for _, id := range q.GPUModels {
			g, err := s.cat.Lookup(id)
			if err != nil {
				return api.PlanResponse{}, fmt.Errorf("gpu: %w", err)
			}
			req.GPUs = append(req.GPUs, g)
		}
	} else {
		gpus, avail, overhead, err := s.teamModels(ctx, team, nil, nil)
		if err != nil {
			return api.PlanResponse{}, err
		}
		req.Overhead = overhead
		resp.Scope = "catalog"
		if len(gpus) > 0 {
			resp.Scope, req.GPUs, req.Available, resp.Available = "fleet", gpus, avail, avail
		}
	}
	if resp.Plan, err = planner.Run(req, s.cat.All()); err != nil {
		return api.PlanResponse{}, err
	}
	for _, c := range resp.Plan.Candidates {
		resp.Compared = append(resp.Compared, c.GPU)
	}
	return resp, nil
}

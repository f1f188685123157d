package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/rollout"
	"github.com/gpufleet/gpufleet/internal/stack"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Stacks lists the named stacks with the nodes that run each now.
func (s *Server) Stacks(ctx context.Context, p api.Principal) ([]gpufleet.Stack, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	stacks, err := s.st.Stacks(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	models := s.fleetModels(nodes)
	for i := range stacks {
		stacks[i].Nodes = runningStack(stacks[i], nodes)
		stacks[i].Incompatible = lines(s.modelBlockers(stacks[i].Versions, models))
	}
	return stacks, nil
}

// CreateStack records a stack (admin), a candidate until validated. The
// compatibility rules judge it first on every GPU model of the fleet: one
// that works on none is refused unless forced, and the stack returned
// says on which models it cannot work.
func (s *Server) CreateStack(ctx context.Context, p api.Principal, req api.CreateStackRequest) (gpufleet.Stack, error) {
	if err := requireAdmin(p); err != nil {
		return gpufleet.Stack{}, err
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return gpufleet.Stack{}, err
	}
	models := s.fleetModels(nodes)
	blockers := s.modelBlockers(req.Versions, models)
	if len(models) > 0 && len(blockedModels(blockers)) == len(models) && !req.Force {
		return gpufleet.Stack{}, fmt.Errorf("%w: stack %s works on none of the fleet's GPU models, by the compatibility rules (force records it anyway): %s",
			gpufleet.ErrUnsatisfiable, req.Name, strings.Join(lines(blockers), "; "))
	}
	out, err := s.st.CreateStack(ctx, gpufleet.Stack{Name: req.Name, Versions: req.Versions, Notes: req.Notes}, actor(p))
	if err != nil {
		return out, err
	}
	s.forgetFleetCheck()
	s.nudge()
	out.Nodes = runningStack(out, nodes)
	out.Incompatible = lines(blockers)
	return out, nil
}

// fleetModels are the GPU models of the nodes, sorted.
func (s *Server) fleetModels(nodes []gpufleet.Node) []string {
	var out []string
	for _, n := range nodes {
		for _, g := range n.GPUs {
			if !slices.Contains(out, g.Model) {
				out = append(out, g.Model)
			}
		}
	}
	slices.Sort(out)
	return out
}

// modelBlockers judges a stack's versions alone on each GPU model (by its
// compute capability in the catalog): the pre-flight check of stacks
// create and validate.
func (s *Server) modelBlockers(versions map[string]string, models []string) []rollout.Blocker {
	var ts []rollout.Target
	for _, m := range models {
		if g, err := s.cat.Lookup(m); err == nil && !g.ComputeCapability.IsZero() {
			ts = append(ts, rollout.Target{Name: m, Models: []string{g.ID}, CCs: []gpufleet.ComputeCapability{g.ComputeCapability}})
		}
	}
	return rollout.Preflight(versions, ts)
}

// blockedModels are the models any blocker holds for.
func blockedModels(bs []rollout.Blocker) []string {
	var out []string
	for _, b := range bs {
		for _, m := range b.Models {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

// lines are blockers judged per GPU model, in words: "MESSAGE on MODELS".
func lines(bs []rollout.Blocker) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Message+" on "+strings.Join(b.Models, ", "))
	}
	return out
}

// ValidateStack validates a stack for a GPU model (admin) by evidence: the
// nodes of that model that run the stack's versions now, are ready and
// healthy, have run those versions and stayed healthy for the bake time
// (since their last version change, health change or first
// registration), and whose stack the rules find nothing incompatible in.
// Without such a node, or with any node of the model on the stack that
// fails, it refuses and says which and why. The record keeps the nodes,
// what was checked, when and who approved.
func (s *Server) ValidateStack(ctx context.Context, p api.Principal, name, gpuModel string, bake time.Duration) (gpufleet.Stack, error) {
	if err := requireAdmin(p); err != nil {
		return gpufleet.Stack{}, err
	}
	g, err := s.cat.Lookup(gpuModel)
	if err != nil {
		return gpufleet.Stack{}, fmt.Errorf("gpu_model: %w", err)
	}
	st, err := s.stackNamed(ctx, name)
	if err != nil {
		return st, err
	}
	if bs := s.modelBlockers(st.Versions, []string{g.ID}); len(bs) > 0 {
		return st, fmt.Errorf("%w: stack %s cannot work on %s, by the compatibility rules: %s", gpufleet.ErrUnsatisfiable, name, g.ID, strings.Join(lines(bs), "; "))
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return st, err
	}
	now := s.now()
	var passed, failed []string
	risks := 0
	for _, n := range nodes {
		if !slices.ContainsFunc(n.GPUs, func(x gpufleet.NodeGPU) bool { return x.Model == g.ID }) || !runs(st, n) {
			continue
		}
		v := s.view(n, now)
		if v.State != gpufleet.NodeReady || v.Health != gpufleet.Healthy {
			failed = append(failed, fmt.Sprintf("%s is %s and %s (%s)", n.Name, v.State, v.Health, orNone(v.Reason)))
			continue
		}
		bad := ""
		for _, f := range stack.Check(gpufleet.NodeStack(n.Versions), s.capabilities(n)) {
			if f.Severity == stack.Incompatible && bad == "" {
				bad = f.Message
			}
			if f.Severity == stack.Risk {
				risks++
			}
		}
		if bad != "" {
			failed = append(failed, fmt.Sprintf("%s: %s", n.Name, bad))
			continue
		}
		since, err := s.settledSince(ctx, n.Name)
		if err != nil {
			return st, err
		}
		if ran := now.Sub(since); ran < bake {
			failed = append(failed, fmt.Sprintf("%s has run it healthy for %s of the %s bake", n.Name, ran.Round(time.Second), bake))
			continue
		}
		passed = append(passed, n.Name)
	}
	switch {
	case len(failed) > 0:
		return st, fmt.Errorf("%w: stack %s does not validate on %s: %s", gpufleet.ErrInvalid, name, g.ID, strings.Join(failed, "; "))
	case len(passed) == 0:
		return st, fmt.Errorf("%w: stack %s: no node of %s runs it: update one (a canary) and validate again", gpufleet.ErrInvalid, name, g.ID)
	}
	evidence := fmt.Sprintf("every %s node on the stack (%d) ready, and healthy on it for at least %s; the compatibility rules find nothing incompatible (%d risks noted)",
		g.ID, len(passed), bake, risks)
	out, err := s.st.ValidateStack(ctx, name, gpufleet.StackValidation{GPUModel: g.ID, Nodes: passed, Evidence: evidence, At: now, ApprovedBy: actor(p)})
	if err != nil {
		return out, err
	}
	out.Nodes = runningStack(out, nodes)
	return out, nil
}

// RetireStack retires a stack (admin): jobs that require it stop matching.
func (s *Server) RetireStack(ctx context.Context, p api.Principal, name string) error {
	if err := requireAdmin(p); err != nil {
		return err
	}
	if err := s.st.RetireStack(ctx, name, actor(p)); err != nil {
		return err
	}
	s.forgetFleetCheck()
	s.nudge()
	return nil
}

// StackCheck judges every node's stack by the rules: its versions, the
// named stacks it runs, and what the rules find.
func (s *Server) StackCheck(ctx context.Context, p api.Principal) ([]api.NodeStack, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	stacks, err := s.st.Stacks(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.NodeStack, 0, len(nodes))
	for _, n := range nodes {
		ns := api.NodeStack{Node: n.Name, Versions: gpufleet.NodeStack(n.Versions), Stacks: []string{}, Findings: []stack.Finding{}}
		for _, g := range n.GPUs {
			if !slices.Contains(ns.GPUModels, g.Model) {
				ns.GPUModels = append(ns.GPUModels, g.Model)
			}
		}
		for _, st := range stacks {
			if st.State != gpufleet.StackRetired && runs(st, n) {
				ns.Stacks = append(ns.Stacks, st.Name)
			}
		}
		if f := stack.Check(ns.Versions, s.capabilities(n)); f != nil {
			ns.Findings = f
		}
		out = append(out, ns)
	}
	return out, nil
}

// stackNamed is one stack from the store, or ErrNotFound.
func (s *Server) stackNamed(ctx context.Context, name string) (gpufleet.Stack, error) {
	stacks, err := s.st.Stacks(ctx)
	if err != nil {
		return gpufleet.Stack{}, err
	}
	i := slices.IndexFunc(stacks, func(x gpufleet.Stack) bool { return x.Name == name })
	if i < 0 {
		return gpufleet.Stack{}, fmt.Errorf("%w: stack %s", gpufleet.ErrNotFound, gpufleet.Quote(name))
	}
	return stacks[i], nil
}

// capabilities are the compute capabilities of a node's GPU models, from
// the catalog.
func (s *Server) capabilities(n gpufleet.Node) []gpufleet.ComputeCapability {
	var out []gpufleet.ComputeCapability
	for _, g := range n.GPUs {
		if cg, err := s.cat.Lookup(g.Model); err == nil && !cg.ComputeCapability.IsZero() && !slices.Contains(out, cg.ComputeCapability) {
			out = append(out, cg.ComputeCapability)
		}
	}
	return out
}

// stackInputs are the stacks jobs may require: every one not retired.
func stackInputs(stacks []gpufleet.Stack) map[string]gpufleet.StackVersions {
	out := map[string]gpufleet.StackVersions{}
	for _, st := range stacks {
		if st.State != gpufleet.StackRetired {
			out[st.Name] = st.StackVersions()
		}
	}
	return out
}

// runs reports whether a node runs a stack's versions.
func runs(st gpufleet.Stack, n gpufleet.Node) bool {
	pin, err := gpufleet.PinStack(st.StackVersions())
	return err == nil && pin.Unmet(gpufleet.NodeStack(n.Versions)) == ""
}

// runningStack lists the nodes that run a stack, by name.
func runningStack(st gpufleet.Stack, nodes []gpufleet.Node) []string {
	out := []string{}
	for _, n := range nodes {
		if runs(st, n) {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

func orNone(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// drift is, per node, why its stack drifted (internal/stack.Drift): the
// nodes' versions, the stacks validated per GPU model, NVLink domains and
// the nodes of running multi-node attempts.
func (s *Server) drift(ctx context.Context, nodes []gpufleet.Node) (map[string][]string, error) {
	stacks, err := s.st.Stacks(ctx)
	if err != nil {
		return nil, err
	}
	jobs, err := s.st.ActiveJobs(ctx)
	if err != nil {
		return nil, err
	}
	var gangs [][]string
	for _, j := range jobs {
		for _, a := range j.Attempts {
			if a.State == gpufleet.AttemptRunning && len(a.Nodes) > 1 {
				var g []string
				for _, an := range a.Nodes {
					g = append(g, an.Name)
				}
				gangs = append(gangs, g)
			}
		}
	}
	in := make([]stack.DriftNode, 0, len(nodes))
	for _, n := range nodes {
		dn := stack.DriftNode{Name: n.Name, Versions: gpufleet.NodeStack(n.Versions), CCs: s.capabilities(n)}
		for _, g := range n.GPUs {
			if !slices.Contains(dn.GPUModels, g.Model) {
				dn.GPUModels = append(dn.GPUModels, g.Model)
			}
			if g.NVLinkDomain != "" && !slices.Contains(dn.Domains, g.NVLinkDomain) {
				dn.Domains = append(dn.Domains, g.NVLinkDomain)
			}
		}
		in = append(in, dn)
	}
	return stack.Drift(in, stacks, gangs), nil
}

// withDrift marks a node whose stack drifted degraded, with the reasons
// in words, unless its health is already worse.
func withDrift(n gpufleet.Node, reasons []string) gpufleet.Node {
	if len(reasons) == 0 || n.Health == gpufleet.Unhealthy {
		return n
	}
	why := "stack drift: " + strings.Join(reasons, "; ")
	if n.Health == gpufleet.Degraded && n.HealthReason != "" {
		why = n.HealthReason + "; " + why
	}
	n.Health, n.HealthReason = gpufleet.Degraded, why
	n.Reason = why
	return n
}

// settledSince is when a node last changed what a bake times: its
// versions, its health, or its first registration (node events).
func (s *Server) settledSince(ctx context.Context, node string) (time.Time, error) {
	var since time.Time
	f := store.EventFilter{Object: node, Limit: 1000}
	for {
		evs, err := s.st.Events(ctx, f)
		if err != nil {
			return since, err
		}
		for _, e := range evs {
			switch {
			case e.Kind == "node.versions", e.Kind == "node.registered" && strings.HasPrefix(e.Detail, "new"),
				e.Kind == "node."+string(gpufleet.Healthy), e.Kind == "node."+string(gpufleet.Degraded), e.Kind == "node."+string(gpufleet.Unhealthy):
				since = e.At
			}
		}
		if len(evs) < f.Limit {
			return since, nil
		}
		f.AfterID = evs[len(evs)-1].ID
	}
}

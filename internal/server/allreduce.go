package server

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
)

// groupBenchTimeout is how long an all-reduce across nodes waits for its
// members' parts before it fails, naming the nodes that did not answer.
const groupBenchTimeout = 5 * time.Minute

// groupBenchKeep is how many finished runs the server keeps to list.
const groupBenchKeep = 64

// groupBench is an all-reduce across nodes the server follows: rank 0
// opens the rendezvous, every member runs its part with the token, and the
// parts combine into one figure stored on every member
// (docs/BENCH.md#across-nodes). It lives in this replica's memory, like
// the node bench orders.
type groupBench struct {
	report bench.GroupReport
	run    bench.GroupRun // Rank 0, no token
	quick  bool
	parts  map[string]bench.Measurement
}

func (g *groupBench) active() bool {
	return g.report.State == bench.GroupRendezvous || g.report.State == bench.GroupRunning
}

// StartAllReduceBench checks the nodes a request names (at least two,
// cordoned or in repair, one GPU model, as many GPUs each, none in MIG
// mode, none in another run) and asks rank 0 to open the rendezvous.
func (s *Server) StartAllReduceBench(ctx context.Context, p api.Principal, r api.AllReduceBenchRequest) (bench.GroupReport, error) {
	if err := requireAdmin(p); err != nil {
		return bench.GroupReport{}, err
	}
	level, err := bench.ParseLevel(string(r.Level))
	if err != nil {
		return bench.GroupReport{}, err
	}
	names, err := s.groupMembers(ctx, r)
	if err != nil {
		return bench.GroupReport{}, err
	}
	all, err := s.st.Nodes(ctx)
	if err != nil {
		return bench.GroupReport{}, err
	}
	byName := map[string]gpufleet.Node{}
	for _, n := range all {
		byName[n.Name] = n
	}
	var notCordoned []string
	model, perNode, domain := "", 0, ""
	for i, name := range names {
		n, ok := byName[name]
		if !ok {
			return bench.GroupReport{}, fmt.Errorf("%w: node %s", gpufleet.ErrNotFound, gpufleet.Quote(name))
		}
		if n.State != gpufleet.NodeCordoned && n.State != gpufleet.NodeRepairing {
			notCordoned = append(notCordoned, fmt.Sprintf("%s is %s", name, n.State))
		}
		if len(n.GPUs) == 0 {
			return bench.GroupReport{}, fmt.Errorf("%w: node %s has no GPUs", gpufleet.ErrInvalid, name)
		}
		if i == 0 {
			model, perNode, domain = n.GPUs[0].Model, len(n.GPUs), n.GPUs[0].NVLinkDomain
		}
		if len(n.GPUs) != perNode {
			return bench.GroupReport{}, fmt.Errorf("%w: node %s has %d GPUs and %s %d: every member runs every GPU, so the nodes must match",
				gpufleet.ErrInvalid, name, len(n.GPUs), names[0], perNode)
		}
		for _, g := range n.GPUs {
			switch {
			case g.Model != model:
				return bench.GroupReport{}, fmt.Errorf("%w: node %s gpu %d is %s and %s's are %s: an all-reduce across nodes is judged against runs of one model",
					gpufleet.ErrInvalid, name, g.Index, g.Model, names[0], model)
			case len(g.MIGInstances) > 0:
				return bench.GroupReport{}, fmt.Errorf("%w: node %s gpu %d is in MIG mode: CUDA sees only its instances", gpufleet.ErrInvalid, name, g.Index)
			}
			if g.NVLinkDomain != domain {
				domain = ""
			}
		}
	}
	if len(notCordoned) > 0 {
		return bench.GroupReport{}, fmt.Errorf("%w: %s: cordon them first (gpufleet cordon NODE) so that no job lands on a GPU mid-benchmark",
			gpufleet.ErrInvalid, strings.Join(notCordoned, ", "))
	}
	fabric := bench.FabricNetwork
	if domain != "" {
		fabric = bench.FabricNVLink
	}
	now := s.now()
	x := &s.agentExt
	x.mu.Lock()
	defer x.mu.Unlock()
	s.sweepGroupsLocked(now)
	for _, g := range x.groups {
		if !g.active() {
			continue
		}
		for _, n := range names {
			if slices.Contains(g.run.Nodes, n) {
				return bench.GroupReport{}, fmt.Errorf("%w: node %s is in all-reduce %s (%s) until it ends", gpufleet.ErrInvalid, n, g.report.ID, g.report.State)
			}
		}
	}
	x.seq++
	id := "ar-" + strconv.FormatInt(x.seq, 10) + "-" + randomString(4)
	g := &groupBench{
		run:   bench.GroupRun{ID: id, Nodes: names, GPUsPerNode: perNode, Fabric: fabric},
		quick: level == bench.LevelQuick,
		parts: map[string]bench.Measurement{},
		report: bench.GroupReport{ID: id, State: bench.GroupRendezvous, Nodes: names, GPUModel: model, GPUsPerNode: perNode,
			Fabric: fabric, Level: level, Started: now, Reported: []string{}},
	}
	if x.groups == nil {
		x.groups = map[string]*groupBench{}
	}
	x.groups[id] = g
	run := g.run
	x.benchQueueLocked(names[0], api.BenchOrder{ID: id + "-rendezvous", Rendezvous: &run, Quick: g.quick, Level: level})
	s.log.Info("all-reduce across nodes started", "id", id, "nodes", len(names), "gpus_per_node", perNode, "fabric", fabric)
	return g.report, nil
}

// groupMembers resolves a request to node names in rank order: the list
// as given, or a rack's or an NVLink domain's nodes by name.
func (s *Server) groupMembers(ctx context.Context, r api.AllReduceBenchRequest) ([]string, error) {
	given := 0
	for _, set := range []bool{len(r.Nodes) > 0, r.Rack != "", r.NVLinkDomain != ""} {
		if set {
			given++
		}
	}
	if given != 1 {
		return nil, fmt.Errorf("%w: give one of nodes, rack or nvlink_domain", gpufleet.ErrInvalid)
	}
	for _, f := range []struct{ name, v string }{{"rack", r.Rack}, {"nvlink_domain", r.NVLinkDomain}} {
		if err := gpufleet.CheckText(f.name, f.v, 253, false); err != nil {
			return nil, err
		}
	}
	var names []string
	switch {
	case len(r.Nodes) > 0:
		if len(r.Nodes) > bench.MaxGroupNodes {
			return nil, fmt.Errorf("%w: nodes: %d, at most %d", gpufleet.ErrInvalid, len(r.Nodes), bench.MaxGroupNodes)
		}
		for i, n := range r.Nodes {
			if err := gpufleet.CheckText(fmt.Sprintf("nodes[%d]", i), n, 253, false); err != nil {
				return nil, err
			}
			if n == "" || slices.Contains(names, n) {
				return nil, fmt.Errorf("%w: nodes[%d]: %s: empty or listed twice", gpufleet.ErrInvalid, i, gpufleet.Quote(n))
			}
			names = append(names, n)
		}
	case r.Rack != "":
		racks, err := s.st.Racks(ctx)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(racks, func(k gpufleet.Rack) bool { return k.Name == r.Rack })
		if i < 0 {
			return nil, fmt.Errorf("%w: rack %s", gpufleet.ErrNotFound, gpufleet.Quote(r.Rack))
		}
		names = slices.Sorted(slices.Values(racks[i].Nodes))
	default:
		nodes, err := s.st.Nodes(ctx)
		if err != nil {
			return nil, err
		}
		for _, n := range nodes {
			if len(n.GPUs) > 0 && n.GPUs[0].NVLinkDomain == r.NVLinkDomain {
				names = append(names, n.Name)
			}
		}
		slices.Sort(names)
	}
	if len(names) < 2 || len(names) > bench.MaxGroupNodes {
		return nil, fmt.Errorf("%w: %d nodes: an all-reduce across nodes needs 2 to %d", gpufleet.ErrInvalid, len(names), bench.MaxGroupNodes)
	}
	return names, nil
}

// benchQueueLocked queues order o for node's agent; x.mu must be held.
func (x *agentExtras) benchQueueLocked(node string, o api.BenchOrder) {
	if x.benches == nil {
		x.benches = map[string][]api.BenchOrder{}
	}
	x.benches[node] = append(x.benches[node], o)
}

// groupOf is the all-reduce an order belongs to ("" for a node's own
// bench).
func groupOf(o api.BenchOrder) string {
	switch {
	case o.Rendezvous != nil:
		return o.Rendezvous.ID
	case o.Group != nil:
		return o.Group.ID
	}
	return ""
}

// takeGroupReport records node's report of order o of an all-reduce
// across nodes: the rendezvous token (then every member gets its order),
// or a member's part (the last one combines them and stores the figure).
func (s *Server) takeGroupReport(ctx context.Context, node string, o api.BenchOrder, rep api.BenchReport, now time.Time) error {
	gid := groupOf(o)
	x := &s.agentExt
	x.mu.Lock()
	g := x.groups[gid]
	if g == nil || !g.active() {
		x.mu.Unlock()
		return nil
	}
	if o.Rendezvous != nil {
		if len(rep.Token) == 0 {
			s.failGroupLocked(g, now, fmt.Sprintf("%s could not open the rendezvous: %s", node, orWords(rep.Detail, "no token")))
			x.mu.Unlock()
			return nil
		}
		for i, n := range g.run.Nodes {
			run := g.run
			run.Rank, run.Token = i, rep.Token
			x.benchQueueLocked(n, api.BenchOrder{ID: fmt.Sprintf("%s-%d", gid, i), Group: &run, Quick: g.quick, Level: g.report.Level})
		}
		g.report.State = bench.GroupRunning
		x.mu.Unlock()
		return nil
	}
	x.mu.Unlock()
	// The part must be one measurement of this run on a GPU the node holds.
	n, err := s.st.Node(ctx, node)
	if err != nil {
		return err
	}
	var part *bench.Measurement
	if len(rep.Measurements) == 1 {
		m := rep.Measurements[0]
		j := slices.IndexFunc(n.GPUs, func(gg gpufleet.NodeGPU) bool { return gg.UUID == m.UUID && gg.Index == m.GPU })
		if j >= 0 && m.Group == gid && m.Test == bench.AllReduce {
			m.Model = n.GPUs[j].Model
			part = &m
		}
	}
	x.mu.Lock()
	if !g.active() {
		x.mu.Unlock()
		return nil
	}
	if part == nil {
		s.failGroupLocked(g, now, fmt.Sprintf("%s could not run its part: %s", node, orWords(rep.Detail, "no measurement of this run")))
		x.mu.Unlock()
		return nil
	}
	g.parts[node] = *part
	if !slices.Contains(g.report.Reported, node) {
		g.report.Reported = append(g.report.Reported, node)
	}
	if len(g.parts) < len(g.run.Nodes) {
		x.mu.Unlock()
		return nil
	}
	parts := make([]bench.Measurement, len(g.run.Nodes))
	for i, m := range g.run.Nodes {
		parts[i] = g.parts[m]
	}
	run := g.run
	x.mu.Unlock()

	ms, err := bench.CombineGroup(run, parts)
	if err != nil {
		x.mu.Lock()
		s.failGroupLocked(g, now, err.Error())
		x.mu.Unlock()
		return nil
	}
	var results []bench.Result
	for i, m := range ms {
		for _, f := range bench.Summarize(s.cat, []bench.Measurement{m}) {
			results = append(results, bench.Result{Figure: f, Node: run.Nodes[i], At: now, Trigger: bench.TriggerManual, Order: gid})
		}
	}
	if err := s.st.AddBenchResults(ctx, results); err != nil {
		return err
	}
	var figs []bench.Figure
	for _, r := range results {
		figs = append(figs, r.Figure)
	}
	s.benchCache.forget(figs)
	for _, member := range run.Nodes {
		short, err := s.refreshBench(ctx, member)
		if err != nil {
			return err
		}
		detail := fmt.Sprintf("all-reduce across %d nodes (%s): %s", len(run.Nodes), gid, bench.Human(figs[0].Value, figs[0].Unit))
		for _, sf := range short {
			if sf.Figure.Group == gid {
				detail += "; under the gate: " + sf.Evidence
			}
		}
		if err := s.st.AppendEvent(ctx, gpufleet.Event{At: now, Actor: "agent:" + member, Kind: "node.bench", Object: member, Detail: detail}); err != nil {
			return err
		}
	}
	x.mu.Lock()
	g.report.State = bench.GroupDone
	g.report.Ended = &now
	if len(figs) > 0 {
		g.report.Figure = &figs[0]
	}
	x.mu.Unlock()
	s.log.Info("all-reduce across nodes done", "id", gid, "busbw", figs[0].Value)
	return nil
}

func orWords(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// failGroupLocked ends run g with why and drops its orders still
// pending; x.mu must be held.
func (s *Server) failGroupLocked(g *groupBench, now time.Time, why string) {
	x := &s.agentExt
	g.report.State, g.report.Detail, g.report.Ended = bench.GroupFailed, why, &now
	for node, os := range x.benches {
		x.benches[node] = slices.DeleteFunc(os, func(o api.BenchOrder) bool { return groupOf(o) == g.run.ID })
		if len(x.benches[node]) == 0 {
			delete(x.benches, node)
		}
	}
	s.log.Warn("all-reduce across nodes failed", "id", g.run.ID, "why", why)
}

// sweepGroupsLocked fails the runs whose members did not answer in
// groupBenchTimeout and forgets the oldest finished runs; x.mu must be
// held.
func (s *Server) sweepGroupsLocked(now time.Time) {
	x := &s.agentExt
	var ended []*groupBench
	for _, g := range x.groups {
		if g.active() && now.Sub(g.report.Started) > groupBenchTimeout {
			var missing []string
			for _, n := range g.run.Nodes {
				if _, ok := g.parts[n]; !ok {
					missing = append(missing, n)
				}
			}
			what := "their parts"
			if g.report.State == bench.GroupRendezvous {
				missing, what = g.run.Nodes[:1], "the rendezvous"
			}
			s.failGroupLocked(g, now, fmt.Sprintf("no answer from %s within %s (%s): are their agents running?", strings.Join(missing, ", "), groupBenchTimeout, what))
		}
		if !g.active() {
			ended = append(ended, g)
		}
	}
	if len(ended) > groupBenchKeep {
		slices.SortFunc(ended, func(a, b *groupBench) int { return a.report.Started.Compare(b.report.Started) })
		for _, g := range ended[:len(ended)-groupBenchKeep] {
			delete(x.groups, g.run.ID)
		}
	}
}

// AllReduceBench is one run with its figure judged against the other
// runs of its shape.
func (s *Server) AllReduceBench(ctx context.Context, p api.Principal, id string) (bench.GroupReport, error) {
	if err := requireUser(p); err != nil {
		return bench.GroupReport{}, err
	}
	x := &s.agentExt
	x.mu.Lock()
	s.sweepGroupsLocked(s.now())
	g := x.groups[id]
	var rep bench.GroupReport
	if g != nil {
		rep = g.report
		rep.Reported = slices.Clone(rep.Reported)
	}
	x.mu.Unlock()
	if g == nil {
		return bench.GroupReport{}, fmt.Errorf("%w: all-reduce %s (this server follows the runs it started)", gpufleet.ErrNotFound, gpufleet.Quote(id))
	}
	if rep.Figure != nil {
		fleet, err := s.fleetBench(ctx, []bench.Figure{*rep.Figure})
		if err != nil {
			return bench.GroupReport{}, err
		}
		c := bench.Compare(*rep.Figure, fleet, s.cfg.BenchGates)
		rep.Fleet = &c
	}
	return rep, nil
}

// AllReduceBenches lists the runs this server follows, newest first.
func (s *Server) AllReduceBenches(ctx context.Context, p api.Principal) ([]bench.GroupReport, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	x := &s.agentExt
	x.mu.Lock()
	s.sweepGroupsLocked(s.now())
	var ids []string
	for id := range x.groups {
		ids = append(ids, id)
	}
	x.mu.Unlock()
	var out []bench.GroupReport
	for _, id := range ids {
		r, err := s.AllReduceBench(ctx, p, id)
		if err != nil {
			continue // forgotten meanwhile
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b bench.GroupReport) int { return b.Started.Compare(a.Started) })
	return out, nil
}

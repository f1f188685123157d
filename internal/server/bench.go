package server

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/health"
	"github.com/gpufleet/gpufleet/internal/store"
)

var _ api.BenchService = (*Server)(nil)

// OrderBench queues microbenchmarks for a node's agent (admin). The node
// must be cordoned or in repair: a job placed on a GPU mid-benchmark
// would slow both down.
func (s *Server) OrderBench(ctx context.Context, p api.Principal, node string, r api.BenchRequest) (api.BenchOrder, error) {
	if err := requireAdmin(p); err != nil {
		return api.BenchOrder{}, err
	}
	n, err := s.st.Node(ctx, node)
	if err != nil {
		return api.BenchOrder{}, err
	}
	if n.State != gpufleet.NodeCordoned && n.State != gpufleet.NodeRepairing {
		return api.BenchOrder{}, fmt.Errorf("%w: node %s is %s: cordon it first (gpufleet cordon %s) so that no job lands on a GPU mid-benchmark",
			gpufleet.ErrInvalid, node, n.State, node)
	}
	o := api.BenchOrder{Quick: !r.Full}
	if r.Level != "" {
		l, err := bench.ParseLevel(string(r.Level))
		if err != nil {
			return api.BenchOrder{}, err
		}
		o.Level, o.Quick = l, l == bench.LevelQuick
	}
	for i, t := range r.Tests {
		if !slices.Contains(bench.Tests(), t) {
			return api.BenchOrder{}, fmt.Errorf("%w: tests[%d]: %s: expected copy, gemm, h2d, p2p, allreduce, memory or stress", gpufleet.ErrInvalid, i, gpufleet.Quote(string(t)))
		}
		if !slices.Contains(o.Tests, t) {
			o.Tests = append(o.Tests, t)
		}
	}
	for i, idx := range r.GPUs {
		j := slices.IndexFunc(n.GPUs, func(g gpufleet.NodeGPU) bool { return g.Index == idx })
		if j < 0 {
			return api.BenchOrder{}, fmt.Errorf("%w: gpus[%d]: node %s has no gpu %d", gpufleet.ErrInvalid, i, node, idx)
		}
		if !slices.Contains(o.GPUs, n.GPUs[j].UUID) {
			o.GPUs = append(o.GPUs, n.GPUs[j].UUID)
		}
	}
	o = s.queueBench(node, o)
	s.log.Info("bench queued", "node", node, "id", o.ID, "gpus", len(o.GPUs), "quick", o.Quick, "level", o.Level)
	return o, nil
}

// queueBench gives order o an id and queues it for node's agent.
func (s *Server) queueBench(node string, o api.BenchOrder) api.BenchOrder {
	x := &s.agentExt
	x.mu.Lock()
	defer x.mu.Unlock()
	x.seq++
	o.ID = "b-" + strconv.FormatInt(x.seq, 10) + "-" + randomString(4)
	x.benchQueueLocked(node, o)
	return o
}

// benchOrders are the bench orders pending for node.
func (s *Server) benchOrders(node string) []api.BenchOrder {
	x := &s.agentExt
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.benches[node])
}

// takeBenchReports records the reports of node's pending bench orders
// and drops those orders; reports of orders no longer pending (resent
// before the agent heard) are ignored.
func (s *Server) takeBenchReports(ctx context.Context, node string, reports []api.BenchReport, now time.Time) error {
	for _, rep := range reports {
		x := &s.agentExt
		x.mu.Lock()
		i := slices.IndexFunc(x.benches[node], func(o api.BenchOrder) bool { return o.ID == rep.ID })
		var o api.BenchOrder
		if i >= 0 {
			o = x.benches[node][i]
			x.benches[node] = slices.Delete(x.benches[node], i, i+1)
			if len(x.benches[node]) == 0 {
				delete(x.benches, node)
			}
		}
		x.mu.Unlock()
		if i < 0 {
			continue
		}
		if groupOf(o) != "" {
			if err := s.takeGroupReport(ctx, node, o, rep, now); err != nil {
				return err
			}
			continue
		}
		trigger := bench.TriggerManual
		if s.rebench.measured(node, rep.ID, now) {
			trigger = bench.TriggerScheduled
		}
		if _, err := s.recordBench(ctx, node, trigger, rep, now); err != nil {
			return err
		}
	}
	return nil
}

// recordBench turns a node's report into figures against the catalog,
// stores them, judges the node's newest figures against the fleet (its
// bench-degraded conditions follow) and returns the shortfalls among the
// figures just measured. Measurements of GPUs the node does not hold are
// dropped: one agent cannot move another model's fleet median.
func (s *Server) recordBench(ctx context.Context, node string, trigger bench.Trigger, rep api.BenchReport, now time.Time) ([]bench.Shortfall, error) {
	n, err := s.st.Node(ctx, node)
	if err != nil {
		return nil, err
	}
	var ms []bench.Measurement
	dropped := 0
	for _, m := range rep.Measurements {
		j := slices.IndexFunc(n.GPUs, func(g gpufleet.NodeGPU) bool { return g.UUID == m.UUID && g.Index == m.GPU })
		if j < 0 {
			dropped++
			continue
		}
		m.Model = n.GPUs[j].Model // the inventory's model, not the report's
		ms = append(ms, m)
	}
	if dropped > 0 {
		s.log.Warn("bench measurements of gpus the node does not hold dropped", "node", node, "dropped", dropped)
	}
	figs := bench.Summarize(s.cat, ms)
	results := make([]bench.Result, len(figs))
	for i, f := range figs {
		results[i] = bench.Result{Figure: f, Node: node, At: now, Trigger: trigger, Order: rep.ID}
	}
	if err := s.st.AddBenchResults(ctx, results); err != nil {
		return nil, err
	}
	if len(results) > 0 {
		s.rebench.measured(node, "", now)
	}
	s.benchCache.forget(figs)
	all, err := s.refreshBench(ctx, node)
	if err != nil {
		return nil, err
	}
	// The node's shortfalls among the figures just measured.
	measured := map[string]bool{}
	for _, f := range figs {
		measured[f.UUID+"/"+f.Name] = true
	}
	short := slices.DeleteFunc(all, func(sf bench.Shortfall) bool { return !measured[sf.Figure.UUID+"/"+sf.Figure.Name] })
	detail := fmt.Sprintf("%d figures (%s)", len(figs), trigger)
	if len(short) > 0 {
		var ev []string
		for _, sf := range short {
			ev = append(ev, sf.Evidence)
		}
		detail += "; under the gate: " + strings.Join(ev, "; ")
	}
	if rep.Detail != "" {
		detail += "; " + rep.Detail
	}
	if err := s.st.AppendEvent(ctx, gpufleet.Event{At: now, Actor: "agent:" + node, Kind: "node.bench", Object: node, Detail: detail}); err != nil {
		return nil, err
	}
	return short, nil
}

// benchCache holds each GPU model's newest figures as the store last
// gave them, so that judging a thousand nodes at a leader's start reads
// each model once. Recording figures of a model drops its entry; entries
// also expire after benchCacheTTL, for the replicas that serve reads
// while another records.
type benchCache struct {
	mu      sync.Mutex
	byModel map[string]cachedFigures
}

type cachedFigures struct {
	at time.Time
	rs []bench.Result
}

// benchCacheTTL is how long a model's figures are read from the cache.
const benchCacheTTL = 30 * time.Second

func (c *benchCache) get(m string, now time.Time) ([]bench.Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byModel[m]
	if !ok || now.Sub(e.at) >= benchCacheTTL || now.Before(e.at) {
		return nil, false
	}
	return e.rs, true
}

func (c *benchCache) put(m string, rs []bench.Result, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byModel == nil {
		c.byModel = map[string]cachedFigures{}
	}
	c.byModel[m] = cachedFigures{at: now, rs: rs}
}

// forget drops the models of figs.
func (c *benchCache) forget(figs []bench.Figure) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range figs {
		delete(c.byModel, f.Model)
	}
}

// fleetBench reads the newest figures of every GPU of the models figs
// are of.
func (s *Server) fleetBench(ctx context.Context, figs []bench.Figure) ([]bench.Result, error) {
	var out []bench.Result
	var models []string
	for _, f := range figs {
		if !slices.Contains(models, f.Model) {
			models = append(models, f.Model)
		}
	}
	for _, m := range models {
		now := s.now()
		rs, ok := s.benchCache.get(m, now)
		if !ok {
			var err error
			if rs, err = s.st.BenchResults(ctx, store.BenchFilter{Model: m, Latest: true}); err != nil {
				return nil, err
			}
			s.benchCache.put(m, rs, now)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// refreshBench judges node's newest figures against the fleet, hands the
// shortfalls to its health rules (which run at the next heartbeat) and
// returns them.
func (s *Server) refreshBench(ctx context.Context, node string) ([]bench.Shortfall, error) {
	mine, err := s.st.BenchResults(ctx, store.BenchFilter{Node: node, Latest: true})
	if err != nil {
		return nil, err
	}
	var figs []bench.Figure
	for _, r := range mine {
		figs = append(figs, r.Figure)
	}
	fleet, err := s.fleetBench(ctx, figs)
	if err != nil {
		return nil, err
	}
	short := bench.Judge(figs, fleet, s.cfg.BenchGates)
	var out []health.BenchShortfall
	for _, sf := range short {
		g := sf.Figure.GPU
		if sf.Figure.Test == bench.AllReduce {
			g = health.NodeGPU
		}
		out = append(out, health.BenchShortfall{GPU: g, UUID: sf.Figure.UUID, Reason: sf.Reason, Evidence: sf.Evidence, Test: string(sf.Figure.Test)})
	}
	s.health.setBench(node, out)
	return short, nil
}

// BenchResults lists figures with their comparison against their model's
// fleet median.
func (s *Server) BenchResults(ctx context.Context, p api.Principal, q api.BenchQuery) (api.BenchResultList, error) {
	if err := requireUser(p); err != nil {
		return api.BenchResultList{}, err
	}
	rs, err := s.st.BenchResults(ctx, store.BenchFilter{Node: q.Node, Model: q.GPUModel, Latest: !q.History, Limit: q.Limit})
	if err != nil {
		return api.BenchResultList{}, err
	}
	var figs []bench.Figure
	for _, r := range rs {
		figs = append(figs, r.Figure)
	}
	fleet, err := s.fleetBench(ctx, figs)
	if err != nil {
		return api.BenchResultList{}, err
	}
	base := bench.NewBaseline(fleet)
	for i := range rs {
		if bench.Judged(rs[i].Figure) {
			c := base.Compare(rs[i].Figure, s.cfg.BenchGates)
			rs[i].Fleet = &c
		}
	}
	bench.SortResults(rs)
	out := api.BenchResultList{Results: rs, Gates: map[string]float64{}}
	if out.Results == nil {
		out.Results = []bench.Result{}
	}
	for _, t := range bench.Tests() {
		out.Gates[string(t)] = s.cfg.BenchGates.For(t)
	}
	return out, nil
}

package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/rollout"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/stack"
	"github.com/gpufleet/gpufleet/internal/store"
)

// metrics are the control plane's own Prometheus metrics, on a registry of
// their own (no global state).
type metrics struct {
	reg       *prometheus.Registry
	queue     *prometheus.GaugeVec
	cycle     prometheus.Histogram
	decisions prometheus.Counter
	submitted prometheus.Counter
	// rack is each rack's power: budget, production reserve, rated and
	// projected draw (the leader's, as the scheduler saw it), by kind.
	rack *prometheus.GaugeVec
	// rackOver is how long each rack's projected draw has been over its
	// budget (the stop policy's clock), for alert rules.
	rackOver *prometheus.GaugeVec
	// requests is the API's request latency by route, method and code;
	// jobs the active jobs by state; allocated the GPUs held by running
	// attempts, by model; ended the attempts that ended, by state and
	// reason code (failures, preemptions, drains, node losses).
	requests  *prometheus.HistogramVec
	jobs      *prometheus.GaugeVec
	allocated *prometheus.GaugeVec
	ended     *prometheus.CounterVec
	// oldestWait is, per priority class, how long the job queued longest
	// has waited; nodes the nodes by state and health.
	oldestWait *prometheus.GaugeVec
	nodes      *prometheus.GaugeVec
	// audit is the last audit's findings by check and severity, auditAt
	// when it ran.
	audit   *prometheus.GaugeVec
	auditAt prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpufleet_queue_depth", Help: "Queued jobs by priority class and team.",
		}, []string{"priority", "team"}),
		cycle: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gpufleet_scheduling_cycle_seconds", Help: "Duration of the leader's scheduling cycles.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		decisions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpufleet_scheduling_decisions_total", Help: "Placements and stops the scheduler decided.",
		}),
		submitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpufleet_jobs_submitted_total", Help: "Jobs accepted.",
		}),
		audit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpufleet_audit_findings",
			Help: "Findings of the last audit (gpufleet audit, docs/AUDIT.md) by check and severity; every check and severity is present, at 0 when it found nothing.",
		}, []string{"check", "severity"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gpufleet_api_request_duration_seconds", Help: "API requests by route pattern, method and status code, and how long they took (streams: until they ended).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"route", "method", "code"}),
		jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpufleet_jobs", Help: "Active jobs by state (queued, scheduled, running) and priority class.",
		}, []string{"state", "priority"}),
		allocated: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpufleet_gpus_allocated", Help: "GPUs held by running attempts (MIG instances and time-slice shares as their share of a GPU), by GPU model.",
		}, []string{"gpu_model"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpufleet_attempts_ended_total", Help: "Attempts that ended, by state (succeeded, failed, stopped, lost) and reason code (preempted_priority, drain, node_lost, ...; \"\" when none).",
		}, []string{"state", "reason_code"}),
		oldestWait: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpufleet_queue_oldest_wait_seconds", Help: "How long the job queued longest has waited, per priority class (0 when none is queued).",
		}, []string{"priority"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpufleet_nodes", Help: "Nodes by state (ready, cordoned, draining, down, repairing, validating) and health.",
		}, []string{"state", "health"}),
		auditAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpufleet_audit_timestamp_seconds", Help: "Unix time of the last audit (0 before the first).",
		}),
		rack: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpufleet_rack_power_watts",
			Help: "Racks' power by kind: budget, production_reserve, rated (GPUs at TDP and host overheads) and projected (measured draw, expected draw of running work, idle and hosts), as the leader's last cycle saw it.",
		}, []string{"rack", "kind"}),
		rackOver: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpufleet_rack_over_budget_seconds",
			Help: "How long each rack with a budget has had its projected draw over it, as the leader's last cycle saw it (0: under); --over-budget stop acts past --over-budget-after.",
		}, []string{"rack"}),
	}
	m.reg.MustRegister(m.queue, m.cycle, m.decisions, m.submitted, m.rack, m.rackOver, m.audit, m.auditAt, m.oldestWait, m.nodes, m.requests, m.jobs, m.allocated, m.ended,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// setQueue replaces the queue-depth series and, per priority class, the
// wait of the job queued longest (0 for a class with nothing queued).
func (m *metrics) setQueue(depth map[[2]string]float64, oldest map[string]float64) {
	m.queue.Reset()
	for k, v := range depth {
		m.queue.WithLabelValues(k[0], k[1]).Set(v)
	}
	for _, p := range gpufleet.Priorities() {
		m.oldestWait.WithLabelValues(string(p)).Set(oldest[string(p)])
	}
}

// setNodes counts the nodes by state and health, every pair present.
func (m *metrics) setNodes(nodes []gpufleet.Node) {
	count := map[[2]string]int{}
	for _, n := range nodes {
		h := n.Health
		if h == "" {
			h = gpufleet.Healthy
		}
		count[[2]string{string(n.State), string(h)}]++
	}
	for _, st := range []gpufleet.NodeState{gpufleet.NodeReady, gpufleet.NodeCordoned, gpufleet.NodeDraining, gpufleet.NodeDown,
		gpufleet.NodeRepairing, gpufleet.NodeValidating} {
		for _, h := range []gpufleet.Health{gpufleet.Healthy, gpufleet.Degraded, gpufleet.Unhealthy} {
			m.nodes.WithLabelValues(string(st), string(h)).Set(float64(count[[2]string{string(st), string(h)}]))
		}
	}
}

// rackPower is one rack's figures for setRacks.
type rackPower struct {
	name                              string
	budget, reserve, rated, projected gpufleet.Watts
}

// setRacks replaces the rack power series.
func (m *metrics) setRacks(racks []rackPower) {
	m.rack.Reset()
	for _, r := range racks {
		for kind, v := range map[string]gpufleet.Watts{"budget": r.budget, "production_reserve": r.reserve, "rated": r.rated, "projected": r.projected} {
			m.rack.WithLabelValues(r.name, kind).Set(float64(v))
		}
	}
}

// setRacksOver replaces the racks' over-budget times.
func (m *metrics) setRacksOver(racks []scheduler.Rack) {
	m.rackOver.Reset()
	for _, r := range racks {
		m.rackOver.WithLabelValues(r.Name).Set(r.OverBudgetFor.Seconds())
	}
}

// MetricsHandler serves the control plane's metrics.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
}

var (
	stackDriftDesc = prometheus.NewDesc("gpufleet_node_stack_drift",
		"1 when the node's stack drifted (incompatible or known-bad versions, no stack validated for its GPU model, or drivers that differ within its NVLink domain or running gang; docs/STACKS.md), else 0.",
		[]string{"node"}, nil)
	stackFindingsDesc = prometheus.NewDesc("gpufleet_node_stack_findings",
		"The compatibility rules' findings on the node's stack, by severity (incompatible, risk).",
		[]string{"node", "severity"}, nil)
	rolloutNodesDesc = prometheus.NewDesc("gpufleet_rollout_nodes",
		"Nodes of each rollout not yet finished (running, paused, halted, rolling back) by phase: pending, draining, updating, baking, complete, failed.",
		[]string{"rollout", "stack", "state", "phase"}, nil)
)

// stackCollector reports each node's stack drift and findings, and the
// unfinished rollouts' progress, at scrape time, from the store (a scrape
// is rarer than a scheduling cycle).
type stackCollector struct{ s *Server }

func (c stackCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- stackDriftDesc
	ch <- stackFindingsDesc
	ch <- rolloutNodesDesc
}

func (c stackCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := c.s.st.Nodes(ctx)
	if err != nil {
		return
	}
	drift, err := c.s.drift(ctx, nodes)
	if err != nil {
		return
	}
	if rs, err := c.s.st.Rollouts(ctx); err == nil {
		for _, r := range rs {
			if r.State == rollout.Done || r.State == rollout.Aborted || r.State == rollout.RolledBack {
				continue
			}
			counts := map[rollout.Phase]float64{rollout.Pending: 0, rollout.Draining: 0, rollout.Updating: 0, rollout.Baking: 0, rollout.Complete: 0, rollout.Failed: 0}
			for _, n := range r.Nodes {
				counts[n.Phase]++
			}
			for ph, k := range counts {
				ch <- prometheus.MustNewConstMetric(rolloutNodesDesc, prometheus.GaugeValue, k, r.ID, r.Stack, string(r.State), string(ph))
			}
		}
	}
	for _, n := range nodes {
		v := 0.0
		if len(drift[n.Name]) > 0 {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(stackDriftDesc, prometheus.GaugeValue, v, n.Name)
		counts := map[stack.Severity]float64{stack.Incompatible: 0, stack.Risk: 0}
		for _, f := range stack.Check(gpufleet.NodeStack(n.Versions), c.s.capabilities(n)) {
			counts[f.Severity]++
		}
		for sev, k := range counts {
			ch <- prometheus.MustNewConstMetric(stackFindingsDesc, prometheus.GaugeValue, k, n.Name, string(sev))
		}
	}
}

var (
	benchBytesDesc = prometheus.NewDesc("gpufleet_gpu_bench_bytes_per_second",
		"Newest benchmark figure of a GPU that moves bytes (copy counts bytes read plus written; h2d, d2h and p2p one direction; allreduce is NCCL bus bandwidth over the node's GPUs, allreduce-NxG across N nodes of G GPUs, gpu=\"all\"); docs/BENCH.md.",
		[]string{"node", "gpu", "model", "figure"}, nil)
	benchOpsDesc = prometheus.NewDesc("gpufleet_gpu_bench_operations_per_second",
		"Newest dense matrix product figure of a GPU, in floating-point operations (int8: integer operations) per second, by precision (figure gemm-bf16, ...).",
		[]string{"node", "gpu", "model", "figure"}, nil)
	benchSpecRatioDesc = prometheus.NewDesc("gpufleet_gpu_bench_spec_ratio",
		"Newest benchmark figure of a GPU over the catalog's spec for it.",
		[]string{"node", "gpu", "model", "figure"}, nil)
	benchFleetRatioDesc = prometheus.NewDesc("gpufleet_gpu_bench_fleet_ratio",
		"Newest benchmark figure of a GPU over the median of the other GPUs of its model (absent with fewer than two of them); under the gate the GPU is degraded.",
		[]string{"node", "gpu", "model", "figure"}, nil)
)

// benchCollector reports every GPU's newest benchmark figures, against
// the spec and the fleet, at scrape time from the store.
type benchCollector struct{ s *Server }

func (c benchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- benchBytesDesc
	ch <- benchOpsDesc
	ch <- benchSpecRatioDesc
	ch <- benchFleetRatioDesc
}

func (c benchCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rs, err := c.s.st.BenchResults(ctx, store.BenchFilter{Latest: true})
	if err != nil {
		return
	}
	base := bench.NewBaseline(rs)
	for _, r := range rs {
		if !bench.Judged(r.Figure) {
			continue
		}
		gpu := strconv.Itoa(r.GPU)
		if r.Test == bench.AllReduce {
			gpu = "all"
		}
		labels := []string{r.Node, gpu, r.Model, r.Name}
		desc := benchBytesDesc
		if r.Unit != bench.BytesPerS {
			desc = benchOpsDesc
		}
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, r.Value, labels...)
		if r.Ratio != nil {
			ch <- prometheus.MustNewConstMetric(benchSpecRatioDesc, prometheus.GaugeValue, *r.Ratio, labels...)
		}
		if c := base.Compare(r.Figure, c.s.cfg.BenchGates); c.Fraction != nil {
			ch <- prometheus.MustNewConstMetric(benchFleetRatioDesc, prometheus.GaugeValue, *c.Fraction, labels...)
		}
	}
}

// setAudit exports an audit's findings by check and severity, every pair
// present (0 when none) so that alerts can use absent() for a stale one.
func (m *metrics) setAudit(r audit.Report) {
	count := map[[2]string]int{}
	for _, f := range r.Findings {
		count[[2]string{f.Check, string(f.Severity)}]++
	}
	for _, c := range audit.Checks() {
		for _, sev := range []audit.Severity{audit.High, audit.Medium, audit.Low} {
			m.audit.WithLabelValues(c.ID, string(sev)).Set(float64(count[[2]string{c.ID, string(sev)}]))
		}
	}
	if !r.Now.IsZero() {
		m.auditAt.Set(float64(r.Now.Unix()))
	}
}

// ObserveRequest records an API request in the latency histogram
// (api.HandlerOptions.ObserveRequest).
func (s *Server) ObserveRequest(route, method string, code int, d time.Duration) {
	s.metrics.requests.WithLabelValues(route, method, strconv.Itoa(code)).Observe(d.Seconds())
}

// gpuShare is what holding a GPU or MIG instance id takes: its model and
// its share of the GPU (1, or a MIG profile's slices of 7).
type gpuShare struct {
	model string
	share float64
}

// setJobs replaces the active-job and allocated-GPU series, every state
// and priority present.
func (m *metrics) setJobs(count map[[2]string]int, held map[string]float64) {
	for _, st := range []gpufleet.JobState{gpufleet.JobQueued, gpufleet.JobScheduled, gpufleet.JobRunning} {
		for _, p := range gpufleet.Priorities() {
			m.jobs.WithLabelValues(string(st), string(p)).Set(float64(count[[2]string{string(st), string(p)}]))
		}
	}
	m.allocated.Reset()
	for model, n := range held {
		if model != "" {
			m.allocated.WithLabelValues(model).Set(n)
		}
	}
}

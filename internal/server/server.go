// Package server is gpufleet's control plane: the service behind the HTTP
// API (jobs, queue, nodes, teams, tokens, usage), the agent protocol
// (register, heartbeat), memory-fit admission through the planner, and
// the leader loop that snapshots the store, runs the pure scheduler and
// persists its decisions fenced by the leadership epoch.
//
// The store is the source of truth. The server can be killed at any
// instant: it rebuilds from the store and from agent reports.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/health"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Config is the server's behaviour. Default gives production values;
// gpufleet dev shortens the timeouts.
type Config struct {
	// ID names this replica in the leadership lease.
	ID string
	// Tick is how often the leader schedules when nothing else wakes it.
	Tick time.Duration
	// LeaseTTL is the leadership lease; the leader renews it every tick and
	// stops scheduling when it cannot renew before LeaseTTL/2.
	LeaseTTL time.Duration
	// Heartbeat is how often agents report.
	Heartbeat time.Duration
	// PowerPeakMargin is how far above its measured peak a GPU a job holds
	// is charged in its rack's projected draw once measured
	// (power.Charging); negative: always its power limit.
	PowerPeakMargin float64
	// PowerCaps sends agents a power cap for each GPU a measured job holds
	// (api.HeartbeatResponse.PowerCaps): its charge, fixed when first
	// measured (power.Charging.Cap). On a node that can set them (label
	// power-caps=true) a capped GPU is charged its cap. Off: no caps, the
	// behaviour before (gpufleet serve --power-caps).
	PowerCaps bool
	// OverBudget and OverBudgetAfter are the stop policy for racks whose
	// projected draw stays over their budget (scheduler.Config.OverBudget;
	// gpufleet serve --over-budget, --over-budget-after).
	OverBudget      scheduler.OverBudgetPolicy
	OverBudgetAfter time.Duration
	// HeartbeatGrace is how long a node may be silent before it is down.
	HeartbeatGrace time.Duration
	// FenceAfter is how long an agent keeps running attempts without the
	// server before it stops them itself.
	FenceAfter time.Duration
	// IdleCycle is the longest the leader goes without a full scheduling
	// cycle when nothing changed (no new audit event, no local nudge);
	// between them a tick only renews the lease.
	IdleCycle time.Duration
	// LostMargin is added to grace and fence before a silent node's
	// attempts are declared lost and requeued (at-most-once).
	LostMargin time.Duration
	// CredentialTTL is the life of a node credential; agents renew it.
	CredentialTTL time.Duration
	// Policy is the scheduling policy (scheduler.PolicyConfig name).
	Policy string
	// DefaultEstimate per priority class when a job gives no estimate and
	// neither similar jobs' runs nor a time limit give one
	// (scheduler.Config.PriorityEstimates).
	DefaultEstimate map[gpufleet.Priority]time.Duration
	// AuditEvery is how often the leader audits the fleet for /metrics
	// (gpufleet_audit_findings); 0 never does.
	AuditEvery time.Duration
	// DefaultIsolation per priority class, for jobs that do not say what
	// isolation they need (resources.isolation).
	DefaultIsolation map[gpufleet.Priority]gpufleet.Isolation
	// LogDir holds attempts' logs as agents ship them; empty disables logs.
	LogDir string
	// WatchInterval is how often event streams poll the audit log.
	WatchInterval time.Duration
	// Health is the health rules' thresholds and the quarantine circuit
	// breaker (health.Config.QuarantineMaxFraction).
	Health health.Config
	// BenchGates are the fractions of a GPU model's fleet median under
	// which a benchmark figure makes a GPU degraded and fails validation
	// (docs/BENCH.md); a test not listed takes bench.DefaultGate.
	BenchGates bench.Gates
	// Spare keeps, per GPU model, that many GPUs free for production
	// failover (scheduler.Config.Spare).
	Spare map[string]int
	// RollupRetention is how long per-GPU one-minute rollups are kept.
	RollupRetention time.Duration
	// BenchRetention is how long benchmark figures are kept (each GPU's
	// newest of each figure is kept whatever its age).
	BenchRetention time.Duration
	// BenchSchedule, when set, re-benches idle nodes on its own
	// (docs/BENCH.md#scheduled-re-bench).
	BenchSchedule *bench.Schedule
	// PUE is the facility's power usage effectiveness where a rack gives
	// none (power.DefaultPUE); Intensity the grid's carbon intensity
	// (power.DefaultIntensity, or an hourly file).
	PUE       float64
	Intensity power.Intensity
	// Now is the clock; tests set it.
	Now func() time.Time
}

// Default returns production settings.
func Default() Config {
	return Config{
		ID:              "server",
		Tick:            time.Second,
		LeaseTTL:        8 * time.Second,
		Heartbeat:       5 * time.Second,
		HeartbeatGrace:  30 * time.Second,
		FenceAfter:      60 * time.Second,
		LostMargin:      10 * time.Second,
		IdleCycle:       5 * time.Second,
		RollupRetention: 7 * 24 * time.Hour,
		BenchRetention:  90 * 24 * time.Hour,
		PUE:             power.DefaultPUE,
		PowerPeakMargin: power.DefaultPeakMargin,
		OverBudget:      scheduler.OverBudgetAlert,
		OverBudgetAfter: scheduler.DefaultOverBudgetAfter,
		Intensity:       power.Intensity{Constant: power.DefaultIntensity},
		Health:          health.DefaultConfig(),
		CredentialTTL:   24 * time.Hour,
		Policy:          "gpufleet",
		DefaultEstimate: map[gpufleet.Priority]time.Duration{
			gpufleet.Production: 24 * time.Hour, gpufleet.Interactive: 4 * time.Hour,
			gpufleet.Training: 24 * time.Hour, gpufleet.Batch: 4 * time.Hour,
		},
		// Production inference gets a whole GPU or a MIG slice, never a
		// time share with a noisy neighbour (docs/ISOLATION.md).
		DefaultIsolation: map[gpufleet.Priority]gpufleet.Isolation{gpufleet.Production: gpufleet.IsolationHard},
		WatchInterval:    500 * time.Millisecond,
		Now:              time.Now,
	}
}

// MinFence is the shortest fence (Config.FenceAfter) that survives a
// leader's death: another replica takes the lease once it expires (at
// most leaseTTL), notices within a tick, leads from its next cycle, and
// each agent needs one heartbeat answered by it. A stopping server gives
// its lease up and a restarted replica takes its own back at once, so
// only a crash of the leader with another replica left waits this long.
func MinFence(leaseTTL, tick, heartbeat time.Duration) time.Duration {
	return leaseTTL + 2*tick + heartbeat
}

// Validate checks the settings.
func (c Config) Validate() error {
	for name, d := range map[string]time.Duration{"tick": c.Tick, "lease-ttl": c.LeaseTTL, "heartbeat": c.Heartbeat,
		"heartbeat-grace": c.HeartbeatGrace, "fence-after": c.FenceAfter, "credential-ttl": c.CredentialTTL} {
		if d <= 0 {
			return fmt.Errorf("%w: %s must be positive", gpufleet.ErrInvalid, name)
		}
	}
	if c.HeartbeatGrace < c.Heartbeat {
		return fmt.Errorf("%w: heartbeat-grace %s is shorter than the heartbeat %s", gpufleet.ErrInvalid, c.HeartbeatGrace, c.Heartbeat)
	}
	if need := MinFence(c.LeaseTTL, c.Tick, c.Heartbeat); c.FenceAfter < need {
		return fmt.Errorf("%w: fence-after %s is shorter than lease-ttl %s + 2 ticks of %s + a heartbeat of %s (%s): "+
			"if the leader died without giving up its lease, agents would stop every running attempt before another replica may lead; "+
			"raise --fence-after or lower --lease-ttl", gpufleet.ErrInvalid, c.FenceAfter, c.LeaseTTL, c.Tick, c.Heartbeat, need)
	}
	if err := c.Health.Validate(); err != nil {
		return fmt.Errorf("%w: health: %v", gpufleet.ErrInvalid, err)
	}
	for m, n := range c.Spare {
		if n < 0 {
			return fmt.Errorf("%w: spare %s=%d: expected a count >= 0", gpufleet.ErrInvalid, m, n)
		}
	}
	if !(c.PUE >= 1 && c.PUE <= gpufleet.MaxPUE) {
		return fmt.Errorf("%w: pue %g: expected 1 to %g", gpufleet.ErrInvalid, c.PUE, gpufleet.MaxPUE)
	}
	if !(c.Intensity.Constant >= 0 && c.Intensity.Constant <= power.MaxIntensity) {
		return fmt.Errorf("%w: grid-intensity %g: expected 0 to %g g/kWh", gpufleet.ErrInvalid, c.Intensity.Constant, power.MaxIntensity)
	}
	if _, err := scheduler.PolicyConfig(c.Policy); err != nil {
		return fmt.Errorf("%w: policy: %v", gpufleet.ErrInvalid, err)
	}
	return nil
}

// Server is the control plane. It implements api.Service, api.AgentService,
// api.LogService and api.WatchService.
type Server struct {
	cfg       Config
	st        store.Store
	cat       *catalog.Catalog
	log       *slog.Logger
	adminHash []byte

	wake  chan struct{} // nudges the leader loop
	dirty atomic.Bool   // something changed since the last full cycle

	// live is what heartbeats leave in memory (live.go); lead is this
	// replica's leadership, the orders agents get and the leader loop's
	// memory (leader.go). Each holds its own lock. Lock order: racks'
	// before live's before tele's; lead's and authMu are never held with
	// another. Each mutex below guards the fields below it.
	live    *liveness
	lead    *leadership
	selfURL string // where this replica answers (Advertise)

	// capMu guards capFacts, the capacity decisions audits reuse
	// (auditCapacity).
	capMu    sync.Mutex
	capFacts capacityFacts

	// acct turns attempts' reported totals into usage (usage.go).
	acct *accounting

	// tele keeps per-GPU telemetry between writes (rollups.go).
	tele *telemetry

	// racks is the power domains: changes and projection (racks.go).
	racks *racks

	// health is the rules' memory of each node and the node lifecycle
	// they drive (health.go).
	health *healths

	authMu    sync.Mutex
	authCache map[string]cachedAuth

	metrics *metrics

	// agentExt relays fault orders and takes agents' logs (faults.go).
	agentExt agentExtras
	// benchCache holds each GPU model's newest benchmark figures.
	benchCache benchCache
	rebench    rebench

	// fleetCheck is the fleet submissions are checked against.
	fleetCheck fleetCache

	// decide is scheduler.Schedule; tests swap in one that panics.
	decide func(scheduler.Input) scheduler.Output
}

var (
	_ api.Service      = (*Server)(nil)
	_ api.AgentService = (*Server)(nil)
	_ api.EventLister  = (*Server)(nil)
)

// New returns a server over st. adminToken (at least 16 characters) is
// stored hashed and grants fleet-wide access.
func New(ctx context.Context, cfg Config, st store.Store, cat *catalog.Catalog, adminToken string, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(adminToken) < 16 {
		return nil, fmt.Errorf("%w: admin token: expected at least 16 characters", gpufleet.ErrInvalid)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.WatchInterval <= 0 {
		cfg.WatchInterval = 500 * time.Millisecond
	}
	s := &Server{
		cfg: cfg, st: st, cat: cat, log: log.With("component", "server"),
		adminHash: hashSecret(adminToken),
		wake:      make(chan struct{}, 1),
		acct:      newAccounting(st, cfg.PUE),
		tele:      newTelemetry(st, cfg, log.With("component", "server")),
		live:      newLiveness(),
		lead:      &leadership{},
		metrics:   newMetrics(),
		authCache: map[string]cachedAuth{},

		decide: scheduler.Schedule,
	}
	s.racks = newRacks(st, cat, power.Charging{PeakMargin: cfg.PowerPeakMargin}, s.nodeReadings)
	s.health = newHealths(st, cfg.Health, log.With("component", "server"))
	s.health.shortfalls, s.health.nudge = s.refreshBench, s.nudge
	s.metrics.reg.MustRegister(stackCollector{s}, benchCollector{s})
	return s, nil
}

// nudge marks the state changed and wakes the leader loop without blocking.
func (s *Server) nudge() {
	s.dirty.Store(true)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// now reads the server's clock in UTC.
func (s *Server) now() time.Time { return s.cfg.Now().UTC() }

// Ready reports whether the server can serve: the store answers.
func (s *Server) Ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := s.st.Lease(ctx)
	return err
}

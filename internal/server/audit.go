package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/capacity"
	"github.com/gpufleet/gpufleet/internal/health"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Audit checks the fleet for the mistakes gpufleet exists to prevent
// (internal/audit) over the last q.SinceDays, and exports the counts of
// its findings (gpufleet_audit_findings).
func (s *Server) Audit(ctx context.Context, p api.Principal, q api.AuditQuery) (audit.Report, error) {
	if err := requireAdmin(p); err != nil {
		return audit.Report{}, err
	}
	snap, err := s.auditSnapshot(ctx, q.SinceDays)
	if err != nil {
		return audit.Report{}, err
	}
	r := audit.Run(snap)
	s.metrics.setAudit(r)
	return r, nil
}

// auditSnapshot reads what an audit looks at from the store and the
// leader's memory.
func (s *Server) auditSnapshot(ctx context.Context, sinceDays int) (audit.Snapshot, error) {
	admin := api.Principal{Role: gpufleet.RoleAdmin}
	now := s.now()
	since := now.Add(-time.Duration(sinceDays) * 24 * time.Hour)
	snap := audit.Snapshot{Now: now, Since: since, Models: audit.ModelMap(s.cat.All()), Spare: s.cfg.Spare, Classes: map[string][]string{},
		RunbookXIDs: map[int]bool{}, Waits: s.recordedWaits()}
	var err error
	if snap.Nodes, err = s.Nodes(ctx, admin); err != nil {
		return snap, err
	}
	jobs, err := s.allJobs(ctx, "")
	if err != nil {
		return snap, err
	}
	for _, j := range jobs {
		if j.State == gpufleet.JobQueued || j.FinishedAt == nil || j.FinishedAt.After(since) {
			snap.Jobs = append(snap.Jobs, j)
		}
	}
	rows, err := s.st.Rollups(ctx, store.RollupFilter{From: since, To: now})
	if err != nil {
		return snap, err
	}
	for _, r := range rows {
		snap.Usage = append(snap.Usage, audit.GPUMinute{GPU: r.GPU, Node: r.Node, Model: r.Model, Team: r.Team, Minute: r.Minute,
			AllocatedS: r.AllocatedS, IdleAllocatedS: r.IdleAllocatedS, Effective: r.Effective.Value(), SMActivity: r.SMActivity.Value(),
			DRAMActivity: r.DRAMActivity.Value(), TensorActivity: r.TensorActivity.Value(), PowerWatts: r.PowerWatts.Value(), MemoryUsedMax: r.MemoryUsedBytesMax})
	}
	if ret := s.cfg.RollupRetention; ret > 0 && now.Add(-ret).After(since) {
		snap.UsageFrom = now.Add(-ret)
	}
	if snap.Teams, err = s.st.Teams(ctx); err != nil {
		return snap, err
	}
	if snap.Queue, err = s.st.Queue(ctx); err != nil {
		return snap, err
	}
	if snap.Racks, err = s.Racks(ctx, admin); err != nil {
		return snap, err
	}
	if snap.Stacks, err = s.Stacks(ctx, admin); err != nil {
		return snap, err
	}
	b, err := s.BenchResults(ctx, admin, api.BenchQuery{})
	if err != nil {
		return snap, err
	}
	snap.Bench = b.Results
	if snap.Events, err = s.eventsSince(ctx, since); err != nil {
		return snap, err
	}
	classes, err := s.st.Classes(ctx)
	if err != nil {
		return snap, err
	}
	for _, c := range classes {
		snap.Classes[c.Name] = c.Models
	}
	for _, r := range health.Rules(s.cfg.Health) {
		if x, ok := strings.CutPrefix(r.ID, "xid-"); ok {
			if n, err := strconv.Atoi(x); err == nil {
				snap.RunbookXIDs[n] = true
			}
		}
	}
	s.auditCapacity(ctx, admin, &snap)
	return snap, ctx.Err()
}

// auditCapacityTTL is how long an audit reuses the procurement and
// lifecycle decisions: they read a daily demand forecast and replay weeks
// of it through the scheduler (seconds per GPU model), and an hour changes
// neither, while the leader audits every few minutes.
const auditCapacityTTL = time.Hour

// capacityFacts are the capacity decisions an audit reads, as last
// computed.
type capacityFacts struct {
	at                       time.Time
	procure                  []capacity.Recommendation
	procureErr, lifecycleErr string
	lifecycle                *capacity.LifecycleReport
}

// auditCapacity adds the procurement and lifecycle decisions, or why there
// are none, computed at most once per auditCapacityTTL.
func (s *Server) auditCapacity(ctx context.Context, admin api.Principal, snap *audit.Snapshot) {
	now := s.now()
	s.capMu.Lock()
	f := s.capFacts
	s.capMu.Unlock()
	if f.at.IsZero() || now.Sub(f.at) >= auditCapacityTTL || now.Before(f.at) {
		f = s.capacityFacts(ctx, admin, now)
		if ctx.Err() == nil {
			s.capMu.Lock()
			s.capFacts = f
			s.capMu.Unlock()
		}
	}
	snap.Procure, snap.ProcureErr, snap.Lifecycle, snap.LifecycleErr = f.procure, f.procureErr, f.lifecycle, f.lifecycleErr
}

// capacityFacts computes the procurement and lifecycle decisions with the
// defaults of gpufleet procure and gpufleet lifecycle.
func (s *Server) capacityFacts(ctx context.Context, admin api.Principal, now time.Time) capacityFacts {
	f := capacityFacts{at: now}
	pr, err := s.Procure(ctx, admin, api.ProcureQuery{HorizonDays: 180, Target: capacity.DefaultTarget, Quantile: 0.8})
	switch {
	case err != nil:
		f.procureErr = err.Error()
	case len(pr.Models) == 0 && len(pr.Skipped) > 0:
		var why []string
		for _, m := range slices.Sorted(maps.Keys(pr.Skipped)) {
			why = append(why, m+": "+pr.Skipped[m])
		}
		f.procureErr = strings.Join(why, "; ")
	}
	for _, m := range pr.Models {
		f.procure = append(f.procure, m.Recommendation)
	}
	lr, err := s.Lifecycle(ctx, admin, api.LifecycleQuery{HorizonMonths: 36, SinceDays: 30, EnergyUSDPerKWh: capacity.DefaultEnergyUSDPerKWh,
		DepreciationYears: capacity.DefaultDepreciationYears, RepairHours: capacity.DefaultRepairHours})
	if err != nil {
		f.lifecycleErr = err.Error()
	} else {
		f.lifecycle = &lr
	}
	return f
}

// recordedWaits is the leader's record of recent waits against the ETA
// each job was shown (none on a replica that does not lead).
func (s *Server) recordedWaits() []audit.Wait {
	s.lead.mu.Lock()
	defer s.lead.mu.Unlock()
	var out []audit.Wait
	for _, w := range s.lead.eta.waits {
		out = append(out, audit.Wait{Predicted: w.Predicted, Actual: w.Actual, Censored: w.Censored})
	}
	return out
}

// eventsSince reads the events recorded since a time, oldest first.
func (s *Server) eventsSince(ctx context.Context, since time.Time) ([]gpufleet.Event, error) {
	var out []gpufleet.Event
	for after := int64(0); ; {
		evs, err := s.st.Events(ctx, store.EventFilter{AfterID: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			if !e.At.Before(since) {
				out = append(out, e)
			}
			after = e.ID
		}
		if len(evs) < 1000 {
			return out, nil
		}
	}
}

// auditLoop audits the fleet every Config.AuditEvery while this replica
// leads, so that /metrics carries the counts of the findings
// (gpufleet_audit_findings). A failed or panicking audit is logged and
// tried again at the next tick; it never takes the server down.
func (s *Server) auditLoop(ctx context.Context) {
	if s.cfg.AuditEvery <= 0 {
		return
	}
	t := time.NewTicker(s.cfg.AuditEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.Leader() {
			s.safeAudit(ctx)
		}
	}
}

func (s *Server) safeAudit(ctx context.Context) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("audit panicked", "panic", v)
		}
	}()
	if _, err := s.Audit(ctx, api.Principal{Role: gpufleet.RoleAdmin}, api.AuditQuery{SinceDays: 30}); err != nil && ctx.Err() == nil {
		s.log.Warn("audit for metrics", "err", fmt.Errorf("audit: %w", err))
	}
}

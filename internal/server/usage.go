package server

import (
	"context"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/store"
)

// attemptInfo is what accounting needs to know about a running attempt.
type attemptInfo struct {
	team  string
	model string
}

// acctKey is one node's share of an attempt: each node of a multi-node
// attempt reports its own totals.
type acctKey struct{ attempt, node string }

type usageKey struct {
	team, model string
	day         time.Time
}

// account turns an attempt's reported totals into per-team usage
// increments, kept in memory until the next flush; node is the node that
// reports. s.acctMu must be held.
func (s *Server) account(node string, a api.AttemptReport, now time.Time) {
	info, ok := s.attempts[a.AttemptID]
	if !ok {
		return // not known yet: the next report carries the totals again
	}
	key := acctKey{a.AttemptID, node}
	prev := s.accounted[key]
	d := store.UsageRow{
		GPUSeconds:          a.GPUSeconds - prev.GPUSeconds,
		EffectiveGPUSeconds: a.EffectiveGPUSeconds - prev.EffectiveGPUSeconds,
		EnergyJoules:        a.EnergyJoules - prev.EnergyJoules,
	}
	if d.GPUSeconds <= 0 && d.EnergyJoules <= 0 {
		return
	}
	s.accounted[key] = a
	pue, ok := s.nodePUE[node]
	if !ok {
		pue = s.cfg.PUE
	}
	k := usageKey{team: info.team, model: info.model, day: now.Truncate(24 * time.Hour)}
	row := s.pendingUsage[k]
	row.Team, row.Model, row.Day = k.team, k.model, k.day
	row.GPUSeconds += max(0, d.GPUSeconds)
	row.EffectiveGPUSeconds += max(0, d.EffectiveGPUSeconds)
	row.EnergyJoules += max(0, d.EnergyJoules)
	row.FacilityJoules = addFloat(row.FacilityJoules, power.FacilityJoules(max(0, d.EnergyJoules), pue))
	s.pendingUsage[k] = row
}

// addFloat adds v to *p, a nil p counting as 0.
func addFloat(p *float64, v float64) *float64 {
	if p != nil {
		v += *p
	}
	return &v
}

// flushUsage writes the usage accumulated since the last flush.
func (s *Server) flushUsage(ctx context.Context) error {
	s.acctMu.Lock()
	rows := make([]store.UsageRow, 0, len(s.pendingUsage))
	for _, r := range s.pendingUsage {
		rows = append(rows, r)
	}
	s.pendingUsage = map[usageKey]store.UsageRow{}
	s.acctMu.Unlock()
	if len(rows) == 0 {
		return nil
	}
	if err := s.st.AddUsage(ctx, rows); err != nil {
		// Put them back so that nothing is lost.
		s.acctMu.Lock()
		for _, r := range rows {
			k := usageKey{team: r.Team, model: r.Model, day: r.Day}
			p := s.pendingUsage[k]
			p.Team, p.Model, p.Day = r.Team, r.Model, r.Day
			p.GPUSeconds += r.GPUSeconds
			p.EffectiveGPUSeconds += r.EffectiveGPUSeconds
			p.EnergyJoules += r.EnergyJoules
			if r.FacilityJoules != nil {
				p.FacilityJoules = addFloat(p.FacilityJoules, *r.FacilityJoules)
			}
			s.pendingUsage[k] = p
		}
		s.acctMu.Unlock()
		return err
	}
	return nil
}

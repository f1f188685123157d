package server

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/store"
)

// usageStore is what accounting writes.
type usageStore interface {
	AddUsage(ctx context.Context, rows []store.UsageRow) error
}

// accounting turns the totals agents report for their attempts into
// per-team, per-model, per-day usage, kept in memory until flushed. Its
// state is its own, under its own lock: what each running attempt is (the
// leader's last cycle says), what of each attempt's totals has been
// counted, the usage not yet flushed, and the PUE of each node in a rack
// that gives one.
type accounting struct {
	st  usageStore
	pue float64 // for nodes whose rack gives none

	mu        sync.Mutex
	nodePUE   map[string]float64
	attempts  map[string]attemptInfo
	accounted map[acctKey]api.AttemptReport
	pending   map[usageKey]store.UsageRow
}

func newAccounting(st usageStore, pue float64) *accounting {
	return &accounting{st: st, pue: pue, attempts: map[string]attemptInfo{}, accounted: map[acctKey]api.AttemptReport{},
		pending: map[usageKey]store.UsageRow{}}
}

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

// setAttempts replaces the running attempts accounting knows, forgetting
// what it counted of the others.
func (a *accounting) setAttempts(infos map[string]attemptInfo) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.attempts = infos
	maps.DeleteFunc(a.accounted, func(k acctKey, _ api.AttemptReport) bool {
		_, ok := infos[k.attempt]
		return !ok
	})
}

// setNodePUE replaces the nodes' PUE.
func (a *accounting) setNodePUE(m map[string]float64) {
	a.mu.Lock()
	a.nodePUE = m
	a.mu.Unlock()
}

// account turns the attempts' reported totals into usage increments; node
// is the node that reports.
func (a *accounting) account(node string, reports []api.AttemptReport, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range reports {
		a.add(node, r, now)
	}
}

// add is account for one report. a.mu must be held.
func (a *accounting) add(node string, r api.AttemptReport, now time.Time) {
	info, ok := a.attempts[r.AttemptID]
	if !ok {
		return // not known yet: the next report carries the totals again
	}
	key := acctKey{r.AttemptID, node}
	prev := a.accounted[key]
	d := store.UsageRow{
		GPUSeconds:          r.GPUSeconds - prev.GPUSeconds,
		EffectiveGPUSeconds: r.EffectiveGPUSeconds - prev.EffectiveGPUSeconds,
		EnergyJoules:        r.EnergyJoules - prev.EnergyJoules,
	}
	if d.GPUSeconds <= 0 && d.EnergyJoules <= 0 {
		return
	}
	a.accounted[key] = r
	pue, ok := a.nodePUE[node]
	if !ok {
		pue = a.pue
	}
	k := usageKey{team: info.team, model: info.model, day: now.Truncate(24 * time.Hour)}
	row := a.pending[k]
	row.Team, row.Model, row.Day = k.team, k.model, k.day
	row.GPUSeconds += max(0, d.GPUSeconds)
	row.EffectiveGPUSeconds += max(0, d.EffectiveGPUSeconds)
	row.EnergyJoules += max(0, d.EnergyJoules)
	row.FacilityJoules = addFloat(row.FacilityJoules, power.FacilityJoules(max(0, d.EnergyJoules), pue))
	a.pending[k] = row
}

// addFloat adds v to *p, a nil p counting as 0.
func addFloat(p *float64, v float64) *float64 {
	if p != nil {
		v += *p
	}
	return &v
}

// flush writes the usage accumulated since the last flush; what the store
// refuses is kept for the next one, so that nothing is lost.
func (a *accounting) flush(ctx context.Context) error {
	a.mu.Lock()
	rows := make([]store.UsageRow, 0, len(a.pending))
	for _, r := range a.pending {
		rows = append(rows, r)
	}
	a.pending = map[usageKey]store.UsageRow{}
	a.mu.Unlock()
	if len(rows) == 0 {
		return nil
	}
	if err := a.st.AddUsage(ctx, rows); err != nil {
		a.mu.Lock()
		for _, r := range rows {
			k := usageKey{team: r.Team, model: r.Model, day: r.Day}
			p := a.pending[k]
			p.Team, p.Model, p.Day = r.Team, r.Model, r.Day
			p.GPUSeconds += r.GPUSeconds
			p.EffectiveGPUSeconds += r.EffectiveGPUSeconds
			p.EnergyJoules += r.EnergyJoules
			if r.FacilityJoules != nil {
				p.FacilityJoules = addFloat(p.FacilityJoules, *r.FacilityJoules)
			}
			a.pending[k] = p
		}
		a.mu.Unlock()
		return err
	}
	return nil
}

package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

// rollupKey names one GPU's minute.
type rollupKey struct {
	gpu    string
	minute time.Time
}

// gpuInfo is what the leader's last snapshot says about a GPU: where it
// is, what it is and who holds it.
type gpuInfo struct {
	node, model, team string
	class             gpufleet.Priority // the holder's priority class
	holder            string            // the holding attempt's id
}

// drawPeak is the highest reading of a GPU under one holder: readings
// count from settle after the server first saw that holder on it (the
// job ramps up, and the first heartbeat may predate its start); peak is
// nil until one did.
type drawPeak struct {
	holder string
	settle time.Time
	peak   *float64
}

// peakSettle is how long after a holder first appears on a GPU its
// readings start to count as measured: two heartbeats, at least a minute.
func (s *Server) peakSettle() time.Duration { return max(2*s.cfg.Heartbeat, time.Minute) }

// observePeak keeps a GPU's peak reading under its holder. teleMu must be
// held.
func (s *Server) observePeak(uuid, holder string, watts float64, now time.Time) {
	if s.drawPeaks == nil {
		s.drawPeaks = map[string]drawPeak{}
	}
	p, ok := s.drawPeaks[uuid]
	if !ok || p.holder != holder {
		s.drawPeaks[uuid] = drawPeak{holder: holder, settle: now.Add(s.peakSettle())}
		return
	}
	if now.Before(p.settle) {
		return
	}
	if p.peak == nil || watts > *p.peak {
		p.peak = &watts
		s.drawPeaks[uuid] = p
	}
}

// measuredPeak is a GPU's peak reading under its current holder; nil
// when it has not been measured under it. teleMu must be held.
func (s *Server) measuredPeak(uuid string) *float64 {
	info := s.gpus[uuid]
	if p, ok := s.drawPeaks[uuid]; ok && info.holder != "" && p.holder == info.holder {
		return p.peak
	}
	return nil
}

// xidAt is an XID a GPU raised, and when the server heard of it.
type xidAt struct {
	at  time.Time
	xid int
}

// recentXIDWindow is how long a GPU's XIDs stay in its live view.
const recentXIDWindow = time.Hour

// pruneEvery is how often the leader deletes rollups past retention.
const pruneEvery = 10 * time.Minute

// effective is SM activity where the GPU reports it, else utilization.
func effective(sm, util *float64) *float64 {
	if sm != nil {
		return sm
	}
	return util
}

// fold adds a heartbeat's samples to the open minute rollups and keeps the
// node's recent XIDs. s.liveMu must be held (ln is the node's record); it
// takes teleMu.
func (s *Server) fold(node string, ln *liveNode, samples []api.GPUSample, now time.Time) {
	minute := now.Truncate(time.Minute)
	// The samples cover the interval since the node's last heartbeat (at
	// most two intervals: a longer silence is not held time we saw).
	span := s.cfg.Heartbeat
	if !ln.prevBeat.IsZero() {
		span = min(now.Sub(ln.prevBeat), 2*s.cfg.Heartbeat)
	}
	ln.prevBeat = now
	s.teleMu.Lock()
	defer s.teleMu.Unlock()
	for _, g := range samples {
		if g.UUID == "" {
			continue
		}
		k := rollupKey{gpu: g.UUID, minute: minute}
		r := s.pendingRollups[k]
		if r == nil {
			info := s.gpus[g.UUID]
			r = &store.RollupRow{GPU: g.UUID, Minute: minute, Node: node, Model: info.model, Team: info.team}
			s.pendingRollups[k] = r
		}
		r.Samples++
		if info := s.gpus[g.UUID]; info.team != "" {
			r.AllocatedS += span.Seconds()
			if eff := effective(g.SMActivity, g.Utilization); eff != nil && *eff < api.IdleThreshold {
				r.IdleAllocatedS += span.Seconds()
			}
		}
		r.Utilization.Add(g.Utilization)
		r.SMActivity.Add(g.SMActivity)
		r.DRAMActivity.Add(g.DRAMActivity)
		r.TensorActivity.Add(g.TensorActivity)
		r.Effective.Add(effective(g.SMActivity, g.Utilization))
		r.PowerWatts.Add(g.PowerWatts)
		if info := s.gpus[g.UUID]; info.team != "" && g.PowerWatts != nil {
			// The holder's peak: what its rack is charged for the GPU once
			// measured (power.Charging).
			s.observePeak(g.UUID, info.holder, *g.PowerWatts, now)
		}
		if g.MemoryUsedBytes != nil && (r.MemoryUsedBytesMax == nil || *g.MemoryUsedBytes > *r.MemoryUsedBytesMax) {
			v := *g.MemoryUsedBytes
			r.MemoryUsedBytesMax = &v
		}
		if g.TemperatureC != nil && (r.TemperatureCMax == nil || *g.TemperatureC > *r.TemperatureCMax) {
			v := *g.TemperatureC
			r.TemperatureCMax = &v
		}
		if g.EnergyJoulesTotal != nil {
			// The counter is monotonic until the driver reloads; a drop
			// starts it again and counts nothing for that interval.
			if prev, ok := ln.energy[g.UUID]; ok && *g.EnergyJoulesTotal >= prev {
				r.EnergyJoules += *g.EnergyJoulesTotal - prev
			}
			ln.energy[g.UUID] = *g.EnergyJoulesTotal
		}
		xs := ln.xids[g.UUID]
		for _, x := range g.XIDs {
			xs = append(xs, xidAt{at: now, xid: x})
		}
		for len(xs) > 0 && now.Sub(xs[0].at) > recentXIDWindow {
			xs = xs[1:]
		}
		if len(xs) == 0 {
			delete(ln.xids, g.UUID)
		} else {
			ln.xids[g.UUID] = xs
		}
	}
}

// flushRollups writes the rollups of closed minutes, or all of them when
// all is set (before a read). A failed write keeps them for the next try.
func (s *Server) flushRollups(ctx context.Context, now time.Time, all bool) error {
	open := now.Truncate(time.Minute)
	s.teleMu.Lock()
	var rows []store.RollupRow
	for k, r := range s.pendingRollups {
		if all || k.minute.Before(open) {
			rows = append(rows, *r)
			delete(s.pendingRollups, k)
		}
	}
	prune := s.cfg.RollupRetention > 0 && now.Sub(s.lastPrune) >= pruneEvery
	if prune {
		s.lastPrune = now
	}
	s.teleMu.Unlock()
	if err := s.st.AddRollups(ctx, rows); err != nil {
		s.teleMu.Lock()
		for _, r := range rows {
			k := rollupKey{gpu: r.GPU, minute: r.Minute}
			if p := s.pendingRollups[k]; p != nil {
				merge(p, r)
			} else {
				s.pendingRollups[k] = &r
			}
		}
		s.teleMu.Unlock()
		return fmt.Errorf("write rollups: %w", err)
	}
	if prune {
		n, err := s.st.PruneRollups(ctx, now.Add(-s.cfg.RollupRetention))
		if err != nil {
			return err
		}
		if n > 0 {
			s.log.Debug("pruned rollups", "rows", n, "retention", s.cfg.RollupRetention)
		}
		if s.cfg.BenchRetention > 0 {
			n, err := s.st.PruneBenchResults(ctx, now.Add(-s.cfg.BenchRetention))
			if err != nil {
				return err
			}
			if n > 0 {
				s.log.Debug("pruned bench results", "rows", n, "retention", s.cfg.BenchRetention)
			}
		}
	}
	return nil
}

// merge adds r's samples into p (same GPU and minute).
func merge(p *store.RollupRow, r store.RollupRow) {
	add := func(a *store.Mean, b store.Mean) { a.Sum += b.Sum; a.N += b.N }
	p.Samples += r.Samples
	add(&p.Utilization, r.Utilization)
	add(&p.SMActivity, r.SMActivity)
	add(&p.DRAMActivity, r.DRAMActivity)
	add(&p.TensorActivity, r.TensorActivity)
	add(&p.Effective, r.Effective)
	add(&p.PowerWatts, r.PowerWatts)
	p.EnergyJoules += r.EnergyJoules
	p.AllocatedS += r.AllocatedS
	p.IdleAllocatedS += r.IdleAllocatedS
	if r.MemoryUsedBytesMax != nil && (p.MemoryUsedBytesMax == nil || *r.MemoryUsedBytesMax > *p.MemoryUsedBytesMax) {
		p.MemoryUsedBytesMax = r.MemoryUsedBytesMax
	}
	if r.TemperatureCMax != nil && (p.TemperatureCMax == nil || *r.TemperatureCMax > *p.TemperatureCMax) {
		p.TemperatureCMax = r.TemperatureCMax
	}
	if p.Team == "" {
		p.Team = r.Team
	}
}

// setGPUs records, from the leader's snapshot, each GPU's node and model
// and the team of the attempt holding it (or one of its MIG instances or
// time-slice shares; the first in job order when several teams share).
func (s *Server) setGPUs(v fleetView, nodes []gpufleet.Node) {
	gpus := map[string]gpuInfo{}
	parent := map[string]string{}
	for _, n := range nodes {
		for _, g := range n.GPUs {
			gpus[g.UUID] = gpuInfo{node: n.Name, model: g.Model}
			for _, m := range g.MIGInstances {
				parent[m.UUID] = g.UUID
			}
		}
	}
	v.running(func(j scheduler.Job, _ gpufleet.Job, a attemptRef) {
		for _, p := range j.Placement {
			for _, u := range p.GPUs {
				if p, ok := parent[u]; ok {
					u = p
				}
				if info, ok := gpus[u]; ok && info.team == "" {
					info.team, info.class, info.holder = j.Team, j.Priority, a.id
					gpus[u] = info
				}
			}
		}
	})
	s.teleMu.Lock()
	s.gpus = gpus
	for u, p := range s.drawPeaks {
		if gpus[u].holder != p.holder {
			delete(s.drawPeaks, u) // the holder left: a new one starts unmeasured
		}
	}
	s.teleMu.Unlock()
}

// withLive fills each GPU's latest telemetry and holder as p may see them.
func (s *Server) withLive(p api.Principal, n gpufleet.Node) gpufleet.Node {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	s.teleMu.Lock()
	defer s.teleMu.Unlock()
	ln := s.nodes[n.Name]
	for i := range n.GPUs {
		n.GPUs[i].Live = s.liveGPU(p, ln, n.GPUs[i].UUID)
	}
	return n
}

// liveGPU is a GPU's latest telemetry and holder as p may see them;
// s.liveMu and s.teleMu must be held.
func (s *Server) liveGPU(p api.Principal, ln *liveNode, uuid string) *gpufleet.GPULive {
	if ln == nil {
		return nil
	}
	i := slices.IndexFunc(ln.samples, func(g api.GPUSample) bool { return g.UUID == uuid })
	if i < 0 {
		return nil
	}
	g := ln.samples[i]
	info := s.gpus[uuid]
	l := &gpufleet.GPULive{Utilization: g.Utilization, SMActivity: g.SMActivity,
		EffectiveUtilization: effective(g.SMActivity, g.Utilization), MemoryUsedBytes: g.MemoryUsedBytes,
		PowerWatts: g.PowerWatts, TemperatureC: g.TemperatureC, ThrottleReasons: g.ThrottleReasons,
		Allocated: info.team != ""}
	if visible(p, info.team) {
		l.Team = info.team
	}
	for _, x := range ln.xids[uuid] {
		l.RecentXIDs = append(l.RecentXIDs, x.xid)
	}
	return l
}

// Rollups returns per-GPU one-minute rollups: a node's (or one of its
// GPUs'), or those of the GPUs a job's attempts held while they held
// them. A member sees who held a GPU only when it was their own team.
func (s *Server) Rollups(ctx context.Context, p api.Principal, q api.RollupQuery) ([]api.GPURollup, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	now := s.now()
	if q.To.IsZero() {
		q.To = now
	}
	if q.From.IsZero() {
		q.From = q.To.Add(-time.Hour)
	}
	if !q.From.Before(q.To) {
		return nil, fmt.Errorf("%w: from %s is not before to %s", gpufleet.ErrInvalid, q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	if (q.JobID == "") == (q.Node == "") {
		return nil, fmt.Errorf("%w: rollups: expected exactly one of node or job", gpufleet.ErrInvalid)
	}
	if err := s.flushRollups(ctx, now, true); err != nil {
		return nil, err
	}
	var rows []store.RollupRow
	if q.Node != "" {
		n, err := s.st.Node(ctx, q.Node)
		if err != nil {
			return nil, err
		}
		f := store.RollupFilter{Node: n.Name, From: q.From, To: q.To}
		if q.GPU != "" {
			if !slices.ContainsFunc(n.GPUs, func(g gpufleet.NodeGPU) bool { return g.UUID == q.GPU }) {
				return nil, fmt.Errorf("%w: gpu %s on node %s", gpufleet.ErrNotFound, gpufleet.Quote(q.GPU), gpufleet.Quote(q.Node))
			}
			f.GPUs = []string{q.GPU}
		}
		var err2 error
		if rows, err2 = s.st.Rollups(ctx, f); err2 != nil {
			return nil, err2
		}
	} else {
		j, err := s.Job(ctx, p, q.JobID)
		if err != nil {
			return nil, err
		}
		if rows, err = s.jobRollups(ctx, j, q.From, q.To, now); err != nil {
			return nil, err
		}
	}
	out := make([]api.GPURollup, 0, len(rows))
	for _, r := range rows {
		g := api.GPURollup{Node: r.Node, GPU: r.GPU, Model: r.Model, Minute: r.Minute, Samples: int(r.Samples),
			Utilization: r.Utilization.Value(), SMActivity: r.SMActivity.Value(), DRAMActivity: r.DRAMActivity.Value(),
			TensorActivity: r.TensorActivity.Value(), EffectiveUtilization: r.Effective.Value(),
			MemoryUsedBytesMax: r.MemoryUsedBytesMax, PowerWatts: r.PowerWatts.Value(), EnergyJoules: r.EnergyJoules,
			TemperatureCMax: r.TemperatureCMax}
		if visible(p, r.Team) {
			g.Team = r.Team
		}
		out = append(out, g)
	}
	return out, nil
}

// jobRollups reads the rollups of the GPUs j's attempts held, each within
// its attempt's run and [from, to). MIG instances map to their GPU.
func (s *Server) jobRollups(ctx context.Context, j gpufleet.Job, from, to, now time.Time) ([]store.RollupRow, error) {
	parents := map[string]string{} // GPU or MIG UUID -> GPU UUID
	read := map[string]bool{}      // nodes whose inventory is in parents
	byKey := map[rollupKey]store.RollupRow{}
	for _, a := range j.Attempts {
		if a.StartedAt == nil {
			continue
		}
		start, end := a.StartedAt.Truncate(time.Minute), to
		if from.After(start) {
			start = from
		}
		if a.FinishedAt != nil && a.FinishedAt.Before(end) {
			end = *a.FinishedAt
		}
		if !start.Before(end) {
			continue
		}
		for _, an := range a.Nodes {
			if !read[an.Name] {
				read[an.Name] = true
				n, err := s.st.Node(ctx, an.Name)
				if err != nil && !errors.Is(err, gpufleet.ErrNotFound) {
					return nil, err
				}
				for _, g := range n.GPUs {
					parents[g.UUID] = g.UUID
					for _, m := range g.MIGInstances {
						parents[m.UUID] = g.UUID
					}
				}
			}
			var gpus []string
			for _, u := range an.GPUs {
				if p, ok := parents[u]; ok {
					u = p
				}
				if !slices.Contains(gpus, u) {
					gpus = append(gpus, u)
				}
			}
			rows, err := s.st.Rollups(ctx, store.RollupFilter{Node: an.Name, GPUs: gpus, From: start, To: end})
			if err != nil {
				return nil, err
			}
			for _, r := range rows {
				byKey[rollupKey{gpu: r.GPU, minute: r.Minute}] = r
			}
		}
	}
	out := slices.Collect(maps.Values(byKey))
	slices.SortFunc(out, func(a, b store.RollupRow) int {
		if c := a.Minute.Compare(b.Minute); c != 0 {
			return c
		}
		return strings.Compare(a.GPU, b.GPU)
	})
	return out, nil
}

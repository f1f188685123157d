package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
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
	// capW is the power cap given the GPU under this holder, fixed when
	// first given (Config.PowerCaps); 0: none yet.
	capW float64
}

// rollupStore is what telemetry writes.
type rollupStore interface {
	AddRollups(ctx context.Context, rows []store.RollupRow) error
	PruneRollups(ctx context.Context, before time.Time) (int64, error)
	PruneBenchResults(ctx context.Context, before time.Time) (int64, error)
}

// telemetry is the per-GPU telemetry the leader keeps between writes, under
// its own lock: each GPU's node, model and holder from the leader's last
// cycle, the open minute rollups, when rollups past retention were last
// pruned, and each held GPU's peak draw under its holder (what a measured
// GPU's rack is charged from).
type telemetry struct {
	st  rollupStore
	log *slog.Logger
	// settle is how long after a holder first appears on a GPU its
	// readings start to count as measured; retention and benchRetention
	// bound the rollups and bench results kept (0: for ever).
	settle, retention, benchRetention time.Duration

	mu        sync.Mutex
	gpus      map[string]gpuInfo
	pending   map[rollupKey]*store.RollupRow
	lastPrune time.Time
	drawPeaks map[string]drawPeak
}

func newTelemetry(st rollupStore, cfg Config, log *slog.Logger) *telemetry {
	return &telemetry{st: st, log: log, settle: max(2*cfg.Heartbeat, time.Minute), retention: cfg.RollupRetention,
		benchRetention: cfg.BenchRetention, gpus: map[string]gpuInfo{}, pending: map[rollupKey]*store.RollupRow{},
		drawPeaks: map[string]drawPeak{}}
}

// gpuView answers, while telemetry's lock is held, what telemetry knows of
// a GPU.
type gpuView struct{ t *telemetry }

// info is the GPU's node, model and holder.
func (v gpuView) info(uuid string) gpuInfo { return v.t.gpus[uuid] }

// peak is a GPU's peak reading under its current holder; nil when it has
// not been measured under it.
func (v gpuView) peak(uuid string) *float64 {
	info := v.t.gpus[uuid]
	if p, ok := v.t.drawPeaks[uuid]; ok && info.holder != "" && p.holder == info.holder {
		return p.peak
	}
	return nil
}

// capWatts is the power cap given a GPU under its current holder; 0 when
// none was.
func (v gpuView) capWatts(uuid string) float64 {
	info := v.t.gpus[uuid]
	if p, ok := v.t.drawPeaks[uuid]; ok && info.holder != "" && p.holder == info.holder {
		return p.capW
	}
	return 0
}

// read calls fn with a view of the GPUs, under telemetry's lock.
func (t *telemetry) read(fn func(gpuView)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fn(gpuView{t})
}

// observePeak keeps a GPU's peak reading under its holder. t.mu must be
// held.
func (t *telemetry) observePeak(uuid, holder string, watts float64, now time.Time) {
	p, ok := t.drawPeaks[uuid]
	if !ok || p.holder != holder {
		t.drawPeaks[uuid] = drawPeak{holder: holder, settle: now.Add(t.settle)}
		return
	}
	if now.Before(p.settle) {
		return
	}
	if p.peak == nil || watts > *p.peak {
		p.peak = &watts
		t.drawPeaks[uuid] = p
	}
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
// node's recent XIDs and energy counters. s.live.mu must be held (ln is the
// node's record).
func (s *Server) fold(node string, ln *liveNode, samples []api.GPUSample, now time.Time) {
	// The samples cover the interval since the node's last heartbeat (at
	// most two intervals: a longer silence is not held time we saw).
	span := s.cfg.Heartbeat
	if !ln.prevBeat.IsZero() {
		span = min(now.Sub(ln.prevBeat), 2*s.cfg.Heartbeat)
	}
	ln.prevBeat = now
	energy := make([]float64, len(samples))
	for i, g := range samples {
		if g.UUID == "" {
			continue
		}
		if g.EnergyJoulesTotal != nil {
			// The counter is monotonic until the driver reloads; a drop
			// starts it again and counts nothing for that interval.
			if prev, ok := ln.energy[g.UUID]; ok && *g.EnergyJoulesTotal >= prev {
				energy[i] = *g.EnergyJoulesTotal - prev
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
	s.tele.fold(node, samples, energy, span, now)
}

// fold adds a node's samples, covering span before now, to the open
// minute rollups; energy[i] is the joules sample i's counter advanced.
func (t *telemetry) fold(node string, samples []api.GPUSample, energy []float64, span time.Duration, now time.Time) {
	minute := now.Truncate(time.Minute)
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, g := range samples {
		if g.UUID == "" {
			continue
		}
		info := t.gpus[g.UUID]
		k := rollupKey{gpu: g.UUID, minute: minute}
		r := t.pending[k]
		if r == nil {
			r = &store.RollupRow{GPU: g.UUID, Minute: minute, Node: node, Model: info.model, Team: info.team}
			t.pending[k] = r
		}
		r.Samples++
		if info.team != "" {
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
		if info.team != "" && g.PowerWatts != nil {
			// The holder's peak: what its rack is charged for the GPU once
			// measured (power.Charging).
			t.observePeak(g.UUID, info.holder, *g.PowerWatts, now)
		}
		if g.MemoryUsedBytes != nil && (r.MemoryUsedBytesMax == nil || *g.MemoryUsedBytes > *r.MemoryUsedBytesMax) {
			v := *g.MemoryUsedBytes
			r.MemoryUsedBytesMax = &v
		}
		if g.TemperatureC != nil && (r.TemperatureCMax == nil || *g.TemperatureC > *r.TemperatureCMax) {
			v := *g.TemperatureC
			r.TemperatureCMax = &v
		}
		r.EnergyJoules += energy[i]
	}
}

// flush writes the rollups of closed minutes, or all of them when
// all is set (before a read). A failed write keeps them for the next try.
func (t *telemetry) flush(ctx context.Context, now time.Time, all bool) error {
	open := now.Truncate(time.Minute)
	t.mu.Lock()
	var rows []store.RollupRow
	for k, r := range t.pending {
		if all || k.minute.Before(open) {
			rows = append(rows, *r)
			delete(t.pending, k)
		}
	}
	prune := t.retention > 0 && now.Sub(t.lastPrune) >= pruneEvery
	if prune {
		t.lastPrune = now
	}
	t.mu.Unlock()
	if err := t.st.AddRollups(ctx, rows); err != nil {
		t.mu.Lock()
		for _, r := range rows {
			k := rollupKey{gpu: r.GPU, minute: r.Minute}
			if p := t.pending[k]; p != nil {
				merge(p, r)
			} else {
				t.pending[k] = &r
			}
		}
		t.mu.Unlock()
		return fmt.Errorf("write rollups: %w", err)
	}
	if prune {
		n, err := t.st.PruneRollups(ctx, now.Add(-t.retention))
		if err != nil {
			return err
		}
		if n > 0 {
			t.log.Debug("pruned rollups", "rows", n, "retention", t.retention)
		}
		if t.benchRetention > 0 {
			n, err := t.st.PruneBenchResults(ctx, now.Add(-t.benchRetention))
			if err != nil {
				return err
			}
			if n > 0 {
				t.log.Debug("pruned bench results", "rows", n, "retention", t.benchRetention)
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

// setGPUs records, from the leader's view, each GPU's node and model
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
	s.tele.setGPUs(gpus)
}

// setGPUs replaces what telemetry knows of each GPU; a peak read under a
// holder that left is forgotten: a new holder starts unmeasured.
func (t *telemetry) setGPUs(gpus map[string]gpuInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gpus = gpus
	for u, p := range t.drawPeaks {
		if gpus[u].holder != p.holder {
			delete(t.drawPeaks, u)
		}
	}
}

// withLive fills each GPU's latest telemetry and holder as p may see them.
func (s *Server) withLive(p api.Principal, n gpufleet.Node) gpufleet.Node {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	s.tele.read(func(v gpuView) {
		ln := s.live.nodes[n.Name]
		for i := range n.GPUs {
			n.GPUs[i].Live = liveGPU(p, ln, v, n.GPUs[i].UUID)
		}
	})
	return n
}

// liveGPU is a GPU's latest telemetry and holder as p may see them;
// s.live.mu must be held.
func liveGPU(p api.Principal, ln *liveNode, v gpuView, uuid string) *gpufleet.GPULive {
	if ln == nil {
		return nil
	}
	i := slices.IndexFunc(ln.samples, func(g api.GPUSample) bool { return g.UUID == uuid })
	if i < 0 {
		return nil
	}
	g := ln.samples[i]
	info := v.info(uuid)
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
	if err := s.tele.flush(ctx, now, true); err != nil {
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

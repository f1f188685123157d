package agent

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// throttleNames names the clock-event reason bits.
var throttleNames = []struct {
	bit  uint64
	name string
}{
	{gpu.ClockEventGPUIdle, "gpu_idle"}, {gpu.ClockEventAppClocksSetting, "applications_clocks_setting"},
	{gpu.ClockEventSWPowerCap, "sw_power_cap"}, {gpu.ClockEventHWSlowdown, "hw_slowdown"},
	{gpu.ClockEventSyncBoost, "sync_boost"}, {gpu.ClockEventSWThermalSlowdown, "sw_thermal_slowdown"},
	{gpu.ClockEventHWThermalSlowdown, "hw_thermal_slowdown"}, {gpu.ClockEventHWPowerBrake, "hw_power_brake"},
}

// summary accumulates one GPU's samples between heartbeats.
type summary struct {
	util, sm, dram, tensor, power mean
	memUsed                       *int64
	energyJ                       *float64
	tempMax                       *float64
	reasons                       uint64
	eccUnc                        *int64
	xids                          []int
	evidence                      api.GPUEvidence
	eventsAll                     *uint64 // clock-event bits set in every sample
}

// mean is a running mean of present readings.
type mean struct {
	sum float64
	n   int
}

func (m *mean) add(v *float64) {
	if v != nil {
		m.sum += *v
		m.n++
	}
}

func (m mean) value() *float64 {
	if m.n == 0 {
		return nil
	}
	v := m.sum / float64(m.n)
	return &v
}

// add folds one sample in.
func (s *summary) add(x gpu.Sample) {
	s.util.add(x.Utilization)
	s.sm.add(x.SMActivity)
	s.dram.add(x.DRAMActivity)
	s.tensor.add(x.TensorActivity)
	s.power.add(x.PowerWatts)
	if x.MemoryUsedBytes != nil {
		v := *x.MemoryUsedBytes
		s.memUsed = &v
	}
	if x.EnergyMillijoules != nil {
		v := float64(*x.EnergyMillijoules) / 1000
		s.energyJ = &v
	}
	if x.TemperatureC != nil && (s.tempMax == nil || *x.TemperatureC > *s.tempMax) {
		v := *x.TemperatureC
		s.tempMax = &v
	}
	if x.ClockEventReasons != nil {
		s.reasons |= *x.ClockEventReasons
	}
	if x.ECCUncorrectedVolatile != nil {
		v := int64(*x.ECCUncorrectedVolatile)
		s.eccUnc = &v
	}
	if x.ClockEventReasons != nil {
		v := *x.ClockEventReasons
		if s.eventsAll != nil {
			v &= *s.eventsAll
		}
		s.eventsAll = &v
	}
	s.evidence.Counters = x.Counters
}

// sample is the compact heartbeat form.
func (s *summary) sample(uuid string) api.GPUSample {
	out := api.GPUSample{UUID: uuid, Utilization: s.util.value(), SMActivity: s.sm.value(), DRAMActivity: s.dram.value(),
		TensorActivity: s.tensor.value(), MemoryUsedBytes: s.memUsed, PowerWatts: s.power.value(), EnergyJoulesTotal: s.energyJ,
		TemperatureC: s.tempMax, ECCUncorrected: s.eccUnc, XIDs: s.xids}
	if s.util.n > 0 || s.power.n > 0 || s.eventsAll != nil {
		ev := s.evidence
		ev.ClockEventsAll = s.eventsAll
		out.Evidence = &ev
	}
	for _, t := range throttleNames {
		if s.reasons&t.bit != 0 && t.bit != gpu.ClockEventGPUIdle {
			out.ThrottleReasons = append(out.ThrottleReasons, t.name)
		}
	}
	return out
}

// summarise returns the samples since the last heartbeat and starts a new
// window; a.mu must be held.
func (a *Agent) summarise() []api.GPUSample {
	var out []api.GPUSample
	for _, uuid := range slices.Sorted(maps.Keys(a.window)) {
		out = append(out, a.window[uuid].sample(uuid))
	}
	a.window = map[string]*summary{}
	return out
}

// sampleLoop reads the GPUs every SampleInterval: samples feed the
// heartbeat summary, accounting and metrics; events feed health.
func (a *Agent) sampleLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.SampleInterval)
	defer t.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.sampleOnce(ctx)
		if n++; n%5 == 0 {
			if err := a.rediscover(ctx); err != nil {
				a.log.Warn("gpu discovery failed", "err", err)
			}
		}
	}
}

// nvlinkRates is each GPU's NVLink data rate between two samples, from
// the byte counters and the samples' times; a counter that went back (the
// driver reloaded) gives no rate.
func nvlinkRates(prev, cur map[string]gpu.Sample) map[string][2]float64 {
	out := map[string][2]float64{}
	for id, c := range cur {
		p, ok := prev[id]
		dt := c.Time.Sub(p.Time).Seconds()
		if !ok || dt <= 0 || c.NVLinkTxBytes == nil || c.NVLinkRxBytes == nil || p.NVLinkTxBytes == nil || p.NVLinkRxBytes == nil ||
			*c.NVLinkTxBytes < *p.NVLinkTxBytes || *c.NVLinkRxBytes < *p.NVLinkRxBytes {
			continue
		}
		out[id] = [2]float64{float64(*c.NVLinkTxBytes-*p.NVLinkTxBytes) / dt, float64(*c.NVLinkRxBytes-*p.NVLinkRxBytes) / dt}
	}
	return out
}

// sampleOnce reads samples and events once.
func (a *Agent) sampleOnce(ctx context.Context) {
	start := time.Now()
	samples, err := a.be.Sample(ctx)
	dur := time.Since(start)
	events, eerr := a.be.Events(ctx, 0)
	now := a.now()
	a.mu.Lock()
	a.sampleOK, a.sampleDur = err == nil, dur
	if err != nil {
		a.mu.Unlock()
		a.log.Warn("reading gpus failed", "err", err)
		return
	}
	prev, prevAt := a.latest, a.latestAt
	cur := map[string]gpu.Sample{}
	for _, s := range samples {
		cur[s.UUID] = s
		w := a.window[s.UUID]
		if w == nil {
			w = &summary{}
			a.window[s.UUID] = w
		}
		w.add(s)
	}
	a.latest, a.latestAt = cur, now
	a.nvlinkRate = nvlinkRates(prev, cur)
	if eerr == nil {
		a.takeEvents(events)
	}
	a.mu.Unlock()
	a.runner.SetProcesses(samples)
	if !prevAt.IsZero() {
		a.runner.AddUsage(account(now, now.Sub(prevAt).Seconds(), prev, cur, a.runner.Holds()), now)
	}
}

// takeEvents records XIDs for the heartbeat and the metrics; the server's
// health rules judge them. a.mu must be held.
func (a *Agent) takeEvents(events []gpu.Event) {
	for _, e := range events {
		if e.Kind != gpu.EventXID {
			continue
		}
		if a.xidCount[e.UUID] == nil {
			a.xidCount[e.UUID] = map[int]float64{}
		}
		a.xidCount[e.UUID][e.XID]++
		a.lastXID[e.UUID] = e.XID
		w := a.window[e.UUID]
		if w == nil {
			w = &summary{}
			a.window[e.UUID] = w
		}
		w.xids = append(w.xids, e.XID)
		a.log.Warn("gpu event", "gpu", e.UUID, "kind", e.Kind, "xid", e.XID)
	}
}

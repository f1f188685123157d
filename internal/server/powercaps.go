package server

import (
	"context"
	"fmt"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/power"
)

// Power caps (docs/POWER.md, "When draws still rise"): with
// Config.PowerCaps the leader answers each heartbeat with a cap for every
// GPU of the node that a measured job holds, its charge as a measured GPU
// (power.Charging.Cap), fixed the first time it is given under that
// holder and kept with the holder's peak in telemetry. A node whose agent
// can set caps (label power-caps=true) has each capped GPU charged its cap
// in its rack's projection; elsewhere the charge stays the peak plus the
// margin and the stop policy (Config.OverBudget) holds the budget.

// powerCaps is the caps for the GPUs of a heartbeat's samples: those a
// measured job holds. Telemetry keeps each cap from the first time it is
// given until the holder leaves.
func (s *Server) powerCaps(samples []api.GPUSample) []api.PowerCap {
	if !s.cfg.PowerCaps || len(samples) == 0 {
		return nil
	}
	charging := power.Charging{PeakMargin: s.cfg.PowerPeakMargin}
	models := newModelCache(s.cat)
	var out []api.PowerCap
	s.tele.mu.Lock()
	defer s.tele.mu.Unlock()
	for _, g := range samples {
		info := s.tele.gpus[g.UUID]
		p, ok := s.tele.drawPeaks[g.UUID]
		if info.holder == "" || !ok || p.holder != info.holder || p.peak == nil {
			continue // free, or not measured under its holder yet
		}
		if p.capW == 0 {
			w, ok := charging.Cap(power.GPUReading{Model: models.gpu(info.model), Held: true, PeakWatts: p.peak})
			if !ok {
				continue
			}
			p.capW = w
			s.tele.drawPeaks[g.UUID] = p
		}
		out = append(out, api.PowerCap{GPU: g.UUID, Watts: p.capW})
	}
	return out
}

// capsEnforced reports whether a node's GPUs are charged the caps the
// server gave them: caps are on and the node's agent sets them.
func (s *Server) capsEnforced(n gpufleet.Node) bool {
	return s.cfg.PowerCaps && n.Labels[gpufleet.PowerCapsLabel] == "true"
}

// storePowerCapFailures records the caps an agent could not set as
// events of its node (node.power_cap_failed); the agent has logged them
// and goes on.
func (s *Server) storePowerCapFailures(ctx context.Context, node string, fs []api.PowerCapFailure) error {
	for _, f := range fs {
		if err := s.st.AppendEvent(ctx, gpufleet.Event{At: s.now(), Actor: "agent:" + node, Kind: "node.power_cap_failed", Object: node,
			Detail: fmt.Sprintf("gpu %s: power cap %.0f W not set: %s", f.GPU, f.Watts, f.Detail)}); err != nil {
			return err
		}
		s.log.Warn("agent could not set a power cap", "node", node, "gpu", f.GPU, "watts", f.Watts, "detail", f.Detail)
	}
	return nil
}

package bench

import (
	"fmt"
	"math"
	"regexp"
	"slices"

	"github.com/gpufleet/gpufleet"
)

// Bounds on what one report of measurements holds.
const (
	// MaxMeasurements bounds one report: the quick set of a full node
	// (ring p2p pairs) with room; it keeps a report far under the API's
	// 1 MiB body cap.
	MaxMeasurements = 4096
	// MaxRuns bounds the runs of one figure.
	MaxRuns = 1000
	// MinRate and MaxRate bound a rate: one byte or operation per second
	// is far below any device, an exa-op per second far above, and within
	// them every figure's spread and ratio stays finite.
	MinRate = 1
	MaxRate = 1e18
	// MaxErrors bounds a measurement's error count (a count of cells: a
	// GPU's memory in 4-byte words is under 2^36).
	MaxErrors = 1 << 40
	maxText   = 256
)

var nameRe = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// ValidateMeasurements checks measurements that crossed a trust boundary
// (an agent's report): field names the list in errors.
func ValidateMeasurements(field string, ms []Measurement) error {
	if len(ms) > MaxMeasurements {
		return fmt.Errorf("%w: %s: %d measurements, at most %d", gpufleet.ErrInvalid, field, len(ms), MaxMeasurements)
	}
	for i := range ms {
		if err := ms[i].validate(fmt.Sprintf("%s[%d]", field, i)); err != nil {
			return err
		}
	}
	return nil
}

func (m *Measurement) validate(field string) error {
	bad := func(sub, format string, args ...any) error {
		return fmt.Errorf("%w: %s.%s: %s", gpufleet.ErrInvalid, field, sub, fmt.Sprintf(format, args...))
	}
	if !nameRe.MatchString(m.Name) {
		return bad("name", "%s: expected a figure name such as copy or gemm-bf16", gpufleet.Quote(m.Name))
	}
	if !slices.Contains(Tests(), m.Test) {
		return bad("test", "%s: expected one of copy, gemm, h2d, p2p, allreduce, memory, stress", gpufleet.Quote(string(m.Test)))
	}
	if m.Precision != "" && !m.Precision.Valid() {
		return bad("precision", "%s: not a precision", gpufleet.Quote(string(m.Precision)))
	}
	if m.GPU < 0 || m.GPU >= gpufleet.MaxNodeGPUs {
		return bad("gpu", "%d: expected 0 to %d", m.GPU, gpufleet.MaxNodeGPUs-1)
	}
	if m.Peer != nil && (*m.Peer < 0 || *m.Peer >= gpufleet.MaxNodeGPUs || *m.Peer == m.GPU) {
		return bad("peer", "%d: expected another GPU index from 0 to %d", *m.Peer, gpufleet.MaxNodeGPUs-1)
	}
	if m.Nodes < 0 || m.Nodes > MaxGroupNodes || m.Nodes == 1 {
		return bad("nodes", "%d: expected 2 to %d, or absent for one node", m.Nodes, MaxGroupNodes)
	}
	if maxGPUs := max(m.Nodes, 1) * gpufleet.MaxNodeGPUs; m.GPUs < 1 || m.GPUs > maxGPUs {
		return bad("gpus", "%d: expected 1 to %d", m.GPUs, maxGPUs)
	}
	if m.Fabric != "" && m.Fabric != FabricNetwork && m.Fabric != FabricNVLink {
		return bad("fabric", "%s: expected network or nvlink", gpufleet.Quote(string(m.Fabric)))
	}
	if len(m.Members) > MaxGroupNodes {
		return bad("members", "%d nodes, at most %d", len(m.Members), MaxGroupNodes)
	}
	for j, n := range m.Members {
		if err := gpufleet.CheckText(fmt.Sprintf("%s.members[%d]", field, j), n, maxText, false); err != nil {
			return err
		}
	}
	for _, t := range []struct{ name, v string }{{"uuid", m.UUID}, {"model", m.Model}, {"size", m.Size}, {"check", m.Check}, {"group", m.Group}} {
		if err := gpufleet.CheckText(field+"."+t.name, t.v, maxText, false); err != nil {
			return err
		}
	}
	if m.UUID == "" || m.Model == "" {
		return bad("uuid", "uuid and model are required")
	}
	if m.Unit != BytesPerS && m.Unit != FLOPPerS && m.Unit != OPPerS {
		return bad("unit", "%s: expected B/s, FLOP/s or OP/s", gpufleet.Quote(string(m.Unit)))
	}
	if m.Errors < 0 || m.Errors > MaxErrors {
		return bad("errors", "%d: expected 0 to %d", m.Errors, MaxErrors)
	}
	if w := m.Watch; w != nil {
		if math.IsNaN(w.MaxTempC) || w.MaxTempC < -50 || w.MaxTempC > 200 {
			return bad("watch.max_temp_c", "%g: expected -50 to 200", w.MaxTempC)
		}
		if math.IsNaN(w.MeanWatts) || w.MeanWatts < 0 || w.MeanWatts > 10000 {
			return bad("watch.mean_watts", "%g: expected 0 to 10000", w.MeanWatts)
		}
		if len(w.Throttle) > 16 {
			return bad("watch.throttle", "%d reasons, at most 16", len(w.Throttle))
		}
		for j, r := range w.Throttle {
			if err := gpufleet.CheckText(fmt.Sprintf("%s.watch.throttle[%d]", field, j), r, 64, false); err != nil {
				return err
			}
		}
	}
	if len(m.Rates) == 0 || len(m.Rates) > MaxRuns {
		return bad("rates", "%d runs: expected 1 to %d", len(m.Rates), MaxRuns)
	}
	for j, r := range m.Rates {
		if math.IsNaN(r) || r < MinRate || r > MaxRate {
			return bad(fmt.Sprintf("rates[%d]", j), "%g: expected a rate from %g to %g per second", r, float64(MinRate), MaxRate)
		}
	}
	return nil
}

package simgpu

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/bench"
)

var _ bench.Backend = (*Backend)(nil)

// What a healthy simulated card delivers of its catalog figure in each
// microbenchmark (docs/BENCH.md). They stand for measured figures of real
// cards, so that the simulated fleet looks like a real one:
const (
	// CopyEfficiency: a large device-to-device copy reaches about 90% of
	// datasheet bandwidth (H200: about 4.3 of 4.8 TB/s as PyTorch measures
	// it, issue 19; H100 SXM about 3.0 of 3.35 TB/s).
	CopyEfficiency = 0.90
	// TensorGEMMEfficiency: a large bf16/fp16 product through cuBLASLt
	// reaches about 80% of dense peak (H200: about 790 of 989 TFLOP/s).
	TensorGEMMEfficiency = 0.80
	// LowPrecisionGEMMEfficiency: fp8 and int8 products reach less of
	// their doubled peak (about 1,300-1,400 of 1,979 TFLOP/s on H100 SXM).
	LowPrecisionGEMMEfficiency = 0.68
	// FP32GEMMEfficiency: SGEMM on the CUDA cores, and TF32 on the tensor
	// cores, reach about 75% of their peak.
	FP32GEMMEfficiency = 0.75
	// FP64GEMMEfficiency: DGEMM reaches about 85% of its peak; on Ampere
	// and Hopper data-center parts (compute capability 8.0 and 9.0) it runs
	// on the FP64 tensor cores, at twice the vector rate the catalog lists.
	FP64GEMMEfficiency = 0.85
	// PCIeEfficiency: pinned host copies reach about 82% of the x16 line
	// rate per direction (about 26 of 31.5 GB/s on Gen4, 52 of 63 on Gen5).
	PCIeEfficiency = 0.82
	// P2PEfficiency: a GPU-to-GPU copy over NVLink reaches about 85% of the
	// per-direction link rate (about 380 of 450 GB/s on H100 SXM).
	P2PEfficiency = 0.85
	// AllReduceEfficiency: NCCL all-reduce bus bandwidth is about 80% of
	// the per-direction NVLink rate (H100 about 370 of 450 GB/s,
	// nccl-tests#212; the planner's linkEfficiency).
	AllReduceEfficiency = 0.80
	// CardSpread is the card-to-card variation of healthy GPUs of one
	// model: each simulated card's figures sit within ±1.5% of the model's.
	CardSpread = 0.015
	// RunNoise is the run-to-run noise of one figure (standard deviation,
	// as a fraction).
	RunNoise = 0.005
	// SlowMemoryFactor is what FaultSlowMemory leaves of memory bandwidth.
	SlowMemoryFactor = 0.6
	// MemoryPatternEfficiency: the memory test's passes (write a pattern,
	// read it back and compare) reach less than a plain copy. A modelling
	// choice for the simulated cards: no published figure was found.
	MemoryPatternEfficiency = 0.7
	// MemoryErrorsPerFault is how many cells read back wrong on a card
	// with an uncorrectable ECC fault or a failed row remap (simulated).
	MemoryErrorsPerFault = 4
)

// benchCard is what one device delivers now, for the bench.
type benchCard struct {
	index int
	uuid  string
	model catalog.GPU
	// factors of the healthy figure, from faults and the clock.
	compute, memory, pcie float64
	linksUp, links        int  // NVLink
	nicDown               bool // its rail of the scale-out network
	card                  float64
	rng                   *rand.Rand
	// stress is what the card does under the long level's sustained
	// products; memErrors the cells its memory reads back wrong.
	stress    stressRun
	memErrors int64
}

// stressRun is a card held at full compute load for the stress's length:
// the clock factor it settles at, what it draws and how hot it gets, the
// throttle reasons on the way, and the errors (XIDs) it raised.
type stressRun struct {
	factor, watts, tempC float64
	throttle             []string
	errors               int64
}

// Measure answers the microbenchmarks from each GPU's catalog model, the
// efficiencies above, a small card-to-card spread and run-to-run noise,
// and the active faults: a throttled or power-braked card computes at its
// clock factor, slow-memory copies at SlowMemoryFactor, a PCIe downgrade
// cuts host copies to the lower link, NVLink links down cut p2p and
// all-reduce in proportion (through host memory when all are down). GPUs in
// MIG mode or off the bus are skipped, as CUDA would not see them whole.
func (b *Backend) Measure(ctx context.Context, o bench.Options, progress func(string)) ([]bench.Measurement, error) {
	if progress == nil {
		progress = func(string) {}
	}
	b.mu.Lock()
	var cards []benchCard
	for _, d := range b.devs {
		if !o.Selects(d.info.Index) {
			continue
		}
		b.advance(d)
		if d.gone {
			progress(fmt.Sprintf("gpu %d: off the bus, skipped", d.info.Index))
			continue
		}
		if d.info.MIGMode {
			progress(fmt.Sprintf("gpu %d: in MIG mode, skipped (CUDA sees only its instances)", d.info.Index))
			continue
		}
		cards = append(cards, b.benchCard(d))
	}
	b.mu.Unlock()
	var out []bench.Measurement
	runs := o.Runs()
	measure := func(c *benchCard, m bench.Measurement, rate float64) {
		m.GPU, m.UUID, m.Model = c.index, c.uuid, c.model.ID
		if m.GPUs == 0 {
			m.GPUs = 1
		}
		for range runs {
			m.Rates = append(m.Rates, rate*c.card*(1+RunNoise*c.rng.NormFloat64()))
		}
		out = append(out, m)
	}
	size := func(full, quick string) string {
		if o.Quick || o.Level == bench.LevelQuick {
			return quick
		}
		return full
	}
	for i := range cards {
		c := &cards[i]
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g := c.model
		if o.Wants(bench.Copy) {
			progress(fmt.Sprintf("gpu %d: copy %s x%d", c.index, size("4 GiB", "1 GiB"), runs))
			measure(c, bench.Measurement{Name: "copy", Test: bench.Copy, Size: size("4 GiB", "1 GiB"), Unit: bench.BytesPerS,
				Check: "copied bytes equal the source"}, g.MemoryBandwidthBytesPerS*CopyEfficiency*c.memory)
		}
		if o.Wants(bench.GEMM) {
			for _, p := range gpufleet.Precisions() {
				peak := g.PeakFLOPS[p]
				if peak == nil {
					continue
				}
				if p == gpufleet.FP4 {
					progress(fmt.Sprintf("gpu %d: fp4 not measured yet", c.index))
					continue
				}
				eff := TensorGEMMEfficiency
				switch p {
				case gpufleet.FP8, gpufleet.INT8:
					eff = LowPrecisionGEMMEfficiency
				case gpufleet.FP32, gpufleet.TF32:
					eff = FP32GEMMEfficiency
				case gpufleet.FP64:
					eff = FP64GEMMEfficiency
					if cc := g.ComputeCapability; cc.Major == 9 && cc.Minor == 0 || cc.Major == 8 && cc.Minor == 0 {
						eff *= 2
					}
				}
				n := size("8192", "4096")
				progress(fmt.Sprintf("gpu %d: gemm %s %sx%sx%s x%d", c.index, p, n, n, n, runs))
				measure(c, bench.Measurement{Name: bench.GEMMName(p), Test: bench.GEMM, Precision: p, Size: n + "x" + n + "x" + n,
					Unit: bench.GEMMUnit(p), Check: "rel err within the precision's limit on 64 sampled elements"}, *peak*eff*c.compute)
			}
		}
		if o.Wants(bench.Memory) {
			progress(fmt.Sprintf("gpu %d: memory patterns (%d) over 90%% of %s x%d", c.index, len(bench.MemoryPatterns), fmt.Sprintf("%.0f GiB", float64(g.MemoryBytes)/(1<<30)), runs))
			m := bench.Measurement{Name: "memory", Test: bench.Memory, Size: fmt.Sprintf("%d patterns over 90%% of memory", len(bench.MemoryPatterns)),
				Unit: bench.BytesPerS, Errors: c.memErrors, Check: "every cell read back the pattern written: " + strings.Join(bench.MemoryPatterns, ", ")}
			measure(c, m, g.MemoryBandwidthBytesPerS*MemoryPatternEfficiency*c.memory)
		}
		if o.Wants(bench.Stress) {
			p := gpufleet.BF16
			if g.PeakFLOPS[p] == nil {
				p = gpufleet.FP32
			}
			if peak := g.PeakFLOPS[p]; peak != nil {
				st := c.stress
				progress(fmt.Sprintf("gpu %d: stress, %s products for %ds, power and temperature watched", c.index, p, bench.StressSeconds))
				m := bench.Measurement{Name: "stress-" + string(p), Test: bench.Stress, Precision: p, Size: fmt.Sprintf("%ds sustained", bench.StressSeconds),
					Unit: bench.FLOPPerS, Errors: st.errors, Watch: &bench.Watch{MaxTempC: st.tempC, MeanWatts: st.watts, Throttle: st.throttle}}
				eff := TensorGEMMEfficiency
				if p == gpufleet.FP32 {
					eff = FP32GEMMEfficiency
				}
				measure(c, m, *peak*eff*st.factor)
			}
		}
		if o.Wants(bench.H2D) {
			line := bench.PCIeBytesPerS(g.PCIeGen)
			if line == 0 {
				line = bench.PCIeBytesPerS(4)
			}
			for _, name := range []string{"h2d", "d2h"} {
				progress(fmt.Sprintf("gpu %d: %s %s pinned x%d", c.index, name, size("1 GiB", "256 MiB"), runs))
				measure(c, bench.Measurement{Name: name, Test: bench.H2D, Size: size("1 GiB", "256 MiB") + " pinned", Unit: bench.BytesPerS},
					line*PCIeEfficiency*c.pcie)
			}
		}
	}
	if len(cards) < 2 {
		if o.Wants(bench.P2P) || o.Wants(bench.AllReduce) {
			progress("p2p and allreduce skipped: they need two GPUs or more")
		}
		return out, nil
	}
	if o.Wants(bench.P2P) {
		for _, p := range o.Pairs(len(cards)) {
			a, z := &cards[p[0]], &cards[p[1]]
			rate, path := b.pairRate(a, z)
			peer := z.index
			progress(fmt.Sprintf("gpu %d -> %d: p2p %s x%d", a.index, z.index, size("1 GiB", "256 MiB"), runs))
			measure(a, bench.Measurement{Name: "p2p", Test: bench.P2P, Peer: &peer, Size: size("1 GiB", "256 MiB") + " " + path,
				Unit: bench.BytesPerS}, rate)
		}
	}
	if o.Wants(bench.AllReduce) {
		first := &cards[0]
		busbw := b.ringBusBW(cards)
		progress(fmt.Sprintf("allreduce over %d gpus: %s x%d", len(cards), size("512 MiB", "128 MiB"), runs))
		measure(first, bench.Measurement{Name: "allreduce", Test: bench.AllReduce, GPUs: len(cards), Size: size("512 MiB", "128 MiB") + " float32 sum",
			Unit: bench.BytesPerS, Check: "sums equal n(n+1)/2"}, busbw)
	}
	return out, nil
}

// ringBusBW is the bus bandwidth of an all-reduce over cards, before
// card spread and noise: the ring runs at the pace of its slowest link.
func (b *Backend) ringBusBW(cards []benchCard) float64 {
	slowest := 0.0
	for i := range cards {
		r, _ := b.pairRate(&cards[i], &cards[(i+1)%len(cards)])
		if i == 0 || r < slowest {
			slowest = r
		}
	}
	return slowest / P2PEfficiency * AllReduceEfficiency
}

// pairRate is what a copy from a to z reaches before card spread and
// noise, and the path it takes.
func (b *Backend) pairRate(a, z *benchCard) (float64, string) {
	g := a.model
	pcie := bench.PCIeBytesPerS(g.PCIeGen) * PCIeEfficiency * min(a.pcie, z.pcie)
	if g.InterconnectKind != catalog.InterconnectNVLink || a.links == 0 || a.model.ID != z.model.ID ||
		!slices.Contains(b.devs[a.index].info.NVLinkPeers, z.index) {
		return pcie, "over PCIe"
	}
	up := min(float64(a.linksUp)/float64(a.links), float64(z.linksUp)/float64(z.links))
	if up == 0 {
		return pcie, "through host (NVLink down)"
	}
	return g.InterconnectBandwidthBytesPerS / 2 * P2PEfficiency * up, "over NVLink"
}

// benchCard reads what device d delivers now; b.mu must be held.
func (b *Backend) benchCard(d *device) benchCard {
	h := fnv.New64a()
	h.Write([]byte(d.info.UUID))
	seed := h.Sum64()
	card := rand.New(rand.NewPCG(seed, 1))
	c := benchCard{
		index: d.info.Index, uuid: d.info.UUID, model: d.model,
		compute: d.state().factor, memory: 1, pcie: 1,
		links: d.tr.nvlinks, linksUp: d.tr.nvlinks,
		card: 1 + CardSpread*(2*card.Float64()-1),
		rng:  rand.New(rand.NewPCG(seed, uint64(d.last.UnixNano()))),
	}
	if _, ok := d.faults[FaultSlowMemory]; ok {
		c.memory = SlowMemoryFactor
	}
	if _, ok := d.faults[FaultPCIeDowngrade]; ok {
		gen := d.tr.pcieGen
		if lo := bench.PCIeBytesPerS(max(gen-1, 1)); lo > 0 && bench.PCIeBytesPerS(gen) > 0 {
			c.pcie = lo / bench.PCIeBytesPerS(gen) / 2
		}
	}
	if f, ok := d.faults[FaultNVLinkDown]; ok {
		c.linksUp = max(0, c.links-f.Links)
	}
	_, c.nicDown = d.faults[FaultNICDown]
	for _, k := range []FaultKind{FaultECCDoubleBit, FaultRowRemapFailure} {
		if _, ok := d.faults[k]; ok {
			c.memErrors += MemoryErrorsPerFault
		}
	}
	c.stress = b.stressOf(d)
	return c
}

// stressOf is device d held at full compute load until its temperature
// settles: the thermal model of the telemetry (AmbientC plus the thermal
// resistance times the draw, a runaway's overshoot), the slowdown it
// brings, a power brake, and the power limit; b.mu must be held.
func (b *Backend) stressOf(d *device) stressRun {
	tr := d.tr
	pc := profiles[LoadCompute]
	s := stressRun{factor: 1}
	_, brake := d.faults[FaultPowerBrake]
	if brake {
		s.factor = PowerBrakeClockFactor
		s.throttle = append(s.throttle, "hw_power_brake", "hw_slowdown")
	}
	s.watts = tr.idle + s.factor*max(pc.powerOfTDP*tr.tdp-tr.idle, 0)
	if limit := d.powerLimit(); s.watts > limit {
		if s.watts > tr.idle {
			s.factor *= max(limit-tr.idle, 0) / (s.watts - tr.idle)
		}
		s.watts = limit
		s.throttle = append(s.throttle, "sw_power_cap")
	}
	s.tempC = AmbientC + tr.rth*s.watts
	if _, ok := d.faults[FaultThermalRunaway]; ok {
		s.tempC = max(s.tempC, tr.slowdown+RunawayOvershootC)
	}
	if s.tempC >= tr.slowdown {
		s.factor = min(s.factor, max(MinClockFactor, 1-ThrottlePerC*(s.tempC-tr.slowdown)))
		s.throttle = append(s.throttle, "sw_thermal")
		if s.tempC >= tr.slowdown+HWSlowdownMarginC {
			s.throttle = append(s.throttle, "hw_thermal", "hw_slowdown")
		}
	}
	slices.Sort(s.throttle)
	s.throttle = slices.Compact(s.throttle)
	if _, ok := d.faults[FaultXID]; ok {
		s.errors++
	}
	if _, ok := d.faults[FaultECCDoubleBit]; ok {
		s.errors++
	}
	return s
}

package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// Figure is one measured figure of one GPU (or, for allreduce, of the
// GPUs of a node), with the catalog's spec beside it.
type Figure struct {
	Measurement
	// Value is the median of the runs' rates.
	Value float64 `json:"value"`
	// Spread is the runs' (max - min) / median: run-to-run variation.
	Spread float64 `json:"spread"`
	// Runs is how many timed runs the median is of.
	Runs int `json:"runs"`
	// Spec is the catalog's figure for the same thing (datasheet memory
	// bandwidth, dense peak of the precision, PCIe or NVLink line rate per
	// direction); absent where the catalog has none.
	Spec *float64 `json:"spec"`
	// Ratio is Value / Spec.
	Ratio *float64 `json:"ratio"`
}

// Summarize turns measurements into figures: the median and spread of
// each one's runs, the spec of its GPU model from cat, and the ratio.
// Measurements without runs are dropped; a model the catalog does not
// know gets no spec. For p2p, each GPU also gets a figure with no peer:
// the median over the pairs it takes part in (either direction), the one
// the fleet rule judges, so a slow link shows on the GPU that has it and
// not on its every peer.
func Summarize(cat *catalog.Catalog, ms []Measurement) []Figure {
	var out []Figure
	pairs := map[string][]float64{} // UUID -> medians of the pairs it is in
	byIndex := map[int]Measurement{}
	for _, m := range ms {
		if len(m.Rates) == 0 {
			continue
		}
		f := Figure{Measurement: m, Runs: len(m.Rates)}
		f.Rates = slices.Clone(m.Rates)
		f.Value, f.Spread = medianSpread(m.Rates)
		if g, err := cat.Lookup(m.Model); err == nil {
			f.Spec = Spec(g, m)
		}
		if f.Spec != nil && *f.Spec > 0 {
			f.Ratio = ptr(f.Value / *f.Spec)
		}
		out = append(out, f)
		if m.Test == P2P && m.Peer != nil {
			pairs[m.UUID] = append(pairs[m.UUID], f.Value)
			byIndex[m.GPU] = m
		}
	}
	// A pair also counts for its destination.
	for _, f := range out {
		if f.Test == P2P && f.Peer != nil {
			if d, ok := byIndex[*f.Peer]; ok {
				pairs[d.UUID] = append(pairs[d.UUID], f.Value)
			}
		}
	}
	for _, i := range sortedKeys(byIndex) {
		m := byIndex[i]
		vals := pairs[m.UUID]
		med, _ := medianSpread(vals)
		f := Figure{Measurement: Measurement{Name: "p2p", Test: P2P, GPU: m.GPU, UUID: m.UUID, Model: m.Model, GPUs: 1,
			Size: fmt.Sprintf("median of %d pair directions", len(vals)), Unit: BytesPerS, Rates: vals}, Value: med, Runs: len(vals)}
		_, f.Spread = medianSpread(vals)
		if g, err := cat.Lookup(m.Model); err == nil {
			f.Spec = Spec(g, f.Measurement)
		}
		if f.Spec != nil && *f.Spec > 0 {
			f.Ratio = ptr(f.Value / *f.Spec)
		}
		out = append(out, f)
	}
	slices.SortStableFunc(out, func(a, b Figure) int { return compareFigures(a, b) })
	return out
}

// compareFigures orders figures by GPU, test order, name, then peer,
// with the node's all-reduce last.
func compareFigures(a, b Figure) int {
	if ar, br := a.Test == AllReduce, b.Test == AllReduce; ar != br {
		if ar {
			return 1
		}
		return -1
	}
	if a.GPU != b.GPU {
		return a.GPU - b.GPU
	}
	if ta, tb := slices.Index(Tests(), a.Test), slices.Index(Tests(), b.Test); ta != tb {
		return ta - tb
	}
	if a.Name != b.Name {
		return nameRank(a.Name) - nameRank(b.Name)
	}
	pa, pb := -1, -1
	if a.Peer != nil {
		pa = *a.Peer
	}
	if b.Peer != nil {
		pb = *b.Peer
	}
	return pa - pb
}

// nameRank orders figure names: products widest precision first, h2d
// before d2h.
func nameRank(n string) int {
	for i, p := range gpufleet.Precisions() {
		if n == GEMMName(p) {
			return i
		}
	}
	if n == "d2h" {
		return 1
	}
	return 0
}

func sortedKeys[V any](m map[int]V) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func ptr[T any](v T) *T { return &v }

// Median returns the median of vs (0 for none).
func Median(vs []float64) float64 {
	m, _ := medianSpread(vs)
	return m
}

// medianSpread returns the median of vs and (max - min) / median.
func medianSpread(vs []float64) (float64, float64) {
	if len(vs) == 0 {
		return 0, 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	if med <= 0 {
		return med, 0
	}
	return med, (s[n-1] - s[0]) / med
}

// pcieLaneBytesPerS is one PCIe lane's data rate per direction after
// line encoding, by generation: 8b/10b for gens 1-2, 128b/130b for 3-5
// (PCI-SIG specifications; 3.938 GB/s per lane for Gen5 x1).
var pcieLaneBytesPerS = map[int]float64{1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}

// PCIeBytesPerS is the per-direction rate of an x16 link of generation
// gen, 0 when unknown.
func PCIeBytesPerS(gen int) float64 { return 16 * pcieLaneBytesPerS[gen] }

// Spec is the catalog's figure for measurement m on GPU model g, nil
// where the catalog has none:
//   - copy: the datasheet memory bandwidth;
//   - gemm-P: the dense peak of precision P (for fp64 the catalog's
//     figure, which for Hopper and Ampere data-center parts is the vector
//     rate; DGEMM runs on the FP64 tensor cores at twice that);
//   - h2d, d2h: the x16 PCIe line rate per direction of the card's
//     generation;
//   - p2p, allreduce: the NVLink bandwidth per direction (the catalog's
//     both-directions figure halved) inside an NVLink domain, else the
//     PCIe line rate per direction. Allreduce is judged as bus bandwidth,
//     which nccl-tests defines so that it compares with the link rate.
//     An all-reduce across nodes over the network has none: the catalog
//     knows the GPUs, not the NICs.
func Spec(g catalog.GPU, m Measurement) *float64 {
	switch m.Test {
	case Copy, Memory:
		return positive(g.MemoryBandwidthBytesPerS)
	case GEMM, Stress:
		if v := g.PeakFLOPS[m.Precision]; v != nil {
			return positive(*v)
		}
	case H2D:
		return positive(PCIeBytesPerS(g.PCIeGen))
	case P2P, AllReduce:
		if m.Nodes > 1 && m.Fabric != FabricNVLink {
			return nil
		}
		if g.InterconnectKind == catalog.InterconnectNVLink && g.DomainSize > 1 {
			return positive(g.InterconnectBandwidthBytesPerS / 2)
		}
		return positive(PCIeBytesPerS(g.PCIeGen))
	}
	return nil
}

func positive(v float64) *float64 {
	if v > 0 && !math.IsInf(v, 0) {
		return &v
	}
	return nil
}

// Human writes a rate for people: "3.01 TB/s", "712 TFLOP/s".
func Human(v float64, u Unit) string {
	unit := strings.TrimSuffix(string(u), "/s")
	switch {
	case v >= 1e15:
		return fmt.Sprintf("%.3g P%s/s", v/1e15, unit)
	case v >= 1e12:
		return fmt.Sprintf("%.3g T%s/s", v/1e12, unit)
	case v >= 1e9:
		return fmt.Sprintf("%.3g G%s/s", v/1e9, unit)
	case v >= 1e6:
		return fmt.Sprintf("%.3g M%s/s", v/1e6, unit)
	}
	return fmt.Sprintf("%.3g %s/s", v, unit)
}

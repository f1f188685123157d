package planner

import (
	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// Fallback says what happens when a card lacks native support for a format.
type Fallback string

// Fallbacks.
const (
	// FallbackEmulated: the framework upcasts and computes in a wider format
	// the card has (bf16 on V100 runs at the fp32 rate).
	FallbackEmulated Fallback = "emulated"
	// FallbackDequantized: weights stay small in memory (the bandwidth and
	// capacity win holds) but are widened to 16 bits before the matmul, so
	// compute runs without the low-precision speedup (W4A16, FP8 weight-only
	// kernels on Ampere).
	FallbackDequantized Fallback = "dequantized"
	// FallbackUnsupported: common serving stacks have no kernel for it.
	FallbackUnsupported Fallback = "unsupported"
)

// computeSupport is how a card computes with weights in format f.
type computeSupport struct {
	native   bool
	fallback Fallback // empty when native
	peak     float64  // dense FLOP/s the GEMMs run at
	computeP gpufleet.Precision
}

// ccAtLeast reports whether an NVIDIA compute capability "X.Y" is at least
// major.minor. Non-NVIDIA cards (no capability) report true: their support
// is read from the catalog's peak table alone.
func ccAtLeast(g catalog.GPU, major, minor int) bool {
	return g.ComputeCapability.IsZero() || g.ComputeCapability.AtLeast(gpufleet.ComputeCapability{Major: major, Minor: minor})
}

// wideCompute is the best 16-bit (or failing that 32-bit) format a card
// computes natively, used for emulated and dequantized runs.
func wideCompute(g catalog.GPU, prefer gpufleet.Precision) (gpufleet.Precision, float64) {
	order := []gpufleet.Precision{prefer, gpufleet.BF16, gpufleet.FP16, gpufleet.TF32, gpufleet.FP32}
	for _, p := range order {
		if v, ok := g.Peak(p); ok {
			return p, v
		}
	}
	return gpufleet.FP32, 0
}

// support decides how g runs GEMMs with weights (and activations) in f.
func support(g catalog.GPU, f Format) computeSupport {
	direct := map[Format]gpufleet.Precision{
		FormatFP32: gpufleet.FP32, FormatBF16: gpufleet.BF16, FormatFP16: gpufleet.FP16,
		FormatFP8: gpufleet.FP8, FormatINT8: gpufleet.INT8, FormatFP4: gpufleet.FP4,
	}
	if p, ok := direct[f]; ok {
		if v, ok := g.Peak(p); ok {
			return computeSupport{native: true, peak: v, computeP: p}
		}
	}
	switch f {
	case FormatBF16, FormatFP16, FormatFP32:
		p, v := wideCompute(g, gpufleet.FP16)
		if v == 0 {
			return computeSupport{fallback: FallbackUnsupported}
		}
		return computeSupport{fallback: FallbackEmulated, peak: v, computeP: p}
	case FormatINT4:
		// Weight-only 4-bit kernels (Marlin, AWQ, exllama) need Turing or newer.
		if !ccAtLeast(g, 7, 5) {
			return computeSupport{fallback: FallbackUnsupported}
		}
	case FormatFP8, FormatFP4:
		// FP8/FP4 weight-only (Marlin) kernels need Ampere or newer.
		if !ccAtLeast(g, 8, 0) {
			return computeSupport{fallback: FallbackUnsupported}
		}
	case FormatINT8:
		if !ccAtLeast(g, 7, 0) {
			return computeSupport{fallback: FallbackUnsupported}
		}
	}
	p, v := wideCompute(g, gpufleet.BF16)
	if v == 0 {
		return computeSupport{fallback: FallbackUnsupported}
	}
	return computeSupport{fallback: FallbackDequantized, peak: v, computeP: p}
}

// kvNative reports whether the card stores and reads the KV cache in f
// natively (FP8 KV cache needs Ada or Hopper and newer on NVIDIA).
func kvNative(g catalog.GPU, f Format) bool {
	if f != FormatFP8 {
		return true
	}
	_, ok := g.Peak(gpufleet.FP8)
	return ok
}

// link describes the fabric a collective runs over.
type link struct {
	bytesPerS float64 // per direction, achieved
	alpha     float64 // latency per collective step
	kind      string  // "nvlink", "pcie", "network"
}

// intraLink is the fabric between GPUs of one domain.
func intraLink(g catalog.GPU) link {
	perDir := g.InterconnectBandwidthBytesPerS / 2
	alpha := collectiveLatencyS
	kind := string(g.InterconnectKind)
	if g.InterconnectKind == catalog.InterconnectPCIe || g.DomainSize <= 1 {
		alpha = pcieCollectiveLatencyS
		kind = "pcie"
	}
	return link{bytesPerS: perDir * linkEfficiency, alpha: alpha, kind: kind}
}

// pcieLink is PCIe between GPUs of one host outside an NVLink domain.
func pcieLink(g catalog.GPU) link {
	gen := g.PCIeGen
	if gen == 0 {
		gen = 4
	}
	// x16 per direction: gen3 16 GB/s, gen4 32, gen5 64.
	perDir := 16e9
	for i := 3; i < gen; i++ {
		perDir *= 2
	}
	return link{bytesPerS: perDir * linkEfficiency, alpha: pcieCollectiveLatencyS, kind: "pcie"}
}

// networkLink is the scale-out network between nodes.
func networkLink() link {
	return link{bytesPerS: interNodeBytesPerSPerGPU * linkEfficiency, alpha: interNodeLatencyS, kind: "network"}
}

// groupLink is the slowest link a group of n GPUs spans, placed
// domain-first: the domain's fabric up to its size, PCIe within one host of
// 8 GPUs beyond that, and the network across hosts.
func groupLink(g catalog.GPU, n int) link {
	dom := max(g.DomainSize, 1)
	switch {
	case n <= 1:
		return link{bytesPerS: 1e18, kind: "none"}
	case n <= dom:
		return intraLink(g)
	case n <= gpusPerHost:
		return pcieLink(g)
	}
	return networkLink()
}

// allReduceTime is a ring all-reduce of bytes per rank over n ranks. The
// latency term is one alpha per collective: NCCL's low-latency protocol keeps
// small-message latency near constant inside a node.
func allReduceTime(bytes float64, n int, l link) float64 {
	if n <= 1 || bytes <= 0 {
		return 0
	}
	f := float64(n)
	return 2*(f-1)/f*bytes/l.bytesPerS + l.alpha
}

// allGatherTime is a ring all-gather (or reduce-scatter) of bytes per rank.
func allGatherTime(bytes float64, n int, l link) float64 {
	if n <= 1 || bytes <= 0 {
		return 0
	}
	f := float64(n)
	return (f-1)/f*bytes/l.bytesPerS + l.alpha
}

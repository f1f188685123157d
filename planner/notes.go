package planner

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/model"
)

// gb prints bytes in GiB for notes, as NVML counts memory.
func gb(b float64) string { return fmt.Sprintf("%.1f GiB", b/(1<<30)) }

// perParam prints a storage size per parameter.
func perParam(b float64) string {
	if b == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%.3g bytes", b)
}

// notes explains a candidate in plain language.
func (s shape) notes(r Request, h hw, l layout, c *Candidate) []string {
	g := h.gpu
	cfg := s.cfg
	out := s.weightNotes(r)
	if h.overhead > 0 {
		out = append(out, fmt.Sprintf("%s runs virtualized here: the estimates count the mechanism's %.0f%% overhead", g.ID, h.overhead*100))
	}
	m := c.MemoryPerGPU
	if !c.Fits {
		held := "the card holds " + gb(float64(m.CapacityBytes))
		if m.Reserve != nil {
			held += fmt.Sprintf(", of which %s keeps %s free", r.Engine, gb((1-m.Reserve.Cap)*float64(m.CapacityBytes)))
		}
		out = append(out, fmt.Sprintf("does not fit: needs %s per GPU with %d GPUs (tp %d, pp %d), %s",
			gb(float64(m.TotalBytes)), c.GPUs, l.tp, l.pp, held))
	}
	if m.Reserve != nil {
		if _, note := profileFor(r.Engine); note != "" {
			out = append(out, note)
		}
		if r.Mode == Inference {
			out = append(out, fmt.Sprintf("%s keeps the activation peak of a %d-token forward pass free of KV cache: %s",
				r.Engine, m.Reserve.ProfileTokens, m.Reserve.ProfileSizedBy))
		}
	}
	if m.Reserve != nil && r.MaxModelLen > 0 && c.KVCacheTokens != nil && *c.KVCacheTokens < int64(r.MaxModelLen) {
		out = append(out, fmt.Sprintf("the engine will not start: its KV cache holds %d tokens, less than one sequence of max_model_len %d; lower --max-model-len or add GPUs",
			*c.KVCacheTokens, r.MaxModelLen))
	}
	if m.Reserve != nil && c.Fits && c.KVCacheTokens != nil {
		ctx := r.InputTokens + r.OutputTokens
		kv := float64(*c.KVCacheTokens) * s.kvBytesPerSeq(pagedBlockTokens, r.KVPrecision, l) / pagedBlockTokens
		free := float64(m.CapacityBytes-(m.TotalBytes-*m.KVCacheBytes)) - kv
		out = append(out, fmt.Sprintf("%s (%s %.2f) allocates %s of KV cache per GPU: %d tokens per replica, %d sequences of %d; it leaves %s of each GPU free",
			r.Engine, engineCapName(r.Engine), m.Reserve.Cap, gb(kv), *c.KVCacheTokens, *c.KVCacheTokens/int64(ctx), ctx, gb(free)))
		if c.KVCacheTokensLow != nil {
			p := r.engineProfile()
			rows := "no dev rows: the widest band of any profile"
			if p.kvRows != "" {
				rows = "dev rows " + p.kvRows
			}
			out = append(out, fmt.Sprintf("the KV cache may really be %d to %d tokens (the %s profile was %+.0f%% to %+.0f%% off on its %s); admission plans on %d",
				*c.KVCacheTokensLow, *c.KVCacheTokensHigh, p.label, 100*p.kv.under, 100*p.kv.over, rows, *c.KVCacheTokensLow))
		}
	}
	switch {
	case c.PrecisionFallback == nil:
	case *c.PrecisionFallback == FallbackUnsupported:
		out = append(out, fmt.Sprintf("%s is not supported on %s (%s): no common kernel runs it; pick another precision", r.Precision, g.ID, g.Architecture))
	case *c.PrecisionFallback == FallbackDequantized && r.Mode == Training:
		out = append(out, fmt.Sprintf("%s training is not native on %s: it runs in %s, memory and matmuls alike, and the plan's figures are %s's",
			r.Precision, g.ID, h.sup.computeP, h.sup.computeP))
	case *c.PrecisionFallback == FallbackDequantized:
		stay := perParam(r.Precision.BytesPerElement()) + " per parameter"
		if s.wt != nil {
			stay = "as the checkpoint stores them"
		}
		out = append(out, fmt.Sprintf("%s is not native on %s: weights stay %s (the memory saving holds) but matmuls run in %s, without the %s speedup",
			r.Precision, g.ID, stay, h.sup.computeP, r.Precision))
	case *c.PrecisionFallback == FallbackEmulated:
		out = append(out, fmt.Sprintf("%s is not native on %s: it is emulated in %s at %.0f TFLOPS", r.Precision, g.ID, h.sup.computeP, h.sup.peak/1e12))
	}
	if !kvNative(g, r.KVPrecision) {
		out = append(out, fmt.Sprintf("an %s KV cache is not native on %s: engines store it but convert on every read", r.KVPrecision, g.ID))
	}
	if r.Recompute == RecomputeAuto && c.Recompute != nil && *c.Recompute == RecomputeFull {
		out = append(out, "selective recompute does not fit this layout: full recompute keeps only each layer's input and runs the forward pass twice (a third more compute)")
	}
	if cfg.IsMoE() && l.ep > 1 {
		out = append(out, fmt.Sprintf("expert parallelism %d: %d of %d experts per GPU; the busiest rank takes %.2fx the mean tokens (with an expert load balancer; without one up to 2.5x) and sets the pace",
			l.ep, max(1, cfg.NumExperts/l.ep), cfg.NumExperts, expertImbalance))
	}
	if r.Mode == Inference {
		ctx := r.InputTokens + r.OutputTokens
		if cfg.MaxPositionEmbeddings > 0 && ctx > cfg.MaxPositionEmbeddings {
			out = append(out, fmt.Sprintf("context %d exceeds the model's max_position_embeddings %d", ctx, cfg.MaxPositionEmbeddings))
		}
		if cfg.SlidingWindow > 0 && ctx > cfg.SlidingWindow {
			out = append(out, fmt.Sprintf("sliding-window layers keep only %d tokens of KV cache", cfg.SlidingWindow))
		}
		if c.Bound != nil && c.DecodeArithmeticIntensity != nil {
			switch *c.Bound {
			case BoundMemory:
				out = append(out, fmt.Sprintf("decode is memory-bound: %.1f FLOP per byte against a ridge point of %.0f; more bandwidth helps, more FLOPS do not",
					*c.DecodeArithmeticIntensity, c.RidgePoint))
			case BoundCompute:
				out = append(out, fmt.Sprintf("decode is compute-bound at batch %d: %.0f FLOP per byte, above the ridge point of %.0f", *c.Batch, *c.DecodeArithmeticIntensity, c.RidgePoint))
			case BoundInterconnect:
				out = append(out, fmt.Sprintf("decode is interconnect-bound: tensor parallelism %d over %s costs more than the matmuls", l.tp, tpLink(g, l.tp).kind))
			}
		}
		if cfg.IsMoE() && c.Batch != nil {
			out = append(out, fmt.Sprintf("mixture of experts: a decode step of %d tokens reads %.0f%% of the routed experts", *c.Batch, 100*s.moe(l, float64(*c.Batch)).touched))
		}
		if l.ep > l.tp {
			out = append(out, fmt.Sprintf("expert parallelism %d spans %d replicas: each MoE layer sends the tokens to their experts and back all-to-all over %s",
				l.ep, l.ep/l.tp, groupLink(g, l.ep).kind))
		}
		if c.MaxBatch != nil && c.Batch != nil && *c.MaxBatch > 0 && *c.Batch > *c.MaxBatch {
			out = append(out, fmt.Sprintf("batch %d does not fit; at most %d sequences of %d tokens fit per replica", *c.Batch, *c.MaxBatch, ctx))
		}
	}
	if l.tp > 1 {
		k := tpLink(g, l.tp).kind
		if k == "pcie" || k == "network" {
			out = append(out, fmt.Sprintf("tensor parallelism %d runs over %s, not NVLink: every layer waits on it", l.tp, k))
		}
	}
	if l.pp > 1 && l.tp*l.pp > max(g.DomainSize, 1) {
		out = append(out, fmt.Sprintf("the replica spans %d GPUs, beyond one %d-GPU NVLink domain: pipeline stages talk over the network", l.tp*l.pp, max(g.DomainSize, 1)))
	}
	if g.PricePerHourUSD == nil {
		out = append(out, "no price in the catalog: cost unknown (add one with --catalog)")
	}
	if g.TDPWatts == nil {
		out = append(out, "no published TDP: energy unknown")
	}
	return out
}

// weightNotes say where an inference plan's weights come from when the
// model describes its quantisation or the request carries a checkpoint,
// and what the requested precision then means.
func (s shape) weightNotes(r Request) []string {
	out := []string{}
	q := s.cfg.Quantization
	if r.Mode == Training {
		if q != nil && q.Known {
			out = append(out, fmt.Sprintf("training counts the weights at %s (the copy being trained); the checkpoint's quantization_config (%s) applies to inference", r.Precision, q.Method))
		}
		return out
	}
	if s.wt != nil {
		out = append(out, s.wt.note)
	}
	switch {
	case q == nil:
	case !q.Known && s.wt == nil:
		out = append(out, fmt.Sprintf("quantization_config quant_method %s is not one the planner reads (%s): weights are counted at %s",
			strconv.Quote(q.Method), strings.Join(model.QuantMethods(), ", "), r.Precision))
	case !q.Known:
	case !r.precisionGiven:
		out = append(out, fmt.Sprintf("no precision given: the plan computes in the checkpoint's %s", r.Precision))
	case checkpointFormat(s.cfg) != r.Precision:
		out = append(out, fmt.Sprintf("the checkpoint stores its weights as %s: they are counted as stored, and the requested %s sets only the compute precision",
			checkpointFormat(s.cfg), r.Precision))
	}
	return out
}

// recommend picks the best-ranked runnable candidate and says whether to
// scale vertically or horizontally.
func recommend(r Request, s shape, cs []Candidate) *Recommendation {
	var pick *Candidate
	for i := range cs {
		if cs[i].Fits && cs[i].supported && (cs[i].MeetsLatencyTarget == nil || *cs[i].MeetsLatencyTarget) {
			pick = &cs[i]
			break
		}
	}
	missedTarget := false
	if pick == nil {
		// Nothing meets the latency target: the fastest that fits.
		for i := range cs {
			c := &cs[i]
			if !c.Fits || !c.supported || c.TimePerOutputTokenS == nil {
				continue
			}
			if pick == nil || *c.TimePerOutputTokenS < *pick.TimePerOutputTokenS {
				pick = c
			}
		}
		missedTarget = pick != nil
	}
	if pick == nil {
		return nil
	}
	rec := &Recommendation{GPU: pick.GPU, GPUs: pick.GPUs}
	replica := pick.TP * pick.PP
	var why []string
	if missedTarget {
		why = append(why, fmt.Sprintf("no candidate meets the %.0f ms target; %s is the fastest at %.1f ms per token",
			r.LatencyTargetS*1e3, pick.GPU, *pick.TimePerOutputTokenS*1e3))
	}
	// The smallest replica any fitting candidate needs.
	var smallest *Candidate
	for i := range cs {
		c := &cs[i]
		if c.Fits && c.supported && (smallest == nil || c.TP*c.PP < smallest.TP*smallest.PP ||
			(c.TP*c.PP == smallest.TP*smallest.PP && c.MemoryPerGPU.CapacityBytes > smallest.MemoryPerGPU.CapacityBytes)) {
			smallest = c
		}
	}
	if replica == 1 {
		rec.Scaling = "horizontal"
		why = append(why, fmt.Sprintf("%s fits on one %s (%s of %s)", s.cfg.Name, pick.GPU,
			gb(float64(pick.MemoryPerGPU.TotalBytes)), gb(float64(pick.MemoryPerGPU.CapacityBytes))))
		if r.Mode == Training {
			why = append(why, "scale out with data-parallel replicas: each adds throughput and only all-reduces gradients, overlapped with the backward pass")
		} else {
			why = append(why, "serve more traffic with more replicas (horizontal): they are independent and need no interconnect, while splitting the model would only add communication")
		}
	} else {
		rec.Scaling = "vertical"
		why = append(why, fmt.Sprintf("%s needs %d GPUs per replica on %s (tp %d, pp %d)", s.cfg.Name, replica, pick.GPU, pick.TP, pick.PP))
		if smallest != nil && smallest.TP*smallest.PP < replica {
			why = append(why, fmt.Sprintf("bigger-memory GPUs shrink the replica: %s needs %d", smallest.GPU, smallest.TP*smallest.PP))
		}
		why = append(why, "keep each replica inside one NVLink domain and add memory per GPU before adding replicas (vertical); replicas come after the replica fits")
	}
	if c := pick.CostPerMillionTokensUSD; c != nil && r.Mode == Inference {
		why = append(why, fmt.Sprintf("$%.3f per million output tokens at %.0f tokens/s", *c, *pick.OutputTokensPerS))
	}
	if c := pick.TrainCostUSD; c != nil && r.Mode == Training {
		why = append(why, fmt.Sprintf("$%.0f and %.1f days to train %.3g tokens at %.0f%% MFU", *c, *pick.TrainTimeS/86400, float64(r.Tokens), *pick.MFU*100))
	}
	rec.Reason = strings.Join(why, "; ")
	return rec
}

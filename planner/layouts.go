package planner

import (
	"fmt"
	"strings"

	"github.com/gpufleet/gpufleet/catalog"
)

// publishedLayout is the layout a model's authors ran it with, on their
// fleet: a plan for the same model and GPU count compares its own choice
// with it (publishedNote).
type publishedLayout struct {
	model          string // model.Config.Name
	mode           Mode
	gpus           int
	gpu            string // the authors' GPU, catalog id
	tp, pp, dp, ep int
	cp             int
	source         string
}

// publishedLayouts, from the papers that describe the runs.
var publishedLayouts = []publishedLayout{
	// DeepSeek-V3 technical report (arXiv:2412.19437) section 3.2: 2048
	// H800s, "16-way Pipeline Parallelism (PP), 64-way Expert Parallelism
	// (EP) spanning 8 nodes, and ZeRO-1 Data Parallelism (DP)"; no tensor
	// parallelism.
	{model: "deepseek-v3", mode: Training, gpus: 2048, gpu: "h800-sxm-80gb", tp: 1, pp: 16, dp: 128, ep: 64, source: "DeepSeek-V3 report, arXiv:2412.19437 section 3.2"},
	// The same report, section 3.4.1: the prefill's smallest deployment
	// unit is 4 nodes (32 GPUs), attention TP4 with DP8, experts EP32.
	{model: "deepseek-v3", mode: Inference, gpus: 32, gpu: "h800-sxm-80gb", tp: 4, pp: 1, dp: 8, ep: 32, source: "DeepSeek-V3 report, arXiv:2412.19437 section 3.4.1 (prefill)"},
	// The Llama 3 Herd of Models paper (arXiv:2407.21783) Table 4: Llama
	// 3.1 405B pre-training on 8,192 and 16,384 H100s.
	{model: "llama-3.1-405b", mode: Training, gpus: 8192, gpu: "h100-sxm-80gb", tp: 8, pp: 16, dp: 64, cp: 1, source: "Llama 3 paper, arXiv:2407.21783 Table 4"},
	{model: "llama-3.1-405b", mode: Training, gpus: 16384, gpu: "h100-sxm-80gb", tp: 8, pp: 16, dp: 128, cp: 1, source: "Llama 3 paper, arXiv:2407.21783 Table 4"},
}

// publishedNote compares the chosen candidate c with the layout the
// model's authors published for the same GPU count, when the request left
// the layout to the planner and the two differ: how much faster the
// planner's choice is estimated, and what the authors' layout trades for
// it (memory headroom, all-to-all volume, pipeline bubble), so that a user
// can choose. "" when there is nothing to compare.
func (s shape) publishedNote(r Request, g catalog.GPU, c Candidate) string {
	if r.TP > 0 || r.PP > 0 || r.DP > 0 || r.EP > 0 || r.CP > 0 || !c.Fits {
		return ""
	}
	for _, p := range publishedLayouts {
		if p.model != s.cfg.Name || p.mode != r.Mode || p.gpus != c.GPUs {
			continue
		}
		ep := max(p.ep, 1)
		if c.TP == p.tp && c.PP == p.pp && c.DP == p.dp && c.EP == ep && c.CP == max(p.cp, 1) {
			return fmt.Sprintf("this is the layout the model's authors ran (%s)", p.source)
		}
		// The authors' layout at its best schedule (virtual stages) here.
		rr := r
		rr.TP, rr.PP, rr.DP, rr.EP, rr.CP = p.tp, p.pp, p.dp, ep, max(p.cp, 1)
		var pc Candidate
		found := false
		for _, l := range s.layouts(rr, g, p.gpus) {
			x := s.evaluate(rr, g, l)
			if !found || (x.Fits && (!pc.Fits || x.score < pc.score)) {
				pc, found = x, true
			}
		}
		if !found {
			return ""
		}
		l := pc.layout
		name := fmt.Sprintf("tp %d, pp %d, dp %d, ep %d", p.tp, p.pp, p.dp, ep)
		if p.cp > 1 {
			name += fmt.Sprintf(", cp %d", p.cp)
		}
		hw := ""
		if p.gpu != g.ID {
			hw = " (they ran it on " + p.gpu + ")"
		}
		var b strings.Builder
		fmt.Fprintf(&b, "the authors' layout for %d GPUs, %s (%s)%s", p.gpus, name, p.source, hw)
		if !pc.Fits {
			fmt.Fprintf(&b, ", does not fit here: it needs %s per GPU", gb(float64(pc.MemoryPerGPU.TotalBytes)))
			return b.String()
		}
		speed := func(x Candidate) float64 {
			if x.TrainingTokensPerS != nil {
				return *x.TrainingTokensPerS
			}
			if x.OutputTokensPerS != nil {
				return *x.OutputTokensPerS
			}
			return 0
		}
		if a, b2 := speed(c), speed(pc); a > 0 && b2 > 0 {
			fmt.Fprintf(&b, ", is estimated %.2fx %s than the chosen one", max(a/b2, b2/a), map[bool]string{true: "slower", false: "faster"}[a >= b2])
		}
		fmt.Fprintf(&b, "; it uses %s of memory per GPU against %s (%s more headroom)", gb(float64(pc.MemoryPerGPU.TotalBytes)), gb(float64(c.MemoryPerGPU.TotalBytes)),
			gb(float64(c.MemoryPerGPU.TotalBytes-pc.MemoryPerGPU.TotalBytes)))
		if r.Mode == Training {
			h := hwFor(r, g)
			rc, rp := r, r
			rc.Recompute, rp.Recompute = *c.Recompute, *pc.Recompute
			a, bb := s.trainingStep(h, rc, c.layout), s.trainingStep(h, rp, l)
			if a.a2aBytes > 0 || bb.a2aBytes > 0 {
				fmt.Fprintf(&b, ", sends %s all-to-all per GPU and step %s against %s %s", gb(bb.a2aBytes), a2aPath(g, l), gb(a.a2aBytes), a2aPath(g, c.layout))
			}
			fmt.Fprintf(&b, ", and idles %.1f%% of a step in the pipeline bubble against %.1f%%", 100*bb.bubbleS/bb.stepS, 100*a.bubbleS/a.stepS)
		}
		b.WriteString("; the planner does not model the authors' own overlap of communication with computation, which favours their layout")
		return b.String()
	}
	return ""
}

// a2aPath says where a layout's expert all-to-all travels.
func a2aPath(g catalog.GPU, l layout) string {
	if l.tp*l.ep > max(g.DomainSize, 1) {
		return "over the network"
	}
	return "inside an NVLink domain"
}

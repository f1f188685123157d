package planner

import (
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
)

// genModel draws a built-in model.
func genModel(t *rapid.T) *model.Config {
	name := rapid.SampledFrom(model.BuiltinNames()).Draw(t, "model")
	cfg, err := model.Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func genGPU(t *rapid.T) catalog.GPU {
	return rapid.SampledFrom(catalog.Default().All()).Draw(t, "gpu")
}

// genRequest draws a workload with defaults filled in.
func genRequest(t *rapid.T, mode Mode) Request {
	r := Request{
		Model:        genModel(t),
		Mode:         mode,
		Precision:    rapid.SampledFrom([]Format{FormatBF16, FormatFP8, FormatINT8, FormatINT4, FormatFP4}).Draw(t, "precision"),
		KVPrecision:  rapid.SampledFrom([]Format{FormatBF16, FormatFP8}).Draw(t, "kv"),
		InputTokens:  rapid.IntRange(1, 32768).Draw(t, "input"),
		OutputTokens: rapid.IntRange(1, 4096).Draw(t, "output"),
		Seq:          rapid.SampledFrom([]int{512, 2048, 4096, 8192}).Draw(t, "seq"),
		MicroBatch:   rapid.IntRange(1, 8).Draw(t, "micro"),
		ZeRO:         rapid.IntRange(0, 3).Draw(t, "zero"),
		Optimizer:    rapid.SampledFrom([]Optimizer{AdamW, AdamW8bit, SGD}).Draw(t, "optimizer"),
		Recompute:    rapid.SampledFrom([]Recompute{RecomputeNone, RecomputeSelective, RecomputeFull}).Draw(t, "recompute"),
	}
	if mode == Training {
		r.Precision = FormatBF16
	}
	r.GlobalBatch = r.MicroBatch * rapid.SampledFrom([]int{64, 256, 1024}).Draw(t, "gb")
	r, err := r.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// perGPU is the memory per GPU of a layout at a fixed batch.
func perGPU(s shape, r Request, l layout, batch int) int64 {
	if r.Mode == Training {
		return s.trainingMemory(r, l, 0).TotalBytes
	}
	return s.inferenceMemory(r, batch, l, engineGPU{engine: EngineVLLM, samplerWarmup: vllmLargeMaxSeqs, chunkTokens: vllmLargeMaxTokens}).TotalBytes
}

// TestMoreGPUsNeverNeedMoreMemoryPerGPU doubles tensor, pipeline or data
// parallelism of a multi-GPU layout and checks memory per GPU never grows.
// (Going from one GPU to two adds NCCL's buffers, a real cost, so the
// property starts at two.)
func TestMoreGPUsNeverNeedMoreMemoryPerGPU(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]Mode{Inference, Training}).Draw(t, "mode")
		r := genRequest(t, mode)
		s := newShape(r.Model)
		tp := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "tp")
		pp := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "pp")
		dp := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "dp")
		if tp*pp*dp < 2 || r.Model.NumHeads%(tp*2) != 0 || pp*2 > s.layers || (mode == Training && s.layers%(pp*2) != 0) {
			t.Skip("layout not valid for this model")
		}
		batch := rapid.IntRange(1, 64).Draw(t, "batch")
		widestEP := func(l layout) int { eps := s.expertDegrees(r, l.tp, l.dp); return eps[len(eps)-1] }
		base := layout{tp: tp, pp: pp, dp: dp}
		base.ep = widestEP(base)
		which := rapid.SampledFrom([]string{"tp", "pp", "dp"}).Draw(t, "double")
		more := base
		switch which {
		case "tp":
			more.tp *= 2
		case "pp":
			more.pp *= 2
		case "dp":
			more.dp *= 2
		}
		more.ep = widestEP(more)
		a, b := perGPU(s, r, base, batch), perGPU(s, r, more, batch)
		if b > a {
			t.Fatalf("%s x2 %+v -> %+v: memory per GPU grew from %d to %d", which, base, more, a, b)
		}
	})
}

// TestWiderPrecisionNeverNeedsLessMemory compares weight formats and KV
// formats ordered by width on the same layout and batch.
func TestWiderPrecisionNeverNeedsLessMemory(t *testing.T) {
	// Ordered by storage width: int4 with its group scales is narrower than NVFP4.
	order := []Format{FormatINT4, FormatFP4, FormatFP8, FormatINT8, FormatBF16, FormatFP16, FormatFP32}
	width := map[Format]int{}
	for i, f := range order {
		width[f] = i
	}
	rapid.Check(t, func(t *rapid.T) {
		r := genRequest(t, Inference)
		s := newShape(r.Model)
		l := layout{tp: rapid.SampledFrom([]int{1, 2, 8}).Draw(t, "tp"), pp: 1, dp: 1, ep: 1}
		batch := rapid.IntRange(1, 64).Draw(t, "batch")
		narrow := rapid.SampledFrom(order).Draw(t, "narrow")
		wide := rapid.SampledFrom(order).Draw(t, "wide")
		if width[wide] < width[narrow] {
			narrow, wide = wide, narrow
		}
		rn, rw := r, r
		rn.Precision, rw.Precision = narrow, wide
		if a, b := s.inferenceMemory(rn, batch, l, engineGPU{}).TotalBytes, s.inferenceMemory(rw, batch, l, engineGPU{}).TotalBytes; b < a {
			t.Fatalf("weights %s need %d bytes but wider %s only %d", narrow, a, wide, b)
		}
		kvn, kvw := r, r
		kvn.KVPrecision, kvw.KVPrecision = FormatFP8, FormatBF16
		if a, b := s.inferenceMemory(kvn, batch, l, engineGPU{}).KVCacheBytes, s.inferenceMemory(kvw, batch, l, engineGPU{}).KVCacheBytes; b < a {
			t.Fatalf("fp8 KV needs %d bytes but bf16 KV only %d", a, b)
		}
	})
}

// TestLongerContextNeverNeedsLessKVCache grows the context and checks the KV
// cache never shrinks, sliding windows included.
func TestLongerContextNeverNeedsLessKVCache(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRequest(t, Inference)
		s := newShape(r.Model)
		l := layout{tp: rapid.SampledFrom([]int{1, 2, 8}).Draw(t, "tp"), pp: rapid.SampledFrom([]int{1, 2}).Draw(t, "pp"), dp: 1, ep: 1}
		short := rapid.IntRange(1, 100000).Draw(t, "short")
		long := short + rapid.IntRange(0, 100000).Draw(t, "extra")
		if a, b := s.kvBytesPerSeq(short, r.KVPrecision, l), s.kvBytesPerSeq(long, r.KVPrecision, l); b < a {
			t.Fatalf("context %d needs %.0f bytes of KV, longer %d only %.0f", short, a, long, b)
		}
		bpe := r.KVPrecision.BytesPerElement()
		if a, b := r.Model.KVCacheBytes(int64(short), bpe), r.Model.KVCacheBytes(int64(long), bpe); b < a {
			t.Fatalf("model KV for %d tokens %d > for %d tokens %d", short, a, long, b)
		}
	})
}

// TestLargerHeadroomNeverALargerBatch: on every engine and GPU, leaving
// more of each GPU free never lets more sequences or a larger KV cache in,
// and no plan that fits reaches into the headroom.
func TestLargerHeadroomNeverALargerBatch(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRequest(t, Inference)
		s := newShape(r.Model)
		g := genGPU(t)
		l := layout{tp: rapid.SampledFrom([]int{1, 2, 8}).Draw(t, "tp"), pp: 1, dp: 1, ep: 1}
		engine := rapid.SampledFrom([]Engine{EngineVLLM, EngineTRTLLM, EngineSGLang}).Draw(t, "engine")
		small := rapid.Float64Range(0.01, 0.5).Draw(t, "small") // 0 is the engine's own cap
		large := small + rapid.Float64Range(0, 0.4).Draw(t, "more")
		rs, rl := r, r
		rs.Engine, rs.MemoryHeadroom = engine, small
		rl.Engine, rl.MemoryHeadroom = engine, large
		es, el := newEngineGPU(rs, g, l.tp), newEngineGPU(rl, g, l.tp)
		if a, b := s.maxBatch(r, l, es), s.maxBatch(r, l, el); b > a {
			t.Fatalf("%s on %s: headroom %.3f fits batch %d, larger headroom %.3f fits %d", engine, g.ID, small, a, large, b)
		}
		if a, b := s.kvCacheTokens(r, l, es), s.kvCacheTokens(r, l, el); b > a {
			t.Fatalf("%s on %s: headroom %.3f holds %d KV tokens, larger headroom %.3f holds %d", engine, g.ID, small, a, large, b)
		}
		if b := s.maxBatch(r, l, el); b > 0 {
			// What each engine puts under its cap, against the cap.
			m := s.inferenceMemory(r, b, l, el)
			c := float64(el.capacity)
			under, limit := float64(m.TotalBytes-m.Reserve.ContextBytes), el.cap*c // vLLM
			switch engine {
			case EngineSGLang:
				under = float64(m.WeightsBytes + m.KVCacheBytes)
			case EngineTRTLLM:
				under, limit = float64(m.KVCacheBytes), el.cap*(c-float64(m.TotalBytes-m.KVCacheBytes))
			}
			if under > limit+1 {
				t.Fatalf("%s on %s: batch %d puts %.0f bytes under a cap of %.0f", engine, g.ID, b, under, limit)
			}
		}
	})
}

// TestPlanIsDeterministic runs the same request twice over the catalog.
func TestPlanIsDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]Mode{Inference, Training}).Draw(t, "mode")
		r := genRequest(t, mode)
		r.GPUs = []catalog.GPU{genGPU(t), genGPU(t)}
		if mode == Training {
			r.GPUCount = rapid.SampledFrom([]int{8, 64}).Draw(t, "gpus")
		}
		a, err := Run(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Run(r, nil)
		if ja, jb := mustJSON(t, a), mustJSON(t, b); ja != jb {
			t.Fatalf("same request, different plans:\n%s\n%s", ja, jb)
		}
	})
}

// TestContextParallelismMakesLongSequencesFit: a 128k-token training
// sequence does not fit 8 H100s by tensor and pipeline parallelism alone;
// the planner splits it over context-parallel ranks, and more of them
// never hold more activations per GPU.
func TestContextParallelismMakesLongSequencesFit(t *testing.T) {
	cfg, err := model.Builtin("llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := catalog.Default().Lookup("h100-sxm-80gb")
	r := Request{Model: cfg, Mode: Training, GPUs: []catalog.GPU{g}, GPUCount: 64, Seq: 131072, GlobalBatch: 64, MicroBatch: 1, ZeRO: 1, Recompute: RecomputeSelective}
	noCP := r
	noCP.CP = 1
	p, err := Run(noCP, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Candidates[0].Fits {
		t.Fatalf("128k tokens without context parallelism fit (%d GiB): the test needs a longer sequence", p.Candidates[0].MemoryPerGPU.TotalBytes>>30)
	}
	p, err = Run(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Candidates[0]
	if !c.Fits || c.CP < 2 || c.TP*c.PP*c.CP*c.DP != 64 {
		t.Fatalf("with context parallelism: fits %v, tp %d pp %d cp %d dp %d; want a fitting layout with cp >= 2", c.Fits, c.TP, c.PP, c.CP, c.DP)
	}
	rr, _ := r.withDefaults()
	s := newShape(cfg)
	prev := int64(math.MaxInt64)
	for _, cp := range []int{1, 2, 4, 8} {
		m := s.trainingMemory(rr, layout{tp: 8, pp: 1, dp: 8 / cp, cp: cp, ep: 1}, g.MemoryBytes)
		if m.ActivationsBytes > prev {
			t.Errorf("cp %d holds %d bytes of activations, more than cp %d/2's %d", cp, m.ActivationsBytes, cp, prev)
		}
		prev = m.ActivationsBytes
	}
	if _, err := Run(Request{Model: cfg, Mode: Inference, GPUs: []catalog.GPU{g}, CP: 2}, nil); err == nil {
		t.Error("context parallelism for inference accepted; want it refused by name")
	}
}

// TestZeRO3ModelStateMatchesThePaper: ZeRO-3 with mixed-precision AdamW
// keeps 16 bytes per parameter over the data-parallel ranks as model
// state (Rajbhandari et al., arXiv:1910.02054, table 1: a 7.5B model on 64
// GPUs, 1.88 GB); the gathered working set is overhead, not model state.
func TestZeRO3ModelStateMatchesThePaper(t *testing.T) {
	cfg, err := model.Builtin("llama-2-7b")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Request{Model: cfg, Mode: Training, ZeRO: 3}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := newShape(cfg)
	m := s.trainingMemory(r, layout{tp: 1, pp: 1, dp: 64, ep: 1}, 80<<30)
	state := float64(m.WeightsBytes + m.GradientsBytes + m.OptimizerBytes)
	want := 16 * float64(cfg.Params().Total) / 64
	if math.Abs(state-want)/want > 0.01 {
		t.Errorf("model state %.2f GB per GPU, want 16 bytes x %d parameters / 64 = %.2f GB", state/1e9, cfg.Params().Total, want/1e9)
	}
	if float64(m.OverheadBytes) < 2*4*s.largestLayer {
		t.Errorf("overhead %d bytes lacks the gathered working set of the largest layer (%.0f parameters)", m.OverheadBytes, s.largestLayer)
	}
}

// TestFP8TrainingKeepsAttentionInBF16: FP8 training speeds up the linear
// layers only; attention stays BF16, so an FP8 step is faster than a BF16
// one but less than the peaks' ratio, the less so the longer the sequence.
func TestFP8TrainingKeepsAttentionInBF16(t *testing.T) {
	cfg, err := model.Builtin("llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := catalog.Default().Lookup("h100-sxm-80gb")
	s := newShape(cfg)
	l := layout{tp: 1, pp: 1, dp: 8, ep: 1}
	compute := func(p Format, seq int) float64 {
		r, err := Request{Model: cfg, Mode: Training, Precision: p, Seq: seq, GlobalBatch: 64}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		return s.trainingStep(newHW(g, p, trainEfficiency, nil), r, l).computeS
	}
	peaks := newHW(g, FormatFP8, 1, nil).peak / newHW(g, FormatBF16, 1, nil).peak
	short, long := compute(FormatBF16, 2048)/compute(FormatFP8, 2048), compute(FormatBF16, 32768)/compute(FormatFP8, 32768)
	if !(short > 1 && short < peaks && long > 1 && long < short) {
		t.Errorf("BF16/FP8 compute time %.2f at 2k tokens, %.2f at 32k; want between 1 and %.1f, falling with the sequence", short, long, peaks)
	}
}

package planner

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
)

// Spec is a planner request in the words a user gives it, before any is
// parsed: gpufleet plan's flags, the dashboard's planner form and a job's
// model block (SpecOf) each fill one, and Request is the one place the
// words become a Request. An empty field is the planner's default.
//
// Fields are known by their keys, the JSON keys of a job's model block
// (gpufleet.ModelRequest): a refusal is a gpufleet.ValueError whose Field
// is the key as the caller's surface names it (--kv-precision,
// model.kv_precision, the form's label).
type Spec struct {
	Mode      string // mode: inference or training
	GPU       string // gpu: candidate catalog ids, comma- or space-separated (empty: all the caller offers)
	GPUs      string // gpus: total GPUs per candidate (empty or 0: the smallest count that fits)
	Precision string // precision: weights (inference) or compute (training); empty: bf16, or a quantised checkpoint's own format

	KVPrecision string // kv_precision
	Engine      string // engine: vllm, trtllm or sglang

	Batch        string // batch: concurrent sequences per replica, or max
	InputTokens  string // input_tokens
	OutputTokens string // output_tokens
	Scenario     string // scenario: offline or server
	// LatencyTargetMS and TPOTTargetMS (latency_target_ms,
	// tpot_target_ms) are the same bound on the time per output token,
	// under two names; TTFTTargetMS (ttft_target_ms) bounds the time to
	// the first token.
	LatencyTargetMS, TPOTTargetMS, TTFTTargetMS string
	MemoryHeadroom                              string // memory_headroom: 10% or 0.1
	// MaxModelLen and MaxNumBatchedTokens (max_model_len,
	// max_num_batched_tokens) are the engine's limits of one sequence and
	// of one forward pass.
	MaxModelLen, MaxNumBatchedTokens string
	MaxNumSeqs                       string // max_num_seqs

	Seq           string // seq
	MicroBatch    string // micro_batch
	GlobalBatch   string // global_batch
	Tokens        string // tokens: 1T, 300B, 2e12
	Optimizer     string // optimizer
	FP32GradAccum bool   // fp32_grad_accum
	ZeRO          string // zero
	Recompute     string // recompute

	TP, PP, DP, CP, EP string // tp, pp, dp, cp, ep

	// The facility check: rack_power, rack_cooling (17.3kW), rack_units.
	RackPower, RackCooling, RackUnits string
}

// Word is the spec's text field of a vocabulary word by its key (mode,
// precision, kv_precision, engine, optimizer, recompute), or nil
// for any other key.
func (s *Spec) Word(key string) *string {
	switch key {
	case "mode":
		return &s.Mode
	case "precision":
		return &s.Precision
	case "kv_precision":
		return &s.KVPrecision
	case "engine":
		return &s.Engine
	case "optimizer":
		return &s.Optimizer
	case "recompute":
		return &s.Recompute
	}
	return nil
}

// SpecOf is a job's model block as a Spec (its model, name or config,
// is the caller's to read).
func SpecOf(m *gpufleet.ModelRequest) Spec {
	n := func(v int) string {
		if v == 0 {
			return ""
		}
		return strconv.Itoa(v)
	}
	f := func(v float64) string {
		if v == 0 {
			return ""
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	s := Spec{Mode: m.Mode, Precision: m.Precision, KVPrecision: m.KVPrecision, Engine: m.Engine,
		Batch: n(m.Batch), InputTokens: n(m.InputTokens), OutputTokens: n(m.OutputTokens), Scenario: m.Scenario,
		TPOTTargetMS: f(m.TPOTTargetMS), TTFTTargetMS: f(m.TTFTTargetMS), MemoryHeadroom: f(m.MemoryHeadroom),
		Seq: n(m.Seq), MicroBatch: n(m.MicroBatch), GlobalBatch: n(m.GlobalBatch), Optimizer: m.Optimizer,
		FP32GradAccum: m.FP32GradAccum, ZeRO: n(m.ZeRO), Recompute: m.Recompute,
		TP: n(m.TP), PP: n(m.PP), DP: n(m.DP), CP: n(m.CP), EP: n(m.EP),
		MaxModelLen: n(m.MaxModelLen), MaxNumBatchedTokens: n(m.MaxNumBatchedTokens), MaxNumSeqs: n(m.MaxNumSeqs)}
	if m.Tokens > 0 {
		s.Tokens = strconv.FormatInt(m.Tokens, 10)
	}
	return s
}

// Request parses the spec into a request for the model cfg, with the
// candidate GPUs looked up in cat (a spec that names none needs no
// catalog). field names a key as the caller's surface does; nil keeps
// the keys.
func (s Spec) Request(cfg *model.Config, cat *catalog.Catalog, field func(key string) string) (Request, error) {
	if field == nil {
		field = func(k string) string { return k }
	}
	r := Request{Model: cfg, FP32GradAccum: s.FP32GradAccum}
	bad := func(key, v, want string) error {
		return &gpufleet.ValueError{Field: field(key), Value: gpufleet.Quote(v), Want: want}
	}
	var err error
	if s.Mode != "" {
		if r.Mode, err = ParseMode(s.Mode); err != nil {
			return r, gpufleet.InField(field("mode"), err)
		}
	}
	if s.Precision != "" {
		if r.Precision, err = ParseFormat(s.Precision); err != nil {
			return r, gpufleet.InField(field("precision"), err)
		}
	}
	if s.KVPrecision != "" {
		switch r.KVPrecision, err = ParseFormat(s.KVPrecision); {
		case err != nil, r.KVPrecision == FormatINT4, r.KVPrecision == FormatFP4:
			return r, bad("kv_precision", s.KVPrecision, "expected bf16, fp16, fp8, int8 or fp32")
		}
	}
	if r.Engine, err = ParseEngine(s.Engine); err != nil {
		return r, gpufleet.InField(field("engine"), err)
	}
	if r.Batch, r.BatchMax, err = ParseBatch(s.Batch); err != nil {
		return r, gpufleet.InField(field("batch"), err)
	}
	for _, c := range []struct {
		key string
		v   string
		dst *int
		max int
	}{
		{"gpus", s.GPUs, &r.GPUCount, gpufleet.MaxFleetGPUs},
		{"input_tokens", s.InputTokens, &r.InputTokens, maxTokens}, {"output_tokens", s.OutputTokens, &r.OutputTokens, maxTokens},
		{"seq", s.Seq, &r.Seq, maxTokens}, {"micro_batch", s.MicroBatch, &r.MicroBatch, maxBatch}, {"global_batch", s.GlobalBatch, &r.GlobalBatch, maxBatch},
		{"zero", s.ZeRO, &r.ZeRO, 3},
		{"tp", s.TP, &r.TP, gpufleet.MaxFleetGPUs}, {"pp", s.PP, &r.PP, gpufleet.MaxFleetGPUs}, {"dp", s.DP, &r.DP, gpufleet.MaxFleetGPUs},
		{"cp", s.CP, &r.CP, maxCP}, {"ep", s.EP, &r.EP, gpufleet.MaxFleetGPUs},
		{"rack_units", s.RackUnits, &r.Rack.Units, 1000},
		{"max_model_len", s.MaxModelLen, &r.MaxModelLen, maxTokens}, {"max_num_batched_tokens", s.MaxNumBatchedTokens, &r.MaxNumBatchedTokens, maxTokens},
		{"max_num_seqs", s.MaxNumSeqs, &r.MaxNumSeqs, maxBatch},
	} {
		if c.v == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(c.v))
		if err != nil || n < 0 || n > c.max {
			return r, bad(c.key, c.v, fmt.Sprintf("expected a whole number from 0 to %d", c.max))
		}
		*c.dst = n
	}
	if s.Tokens != "" {
		if r.Tokens, err = gpufleet.ParseCount(s.Tokens); err != nil {
			return r, gpufleet.InField(field("tokens"), err)
		}
		if r.Tokens < 0 || r.Tokens > maxTrainingTokens {
			return r, bad("tokens", s.Tokens, fmt.Sprintf("expected 0 to %g", float64(maxTrainingTokens)))
		}
	}
	if r.Optimizer, err = parseOptimizer(s.Optimizer); err != nil {
		return r, gpufleet.InField(field("optimizer"), err)
	}
	if r.Recompute, err = parseRecompute(s.Recompute); err != nil {
		return r, gpufleet.InField(field("recompute"), err)
	}
	var ms [3]float64
	for i, t := range []struct{ key, v string }{{"latency_target_ms", s.LatencyTargetMS}, {"tpot_target_ms", s.TPOTTargetMS}, {"ttft_target_ms", s.TTFTTargetMS}} {
		if t.v == "" {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(t.v), 64)
		if err != nil || !(v >= 0 && v <= 3.6e6) {
			return r, bad(t.key, t.v, "expected milliseconds above 0, at most an hour")
		}
		ms[i] = v
	}
	if ms[0] > 0 && ms[1] > 0 && ms[0] != ms[1] {
		return r, bad("latency_target_ms", s.LatencyTargetMS, fmt.Sprintf("%s is %s: give one (they are the same target)", field("tpot_target_ms"), s.TPOTTargetMS))
	}
	r.LatencyTargetS, r.TTFTTargetS = max(ms[0], ms[1])/1e3, ms[2]/1e3
	switch strings.TrimSpace(s.Scenario) {
	case "":
	case "offline":
		if r.Batch == 0 {
			r.BatchMax = true
		}
	case "server":
		if r.LatencyTargetS == 0 {
			return r, bad("scenario", s.Scenario, fmt.Sprintf("give the latency bound, %s (and %s)", field("tpot_target_ms"), field("ttft_target_ms")))
		}
	default:
		return r, bad("scenario", s.Scenario, "expected offline or server")
	}
	if s.MemoryHeadroom != "" {
		if r.MemoryHeadroom, err = parseShare(s.MemoryHeadroom); err != nil || !(r.MemoryHeadroom > 0 && r.MemoryHeadroom <= maxMemoryHeadroom) {
			return r, bad("memory_headroom", s.MemoryHeadroom, fmt.Sprintf("expected a share above 0, at most %g (such as 10%% or 0.1)", maxMemoryHeadroom))
		}
	}
	for _, p := range []struct {
		key, v string
		dst    *float64
	}{{"rack_power", s.RackPower, &r.Rack.PowerWatts}, {"rack_cooling", s.RackCooling, &r.Rack.CoolingWatts}} {
		if p.v == "" {
			continue
		}
		w, err := gpufleet.ParsePower(p.v)
		if err != nil {
			return r, gpufleet.InField(field(p.key), err)
		}
		*p.dst = float64(w)
	}
	for _, id := range strings.FieldsFunc(s.GPU, func(c rune) bool { return c == ',' || c == ' ' }) {
		if cat == nil {
			return r, bad("gpu", s.GPU, "no catalog to look it up in")
		}
		g, err := cat.Lookup(id)
		if err != nil {
			return r, fmt.Errorf("%s: %w", field("gpu"), err)
		}
		r.GPUs = append(r.GPUs, g)
	}
	return r, nil
}

// parseShare reads a share of a whole: "10%" or 0.1.
func parseShare(s string) (float64, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || math.IsNaN(v) {
		return 0, fmt.Errorf("not a share")
	}
	if strings.HasSuffix(s, "%") {
		v /= 100
	}
	return v, nil
}

// parseOptimizer reads an optimizer's name; empty is the default.
func parseOptimizer(s string) (Optimizer, error) {
	switch o := Optimizer(strings.ToLower(strings.TrimSpace(s))); o {
	case "":
		return AdamW, nil
	case AdamW, AdamW8bit, SGD:
		return o, nil
	}
	return "", &gpufleet.ValueError{Field: "optimizer", Value: gpufleet.Quote(s), Want: "expected adamw, adamw-8bit or sgd"}
}

// parseRecompute reads an activation recompute policy; empty is auto.
func parseRecompute(s string) (Recompute, error) {
	switch c := Recompute(strings.ToLower(strings.TrimSpace(s))); c {
	case "":
		return RecomputeAuto, nil
	case RecomputeNone, RecomputeSelective, RecomputeFull, RecomputeAuto:
		return c, nil
	}
	return "", &gpufleet.ValueError{Field: "recompute", Value: gpufleet.Quote(s), Want: "expected auto, none, selective or full"}
}

package planner_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
	"github.com/gpufleet/gpufleet/planner"
)

func builtin(t testing.TB) *model.Config {
	t.Helper()
	cfg, err := model.Builtin("llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestSpecRefusalsNameTheField: every refusal is a ValueError whose field
// is the key as the caller names it.
func TestSpecRefusalsNameTheField(t *testing.T) {
	tests := map[string]struct {
		spec planner.Spec
		key  string
	}{
		"mode":              {planner.Spec{Mode: "serve"}, "mode"},
		"precision":         {planner.Spec{Precision: "fp3"}, "precision"},
		"kv precision":      {planner.Spec{KVPrecision: "int3"}, "kv_precision"},
		"engine":            {planner.Spec{Engine: "ollama"}, "engine"},
		"batch":             {planner.Spec{Batch: "lots"}, "batch"},
		"batch too large":   {planner.Spec{Batch: "99999999"}, "batch"},
		"negative seq":      {planner.Spec{Seq: "-1"}, "seq"},
		"zero stage":        {planner.Spec{ZeRO: "4"}, "zero"},
		"cp":                {planner.Spec{CP: "65"}, "cp"},
		"tokens":            {planner.Spec{Tokens: "many"}, "tokens"},
		"tokens too many":   {planner.Spec{Tokens: "1e20"}, "tokens"},
		"optimizer":         {planner.Spec{Optimizer: "lion"}, "optimizer"},
		"recompute":         {planner.Spec{Recompute: "half"}, "recompute"},
		"latency":           {planner.Spec{LatencyTargetMS: "-3"}, "latency_target_ms"},
		"two latencies":     {planner.Spec{LatencyTargetMS: "30", TPOTTargetMS: "40"}, "latency_target_ms"},
		"ttft NaN":          {planner.Spec{TTFTTargetMS: "NaN"}, "ttft_target_ms"},
		"server no bound":   {planner.Spec{Scenario: "server"}, "scenario"},
		"scenario":          {planner.Spec{Scenario: "batch"}, "scenario"},
		"headroom too much": {planner.Spec{MemoryHeadroom: "95%"}, "memory_headroom"},
		"headroom words":    {planner.Spec{MemoryHeadroom: "lots"}, "memory_headroom"},
		"headroom zero":     {planner.Spec{MemoryHeadroom: "0"}, "memory_headroom"},
		"rack power":        {planner.Spec{RackPower: "lots"}, "rack_power"},
		"rack units":        {planner.Spec{RackUnits: "1001"}, "rack_units"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, surface := range []struct {
				field func(string) string
				want  string
			}{
				{nil, tc.key},
				{func(k string) string { return "model." + k }, "model." + tc.key},
				{func(k string) string { return "--" + strings.ReplaceAll(k, "_", "-") }, "--" + strings.ReplaceAll(tc.key, "_", "-")},
			} {
				_, err := tc.spec.Request(builtin(t), catalog.Default(), surface.field)
				var ve *gpufleet.ValueError
				if !errors.As(err, &ve) || ve.Field != surface.want {
					t.Fatalf("Request = %v, want a ValueError on %s", err, surface.want)
				}
				if !errors.Is(err, gpufleet.ErrInvalid) {
					t.Errorf("%v does not wrap ErrInvalid", err)
				}
			}
		})
	}
}

// TestSpecRequest: the words become the request's values, and an empty
// spec leaves every default to the planner.
func TestSpecRequest(t *testing.T) {
	cat := catalog.Default()
	r, err := planner.Spec{Mode: "training", GPU: "h100-sxm-80gb, a100-sxm-80gb", GPUs: "64", Precision: "fp8", Batch: "max",
		Tokens: "2T", ZeRO: "1", TP: "8", CP: "2", Seq: "8192", MemoryHeadroom: "10%", TPOTTargetMS: "30", TTFTTargetMS: "500",
		Scenario: "offline", Optimizer: "adamw-8bit", Recompute: "full", RackPower: "17.3kW", RackUnits: "42"}.Request(builtin(t), cat, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != planner.Training || len(r.GPUs) != 2 || r.GPUs[1].ID != "a100-sxm-80gb" || r.GPUCount != 64 || r.Precision != planner.FormatFP8 ||
		!r.BatchMax || r.Tokens != 2e12 || r.ZeRO != 1 || r.TP != 8 || r.CP != 2 || r.Seq != 8192 || r.MemoryHeadroom != 0.1 ||
		r.LatencyTargetS != 0.03 || r.TTFTTargetS != 0.5 || r.Optimizer != planner.AdamW8bit || r.Recompute != planner.RecomputeFull ||
		r.Rack.PowerWatts != 17300 || r.Rack.Units != 42 {
		t.Errorf("request %+v", r)
	}
	if r, err := (planner.Spec{MemoryHeadroom: "0.15"}).Request(builtin(t), nil, nil); err != nil || r.MemoryHeadroom != 0.15 {
		t.Errorf("headroom 0.15: %v %v", r.MemoryHeadroom, err)
	}
	r, err = planner.Spec{}.Request(builtin(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != "" || r.Batch != 0 || r.BatchMax || r.InputTokens != 0 || r.Engine != planner.EngineVLLM {
		t.Errorf("empty spec: %+v", r)
	}
	if _, err := planner.Run(r, cat.All()); err != nil {
		t.Errorf("the empty spec's request does not plan: %v", err)
	}
}

// TestSpecOfModelBlock: a job's model block plans as the same words on
// the command line do.
func TestSpecOfModelBlock(t *testing.T) {
	m := &gpufleet.ModelRequest{Name: "llama-3.1-8b", Mode: "training", Precision: "bf16", Seq: 8192, MicroBatch: 2, GlobalBatch: 512,
		Tokens: 3e11, ZeRO: 2, TP: 2, DP: 4, CP: 2, FP32GradAccum: true, MemoryHeadroom: 0.2}
	got, err := planner.SpecOf(m).Request(builtin(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := planner.Spec{Mode: "training", Precision: "bf16", Seq: "8192", MicroBatch: "2", GlobalBatch: "512", Tokens: "300B",
		ZeRO: "2", TP: "2", DP: "4", CP: "2", FP32GradAccum: true, MemoryHeadroom: "20%"}.Request(builtin(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tokens != want.Tokens || got.Seq != want.Seq || got.MicroBatch != want.MicroBatch || got.GlobalBatch != want.GlobalBatch ||
		got.ZeRO != want.ZeRO || got.TP != want.TP || got.DP != want.DP || got.CP != want.CP || got.FP32GradAccum != want.FP32GradAccum ||
		got.MemoryHeadroom != want.MemoryHeadroom || got.Mode != want.Mode || got.Precision != want.Precision {
		t.Errorf("model block %+v, flags %+v", got, want)
	}
}

// FuzzSpecRequest: no words stop the parser; what it refuses wraps
// ErrInvalid, and what it takes the planner can run or refuse cleanly.
func FuzzSpecRequest(f *testing.F) {
	for _, s := range []string{"1T", "300B", "2e12", "-1", "", "1e400", "max", "10%", "NaN", "fp8", "training", "17.3kW", "h100-sxm-80gb"} {
		f.Add(s, s, s)
	}
	cfg := builtin(f)
	cat := catalog.Default()
	f.Fuzz(func(t *testing.T, a, b, c string) {
		spec := planner.Spec{Mode: a, Batch: b, Tokens: c, MemoryHeadroom: a, Seq: b, TP: c, LatencyTargetMS: a, RackPower: b, GPU: c, Precision: a}
		r, err := spec.Request(cfg, cat, nil)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) && !errors.Is(err, gpufleet.ErrNotFound) {
				t.Fatalf("%+v: %v does not wrap ErrInvalid", spec, err)
			}
			return
		}
		if r.Tokens < 0 || r.MemoryHeadroom < 0 || r.MemoryHeadroom > 0.9 || r.Batch < 0 {
			t.Fatalf("%+v took %+v", spec, r)
		}
	})
}

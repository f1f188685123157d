package planner

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/model"
)

// The accuracy table: every row of testdata/ground_truth.csv (a copy of the
// published measurements in the project's reference data) is predicted by
// the planner with the same constants, or excluded with a reason.
// `go test ./planner -run TestAccuracyDoc -update` regenerates
// docs/ACCURACY.md; without -update the test fails when the committed
// document no longer matches what the planner predicts.

type gtRow struct {
	id, category, model, gpu, precision, workload, metric, unit, source string
	count                                                               int
	value                                                               float64
}

// readCSV reads testdata/name: its rows after the header, and each
// column's index by name.
func readCSV(t *testing.T, name string) (recs [][]string, col map[string]int) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col = map[string]int{}
	for i, h := range all[0] {
		col[h] = i
	}
	return all[1:], col
}

func readGroundTruth(t *testing.T) []gtRow {
	t.Helper()
	recs, col := readCSV(t, "ground_truth.csv")
	var rows []gtRow
	for _, r := range recs {
		n, _ := strconv.Atoi(r[col["gpu_count"]])
		v, err := strconv.ParseFloat(r[col["value"]], 64)
		if err != nil {
			t.Fatalf("%s: value: %v", r[0], err)
		}
		rows = append(rows, gtRow{id: r[col["id"]], category: r[col["category"]], model: r[col["model"]], gpu: r[col["gpu"]],
			precision: r[col["precision"]], workload: r[col["workload_params"]], metric: r[col["metric"]],
			unit: r[col["unit"]], source: r[col["source"]], count: n, value: v})
	}
	return rows
}

// loadModel reads a built-in, one of testdata/models or one of the model
// package's test configurations (model/testdata/README.md).
func loadModel(t *testing.T, name string) *model.Config {
	t.Helper()
	if cfg, err := model.Builtin(name); err == nil {
		return cfg
	}
	data, err := os.ReadFile(filepath.Join("testdata", "models", name+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		data, err = os.ReadFile(filepath.Join("..", "model", "testdata", name+".json"))
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.Parse(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// accCase predicts one row, or says why it is excluded.
type accCase struct {
	class       string // memory, kv-capacity, throughput, latency
	assumptions string
	exclude     string
	req         func(t *testing.T) Request
	// metric extracts the prediction in the row's unit.
	metric func(t *testing.T, r Request, p *Plan) float64
	// la is what the metric is in llm-analysis's terms.
	la laQ
}

func only(t *testing.T, p *Plan) Candidate {
	t.Helper()
	if len(p.Candidates) != 1 {
		t.Fatalf("want one candidate, got %d", len(p.Candidates))
	}
	c := p.Candidates[0]
	if !c.Fits {
		t.Fatalf("%s does not fit: %v", c.GPU, c.Notes)
	}
	return c
}

func tokensPerS(t *testing.T, _ Request, p *Plan) float64 { return *only(t, p).OutputTokensPerS }
func perGPUTokens(t *testing.T, _ Request, p *Plan) float64 {
	c := only(t, p)
	return *c.OutputTokensPerS / float64(c.GPUs)
}
func ttftMS(t *testing.T, _ Request, p *Plan) float64 { return *only(t, p).TimeToFirstTokenS * 1e3 }

// prefillMS is the prefill pass alone, without the engine's first-token
// overhead: what a kernel-level measurement (FasterTransformer's) times.
func prefillMS(t *testing.T, _ Request, p *Plan) float64 { return *only(t, p).BatchPrefillS * 1e3 }
func tpotMS(t *testing.T, _ Request, p *Plan) float64    { return *only(t, p).TimePerOutputTokenS * 1e3 }
func modelTFLOPsPerGPU(t *testing.T, r Request, p *Plan) float64 {
	c := only(t, p)
	h := newHW(r.GPUs[0], r.Precision, trainEfficiency, nil)
	return *c.MFU * h.sup.peak / 1e12
}

func inference(t *testing.T, m, gpu string, n int, prec, kv Format) Request {
	return Request{Model: loadModel(t, m), GPUs: gpus(t, gpu), GPUCount: n, Precision: prec, KVPrecision: kv}
}

// mlperf describes the Offline and Server workloads of MLPerf Inference
// v4.1 llama2-70b: OpenOrca prompts of about 840 tokens on average (an
// assumption), and 290 output tokens per sample (the row's tokens/s over
// its samples/s: 24524.9 / 84.48).
func mlperf(r Request) Request {
	r.InputTokens, r.OutputTokens, r.BatchMax = 840, 290, true
	return r
}

// mlperfOutputTokens are the MLPerf Inference datasets' documented mean
// output tokens per sample: the accuracy targets' tokens_per_sample in
// mlcommons/inference (language/llama2-70b/README.md: 294.45;
// language/mixtral-8x7b/README.md at v4.1: 145.9; language/llama3.1-405b:
// 684.68), rounded. The mean input lengths of the first two are not
// published; llama3.1-405b's is (mlperfInputTokens).
var mlperfOutputTokens = map[string]int{"llama-2-70b": 294, "mixtral-8x7b-v0.1": 146, "llama-3.1-405b": 685}

// mlperfInputTokens are the published mean input lengths: llama3.1-405b's
// "mean input/output context lengths of 9,400 and 680 tokens" (MLCommons,
// "MLPerf Inference v5.0 Advances Language Model Capabilities for GenAI",
// 2025-04).
var mlperfInputTokens = map[string]int{"llama-3.1-405b": 9400}

func mlperfServer(r Request) Request {
	r = mlperf(r)
	r.BatchMax, r.LatencyTargetS = false, 0.2 // TPOT <= 200 ms
	return r
}

func accuracyCases() map[string]accCase {
	const mlperfNote = "OpenOrca mean input ~840 tokens (assumed), 290 output tokens per sample (row's tokens/s over samples/s); FP8 KV cache as in the submissions; largest batch that fits; planner picks the layout of the 8 GPUs"
	return map[string]accCase{
		"GT001": {class: "throughput", assumptions: mlperfNote,
			req: func(t *testing.T) Request {
				return mlperf(inference(t, "llama-2-70b", "h100-sxm-80gb", 8, FormatFP8, FormatFP8))
			}, metric: tokensPerS, la: laQ{laOutputTokensPerS, 1}},
		"GT002": {class: "throughput", assumptions: "as GT001, batch limited by TPOT <= 200 ms (the Server constraint)",
			req: func(t *testing.T) Request {
				return mlperfServer(inference(t, "llama-2-70b", "h100-sxm-80gb", 8, FormatFP8, FormatFP8))
			}, metric: tokensPerS, la: laQ{laOutputTokensPerS, 1}},
		"GT005": {class: "throughput", assumptions: "as GT001 on one B200 in FP4 weights, FP8 KV",
			req: func(t *testing.T) Request {
				return mlperf(inference(t, "llama-2-70b", "b200-hgx", 1, FormatFP4, FormatFP8))
			}, metric: tokensPerS, la: laQ{laOutputTokensPerS, 1}},
		"GT006": {class: "throughput", assumptions: "as GT005, batch limited by TPOT <= 200 ms",
			req: func(t *testing.T) Request {
				return mlperfServer(inference(t, "llama-2-70b", "b200-hgx", 1, FormatFP4, FormatFP8))
			}, metric: tokensPerS, la: laQ{laOutputTokensPerS, 1}},
		"GT007": {class: "throughput", assumptions: mlperfNote,
			req: func(t *testing.T) Request {
				return mlperf(inference(t, "llama-2-70b", "mi300x", 8, FormatFP8, FormatFP8))
			}, metric: tokensPerS, la: laQ{laOutputTokensPerS, 1}},
		"GT009": {class: "throughput", assumptions: "as GT001 on one MI300X",
			req: func(t *testing.T) Request {
				return mlperf(inference(t, "llama-2-70b", "mi300x", 1, FormatFP8, FormatFP8))
			}, metric: tokensPerS, la: laQ{laOutputTokensPerS, 1}},
		"GT010": {class: "throughput", assumptions: "146 output tokens per sample, the mixtral-8x7b benchmark's documented mean (mlcommons/inference language/mixtral-8x7b/README.md, v4.1: tokens_per_sample 145.9); input lengths are not published: llama2-70b's 840 are assumed",
			req: func(t *testing.T) Request {
				r := mlperf(inference(t, "mixtral-8x7b-v0.1", "h100-sxm-80gb", 8, FormatFP8, FormatFP8))
				r.OutputTokens = mlperfOutputTokens["mixtral-8x7b-v0.1"]
				return r
			}, metric: tokensPerS, la: laQ{laOutputTokensPerS, 1}},
		"GT013": {class: "throughput", assumptions: "precision not stated: FP4 weights and FP8 KV as in NVIDIA's Blackwell submissions; one NVL72 rack of 72 GPUs; unverified result",
			req: func(t *testing.T) Request {
				return mlperf(inference(t, "llama-2-70b", "gb200-per-gpu", 72, FormatFP4, FormatFP8))
			}, metric: tokensPerS, la: laQ{laOutputTokensPerS, 1}},
		"GT014": {class: "throughput", assumptions: "LLaMA-7B = llama-2-7b dimensions; A100 SXM4 80GB; batch 256, 128 in, 128 out",
			req: func(t *testing.T) Request {
				r := inference(t, "llama-2-7b", "a100-sxm-80gb", 1, FormatFP16, FormatFP16)
				r.Batch, r.InputTokens, r.OutputTokens = 256, 128, 128
				return r
			}, metric: perGPUTokens, la: laQ{laOutputTokensPerS, 1}}, // per GPU, of one GPU
		"GT015": {class: "throughput", assumptions: "as GT014 with batch 32, 128 in, 2048 out",
			req: func(t *testing.T) Request {
				r := inference(t, "llama-2-7b", "a100-sxm-80gb", 1, FormatFP16, FormatFP16)
				r.Batch, r.InputTokens, r.OutputTokens = 32, 128, 2048
				return r
			}, metric: perGPUTokens, la: laQ{laOutputTokensPerS, 1}}, // per GPU, of one GPU
		"GT018": {class: "latency", assumptions: "time to first token of batch 1, 128 prompt tokens",
			req: func(t *testing.T) Request {
				r := inference(t, "llama-2-7b", "a100-sxm-80gb", 1, FormatFP16, FormatFP16)
				r.Batch, r.InputTokens, r.OutputTokens = 1, 128, 1
				return r
			}, metric: ttftMS, la: laQ{laTTFT, 1e3}},
		"GT020": {class: "latency", assumptions: "kipply 13B config (testdata/models/SOURCES.md); prefill of 512 tokens at batch 1, the pass alone (a kernel-level measurement)",
			req: func(t *testing.T) Request {
				r := inference(t, "kipply-13b", "a100-sxm-40gb", 1, FormatFP16, FormatFP16)
				r.Batch, r.InputTokens, r.OutputTokens = 1, 512, 10
				return r
			}, metric: prefillMS, la: laQ{laPrefill, 1e3}},
		"GT022": {class: "latency", assumptions: "as GT020, one decode step",
			req: func(t *testing.T) Request {
				r := inference(t, "kipply-13b", "a100-sxm-40gb", 1, FormatFP16, FormatFP16)
				r.Batch, r.InputTokens, r.OutputTokens = 1, 512, 10
				return r
			}, metric: tpotMS, la: laQ{laTPOT, 1e3}},
		"GT023": {class: "throughput", assumptions: "tensor parallelism 8, batch 1, 128 in, 128 out: output tokens over end-to-end latency; FP8 KV",
			req: func(t *testing.T) Request {
				r := inference(t, "llama-3.1-405b", "mi300x", 8, FormatFP8, FormatFP8)
				r.TP, r.Batch, r.InputTokens, r.OutputTokens = 8, 1, 128, 128
				return r
			}, metric: tokensPerS, la: laQ{laOutputTokensPerS, 1}},
		"GT025": {class: "kv-capacity", assumptions: "vLLM's rule, as the planner sizes it (docs/PLANNER.md#engine-memory): 0.9 of the GPU's memory less the weights, the profile run's activations and non-torch memory, over 16-token blocks of 512 KiB per token; an A100 runs vLLM's small batch defaults",
			req: func(t *testing.T) Request {
				r := inference(t, "llama-2-7b", "a100-sxm-80gb", 1, FormatFP16, FormatFP16)
				r.Batch = 1 // the cache the engine allocates does not depend on the batch
				return r
			},
			metric: func(t *testing.T, r Request, p *Plan) float64 {
				return math.Floor(float64(*only(t, p).KVCacheTokens) / pagedBlockTokens)
			}, la: laQ{laKVTokens, 1.0 / pagedBlockTokens}},
		"GT029": {class: "memory", assumptions: "seq 4096, distributed optimizer (ZeRO-1), fp32 gradient accumulation, flash attention (selective recompute), as in the Megatron Llama-2 recipe of the same period (Megatron-LM#597); compared without the CUDA context and allocator slack, which PyTorch's peak-allocated figure leaves out; GB = 1e9 bytes",
			req: func(t *testing.T) Request {
				return Request{Model: loadModel(t, "llama-2-7b"), Mode: Training, GPUs: gpus(t, "a100-sxm-80gb"), GPUCount: 16,
					TP: 1, PP: 2, DP: 8, MicroBatch: 2, GlobalBatch: 2048, Seq: 4096, ZeRO: 1, FP32GradAccum: true, Recompute: RecomputeSelective}
			},
			metric: func(t *testing.T, _ Request, p *Plan) float64 {
				m := only(t, p).MemoryPerGPU
				return float64(m.TotalBytes-m.OverheadBytes) / 1e9
			}, la: laQ{laPeakMemoryPerGPU, 1e-9}},
		"GT031": {class: "throughput", assumptions: "TP8 PP16 DP64, seq 8192, 2048 sequences per step, micro-batch 1, no context parallelism; with selective recompute the planner's activations do not fit 80 GB (86.5 GiB), so full recompute is assumed; MFU counts model FLOPs only",
			req: func(t *testing.T) Request {
				return Request{Model: loadModel(t, "llama-3.1-405b"), Mode: Training, GPUs: gpus(t, "h100-sxm-80gb"), GPUCount: 8192,
					TP: 8, PP: 16, DP: 64, Seq: 8192, MicroBatch: 1, GlobalBatch: 2048, ZeRO: 1, Recompute: RecomputeFull}
			}, metric: modelTFLOPsPerGPU, la: laQ{laModelFLOPsPerGPU, 1e-12}},
		"GT032": {class: "throughput", assumptions: "as GT031 with DP128 (16384 GPUs) and the same 16M-token batch",
			req: func(t *testing.T) Request {
				return Request{Model: loadModel(t, "llama-3.1-405b"), Mode: Training, GPUs: gpus(t, "h100-sxm-80gb"), GPUCount: 16384,
					TP: 8, PP: 16, DP: 128, Seq: 8192, MicroBatch: 1, GlobalBatch: 2048, ZeRO: 1, Recompute: RecomputeFull}
			}, metric: modelTFLOPsPerGPU, la: laQ{laModelFLOPsPerGPU, 1e-12}},
		"GT034": {class: "throughput", assumptions: "MT-NLG config (testdata/models); TP8 PP35 DP8, GBS 1920, seq 2048, micro-batch 1, ZeRO-1",
			req: func(t *testing.T) Request {
				return Request{Model: loadModel(t, "mt-nlg-530b"), Mode: Training, GPUs: gpus(t, "a100-sxm-40gb"), GPUCount: 2240,
					TP: 8, PP: 35, DP: 8, Seq: 2048, MicroBatch: 1, GlobalBatch: 1920, ZeRO: 1}
			}, metric: modelTFLOPsPerGPU, la: laQ{laModelFLOPsPerGPU, 1e-12}},
		"GT035": {class: "throughput", assumptions: "1T config (testdata/models); TP8 PP64 DP6, GBS 3072, seq 2048, full recompute; the paper counts recompute FLOPs, so the prediction does too (4/3 of model FLOPs)",
			req: func(t *testing.T) Request {
				return Request{Model: loadModel(t, "megatron-1t"), Mode: Training, GPUs: gpus(t, "a100-sxm-80gb"), GPUCount: 3072,
					TP: 8, PP: 64, DP: 6, Seq: 2048, MicroBatch: 1, GlobalBatch: 3072, ZeRO: 1, Recompute: RecomputeFull}
			},
			metric: func(t *testing.T, r Request, p *Plan) float64 {
				return modelTFLOPsPerGPU(t, r, p) * 4 / 3 * 3072 / 1e3
			}, la: laQ{laModelFLOPsPerGPU, 1e-12 * 4 / 3 * 3072 / 1e3}},
		"GT037": {class: "throughput", assumptions: "LLaMA-65B config (testdata/models); 2048 GPUs, seq 2048, 4M-token batch (2048 sequences), layout chosen by the planner",
			req: func(t *testing.T) Request {
				return Request{Model: loadModel(t, "llama-65b"), Mode: Training, GPUs: gpus(t, "a100-sxm-80gb"), GPUCount: 2048,
					Seq: 2048, MicroBatch: 1, GlobalBatch: 2048, ZeRO: 1}
			},
			metric: func(t *testing.T, _ Request, p *Plan) float64 {
				c := only(t, p)
				return *c.TrainingTokensPerS / float64(c.GPUs)
			}, la: laQ{laTrainTokensPerGPU, 1}},
		"GT028": {exclude: "negative example, not a measurement: accelerate once estimated 64.73 GB for Llama-3.1-70B in fp16. The planner's weights for that model in fp16 are shown beside it to prove it does not repeat the bug"},
		"GT039": {exclude: "MLPerf time-to-train depends on the tokens needed to reach the convergence target, which the source does not give"},
		"GT041": {exclude: "GEMM microbenchmark: belongs to `gpufleet bench`; it informs the compute efficiency constant"},
		"GT042": {exclude: "HBM microbenchmark: belongs to `gpufleet bench`; it informs the memory efficiency constant"},
		"GT043": {exclude: "profiled HBM efficiency: informs the memory efficiency constant"},
		"GT044": {exclude: "NCCL microbenchmark: informs the link efficiency constant"},
		"GT046": {exclude: "NCCL microbenchmark (NVLink bridge pair)"},
		"GT048": {exclude: "NCCL microbenchmark (inter-node)"},
	}
}

type accResult struct {
	row       gtRow
	c         accCase
	predicted float64
	errPct    float64
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtVal(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// accuracyDoc predicts every row and renders docs/ACCURACY.md, with
// llm-analysis's predictions of the same rows beside the planner's.
func accuracyDoc(t *testing.T, la *baseline) (string, map[string][]float64) {
	rows := readGroundTruth(t)
	cases := accuracyCases()
	var results []accResult
	var excluded []accResult
	pairs := map[string][]pair{}
	var all []pair
	laBy := map[string]laPred{}
	for _, row := range rows {
		c, ok := cases[row.id]
		if !ok {
			t.Fatalf("row %s is neither predicted nor excluded", row.id)
		}
		if c.exclude != "" {
			excluded = append(excluded, accResult{row: row, c: c})
			continue
		}
		r := c.req(t)
		p, err := Run(r, nil)
		if err != nil {
			t.Fatalf("%s: %v", row.id, err)
		}
		pred := c.metric(t, r, p)
		res := accResult{row: row, c: c, predicted: pred, errPct: 100 * (pred - row.value) / row.value}
		results = append(results, res)
		lp := la.add(newLAInput(t, laRow{ID: row.id, Kind: c.class, Metric: row.metric, Unit: row.unit, Measured: row.value}, c.la, r, only(t, p)))
		laBy[row.id] = lp
		pr := newPair(row.id, res.errPct, lp, row.value)
		pairs[c.class], all = append(pairs[c.class], pr), append(all, pr)
	}
	abs := map[string][]float64{}
	for _, r := range results {
		abs[r.c.class] = append(abs[r.c.class], math.Abs(r.errPct))
	}
	var b strings.Builder
	b.WriteString("# Planner accuracy\n\n")
	b.WriteString("Generated by `go test ./planner -run TestAccuracyDoc -update`; the test fails when this file no longer\n")
	b.WriteString("matches what the planner predicts. Rows come from planner/testdata/ground_truth.csv, a copy of the\n")
	b.WriteString("project's published measurements, each with its source. Every row is predicted with the same\n")
	b.WriteString("constants (planner/constants.go), none fitted per row or per model family, or excluded with a reason.\n")
	b.WriteString("Beside each prediction is llm-analysis's of the same row, from the same inputs (\"llm-analysis\" below).\n\n")
	b.WriteString("## Summary\n\n| class | rows | median absolute error | goal | llm-analysis rows | llm-analysis median absolute error | gpufleet on those rows |\n|---|---|---|---|---|---|---|\n")
	goals := map[string]float64{"memory": 10, "kv-capacity": 10, "throughput": 20, "latency": 20}
	for _, class := range []string{"memory", "kv-capacity", "throughput", "latency"} {
		m := median(abs[class])
		verdict := "met"
		if m > goals[class] {
			verdict = "missed"
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f%% | <= %.0f%% (%s) | %s |\n", class, len(abs[class]), m, goals[class], verdict, laSummary(pairs[class]))
	}
	b.WriteString("\nFor comparison (planning.md section 2): on the LLaMA-7B/A100 TensorRT-LLM rows (GT014, GT015,\n")
	b.WriteString("GT018) LLM-Viewer's roofline predicts 8934.5 and 2796.6 tokens/s and 6.98 ms, errors of +67%,\n")
	var viewer []string
	for _, id := range []string{"GT014", "GT015", "GT018"} {
		for _, r := range results {
			if r.row.id == id {
				v, e := laBy[id].cells(r.row.value, fmtVal)
				viewer = append(viewer, v+" ("+e+")")
			}
		}
	}
	fmt.Fprintf(&b, "+84%% and -57%%; llm-analysis, run on the same rows (below), predicts %s.\n\n", strings.Join(viewer, ", "))
	fmt.Fprintf(&b, "llm-analysis is closer than gpufleet on: %s.\n\n", laWins(all))
	b.WriteString("## Predicted rows\n\n| id | class | model | hardware | metric | measured | predicted | error | llm-analysis | llm-analysis error | assumptions |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		lv, le := laBy[r.row.id].cells(r.row.value, fmtVal)
		fmt.Fprintf(&b, "| %s | %s | %s | %d x %s | %s (%s) | %s | %s | %+.1f%% | %s | %s | %s; llm-analysis: %s |\n", r.row.id, r.c.class, r.row.model,
			r.row.count, r.row.gpu, r.row.metric, r.row.unit, fmtVal(r.row.value), fmtVal(r.predicted), r.errPct, lv, le, r.c.assumptions, laBy[r.row.id].note)
	}
	b.WriteString("\n## Excluded rows\n\n| id | category | what | reason |\n|---|---|---|---|\n")
	for _, r := range excluded {
		reason := r.c.exclude
		if r.row.id == "GT028" {
			w := newShape(loadModel(t, "llama-3.1-70b")).inferenceWeights(FormatFP16, layout{tp: 1, pp: 1, dp: 1, ep: 1})
			reason += fmt.Sprintf(" (planner: %.1f GB of fp16 weights)", w/1e9)
		}
		fmt.Fprintf(&b, "| %s | %s | %s on %s | %s |\n", r.row.id, r.row.category, r.row.model, r.row.gpu, reason)
	}
	b.WriteString(publishedSection(t, la))
	b.WriteString(engineLogSection(t, la))
	b.WriteString(accuracyDiscussion)
	return b.String(), abs
}

// accuracyDiscussion is the hand-written part of docs/ACCURACY.md.
const accuracyDiscussion = `
## llm-analysis

llm-analysis (github.com/cli99/llm-analysis, Apache-2.0) version 0.2.2 at commit d841e40, under
Debian's /usr/bin/python3 (3.11) with Debian's python3-fire 0.5.0, its only dependency, is run on every
row above that the planner predicts. ` + "`go test ./planner -run TestAccuracyDoc -update`" + ` writes the facts
each row was planned with to planner/testdata/accuracy_inputs.json (the model's dimensions, the GPU's
catalog figures, the layout, batch, tokens, bit widths and engine memory fraction the planner used);
` + "`/usr/bin/python3 scripts/llm-analysis-baseline --llm-analysis DIR`" + ` (DIR a checkout of that commit)
builds llm-analysis's ModelConfig, GPUConfig, DtypeConfig and ParallelismConfig from them, calls its
` + "`LLMAnalysis(...).inference(...)` or `.training(...)`" + ` and writes planner/testdata/llm_analysis.csv, which
this test reads (it fails when the inputs it would write are not the committed ones). The script's
header says how each fact maps; in short: the GPU from the planner's catalog for every row, its
memory the engine's memory fraction of the GPU's; FP8 as llm-analysis's 8-bit type and FP4 as its
4-bit one; the planner's batch per replica, or llm-analysis's own largest batch where the planner's
does not fit its memory (it keeps every sequence's whole context); throughput times the replicas;
ZeRO over DP, selective recompute as its ATTN_COMPUTE; its default efficiencies (FLOPS 1, HBM 1,
links 1), on every row. llm-analysis has no engine memory rule, so its KV cache is the tokens its own
figures leave room for: its memory less its weights and its batch-1 activations of the row's input,
over its KV bytes per token. Where it cannot be given a row's facts it makes no prediction and the row
says why: multi-head latent attention (Kimi K2, DeepSeek-V3), a head size that is not hidden / heads
(Qwen3, MiniMax-M2: it derives the head size), context parallelism (the NeMo Llama 3 rows, Llama 3
405B's long-context stage).

Where it beats gpufleet: the Llama-2-70B MLPerf throughput rows the planner under-predicts on H100,
H200 and MI325X (GT001, GT002, PM001, PM002, PM011, PM012: -8% to -28% against -22% to -40%), where its
ideal efficiencies happen to land nearer; on B200 and GB200 (GT005, GT006, GT013) both are within a
point of each other; PM028 (+104% against +126%, both far over) and PM032 (-2% against +8%). Where it
loses, and why, as far as its code shows: Mixtral throughput is +55% to +70% (its MoE counts one
expert's FLOPs per token, not the top two); long outputs are under-predicted by half (GT015, PM035:
it reads and writes the KV cache of the final length at every step); batch-1 latency is 22% to 58% too
fast (GT018, GT020, GT022, PM030: peak FLOPS and bandwidth, no fixed cost per layer or step); Llama 3
405B throughput is +77% to +182% (GT023, PM007, PM008, PM029, PM033, PM034); on the other throughput
rows (GT007, GT009, GT014, PM006, PM031) it is 4 to 18 points further off than gpufleet; training is
81% to 91% slow (it charges an all-gather of each layer's weights over the data-parallel group at
every ZeRO stage, over the inter-node link where TP x DP passes 8 GPUs, and that all-gather sets its
step time); KV capacity is over on every row, by 4% to 70% (no CUDA context, engine buffers or
profile-run activations); weights are 7% under (it counts the output head as tied to the embedding,
which Llama and Qwen2 do not); GT029's training memory is -31%. Medians per split and kind are in each
summary table, with gpufleet's on the same rows.

## How to read it

- Error is (predicted - measured) / measured. Throughput rows of MLPerf are whole-system offline or
  server runs of heavily tuned engines (TensorRT-LLM, vLLM) with continuous batching and in-flight
  prefill; the planner models a static batch with chunked prefill, so it is a capacity planner, not
  a replacement for a benchmark on the real card (` + "`gpufleet bench`" + `).
- The constants are documented in planner/constants.go with their sources: memory efficiency 0.80,
  GEMM efficiency 0.65, training kernel efficiency 0.58, 50 us of fixed cost per layer and forward
  pass, 15 us per NCCL collective inside an NVLink domain, link efficiency 0.80 of line rate.
- Where a goal is missed the table still stands; the rows with the largest errors name the
  mechanisms the planner does not model (see the notes in docs/PLANNER.md).
- On the published measurements the goals (capacity within 10% and never over by more than 15%,
  throughput and latency median within 15%, none worse than 50%) hold for the held-out latency row
  and the median of KV capacity; they do not hold for throughput, for training, or for the worst KV
  rows. Why, as far as the rows show:
  - KV capacity of MoE checkpoints is over-promised: Qwen3-235B-A22B-FP8 on 4 H100 by 37% under vLLM
    (PM014, run with an LMCache connector, whose buffers are not modelled) and 18% under SGLang
    (PM015, held out); Kimi-K2-Thinking by 23% (PM016: its INT4 experts use 32-value groups and keep
    attention in 16 bits, which the planner's INT4 of 128-value groups does not express). Dense
    models and MiniMax-M2 land within 3%.
  - vLLM on MI300X runs at about half the throughput the planner predicts from AMD's performance
    page (+106%, +126%), while AMD's MLPerf runs of the same engine land within 28%. A vendor GEMM
    factor from AMD's own max-achievable-FLOPs measurements (FP8 0.49 of peak against H100's
    0.65-0.70 in Azure's benchmark: 0.73) was tried: it brought those two rows to +72% and +96% but
    the MLPerf rows to -43% to -47% (and GT007/GT009 from +5%/0% to -23%/-26%), so it was not
    adopted: the gap is not the GEMM efficiency. No engine-level efficiency figure that was not a
    benchmark of these rows was found, so the engines differ in memory, not in speed.
  - NVIDIA's llama2-70b MLPerf runs on H200 are under-predicted by about 40% (input lengths are not
    published; 840 is assumed).
  - FP8 training is still faster in the plan than NeMo measures (+35% held out): the planner runs
    the linear layers at FP8 peak times the training efficiency, and casts, amax and other BF16 work
    are not modelled. The large published runs (Llama 3 405B, DeepSeek-V3) fit only with full
    recompute in the plan, which costs a third more compute than their own memory savings did, and
    come out 14-24% slow.
  Each is a mechanism to model, not a constant to fit on these rows.
- Engine logs (issue 37): the KV cache of dense models under vLLM's V0 and V1 profiles lands within
  8% on every dev row and on three of the four held-out rows; TensorRT-LLM is within 4% on its 2025
  row. Where we lose: EL006 (held out), Llama-2-70B at TP 4 on A100 under a vLLM of the 0.2 era, is
  over-promised by 52%, and still by 45% at the low end admission plans on: that release counted
  about 13 GiB per GPU of memory outside the model that no profile has (the log names no release, so
  it is planned with the oldest profile, 0.5). EL007, a 2023 TensorRT-LLM engine built for 25
  sequences of 4K tokens, is over by 48%: engines then sized their buffers on the build's maximum
  batch and lengths, which the one TensorRT-LLM profile (the LLM API's max_num_tokens) does not.
  That row widens TensorRT-LLM's band to +48%, so its admission is conservative. No KV-connector
  (LMCache) row printed its figures; connectors are not modelled. llm-analysis is run on these rows
  beside the planner (see "llm-analysis" above): it over-promises every KV row, by 4% to 70%.
- Mixture of experts (this round): expert parallelism, grouped-GEMM efficiency (DeepGEMM) and load
  imbalance (TensorRT-LLM's EPLB measurement) moved the Mixtral rows from -2%..-11% to -5%..-11% and
  the held-out PM003 from -4.0% to -7.3% (seen before, by constants set on other sources). DeepSeek-V3's
  pre-training came out +84% GPU-hours until the expert all-to-all was hidden behind another
  micro-batch's computation as DualPipe does (+20%); that was checked against PM041, the same run, so
  PM027 counts as dev. Rows that were excluded for want of a model config (Qwen3, Kimi K2, MiniMax-M2,
  GPT-3, DeepSeek-V3) are predicted now, and the KV cache of rows that name no KV precision follows
  the engine's default (fp8 only in MLPerf and TensorRT-LLM FP8 checkpoints; vLLM's and SGLang's
  "auto" keeps 16 bits): PM015 went from +135% to +18% with that rule, after its error was seen.
- SGLang's KV pool (2026-12-07, after PM015's +17.6% was seen): SGLang takes mem_fraction_static of
  the memory free before the model loads, after the CUDA context and the collectives' set-up, not of
  the whole GPU (its profile_max_num_token: what is free after the load less 1 - mem_fraction_static
  of the pre-load free memory). Planned so, PM015 is +9.2%. The rule is the engine's source code, no
  constant was set on the row, but the row's error led to reading that code: PM015 is reported with
  both figures, and SGLang still has no dev row, so its band stays the widest.
- FP8 training first ran attention in FP8 too (+65% held out, PM024; dev +23%, +17%). Transformer
  Engine keeps attention in BF16; modelled so, they are +35%, +11%, +10%. PM024's prediction thus
  changed after its error was seen, by a mechanism (no constant), and is reported with both figures.
- Mixtral's rows first used llama2-70b's 290 output tokens per sample and came out +37% (GT010) to
  +88%, the held-out PM003 +56.6%. MLPerf documents Mixtral's mean output as 145.9 tokens; with that
  input fact (not a constant) they are within 12%, PM003 -4.0%. PM003's prediction thus changed after
  its error was seen, and is reported with both figures.
`

func TestAccuracyDoc(t *testing.T) {
	la := loadBaseline(t)
	got, abs := accuracyDoc(t, la)
	path := filepath.Join("..", "docs", "ACCURACY.md")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./planner -run TestAccuracyDoc -update)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("docs/ACCURACY.md is stale (-committed +now); regenerate with -update:\n%s", diff)
	}
	la.check(t)
	// Guard against silent regressions beyond the goals' neighbourhood.
	for class, limit := range map[string]float64{"memory": 10, "kv-capacity": 10, "throughput": 30, "latency": 30} {
		if m := median(abs[class]); m > limit {
			t.Errorf("%s: median absolute error %.1f%% exceeds %.0f%%", class, m, limit)
		}
	}
}

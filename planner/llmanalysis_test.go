package planner

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
)

// llm-analysis (github.com/cli99/llm-analysis) beside the planner on the
// rows of docs/ACCURACY.md (issue 37). As the doc is drawn, every row the
// planner predicts records the facts it was planned with, as the planner
// resolved them (the layout and batch it chose, the formats it computes
// in); -update writes them to testdata/accuracy_inputs.json, and
// scripts/llm-analysis-baseline gives the same facts to llm-analysis and
// writes its predictions to testdata/llm_analysis.csv. The test reads only
// those two committed files (CI has no Python): it fails when the inputs it
// would write differ from the committed ones, or a row has no prediction.

const (
	laInputsFile = "accuracy_inputs.json"
	laPredsFile  = "llm_analysis.csv"
)

// The quantities a row asks llm-analysis for (laInput.Quantity); the
// row's figure is the quantity times laInput.Scale.
const (
	laOutputTokensPerS   = "output_tokens_per_s"           // output tokens/s of all replicas
	laTTFT               = "time_to_first_token_s"         // first token of the batch
	laPrefill            = "prefill_s"                     // the prefill pass alone
	laTPOT               = "time_per_output_token_s"       // one decode step
	laE2E                = "e2e_latency_s"                 // prefill and every decode step
	laKVTokens           = "kv_cache_tokens"               // KV cache per replica
	laKVBytesPerGPU      = "kv_cache_bytes_per_gpu"        // KV cache per GPU
	laWeightsBytesPerGPU = "weights_bytes_per_gpu"         // weights per GPU
	laTrainTokensPerGPU  = "training_tokens_per_s_per_gpu" // training tokens/s over all GPUs
	laModelFLOPsPerGPU   = "model_flops_per_s_per_gpu"     // model FLOP/s per GPU
	laTrainGPUHours      = "training_gpu_hours"            // GPU-hours for Tokens
	laPeakMemoryPerGPU   = "peak_memory_bytes_per_gpu"     // training memory per GPU
)

// laQ is what a row's figure is in llm-analysis's terms: a quantity and
// the row's unit per unit of it.
type laQ struct {
	quantity string
	scale    float64
}

// laRow names a row of the doc.
type laRow struct {
	ID       string  `json:"id"`
	Kind     string  `json:"kind"`
	Metric   string  `json:"metric"`
	Unit     string  `json:"unit"`
	Measured float64 `json:"measured"`
	Split    string  `json:"split,omitempty"` // dev or heldout; none for ground_truth.csv
}

// laModel is a model's dimensions as the planner reads its config.
type laModel struct {
	Name           string `json:"name"`
	Hidden         int    `json:"hidden"`
	Layers         int    `json:"layers"`
	Heads          int    `json:"heads"`
	KVHeads        int    `json:"kv_heads"`
	HeadDim        int    `json:"head_dim"`
	Intermediate   int    `json:"intermediate"` // dense MLP
	Vocab          int    `json:"vocab"`
	MaxPositions   int    `json:"max_positions"`
	GatedMLP       bool   `json:"gated_mlp"`
	TiedEmbeddings bool   `json:"tied_embeddings"`
	// Mixture of experts: routed experts, top-k, one expert's
	// intermediate size, shared experts and the layers that route.
	Experts            int   `json:"experts,omitempty"`
	ActiveExperts      int   `json:"active_experts,omitempty"`
	ExpertIntermediate int   `json:"expert_intermediate,omitempty"`
	SharedExperts      int   `json:"shared_experts,omitempty"`
	MoELayers          int   `json:"moe_layers,omitempty"`
	MLA                bool  `json:"mla,omitempty"`
	SlidingLayers      int   `json:"sliding_layers,omitempty"`
	Params             int64 `json:"params"`
}

// laGPU is a GPU's catalog figures.
type laGPU struct {
	ID                       string  `json:"id"`
	MemoryBytes              int64   `json:"memory_bytes"`
	MemoryBandwidthBytesPerS float64 `json:"memory_bandwidth_bytes_per_s"`
	// Dense peaks of the widest 16-bit format, of FP8 (else INT8) and of
	// FP4; 0 where the card has none.
	Peak16FLOPS float64 `json:"peak_16bit_flops"`
	Peak8FLOPS  float64 `json:"peak_8bit_flops"`
	Peak4FLOPS  float64 `json:"peak_4bit_flops"`
	// LinkBytesPerS is the GPU-to-GPU bandwidth per direction inside
	// the domain of DomainSize GPUs; NetworkBytesPerS the scale-out
	// network's per GPU (the planner's constant).
	LinkBytesPerS    float64 `json:"link_bytes_per_s"`
	DomainSize       int     `json:"domain_size"`
	NetworkBytesPerS float64 `json:"network_bytes_per_s"`
}

// laInput is one predicted row and the facts the planner was given and
// resolved for it.
type laInput struct {
	laRow
	Quantity string  `json:"quantity"`
	Scale    float64 `json:"scale"`
	Mode     Mode    `json:"mode"`
	Model    laModel `json:"model"`
	GPU      laGPU   `json:"gpu"`
	GPUs     int     `json:"gpus"`
	TP       int     `json:"tp"`
	PP       int     `json:"pp"`
	DP       int     `json:"dp"`
	EP       int     `json:"ep"`
	CP       int     `json:"cp"`
	// Bits of the weights, of the format the GEMMs compute in, and of
	// the KV cache (inference).
	WeightBits  int `json:"weight_bits"`
	ComputeBits int `json:"compute_bits"`
	KVBits      int `json:"kv_bits,omitempty"`
	// Inference: the batch per replica, the tokens of each sequence and
	// the engine's memory fraction in force.
	Batch          int     `json:"batch,omitempty"`
	InputTokens    int     `json:"input_tokens,omitempty"`
	OutputTokens   int     `json:"output_tokens,omitempty"`
	MemoryFraction float64 `json:"memory_fraction,omitempty"`
	// Training.
	MicroBatch  int       `json:"micro_batch,omitempty"`
	Seq         int       `json:"seq,omitempty"`
	GlobalBatch int       `json:"global_batch,omitempty"`
	Recompute   Recompute `json:"recompute,omitempty"`
	ZeRO        int       `json:"zero,omitempty"`
	Tokens      int64     `json:"tokens,omitempty"`
}

// formatBits is each format's nominal width; compute formats count as
// the storage formats of the same width.
var formatBits = map[string]int{"fp32": 32, "tf32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4, "fp4": 4}

// newLAInput records the facts of a row planned by r whose plan is c.
func newLAInput(t *testing.T, row laRow, q laQ, r Request, c Candidate) laInput {
	t.Helper()
	r, err := r.withDefaults()
	if err != nil {
		t.Fatalf("%s: %v", row.ID, err)
	}
	m, g := r.Model, r.GPUs[0]
	hd := m.HeadDim
	if hd == 0 && m.NumHeads > 0 {
		hd = m.HiddenSize / m.NumHeads
	}
	md := laModel{Name: m.Name, Hidden: m.HiddenSize, Layers: m.NumLayers, Heads: m.NumHeads, KVHeads: m.NumKVHeads, HeadDim: hd,
		Intermediate: m.IntermediateSize, Vocab: m.VocabSize, MaxPositions: m.MaxPositionEmbeddings, GatedMLP: m.GatedMLP,
		TiedEmbeddings: m.TieWordEmbeddings, MLA: m.IsMLA(), Params: m.Params().Total}
	if md.KVHeads == 0 {
		md.KVHeads = m.NumHeads
	}
	if m.IsMoE() {
		md.Experts, md.ActiveExperts, md.ExpertIntermediate, md.SharedExperts = m.NumExperts, m.NumExpertsPerToken, m.MoEIntermediateSize, m.NumSharedExperts
	}
	for i := range m.NumLayers {
		if m.IsMoE() && (m.MoELayers == nil || i < len(m.MoELayers) && m.MoELayers[i]) {
			md.MoELayers++
		}
		if m.IsSlidingLayer(i) {
			md.SlidingLayers++
		}
	}
	peak := func(ps ...gpufleet.Precision) float64 {
		for _, p := range ps {
			if v, ok := g.Peak(p); ok {
				return v
			}
		}
		return 0
	}
	in := laInput{laRow: row, Quantity: q.quantity, Scale: q.scale, Mode: r.Mode, Model: md,
		GPU: laGPU{ID: g.ID, MemoryBytes: g.MemoryBytes, MemoryBandwidthBytesPerS: g.MemoryBandwidthBytesPerS,
			Peak16FLOPS: peak(gpufleet.BF16, gpufleet.FP16), Peak8FLOPS: peak(gpufleet.FP8, gpufleet.INT8), Peak4FLOPS: peak(gpufleet.FP4),
			LinkBytesPerS: g.InterconnectBandwidthBytesPerS / 2, DomainSize: g.DomainSize, NetworkBytesPerS: interNodeBytesPerSPerGPU},
		GPUs: c.GPUs, TP: c.TP, PP: c.PP, DP: c.DP, EP: c.EP, CP: c.CP,
		WeightBits: formatBits[string(r.Precision)], ComputeBits: formatBits[c.ComputePrecision]}
	if r.Mode == Training {
		in.MicroBatch, in.Seq, in.GlobalBatch, in.ZeRO = r.MicroBatch, r.Seq, r.GlobalBatch, r.ZeRO
		if q.quantity == laTrainGPUHours {
			in.Tokens = r.Tokens
		}
		if c.Recompute != nil {
			in.Recompute = *c.Recompute
		}
		return in
	}
	in.KVBits, in.InputTokens, in.OutputTokens = formatBits[string(r.KVPrecision)], r.InputTokens, r.OutputTokens
	if c.Batch != nil {
		in.Batch = *c.Batch
	}
	if rv := c.MemoryPerGPU.Reserve; rv != nil {
		in.MemoryFraction = rv.Cap
	}
	return in
}

// laPred is llm-analysis's prediction of a row, in the row's unit, and
// how it was derived or why there is none.
type laPred struct {
	value float64
	ok    bool
	note  string
}

// baseline is llm-analysis's side of the doc: the inputs recorded as the
// tables are drawn, and the committed predictions.
type baseline struct {
	inputs []laInput
	preds  map[string]laPred // by id and metric
}

func laKey(id, metric string) string { return id + " " + metric }

// loadBaseline reads testdata/llm_analysis.csv; a missing file reads as
// no predictions, so that -update can write the inputs it needs.
func loadBaseline(t *testing.T) *baseline {
	t.Helper()
	b := &baseline{preds: map[string]laPred{}}
	f, err := os.Open(filepath.Join("testdata", laPredsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return b
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) == 0 || strings.Join(recs[0], ",") != "id,metric,llm_analysis,note" {
		t.Fatalf("%s: want the header id,metric,llm_analysis,note (%v)", laPredsFile, err)
	}
	for _, r := range recs[1:] {
		p := laPred{note: r[3]}
		if r[2] != "" {
			if p.value, err = strconv.ParseFloat(r[2], 64); err != nil {
				t.Fatalf("%s: %s %s: %v", laPredsFile, r[0], r[1], err)
			}
			p.ok = true
		}
		b.preds[laKey(r[0], r[1])] = p
	}
	return b
}

// add records a row's inputs and returns llm-analysis's prediction of it.
func (b *baseline) add(in laInput) laPred {
	b.inputs = append(b.inputs, in)
	return b.preds[laKey(in.ID, in.Metric)]
}

// errPct is p's error against measured; ok is false without a prediction.
func (p laPred) errPct(measured float64) (float64, bool) {
	return 100 * (p.value - measured) / measured, p.ok
}

// cells are p's prediction and error for a table, "-" for both without one.
func (p laPred) cells(measured float64, format func(float64) string) (value, errS string) {
	if !p.ok {
		return "-", "-"
	}
	e, _ := p.errPct(measured)
	return format(p.value), fmt.Sprintf("%+.1f%%", e)
}

// pair is one row's absolute errors, gpufleet's and llm-analysis's.
type pair struct {
	id       string
	gf, la   float64
	laOK     bool
	gfSigned float64
	laSigned float64
}

func newPair(id string, gfErr float64, p laPred, measured float64) pair {
	e, ok := p.errPct(measured)
	return pair{id: id, gf: math.Abs(gfErr), la: math.Abs(e), laOK: ok, gfSigned: gfErr, laSigned: e}
}

// laSummary is llm-analysis's side of a summary row: the rows it
// predicted, its median absolute error and gpufleet's on the same rows.
func laSummary(ps []pair) string {
	var gf, la []float64
	for _, p := range ps {
		if p.laOK {
			gf, la = append(gf, p.gf), append(la, p.la)
		}
	}
	if len(la) == 0 {
		return "0 | - | -"
	}
	return fmt.Sprintf("%d | %.1f%% | %.1f%%", len(la), median(la), median(gf))
}

// laWins lists the rows where llm-analysis is closer than gpufleet.
func laWins(ps []pair) string {
	var out []string
	for _, p := range ps {
		if p.laOK && p.la < p.gf {
			out = append(out, fmt.Sprintf("%s (%+.1f%% against %+.1f%%)", p.id, p.laSigned, p.gfSigned))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// check writes (under -update) or compares the inputs file, and checks
// that every input has a prediction and every prediction an input.
func (b *baseline) check(t *testing.T) {
	t.Helper()
	data, err := json.MarshalIndent(b.inputs, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, '\n')
	path := filepath.Join("testdata", laInputsFile)
	if *update {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./planner -run TestAccuracyDoc -update)", err)
	}
	if diff := cmp.Diff(string(want), string(data)); diff != "" {
		t.Errorf("testdata/%s is stale (-committed +now): regenerate with -update, then rerun scripts/llm-analysis-baseline and -update again:\n%s", laInputsFile, diff)
	}
	seen := map[string]bool{}
	for _, in := range b.inputs {
		k := laKey(in.ID, in.Metric)
		seen[k] = true
		if _, ok := b.preds[k]; !ok {
			t.Errorf("testdata/%s has no row for %s: run scripts/llm-analysis-baseline, then -update", laPredsFile, k)
		}
	}
	for k := range b.preds {
		if !seen[k] {
			t.Errorf("testdata/%s has a row for %s, which the doc does not predict: run scripts/llm-analysis-baseline", laPredsFile, k)
		}
	}
}

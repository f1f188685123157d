package planner

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The engine logs of testdata/engine_logs.csv (ENGINE_LOGS.md says how
// they were found): what serving engines printed at start-up about their
// memory, each with its source and a verbatim quote. Every third id is
// held out, fixed from the id before any prediction. One rule predicts
// every row (logPredict); a row the planner cannot express is excluded
// with why.

// logRow is one row of engine_logs.csv.
type logRow struct {
	id, engine, version, mode, model, dtype, quant, kvDtype, gpu, split, notes string
	count, tp, maxModelLen, maxSeqs, maxBatched, blockSize                     int
	util, weightsGiB, kvGiB, totalGiB                                          float64
	kvTokens, blocks                                                           float64
}

func readEngineLogs(t *testing.T) []logRow {
	t.Helper()
	recs, col := readCSV(t, "engine_logs.csv")
	var rows []logRow
	for _, r := range recs {
		get := func(c string) string { return strings.TrimSpace(r[col[c]]) }
		i := func(c string) int { n, _ := strconv.Atoi(get(c)); return n }
		f := func(c string) float64 { v, _ := strconv.ParseFloat(get(c), 64); return v }
		rows = append(rows, logRow{id: get("id"), engine: strings.ToLower(get("engine")), version: get("engine_version"), mode: get("engine_mode"),
			model: get("model"), dtype: strings.ToLower(get("dtype")), quant: strings.ToLower(get("quantization")), kvDtype: strings.ToLower(get("kv_cache_dtype")),
			gpu: get("gpu"), split: get("split"), notes: get("notes"), count: i("gpu_count"), tp: i("tp"), maxModelLen: i("max_model_len"),
			maxSeqs: i("max_num_seqs"), maxBatched: i("max_num_batched_tokens"), blockSize: i("block_size"), util: f("gpu_memory_utilization"),
			weightsGiB: f("weights_gib"), kvGiB: f("kv_cache_gib"), totalGiB: f("total_gpu_memory_gib"), kvTokens: f("kv_cache_tokens"), blocks: f("gpu_blocks")})
	}
	return rows
}

// logModels maps a log's model (its start, case-insensitively, after any
// organisation) to a model config of the repository with the same
// architecture, and the checkpoint's longest context where it differs
// from that config's (Llama 3 is Llama 3.1's architecture at 8K).
var logModels = []struct {
	prefix, model string
	maxPos        int
}{
	{"meta-llama-3.1-8b", "llama-3.1-8b", 0}, {"llama-3.1-8b", "llama-3.1-8b", 0},
	{"meta-llama-3-8b", "llama-3.1-8b", 8192},
	{"meta-llama-3.1-70b", "llama-3.1-70b", 0},
	{"llama2-7b", "llama-2-7b", 0}, {"llama-2-7b", "llama-2-7b", 0}, {"llama2-70b", "llama-2-70b", 0},
	{"qwen2-7b", "qwen2-7b", 0}, {"qwen2.5-7b", "qwen2-7b", 0},
}

// logGPUs maps a log's GPU to a catalog id; a log that names none but
// prints its total memory (79.2 GiB: an 80 GB card) is taken as an H100.
var logGPUs = []struct{ prefix, id string }{
	{"A100 40", "a100-sxm-40gb"}, {"A100", "a100-sxm-80gb"}, {"H100 PCIE", "h100-pcie-80gb"}, {"H100", "h100-sxm-80gb"},
	{"H200", "h200-sxm-141gb"}, {"L4", "l4"}, {"T4", "t4"}, {"A10", "a10"}, {"4090", "rtx-4090"}, {"RTX 6000 ADA", "rtx-6000-ada"},
}

// logPredict predicts a row's KV cache (GiB per GPU, or tokens per
// replica) and weights (GiB per GPU), or says why it cannot. The rules:
//   - the model and GPU map as logModels and logGPUs say;
//   - the engine and release as logged; a vLLM log without a release by
//     its engine mode (V0: the 0.5 profile, V1: the newest);
//   - weights in the checkpoint's quantization (fp8, 8-bit, 4-bit AWQ or
//     GPTQ), else 16-bit; the KV cache 16-bit unless TensorRT-LLM runs an
//     FP8 checkpoint, whose KV is FP8;
//   - tensor parallelism, max_model_len, max_num_seqs,
//     max_num_batched_tokens and the memory fraction as logged, the
//     engine's defaults for the rest.
//
// in is what the KV figure was planned with, for llm-analysis.
func logPredict(t *testing.T, row logRow) (kv, weights float64, unit, why string, in laInput) {
	m, maxPos := "", 0
	name := strings.ToLower(row.model)
	if _, after, ok := strings.Cut(name, "/"); ok {
		name = after
	}
	for _, e := range logModels {
		if strings.HasPrefix(name, e.prefix) {
			m, maxPos = e.model, e.maxPos
			break
		}
	}
	if m == "" {
		return 0, 0, "", "no model config for " + row.model + " in the repository", in
	}
	g := ""
	for _, e := range logGPUs {
		if row.gpu != "" && strings.HasPrefix(strings.ToUpper(row.gpu), e.prefix) {
			g = e.id
			break
		}
	}
	if g == "" && row.gpu == "" && row.totalGiB > 79 && row.totalGiB < 80 {
		g = "h100-sxm-80gb"
	}
	if g == "" {
		return 0, 0, "", "GPU not named in the log, or not in the catalog", in
	}
	r := inference(t, m, g, max(row.tp, 1), FormatBF16, FormatBF16)
	r.TP = max(row.tp, 1)
	switch {
	case strings.Contains(row.quant, "fp8"):
		r.Precision = FormatFP8
	case strings.Contains(row.quant, "w8a8") || strings.Contains(row.model, "w8a8") || row.quant == "int8":
		r.Precision = FormatINT8
	case strings.Contains(row.quant, "awq") || strings.Contains(row.quant, "gptq") || strings.Contains(row.quant, "w4a16"):
		r.Precision = FormatINT4
	case row.quant != "" && row.quant != "none":
		return 0, 0, "", "quantization " + row.quant + " not expressed", in
	}
	if row.engine == "trtllm" && r.Precision == FormatFP8 {
		r.KVPrecision = FormatFP8
	}
	e := logEngine(row)
	if e == "" {
		return 0, 0, "", "engine " + row.engine + " has no profile", in
	}
	r.Engine = e
	if maxPos > 0 && row.maxModelLen == 0 {
		r.MaxModelLen = maxPos
	}
	r.MaxModelLen = max(r.MaxModelLen, row.maxModelLen)
	r.MaxNumSeqs, r.MaxNumBatchedTokens = row.maxSeqs, row.maxBatched
	if row.util > 0 && row.util < 1 {
		r.MemoryHeadroom = 1 - row.util
	}
	r.InputTokens, r.OutputTokens, r.Batch = min(100, max(r.modelLen()-1, 1)), 1, 1
	p, err := Run(r, nil)
	if err != nil {
		return 0, 0, "", fmt.Sprintf("the planner refuses the row's settings (%v)", err), in
	}
	c := p.Candidates[0]
	if c.KVCacheTokens == nil {
		return 0, 0, "", "no KV cache figure", in
	}
	tokens := float64(*c.KVCacheTokens)
	weights = float64(c.MemoryPerGPU.WeightsBytes) / (1 << 30)
	l := layout{tp: r.TP, pp: 1, dp: 1, ep: 1}
	perToken := newShape(r.Model).kvBytesPerSeq(pagedBlockTokens, r.KVPrecision, l) / pagedBlockTokens
	if row.kvGiB == 0 && logMeasured(row, "tokens")*perToken > float64(c.MemoryPerGPU.CapacityBytes) {
		return 0, 0, "", fmt.Sprintf("the logged KV cache, %.0f tokens, is more than the GPU holds at %.0f KiB a token: not this GPU's figure", logMeasured(row, "tokens"), perToken/1024), in
	}
	h := laRow{ID: row.id, Kind: "kv-capacity", Metric: "kv_cache", Split: row.split}
	switch {
	case row.kvGiB > 0:
		h.Unit, h.Measured = "GiB", logMeasured(row, "GiB")
		return tokens * perToken / (1 << 30), weights, "GiB", "", newLAInput(t, h, laQ{laKVBytesPerGPU, 1.0 / (1 << 30)}, r, c)
	case row.kvTokens > 0 || row.blocks > 0:
		h.Unit, h.Measured = "tokens", logMeasured(row, "tokens")
		return tokens, weights, "tokens", "", newLAInput(t, h, laQ{laKVTokens, 1}, r, c)
	}
	return 0, 0, "", "no KV figure in the row", in
}

// logEngine is the engine a row plans with: its release as logged; a
// vLLM log without one by its engine mode (V0: the 0.5 profile, V1: the
// newest); "" for an engine without a profile.
func logEngine(row logRow) Engine {
	eng := row.engine
	switch {
	case row.version != "":
		eng += "@" + row.version
	case row.engine == "vllm" && strings.HasPrefix(row.mode, "V0"):
		eng += "@0.5"
	}
	e, err := ParseEngine(eng)
	if err != nil {
		return ""
	}
	return e
}

// logMeasured is the row's KV figure in logPredict's unit.
func logMeasured(row logRow, unit string) float64 {
	switch {
	case unit == "GiB":
		return row.kvGiB
	case row.kvTokens > 0:
		return row.kvTokens
	}
	bs := row.blockSize
	if bs == 0 {
		bs = 16 // vLLM's default block size
	}
	return row.blocks * float64(bs)
}

// engineLogSection is docs/ACCURACY.md's section on the engine logs,
// with llm-analysis's KV cache and weights beside the planner's.
func engineLogSection(t *testing.T, la *baseline) string {
	var b strings.Builder
	type errs struct {
		kv, low, weights []float64
		laKV, laWeights  []pair
	}
	by := map[string]*errs{"dev": {}, "heldout": {}}
	var all []pair
	var table strings.Builder
	for _, row := range readEngineLogs(t) {
		kv, w, unit, why, in := logPredict(t, row)
		hw := fmt.Sprintf("%d x %s", max(row.count, 1), gpuOrNone(row.gpu))
		ver := row.engine
		if row.version != "" {
			ver += " " + row.version
		} else if row.mode != "" {
			ver += " (" + row.mode + ")"
		}
		if why != "" {
			fmt.Fprintf(&table, "| %s | %s | %s | %s | %s | - | - | - | - | - | - | - | excluded: %s |\n", row.id, row.split, ver, row.model, hw, why)
			continue
		}
		meas := logMeasured(row, unit)
		e := (kv - meas) / meas * 100
		x := by[row.split]
		x.kv = append(x.kv, e)
		lp := la.add(in)
		x.laKV = append(x.laKV, newPair(row.id, e, lp, meas))
		all = append(all, newPair(row.id, e, lp, meas))
		p, _ := profileFor(logEngine(row))
		lowE := (kv/(1+p.kv.over) - meas) / meas * 100
		x.low = append(x.low, lowE)
		wcell, notes := "-", "llm-analysis KV: "+lp.note
		if row.weightsGiB > 0 {
			we := (w - row.weightsGiB) / row.weightsGiB * 100
			x.weights = append(x.weights, we)
			wIn := in
			wIn.Kind, wIn.Metric, wIn.Unit, wIn.Measured, wIn.Quantity, wIn.Scale = "weights", "weights", "GiB", row.weightsGiB, laWeightsBytesPerGPU, 1.0/(1<<30)
			wp := la.add(wIn)
			x.laWeights = append(x.laWeights, newPair(row.id, we, wp, row.weightsGiB))
			lw, lwe := wp.cells(row.weightsGiB, func(v float64) string { return fmt.Sprintf("%.2f", v) })
			wcell = fmt.Sprintf("%.2f / %.2f (%+.1f%%) / %s (%s)", row.weightsGiB, w, we, lw, lwe)
			notes += "; weights: " + wp.note
		}
		lv, le := lp.cells(meas, func(v float64) string { return fmtMeasure(v, unit) })
		fmt.Fprintf(&table, "| %s | %s | %s | %s | %s | %s %s | %s | %+.1f%% | %+.1f%% | %s | %s | %s | %s |\n", row.id, row.split, ver, row.model, hw,
			fmtMeasure(meas, unit), unit, fmtMeasure(kv, unit), e, lowE, lv, le, wcell, notes)
	}
	b.WriteString("\n## Engine logs\n\n")
	b.WriteString("Rows of planner/testdata/engine_logs.csv: the KV cache and weights serving engines (vLLM from\n")
	b.WriteString("0.2 to 0.19, TensorRT-LLM, SGLang, TGI) printed at start-up, gathered from public issues,\n")
	b.WriteString("pull requests and committed logs, each with its source and the log line quoted\n")
	b.WriteString("(planner/testdata/ENGINE_LOGS.md). Every third id is held out. The profiles' rules (the V0\n")
	b.WriteString("engine prefills a whole `max_model_len` in its profile run; each release's batching defaults)\n")
	b.WriteString("come from the engines' source code, not from these rows. What the dev rows set is each profile's\n")
	b.WriteString("KV band, how far it was off on them (planner/profile.go, checked by TestProfileBandsAreTheDevRows):\n")
	b.WriteString("a plan reports its KV cache with that range, and admission plans on the low end, the planner's\n")
	b.WriteString("figure divided by 1 + the most over. \"Low end\" below is that figure's error. llm-analysis has no\n")
	b.WriteString("engine memory rule: its KV cache is the tokens its own memory figures leave room for (see \"llm-analysis\").\n\n")
	b.WriteString("| split | KV rows | median absolute error | most over | most under | low end most over | weights rows | weights median absolute error | llm-analysis KV rows | llm-analysis KV median | gpufleet KV on those rows | llm-analysis weights rows | llm-analysis weights median | gpufleet weights on those rows |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, split := range []string{"dev", "heldout"} {
		x := by[split]
		abs := func(v []float64) []float64 {
			out := make([]float64, len(v))
			for i, e := range v {
				out[i] = math.Abs(e)
			}
			return out
		}
		over, under, lowOver := 0.0, 0.0, 0.0
		if len(x.kv) > 0 {
			over, under, lowOver = slices.Max(x.kv), slices.Min(x.kv), slices.Max(x.low)
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f%% | %+.1f%% | %+.1f%% | %+.1f%% | %d | %.1f%% | %s | %s |\n", split, len(x.kv), median(abs(x.kv)), over, under, lowOver,
			len(x.weights), median(abs(x.weights)), laSummary(x.laKV), laSummary(x.laWeights))
	}
	fmt.Fprintf(&b, "\nllm-analysis's KV cache is closer than gpufleet's on: %s.\n", laWins(all))
	b.WriteString("\n| id | split | engine | model | hardware | KV measured | KV predicted | error | low end | llm-analysis KV | llm-analysis error | weights GiB per GPU, logged / planned / llm-analysis | |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	b.WriteString(table.String())
	return b.String()
}

func gpuOrNone(s string) string {
	if s == "" {
		return "(GPU not named)"
	}
	return s
}

func fmtMeasure(v float64, unit string) string {
	if unit == "GiB" {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// profileBands are the KV errors of each profile's dev rows: the engine
// logs' and published.csv's kv-capacity rows (those with a KV connector
// left out: the planner models none), by the profile each is planned
// with.
func profileBands(t *testing.T) map[string][]float64 {
	out := map[string][]float64{}
	for _, row := range readEngineLogs(t) {
		if row.split != "dev" {
			continue
		}
		kv, _, unit, why, _ := logPredict(t, row)
		if why != "" {
			continue
		}
		p, _ := profileFor(logEngine(row))
		meas := logMeasured(row, unit)
		out[p.label] = append(out[p.label], (kv-meas)/meas)
	}
	for _, row := range readPublished(t) {
		if seenWhileSetting[row.id] {
			row.split = "dev"
		}
		if row.kind != "kv-capacity" || row.split != "dev" || strings.Contains(row.source, "Connector") {
			continue
		}
		pred, _, why, _ := pubPredict(t, row)
		if why != "" {
			continue
		}
		e, err := ParseEngine(row.engine)
		if err != nil {
			continue
		}
		p, _ := profileFor(e)
		out[p.label] = append(out[p.label], (pred-row.value)/row.value)
	}
	return out
}

// TestProfileBandsAreTheDevRows: each profile's KV band is what its dev
// rows give (widened to kvMinBand), and a profile without dev rows has
// the widest band of all: the constants are data, not choices.
func TestProfileBandsAreTheDevRows(t *testing.T) {
	bands := profileBands(t)
	widest := kvBand{}
	for _, errs := range bands {
		widest.over, widest.under = max(widest.over, slices.Max(errs)), min(widest.under, slices.Min(errs))
	}
	if math.Abs(widest.over-kvUnknown.over) > 0.001 || math.Abs(widest.under-kvUnknown.under) > 0.001 {
		t.Errorf("kvUnknown = %+v; the dev rows' widest is %+.3f / %+.3f", kvUnknown, widest.over, widest.under)
	}
	for _, p := range engineProfiles {
		errs, ok := bands[p.label]
		want := kvUnknown
		if ok {
			want = kvBand{over: max(slices.Max(errs), kvMinBand), under: min(slices.Min(errs), -kvMinBand)}
		}
		if math.Abs(p.kv.over-want.over) > 0.001 || math.Abs(p.kv.under-want.under) > 0.001 {
			t.Errorf("%s: band %+v; its %d dev rows give %+.3f / %+.3f", p.label, p.kv, len(errs), want.over, want.under)
		}
		if ok != (p.kvRows != "") {
			t.Errorf("%s: %d dev rows, kvRows %q", p.label, len(errs), p.kvRows)
		}
	}
}

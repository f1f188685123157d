package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/model"
	"github.com/gpufleet/gpufleet/planner"
)

// plannerForm is the planner form's fields, as typed.
type plannerForm struct {
	Model, Config, Mode, Precision, KVPrecision, GPU string
	GPUs, Batch, InputTokens, OutputTokens           string
	Seq, MicroBatch, GlobalBatch, Tokens, Optimizer  string
	ZeRO, Recompute, LatencyMS, Engine, Headroom     string
	MaxModelLen                                      string
}

// fields maps the form's parameter names to its fields.
func (f *plannerForm) fields() map[string]*string {
	return map[string]*string{"model": &f.Model, "config": &f.Config, "mode": &f.Mode, "precision": &f.Precision,
		"kv_precision": &f.KVPrecision, "gpu": &f.GPU, "gpus": &f.GPUs, "batch": &f.Batch, "input_tokens": &f.InputTokens,
		"output_tokens": &f.OutputTokens, "seq": &f.Seq, "micro_batch": &f.MicroBatch, "global_batch": &f.GlobalBatch,
		"tokens": &f.Tokens, "optimizer": &f.Optimizer, "zero": &f.ZeRO, "recompute": &f.Recompute, "latency_ms": &f.LatencyMS,
		"engine": &f.Engine, "headroom": &f.Headroom, "max_model_len": &f.MaxModelLen}
}

// formFrom reads the form from request parameters over base: a
// parameter that is absent keeps base's value.
func formFrom(base plannerForm, has func(string) bool, get func(string) string) plannerForm {
	f := base
	for k, p := range f.fields() {
		if has(k) {
			*p = strings.TrimSpace(get(k))
		}
	}
	return f
}

// query is the form as URL parameters, the empty ones left out: the
// plan's address.
func (f plannerForm) query() string {
	q := url.Values{}
	for k, p := range f.fields() {
		if *p != "" {
			q.Set(k, *p)
		}
	}
	return q.Encode()
}

// defaultPlannerForm is the form as first shown.
func defaultPlannerForm() plannerForm {
	return plannerForm{Model: "llama-3.1-8b", Mode: "inference", Precision: "bf16", KVPrecision: "bf16", Engine: "vllm",
		InputTokens: "1024", OutputTokens: "256", Seq: "4096", MicroBatch: "1", GlobalBatch: "1024",
		Tokens: "1T", Optimizer: "adamw", ZeRO: "0", Recompute: "auto"}
}

// candRow is one candidate of a plan, formatted.
type candRow struct {
	GPU, Layout, Mem, Precision, Bound string
	GPUs                               int
	Fits, Recommended                  bool
	Batch, Throughput, TTFT, TPOT      string
	Cost, Energy, MFU, Step, TrainTime string
}

// plannerView is the planner page.
type plannerView struct {
	Form     plannerForm
	Builtins []string
	GPUIDs   []string
	Formats  []string
	Error    string
	// Scope says which GPU models the plan compared; Share is its URL.
	Scope, Share string
	Ran          bool
	Training     bool
	Summary      string
	Recommend    string
	Candidates   []candRow
	Memory       barChart
}

func (u *UI) newPlannerView(f plannerForm) plannerView {
	pv := plannerView{Form: f, Builtins: model.BuiltinNames(), Formats: []string{"bf16", "fp16", "fp8", "int8", "int4", "fp4", "fp32"}}
	for _, g := range u.cat.All() {
		pv.GPUIDs = append(pv.GPUIDs, g.ID)
	}
	return pv
}

// plannerPage shows the form, and the plan when the URL carries one
// (GET /planner?model=...): a plan can be shared by its address.
func (u *UI) plannerPage(r *http.Request, v *viewer) (view, error) {
	q := r.URL.Query()
	if !q.Has("model") && !q.Has("config") {
		return view{page: "planner", title: "Planner", nav: "planner", data: u.newPlannerView(defaultPlannerForm())}, nil
	}
	pv := u.newPlannerView(formFrom(defaultPlannerForm(), q.Has, q.Get))
	if err := u.plan(r, v, &pv); err != nil {
		pv.Error = err.Error()
	}
	return view{page: "planner", title: "Planner", nav: "planner", data: pv}, nil
}

func (u *UI) plannerRun(w http.ResponseWriter, r *http.Request, v *viewer) (string, error) {
	all := func(string) bool { return true }
	pv := u.newPlannerView(formFrom(plannerForm{}, all, r.PostFormValue))
	status := http.StatusOK
	if err := u.plan(r, v, &pv); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return "", err
		}
		pv.Error, status = err.Error(), http.StatusBadRequest
	}
	d := pageData{Title: "Planner", Nav: "planner", V: v, Data: pv}
	u.render(w, r, "planner", "layout", status, d)
	return "", nil
}

// fleetGPUs are the catalog entries of the GPU models on the nodes the
// viewer sees, sorted by id.
func (u *UI) fleetGPUs(r *http.Request, v *viewer) []catalog.GPU {
	nodes, err := u.svc.Nodes(r.Context(), v.P)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []catalog.GPU
	for _, n := range nodes {
		for _, g := range n.GPUs {
			if cg, err := u.cat.Lookup(g.Model); err == nil && !seen[cg.ID] {
				seen[cg.ID] = true
				out = append(out, cg)
			}
		}
	}
	slices.SortFunc(out, func(a, b catalog.GPU) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// plan runs the planner on the form and fills the results.
// Without candidate GPUs it compares the GPU models of the fleet (the
// whole catalog when the fleet has none), and says so.
func (u *UI) plan(r *http.Request, v *viewer, pv *plannerView) error {
	pv.Share = "/planner?" + pv.Form.query()
	req, err := plannerRequest(pv.Form, u.cat)
	if err != nil {
		return err
	}
	if len(req.GPUs) == 0 {
		if fleet := u.fleetGPUs(r, v); len(fleet) > 0 {
			req.GPUs = fleet
			ids := make([]string, len(fleet))
			for i, g := range fleet {
				ids[i] = g.ID
			}
			pv.Scope = "Compared: the GPU models of this fleet (" + strings.Join(ids, ", ") + "); name candidate GPUs to compare others."
		} else {
			pv.Scope = "Compared: the whole catalog (the fleet has no GPUs yet)."
		}
	}
	p, err := planner.Run(req, u.cat.All())
	if err != nil {
		return err
	}
	pv.Ran, pv.Training = true, p.Mode == planner.Training
	m := p.Model
	pv.Summary = fmt.Sprintf("%s (%s): %s parameters, %s active per token, %d layers, hidden size %d, KV cache %s per token.",
		m.Name, m.ModelType, humanCount(m.ParamsTotal), humanCount(m.ParamsActive), m.Layers, m.HiddenSize, fmtBytes(m.KVCacheBytesPerToken))
	if rec := p.Recommendation; rec != nil {
		pv.Recommend = fmt.Sprintf("%d × %s, scale %s. %s.", rec.GPUs, rec.GPU, rec.Scaling, strings.TrimSuffix(rec.Reason, "."))
	}
	var bars []barInput
	for i, c := range p.Candidates {
		row := candRow{GPU: c.GPU, GPUs: c.GPUs, Layout: c.Layout("×"), Fits: c.Fits,
			Mem:       fmtBytes(c.MemoryPerGPU.TotalBytes) + " / " + fmtBytes(c.MemoryPerGPU.CapacityBytes),
			Precision: "native", Bound: dash, Batch: dash}
		row.Recommended = p.Recommendation != nil && p.Recommendation.GPU == c.GPU
		if c.PrecisionFallback != nil {
			row.Precision = string(*c.PrecisionFallback)
		}
		if c.Bound != nil {
			row.Bound = string(*c.Bound)
		}
		if c.Batch != nil && c.MaxBatch != nil {
			row.Batch = fmt.Sprintf("%d (max %d)", *c.Batch, *c.MaxBatch)
		}
		row.Throughput = fmtNumPtr(c.OutputTokensPerS, 0)
		row.TTFT, row.TPOT = fmtSecondsShort(c.TimeToFirstTokenS), fmtSecondsShort(c.TimePerOutputTokenS)
		row.Cost = dash
		if c.CostPerMillionTokensUSD != nil {
			row.Cost = "$" + strconv.FormatFloat(*c.CostPerMillionTokensUSD, 'f', 3, 64)
		}
		row.Energy = fmtNumPtr(c.JoulesPerToken, 2)
		if pv.Training {
			row.Throughput = fmtNumPtr(c.TrainingTokensPerS, 0)
			row.MFU = fmtPct(c.MFU)
			row.Step = fmtSecondsShort(c.StepTimeS)
			row.TrainTime = fmtSecondsPtr(c.TrainTimeS)
			row.Cost = dash
			if c.TrainCostUSD != nil {
				row.Cost = fmtUSD(*c.TrainCostUSD)
			}
			row.Energy = dash
			if c.TrainEnergyJoules != nil {
				row.Energy = fmtEnergy(*c.TrainEnergyJoules)
			}
		}
		pv.Candidates = append(pv.Candidates, row)
		if i < maxMemoryBars {
			mb := c.MemoryPerGPU
			label := fmt.Sprintf("%s ×%d", c.GPU, c.GPUs)
			bars = append(bars, barInput{Label: label, Marker: float64(mb.CapacityBytes),
				Values: []float64{float64(mb.WeightsBytes), float64(deref(mb.KVCacheBytes)), float64(mb.ActivationsBytes),
					float64(deref(mb.GradientsBytes)), float64(deref(mb.OptimizerBytes)), float64(mb.OverheadBytes)},
				Note: fmtBytes(mb.TotalBytes) + " / " + fmtBytes(mb.CapacityBytes)})
		}
	}
	pv.Memory = buildBarChart("Memory per GPU (most loaded GPU), top candidates",
		"Stacked memory use per GPU for each candidate: weights, KV cache, activations, gradients, optimizer state and runtime overhead; the black mark is the GPU's capacity.",
		[]barPart{{"weights", "#0072b2"}, {"KV cache", "#56b4e9"}, {"activations", "#009e73"}, {"gradients", "#cc79a7"}, {"optimizer", "#d55e00"}, {"overhead", "#999999"}},
		bars, "capacity", func(x float64) string { return fmtBytes(x) }, barAxis{Scale: 1 << 30, Unit: " GiB"})
	return nil
}

// maxMemoryBars is how many candidates the memory chart shows.
const maxMemoryBars = 12

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func fmtSecondsShort(v *float64) string {
	if v == nil {
		return dash
	}
	if *v < 1 {
		return strconv.FormatFloat(*v*1e3, 'f', 1, 64) + " ms"
	}
	if *v < 600 {
		return strconv.FormatFloat(*v, 'f', 2, 64) + " s"
	}
	return fmtSecondsPtr(v)
}

func humanCount(n int64) string {
	switch {
	case n >= 1e12:
		return strconv.FormatFloat(float64(n)/1e12, 'f', 2, 64) + "T"
	case n >= 1e9:
		return strconv.FormatFloat(float64(n)/1e9, 'f', 2, 64) + "B"
	case n >= 1e6:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	}
	return strconv.FormatInt(n, 10)
}

// plannerRequest turns the form into a planner request: a pasted
// config.json wins over the built-in model. Its headroom is a percentage.
func plannerRequest(f plannerForm, cat *catalog.Catalog) (planner.Request, error) {
	var r planner.Request
	cfg, err := model.Builtin(f.Model)
	if f.Config != "" {
		if cfg, err = model.Parse("pasted-config", []byte(f.Config)); err != nil {
			return r, fmt.Errorf("config.json: %w", err)
		}
	} else if err != nil {
		return r, fmt.Errorf("model: %w", err)
	}
	headroom := f.Headroom
	if headroom != "" && !strings.HasSuffix(headroom, "%") {
		headroom += "%"
	}
	spec := planner.Spec{Mode: f.Mode, GPU: f.GPU, GPUs: f.GPUs, Precision: f.Precision, KVPrecision: f.KVPrecision,
		Engine: f.Engine, Batch: f.Batch, InputTokens: f.InputTokens, OutputTokens: f.OutputTokens,
		LatencyTargetMS: f.LatencyMS, MemoryHeadroom: headroom, Seq: f.Seq, MicroBatch: f.MicroBatch,
		GlobalBatch: f.GlobalBatch, Tokens: f.Tokens, Optimizer: f.Optimizer, ZeRO: f.ZeRO, Recompute: f.Recompute,
		MaxModelLen: f.MaxModelLen}
	return spec.Request(cfg, cat, formLabel)
}

// formLabel names a planner field as the form labels it.
func formLabel(key string) string {
	switch key {
	case "gpu":
		return "GPU"
	case "gpus":
		return "GPUs"
	case "seq":
		return "sequence length"
	case "zero":
		return "ZeRO stage"
	case "latency_target_ms":
		return "latency target (ms)"
	case "memory_headroom":
		return "memory headroom"
	}
	return strings.ReplaceAll(key, "_", " ")
}

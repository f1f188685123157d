package planner

import (
	"fmt"

	"github.com/gpufleet/gpufleet/model"
)

// weightTable is an inference plan's weight bytes as the checkpoint
// stores them, by layer (prefix sums) plus the embedding and the head,
// when the model's config describes its quantisation or the request
// carries a safetensors checkpoint. Without either the planner counts
// weights at the request's precision (shape.inferenceWeights).
type weightTable struct {
	dense, experts []float64 // prefix sums over layers: dense[i] is layers [0, i)
	embed, head    float64   // head is the embedding again when tied
	tied           bool
	total          float64 // the checkpoint's bytes, the tied head once
	note           string  // where the figures come from, for the notes
	source         string  // quantization_config, safetensors_index or safetensors_headers
}

// checkpointFormat is the format the model's checkpoint stores most of
// its weights in (by its quantization_config), the precision a request
// without one plans with; "" without a description the planner reads.
func checkpointFormat(cfg *model.Config) Format {
	q := cfg.Quantization
	if q == nil || !q.Known || len(q.Schemes) == 0 {
		return ""
	}
	w, ok := cfg.CheckpointWeights()
	if !ok || w.MainScheme() < 0 {
		return ""
	}
	s := q.Schemes[w.MainScheme()]
	switch {
	case s.Bits >= 16:
		return FormatBF16
	case s.Bits >= 8 && s.Type == "float":
		return FormatFP8
	case s.Bits >= 8:
		return FormatINT8
	case s.Bits == 4 && s.Type == "float" && q.Method != "bitsandbytes":
		return FormatFP4
	}
	return FormatINT4 // weight-only integer formats, dequantised to 16 bits to compute
}

// newWeightTable builds the table of an inference request, nil when the
// weights are the request precision's.
func newWeightTable(r Request, s shape) *weightTable {
	if r.Mode != Inference {
		return nil
	}
	cfg := r.Model
	L := cfg.NumLayers
	if L == 0 {
		return nil
	}
	ck := r.Checkpoint
	var dense, experts []float64
	var embed, head float64
	var note, source string
	w, derived := cfg.CheckpointWeights()
	switch {
	case ck != nil && ck.Sized:
		dense, experts = make([]float64, L), make([]float64, L)
		for i := range L {
			dense[i], experts[i] = float64(ck.Dense[i]), float64(ck.Experts[i])
		}
		embed, head = float64(ck.Embedding), float64(ck.Head)
		source = "safetensors_headers"
		note = fmt.Sprintf("weights from the safetensors checkpoint: %s in %d tensors, placed on their layers from the shards' headers", gb(float64(ck.TotalBytes)), ck.Tensors)
	case derived:
		source = "quantization_config"
		dense, experts, embed, head = w.Dense, w.Experts, w.Embedding, w.Head
		note = fmt.Sprintf("weights as the checkpoint stores them (quantization_config %s): %s, %.0f%% of the parameters quantised, the rest 16-bit", cfg.Quantization.Method, gb(w.Total()), 100*float64(w.QuantizedParams)/float64(w.QuantizedParams+w.KeptParams))
	case ck != nil:
		// The index's total alone: the precision's weights spread
		// evenly over the layers, then scaled to the total.
		b := r.Precision.BytesPerElement()
		dense, experts = make([]float64, L), make([]float64, L)
		for i := range L {
			dense[i] = (s.blockParams - s.expertParams) * b / float64(L)
			experts[i] = s.expertParams * b / float64(L)
		}
		embed = s.embedParams * 2
		if s.params.Head > 0 {
			head = float64(s.params.Head) * 2
		}
	default:
		return nil
	}
	t := &weightTable{dense: make([]float64, L+1), experts: make([]float64, L+1), embed: embed, head: head}
	for i := range L {
		t.dense[i+1] = t.dense[i] + dense[i]
		t.experts[i+1] = t.experts[i] + experts[i]
	}
	t.total = t.dense[L] + t.experts[L] + embed + head
	if ck != nil && !ck.Sized {
		// Scale to the index's total: it is what the checkpoint holds.
		f := float64(ck.TotalBytes) / t.total
		for i := range t.dense {
			t.dense[i] *= f
			t.experts[i] *= f
		}
		t.embed, t.head, t.total = embed*f, head*f, float64(ck.TotalBytes)
		source = "safetensors_index"
		split := "the request's precision"
		if derived {
			split = "the quantization_config's layers"
		}
		note = fmt.Sprintf("weights from the safetensors index's total_size, %s, split over the layers as %s has them (%.3gx the config's count)", gb(float64(ck.TotalBytes)), split, f)
	}
	if ck != nil && ck.ExtraLayers > 0 {
		note += fmt.Sprintf("; the checkpoint's %d layer(s) beyond the config's %d (multi-token prediction) are left out", ck.ExtraLayers, L)
		if ck.Sized {
			note += fmt.Sprintf(" (%s)", gb(float64(ck.ExtraBytes)))
		}
	}
	if t.head == 0 {
		t.head, t.tied = t.embed, true
	}
	t.note, t.source = note, source
	return t
}

// perGPU is the weight memory of the most loaded GPU of the layout: the
// pipeline stages hold ceil(L/pp) layers each in order, the first the
// embedding and the last the head (one stage: both, the tied head once);
// dense parts and the embedding and head split by tensor parallelism,
// routed experts by the layout's expert shards.
func (t *weightTable) perGPU(s shape, l layout) float64 {
	L := len(t.dense) - 1
	n := s.layersPerStage(l.pp)
	tp, shards := float64(l.tp), float64(l.expertShards())
	if l.pp == 1 {
		emb := t.embed + t.head
		if t.tied {
			emb = t.embed
		}
		return (t.dense[L]+emb)/tp + t.experts[L]/shards
	}
	most := 0.0
	for lo := 0; lo < L; lo += n {
		hi := min(L, lo+n)
		emb := 0.0
		if lo == 0 {
			emb += t.embed
		}
		if hi == L {
			emb += t.head
		}
		most = max(most, (t.dense[hi]-t.dense[lo]+emb)/tp+(t.experts[hi]-t.experts[lo])/shards)
	}
	return most
}

// traffic is the weight bytes one forward pass of the most loaded
// stage reads: the stage's share of the dense blocks and of the experts
// it touches, and the head on the last stage, per GPU.
func (t *weightTable) traffic(s shape, l layout, touched float64) (dense, experts, head float64) {
	L := len(t.dense) - 1
	stage := s.stageFraction(l.pp)
	tp := float64(l.tp)
	return t.dense[L] * stage / tp, t.experts[L] * stage / float64(l.expertShards()) * touched, t.head / float64(l.pp) / tp
}

package model

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// Quantization is a checkpoint's quantization_config as the planner needs
// it: which linear layers are stored in which format, and which are kept
// in the checkpoint's 16-bit dtype. Parse reads the common forms (see
// quantMethods); a method it does not know is kept with Known false, and
// the planner then counts weights at the request's precision.
type Quantization struct {
	// Method is quant_method as written: fp8, fbgemm_fp8,
	// compressed-tensors, awq, gptq, bitsandbytes, mxfp4, modelopt, nvfp4,
	// or another.
	Method string `json:"method"`
	// Known says Parse read the method; an unknown one is parsed without
	// failing and its weights are not derived from it.
	Known bool `json:"known"`
	// Schemes are the weight formats, each with the modules it targets;
	// a module takes the first scheme that targets it. One scheme
	// targeting every linear layer for all methods but
	// compressed-tensors, whose config_groups may be several.
	Schemes []WeightScheme `json:"schemes,omitempty"`
	// Ignore are the modules kept unquantised (modules_to_not_convert,
	// ignored_layers, ignore, llm_int8_skip_modules, exclude_modules): a
	// name matches a module named so or any module under it
	// (model.layers.0 matches model.layers.0.mlp.down_proj; lm_head
	// matches lm_head); a name holding * matches as a glob; re:PATTERN is
	// a regular expression matched from the name's start, as
	// compressed-tensors does.
	Ignore []string `json:"ignore,omitempty"`
	// ActivationScheme is dynamic or static (static stores one input
	// scale per quantised linear layer).
	ActivationScheme string `json:"activation_scheme,omitempty"`
	// QuantizeHead says the output head is a target like any linear
	// layer (compressed-tensors, modelopt); other methods keep it 16-bit
	// as transformers' loaders do, whether or not it is listed.
	QuantizeHead bool `json:"quantize_head,omitempty"`

	compiled bool
	ignore   nameSet
	targets  []nameSet
	cache    *WeightBytes // derived by Parse
	cacheKey weightsKey
}

// WeightScheme is one weight format of a checkpoint.
type WeightScheme struct {
	Bits int `json:"bits"` // bits per weight: 8 for FP8 and INT8, 4 for INT4, NVFP4, MXFP4
	// Type is int or float.
	Type string `json:"type"`
	// Strategy is where the scales sit: tensor (one per matrix), channel
	// (one per output row), group (one per GroupSize values of a row),
	// block (one per BlockSize rows x columns tile) or tensor_group
	// (NVFP4: one per GroupSize values and one global per matrix).
	Strategy  string `json:"strategy"`
	GroupSize int    `json:"group_size,omitempty"`
	BlockSize []int  `json:"block_size,omitempty"`
	// ScaleBits is the size of one scale: 32 for fp32 scales (FP8
	// checkpoints, bitsandbytes), 16 for fp16/bf16 (AWQ, GPTQ,
	// compressed-tensors), 8 for FP8 or E8M0 scales (NVFP4, MXFP4).
	ScaleBits int `json:"scale_bits"`
	// ZeroBits is the size of one zero point per scale, 0 for symmetric
	// formats (AWQ and GPTQ store a packed zero point of Bits bits for
	// every group).
	ZeroBits int `json:"zero_bits,omitempty"`
	// GroupIndex says each matrix stores an int32 per input column
	// (GPTQ's g_idx).
	GroupIndex bool `json:"group_index,omitempty"`
	// ShapeBytes is stored per matrix besides weights and scales
	// (compressed-tensors pack-quantized keeps the int64 shape).
	ShapeBytes int `json:"shape_bytes,omitempty"`
	// Targets are the modules the scheme covers: Linear (every linear
	// layer), or names and re: patterns as Ignore has them.
	Targets []string `json:"targets"`

	field string // where the config says it: "config_groups.group_0.weights." or "" at the top level
}

// Bounds on a quantization_config. Module lists are longer than the
// gpufleet request lists (gpufleet.MaxListLen): Meta's Llama 3.1 405B FP8
// lists 127 modules and per-layer lists of large models run to
// thousands, so the bound is 128 times MaxListLen.
const (
	maxQuantModules = 128 * gpufleet.MaxListLen
	maxGroupSize    = 1 << 16
)

// quantMethods are the quant_method values Parse reads.
var quantMethods = []string{"awq", "bitsandbytes", "compressed-tensors", "fbgemm_fp8", "fp8", "gptq", "modelopt", "mxfp4", "nvfp4"}

// QuantMethods returns the quant_method values Parse reads, sorted.
func QuantMethods() []string { return slices.Clone(quantMethods) }

// readQuantization reads quantization_config when present.
func readQuantization(c *Config, f *fields) {
	if f.err != nil || !f.has("quantization_config") {
		return
	}
	m, ok := f.m["quantization_config"].(map[string]any)
	if !ok {
		f.fail("quantization_config", "want an object, got %s", jsonType(f.m["quantization_config"]))
		return
	}
	qf := &fields{m: m}
	q := parseQuantization(qf)
	if qf.err != nil {
		f.err = wrapQuant(qf.err)
		return
	}
	c.Quantization = q
}

// wrapQuant names the quantization_config object in an error of its
// fields.
func wrapQuant(err error) error { return fmt.Errorf("quantization_config: %w", err) }

// parseQuantization reads the fields of the methods Parse knows; of
// another method it keeps only the name.
func parseQuantization(f *fields) *Quantization {
	method := strings.ToLower(strings.TrimSpace(f.str("quant_method")))
	if method == "" && f.has("config_groups") {
		method = "compressed-tensors"
	}
	if err := gpufleet.CheckText("quant_method", method, gpufleet.MaxWordLen, false); err != nil {
		f.err = err
		return nil
	}
	q := &Quantization{Method: method, Known: slices.Contains(quantMethods, method)}
	linear := []string{"Linear"}
	switch method {
	case "fp8":
		q.ActivationScheme = f.str("activation_scheme")
		s := WeightScheme{Bits: 8, Type: "float", Strategy: "tensor", ScaleBits: 32, Targets: linear}
		if b := f.list("weight_block_size"); b != nil {
			s.Strategy, s.BlockSize = "block", intList(f, "weight_block_size", b, 2, maxGroupSize)
		}
		q.Schemes = []WeightScheme{s}
		q.Ignore = f.names("modules_to_not_convert")
		q.Ignore = append(q.Ignore, f.names("ignored_layers")...)
	case "fbgemm_fp8":
		q.Schemes = []WeightScheme{{Bits: 8, Type: "float", Strategy: "channel", ScaleBits: 32, Targets: linear}}
		q.Ignore = f.names("modules_to_not_convert")
	case "awq", "gptq":
		bits := f.optPositive("bits", 4)
		if method == "awq" {
			bits = f.optPositive("w_bit", bits)
		}
		group := f.integerOr("group_size", 128)
		if method == "awq" {
			group = f.integerOr("q_group_size", group)
		}
		s := WeightScheme{Bits: bits, Type: "int", Strategy: "group", GroupSize: group, ScaleBits: 16, ZeroBits: bits, Targets: linear}
		if group == -1 {
			s.Strategy, s.GroupSize = "channel", 0
		}
		if method == "awq" && !f.boolean("zero_point", true) {
			s.ZeroBits = 0
		}
		s.GroupIndex = method == "gptq"
		q.Schemes = []WeightScheme{s}
		q.Ignore = f.names("modules_to_not_convert")
	case "bitsandbytes":
		q.Ignore = f.names("llm_int8_skip_modules")
		switch {
		case f.boolean("load_in_4bit", false):
			// 4-bit blocks of 64 with an fp32 absmax each, or with
			// double quantisation an 8-bit one (its second-level fp32
			// constants, one per 256 blocks, are left out).
			scale := 32
			if f.boolean("bnb_4bit_use_double_quant", false) {
				scale = 8
			}
			typ := "float" // nf4 and fp4 are both 4-bit codes
			q.Schemes = []WeightScheme{{Bits: 4, Type: typ, Strategy: "group", GroupSize: 64, ScaleBits: scale, Targets: linear}}
		case f.boolean("load_in_8bit", false):
			q.Schemes = []WeightScheme{{Bits: 8, Type: "int", Strategy: "channel", ScaleBits: 32, Targets: linear}}
		default:
			f.fail("load_in_4bit", "bitsandbytes with neither load_in_4bit nor load_in_8bit")
		}
	case "mxfp4":
		q.Schemes = []WeightScheme{{Bits: 4, Type: "float", Strategy: "group", GroupSize: 32, ScaleBits: 8, Targets: linear}}
		q.Ignore = f.names("modules_to_not_convert")
	case "nvfp4":
		q.Schemes = []WeightScheme{nvfp4(f.integerOr("group_size", 16))}
		q.Ignore = f.names("modules_to_not_convert")
		q.Ignore = append(q.Ignore, f.names("exclude_modules")...)
		q.QuantizeHead = true
	case "modelopt":
		q.QuantizeHead = true
		q.Ignore = f.names("exclude_modules")
		q.Ignore = append(q.Ignore, f.names("ignore")...)
		switch algo := strings.ToUpper(f.str("quant_algo")); algo {
		case "FP8":
			q.Schemes = []WeightScheme{{Bits: 8, Type: "float", Strategy: "tensor", ScaleBits: 32, Targets: linear}}
		case "NVFP4":
			q.Schemes = []WeightScheme{nvfp4(f.integerOr("group_size", 16))}
		default:
			q.Known = false // another ModelOpt algorithm: said in the notes
		}
	case "compressed-tensors":
		q.QuantizeHead = true
		q.Ignore = f.names("ignore")
		var static bool
		q.Schemes, static = compressedSchemes(f)
		if static {
			q.ActivationScheme = "static"
		}
		if q.Schemes == nil && f.err == nil {
			q.Known = false // no weight quantisation described
		}
	}
	if f.err != nil {
		return nil
	}
	if err := q.check(); err != nil {
		f.err = err
		return nil
	}
	return q
}

// nvfp4 is NVIDIA's FP4: 4-bit values with an FP8 scale per group of 16
// and an fp32 global scale per matrix.
func nvfp4(group int) WeightScheme {
	return WeightScheme{Bits: 4, Type: "float", Strategy: "tensor_group", GroupSize: group, ScaleBits: 8, Targets: []string{"Linear"}}
}

// compressedSchemes reads compressed-tensors config_groups in the order
// of their names.
func compressedSchemes(f *fields) (schemes []WeightScheme, staticInput bool) {
	if f.err != nil || !f.has("config_groups") {
		return nil, false
	}
	groups, ok := f.m["config_groups"].(map[string]any)
	if !ok {
		f.fail("config_groups", "want an object, got %s", jsonType(f.m["config_groups"]))
		return nil, false
	}
	if len(groups) > gpufleet.MaxListLen {
		f.fail("config_groups", "%d groups, at most %d", len(groups), gpufleet.MaxListLen)
		return nil, false
	}
	format := f.str("format")
	var out []WeightScheme
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		key := "config_groups." + name
		if err := gpufleet.CheckText("config_groups", name, gpufleet.MaxWordLen, false); err != nil {
			f.err = err
			return nil, false
		}
		gm, ok := groups[name].(map[string]any)
		if !ok {
			f.fail(key, "want an object, got %s", jsonType(groups[name]))
			return nil, false
		}
		g := &fields{m: gm}
		targets := g.names("targets")
		if !g.has("weights") {
			if g.err != nil {
				f.err = fmt.Errorf("%s: %w", key, g.err)
			}
			continue // activations only
		}
		wm, ok := gm["weights"].(map[string]any)
		if !ok {
			f.fail(key+".weights", "want an object, got %s", jsonType(gm["weights"]))
			return nil, false
		}
		w := &fields{m: wm}
		s := WeightScheme{Bits: w.optPositive("num_bits", 8), Type: w.str("type"), Strategy: w.str("strategy"), ScaleBits: 16, Targets: targets,
			field: key + ".weights."}
		if s.Type == "" {
			s.Type = "int"
		}
		s.GroupSize = w.integerOr("group_size", 0)
		if b := w.list("block_structure"); b != nil {
			s.BlockSize = intList(w, "block_structure", b, 2, maxGroupSize)
		}
		switch {
		case s.Strategy == "" && len(s.BlockSize) > 0:
			s.Strategy = "block"
		case s.Strategy == "" && s.GroupSize > 0:
			s.Strategy = "group"
		case s.Strategy == "":
			s.Strategy = "tensor"
		}
		if s.Strategy == "tensor_group" || strings.Contains(format, "nvfp4") {
			s.Strategy, s.ScaleBits = "tensor_group", 8
			if s.GroupSize == 0 {
				s.GroupSize = 16
			}
		}
		if !w.boolean("symmetric", true) {
			s.ZeroBits = 8
		}
		if strings.HasPrefix(format, "pack-quantized") || format == "pack-quantized" {
			s.ShapeBytes = 16
		}
		if g.err == nil && w.err != nil {
			g.err = w.err
		}
		if g.err != nil {
			f.err = fmt.Errorf("%s: %w", key, g.err)
			return nil, false
		}
		if len(s.Targets) == 0 {
			s.Targets = []string{"Linear"}
		}
		out = append(out, s)
		if sm, ok := gm["input_activations"].(map[string]any); ok {
			if d, ok := sm["dynamic"].(bool); ok && !d {
				staticInput = true
			}
		}
	}
	return out, staticInput
}

// check validates a parsed description and compiles its patterns.
func (q *Quantization) check() error {
	if len(q.Ignore) > maxQuantModules {
		return fmt.Errorf("%w: ignore: %d modules, at most %d", gpufleet.ErrInvalid, len(q.Ignore), maxQuantModules)
	}
	switch q.ActivationScheme {
	case "", "dynamic", "static":
	default:
		return &gpufleet.ValueError{Field: "activation_scheme", Value: gpufleet.Quote(q.ActivationScheme), Want: "expected dynamic or static"}
	}
	for _, s := range q.Schemes {
		field, bits := s.field, "bits"
		if field != "" {
			bits = field + "num_bits"
		}
		if err := gpufleet.ValidateCount(bits, s.Bits, 1, 16); err != nil {
			return err
		}
		switch s.Type {
		case "int", "float":
		default:
			return &gpufleet.ValueError{Field: field + "type", Value: gpufleet.Quote(s.Type), Want: "expected int or float"}
		}
		switch s.Strategy {
		case "tensor", "channel", "token":
		case "group", "tensor_group":
			if err := gpufleet.ValidateCount(field+"group_size", s.GroupSize, 1, maxGroupSize); err != nil {
				return err
			}
		case "block":
			if len(s.BlockSize) != 2 {
				return &gpufleet.ValueError{Field: field + "block_size", Value: fmt.Sprint(s.BlockSize), Want: "expected [rows, columns]"}
			}
		default:
			return &gpufleet.ValueError{Field: field + "strategy", Value: gpufleet.Quote(s.Strategy), Want: "expected tensor, channel, group, block or tensor_group"}
		}
		if s.GroupSize < 0 || s.GroupSize > maxGroupSize {
			return gpufleet.ValidateCount(field+"group_size", s.GroupSize, 0, maxGroupSize)
		}
		if len(s.Targets) > maxQuantModules {
			return fmt.Errorf("%w: %stargets: %d, at most %d", gpufleet.ErrInvalid, field, len(s.Targets), maxQuantModules)
		}
	}
	var err error
	if q.ignore, err = compileNames("ignore", q.Ignore); err != nil {
		return err
	}
	q.targets = make([]nameSet, len(q.Schemes))
	for i, s := range q.Schemes {
		if q.targets[i], err = compileNames(s.field+"targets", s.Targets); err != nil {
			return err
		}
	}
	q.compiled = true
	return nil
}

// nameSet matches module names: every linear layer, names (a module
// named so or a dotted run of its name: lm_head matches lm_head,
// model.layers.0 matches model.layers.0.mlp.down_proj, self_attn every
// attention projection), globs and regular expressions.
type nameSet struct {
	all   bool
	names map[string]bool
	res   []*regexp.Regexp
}

func compileNames(field string, names []string) (nameSet, error) {
	set := nameSet{names: map[string]bool{}}
	for i, n := range names {
		if err := gpufleet.CheckText(fmt.Sprintf("%s[%d]", field, i), n, gpufleet.MaxWordLen, false); err != nil {
			return set, err
		}
		switch {
		case n == "Linear":
			set.all = true
		case strings.HasPrefix(n, "re:"):
			re, err := regexp.Compile("^(?:" + n[3:] + ")")
			if err != nil {
				return set, &gpufleet.ValueError{Field: fmt.Sprintf("%s[%d]", field, i), Value: gpufleet.Quote(n), Want: "expected a regular expression (RE2 syntax)"}
			}
			set.res = append(set.res, re)
		case strings.Contains(n, "*"):
			parts := strings.Split(n, "*")
			for j := range parts {
				parts[j] = regexp.QuoteMeta(parts[j])
			}
			set.res = append(set.res, regexp.MustCompile(`^(?:.*\.)?`+strings.Join(parts, ".*")+`(?:\..*)?$`))
		default:
			set.names[n] = true
		}
	}
	return set, nil
}

// match says whether the module name is in the set. Names are looked up
// by every dotted run of the name's parts, so the cost does not grow
// with the list.
func (s nameSet) match(name string) bool {
	if s.all {
		return true
	}
	if len(s.names) > 0 {
		for i := 0; i <= len(name); i++ {
			if i > 0 && name[i-1] != '.' {
				continue
			}
			for j := i + 1; j <= len(name); j++ {
				if (j == len(name) || name[j] == '.') && s.names[name[i:j]] {
					return true
				}
			}
		}
	}
	for _, re := range s.res {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// scheme returns the index of the scheme of the linear module name, -1
// when it stays unquantised. q must be compiled (check).
func (q *Quantization) scheme(name string) int {
	if q.ignore.match(name) {
		return -1
	}
	for i := range q.Schemes {
		if q.targets[i].match(name) {
			return i
		}
	}
	return -1
}

// bytes is the storage of an out x in weight matrix in the scheme:
// values, scales, zero points and per-matrix extras.
func (s *WeightScheme) bytes(out, in int64, staticInput bool) float64 {
	v := float64(out*in) * float64(s.Bits) / 8
	var scales float64
	switch s.Strategy {
	case "tensor":
		scales = 1
	case "channel", "token":
		scales = float64(out)
	case "group":
		scales = float64(out) * float64(ceilDiv(in, int64(s.GroupSize)))
	case "tensor_group":
		scales = float64(out) * float64(ceilDiv(in, int64(s.GroupSize)))
		v += 4 // the fp32 global scale
	case "block":
		scales = float64(ceilDiv(out, int64(s.BlockSize[0]))) * float64(ceilDiv(in, int64(s.BlockSize[1])))
	}
	v += scales * float64(s.ScaleBits+s.ZeroBits) / 8
	if s.GroupIndex {
		v += float64(in) * 4
	}
	v += float64(s.ShapeBytes)
	if staticInput {
		v += 4
	}
	return v
}

func ceilDiv(a, b int64) int64 {
	if b <= 0 {
		return 1
	}
	return (a + b - 1) / b
}

// names reads an optional array of module names.
func (f *fields) names(key string) []string {
	l := f.list(key)
	if f.err != nil || l == nil {
		return nil
	}
	if len(l) > maxQuantModules {
		f.fail(key, "%d names, at most %d", len(l), maxQuantModules)
		return nil
	}
	out := make([]string, 0, len(l))
	for i, v := range l {
		s, ok := v.(string)
		if !ok {
			f.fail(key, "element %d: want a string, got %s", i, jsonType(v))
			return nil
		}
		if err := gpufleet.CheckText(fmt.Sprintf("%s[%d]", key, i), s, gpufleet.MaxWordLen, false); err != nil {
			f.err = err
			return nil
		}
		out = append(out, s)
	}
	return out
}

// integerOr reads an optional integer that may be -1 (per-channel in
// GPTQ's group_size), null or absent giving def.
func (f *fields) integerOr(key string, def int) int {
	n, ok := f.integer(key)
	if !ok {
		return def
	}
	if n < -1 || n == 0 && key != "group_size" {
		f.fail(key, "want a positive integer or -1, got %d", n)
		return def
	}
	if n > maxGroupSize {
		f.fail(key, "%d is more than %d", n, maxGroupSize)
		return def
	}
	return n
}

// intList reads an array of n positive integers up to max.
func intList(f *fields, key string, l []any, n, max int) []int {
	if len(l) != n {
		f.fail(key, "want %d integers, got %d", n, len(l))
		return nil
	}
	out := make([]int, n)
	for i, v := range l {
		num, ok := v.(json.Number)
		x, err := num.Int64()
		if !ok || err != nil || x <= 0 || x > int64(max) {
			f.fail(key, "element %d: want an integer from 1 to %d, got %v", i, max, v)
			return nil
		}
		out[i] = int(x)
	}
	return out
}

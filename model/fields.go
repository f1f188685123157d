package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/gpufleet/gpufleet"
)

// Limits that keep a parsed Config small enough to count exactly in int64
// and to allocate its per-layer slices. Real models are far below them.
const (
	maxInt    = 1 << 30 // any integer field
	maxLayers = 1 << 16 // num_hidden_layers and its aliases
	maxParams = 1e15    // total parameters
)

// fields reads typed values out of a decoded config.json object. It keeps
// the first error, so a family parser reads every field it needs and checks
// f.err once at the end; after an error every read returns a zero value.
type fields struct {
	m   map[string]any
	err error
}

// decodeObject decodes a whole JSON document that must be one object. Numbers
// stay json.Number so integers are read exactly and absence stays distinct
// from zero.
func decodeObject(data []byte) (*fields, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: malformed json: %v", gpufleet.ErrInvalid, err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("%w: malformed json: data after the top-level object", gpufleet.ErrInvalid)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: malformed json: want an object, got %s", gpufleet.ErrInvalid, jsonType(v))
	}
	return &fields{m: m}, nil
}

// fail records the first error, naming the field.
func (f *fields) fail(key, format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf("%w: %s: %s", gpufleet.ErrInvalid, key, fmt.Sprintf(format, args...))
	}
}

// has says whether key is present and not null.
func (f *fields) has(key string) bool {
	v, ok := f.m[key]
	return ok && v != nil
}

// integer reads an integer; ok is false when the key is absent or null.
// Integral floats (4096.0) are accepted.
func (f *fields) integer(key string) (n int, ok bool) {
	if f.err != nil || !f.has(key) {
		return 0, false
	}
	num, isNum := f.m[key].(json.Number)
	if !isNum {
		f.fail(key, "want an integer, got %s", jsonType(f.m[key]))
		return 0, false
	}
	if i, err := num.Int64(); err == nil {
		if i < -maxInt || i > maxInt {
			f.fail(key, "%d is out of range", i)
			return 0, false
		}
		return int(i), true
	}
	x, err := num.Float64()
	if err != nil || x != math.Trunc(x) || math.Abs(x) > maxInt {
		f.fail(key, "want an integer, got %s", num)
		return 0, false
	}
	return int(x), true
}

// positive reads a required integer that must be greater than zero.
func (f *fields) positive(key string) int {
	if f.err == nil && !f.has(key) {
		f.fail(key, "missing")
		return 0
	}
	return f.optPositive(key, 0)
}

// optPositive reads an optional integer that must be greater than zero when
// present; absent or null gives def.
func (f *fields) optPositive(key string, def int) int {
	n, ok := f.integer(key)
	if !ok {
		return def
	}
	if n <= 0 {
		f.fail(key, "want a positive integer, got %d", n)
		return 0
	}
	return n
}

// optNonNegative reads an optional integer that must not be negative.
func (f *fields) optNonNegative(key string, def int) int {
	n, ok := f.integer(key)
	if !ok {
		return def
	}
	if n < 0 {
		f.fail(key, "want a non-negative integer, got %d", n)
		return 0
	}
	return n
}

// boolean reads an optional boolean; absent or null gives def.
func (f *fields) boolean(key string, def bool) bool {
	if f.err != nil || !f.has(key) {
		return def
	}
	b, ok := f.m[key].(bool)
	if !ok {
		f.fail(key, "want a boolean, got %s", jsonType(f.m[key]))
		return def
	}
	return b
}

// number reads an optional number; absent or null gives def.
func (f *fields) number(key string, def float64) float64 {
	if f.err != nil || !f.has(key) {
		return def
	}
	num, ok := f.m[key].(json.Number)
	if !ok {
		f.fail(key, "want a number, got %s", jsonType(f.m[key]))
		return def
	}
	x, err := num.Float64()
	if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
		f.fail(key, "want a finite number, got %s", num)
		return def
	}
	return x
}

// str reads an optional string; absent or null gives "".
func (f *fields) str(key string) string {
	if f.err != nil || !f.has(key) {
		return ""
	}
	s, ok := f.m[key].(string)
	if !ok {
		f.fail(key, "want a string, got %s", jsonType(f.m[key]))
	}
	return s
}

// list reads an optional array; absent or null gives nil.
func (f *fields) list(key string) []any {
	if f.err != nil || !f.has(key) {
		return nil
	}
	a, ok := f.m[key].([]any)
	if !ok {
		f.fail(key, "want an array, got %s", jsonType(f.m[key]))
	}
	return a
}

// layerIndexes reads an optional array of layer indexes in [0, layers).
func (f *fields) layerIndexes(key string, layers int) []int {
	var out []int
	for i, v := range f.list(key) {
		num, ok := v.(json.Number)
		n, err := num.Int64()
		if !ok || err != nil || n < 0 || n >= int64(layers) {
			f.fail(key, "element %d: want a layer index in [0, %d), got %v", i, layers, v)
			return nil
		}
		out = append(out, int(n))
	}
	return out
}

// jsonType names the JSON type of a decoded value for error messages.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

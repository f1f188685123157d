package catalog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// WithOverrides returns a new catalog: c with the entries read from r laid
// over it. c itself never changes. The input is either the data-file format
// of Parse, whose rows add new ids or replace whole entries, or JSON
// (recognised by a first non-space byte '[' or '{'): one object or an array
// of objects with the JSON keys of GPU. A JSON object whose id exists is
// merged key by key over the existing entry, so {"id":"h100-sxm-80gb",
// "price_per_hour_usd":2.1} changes only the price; a new id must carry at
// least name, memory_bytes, memory_bandwidth_bytes_per_s and one peak_flops
// value. Unknown JSON keys are an error that names them. Errors wrap
// gpufleet.ErrInvalid.
func (c *Catalog) WithOverrides(r io.Reader) (*Catalog, error) {
	br := bufio.NewReader(r)
	first, err := firstNonSpace(br)
	if err != nil {
		return nil, fmt.Errorf("%w: read overrides: %v", gpufleet.ErrInvalid, err)
	}
	gpus := c.All()
	pos := make(map[string]int, len(gpus))
	for i, g := range gpus {
		pos[g.ID] = i
	}
	put := func(g GPU) {
		if i, ok := pos[g.ID]; ok {
			gpus[i] = g
			return
		}
		pos[g.ID] = len(gpus)
		gpus = append(gpus, g)
	}
	switch first {
	case 0:
		return nil, fmt.Errorf("%w: overrides: want CSV or JSON, got an empty input", gpufleet.ErrInvalid)
	case '[', '{':
		objs, err := decodeObjects(br, first)
		if err != nil {
			return nil, err
		}
		for i, raw := range objs {
			g, err := mergeJSON(raw, i, func(id string) (GPU, bool) {
				if j, ok := pos[id]; ok {
					return cloneGPU(gpus[j]), true
				}
				return GPU{}, false
			})
			if err != nil {
				return nil, err
			}
			put(g)
		}
	default:
		rows, err := Parse(br)
		if err != nil {
			return nil, fmt.Errorf("overrides: %w", err)
		}
		for _, g := range rows {
			put(g)
		}
	}
	return build(gpus), nil
}

// firstNonSpace peeks at the first byte that is not white space (or a UTF-8
// byte-order mark); 0 means the input is empty.
func firstNonSpace(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.Peek(1)
		if err == io.EOF {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			_, _ = br.ReadByte()
			continue
		case 0xEF:
			if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xEF\xBB\xBF")) {
				_, _ = br.Discard(3)
				continue
			}
		}
		return b[0], nil
	}
}

// decodeObjects reads one JSON object or an array of them.
func decodeObjects(r io.Reader, first byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var objs []json.RawMessage
	if first == '[' {
		if err := dec.Decode(&objs); err != nil {
			return nil, jsonErr("overrides", err)
		}
	} else {
		var one json.RawMessage
		if err := dec.Decode(&one); err != nil {
			return nil, jsonErr("overrides", err)
		}
		objs = []json.RawMessage{one}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: overrides: want a single JSON value, got more after it", gpufleet.ErrInvalid)
	}
	return objs, nil
}

// gpuKeys lists the JSON keys of GPU, in field order.
var gpuKeys = func() []string {
	t := reflect.TypeFor[GPU]()
	var keys []string
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if tag != "" && tag != "-" {
			keys = append(keys, tag)
		}
	}
	return keys
}()

// mergeJSON applies one override object. existing returns the current entry
// of an id.
func mergeJSON(raw json.RawMessage, n int, existing func(id string) (GPU, bool)) (GPU, error) {
	where := fmt.Sprintf("override %d", n+1)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return GPU{}, fmt.Errorf("%w: %s: want a JSON object with the keys of a GPU, got %s", gpufleet.ErrInvalid, where, truncate(string(raw)))
	}
	var unknown []string
	for k := range obj {
		if !slices.Contains(gpuKeys, k) {
			unknown = append(unknown, gpufleet.Quote(k))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return GPU{}, fmt.Errorf("%w: %s: unknown key %s (want keys among %s)", gpufleet.ErrInvalid, where, strings.Join(unknown, ", "), strings.Join(gpuKeys, ", "))
	}
	var id string
	if err := json.Unmarshal(obj["id"], &id); err != nil || id == "" {
		return GPU{}, fmt.Errorf("%w: %s: key id: want a non-empty string", gpufleet.ErrInvalid, where)
	}
	where = fmt.Sprintf("%s (gpu %s)", where, gpufleet.Quote(id))
	g, ok := existing(id)
	if !ok {
		var missing []string
		for _, k := range []string{"name", "memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops"} {
			if _, has := obj[k]; !has {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			return GPU{}, fmt.Errorf("%w: %s: a new gpu needs key %s", gpufleet.ErrInvalid, where, strings.Join(missing, ", "))
		}
		g = newGPU()
	}
	if g.PeakFLOPS == nil {
		g.PeakFLOPS = map[gpufleet.Precision]*float64{}
	}
	// Decoding into the existing entry changes only the keys present; the
	// peak_flops map is merged precision by precision.
	if err := json.Unmarshal(raw, &g); err != nil {
		return GPU{}, jsonErr(where, err)
	}
	g.ID = id
	fillPrecisions(&g)
	if err := validate(g); err != nil {
		return GPU{}, fmt.Errorf("%s: %w", where, err)
	}
	return g, nil
}

func jsonErr(where string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return fmt.Errorf("%w: %s: key %s: want %s, got JSON %s", gpufleet.ErrInvalid, where, field, te.Type, te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%w: %s: want valid JSON, got a syntax error at byte %d: %v", gpufleet.ErrInvalid, where, se.Offset, err)
	}
	var ve *gpufleet.ValueError
	if errors.As(err, &ve) {
		// The GPU's vocabulary: precisions (peak_flops keys) and the
		// compute capability.
		key := map[string]string{"precision": "peak_flops", "compute capability": "compute_capability"}[ve.Field]
		return fmt.Errorf("%w: %s: key %s: %s: %s", gpufleet.ErrInvalid, where, key, ve.Value, ve.Want)
	}
	return fmt.Errorf("%w: %s: want valid JSON: %v", gpufleet.ErrInvalid, where, err)
}

func truncate(s string) string {
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return gpufleet.Quote(s)
}

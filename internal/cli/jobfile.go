package cli

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/planner"
)

// maxJobFileBytes caps a job file; an inline model config fits easily.
const maxJobFileBytes = 4 << 20

// parseJobFile reads a job file, YAML or JSON, with the SubmitRequest
// schema (docs/JOBS.md). It is strict: an unknown key is an error naming it
// and its line. Human forms are accepted and normalised: durations ("90s",
// "4h", "2d" or seconds) for time_limit, estimate and grace, and sizes
// ("80GiB", "141GB") for resources.gpu_memory_min_bytes, which may also be
// written gpu_memory_min. name labels errors ("job.yaml:7: ...").
func parseJobFile(r io.Reader, name string) (api.SubmitRequest, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxJobFileBytes+1))
	if err != nil {
		return api.SubmitRequest{}, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) > maxJobFileBytes {
		return api.SubmitRequest{}, fmt.Errorf("%w: %s: larger than %d bytes", gpufleet.ErrInvalid, name, maxJobFileBytes)
	}
	var root *fnode
	if isJSON(name, data) {
		root, err = parseJSONTree(data)
	} else {
		root, err = parseYAMLTree(data)
	}
	if err != nil {
		return api.SubmitRequest{}, fmt.Errorf("%w: %s:%v", gpufleet.ErrInvalid, name, err)
	}
	if root == nil || root.kind == fnull {
		return api.SubmitRequest{}, fmt.Errorf("%w: %s: empty job file", gpufleet.ErrInvalid, name)
	}
	w := &schemaWalker{budget: 100000}
	v, err := w.value(root, reflect.TypeFor[api.SubmitRequest](), "")
	if err != nil {
		return api.SubmitRequest{}, fmt.Errorf("%w: %s:%v", gpufleet.ErrInvalid, name, err)
	}
	body, err := json.Marshal(v)
	if err != nil {
		return api.SubmitRequest{}, fmt.Errorf("%w: %s: %v", gpufleet.ErrInvalid, name, err)
	}
	req, err := api.DecodeSubmitRequest(bytes.NewReader(body))
	if err != nil {
		return api.SubmitRequest{}, fmt.Errorf("%s: %w", name, err)
	}
	return req, nil
}

func isJSON(name string, data []byte) bool {
	if strings.HasSuffix(strings.ToLower(name), ".json") {
		return true
	}
	t := bytes.TrimLeft(data, " \t\r\n\ufeff")
	return len(t) > 0 && t[0] == '{'
}

// fnode is a parsed job file value with its line, from YAML or JSON.
type fnode struct {
	kind  fkind
	tag   string // scalars: str, int, float, bool
	value string // scalars: the text as written
	line  int
	keys  []*fnode // mappings
	items []*fnode // mapping values, sequence items
}

type fkind int

const (
	fnull fkind = iota
	fscalar
	fmapping
	fsequence
)

// parseYAMLTree parses one YAML document into an fnode tree. Errors start
// with the line number.
func parseYAMLTree(data []byte) (*fnode, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if l, rest, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(l, "line ") {
			return nil, fmt.Errorf("%s: %s", strings.TrimPrefix(l, "line "), rest)
		}
		return nil, fmt.Errorf(" %s", msg)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%d: one job per file: found a second YAML document", next.Line)
	}
	budget := 100000
	return convertYAML(&doc, &budget, 0)
}

func convertYAML(n *yaml.Node, budget *int, depth int) (*fnode, error) {
	if *budget--; *budget < 0 || depth > 64 {
		return nil, fmt.Errorf("%d: document too large or too deeply nested (aliases?)", n.Line)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return convertYAML(n.Content[0], budget, depth+1)
	case yaml.AliasNode:
		return convertYAML(n.Alias, budget, depth+1)
	case yaml.ScalarNode:
		f := &fnode{kind: fscalar, value: n.Value, line: n.Line}
		switch n.ShortTag() {
		case "!!null":
			f.kind = fnull
		case "!!int":
			f.tag = "int"
		case "!!float":
			f.tag = "float"
		case "!!bool":
			f.tag = "bool"
		case "!!str", "!!timestamp", "!!binary":
			f.tag = "str"
		default:
			return nil, fmt.Errorf("%d: unsupported YAML tag %s", n.Line, n.Tag)
		}
		return f, nil
	case yaml.MappingNode:
		f := &fnode{kind: fmapping, line: n.Line}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if kn := n.Content[i]; kn.Kind == yaml.ScalarNode && kn.Value == "<<" && kn.Style == 0 {
				return nil, fmt.Errorf("%d: YAML merge keys (<<) are not supported in job files", kn.Line)
			}
			k, err := convertYAML(n.Content[i], budget, depth+1)
			if err != nil {
				return nil, err
			}
			if k == nil || k.kind != fscalar {
				return nil, fmt.Errorf("%d: mapping keys must be plain strings", n.Content[i].Line)
			}
			v, err := convertYAML(n.Content[i+1], budget, depth+1)
			if err != nil {
				return nil, err
			}
			f.keys, f.items = append(f.keys, k), append(f.items, v)
		}
		return f, nil
	case yaml.SequenceNode:
		f := &fnode{kind: fsequence, line: n.Line}
		for _, c := range n.Content {
			v, err := convertYAML(c, budget, depth+1)
			if err != nil {
				return nil, err
			}
			f.items = append(f.items, v)
		}
		return f, nil
	}
	return nil, fmt.Errorf("%d: unexpected YAML node", n.Line)
}

// parseJSONTree parses one JSON value into an fnode tree, keeping lines.
func parseJSONTree(data []byte) (*fnode, error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	line := func() int { return 1 + bytes.Count(data[:min(int(dec.InputOffset()), len(data))], []byte("\n")) }
	var parse func(depth int) (*fnode, error)
	parse = func(depth int) (*fnode, error) {
		if depth > 64 {
			return nil, fmt.Errorf("%d: nested too deeply", line())
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%d: invalid JSON: %v", line(), strings.TrimPrefix(err.Error(), "json: "))
		}
		n := &fnode{line: line()}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				n.kind = fmapping
				for dec.More() {
					kt, err := dec.Token()
					if err != nil {
						return nil, fmt.Errorf("%d: invalid JSON: %v", line(), strings.TrimPrefix(err.Error(), "json: "))
					}
					k, _ := kt.(string)
					n.keys = append(n.keys, &fnode{kind: fscalar, tag: "str", value: k, line: line()})
					v, err := parse(depth + 1)
					if err != nil {
						return nil, err
					}
					n.items = append(n.items, v)
				}
			case '[':
				n.kind = fsequence
				for dec.More() {
					v, err := parse(depth + 1)
					if err != nil {
						return nil, err
					}
					n.items = append(n.items, v)
				}
			}
			if _, err := dec.Token(); err != nil { // the closing delimiter
				return nil, fmt.Errorf("%d: invalid JSON: %v", line(), strings.TrimPrefix(err.Error(), "json: "))
			}
		case nil:
			n.kind = fnull
		case bool:
			n.kind, n.tag, n.value = fscalar, "bool", strconv.FormatBool(t)
		case json.Number:
			n.kind, n.tag, n.value = fscalar, "float", t.String()
			if _, err := strconv.ParseInt(t.String(), 10, 64); err == nil {
				n.tag = "int"
			}
		case string:
			n.kind, n.tag, n.value = fscalar, "str", t
		}
		return n, nil
	}
	root, err := parse(0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%d: unexpected data after the JSON value", line())
	}
	return root, nil
}

// keyAliases maps a human key to its contract key.
var keyAliases = map[string]string{"resources.gpu_memory_min": "gpu_memory_min_bytes", "resources.memory": "memory_bytes"}

// modelWord validates a word of the model block (model.mode,
// model.kv_precision, ...) as the planner reads it; every other closed
// vocabulary is a type of its own.
func modelWord(path, v string) error {
	key, ok := strings.CutPrefix(path, "model.")
	var spec planner.Spec
	w := spec.Word(key)
	if !ok || w == nil {
		return nil
	}
	*w = v
	_, err := spec.Request(nil, nil, nil)
	var ve *gpufleet.ValueError
	if errors.As(err, &ve) {
		return fmt.Errorf("%s: %s", ve.Value, ve.Want)
	}
	return err
}

var (
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	bytesType       = reflect.TypeFor[gpufleet.Bytes]()
)

// lineErr is a refused value's error with its line: "7: resources.sharing
// "x": expected ...".
func lineErr(line int, label string, err error) error {
	var ve *gpufleet.ValueError
	if errors.As(err, &ve) {
		return fmt.Errorf("%d: %s %s: %s", line, label, ve.Value, ve.Want)
	}
	return fmt.Errorf("%d: %s: %s", line, label, detail(err))
}

// schemaWalker turns an fnode tree into JSON values following a Go type's
// JSON fields, rejecting unknown keys with their line.
type schemaWalker struct{ budget int }

func (w *schemaWalker) value(n *fnode, t reflect.Type, path string) (any, error) {
	if w.budget--; w.budget < 0 {
		return nil, fmt.Errorf("%d: document too large", n.line)
	}
	if n.kind == fnull {
		return nil, nil
	}
	label := path
	if label == "" {
		label = "job"
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == bytesType:
		if n.kind != fscalar || n.tag == "bool" {
			return nil, fmt.Errorf("%d: %s: expected a size such as 80GiB or bytes", n.line, label)
		}
		b, err := gpufleet.ParseBytes(n.value)
		if err != nil {
			return nil, lineErr(n.line, label, err)
		}
		return int64(b), nil
	case reflect.PointerTo(t).Implements(textUnmarshaler):
		// A word of the vocabulary (duration, sharing, priority, ...):
		// its own parser reads it, as the API's decoder does.
		if n.kind != fscalar || n.tag == "bool" {
			return nil, fmt.Errorf("%d: %s: expected a string, got %s", n.line, label, describe(n))
		}
		v := reflect.New(t)
		if err := v.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.value)); err != nil {
			return nil, lineErr(n.line, label, err)
		}
		return v.Elem().Interface(), nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.kind != fmapping {
			return nil, fmt.Errorf("%d: %s: expected a mapping of fields", n.line, label)
		}
		fields := jsonFieldTypes(t)
		out := map[string]any{}
		seen := map[string]int{}
		for i, k := range n.keys {
			key := k.value
			if alias, ok := keyAliases[join(path, key)]; ok {
				key = alias
			}
			ft, ok := fields[key]
			if !ok {
				where := ""
				if path != "" {
					where = " in " + path
				}
				return nil, fmt.Errorf("%d: unknown field %s%s (known: %s)", k.line, gpufleet.Quote(k.value), where, strings.Join(slices.Sorted(mapKeys(fields)), ", "))
			}
			if prev, dup := seen[key]; dup {
				return nil, fmt.Errorf("%d: %s given twice (first on line %d)", k.line, join(path, key), prev)
			}
			seen[key] = k.line
			v, err := w.value(n.items[i], ft, join(path, key))
			if err != nil {
				return nil, err
			}
			if v != nil {
				out[key] = v
			}
		}
		return out, nil
	case reflect.String:
		if n.kind != fscalar {
			return nil, fmt.Errorf("%d: %s: expected a string", n.line, label)
		}
		if err := modelWord(path, n.value); err != nil {
			return nil, fmt.Errorf("%d: %s: %v", n.line, label, err)
		}
		return n.value, nil
	case reflect.Int, reflect.Int64:
		if n.kind != fscalar || n.tag != "int" {
			return nil, fmt.Errorf("%d: %s: expected an integer, got %s", n.line, label, describe(n))
		}
		v, err := strconv.ParseInt(strings.ReplaceAll(n.value, "_", ""), 0, 64)
		if err != nil || (t.Kind() == reflect.Int && (v > math.MaxInt32 || v < math.MinInt32)) {
			return nil, fmt.Errorf("%d: %s: integer %s out of range", n.line, label, n.value)
		}
		return v, nil
	case reflect.Float64:
		if n.kind != fscalar || (n.tag != "int" && n.tag != "float") {
			return nil, fmt.Errorf("%d: %s: expected a number, got %s", n.line, label, describe(n))
		}
		v, err := strconv.ParseFloat(n.value, 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("%d: %s: expected a finite number, got %s", n.line, label, n.value)
		}
		return v, nil
	case reflect.Bool:
		if n.kind != fscalar || n.tag != "bool" {
			return nil, fmt.Errorf("%d: %s: expected true or false, got %s", n.line, label, describe(n))
		}
		return n.value == "true" || n.value == "True" || n.value == "TRUE", nil
	case reflect.Slice:
		if n.kind != fsequence {
			return nil, fmt.Errorf("%d: %s: expected a list, got %s", n.line, label, describe(n))
		}
		out := make([]any, 0, len(n.items))
		for i, it := range n.items {
			v, err := w.value(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			if v == nil {
				return nil, fmt.Errorf("%d: %s[%d]: null in a list", it.line, label, i)
			}
			out = append(out, v)
		}
		return out, nil
	case reflect.Map:
		if n.kind != fmapping {
			return nil, fmt.Errorf("%d: %s: expected a mapping, got %s", n.line, label, describe(n))
		}
		out := map[string]any{}
		for i, k := range n.keys {
			if _, dup := out[k.value]; dup {
				return nil, fmt.Errorf("%d: %s: key %s given twice", k.line, label, gpufleet.Quote(k.value))
			}
			if t.Elem().Kind() == reflect.Interface {
				v, err := w.generic(n.items[i])
				if err != nil {
					return nil, err
				}
				out[k.value] = v
				continue
			}
			it := n.items[i]
			if it.kind != fscalar {
				return nil, fmt.Errorf("%d: %s.%s: expected a plain value", it.line, label, k.value)
			}
			v, err := w.value(it, t.Elem(), join(path, k.value))
			if err != nil {
				return nil, err
			}
			out[k.value] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("%d: %s: unsupported field type %s", n.line, label, t)
}

// generic converts free-form data (an inline model config) to JSON values.
func (w *schemaWalker) generic(n *fnode) (any, error) {
	if w.budget--; w.budget < 0 {
		return nil, fmt.Errorf("%d: document too large", n.line)
	}
	switch n.kind {
	case fnull:
		return nil, nil
	case fmapping:
		out := map[string]any{}
		for i, k := range n.keys {
			v, err := w.generic(n.items[i])
			if err != nil {
				return nil, err
			}
			out[k.value] = v
		}
		return out, nil
	case fsequence:
		out := make([]any, 0, len(n.items))
		for _, it := range n.items {
			v, err := w.generic(it)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	switch n.tag {
	case "int", "float":
		v, err := strconv.ParseFloat(strings.ReplaceAll(n.value, "_", ""), 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			if i, ierr := strconv.ParseInt(strings.ReplaceAll(n.value, "_", ""), 0, 64); ierr == nil {
				return i, nil
			}
			return nil, fmt.Errorf("%d: %s is not a finite number", n.line, n.value)
		}
		if n.tag == "int" {
			if i, err := strconv.ParseInt(strings.ReplaceAll(n.value, "_", ""), 0, 64); err == nil {
				return i, nil
			}
		}
		return v, nil
	case "bool":
		return strings.EqualFold(n.value, "true"), nil
	}
	return n.value, nil
}

func describe(n *fnode) string {
	switch n.kind {
	case fmapping:
		return "a mapping"
	case fsequence:
		return "a list"
	}
	return gpufleet.Quote(n.value)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// jsonFieldTypes maps a struct's JSON field names to their types.
func jsonFieldTypes(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			maps.Copy(out, jsonFieldTypes(f.Type)) // embedded: its fields are the parent's, as in encoding/json
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// detail is an ErrInvalid error's message without the "invalid: " prefix,
// for callers that add their own context.
func detail(err error) string {
	return strings.TrimPrefix(err.Error(), gpufleet.ErrInvalid.Error()+": ")
}

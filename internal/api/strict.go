package api

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/gpufleet/gpufleet"
)

// ErrMediaType means a request body is not the media type the route takes
// (415).
var ErrMediaType = errors.New("unsupported media type")

// maxJSONDepth bounds how deeply a body may nest.
const maxJSONDepth = 32

// checkJSONType refuses a body that does not say it is JSON.
func checkJSONType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return fmt.Errorf("%w: Content-Type %s: expected application/json", ErrMediaType, gpufleet.Quote(ct))
}

// decodeStrict reads one JSON object from the request body into v, as
// docs/SERVER.md promises for every body a user sends: Content-Type
// application/json; field names exactly as documented (an unknown field,
// a field in the wrong case and a field given twice are errors naming
// it); every value of the right JSON type and in range for its Go type;
// every word of the vocabulary (durations, sizes, sharing, priorities,
// ...) parsed by its own parser; no trailing data. Errors wrap
// gpufleet.ErrInvalid (or ErrMediaType, or the body cap's error) and
// quote at most gpufleet.QuoteLimit bytes of the input.
func decodeStrict(r *http.Request, v any) error {
	data, err := readJSONBody(r)
	if err != nil {
		return err
	}
	return decodeStrictBytes(data, v)
}

// readJSONBody reads a request body that must be JSON: empty is an error
// saying so, and a body that is not labelled application/json is refused.
func readJSONBody(r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(r.Body)
	switch {
	case err != nil:
		return nil, decodeError(err)
	case len(bytes.TrimSpace(data)) == 0:
		return nil, fmt.Errorf("%w: empty body: expected a JSON object", gpufleet.ErrInvalid)
	}
	return data, checkJSONType(r)
}

// decodeStrictBytes is decodeStrict's check and decode of a body already
// read.
func decodeStrictBytes(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	w := strictWalker{dec: dec, data: data}
	t := reflect.TypeOf(v).Elem()
	first, err := w.token("")
	if err != nil {
		return err
	}
	if d, ok := first.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("%w: body: expected a JSON object", gpufleet.ErrInvalid)
	}
	if err := w.object(t, "", 0); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: unexpected data after the JSON value", gpufleet.ErrInvalid)
	}
	strict := json.NewDecoder(bytes.NewReader(data))
	strict.DisallowUnknownFields()
	if err := strict.Decode(v); err != nil {
		return decodeError(err) // the walk above accepts only what decodes; kept for safety
	}
	return nil
}

// strictWalker checks a JSON document against a Go type token by token.
type strictWalker struct {
	dec    *json.Decoder
	data   []byte // the body, to see a string as it was sent
	tokens int    // read so far
}

// token reads the next token; path names the value it belongs to.
func (w *strictWalker) token(path string) (json.Token, error) {
	from := w.dec.InputOffset()
	tok, err := w.dec.Token()
	w.tokens++
	if s, ok := tok.(string); ok && err == nil && rewritten(w.data[from:w.dec.InputOffset()], s) {
		if path == "" {
			path = "body"
		}
		return nil, fmt.Errorf("%w: %s: invalid UTF-8 or a lone UTF-16 surrogate in a string; it would not be kept as sent", gpufleet.ErrInvalid, path)
	}
	if err != nil {
		var syntax *json.SyntaxError
		switch {
		case errors.Is(err, io.EOF) && w.tokens > 1:
			return nil, fmt.Errorf("%w: truncated JSON body", gpufleet.ErrInvalid)
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("%w: empty body: expected a JSON object", gpufleet.ErrInvalid)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("%w: truncated JSON body", gpufleet.ErrInvalid)
		case errors.As(err, &syntax):
			return nil, fmt.Errorf("%w: invalid JSON at byte %d: %s", gpufleet.ErrInvalid, syntax.Offset, syntax.Error())
		}
		return nil, fmt.Errorf("%w: invalid JSON: %v", gpufleet.ErrInvalid, err)
	}
	return tok, nil
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// value checks the next value against t. path names it in errors.
func (w *strictWalker) value(t reflect.Type, path string, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%w: %s: nested more than %d levels", gpufleet.ErrInvalid, path, maxJSONDepth)
	}
	tok, err := w.token(path)
	if err != nil {
		return err
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if tok == nil {
		return nil // null leaves the zero value
	}
	pt := reflect.PointerTo(t)
	if pt.Implements(jsonUnmarshaler) || pt.Implements(textUnmarshaler) {
		return w.word(tok, t, path)
	}
	delim, isDelim := tok.(json.Delim)
	switch t.Kind() {
	case reflect.Struct:
		if !isDelim || delim != '{' {
			return typeErr(path, "an object", tok)
		}
		return w.object(t, path, depth)
	case reflect.Map:
		if !isDelim || delim != '{' {
			return typeErr(path, "an object", tok)
		}
		return w.mapping(t, path, depth)
	case reflect.Slice, reflect.Array:
		if !isDelim || delim != '[' {
			return typeErr(path, "an array", tok)
		}
		for i := 0; w.dec.More(); i++ {
			if err := w.value(t.Elem(), fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
		_, err := w.token(path)
		return err
	case reflect.Interface:
		if isDelim {
			return w.free(delim, path, depth)
		}
		return nil
	case reflect.String:
		if _, ok := tok.(string); !ok {
			return typeErr(path, "a string", tok)
		}
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return typeErr(path, "true or false", tok)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := tok.(json.Number)
		if !ok {
			return typeErr(path, "an integer", tok)
		}
		if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); err != nil {
			return fmt.Errorf("%w: %s %s: expected an integer that fits %d bits", gpufleet.ErrInvalid, path, gpufleet.Quote(n.String()), t.Bits())
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := tok.(json.Number)
		if !ok {
			return typeErr(path, "a non-negative integer", tok)
		}
		if _, err := strconv.ParseUint(n.String(), 10, t.Bits()); err != nil {
			return fmt.Errorf("%w: %s %s: expected a non-negative integer that fits %d bits", gpufleet.ErrInvalid, path, gpufleet.Quote(n.String()), t.Bits())
		}
	case reflect.Float32, reflect.Float64:
		n, ok := tok.(json.Number)
		if !ok {
			return typeErr(path, "a number", tok)
		}
		if f, err := strconv.ParseFloat(n.String(), t.Bits()); err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("%w: %s %s: expected a finite number", gpufleet.ErrInvalid, path, gpufleet.Quote(n.String()))
		}
	default:
		return fmt.Errorf("%w: %s: unsupported field type", gpufleet.ErrInvalid, path)
	}
	return nil
}

// word checks a vocabulary value (a type with its own parser) by parsing
// it, so that its error names the field.
func (w *strictWalker) word(tok json.Token, t reflect.Type, path string) error {
	var raw []byte
	switch x := tok.(type) {
	case string:
		raw, _ = json.Marshal(x)
	case json.Number:
		raw = []byte(x.String())
	default:
		return typeErr(path, "a string", tok)
	}
	p := reflect.New(t).Interface()
	var err error
	switch u := p.(type) {
	case json.Unmarshaler:
		err = u.UnmarshalJSON(raw)
	case encoding.TextUnmarshaler:
		s, ok := tok.(string)
		if !ok {
			return typeErr(path, "a string", tok)
		}
		err = u.UnmarshalText([]byte(s))
	}
	if err == nil {
		return nil
	}
	if named := gpufleet.InField(path, err); named != err {
		return named
	}
	return fmt.Errorf("%w: %s: %s", gpufleet.ErrInvalid, path, strings.TrimPrefix(err.Error(), gpufleet.ErrInvalid.Error()+": "))
}

// object checks the members of an object (its '{' read) against struct t.
func (w *strictWalker) object(t reflect.Type, path string, depth int) error {
	fields := jsonFields(t)
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.token(keyOf(path))
		if err != nil {
			return err
		}
		key := tok.(string) // object keys are strings
		full := join(path, key)
		ft, ok := fields.exact[key]
		if !ok {
			if want, ok := fields.folded[strings.ToLower(key)]; ok {
				return fmt.Errorf("%w: field %s: names are case-sensitive; expected %q", gpufleet.ErrInvalid, gpufleet.Quote(full), join(path, want))
			}
			return fmt.Errorf("%w: unknown field %s", gpufleet.ErrInvalid, gpufleet.Quote(full))
		}
		if seen[key] {
			return fmt.Errorf("%w: field %s given twice", gpufleet.ErrInvalid, gpufleet.Quote(full))
		}
		seen[key] = true
		if err := w.value(ft, full, depth+1); err != nil {
			return err
		}
	}
	_, err := w.token(path)
	return err
}

// mapping checks the members of a JSON object (its '{' read) read into a
// Go map: no key twice, every value of the element type.
func (w *strictWalker) mapping(t reflect.Type, path string, depth int) error {
	seen := map[string]bool{}
	kt := reflect.PointerTo(t.Key())
	for w.dec.More() {
		tok, err := w.token(keyOf(path))
		if err != nil {
			return err
		}
		key := tok.(string)
		full := join(path, key)
		if seen[key] {
			return fmt.Errorf("%w: key %s given twice", gpufleet.ErrInvalid, gpufleet.Quote(full))
		}
		seen[key] = true
		if kt.Implements(textUnmarshaler) {
			if err := reflect.New(t.Key()).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(key)); err != nil {
				return gpufleet.InField(path+" key", err)
			}
		}
		if err := w.value(t.Elem(), full, depth+1); err != nil {
			return err
		}
	}
	_, err := w.token(path)
	return err
}

// free checks free-form JSON (an inline model config, its delim read):
// bounded depth and no key twice.
func (w *strictWalker) free(open json.Delim, path string, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("%w: %s: nested more than %d levels", gpufleet.ErrInvalid, path, maxJSONDepth)
	}
	seen := map[string]bool{}
	for i := 0; w.dec.More(); i++ {
		sub := fmt.Sprintf("%s[%d]", path, i)
		if open == '{' {
			tok, err := w.token(keyOf(path))
			if err != nil {
				return err
			}
			key := tok.(string)
			sub = join(path, key)
			if seen[key] {
				return fmt.Errorf("%w: key %s given twice", gpufleet.ErrInvalid, gpufleet.Quote(sub))
			}
			seen[key] = true
		}
		tok, err := w.token(sub)
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if err := w.free(d, sub, depth+1); err != nil {
				return err
			}
		}
	}
	_, err := w.token(path)
	return err
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// typeErr says a value has the wrong JSON type.
func typeErr(path, want string, tok json.Token) error {
	got := "null"
	switch x := tok.(type) {
	case json.Delim:
		got = "an array"
		if x == '{' {
			got = "an object"
		}
	case string:
		got = "the string " + gpufleet.Quote(x)
	case json.Number:
		got = "the number " + gpufleet.Quote(x.String())
	case bool:
		got = strconv.FormatBool(x)
	}
	if path == "" {
		path = "body"
	}
	return fmt.Errorf("%w: %s: expected %s, got %s", gpufleet.ErrInvalid, path, want, got)
}

// fieldSet is a struct's JSON field names: exact, and lower-cased to find
// a name written in the wrong case.
type fieldSet struct {
	exact  map[string]reflect.Type
	folded map[string]string
}

var fieldCache sync.Map // reflect.Type -> fieldSet

// jsonFields lists the JSON fields of struct t, embedded structs'
// included, as encoding/json sees them.
func jsonFields(t reflect.Type) fieldSet {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(fieldSet)
	}
	fs := fieldSet{exact: map[string]reflect.Type{}, folded: map[string]string{}}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					add(ft)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fs.exact[name] = f.Type
			fs.folded[strings.ToLower(name)] = name
		}
	}
	add(t)
	fieldCache.Store(t, fs)
	return fs
}

// rewritten reports whether decoding raw (a JSON string token and the
// separators before it) replaced something with U+FFFD: invalid UTF-8 or
// a lone surrogate escape such as \udc00. encoding/json does that
// silently, so a command or name would be stored other than as sent.
func rewritten(raw []byte, decoded string) bool {
	n := strings.Count(decoded, "\uFFFD")
	if n == 0 {
		return false
	}
	sent := bytes.Count(raw, []byte("\uFFFD")) // the character itself, valid UTF-8
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] == 'u' && i+6 <= len(raw) && strings.EqualFold(string(raw[i+2:i+6]), "fffd") {
			sent++
		}
		i++ // skip the escaped character
	}
	return n > sent
}

// keyOf names the keys of the object at path, for errors about a key.
func keyOf(path string) string {
	if path == "" {
		return "a field name"
	}
	return "a key in " + path
}

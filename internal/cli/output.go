package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/theory/jsonpath"

	"github.com/gpufleet/gpufleet"
)

// writeJSON prints v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Output formats: -o table (the default), wide and json are what each
// command prints; yaml, name and jsonpath=TEMPLATE are written by setOutput
// from what it prints for json, so that every command that prints JSON has
// them, as kubectl's commands do.
const (
	outputName     = "name"
	outputJSONPath = "jsonpath"
)

// outputWant lists what -o takes, for its errors and help.
const outputWant = "table, wide, json, yaml, name or jsonpath=TEMPLATE"

// objectKind is what -o name writes for one command's objects: KIND/NAME,
// NAME the JSON field Key of each object the command prints (a list, one
// object, or a list in the field List of one object).
type objectKind struct {
	Kind, Key, List string
}

// namedKinds are the commands that list or get objects, by command path:
// -o name names their objects. The other commands (usage, rollups, plan,
// bench results, ...) print reports and measurements, not named objects;
// -o name refuses them and -o json or jsonpath reads them.
var namedKinds = map[string]objectKind{
	"gpufleet jobs":                {"job", "id", ""},
	"gpufleet job":                 {"job", "id", ""},
	"gpufleet cancel":              {"job", "id", ""},
	"gpufleet queue":               {"job", "id", ""},
	"gpufleet nodes":               {"node", "name", ""},
	"gpufleet teams list":          {"team", "name", ""},
	"gpufleet classes list":        {"class", "name", ""},
	"gpufleet tokens list":         {"token", "id", ""},
	"gpufleet racks list":          {"rack", "name", ""},
	"gpufleet racks show":          {"rack", "name", ""},
	"gpufleet stacks list":         {"stack", "name", ""},
	"gpufleet stacks show":         {"stack", "name", ""},
	"gpufleet stacks check":        {"node", "node", ""},
	"gpufleet rollout list":        {"rollout", "id", ""},
	"gpufleet rollout status":      {"rollout", "id", ""},
	"gpufleet events":              {"event", "id", ""},
	"gpufleet bench workloads":     {"workload", "id", "workloads"},
	"gpufleet catalog":             {"gpu-model", "id", ""},
	"gpufleet catalog show":        {"gpu-model", "id", ""},
	"gpufleet config get-contexts": {"context", "name", ""},
}

// setOutput reads -o for cmd. table, wide and json stay as they are;
// yaml, name and jsonpath=TEMPLATE make the command print JSON into a
// docWriter that rewrites each document. A bad format, a template that does
// not parse, and -o name on a command that names no objects are usage
// errors, before the command runs.
func (e *env) setOutput(cmd *cobra.Command) error {
	format, arg, hasArg := strings.Cut(e.output, "=")
	switch {
	case !hasArg && (format == outputTable || format == outputJSON || format == outputWide):
		return nil
	case !hasArg && format == outputYAML:
		e.output, e.stdout = outputJSON, newYAMLWriter(e.stdout)
		return nil
	case !hasArg && format == outputName:
		k, ok := namedKinds[cmd.CommandPath()]
		if !ok {
			return usageErr("-o name: %s prints no named objects: use -o json, or -o jsonpath=TEMPLATE", cmd.CommandPath())
		}
		e.output, e.stdout = outputJSON, newNameWriter(e.stdout, k)
		return nil
	case format == outputJSONPath:
		if !hasArg || arg == "" {
			return usageErr("-o jsonpath needs a template: -o jsonpath='{.id}' (docs/SERVER.md#output-formats)")
		}
		t, err := parseTemplate(arg)
		if err != nil {
			return usageErr("-o jsonpath=%s: %v", gpufleet.Quote(arg), err)
		}
		e.output, e.stdout = outputJSON, newJSONPathWriter(e.stdout, t)
		return nil
	}
	return usageErr("-o/--output %s: expected %s", gpufleet.Quote(e.output), outputWant)
}

// docWriter hands each JSON document a command writes (-o json) to emit
// as soon as it is complete, so that streams (watch, follow) come out as
// they happen.
type docWriter struct {
	out    io.Writer
	format string                                       // "-o yaml", for errors
	emit   func(out io.Writer, doc []byte, n int) error // n: documents before this one
	buf    []byte
	docs   int
}

func (d *docWriter) Write(p []byte) (int, error) {
	d.buf = append(d.buf, p...)
	for {
		dec := json.NewDecoder(bytes.NewReader(d.buf))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return len(p), nil // wait for the rest
			}
			return 0, fmt.Errorf("%s: %w", d.format, err)
		}
		d.buf = d.buf[dec.InputOffset():]
		if err := d.emit(d.out, raw, d.docs); err != nil {
			return 0, err
		}
		d.docs++
	}
}

// Close reports a document left incomplete.
func (d *docWriter) Close() error {
	if len(bytes.TrimSpace(d.buf)) > 0 {
		return fmt.Errorf("%s: the output ended inside a JSON document", d.format)
	}
	return nil
}

// decodeDoc reads one JSON document with its numbers as written.
func decodeDoc(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// newNameWriter writes KIND/NAME for each object of k in each document,
// one a line, as kubectl's -o name does.
func newNameWriter(out io.Writer, k objectKind) *docWriter {
	return &docWriter{out: out, format: "-o name", emit: func(w io.Writer, doc []byte, _ int) error {
		v, err := decodeDoc(doc)
		if err != nil {
			return fmt.Errorf("-o name: %w", err)
		}
		items := []any{v}
		switch t := v.(type) {
		case []any:
			items = t
		case map[string]any:
			if list, ok := t[k.List].([]any); ok && k.List != "" {
				items = list
			}
		}
		var b strings.Builder
		for _, it := range items {
			obj, _ := it.(map[string]any)
			name := ""
			switch n := obj[k.Key].(type) {
			case string:
				name = n
			case json.Number:
				name = n.String()
			}
			if name == "" {
				return fmt.Errorf("-o name: a %s without %s", k.Kind, k.Key)
			}
			fmt.Fprintf(&b, "%s/%s\n", k.Kind, name)
		}
		_, err = io.WriteString(w, b.String())
		return err
	}}
}

// newJSONPathWriter writes each document through the template t.
func newJSONPathWriter(out io.Writer, t jsonpathTemplate) *docWriter {
	return &docWriter{out: out, format: "-o jsonpath", emit: func(w io.Writer, doc []byte, _ int) error {
		v, err := decodeDoc(doc)
		if err != nil {
			return fmt.Errorf("-o jsonpath: %w", err)
		}
		var b strings.Builder
		t.exec(&b, v, v)
		_, err = io.WriteString(w, b.String())
		return err
	}}
}

// jsonpathTemplate is a kubectl-style JSONPath template: text printed as it is,
// with {EXPR} parts evaluated, EXPR an RFC 9535 JSONPath query
// (github.com/theory/jsonpath) whose leading $ may be left out ({.id},
// {[*].id}, {..name}), a quoted string ({"\n"}, {'\t'} as written), or
// {range EXPR}...{end}, which evaluates its body once for each value EXPR
// selects, relative to that value ($ stays the document). Several values
// of one query print separated by blanks, as kubectl prints them; strings
// print bare, numbers and booleans as JSON, null as nothing, objects and
// lists as compact JSON.
type jsonpathTemplate []tnode

// tnode is one part of a template: text, a query, or a range over a
// query with its body.
type tnode struct {
	text    string
	path    *jsonpath.Path
	root    bool // the query starts at the document ($), not the current value
	body    jsonpathTemplate
	isRange bool
}

// parseTemplate reads a template; errors name the part refused.
func parseTemplate(s string) (jsonpathTemplate, error) {
	stack := []jsonpathTemplate{nil}
	for len(s) > 0 {
		open := strings.IndexByte(s, '{')
		if open < 0 {
			stack[len(stack)-1] = append(stack[len(stack)-1], tnode{text: s})
			break
		}
		if open > 0 {
			stack[len(stack)-1] = append(stack[len(stack)-1], tnode{text: s[:open]})
		}
		end := exprEnd(s[open+1:])
		if end < 0 {
			return nil, fmt.Errorf("%s: a '{' without its '}'", gpufleet.Quote(s[open:]))
		}
		expr := strings.TrimSpace(s[open+1 : open+1+end])
		s = s[open+1+end+1:]
		switch {
		case expr == "end":
			if len(stack) == 1 {
				return nil, errors.New("{end} without its {range}")
			}
			body := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			last := &stack[len(stack)-1][len(stack[len(stack)-1])-1]
			last.body = body
		case strings.HasPrefix(expr, "range ") || expr == "range":
			n, err := parseQuery(strings.TrimSpace(strings.TrimPrefix(expr, "range")))
			if err != nil {
				return nil, fmt.Errorf("{%s}: %w", expr, err)
			}
			n.isRange = true
			stack[len(stack)-1] = append(stack[len(stack)-1], n)
			stack = append(stack, nil)
		case strings.HasPrefix(expr, `"`):
			lit, err := strconv.Unquote(expr)
			if err != nil {
				return nil, fmt.Errorf("{%s}: not a quoted string", expr)
			}
			stack[len(stack)-1] = append(stack[len(stack)-1], tnode{text: lit})
		case strings.HasPrefix(expr, "'") && strings.HasSuffix(expr, "'") && len(expr) >= 2:
			stack[len(stack)-1] = append(stack[len(stack)-1], tnode{text: expr[1 : len(expr)-1]})
		default:
			n, err := parseQuery(expr)
			if err != nil {
				return nil, fmt.Errorf("{%s}: %w", expr, err)
			}
			stack[len(stack)-1] = append(stack[len(stack)-1], n)
		}
	}
	if len(stack) > 1 {
		return nil, errors.New("{range} without its {end}")
	}
	return stack[0], nil
}

// exprEnd is the index of the '}' that closes an expression, skipping
// quoted strings (a filter may compare with "a}b"); -1 when there is none.
func exprEnd(s string) int {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '"' || c == '\'':
			quote = c
		case c == '}':
			return i
		}
	}
	return -1
}

// parseQuery reads the JSONPath query of a template part: $..., or
// .FIELD, [...], ..FIELD and @... relative to the current value.
func parseQuery(expr string) (tnode, error) {
	q, root := expr, false
	switch {
	case strings.HasPrefix(expr, "$"):
		root = true
	case strings.HasPrefix(expr, "@"):
		q = "$" + expr[1:]
	case strings.HasPrefix(expr, ".") || strings.HasPrefix(expr, "["):
		q = "$" + expr
	default:
		return tnode{}, errors.New(`expected a query (.FIELD, [*], ..FIELD, $...), range QUERY, end or a quoted string such as "\n"`)
	}
	p, err := jsonpath.Parse(q)
	if err != nil {
		return tnode{}, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "jsonpath: "))
	}
	return tnode{path: p, root: root}, nil
}

// exec writes t for the current value cur of the document root.
func (t jsonpathTemplate) exec(b *strings.Builder, root, cur any) {
	for _, n := range t {
		if n.path == nil {
			b.WriteString(n.text)
			continue
		}
		from := cur
		if n.root {
			from = root
		}
		vals := n.path.Select(from)
		if n.isRange {
			for _, v := range vals {
				n.body.exec(b, root, v)
			}
			continue
		}
		for i, v := range vals {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(valueText(v))
		}
	}
}

// valueText is how a template prints one value.
func valueText(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case json.Number:
		return t.String()
	case bool:
		return strconv.FormatBool(t)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(raw)
}

// table prints aligned columns for people.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// textFlag is a flag whose value a vocabulary type parses (a duration, a
// size, a sharing request), so the flag means what the API means.
type textFlag struct {
	dst interface {
		UnmarshalText([]byte) error
	}
}

func (f textFlag) String() string {
	if s, ok := f.dst.(fmt.Stringer); ok && f.dst != nil {
		return s.String()
	}
	return ""
}

func (f textFlag) Set(v string) error { return f.dst.UnmarshalText([]byte(v)) }

func (f textFlag) Type() string {
	if _, ok := f.dst.(*gpufleet.Duration); ok {
		return "duration"
	}
	return "string"
}

// durationFlag registers a duration flag read with gpufleet.ParseDuration
// ("90s", "4h", "30d" or seconds), as the API and job files read them.
func durationFlag(fs *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(textFlag{(*gpufleet.Duration)(p)}, name, usage)
}

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// writeJSON prints v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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

func (f textFlag) Type() string { return "string" }

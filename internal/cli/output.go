package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/spf13/pflag"
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

package agent

import (
	"bytes"
	"regexp"

	"github.com/gpufleet/gpufleet"
)

// maxWorkLine bounds the part of an unfinished output line the work
// scanner keeps: a longer line is skipped, never matched in part.
const maxWorkLine = 64 << 10

// workScan is where an attempt's work counter stands: the last count its
// output showed, how far the output has been read and the line in
// progress. It is saved with the attempt, so that a restarted agent goes
// on where it was (and a rescan from an earlier offset finds the same
// last count).
type workScan struct {
	Count   *float64 `json:"count,omitempty"`
	Scanned int64    `json:"scanned"`
	Carry   []byte   `json:"carry,omitempty"`
	Skip    bool     `json:"skip,omitempty"` // inside a line longer than maxWorkLine
	// Done is set once the attempt ended and its whole output was read.
	Done bool `json:"done,omitempty"`

	re     *regexp.Regexp
	prefix []byte // what every match starts with, to skip lines fast
}

// feed reads output bytes that start at offset off: the part past what
// was read already, line by line, the last matching line setting the
// count. It reports whether the count changed.
func (w *workScan) feed(wc *gpufleet.WorkCounter, off int64, data []byte) bool {
	if wc == nil || off > w.Scanned || off+int64(len(data)) <= w.Scanned {
		return false
	}
	if !w.compile(wc) {
		return false
	}
	data = data[w.Scanned-off:]
	w.Scanned += int64(len(data))
	changed := false
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if !w.Skip {
				w.Carry = append(w.Carry, data...)
				if len(w.Carry) > maxWorkLine {
					w.Carry, w.Skip = nil, true
				}
			}
			break
		}
		line := data[:i]
		data = data[i+1:]
		if w.Skip {
			w.Skip = false
			continue
		}
		if len(w.Carry) > 0 {
			line = append(w.Carry, line...)
			w.Carry = nil
		}
		if len(line) > maxWorkLine {
			continue
		}
		if w.match(line) {
			changed = true
		}
	}
	return changed
}

// compile readies the expression; false when the counter does not
// compile (validated at the start: a state file from another version).
func (w *workScan) compile(wc *gpufleet.WorkCounter) bool {
	if w.re == nil {
		re, err := wc.Compile()
		if err != nil {
			return false
		}
		p, _ := re.LiteralPrefix()
		w.re, w.prefix = re, []byte(p)
	}
	return true
}

// end reads the last line when the output ends without a newline, and
// marks the scan done.
func (w *workScan) end(wc *gpufleet.WorkCounter) {
	w.Done = true
	if wc == nil || len(w.Carry) == 0 || !w.compile(wc) {
		return
	}
	line := w.Carry
	w.Carry = nil
	w.match(line)
}

func (w *workScan) match(line []byte) bool {
	if len(w.prefix) > 0 && !bytes.Contains(line, w.prefix) {
		return false
	}
	m := w.re.FindSubmatch(line)
	if m == nil {
		return false
	}
	v, err := gpufleet.ParseWorkCount(string(m[1]))
	if err != nil {
		return false
	}
	w.Count = &v
	return true
}

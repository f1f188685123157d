package gpufleet

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// WorkCounter is how a job reports the work it has done, for energy per
// unit of work: a regular expression over the lines the job prints
// (stdout and stderr) whose first group is the number of units the
// attempt has done so far. The last line that matches counts, so a job
// prints its running total ("tokens=120000") as often as it likes. Unit
// names what is counted (tokens, samples, images) and defaults to
// "units".
type WorkCounter struct {
	Metric string `json:"metric"`
	Unit   string `json:"unit,omitempty"`
}

// MaxWorkMetricLen bounds a work counter's expression.
const MaxWorkMetricLen = 256

// workUnitRe is a unit's spelling: a short word.
var workUnitRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// Validate checks the counter: an expression that compiles and has a
// group, and a unit that is a short lower-case word.
func (w *WorkCounter) Validate() error {
	_, err := w.Compile()
	return err
}

// Compile validates the counter and returns its expression.
func (w *WorkCounter) Compile() (*regexp.Regexp, error) {
	if err := CheckText("work.metric", w.Metric, MaxWorkMetricLen, false); err != nil {
		return nil, err
	}
	re, err := regexp.Compile(w.Metric)
	if err != nil {
		return nil, fmt.Errorf("%w: work.metric %s: %v", ErrInvalid, Quote(w.Metric), err)
	}
	if re.NumSubexp() < 1 {
		return nil, fmt.Errorf("%w: work.metric %s: expected a group around the count, as in 'tokens=([0-9]+)'", ErrInvalid, Quote(w.Metric))
	}
	if w.Unit != "" && !workUnitRe.MatchString(w.Unit) {
		return nil, fmt.Errorf("%w: work.unit %s: expected a lower-case word of at most 32 letters, digits or '_' (tokens, samples)", ErrInvalid, Quote(w.Unit))
	}
	return re, nil
}

// UnitName is the unit, "units" when none is given.
func (w *WorkCounter) UnitName() string {
	if w == nil || w.Unit == "" {
		return "units"
	}
	return w.Unit
}

// thousands drops the separators a count may have.
var thousands = strings.NewReplacer(",", "", "_", "")

// ParseWorkCount reads a count a work counter captured: a finite,
// non-negative decimal number, with ',' or '_' as thousands separators
// allowed ("1,200,000", "1.2e6").
func ParseWorkCount(s string) (float64, error) {
	s = thousands.Replace(strings.TrimSpace(s))
	decimal := !strings.ContainsFunc(s, func(r rune) bool { return !strings.ContainsRune("0123456789.eE+-", r) })
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !decimal || math.IsInf(v, 0) || math.IsNaN(v) || v < 0 {
		return 0, fmt.Errorf("%w: work count %s: expected a non-negative number", ErrInvalid, Quote(s))
	}
	return v, nil
}

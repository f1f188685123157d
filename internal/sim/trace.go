package sim

import (
	"bufio"
	"compress/gzip"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// Formats lists the trace formats Read understands.
var Formats = []string{"openb", "philly-gavel", "dlrm", "csv"}

// Job is one unit of work of a trace, in trace time (seconds from the
// trace's start).
type Job struct {
	ID   string
	Team string
	// Name is the job's workload, the word for "the same job run again"
	// where the trace has one (Philly's job_type): with history estimates
	// the scheduler plans a job on its namesakes' runs first.
	Name   string
	Class  gpufleet.Priority
	Submit float64 // seconds from the trace start
	GPUs   int     // GPUs, or time-slice shares with Sharing.Fraction < 1
	Nodes  int     // 0 = as few as possible
	// Sharing is the job's sharing request (exclusive or a time-slice share).
	Sharing gpufleet.Sharing
	// Interconnect nvlink asks for all of a node's GPUs in one NVLink domain.
	Interconnect gpufleet.Interconnect
	// GPUModels is the allowlist of catalog ids (or opaque trace model
	// names); empty means any model.
	GPUModels []string
	// Stack and Requires are the software the job needs: a named stack of
	// the cluster spec, and component constraints ("cuda": ">=12.4").
	Stack    string
	Requires map[string]string
	// Isolation and Overhead are the isolation the job requires and the
	// mechanism overhead it accepts (resources.isolation, .overhead).
	Isolation gpufleet.Isolation
	Overhead  *gpufleet.OverheadLimit
	// Runtime is container for a job that runs in an image.
	Runtime string
	// Duration is the run time in seconds on a model not in DurationOn.
	Duration float64
	// DurationOn maps a model to the job's run time on it, for traces that
	// measured the same job on several GPU generations.
	DurationOn map[string]float64
	// Estimate is the user's own estimate in seconds, when the trace has
	// one; 0 means the simulator derives it from the true duration.
	Estimate    float64
	Preemptible bool
	// Grace is the seconds a stop gives the job to checkpoint; 0 means the
	// policy's default. TimeLimit stops a run that lasts this long (0 =
	// none); Cancel, when positive, is when the user cancels the job, in
	// seconds after its submission.
	Grace, TimeLimit, Cancel float64
	// Retries is the failed runs the job may retry (request.retries);
	// Fails is how many of its runs fail, each FailAfter seconds after it
	// starts (0: halfway through the run), before one succeeds. The
	// scheduler's core decides what a failure does (scheduler.AfterRun):
	// a retry while Retries allow, else the job fails.
	Retries, Fails int
	FailAfter      float64
	// Invalid says why the request validation refused the row, for a row
	// kept under ReadOptions.KeepInvalid: the scheduler fails the job
	// (invalid_request) as the server fails a stored row that no longer
	// validates (scheduler.Job.Invalid).
	Invalid string
}

// Resources is the job's request as the scheduler reads it.
func (j *Job) Resources() gpufleet.Resources {
	return gpufleet.Resources{GPUs: j.GPUs, Nodes: j.Nodes, GPUModels: j.GPUModels, Sharing: j.Sharing, Interconnect: j.Interconnect,
		Stack: j.Stack, Requires: j.Requires, Isolation: j.Isolation, Overhead: j.Overhead, Runtime: j.Runtime}
}

// maxTraceSeconds bounds every time of a trace: ten years, beyond any real
// trace (Philly's longest job would run 3.1 years on one K80) and far from
// time.Duration's 292.
const maxTraceSeconds = 10 * 365 * 86400

// check validates a job read from a trace as the API validates a request:
// its resources with gpufleet.Resources.Validate (the same limits), its
// class, and its times within maxTraceSeconds. Readers call it, through
// Trace.add, on every row before keeping it.
func (j *Job) check() error {
	if err := j.checkRequest(); err != nil {
		return err
	}
	return j.checkTimes()
}

// checkRequest validates what the scheduler reads of the request.
func (j *Job) checkRequest() error {
	if err := j.Resources().Validate(); err != nil {
		return err
	}
	if !j.Class.Valid() {
		_, err := gpufleet.ParsePriority(string(j.Class))
		return gpufleet.InField("priority", err)
	}
	return nil
}

// checkTimes validates the times the replay itself runs on.
func (j *Job) checkTimes() error {
	times := []struct {
		name string
		v    float64
	}{{"submit", j.Submit}, {"duration", j.Duration}, {"estimate", j.Estimate}, {"grace", j.Grace}, {"time limit", j.TimeLimit}, {"cancel", j.Cancel}, {"fail after", j.FailAfter}}
	for _, m := range slices.Sorted(maps.Keys(j.DurationOn)) {
		times = append(times, struct {
			name string
			v    float64
		}{"duration on " + m, j.DurationOn[m]})
	}
	for _, t := range times {
		if !(t.v >= 0 && t.v <= maxTraceSeconds) {
			return fmt.Errorf("%s %g s: expected 0 to %d", t.name, t.v, maxTraceSeconds)
		}
	}
	if g := gpufleet.MaxGrace.Seconds(); j.Grace > g {
		return fmt.Errorf("grace %g s: expected 0 to %g (the API's limit)", j.Grace, g)
	}
	return nil
}

// add validates j (check) and keeps it; under opt.KeepInvalid a row
// whose request alone is refused is kept as an invalid job.
func (tr *Trace) add(j Job, opt ReadOptions) error {
	if err := j.checkTimes(); err != nil {
		return err
	}
	if err := j.checkRequest(); err != nil {
		if !opt.KeepInvalid {
			return err
		}
		j.Invalid = err.Error()
		tr.Invalid++
	}
	tr.Jobs = append(tr.Jobs, j)
	return nil
}

// DurationFor is the job's run time in seconds on model.
func (j *Job) DurationFor(model string) float64 {
	if d, ok := j.DurationOn[model]; ok {
		return d
	}
	return j.Duration
}

// RefDuration is the job's run time on its fastest known model: what a user
// who benchmarked the job would quote.
func (j *Job) RefDuration() float64 {
	d := j.Duration
	for _, m := range slices.Sorted(maps.Keys(j.DurationOn)) {
		if v := j.DurationOn[m]; d <= 0 || v < d {
			d = v
		}
	}
	return d
}

// GPUDemand is the job's GPU request in whole GPUs (a 0.25 share is 0.25).
func (j *Job) GPUDemand() float64 {
	f := 1.0
	if j.Sharing.Kind == gpufleet.TimeSlice && j.Sharing.Fraction > 0 {
		f = j.Sharing.Fraction
	}
	return float64(j.GPUs) * f
}

// Trace is a parsed workload.
type Trace struct {
	Name   string // file name, for reports
	Format string
	Jobs   []Job // in file order
	// Skipped counts rows that are no GPU job (CPU-only pods and instances).
	Skipped int
	// BadLines counts malformed rows skipped under ReadOptions.SkipBadLines.
	BadLines int
	// Invalid counts rows kept under ReadOptions.KeepInvalid (Job.Invalid).
	Invalid int
	// Models holds the opaque GPU models the trace names (undisclosed types
	// that match only by name), keyed by name.
	Models map[string]catalog.GPU
	// Notes says, in words, what the reader assumed.
	Notes []string
}

// ReadOptions tune the trace readers.
type ReadOptions struct {
	// Name is the file name used in error messages.
	Name string
	// SkipBadLines counts malformed rows instead of stopping at the first.
	SkipBadLines bool
	// KeepInvalid keeps rows whose times are sound but whose request the
	// shared validation refuses (more GPUs than the limits allow, an
	// unknown class) as invalid jobs (Job.Invalid) for the scheduler to
	// fail, instead of treating them as malformed.
	KeepInvalid bool
	// ScalingEfficiency is the parallel efficiency assumed where a trace
	// gives only single-GPU run times (philly-gavel): a job on n GPUs takes
	// single/(n*eff). 0 means DefaultScalingEfficiency.
	ScalingEfficiency float64
}

// DefaultScalingEfficiency is the parallel efficiency of multi-GPU jobs where
// the philly-gavel trace has no measured duration. Gavel's measured runs in
// the same trace average 0.96 (2 GPUs), 0.64 (4) and 0.89 (8); 0.8 is a
// round figure between them.
const DefaultScalingEfficiency = 0.8

// LineError is a malformed trace row.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string {
	return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
}

// Unwrap lets errors.Is(err, gpufleet.ErrInvalid) see through.
func (e *LineError) Unwrap() []error { return []error{gpufleet.ErrInvalid, e.Err} }

// Read parses a trace of the given format from r. Gzip input is detected by
// its magic bytes and decompressed transparently.
func Read(r io.Reader, format string, opt ReadOptions) (*Trace, error) {
	switch format {
	case "openb":
		return parseOpenb(r, opt)
	case "philly-gavel":
		return parsePhillyGavel(r, opt)
	case "dlrm":
		return parseDLRM(r, opt)
	case "csv":
		return parseCSV(r, opt)
	}
	return nil, fmt.Errorf("%w: trace format %s: expected one of %s", gpufleet.ErrInvalid, gpufleet.Quote(format), strings.Join(Formats, ", "))
}

// maybeGunzip returns r, decompressed when it starts with the gzip magic.
func maybeGunzip(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(2)
	if err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", gpufleet.ErrInvalid, err)
		}
		return zr, nil
	}
	return br, nil
}

// row is one CSV record with its header.
type row struct {
	rec  []string
	cols map[string]int
	line int
}

// get returns the trimmed cell of column name ("" when the column is absent).
func (r row) get(name string) string {
	i, ok := r.cols[name]
	if !ok || i >= len(r.rec) {
		return ""
	}
	return strings.TrimSpace(r.rec[i])
}

func (r row) has(name string) bool { _, ok := r.cols[name]; return ok }

// float parses a required non-negative finite number.
func (r row) float(name string) (float64, error) {
	s := r.get(name)
	if s == "" {
		return 0, fmt.Errorf("%s: empty", name)
	}
	return parseNonNeg(name, s)
}

// optFloat parses an optional non-negative number; ok is false when empty.
func (r row) optFloat(name string) (v float64, ok bool, err error) {
	s := r.get(name)
	if s == "" {
		return 0, false, nil
	}
	v, err = parseNonNeg(name, s)
	return v, err == nil, err
}

func parseNonNeg(name, s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%s: %s is not a non-negative number", name, gpufleet.Quote(s))
	}
	return v, nil
}

// int parses a required non-negative integer no larger than max.
func (r row) int(name string, max int) (int, error) {
	s := r.get(name)
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > max {
		return 0, fmt.Errorf("%s: %s is not an integer in [0, %d]", name, gpufleet.Quote(s), max)
	}
	return v, nil
}

// readCSV reads a headed CSV file and calls fn for every record. fn's error
// is a malformed row: it stops the read with the file name and line, or is
// counted when opt.SkipBadLines is set. required names the columns the
// header must have.
func readCSV(r io.Reader, opt ReadOptions, required []string, fn func(row) error) (bad int, err error) {
	name := opt.Name
	if name == "" {
		name = "trace"
	}
	rr, err := maybeGunzip(r)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	cr := csv.NewReader(rr)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return 0, &LineError{File: name, Line: 1, Err: errors.New("empty file: no header")}
		}
		return 0, &LineError{File: name, Line: 1, Err: csvCause(err)}
	}
	cols := make(map[string]int, len(header))
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, dup := cols[h]; dup {
			return 0, &LineError{File: name, Line: 1, Err: fmt.Errorf("duplicate column %s", gpufleet.Quote(h))}
		}
		cols[h] = i
	}
	for _, c := range required {
		if _, ok := cols[c]; !ok {
			return 0, &LineError{File: name, Line: 1, Err: fmt.Errorf("missing column %q (header has %s)", c, gpufleet.Quote(strings.Join(header, ",")))}
		}
	}
	width := len(header)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return bad, nil
		}
		if err != nil {
			line := 0
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			if !opt.SkipBadLines || !errors.As(err, &pe) {
				return bad, &LineError{File: name, Line: line, Err: csvCause(err)}
			}
			bad++
			continue
		}
		line, _ := cr.FieldPos(0)
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue // blank line
		}
		if len(rec) != width {
			err = fmt.Errorf("%d fields, header has %d", len(rec), width)
		} else {
			err = fn(row{rec: rec, cols: cols, line: line})
		}
		if err != nil {
			if !opt.SkipBadLines {
				return bad, &LineError{File: name, Line: line, Err: err}
			}
			bad++
		}
	}
}

// csvCause strips encoding/csv's own position prefix.
func csvCause(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// checkIDs reports a duplicate job id.
func checkUnique(seen map[string]bool, id string) error {
	if id == "" {
		return errors.New("empty job id")
	}
	if seen[id] {
		return fmt.Errorf("duplicate job id %s", gpufleet.Quote(id))
	}
	seen[id] = true
	return nil
}

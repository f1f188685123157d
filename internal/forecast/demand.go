package forecast

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Bounds on a demand file.
const (
	maxDays   = 20 * 366 // twenty years of days
	maxRows   = 1 << 20
	maxDemand = 1e12 // GPU-hours in a day: far beyond any fleet
)

// demandHeader are the columns a demand file starts with (gpufleet sim
// --demand-out writes them; more may follow).
var demandHeader = []string{"day", "gpu_model", "gpu_hours_asked"}

// ReadDemandCSV reads a demand file (day, gpu_model, gpu_hours_asked,
// ...) into a daily series of GPU-hours asked for: one GPU model's, or
// every model's together when model is empty. Days missing between the
// first and the last count zero. A malformed row is an error naming its
// line and column.
func ReadDemandCSV(r io.Reader, model string) (Series, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return Series{}, fmt.Errorf("%w: demand file: no header: %v", gpufleet.ErrInvalid, err)
	}
	if len(head) < len(demandHeader) || !slices.Equal(head[:len(demandHeader)], demandHeader) {
		return Series{}, fmt.Errorf("%w: demand file: header %s: expected it to start with %s", gpufleet.ErrInvalid,
			gpufleet.Quote(strings.Join(head, ",")), strings.Join(demandHeader, ","))
	}
	byDay := map[time.Time]float64{}
	var first, last time.Time
	for row := 2; ; row++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Series{}, fmt.Errorf("%w: demand file line %d: %v", gpufleet.ErrInvalid, row, err)
		}
		if row > maxRows {
			return Series{}, fmt.Errorf("%w: demand file: more than %d rows", gpufleet.ErrInvalid, maxRows)
		}
		if len(rec) < len(demandHeader) {
			return Series{}, fmt.Errorf("%w: demand file line %d: %d columns, expected at least %d", gpufleet.ErrInvalid, row, len(rec), len(demandHeader))
		}
		day, err := time.Parse(time.DateOnly, rec[0])
		if err != nil {
			return Series{}, fmt.Errorf("%w: demand file line %d: day %s: expected YYYY-MM-DD", gpufleet.ErrInvalid, row, gpufleet.Quote(rec[0]))
		}
		v, err := strconv.ParseFloat(rec[2], 64)
		if err != nil || math.IsNaN(v) || v < 0 || v > maxDemand {
			return Series{}, fmt.Errorf("%w: demand file line %d: gpu_hours_asked %s: expected a number from 0 to %g", gpufleet.ErrInvalid, row, gpufleet.Quote(rec[2]), maxDemand)
		}
		if model != "" && rec[1] != model {
			continue
		}
		if first.IsZero() || day.Before(first) {
			first = day
		}
		if day.After(last) {
			last = day
		}
		if last.Sub(first) > maxDays*24*time.Hour {
			return Series{}, fmt.Errorf("%w: demand file: more than %d days", gpufleet.ErrInvalid, maxDays)
		}
		byDay[day] += v
	}
	if len(byDay) == 0 {
		if model != "" {
			return Series{}, fmt.Errorf("%w: demand file: no rows for gpu model %s", gpufleet.ErrNotFound, gpufleet.Quote(model))
		}
		return Series{}, fmt.Errorf("%w: demand file: no rows", gpufleet.ErrInvalid)
	}
	s := Series{Start: first}
	for d := first; !d.After(last); d = d.AddDate(0, 0, 1) {
		s.Values = append(s.Values, byDay[d])
	}
	return s, nil
}

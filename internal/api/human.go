package api

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// ParseDuration reads a duration in the human forms users write: a Go
// duration ("90s", "4h", "1h30m"), days ("2d"), or plain seconds ("3600",
// "1.5"). Negative durations are rejected. The server and the CLI share it
// so a job file means the same thing on both sides.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("%w: empty duration", gpufleet.ErrInvalid)
	}
	if v, err := strconv.ParseFloat(t, 64); err == nil {
		return secondsDuration(s, v)
	}
	if d, ok := strings.CutSuffix(t, "d"); ok {
		if v, err := strconv.ParseFloat(d, 64); err == nil {
			return secondsDuration(s, v*86400)
		}
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%w: duration %q: expected a form like 90s, 4h, 2d or seconds", gpufleet.ErrInvalid, s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%w: duration %q: must not be negative", gpufleet.ErrInvalid, s)
	}
	return d, nil
}

func secondsDuration(s string, v float64) (time.Duration, error) {
	if math.IsNaN(v) || v < 0 || v > float64(math.MaxInt64)/1e9 {
		return 0, fmt.Errorf("%w: duration %q: expected non-negative seconds", gpufleet.ErrInvalid, s)
	}
	return time.Duration(v * 1e9), nil
}

// byteUnits maps size suffixes to multipliers: binary (KiB, Ki) and decimal
// (KB, K).
var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"PiB", 1 << 50},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"PB", 1e15},
	{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15},
	{"B", 1},
}

// ParseBytes reads a size in bytes: "80GiB" (binary), "141GB" (decimal),
// "40Gi", "512MB", or a plain integer of bytes. Suffixes are matched case
// insensitively.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range byteUnits {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || v < 0 || v*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("%w: size %q: expected a form like 80GiB, 141GB or bytes", gpufleet.ErrInvalid, s)
	}
	return int64(math.Round(v * mult)), nil
}

// FormatBytes prints a size in binary units, as nvidia-smi does ("80GiB").
func FormatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult {
			v := float64(n) / float64(u.mult)
			if n%u.mult == 0 {
				return fmt.Sprintf("%d%s", n/u.mult, u.suffix)
			}
			return strconv.FormatFloat(v, 'f', 1, 64) + u.suffix
		}
	}
	return fmt.Sprintf("%dB", n)
}

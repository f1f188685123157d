package gpufleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// durationForm is what time.ParseDuration reads, whatever the size.
var durationForm = regexp.MustCompile(`^[-+]?([0-9]*\.?[0-9]+(ns|us|µs|μs|ms|s|m|h))+$`)

// ParseDuration reads a duration in the forms people write: a Go duration
// ("90s", "4h", "1h30m"), days ("2d", "1.5d"), years of 365 days ("3y")
// or plain seconds ("3600", "1.5"). Negative durations and durations beyond time.Duration's range
// are rejected. The CLI, the API, job files and the simulator all read
// durations with it.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	bad := func(why string) (time.Duration, error) {
		return 0, badValue("duration", s, why)
	}
	if t == "" {
		return bad("expected a form like 90s, 4h, 2d or seconds")
	}
	secs, err := strconv.ParseFloat(t, 64)
	for unit, n := range map[string]float64{"d": 86400, "y": 365 * 86400} {
		if d, ok := strings.CutSuffix(t, unit); ok && err != nil {
			if secs, err = strconv.ParseFloat(d, 64); err == nil {
				secs *= n
			}
		}
	}
	if err == nil {
		switch {
		case math.IsNaN(secs) || secs < 0:
			return bad("expected a non-negative duration")
		case secs >= math.MaxInt64/1e9:
			return bad("too long")
		}
		return time.Duration(secs * 1e9), nil
	}
	d, err := time.ParseDuration(t)
	switch {
	case err != nil && durationForm.MatchString(t):
		return bad("too long") // well formed, beyond time.Duration's 292 years
	case err != nil:
		return bad("expected a form like 90s, 4h, 2d or seconds")
	case d < 0:
		return bad("expected a non-negative duration")
	}
	return d, nil
}

// FormatDuration writes d for people, in its two largest units, rounded
// to the millisecond below a second and to the second from one second
// up: 250ms, 45s, 1m30s, 2h5m, 3d4h (a zero
// second unit is left out: 4h, 2d). It is the one formatter of durations
// for tables, pages, reasons and explanations; ParseDuration reads what it
// writes below a day. Negative durations take a minus sign.
func FormatDuration(d time.Duration) string {
	if d < 0 {
		return "-" + FormatDuration(-d)
	}
	if d < time.Second {
		if d >= time.Millisecond {
			d = d.Round(time.Millisecond)
		}
		return d.String()
	}
	d = d.Round(time.Second)
	units := [...]struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}}
	for i, u := range units {
		if d < u.d {
			continue
		}
		out := strconv.FormatInt(int64(d/u.d), 10) + u.name
		if i+1 < len(units) {
			if rest := (d % u.d) / units[i+1].d; rest > 0 {
				out += strconv.FormatInt(int64(rest), 10) + units[i+1].name
			}
		}
		return out
	}
	return "0s"
}

// Duration is a span of time in a request. JSON and job files carry it as
// a string in ParseDuration's forms or as a number of seconds; it is
// written back as a Go duration ("4h0m0s"). Zero means not given.
type Duration time.Duration

// Std is d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Seconds is d in seconds.
func (d Duration) Seconds() float64 { return time.Duration(d).Seconds() }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as a Go duration.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses d with ParseDuration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON takes a string (ParseDuration's forms) or a number of
// seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("%w: duration: %v", ErrInvalid, err)
		}
		return d.UnmarshalText([]byte(s))
	}
	return d.UnmarshalText(b)
}

// Bytes is a size in bytes. JSON carries it as an integer; requests may
// also give a string in ParseBytes's forms ("80GiB", "141GB").
type Bytes int64

// byteUnits maps size suffixes to multipliers: binary (KiB, Ki) and decimal
// (KB, K), longest first.
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

// ParseBytes reads a size: "80GiB" (binary), "141GB" (decimal), "40Gi",
// "512MB", or a plain number of bytes. Suffixes match case-insensitively.
func ParseBytes(s string) (Bytes, error) {
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
		return 0, badValue("size", s, "expected a form like 80GiB, 141GB or bytes")
	}
	return Bytes(math.Round(v * mult)), nil
}

// String writes a size in binary units, as nvidia-smi does ("80GiB").
func (b Bytes) String() string {
	n := int64(b)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult {
			if n%u.mult == 0 {
				return fmt.Sprintf("%d%s", n/u.mult, u.suffix)
			}
			return strconv.FormatFloat(float64(n)/float64(u.mult), 'f', 1, 64) + u.suffix
		}
	}
	return fmt.Sprintf("%dB", n)
}

// UnmarshalJSON takes an integer number of bytes or a ParseBytes string.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	if bytes.Equal(data, []byte("null")) {
		return nil
	}
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("%w: size: %v", ErrInvalid, err)
		}
		v, err := ParseBytes(s)
		if err != nil {
			return err
		}
		*b = v
		return nil
	}
	v, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil {
		return badValue("size", string(data), "expected an integer number of bytes or a form like 80GiB")
	}
	*b = Bytes(v)
	return nil
}

// ParseCount reads a large count, such as a number of training tokens:
// "1T", "300B" (billions, as model cards write them; "G" is the same),
// "5M", "20K", "2e12" or a plain integer, from 1 to 1e18.
func ParseCount(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"K", 1e3}, {"M", 1e6}, {"B", 1e9}, {"G", 1e9}, {"T", 1e12}} {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = v, u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v*mult >= 1 && v*mult <= 1e18) {
		return 0, badValue("count", s, "expected a count from 1 to 1e18, such as 1T, 300B or 2e12")
	}
	return int64(v * mult), nil
}

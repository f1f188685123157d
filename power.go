package gpufleet

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// Watts is a power: a rack's budget, a GPU's draw. JSON carries it as a
// number of watts (in fields ending _watts); flags and requests may also
// give a string in ParsePower's forms ("17.3kW", "700W").
type Watts float64

// MaxWatts bounds a power a user may give: a gigawatt, far beyond any
// facility, and far from overflow in any sum of them.
const MaxWatts Watts = 1e9

// ParsePower reads a power: "700W", "17.3kW", "1.2MW", or a plain number of
// watts. Units match case-insensitively; the number must be finite, not
// negative and at most MaxWatts.
func ParsePower(s string) (Watts, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"MW", 1e6}, {"kW", 1e3}, {"W", 1}} {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || Watts(v*mult) > MaxWatts {
		return 0, badValue("power", s, "expected a form like 17.3kW or 700W, at most 1GW")
	}
	return Watts(v * mult), nil
}

// String writes a power in kW from a kilowatt up ("17.3kW"), else in W,
// exactly: ParsePower reads it back to the same value.
func (w Watts) String() string {
	if w >= 1000 {
		return strconv.FormatFloat(float64(w)/1000, 'f', -1, 64) + "kW"
	}
	return strconv.FormatFloat(float64(w), 'f', -1, 64) + "W"
}

// Human writes a power for people: in kW to 10 W from a kilowatt up
// ("10.32kW"), else in whole watts ("700W").
func (w Watts) Human() string {
	if w >= 999.5 {
		return strconv.FormatFloat(math.Round(float64(w)/10)/100, 'f', -1, 64) + "kW"
	}
	return strconv.FormatFloat(math.Round(float64(w)), 'f', -1, 64) + "W"
}

// UnmarshalJSON takes a number of watts or a ParsePower string.
func (w *Watts) UnmarshalJSON(data []byte) error {
	if bytes.Equal(data, []byte("null")) {
		return nil
	}
	s := string(data)
	if len(data) > 0 && data[0] == '"' {
		if err := json.Unmarshal(data, &s); err != nil {
			return badValue("power", string(data), "expected a number of watts or a form like 17.3kW")
		}
	}
	v, err := ParsePower(s)
	if err != nil {
		return err
	}
	*w = v
	return nil
}

// UnmarshalText parses a ParsePower string.
func (w *Watts) UnmarshalText(b []byte) error {
	v, err := ParsePower(string(b))
	if err != nil {
		return err
	}
	*w = v
	return nil
}

package gpufleet

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// QuoteLimit is how much of an input an error message quotes: a longer
// value is cut, and the message says how long it was.
const QuoteLimit = 200

// Quote writes s for an error message: Go-quoted, so control characters
// and invalid bytes show as escapes, and cut so that the quote holds at
// most QuoteLimit bytes: a huge or binary input never makes a huge error.
func Quote(s string) string {
	q := strconv.Quote(s)
	if len(q) <= QuoteLimit+2 {
		return q
	}
	cut := min(len(s), QuoteLimit)
	for {
		for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if q = strconv.Quote(s[:cut]); len(q) <= QuoteLimit+2 || cut == 0 {
			break
		}
		cut = cut * 3 / 4
	}
	return fmt.Sprintf("%s... (%d bytes)", q, len(s))
}

// CheckText reports why s may not stand in field: longer than max bytes,
// not UTF-8, or holding a control character. Multi-line text (commands,
// environment values: shell scripts) may hold tabs and line breaks; no
// text may hold NUL, which no process argument can carry.
func CheckText(field, s string, max int, multiline bool) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s: %d bytes, at most %d", ErrInvalid, field, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %s: not UTF-8", ErrInvalid, field, Quote(s))
	}
	for i, r := range s {
		if !unicode.IsControl(r) || (multiline && (r == '\t' || r == '\n' || r == '\r')) {
			continue
		}
		what := "a control character"
		if r == 0 {
			what = "NUL"
		}
		return fmt.Errorf("%w: %s %s: %s at byte %d", ErrInvalid, field, Quote(s), what, i)
	}
	return nil
}

// ValueError is a value a parser refused: the field it stood in (or, until
// a caller names the field, the kind of value), the value quoted, and what
// was expected. It unwraps to ErrInvalid.
type ValueError struct {
	Field string // "resources.sharing", "--sharing", or the kind: "sharing"
	Value string // as Quote writes it
	Want  string // "expected exclusive, mig:PROFILE or timeslice:F"
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("%s: %s %s: %s", ErrInvalid, e.Field, e.Value, e.Want)
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *ValueError) Unwrap() error { return ErrInvalid }

// badValue is a ValueError for the value s of the given kind.
func badValue(kind, s, want string) error {
	return &ValueError{Field: kind, Value: Quote(s), Want: want}
}

// InField names the field a refused value stood in: a ValueError is
// copied with Field set; any other error is returned as it is.
func InField(field string, err error) error {
	var ve *ValueError
	if errors.As(err, &ve) {
		c := *ve
		c.Field = field
		return &c
	}
	return err
}

package gpufleet

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Labels on jobs are what Kubernetes has on its objects: a map of short
// keys to short values that users choose (team, app, sweep, run), set at
// submission and never changed, that label selectors pick jobs by (a list,
// a cancel). The rules are kubectl's, so that a label that works there
// works here: docs/JOBS.md#labels.

// Limits on labels and selectors.
const (
	// MaxLabels bounds a job's labels (Kubernetes sets no count; 64 is
	// more than any job file we have seen uses, and keeps a row small).
	MaxLabels = 64
	// MaxLabelNameLen bounds a label key's name and a label value, as in
	// Kubernetes; MaxLabelPrefixLen its prefix (a DNS subdomain).
	MaxLabelNameLen   = 63
	MaxLabelPrefixLen = 253
	// MaxSelectorLen bounds a label selector's text, and
	// MaxSelectorRequirements its requirements; an in or notin
	// requirement holds at most MaxListLen values.
	MaxSelectorLen          = 4096
	MaxSelectorRequirements = 64
)

var (
	labelNameRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	dnsLabelRe  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
)

const (
	labelKeyWant   = "expected a label key: NAME or PREFIX/NAME, NAME at most 63 of A-Z, a-z, 0-9, '.', '_' and '-' starting and ending with a letter or digit, PREFIX a lower-case DNS subdomain of at most 253"
	labelValueWant = "expected a label value: empty, or at most 63 of A-Z, a-z, 0-9, '.', '_' and '-' starting and ending with a letter or digit"
)

// ValidLabelKey reports whether k is a label key: NAME or PREFIX/NAME,
// NAME at most MaxLabelNameLen letters, digits, '.', '_' and '-' starting
// and ending with a letter or digit, PREFIX a DNS subdomain of at most
// MaxLabelPrefixLen.
func ValidLabelKey(k string) bool {
	prefix, name, ok := strings.Cut(k, "/")
	if !ok {
		return labelNameRe.MatchString(k)
	}
	return validDNSSubdomain(prefix) && labelNameRe.MatchString(name)
}

// validDNSSubdomain reports whether s is a DNS subdomain as Kubernetes
// takes it (RFC 1123): lower-case DNS labels joined by dots, at most
// MaxLabelPrefixLen in all.
func validDNSSubdomain(s string) bool {
	if s == "" || len(s) > MaxLabelPrefixLen {
		return false
	}
	for part := range strings.SplitSeq(s, ".") {
		if !dnsLabelRe.MatchString(part) {
			return false
		}
	}
	return true
}

// ValidLabelValue reports whether v is a label value: empty, or at most
// MaxLabelNameLen letters, digits, '.', '_' and '-' starting and ending
// with a letter or digit.
func ValidLabelValue(v string) bool { return v == "" || labelNameRe.MatchString(v) }

// ValidateLabels checks a job's labels: at most MaxLabels, each key and
// value as ValidLabelKey and ValidLabelValue want. A refused key is a
// ValueError of field; a refused value one of field.KEY.
func ValidateLabels(field string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%w: %s: %d labels, at most %d", ErrInvalid, field, len(labels), MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !ValidLabelKey(k) {
			return &ValueError{Field: field, Value: Quote(k), Want: labelKeyWant}
		}
		if v := labels[k]; !ValidLabelValue(v) {
			return &ValueError{Field: field + "." + k, Value: Quote(v), Want: labelValueWant}
		}
	}
	return nil
}

// ParseLabels reads labels as `submit -l` takes them: KEY=VALUE pairs
// separated by commas ("team=nlp,run=7"); a key given twice is refused.
// It does not validate keys and values: ValidateLabels does, once, on the
// request.
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" {
			return nil, badValue("label", part, "expected KEY=VALUE, several separated by commas")
		}
		if _, dup := out[k]; dup {
			return nil, badValue("label", part, fmt.Sprintf("key %s given twice", Quote(k)))
		}
		out[k] = v
	}
	return out, nil
}

// SelectorOp is the operator of one requirement of a label selector.
type SelectorOp string

// Selector operators, as Kubernetes names them.
const (
	OpEquals    SelectorOp = "="     // KEY=VALUE or KEY==VALUE: has the label with that value
	OpNotEquals SelectorOp = "!="    // KEY!=VALUE: lacks the label or has another value
	OpIn        SelectorOp = "in"    // KEY in (V1,V2): has the label with one of the values
	OpNotIn     SelectorOp = "notin" // KEY notin (V1,V2): lacks the label or has none of the values
	OpExists    SelectorOp = "exists"
	OpNotExists SelectorOp = "!"
)

// LabelRequirement is one requirement of a selector: a key, an operator,
// and the values (one for = and !=, one or more, sorted and distinct, for
// in and notin, none for exists and !).
type LabelRequirement struct {
	Key    string
	Op     SelectorOp
	Values []string
}

// Matches reports whether labels meet the requirement.
func (r LabelRequirement) Matches(labels map[string]string) bool {
	v, has := labels[r.Key]
	switch r.Op {
	case OpEquals:
		return has && v == r.Values[0]
	case OpNotEquals:
		return !has || v != r.Values[0]
	case OpIn:
		return has && slices.Contains(r.Values, v)
	case OpNotIn:
		return !has || !slices.Contains(r.Values, v)
	case OpExists:
		return has
	case OpNotExists:
		return !has
	}
	return false
}

func (r LabelRequirement) String() string {
	switch r.Op {
	case OpEquals, OpNotEquals:
		return r.Key + string(r.Op) + r.Values[0]
	case OpIn, OpNotIn:
		return r.Key + " " + string(r.Op) + " (" + strings.Join(r.Values, ",") + ")"
	case OpNotExists:
		return "!" + r.Key
	}
	return r.Key
}

// LabelSelector picks jobs by their labels, as a Kubernetes label selector
// does: requirements joined by commas, all of which must hold. The empty
// selector holds for every job; a cancel refuses it.
type LabelSelector []LabelRequirement

// selectorWant is what ParseLabelSelector expects of a requirement.
const selectorWant = "expected KEY, !KEY, KEY=VALUE, KEY==VALUE, KEY!=VALUE, KEY in (V,...) or KEY notin (V,...), several separated by commas"

// ParseLabelSelector reads a selector: requirements separated by commas,
// each KEY (has the label), !KEY (lacks it), KEY=VALUE or KEY==VALUE,
// KEY!=VALUE (lacks it or has another value), KEY in (V1,V2) or KEY
// notin (V1,V2); blanks around words are ignored. Keys and values follow
// the label rules. Blank text is the empty selector. Errors are
// ValueErrors of field "selector" quoting the requirement refused.
func ParseLabelSelector(s string) (LabelSelector, error) {
	if err := CheckText("selector", s, MaxSelectorLen, false); err != nil {
		return nil, err
	}
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts, err := splitRequirements(s)
	if err != nil {
		return nil, err
	}
	if len(parts) > MaxSelectorRequirements {
		return nil, fmt.Errorf("%w: selector: %d requirements, at most %d", ErrInvalid, len(parts), MaxSelectorRequirements)
	}
	out := make(LabelSelector, 0, len(parts))
	for _, p := range parts {
		r, err := parseRequirement(p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// splitRequirements cuts a selector at the commas outside parentheses.
func splitRequirements(s string) ([]string, error) {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			if depth++; depth > 1 {
				return nil, badValue("selector", s, "parentheses inside parentheses: "+selectorWant)
			}
		case ')':
			if depth--; depth < 0 {
				return nil, badValue("selector", s, "a ')' without its '(': "+selectorWant)
			}
		case ',':
			if depth == 0 {
				parts, start = append(parts, s[start:i]), i+1
			}
		}
	}
	if depth != 0 {
		return nil, badValue("selector", s, "a '(' without its ')': "+selectorWant)
	}
	return append(parts, s[start:]), nil
}

// keyChar reports whether c may stand in a label key.
func keyChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/'
}

// parseRequirement reads one requirement of a selector.
func parseRequirement(text string) (LabelRequirement, error) {
	p := strings.TrimSpace(text)
	bad := func(want string) error { return badValue("selector", p, want) }
	if p == "" {
		return LabelRequirement{}, bad("an empty requirement: " + selectorWant)
	}
	if rest, ok := strings.CutPrefix(p, "!"); ok {
		k := strings.TrimSpace(rest)
		if !ValidLabelKey(k) {
			return LabelRequirement{}, bad(labelKeyWant)
		}
		return LabelRequirement{Key: k, Op: OpNotExists}, nil
	}
	end := strings.IndexFunc(p, func(c rune) bool { return !keyChar(c) })
	if end < 0 {
		end = len(p)
	}
	k, rest := p[:end], strings.TrimSpace(p[end:])
	if !ValidLabelKey(k) {
		return LabelRequirement{}, bad(labelKeyWant)
	}
	r := LabelRequirement{Key: k}
	switch {
	case rest == "":
		r.Op = OpExists
		return r, nil
	case strings.HasPrefix(rest, "=="):
		r.Op, rest = OpEquals, rest[2:]
	case strings.HasPrefix(rest, "!="):
		r.Op, rest = OpNotEquals, rest[2:]
	case strings.HasPrefix(rest, "="):
		r.Op, rest = OpEquals, rest[1:]
	default:
		word, list, ok := strings.Cut(rest, "(")
		switch strings.TrimSpace(word) {
		case string(OpIn):
			r.Op = OpIn
		case string(OpNotIn):
			r.Op = OpNotIn
		default:
			return LabelRequirement{}, bad(selectorWant)
		}
		inner, closed := strings.CutSuffix(strings.TrimSpace(list), ")")
		if !ok || !closed {
			return LabelRequirement{}, bad(selectorWant)
		}
		if strings.TrimSpace(inner) == "" {
			return LabelRequirement{}, bad("in and notin need at least one value: " + selectorWant)
		}
		seen := map[string]bool{}
		for v := range strings.SplitSeq(inner, ",") {
			v = strings.TrimSpace(v)
			if v == "" || !ValidLabelValue(v) {
				return LabelRequirement{}, bad(fmt.Sprintf("value %s: %s (a list holds no empty value)", Quote(v), labelValueWant))
			}
			if !seen[v] {
				seen[v] = true
				r.Values = append(r.Values, v)
			}
		}
		if len(r.Values) > MaxListLen {
			return LabelRequirement{}, bad(fmt.Sprintf("%d values, at most %d", len(r.Values), MaxListLen))
		}
		slices.Sort(r.Values)
		return r, nil
	}
	v := strings.TrimSpace(rest)
	if !ValidLabelValue(v) {
		return LabelRequirement{}, bad(fmt.Sprintf("value %s: %s", Quote(v), labelValueWant))
	}
	r.Values = []string{v}
	return r, nil
}

// Matches reports whether labels meet every requirement of s.
func (s LabelSelector) Matches(labels map[string]string) bool {
	for _, r := range s {
		if !r.Matches(labels) {
			return false
		}
	}
	return true
}

// Empty reports whether s has no requirement (it selects everything).
func (s LabelSelector) Empty() bool { return len(s) == 0 }

// String writes s as ParseLabelSelector reads it, in a canonical form:
// "app=web,tier in (back,front),!canary".
func (s LabelSelector) String() string {
	parts := make([]string, len(s))
	for i, r := range s {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// MarshalText writes String.
func (s LabelSelector) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a selector; blank is the empty selector.
func (s *LabelSelector) UnmarshalText(b []byte) error {
	v, err := ParseLabelSelector(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

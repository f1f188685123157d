package gpufleet_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
)

func TestValidateLabels(t *testing.T) {
	many := map[string]string{}
	for i := range gpufleet.MaxLabels + 1 {
		many["k"+strings.Repeat("x", i)] = "v"
	}
	tests := map[string]struct {
		labels  map[string]string
		wantErr string
	}{
		"none":                       {labels: nil},
		"plain":                      {labels: map[string]string{"team": "nlp", "run": "7"}},
		"empty value":                {labels: map[string]string{"canary": ""}},
		"upper case, dots, dashes":   {labels: map[string]string{"App.Name_x-1": "V1.2_3-b"}},
		"prefixed key":               {labels: map[string]string{"example.com/owner": "ana"}},
		"63-byte name and value":     {labels: map[string]string{strings.Repeat("a", 63): strings.Repeat("b", 63)}},
		"64-byte name":               {labels: map[string]string{strings.Repeat("a", 64): "x"}, wantErr: `labels "aaaa`},
		"64-byte value":              {labels: map[string]string{"k": strings.Repeat("b", 64)}, wantErr: `labels.k "bbbb`},
		"empty key":                  {labels: map[string]string{"": "x"}, wantErr: `labels "": expected a label key`},
		"blank in a value":           {labels: map[string]string{"team": "a b"}, wantErr: `labels.team "a b": expected a label value`},
		"value starts with a dash":   {labels: map[string]string{"team": "-a"}, wantErr: `labels.team "-a"`},
		"key ends with a dot":        {labels: map[string]string{"team.": "a"}, wantErr: `labels "team."`},
		"upper-case prefix":          {labels: map[string]string{"Example.com/owner": "a"}, wantErr: `labels "Example.com/owner"`},
		"empty prefix":               {labels: map[string]string{"/owner": "a"}, wantErr: `labels "/owner"`},
		"two slashes":                {labels: map[string]string{"a/b/c": "a"}, wantErr: `labels "a/b/c"`},
		"control character in a key": {labels: map[string]string{"a\x00": "a"}, wantErr: `labels "a\x00"`},
		"not UTF-8 value":            {labels: map[string]string{"a": "\xff"}, wantErr: `labels.a "\xff"`},
		"too many":                   {labels: many, wantErr: "labels: 65 labels, at most 64"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := gpufleet.ValidateLabels("labels", tc.labels)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateLabels: %v", err)
				}
				return
			}
			if !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ValidateLabels = %v, want ErrInvalid containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestJobRequestValidatesLabels: the request's validation is where the
// labels are checked, so the API, job files and flags refuse the same.
func TestJobRequestValidatesLabels(t *testing.T) {
	r := gpufleet.JobRequest{Resources: gpufleet.Resources{GPUs: 1}, Command: []string{"true"}, Labels: map[string]string{"team": "nlp"}}
	if err := r.Validate(); err != nil {
		t.Fatalf("good labels: %v", err)
	}
	r.Labels["team"] = "n l p"
	if err := r.Validate(); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), `labels.team "n l p"`) {
		t.Fatalf("bad label value: %v", err)
	}
	j := gpufleet.Job{Priority: gpufleet.Batch, Resources: gpufleet.Resources{GPUs: 1}, Command: []string{"true"}, Labels: map[string]string{"bad key": ""}}
	if err := j.Validate(); !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), `labels "bad key"`) {
		t.Fatalf("stored job with a bad label key: %v", err)
	}
}

func TestParseLabels(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    map[string]string
		wantErr string
	}{
		"one":              {in: "team=nlp", want: map[string]string{"team": "nlp"}},
		"several, blanks":  {in: "team=nlp, run=7", want: map[string]string{"team": "nlp", "run": "7"}},
		"empty value":      {in: "canary=", want: map[string]string{"canary": ""}},
		"no equals":        {in: "team", wantErr: `label "team": expected KEY=VALUE`},
		"no key":           {in: "=x", wantErr: `label "=x": expected KEY=VALUE`},
		"trailing comma":   {in: "a=1,", wantErr: `label "": expected KEY=VALUE`},
		"key given twice":  {in: "a=1,a=2", wantErr: `key "a" given twice`},
		"empty":            {in: "", wantErr: "expected KEY=VALUE"},
		"value with equal": {in: "a=b=c", want: map[string]string{"a": "b=c"}}, // ValidateLabels refuses it
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := gpufleet.ParseLabels(tc.in)
			if tc.wantErr != "" {
				if !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseLabels(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseLabelSelector(t *testing.T) {
	type req = gpufleet.LabelRequirement
	tests := map[string]struct {
		in      string
		want    gpufleet.LabelSelector
		canon   string // String's form
		wantErr string
	}{
		"empty selects everything": {in: "  ", want: nil, canon: ""},
		"equals":                   {in: "team=nlp", want: gpufleet.LabelSelector{{Key: "team", Op: gpufleet.OpEquals, Values: []string{"nlp"}}}, canon: "team=nlp"},
		"double equals":            {in: "team==nlp", want: gpufleet.LabelSelector{{Key: "team", Op: gpufleet.OpEquals, Values: []string{"nlp"}}}, canon: "team=nlp"},
		"not equals":               {in: "team!=nlp", want: gpufleet.LabelSelector{{Key: "team", Op: gpufleet.OpNotEquals, Values: []string{"nlp"}}}, canon: "team!=nlp"},
		"equals empty":             {in: "canary=", want: gpufleet.LabelSelector{{Key: "canary", Op: gpufleet.OpEquals, Values: []string{""}}}, canon: "canary="},
		"exists":                   {in: "canary", want: gpufleet.LabelSelector{{Key: "canary", Op: gpufleet.OpExists}}, canon: "canary"},
		"does not exist":           {in: "! canary", want: gpufleet.LabelSelector{{Key: "canary", Op: gpufleet.OpNotExists}}, canon: "!canary"},
		"in, sorted and distinct":  {in: "env in (prod, dev,prod)", want: gpufleet.LabelSelector{{Key: "env", Op: gpufleet.OpIn, Values: []string{"dev", "prod"}}}, canon: "env in (dev,prod)"},
		"notin without a blank":    {in: "env notin(dev)", want: gpufleet.LabelSelector{{Key: "env", Op: gpufleet.OpNotIn, Values: []string{"dev"}}}, canon: "env notin (dev)"},
		"prefixed key":             {in: "example.com/owner=ana", want: gpufleet.LabelSelector{{Key: "example.com/owner", Op: gpufleet.OpEquals, Values: []string{"ana"}}}, canon: "example.com/owner=ana"},
		"blanks around words":      {in: " team = nlp , run != 7 ", want: gpufleet.LabelSelector{{Key: "team", Op: gpufleet.OpEquals, Values: []string{"nlp"}}, {Key: "run", Op: gpufleet.OpNotEquals, Values: []string{"7"}}}, canon: "team=nlp,run!=7"},
		"all of them": {in: "a=1,b!=2,c in (x,y),d notin (z),e,!f", canon: "a=1,b!=2,c in (x,y),d notin (z),e,!f", want: gpufleet.LabelSelector{
			req{Key: "a", Op: gpufleet.OpEquals, Values: []string{"1"}}, req{Key: "b", Op: gpufleet.OpNotEquals, Values: []string{"2"}},
			req{Key: "c", Op: gpufleet.OpIn, Values: []string{"x", "y"}}, req{Key: "d", Op: gpufleet.OpNotIn, Values: []string{"z"}},
			req{Key: "e", Op: gpufleet.OpExists}, req{Key: "f", Op: gpufleet.OpNotExists}}},
		"trailing comma":        {in: "a=1,", wantErr: `selector "": an empty requirement`},
		"two commas":            {in: "a=1,,b=2", wantErr: "an empty requirement"},
		"bad key":               {in: "a b=1", wantErr: `selector "a b=1": expected KEY, !KEY`},
		"bad value":             {in: "a=b c", wantErr: `selector "a=b c": value "b c": expected a label value`},
		"value too long":        {in: "a=" + strings.Repeat("v", 64), wantErr: "expected a label value"},
		"bad operator":          {in: "a<1", wantErr: `selector "a<1": expected KEY`},
		"triple equals":         {in: "a===1", wantErr: `value "=1"`},
		"in without list":       {in: "a in x", wantErr: `selector "a in x": expected KEY`},
		"in with empty list":    {in: "a in ()", wantErr: "need at least one value"},
		"in with an empty item": {in: "a in (x,)", wantErr: `value ""`},
		"unclosed list":         {in: "a in (x", wantErr: "a '(' without its ')'"},
		"stray parenthesis":     {in: "a=1)", wantErr: "a ')' without its '('"},
		"nested parentheses":    {in: "a in ((x))", wantErr: "parentheses inside parentheses"},
		"not a key":             {in: "!a=1", wantErr: `selector "!a=1": expected a label key`},
		"control character":     {in: "a=1\n", wantErr: "control character"},
		"too long":              {in: strings.Repeat("a", gpufleet.MaxSelectorLen+1), wantErr: "at most 4096"},
		"too many requirements": {in: strings.Repeat("a,", gpufleet.MaxSelectorRequirements) + "a", wantErr: "65 requirements, at most 64"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := gpufleet.ParseLabelSelector(tc.in)
			if tc.wantErr != "" {
				if !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseLabelSelector(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.String() != tc.canon {
				t.Errorf("String() = %q, want %q", got.String(), tc.canon)
			}
		})
	}
}

func TestLabelSelectorMatches(t *testing.T) {
	labels := map[string]string{"team": "nlp", "env": "prod", "canary": ""}
	tests := map[string]bool{
		"":                  true,
		"team=nlp":          true,
		"team=cv":           false,
		"team!=cv":          true,
		"team!=nlp":         false,
		"owner!=ana":        true, // lacking the label is not equal
		"env in (dev,prod)": true,
		"env in (dev)":      false,
		"owner in (ana)":    false,
		"env notin (dev)":   true,
		"env notin (prod)":  false,
		"owner notin (ana)": true,
		"canary":            true,
		"canary=":           true,
		"owner":             false,
		"!owner":            true,
		"!canary":           false,
		"team=nlp,env=prod": true,
		"team=nlp,env=dev":  false,
		"team=nlp,!canary":  false,
	}
	for in, want := range tests {
		sel, err := gpufleet.ParseLabelSelector(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got := sel.Matches(labels); got != want {
			t.Errorf("%q matches %v: %v, want %v", in, labels, got, want)
		}
	}
}

// FuzzParseLabelSelector: any text either parses to a selector whose
// String parses back to the same selector, which matches a job's labels
// exactly when the reparsed one does, or is refused as invalid with a
// short error.
func FuzzParseLabelSelector(f *testing.F) {
	for _, s := range []string{"", "a=1", "a==1", "a!=1", "a", "!a", "a in (x,y)", "a notin (x)", "example.com/a=b,c",
		"a in ((x))", "a=1,,b", " ! a ", "a in ()", "a=(", "a)=1", "é=1", "a=\xff", strings.Repeat("a in (b),", 70)} {
		f.Add(s, "a", "x")
	}
	f.Fuzz(func(t *testing.T, s, key, value string) {
		sel, err := gpufleet.ParseLabelSelector(s)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("ParseLabelSelector(%q): %v does not wrap ErrInvalid", s, err)
			}
			if len(err.Error()) > gpufleet.QuoteLimit+600 {
				t.Fatalf("ParseLabelSelector(%q): a %d-byte error", s, len(err.Error()))
			}
			return
		}
		again, err := gpufleet.ParseLabelSelector(sel.String())
		if err != nil {
			t.Fatalf("%q parsed to %q, which does not parse: %v", s, sel.String(), err)
		}
		if diff := cmp.Diff(sel, again); diff != "" {
			t.Fatalf("%q through %q (-first +again):\n%s", s, sel.String(), diff)
		}
		for _, r := range sel {
			if !gpufleet.ValidLabelKey(r.Key) {
				t.Fatalf("%q: key %q is not a label key", s, r.Key)
			}
			for _, v := range r.Values {
				if !gpufleet.ValidLabelValue(v) {
					t.Fatalf("%q: value %q is not a label value", s, v)
				}
			}
		}
		labels := map[string]string{key: value}
		if sel.Matches(labels) != again.Matches(labels) {
			t.Fatalf("%q and %q disagree on %v", s, sel.String(), labels)
		}
	})
}

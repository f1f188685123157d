package gpufleet_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
)

func TestParseSharing(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    gpufleet.Sharing
		wantErr string
	}{
		"empty is exclusive":      {in: "", want: gpufleet.Sharing{}},
		"exclusive":               {in: "exclusive", want: gpufleet.Sharing{}},
		"mig profile":             {in: "mig:1g.18gb", want: gpufleet.Sharing{Kind: gpufleet.MIG, Profile: "1g.18gb"}},
		"mig profile upper case":  {in: "mig:1G.18GB", want: gpufleet.Sharing{Kind: gpufleet.MIG, Profile: "1g.18gb"}},
		"mig media extension":     {in: "mig:1g.24gb+me", want: gpufleet.Sharing{Kind: gpufleet.MIG, Profile: "1g.24gb+me"}},
		"time slice":              {in: "timeslice:0.25", want: gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: 0.25}},
		"whole time slice":        {in: "timeslice:1", want: gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: 1}},
		"exclusive with argument": {in: "exclusive:1", wantErr: "takes no argument"},
		"mig without profile":     {in: "mig:", wantErr: "mig:PROFILE"},
		"mig nonsense":            {in: "mig:big", wantErr: "mig:PROFILE"},
		"slice above one":         {in: "timeslice:2", wantErr: "timeslice:F"},
		"slice zero":              {in: "timeslice:0", wantErr: "timeslice:F"},
		"slice too fine":          {in: "timeslice:0.0001", wantErr: "timeslice:F"},
		"slice not a number":      {in: "timeslice:NaN", wantErr: "timeslice:F"},
		"slice infinite":          {in: "timeslice:+Inf", wantErr: "timeslice:F"},
		"unknown kind":            {in: "vgpu:a100", wantErr: "expected exclusive, mig:PROFILE or timeslice:F"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := gpufleet.ParseSharing(tc.in)
			if tc.wantErr != "" {
				if !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseSharing(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseSharing(%q) = %#v, %v; want %#v", tc.in, got, err, tc.want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate(%v): %v", got, err)
			}
			again, err := gpufleet.ParseSharing(got.String())
			if err != nil || again != got {
				t.Errorf("round trip of %v through %q gave %v, %v", got, got.String(), again, err)
			}
		})
	}
}

func TestComputeCapability(t *testing.T) {
	for in, want := range map[string]gpufleet.ComputeCapability{"8.0": {8, 0}, "9.0": {9, 0}, "10.0": {10, 0}, "12.1": {12, 1}} {
		got, err := gpufleet.ParseComputeCapability(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseComputeCapability(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "9", "nine", "9.", ".0", "9.x", "+9.0", "9.+0", "0.0", "100.0", "9.10", "-1.0", " 9.0"} {
		if got, err := gpufleet.ParseComputeCapability(in); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParseComputeCapability(%q) = %v, %v; want ErrInvalid", in, got, err)
		}
	}
	a100, h100 := gpufleet.ComputeCapability{Major: 8}, gpufleet.ComputeCapability{Major: 9}
	switch {
	case !h100.AtLeast(a100) || a100.AtLeast(h100):
		t.Error("9.0 and 8.0 compare wrongly")
	case !(gpufleet.ComputeCapability{}).AtLeast(gpufleet.ComputeCapability{}) || (gpufleet.ComputeCapability{}).AtLeast(a100):
		t.Error("an unknown capability meets the zero minimum and no other")
	}
}

func TestParsePriorityAndPrecision(t *testing.T) {
	for _, p := range gpufleet.Priorities() {
		if got, err := gpufleet.ParsePriority(string(p)); err != nil || got != p {
			t.Errorf("ParsePriority(%q) = %v, %v", p, got, err)
		}
	}
	if gpufleet.Production.Rank() != 0 || gpufleet.Batch.Rank() != 3 || gpufleet.Priority("x").Rank() != 4 {
		t.Error("ranks: production first, batch last, unknown below all")
	}
	for _, in := range []string{"", "Production", "urgent"} {
		if _, err := gpufleet.ParsePriority(in); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParsePriority(%q) accepted", in)
		}
	}
	precisions := map[string]gpufleet.Precision{"fp16": gpufleet.FP16, "FP16": gpufleet.FP16, " fp8 ": gpufleet.FP8,
		"bfloat16": gpufleet.BF16, "half": gpufleet.FP16, "fp4": gpufleet.FP4, "int8": gpufleet.INT8}
	for in, want := range precisions {
		if got, err := gpufleet.ParsePrecision(in); err != nil || got != want {
			t.Errorf("ParsePrecision(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fp12", "int4"} {
		if _, err := gpufleet.ParsePrecision(in); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParsePrecision(%q) accepted", in)
		}
	}
}

func TestParseHumanForms(t *testing.T) {
	durations := map[string]float64{"90s": 90, "4h": 14400, "1h30m": 5400, "2d": 172800, "1.5d": 129600, "3y": 3 * 365 * 86400, "3600": 3600, "1.5": 1.5, " 10m ": 600, "0": 0}
	for in, want := range durations {
		d, err := gpufleet.ParseDuration(in)
		if err != nil || d.Seconds() != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %vs", in, d, err, want)
		}
	}
	for _, in := range []string{"", "soon", "-5s", "-1", "NaN", "1e300", "9999999999h", "inf", "-0.5d"} {
		if _, err := gpufleet.ParseDuration(in); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
	sizes := map[string]gpufleet.Bytes{"80GiB": 80 << 30, "141GB": 141e9, "40Gi": 40 << 30, "512MB": 512e6, "1024": 1024, "1.5GiB": 3 << 29, "80 GiB": 80 << 30, "10gib": 10 << 30}
	for in, want := range sizes {
		n, err := gpufleet.ParseBytes(in)
		if err != nil || n != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1GiB", "GiB", "1e30TB", "NaN"} {
		if _, err := gpufleet.ParseBytes(in); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParseBytes(%q) accepted", in)
		}
	}
	for in, want := range map[string]int64{"1T": 1e12, "300B": 300e9, "300b": 300e9, "2e12": 2e12, "5M": 5e6, "20K": 20e3, "7": 7, " 1.5T ": 1.5e12} {
		if n, err := gpufleet.ParseCount(in); err != nil || n != want {
			t.Errorf("ParseCount(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"", "many", "0", "-1T", "2e18", "NaN", "inf", "T"} {
		if _, err := gpufleet.ParseCount(in); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParseCount(%q) accepted", in)
		}
	}
	for in, want := range map[gpufleet.Bytes]string{80 << 30: "80GiB", 3 << 29: "1.5GiB", 512: "512B"} {
		if got := in.String(); got != want {
			t.Errorf("Bytes(%d).String() = %q, want %q", in, got, want)
		}
	}
}

// TestVocabularyInJSON checks that the request's words travel as strings
// (sizes as integers) and come back the same, and that JSON numbers mean
// seconds and bytes.
func TestVocabularyInJSON(t *testing.T) {
	in := `{"priority":"training","resources":{"gpus":2,"gpu_memory_min_bytes":"80GiB","min_compute_capability":"9.0",` +
		`"precision":"bf16","interconnect":"nvlink","sharing":"timeslice:0.5","prefer":"fastest"},"command":["x"],` +
		`"time_limit":3600,"estimate":"2d","grace":"30s","sim_load":"idle"}`
	var r gpufleet.JobRequest
	if err := json.Unmarshal([]byte(in), &r); err != nil {
		t.Fatal(err)
	}
	want := gpufleet.JobRequest{Priority: gpufleet.Training, Command: []string{"x"}, SimLoad: gpufleet.SimIdle,
		TimeLimit: gpufleet.Duration(time.Hour), Estimate: gpufleet.Duration(48 * time.Hour), Grace: gpufleet.Duration(30 * time.Second),
		Resources: gpufleet.Resources{GPUs: 2, GPUMemoryMinBytes: 80 << 30, MinComputeCapability: gpufleet.ComputeCapability{Major: 9},
			Precision: gpufleet.BF16, Interconnect: gpufleet.NVLink, Sharing: gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: 0.5}, Prefer: gpufleet.Fastest}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Fatalf("decoded (-want +got):\n%s", diff)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(r)
	for _, s := range []string{`"gpu_memory_min_bytes":85899345920`, `"min_compute_capability":"9.0"`, `"sharing":"timeslice:0.5"`, `"time_limit":"1h0m0s"`} {
		if !strings.Contains(string(out), s) {
			t.Errorf("encoded %s lacks %s", out, s)
		}
	}
	var back gpufleet.JobRequest
	if err := json.Unmarshal(out, &back); err != nil || cmp.Diff(r, back) != "" {
		t.Errorf("round trip: %v\n%s", err, cmp.Diff(r, back))
	}
	if out, _ := json.Marshal(gpufleet.Resources{GPUs: 1}); string(out) != `{"gpus":1}` {
		t.Errorf("an exclusive request with nothing else encodes as %s", out)
	}
}

func TestQuoteClips(t *testing.T) {
	long := strings.Repeat("é", 1000)
	q := gpufleet.Quote(long)
	if len(q) > gpufleet.QuoteLimit+40 || !strings.Contains(q, "(2000 bytes)") {
		t.Errorf("Quote of 2000 bytes gave %d bytes: %.80s...", len(q), q)
	}
	if q := gpufleet.Quote("a\x00b"); q != `"a\x00b"` {
		t.Errorf("Quote shows control characters escaped: %s", q)
	}
}

// FuzzVocabulary: every parser of the vocabulary refuses with ErrInvalid
// or accepts a value that its String writes back to the same value, and no
// error quotes more than about QuoteLimit bytes of the input.
func FuzzVocabulary(f *testing.F) {
	for _, s := range []string{"", "exclusive", "mig:1g.18gb", "timeslice:0.25", "timeslice:1e-3", "9.0", "12.1", "90s", "2d",
		"1.5", "80GiB", "141GB", "production", "bf16", "half", "-1", "NaN", "+Inf", "mig:", "1e309", "1g.24gb+me", "7G.80GB", "17.3kW", "700w", "1.2MW", "2GW", strings.Repeat("9", 400)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		check := func(what string, err error, roundTrip func() error) {
			if err != nil {
				if !errors.Is(err, gpufleet.ErrInvalid) {
					t.Fatalf("%s(%q): error %v does not wrap ErrInvalid", what, s, err)
				}
				if len(err.Error()) > gpufleet.QuoteLimit+300 {
					t.Fatalf("%s(%q): a %d-byte error", what, s, len(err.Error()))
				}
				return
			}
			if err := roundTrip(); err != nil {
				t.Fatalf("%s(%q): %v", what, s, err)
			}
		}
		sh, err := gpufleet.ParseSharing(s)
		check("ParseSharing", err, func() error {
			again, err := gpufleet.ParseSharing(sh.String())
			if err != nil || again != sh || sh.Validate() != nil {
				return fmt.Errorf("%v through %q gave %v, %v", sh, sh.String(), again, err)
			}
			return nil
		})
		w, err := gpufleet.ParsePower(s)
		check("ParsePower", err, func() error {
			again, err := gpufleet.ParsePower(w.String())
			if err != nil || math.Abs(float64(again-w)) > 1e-9*max(1, float64(w)) || w < 0 || w > gpufleet.MaxWatts {
				return fmt.Errorf("%v through %q gave %v, %v", w, w.String(), again, err)
			}
			return nil
		})
		mp, err := gpufleet.ParseMIGProfile(s)
		check("ParseMIGProfile", err, func() error {
			again, err := gpufleet.ParseMIGProfile(mp.Name)
			if err != nil || again != mp || mp.Slices < 1 || mp.Slices > 8 || mp.MemoryGB < 1 || mp.Share() <= 0 || mp.Share() > 1 {
				return fmt.Errorf("%+v through %q gave %+v, %v", mp, mp.Name, again, err)
			}
			return nil
		})
		cc, err := gpufleet.ParseComputeCapability(s)
		check("ParseComputeCapability", err, func() error {
			if again, err := gpufleet.ParseComputeCapability(cc.String()); err != nil || again != cc {
				return fmt.Errorf("%v through %q gave %v, %v", cc, cc.String(), again, err)
			}
			return nil
		})
		d, err := gpufleet.ParseDuration(s)
		check("ParseDuration", err, func() error {
			if d < 0 {
				return fmt.Errorf("negative %v", d)
			}
			if again, err := gpufleet.ParseDuration(d.String()); err != nil || again != d {
				return fmt.Errorf("%v through %q gave %v, %v", d, d.String(), again, err)
			}
			return nil
		})
		b, err := gpufleet.ParseBytes(s)
		check("ParseBytes", err, func() error {
			if b < 0 {
				return fmt.Errorf("negative %d", b)
			}
			return nil
		})
		n, err := gpufleet.ParseCount(s)
		check("ParseCount", err, func() error {
			if n < 1 || n > 1e18 {
				return fmt.Errorf("out of range %d", n)
			}
			return nil
		})
		p, err := gpufleet.ParsePriority(s)
		check("ParsePriority", err, func() error {
			if !p.Valid() {
				return fmt.Errorf("invalid %q accepted", p)
			}
			return nil
		})
		pr, err := gpufleet.ParsePrecision(s)
		check("ParsePrecision", err, func() error {
			if !pr.Valid() {
				return fmt.Errorf("invalid %q accepted", pr)
			}
			return nil
		})
	})
}

func TestParsePower(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    gpufleet.Watts
		wantErr bool
	}{
		"kilowatts":         {in: "17.3kW", want: 17300},
		"watts, lower case": {in: "700w", want: 700},
		"megawatts":         {in: "1.2MW", want: 1.2e6},
		"a plain number":    {in: "10200", want: 10200},
		"negative":          {in: "-5W", wantErr: true},
		"not a number":      {in: "lots", wantErr: true},
		"beyond a gigawatt": {in: "2GW", wantErr: true},
		"infinity":          {in: "+Inf", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := gpufleet.ParsePower(tc.in)
			if (err != nil) != tc.wantErr || (!tc.wantErr && math.Abs(float64(got-tc.want)) > 1e-6) {
				t.Fatalf("ParsePower(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
	for w, want := range map[gpufleet.Watts]string{10320.776: "10.32kW", 999.6: "1kW", 70.4: "70W", 1e9: "1000000kW"} {
		if s := w.Human(); s != want {
			t.Errorf("Watts(%v) = %q, want %q", float64(w), s, want)
		}
	}
	if s := gpufleet.Watts(17300).String(); s != "17.3kW" {
		t.Errorf("String() = %q", s)
	}
}

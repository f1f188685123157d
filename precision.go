package gpufleet

import (
	"slices"
	"strings"
)

// Precision names a numeric format a GPU's tensor (or vector) units may
// run natively: the catalog records a peak throughput for each, and a job
// may require one (resources.precision).
type Precision string

// The precisions, widest first.
const (
	FP64 Precision = "fp64"
	FP32 Precision = "fp32"
	TF32 Precision = "tf32"
	BF16 Precision = "bf16"
	FP16 Precision = "fp16"
	FP8  Precision = "fp8"
	INT8 Precision = "int8"
	FP4  Precision = "fp4"
)

// Precisions returns every precision, widest first.
func Precisions() []Precision { return []Precision{FP64, FP32, TF32, BF16, FP16, FP8, INT8, FP4} }

// precisionAliases maps other common spellings to a Precision.
var precisionAliases = map[string]Precision{
	"float64": FP64, "double": FP64,
	"float32": FP32, "single": FP32,
	"bfloat16": BF16,
	"float16":  FP16, "half": FP16,
	"float8": FP8,
	"float4": FP4, "nvfp4": FP4, "mxfp4": FP4,
}

// ParsePrecision reads a precision name, ignoring case and surrounding
// space: "fp16", "FP16", "bf16", "int8" and the others of Precisions, and
// spellings such as "bfloat16" and "half".
func ParsePrecision(s string) (Precision, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	if p := Precision(k); p.Valid() {
		return p, nil
	}
	if p, ok := precisionAliases[k]; ok {
		return p, nil
	}
	return "", badValue("precision", s, "expected fp64, fp32, tf32, bf16, fp16, fp8, int8 or fp4")
}

// Valid reports whether p is one of Precisions.
func (p Precision) Valid() bool { return slices.Contains(Precisions(), p) }

func (p Precision) String() string { return string(p) }

// UnmarshalText parses a precision name; empty means none.
func (p *Precision) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*p = ""
		return nil
	}
	v, err := ParsePrecision(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

package catalog

import (
	"fmt"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// Peak returns the dense peak throughput of g at precision p in FLOP/s (OP/s
// for INT8), and false where g does not support p natively.
func (g GPU) Peak(p Precision) (float64, bool) {
	v := g.PeakFLOPS[p]
	if v == nil {
		return 0, false
	}
	return *v, true
}

// MIG returns the Multi-Instance GPU profile of g named profile ("1g.10gb",
// case-insensitive, an optional "MIG " prefix allowed), and false if g has no
// such profile.
func (g GPU) MIG(profile string) (MIGProfile, bool) {
	name := strings.TrimSpace(strings.ToLower(profile))
	name = strings.TrimSpace(strings.TrimPrefix(name, "mig"))
	name = strings.TrimPrefix(name, "-")
	for _, m := range g.MIGProfiles {
		if strings.ToLower(m.Name) == name {
			return m, true
		}
	}
	return MIGProfile{}, false
}

// precisionAliases maps other common spellings to a Precision.
var precisionAliases = map[string]Precision{
	"float64": FP64, "double": FP64,
	"float32": FP32, "single": FP32,
	"bfloat16": BF16,
	"float16":  FP16, "half": FP16,
	"float8": FP8,
	"float4": FP4, "nvfp4": FP4, "mxfp4": FP4,
}

// ParsePrecision returns the Precision named s, ignoring case and
// surrounding space: "fp16", "FP16", "bf16", "int8", "fp8" and the other
// members of Precisions, plus spellings such as "bfloat16" and "half". An
// unknown name gives an error wrapping gpufleet.ErrInvalid.
func ParsePrecision(s string) (Precision, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	if validPrecision(Precision(k)) {
		return Precision(k), nil
	}
	if p, ok := precisionAliases[k]; ok {
		return p, nil
	}
	return "", fmt.Errorf("%w: precision %q: want one of %s", gpufleet.ErrInvalid, s, precisionList())
}

func validPrecision(p Precision) bool {
	for _, x := range Precisions {
		if x == p {
			return true
		}
	}
	return false
}

func precisionList() string {
	s := make([]string, len(Precisions))
	for i, p := range Precisions {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

package catalog

import (
	"strings"

	"github.com/gpufleet/gpufleet"
)

// Peak returns the dense peak throughput of g at precision p in FLOP/s (OP/s
// for INT8), and false where g does not support p natively.
func (g GPU) Peak(p gpufleet.Precision) (float64, bool) {
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

func precisionList() string {
	var s []string
	for _, p := range gpufleet.Precisions() {
		s = append(s, string(p))
	}
	return strings.Join(s, ", ")
}

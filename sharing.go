package gpufleet

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// SharingKind is how a job shares a GPU.
type SharingKind string

// Sharing kinds.
const (
	Exclusive SharingKind = "exclusive" // whole GPUs
	MIG       SharingKind = "mig"       // MIG instances: hard isolation
	TimeSlice SharingKind = "timeslice" // a time share of a GPU: soft isolation
)

// TimeSliceUnits is the granularity of time-slice shares: a share is a
// whole number of 1/TimeSliceUnits of a GPU.
const TimeSliceUnits = 1000

// Sharing is a job's sharing request, written "exclusive", "mig:1g.18gb"
// or "timeslice:0.25". The zero value is exclusive.
type Sharing struct {
	Kind     SharingKind `json:"kind"`
	Profile  string      `json:"profile,omitempty"`  // MIG profile, lower case
	Fraction float64     `json:"fraction,omitempty"` // time-slice share, (0, 1]
}

var migProfileRe = regexp.MustCompile(`^([1-8])g\.([1-9][0-9]{0,3})gb(\+[a-z]{1,8})?$`)

// MIGProfile is a MIG profile name read by ParseMIGProfile:
// "<slices>g.<memory>gb[+<attribute>]", such as 1g.18gb, 3g.71gb or
// 1g.24gb+me.
type MIGProfile struct {
	Name      string // lower case, as ParseMIGProfile read it
	Slices    int    // compute slices, 1-8 (of 7 on A100 and H100)
	MemoryGB  int    // the nominal memory of the name, in GB (1e9 bytes)
	Attribute string // "me" (media extensions) and the like; empty when none
}

// ParseMIGProfile reads a MIG profile name, case-insensitive. It is the
// one reader of the name: sharing requests, catalog MIG columns and the
// agent's accounting of an instance's share all use it.
func ParseMIGProfile(s string) (MIGProfile, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	m := migProfileRe.FindStringSubmatch(name)
	if m == nil {
		return MIGProfile{}, badValue("mig profile", s, `expected "<slices>g.<memory>gb[+attribute]", such as 1g.18gb or 1g.24gb+me`)
	}
	slices, _ := strconv.Atoi(m[1])
	gb, _ := strconv.Atoi(m[2])
	return MIGProfile{Name: name, Slices: slices, MemoryGB: gb, Attribute: strings.TrimPrefix(m[3], "+")}, nil
}

// Share is the part of a GPU's compute the instance takes: its slices out
// of 7, the slices of the MIG-capable datacenter GPUs.
func (p MIGProfile) Share() float64 { return math.Min(float64(p.Slices)/7, 1) }

// ParseSharing reads "exclusive", "mig:PROFILE" (a MIG profile name such as
// 1g.18gb or 1g.24gb+me, case-insensitive) or "timeslice:F" with F a share
// of a GPU in (0, 1], at least 1/TimeSliceUnits. Empty is exclusive, and
// exclusive is always the zero Sharing.
func ParseSharing(s string) (Sharing, error) {
	kind, arg, hasArg := strings.Cut(s, ":")
	bad := func(want string) (Sharing, error) {
		return Sharing{}, badValue("sharing", s, "expected "+want)
	}
	switch SharingKind(kind) {
	case "", Exclusive:
		if hasArg {
			return bad("exclusive (it takes no argument)")
		}
		return Sharing{}, nil
	case MIG:
		p, err := ParseMIGProfile(arg)
		if err != nil || p.Name != strings.ToLower(arg) {
			return bad("mig:PROFILE with a MIG profile such as mig:1g.18gb")
		}
		return Sharing{Kind: MIG, Profile: p.Name}, nil
	case TimeSlice:
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || !validFraction(f) {
			return bad(fmt.Sprintf("timeslice:F with %g <= F <= 1, such as timeslice:0.25", 1.0/TimeSliceUnits))
		}
		return Sharing{Kind: TimeSlice, Fraction: f}, nil
	}
	return bad("exclusive, mig:PROFILE or timeslice:F")
}

func validFraction(f float64) bool {
	return !math.IsNaN(f) && f <= 1 && math.Round(f*TimeSliceUnits) >= 1
}

// Validate checks a Sharing built in code, as ParseSharing checks text.
func (s Sharing) Validate() error {
	switch s.Kind {
	case "", Exclusive:
		if s.Profile != "" || s.Fraction != 0 {
			return badValue("sharing", s.String(), "exclusive takes no profile or fraction")
		}
		return nil
	case MIG, TimeSlice:
		_, err := ParseSharing(s.String())
		if err == nil && s.Kind == MIG && s.Profile != strings.ToLower(s.Profile) {
			err = badValue("sharing", s.String(), "expected a lower-case MIG profile")
		}
		return err
	}
	return badValue("sharing", string(s.Kind), "expected exclusive, mig or timeslice")
}

// Exclusive reports whether s asks for whole GPUs.
func (s Sharing) Exclusive() bool { return s.Kind == "" || s.Kind == Exclusive }

// Units is a time-slice share in 1/TimeSliceUnits of a GPU (TimeSliceUnits
// for whole GPUs and MIG instances).
func (s Sharing) Units() int {
	if s.Kind != TimeSlice {
		return TimeSliceUnits
	}
	return int(math.Round(s.Fraction * TimeSliceUnits))
}

// IsZero reports an exclusive request, which JSON leaves out.
func (s Sharing) IsZero() bool { return s.Exclusive() && s.Profile == "" && s.Fraction == 0 }

// String writes s as ParseSharing reads it.
func (s Sharing) String() string {
	switch s.Kind {
	case MIG:
		return "mig:" + s.Profile
	case TimeSlice:
		return "timeslice:" + strconv.FormatFloat(s.Fraction, 'g', -1, 64)
	}
	return string(Exclusive)
}

// MarshalText writes s as a string, so JSON carries "mig:1g.18gb".
func (s Sharing) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses s with ParseSharing.
func (s *Sharing) UnmarshalText(b []byte) error {
	v, err := ParseSharing(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

package gpufleet

import "slices"

// Priority is a job's priority class. The scheduler considers classes
// highest first, and a job of a higher class may preempt preemptible jobs
// of lower ones.
type Priority string

// The priority classes, highest first.
const (
	Production  Priority = "production"  // production inference
	Interactive Priority = "interactive" // notebooks, debugging
	Training    Priority = "training"
	Batch       Priority = "batch"
)

// Priorities returns the priority classes, highest first.
func Priorities() []Priority { return []Priority{Production, Interactive, Training, Batch} }

// ParsePriority reads a priority class name.
func ParsePriority(s string) (Priority, error) {
	p := Priority(s)
	if !p.Valid() {
		return "", badValue("priority", s, "expected production, interactive, training or batch")
	}
	return p, nil
}

// Valid reports whether p is one of the classes.
func (p Priority) Valid() bool { return slices.Contains(Priorities(), p) }

// Rank is p's place among the classes, 0 for the highest; an unknown class
// ranks below every known one.
func (p Priority) Rank() int {
	if i := slices.Index(Priorities(), p); i >= 0 {
		return i
	}
	return len(Priorities())
}

func (p Priority) String() string { return string(p) }

// UnmarshalText parses a class name; empty means not given.
func (p *Priority) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*p = ""
		return nil
	}
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

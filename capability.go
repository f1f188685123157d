package gpufleet

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// ComputeCapability is an NVIDIA GPU's CUDA compute capability, such as
// 8.0 (A100), 9.0 (H100) or 10.0 (B200). The zero value means unknown, or,
// in a request, no minimum.
type ComputeCapability struct {
	Major, Minor int
}

// ParseComputeCapability reads MAJOR.MINOR, such as "8.0" or "12.1".
func ParseComputeCapability(s string) (ComputeCapability, error) {
	a, b, ok := strings.Cut(s, ".")
	major, err1 := strconv.Atoi(a)
	minor, err2 := strconv.Atoi(b)
	c := ComputeCapability{major, minor}
	if !ok || err1 != nil || err2 != nil || a[0] == '+' || b[0] == '+' || !c.valid() {
		return ComputeCapability{}, badValue("compute capability", s, "expected MAJOR.MINOR such as 8.0 or 9.0")
	}
	return c, nil
}

func (c ComputeCapability) valid() bool {
	return c.Major >= 1 && c.Major <= 99 && c.Minor >= 0 && c.Minor <= 9
}

// Validate checks a value built in code, as ParseComputeCapability checks
// text; the zero value is valid.
func (c ComputeCapability) Validate() error {
	if c.IsZero() || c.valid() {
		return nil
	}
	return badValue("compute capability", fmt.Sprintf("%d.%d", c.Major, c.Minor), "expected a major version 1 to 99 and a minor 0 to 9")
}

// IsZero reports an unknown capability.
func (c ComputeCapability) IsZero() bool { return c == ComputeCapability{} }

// Compare orders capabilities by major, then minor version.
func (c ComputeCapability) Compare(o ComputeCapability) int {
	if v := cmp.Compare(c.Major, o.Major); v != 0 {
		return v
	}
	return cmp.Compare(c.Minor, o.Minor)
}

// AtLeast reports whether c meets the minimum min; every capability meets
// the zero minimum, and an unknown one meets no other.
func (c ComputeCapability) AtLeast(min ComputeCapability) bool {
	return min.IsZero() || (!c.IsZero() && c.Compare(min) >= 0)
}

// String writes "9.0", or "" when unknown.
func (c ComputeCapability) String() string {
	if c.IsZero() {
		return ""
	}
	return strconv.Itoa(c.Major) + "." + strconv.Itoa(c.Minor)
}

// MarshalText writes the capability as a string, so JSON carries "9.0".
func (c ComputeCapability) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText parses MAJOR.MINOR; empty is the zero value.
func (c *ComputeCapability) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*c = ComputeCapability{}
		return nil
	}
	v, err := ParseComputeCapability(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

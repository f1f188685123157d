package gpufleet

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// Limits on what one request may ask for. They are the same for the API,
// the CLI (flags and job files) and the simulator's trace readers, and
// docs/SERVER.md lists them. Every count a scheduler holds in 32 bits is
// bounded far below 2^31 here.
const (
	// MaxFleetNodes and MaxFleetGPUs are the largest fleet a server
	// supports: 65,536 nodes, 524,288 GPUs (the scheduler benchmark's
	// 50,000 x 8-GPU fleet fits). A job may ask for at most a whole fleet.
	MaxFleetNodes = 1 << 16
	MaxFleetGPUs  = 1 << 19
	// MaxNodeGPUs bounds the GPUs one node reports (an NVL72 tray set is
	// 72; MIG instances count separately, seven per GPU at most).
	MaxNodeGPUs = 256
	// MaxGPUMemory bounds resources.gpu_memory_min_bytes: 16 TiB, far above
	// any card (the largest holds 288 GB), so a larger value is a mistake.
	MaxGPUMemory Bytes = 16 << 40
	// MaxHostMemory bounds resources.memory_bytes per node: 1 PiB.
	MaxHostMemory Bytes = 1 << 50
	// MinHostMemory is the smallest memory limit an attempt may have.
	MinHostMemory Bytes = 1 << 20
	// MaxCPUs bounds resources.cpus per node.
	MaxCPUs = 4096
	// MaxJoulesPerUnit bounds resources.joules_per_unit: a GWh per unit,
	// far above one training run of the largest model.
	MaxJoulesPerUnit = 3.6e12
	// MaxDuration bounds time_limit and estimate: a year and a day.
	MaxDuration = 366 * 24 * time.Hour
	// MaxGrace bounds grace, the time between stop signal and kill.
	MaxGrace = 24 * time.Hour
	// MaxRetries bounds retries.
	MaxRetries = 100
	// MaxNameLen bounds job, team and class names and node names (a DNS
	// label).
	MaxNameLen = 63
	// MaxRequestIDLen bounds request_id.
	MaxRequestIDLen = 128
	// MaxCommandArgs and MaxCommandBytes bound the command: its arguments
	// and their total size (Linux takes 2 MiB of arguments and environment
	// together).
	MaxCommandArgs  = 4096
	MaxCommandBytes = 256 << 10
	// MaxEnvVars, MaxEnvKeyLen and MaxEnvBytes bound env: the variables,
	// one name, and all names and values together.
	MaxEnvVars   = 1024
	MaxEnvKeyLen = 256
	MaxEnvBytes  = 256 << 10
	// MaxPathLen bounds workdir (PATH_MAX).
	MaxPathLen = 4096
	// MaxListLen bounds gpu_models and node_selector entries; MaxWordLen
	// one GPU model, class, label key or label value.
	MaxListLen = 64
	MaxWordLen = 256
	// MinTeamWeight and MaxTeamWeight bound a team's fair-share weight;
	// weights are relative, so a million to one either way is the widest
	// spread that means anything.
	MinTeamWeight = 1e-6
	MaxTeamWeight = 1e6
)

var (
	nameRe     = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)
	nodeNameRe = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	envKeyRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ValidateName checks a job, team or class name: lower-case letters,
// digits, '.', '_' and '-', starting and ending with a letter or digit, at
// most MaxNameLen.
func ValidateName(field, s string) error {
	if !nameRe.MatchString(s) {
		return fmt.Errorf("%w: %s %s: expected lower-case letters, digits, '.', '_' or '-', at most %d, starting and ending with a letter or digit", ErrInvalid, field, Quote(s), MaxNameLen)
	}
	return nil
}

// ValidateNodeName checks a node name: a DNS label.
func ValidateNodeName(field, s string) error {
	if !nodeNameRe.MatchString(s) {
		return fmt.Errorf("%w: %s %s: expected a DNS label (lower-case letters, digits and '-', at most %d)", ErrInvalid, field, Quote(s), MaxNameLen)
	}
	return nil
}

// ValidateCount checks an integer field against [min, max].
func ValidateCount(field string, n, min, max int) error {
	if n < min || n > max {
		return &ValueError{Field: field, Value: strconv.Itoa(n), Want: fmt.Sprintf("expected %d to %d", min, max)}
	}
	return nil
}

// ValidateWeight checks a fair-share weight: a number from MinTeamWeight
// to MaxTeamWeight.
func ValidateWeight(field string, w float64) error {
	if !(w >= MinTeamWeight && w <= MaxTeamWeight) {
		return &ValueError{Field: field, Value: strconv.FormatFloat(w, 'g', -1, 64), Want: fmt.Sprintf("expected %g to %g", MinTeamWeight, float64(MaxTeamWeight))}
	}
	return nil
}

// Validate checks a team's settings against the limits: its name, at most
// MaxListLen quota classes of 0 to MaxFleetGPUs GPUs each, a borrowing
// limit of -1 (none) to MaxFleetGPUs, and a weight ValidateWeight accepts.
// Whether the quota classes exist is the server's to check.
func (t Team) Validate() error {
	if err := ValidateName("name", t.Name); err != nil {
		return err
	}
	if len(t.Quota) > MaxListLen {
		return fmt.Errorf("%w: quota: %d classes, at most %d", ErrInvalid, len(t.Quota), MaxListLen)
	}
	for _, c := range slices.Sorted(maps.Keys(t.Quota)) {
		if err := CheckText("quota class", c, MaxWordLen, false); err != nil {
			return err
		}
		if err := ValidateCount("quota "+c, t.Quota[c], 0, MaxFleetGPUs); err != nil {
			return err
		}
	}
	if err := ValidateCount("borrowing_limit", t.BorrowingLimit, -1, MaxFleetGPUs); err != nil {
		return err
	}
	if len(t.Mounts) > MaxMounts {
		return fmt.Errorf("%w: mounts: %d, at most %d", ErrInvalid, len(t.Mounts), MaxMounts)
	}
	for i, m := range t.Mounts {
		if _, err := ParseMountAllow(m.Path); err != nil {
			return InField(fmt.Sprintf("mounts[%d]", i), err)
		}
	}
	if len(t.RegistryAuth) > MaxListLen {
		return fmt.Errorf("%w: registry_auth: %d registries, at most %d", ErrInvalid, len(t.RegistryAuth), MaxListLen)
	}
	for _, r := range slices.Sorted(maps.Keys(t.RegistryAuth)) {
		if err := t.RegistryAuth[r].Validate(r); err != nil {
			return err
		}
	}
	return ValidateWeight("weight", t.Weight)
}

// Validate checks a class: its name and 1 to MaxListLen model names.
func (c Class) Validate() error {
	if err := ValidateName("name", c.Name); err != nil {
		return err
	}
	if err := ValidateCount("models (count)", len(c.Models), 1, MaxListLen); err != nil {
		return err
	}
	for i, m := range c.Models {
		if err := CheckText(fmt.Sprintf("models[%d]", i), m, MaxWordLen, false); err != nil {
			return err
		}
	}
	return nil
}

package rollout

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// DrainMode is how a node's running work ends before its update.
type DrainMode string

// Drain modes.
const (
	// DrainWait cordons the node and waits for its work to finish on its
	// own, however long that takes.
	DrainWait DrainMode = "wait"
	// DrainTimeout waits as DrainWait does, up to a timeout, then stops
	// what still runs with each job's grace (GPU Operator's
	// waitForCompletion with timeoutSeconds, then its drain).
	DrainTimeout DrainMode = "timeout"
	// DrainNow stops the running work at once, with each job's grace
	// (Slurm's `scontrol reboot` without ASAP, kubectl drain).
	DrainNow DrainMode = "now"
)

// DrainPolicy is a rollout's drain mode and, for DrainTimeout, how long it
// waits. Its text is "wait", "now" or "timeout:DURATION" ("timeout:2h").
// The zero policy is DrainNow: rollouts recorded before drain policies
// existed stopped work at once.
type DrainPolicy struct {
	Mode    DrainMode
	Timeout time.Duration
}

// DefaultDrainPolicy waits an hour for running work, then stops it with
// its grace. The hour is a choice: long enough for most inference
// restarts and short training steps to checkpoint and end, short enough
// that a wave of a rollout ends within a working day.
var DefaultDrainPolicy = DrainPolicy{Mode: DrainTimeout, Timeout: time.Hour}

// maxDrainTimeout bounds a timeout: a rollout that waits longer than a
// month is a wait.
const maxDrainTimeout = 30 * 24 * time.Hour

// ParseDrainPolicy reads "wait", "now" or "timeout:DURATION".
func ParseDrainPolicy(s string) (DrainPolicy, error) {
	mode, dur, timed := strings.Cut(strings.TrimSpace(s), ":")
	switch DrainMode(mode) {
	case DrainWait, DrainNow:
		if !timed {
			return DrainPolicy{Mode: DrainMode(mode)}, nil
		}
	case DrainTimeout:
		d, err := time.ParseDuration(dur)
		if err != nil || d <= 0 || d > maxDrainTimeout {
			return DrainPolicy{}, fmt.Errorf("%w: drain_policy %s: expected timeout:DURATION, a duration above 0 up to 30 days (timeout:1h)", gpufleet.ErrInvalid, gpufleet.Quote(s))
		}
		return DrainPolicy{Mode: DrainTimeout, Timeout: d}, nil
	}
	return DrainPolicy{}, fmt.Errorf("%w: drain_policy %s: expected wait, timeout:DURATION or now", gpufleet.ErrInvalid, gpufleet.Quote(s))
}

// String is the policy's text ("" for the zero policy).
func (p DrainPolicy) String() string {
	switch p.Mode {
	case "":
		return ""
	case DrainTimeout:
		return "timeout:" + compact(p.Timeout)
	}
	return string(p.Mode)
}

// compact is a duration as time.ParseDuration reads it, without zero
// trailing units: "1h", "1m", "1h30m".
func compact(d time.Duration) string {
	s := d.String()
	s, _ = strings.CutSuffix(s, "m0s")
	if !strings.HasSuffix(s, "s") && !strings.HasSuffix(s, "h") {
		s += "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}

// MarshalText writes the policy's text.
func (p DrainPolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads it; "" is the zero policy.
func (p *DrainPolicy) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*p = DrainPolicy{}
		return nil
	}
	v, err := ParseDrainPolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// waits reports whether the policy lets the work finish on its own first.
func (p DrainPolicy) waits() bool { return p.Mode == DrainWait || p.Mode == DrainTimeout }

// words says what the policy does, for a node's messages.
func (p DrainPolicy) words() string {
	if p.Mode == DrainWait {
		return "waiting for its jobs to finish"
	}
	return fmt.Sprintf("waiting up to %s for its jobs to finish, then stopping them with their grace", gpufleet.FormatDuration(p.Timeout))
}

// attempts is n attempts, in words.
func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// OnHalt is what a failed gate does to a rollout.
type OnHalt string

// Halt actions.
const (
	// HaltPause stops the rollout where it is and waits for the operator
	// (the failed nodes stay cordoned). The zero value means it.
	HaltPause OnHalt = "pause"
	// HaltRollback stops it and rolls every updated node back at once,
	// through the same gates.
	HaltRollback OnHalt = "rollback"
)

// ParseOnHalt reads "pause" or "rollback".
func ParseOnHalt(s string) (OnHalt, error) {
	switch h := OnHalt(strings.TrimSpace(s)); h {
	case HaltPause, HaltRollback:
		return h, nil
	}
	return "", fmt.Errorf("%w: on_halt %s: expected pause or rollback", gpufleet.ErrInvalid, gpufleet.Quote(s))
}

// ParseMaxUnavailable reads a count ("2") or a share of the selected nodes
// ("25%"): exactly one of count and percent is above 0.
func ParseMaxUnavailable(s string) (count int, percent float64, err error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || !(v > 0 && v <= 100) {
			return 0, 0, fmt.Errorf("%w: max_unavailable %s: expected a share above 0%% up to 100%%", gpufleet.ErrInvalid, gpufleet.Quote(s))
		}
		return 0, v, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > gpufleet.MaxFleetNodes {
		return 0, 0, fmt.Errorf("%w: max_unavailable %s: expected a count of nodes from 1 or a share such as 25%%", gpufleet.ErrInvalid, gpufleet.Quote(s))
	}
	return n, 0, nil
}

// unavailableOf resolves a share of n nodes to a count: rounded up, so
// that 25% of 2 nodes is 1, as GPU Operator's upgrade policy does, and at
// least 1.
func unavailableOf(percent float64, n int) int {
	return max(1, int(math.Ceil(percent/100*float64(n)-1e-9)))
}

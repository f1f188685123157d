package capacity

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// Metric is what a service target bounds.
type Metric string

// The metrics a target may bound.
const (
	// Allocation is the share of the model's GPUs held by jobs, averaged
	// over a week.
	Allocation Metric = "allocation"
	// Wait is a percentile of the queue wait of the jobs submitted in a
	// week (of one priority class, or all).
	Wait Metric = "wait"
)

// Target is a service target a fleet is planned to: "allocation<85%",
// "p90-wait<4h", "p90-wait:training<4h".
type Target struct {
	Metric Metric `json:"metric"`
	// Percentile of the waits, 1 to 99 (Wait only).
	Percentile int `json:"percentile,omitempty"`
	// Class limits a wait target to one priority class; "" is every job.
	Class gpufleet.Priority `json:"class,omitempty"`
	// Limit is the bound: a share of the GPUs (0 to 1) for Allocation,
	// seconds for Wait.
	Limit float64 `json:"limit"`
}

// DefaultTarget is the target procurement plans to unless told: the
// training class's p90 wait under four hours.
var DefaultTarget = Target{Metric: Wait, Percentile: 90, Class: gpufleet.Training, Limit: 4 * 3600}

// ParseTarget reads a target: "allocation<85%" (or "<0.85"), or
// "pNN-wait<DURATION" with an optional ":CLASS" after "wait".
func ParseTarget(s string) (Target, error) {
	bad := func(why string) (Target, error) {
		return Target{}, fmt.Errorf("%w: target %s: %s", gpufleet.ErrInvalid, gpufleet.Quote(s), why)
	}
	const form = `expected "allocation<85%" or "p90-wait<4h" (optionally "p90-wait:training<4h")`
	left, right, ok := strings.Cut(strings.TrimSpace(s), "<")
	if !ok || right == "" {
		return bad(form)
	}
	if left == string(Allocation) {
		v, err := strconv.ParseFloat(strings.TrimSuffix(right, "%"), 64)
		if strings.HasSuffix(right, "%") {
			v /= 100
		}
		if err != nil || !(v > 0 && v <= 1) {
			return bad("allocation: expected a share above 0% and at most 100%")
		}
		return Target{Metric: Allocation, Limit: v}, nil
	}
	pct, rest, ok := strings.Cut(left, "-")
	p, err := strconv.Atoi(strings.TrimPrefix(pct, "p"))
	if !ok || !strings.HasPrefix(pct, "p") || err != nil || p < 1 || p > 99 {
		return bad(form)
	}
	t := Target{Metric: Wait, Percentile: p}
	metric, class, hasClass := strings.Cut(rest, ":")
	if metric != string(Wait) {
		return bad(form)
	}
	if hasClass {
		c, err := gpufleet.ParsePriority(class)
		if err != nil {
			return bad(err.Error())
		}
		t.Class = c
	}
	d, err := gpufleet.ParseDuration(right)
	if err != nil || d <= 0 {
		return bad("wait: expected a positive duration such as 30m or 4h")
	}
	t.Limit = d.Seconds()
	return t, nil
}

// String writes the target as ParseTarget reads it.
func (t Target) String() string {
	if t.Metric == Allocation {
		return fmt.Sprintf("allocation<%g%%", t.Limit*100)
	}
	class := ""
	if t.Class != "" {
		class = ":" + string(t.Class)
	}
	return fmt.Sprintf("p%d-wait%s<%s", t.Percentile, class, shortDuration(t.Limit))
}

// shortDuration writes seconds in the largest whole unit: 2d, 4h, 30m, 45s.
func shortDuration(s float64) string {
	for _, u := range []struct {
		secs float64
		unit string
	}{{86400, "d"}, {3600, "h"}, {60, "m"}} {
		if s >= u.secs && s == float64(int64(s/u.secs))*u.secs {
			return fmt.Sprintf("%d%s", int64(s/u.secs), u.unit)
		}
	}
	return fmt.Sprintf("%gs", s)
}

package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// Level is how deep a bench goes, named like DCGM diag's suites
// (`dcgmi diag -r quick|medium|long`, docs/BENCH.md#levels).
type Level string

// Levels, shortest first.
const (
	// LevelQuick is the set the agent runs when a node joins, in every
	// return-to-service check and as a rollout gate: small sizes, 5 runs,
	// ring p2p pairs, under a minute on an eight-GPU node.
	LevelQuick Level = "quick"
	// LevelMedium is the full set (large sizes, 20 runs, every p2p pair)
	// and the memory pattern test.
	LevelMedium Level = "medium"
	// LevelLong adds the sustained stress: matrix products for
	// StressSeconds with power, temperature and clock-throttle reasons
	// watched, failing on throttling and on errors.
	LevelLong Level = "long"
)

// Levels lists the levels, shortest first.
func Levels() []Level { return []Level{LevelQuick, LevelMedium, LevelLong} }

// ParseLevel reads a level; "" is LevelQuick.
func ParseLevel(s string) (Level, error) {
	l := Level(strings.ToLower(strings.TrimSpace(s)))
	if l == "" {
		return LevelQuick, nil
	}
	if !slices.Contains(Levels(), l) {
		return "", fmt.Errorf("%w: level: %s: expected quick, medium or long", gpufleet.ErrInvalid, gpufleet.Quote(s))
	}
	return l, nil
}

// LevelTests are the tests level l runs, in run order.
func LevelTests(l Level) []Test { return l.tests() }

// tests are the tests a level runs, in run order.
func (l Level) tests() []Test {
	switch l {
	case LevelLong:
		return []Test{Copy, GEMM, H2D, P2P, AllReduce, Memory, Stress}
	case LevelMedium:
		return []Test{Copy, GEMM, H2D, P2P, AllReduce, Memory}
	}
	return []Test{Copy, GEMM, H2D, P2P, AllReduce}
}

// StressSeconds is how long the long level's stress keeps the GPUs busy
// (DCGM's targeted stress and power tests run for minutes; a quarter of
// an hour in all is its level 3).
const StressSeconds = 300

// MemoryPatterns are the patterns the memory test writes and checks, in
// order, as memtest86 and DCGM's memtest do: the address lines first,
// then every bit of every cell both ways.
var MemoryPatterns = []string{"walking ones", "own address", "moving inversions 0/1", "moving inversions 8-bit", "moving inversions random"}

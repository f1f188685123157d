package server

import (
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// liveness is what heartbeats leave in this replica's memory: each node's
// record (liveNode; the health rules' memory is the health component's) and
// when this replica last became leader. It is a component with its own
// lock; the store keeps none of it (a new leader starts from the grace
// window led gives). Lock order: mu before the telemetry's lock.
type liveness struct {
	mu    sync.Mutex
	nodes map[string]*liveNode
	// firstLeaderAt is when this replica last became leader: nodes get a
	// grace window after it before anything is declared lost.
	firstLeaderAt time.Time
}

func newLiveness() *liveness { return &liveness{nodes: map[string]*liveNode{}} }

// led records that this replica became leader at t.
func (l *liveness) led(t time.Time) {
	l.mu.Lock()
	l.firstLeaderAt = t
	l.mu.Unlock()
}

// silence is how long a node has been silent at now, measured from the
// later of its last heartbeat and this replica's leadership start;
// whether this replica ever heard from it, and whether it has led at all.
func (l *liveness) silence(name string, now time.Time) (age time.Duration, known, led bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var seen time.Time
	if ln := l.nodes[name]; ln != nil {
		seen = ln.lastSeen
	}
	known, led = !seen.IsZero(), !l.firstLeaderAt.IsZero()
	if l.firstLeaderAt.After(seen) {
		seen = l.firstLeaderAt
	}
	if seen.IsZero() {
		return 0, false, led
	}
	return now.Sub(seen), known, led
}

// node returns a node's record, made on first use; l.mu must be held.
func (l *liveness) node(name string) *liveNode {
	ln := l.nodes[name]
	if ln == nil {
		ln = &liveNode{reported: map[string]gpufleet.AttemptState{}, totals: map[string]api.AttemptReport{},
			energy: map[string]float64{}, xids: map[string][]xidAt{}}
		l.nodes[name] = ln
	}
	return ln
}

package scheduler

import "sync"

// FleetCache holds the fleet index (nodes in their order, models, GPU ids,
// NVLink domains, the empty-fleet buckets) between Schedule calls of one
// caller; see Input.FleetVersion. The zero value is ready to use and safe
// for concurrent calls; a caller with several fleets keeps one per fleet.
type FleetCache struct {
	mu      sync.Mutex
	version uint64
	first   *Node // &Input.Nodes[0]
	n       int
	models  int
	seed    uint64 // Config.Seed: it orders the nodes
	tmpl    *fleet // nothing running; never changed after it is built
	ever    *fleet // tmpl with every node ready

	// The estimates' index of Input.Runs (indexRuns) at runsVersion, for
	// the quantile and minimum it was built with; read only once built.
	runsVersion uint64
	runsQ       float64
	runsMin     int
	runIdx      runIndex
}

// runIndexFor returns the estimates' index of in.Runs, from the cache when
// the caller's RunsVersion says the runs did not change.
func (s *sched) runIndexFor(in *Input) runIndex {
	c := in.Cache
	if c == nil || in.RunsVersion == 0 {
		return indexRuns(in.Runs, s.cfg.EstimateQuantile, s.cfg.EstimateMinRuns)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runIdx == nil || c.runsVersion != in.RunsVersion || c.runsQ != s.cfg.EstimateQuantile || c.runsMin != s.cfg.EstimateMinRuns {
		c.runIdx = indexRuns(in.Runs, s.cfg.EstimateQuantile, s.cfg.EstimateMinRuns)
		c.runsVersion, c.runsQ, c.runsMin = in.RunsVersion, s.cfg.EstimateQuantile, s.cfg.EstimateMinRuns
	}
	return c.runIdx
}

// fleetFor returns the capacity model to schedule on (a fresh copy, free
// to change) and the fleet a job could ever run on, nothing running and
// every node ready (read-only), from the cache when the caller's version
// says the nodes did not change. With shared, f is the cached template
// itself, for a caller that changes nothing (see newSched).
func (s *sched) fleetFor(in *Input, shared bool) (f, ever *fleet) {
	c := in.Cache
	if c == nil || in.FleetVersion == 0 || len(in.Nodes) == 0 {
		t, ever := s.buildFleets(in)
		if shared {
			return t, ever
		}
		return t.clone(), ever
	}
	c.mu.Lock()
	t, ever := c.tmpl, c.ever
	if t == nil || c.version != in.FleetVersion || c.first != &in.Nodes[0] || c.n != len(in.Nodes) ||
		c.models != len(in.Models) || c.seed != in.Config.Seed || !s.sameClasses(t) {
		t, ever = s.buildFleets(in)
		c.tmpl, c.ever, c.version, c.first, c.n, c.models = t, ever, in.FleetVersion, &in.Nodes[0], len(in.Nodes), len(in.Models)
		c.seed = in.Config.Seed
	}
	c.mu.Unlock()
	if shared {
		return t, ever
	}
	return t.clone(), ever
}

// buildFleets builds the fleet as it is and, when some node or GPU is not
// ready, the fleet with all of them ready.
func (s *sched) buildFleets(in *Input) (t, ever *fleet) {
	t = buildFleet(in, s.classOf, len(s.classes), false)
	if t.notReady {
		return t, buildFleet(in, s.classOf, len(s.classes), true)
	}
	return t, t
}

// sameClasses reports whether a cached fleet's quota classes are this
// call's: teams' quotas may change while the nodes do not.
func (s *sched) sameClasses(t *fleet) bool {
	if len(t.classFree) != len(s.classes) {
		return false
	}
	for i := range t.models {
		if t.models[i].class != s.classOf(t.models[i].id) {
			return false
		}
	}
	return true
}

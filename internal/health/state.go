package health

import (
	"sort"
	"time"
)

// State is what the rules remember between evaluations: counter baselines
// (for growth), the start of runs of a signal (for "sustained"), and the
// conditions in force (for Since, and to hold conditions raised by
// events). It is a plain value: Evaluate never changes the State it is
// given, so a caller may keep the old one. The zero State is a fresh
// start. It marshals to JSON, so a server may persist it.
type State struct {
	GPUs   []GPUState        `json:"gpus,omitempty"`   // sorted by Index
	Active []ActiveCondition `json:"active,omitempty"` // sorted like Evaluate's output
}

// GPUState is the memory of one GPU.
type GPUState struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	// Counters are the baselines of monotonic counters, sorted by Name.
	Counters []Counter `json:"counters,omitempty"`
	// Runs are the signals present in every evaluation since Since, sorted
	// by Name.
	Runs []Run `json:"runs,omitempty"`
}

// Counter is a monotonic counter's last value and the start of its current
// measuring window.
type Counter struct {
	Name     string    `json:"name"`
	Last     uint64    `json:"last"`
	Anchor   uint64    `json:"anchor"`
	AnchorAt time.Time `json:"anchor_at"`
}

// Run is a signal seen in every evaluation since Since.
type Run struct {
	Name  string    `json:"name"`
	Since time.Time `json:"since"`
}

// ActiveCondition is a condition in force and when its evidence was last
// seen.
type ActiveCondition struct {
	Condition
	LastSeen time.Time `json:"last_seen"`
	// Held marks a condition raised by an event, kept for Config.EventHold
	// after LastSeen.
	Held bool `json:"held,omitempty"`
}

// ClearGPU returns a copy of s without the conditions in force on GPU
// index (index -1: the node-level ones), for the server to call once a
// repair is done so that held event conditions do not outlive it. Counter
// baselines are kept.
func (s State) ClearGPU(index int) State {
	out := State{GPUs: cloneGPUStates(s.GPUs)}
	for _, a := range s.Active {
		if a.GPU != index {
			out.Active = append(out.Active, a)
		}
	}
	return out
}

// gpu returns the memory of GPU index.
func (s State) gpu(index int) (GPUState, bool) {
	i := sort.Search(len(s.GPUs), func(i int) bool { return s.GPUs[i].Index >= index })
	if i < len(s.GPUs) && s.GPUs[i].Index == index {
		return s.GPUs[i], true
	}
	return GPUState{}, false
}

// active returns the condition in force for rule on gpu.
func (s State) active(rule string, gpu int) (ActiveCondition, bool) {
	for _, a := range s.Active {
		if a.Rule == rule && a.GPU == gpu {
			return a, true
		}
	}
	return ActiveCondition{}, false
}

// counter returns the named counter.
func (g GPUState) counter(name string) (Counter, bool) {
	for _, c := range g.Counters {
		if c.Name == name {
			return c, true
		}
	}
	return Counter{}, false
}

// run returns the named run.
func (g GPUState) run(name string) (Run, bool) {
	for _, r := range g.Runs {
		if r.Name == name {
			return r, true
		}
	}
	return Run{}, false
}

func cloneGPUStates(in []GPUState) []GPUState {
	if in == nil {
		return nil
	}
	out := make([]GPUState, len(in))
	for i, g := range in {
		out[i] = GPUState{Index: g.Index, UUID: g.UUID,
			Counters: append([]Counter(nil), g.Counters...), Runs: append([]Run(nil), g.Runs...)}
	}
	return out
}

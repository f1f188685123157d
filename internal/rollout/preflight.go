package rollout

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/stack"
)

// Target is a node a rollout would update, as the pre-flight check sees
// it: the versions it runs and its GPUs' models and compute capabilities.
type Target struct {
	Name     string
	Versions map[string]string
	Models   []string
	CCs      []gpufleet.ComputeCapability
}

// Blocker is one thing the compatibility rules say cannot work once the
// stack is on the nodes named: one finding, on the GPU models named.
type Blocker struct {
	Models  []string `json:"gpu_models"`
	Nodes   []string `json:"nodes"`
	Message string   `json:"message"`
	Source  string   `json:"source"`
}

// String is the blocker in one line.
func (b Blocker) String() string {
	s := fmt.Sprintf("%s on %s (%s)", b.Message, strings.Join(b.Models, ", "), strings.Join(b.Nodes, ", "))
	if b.Source != "" {
		s += "; source: " + b.Source
	}
	return s
}

// Preflight runs the compatibility rules on each target as it would be
// after the update (its versions with the stack's over them), before any
// node is touched, and returns what they find incompatible, one blocker
// per finding with the nodes and models it holds for, in a fixed order.
func Preflight(versions map[string]string, targets []Target) []Blocker {
	byMsg := map[string]*Blocker{}
	var order []string
	for _, t := range targets {
		after := maps.Clone(t.Versions)
		if after == nil {
			after = map[string]string{}
		}
		maps.Copy(after, versions)
		for _, f := range stack.Check(gpufleet.NodeStack(after), t.CCs) {
			if f.Severity != stack.Incompatible {
				continue
			}
			b, ok := byMsg[f.Message]
			if !ok {
				b = &Blocker{Message: f.Message, Source: f.Source}
				byMsg[f.Message] = b
				order = append(order, f.Message)
			}
			b.Nodes = append(b.Nodes, t.Name)
			for _, m := range t.Models {
				if !slices.Contains(b.Models, m) {
					b.Models = append(b.Models, m)
				}
			}
		}
	}
	out := make([]Blocker, 0, len(order))
	for _, m := range order {
		b := *byMsg[m]
		slices.Sort(b.Models)
		slices.Sort(b.Nodes)
		out = append(out, b)
	}
	return out
}

// PreflightError is the refusal of a stack the rules say cannot work on
// the nodes targeted, naming each blocker.
func PreflightError(stackName string, blockers []Blocker, of int) error {
	nodes := map[string]bool{}
	lines := make([]string, len(blockers))
	for i, b := range blockers {
		for _, n := range b.Nodes {
			nodes[n] = true
		}
		lines[i] = b.String()
	}
	return fmt.Errorf("%w: stack %s cannot work on %d of the %d targeted nodes, by the compatibility rules (no node was touched; --force starts anyway): %s",
		gpufleet.ErrUnsatisfiable, stackName, len(nodes), of, strings.Join(lines, "; "))
}

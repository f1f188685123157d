package stack

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// DriftNode is what drift needs of a node.
type DriftNode struct {
	Name      string
	Versions  gpufleet.StackVersions
	GPUModels []string                     // catalog ids of its GPUs
	CCs       []gpufleet.ComputeCapability // their compute capabilities
	Domains   []string                     // NVLink domains its GPUs are in
}

// Drift says, per node, why its stack drifted, in words (nodes absent
// from the result have not): a stack the rules find incompatible or
// known-bad; a GPU model some stack is validated for while the node runs
// none of those stacks; an NVLink domain whose nodes run different
// drivers; a running gang (the node sets of multi-node jobs) spread over
// different drivers. It is pure: the server marks such nodes degraded
// with these reasons.
func Drift(nodes []DriftNode, stacks []gpufleet.Stack, gangs [][]string) map[string][]string {
	out := map[string][]string{}
	add := func(node, why string) {
		if !slices.Contains(out[node], why) {
			out[node] = append(out[node], why)
		}
	}
	// Stacks validated per GPU model, and which nodes run each.
	validFor := map[string][]gpufleet.Stack{}
	for _, st := range stacks {
		if st.State == gpufleet.StackRetired {
			continue
		}
		for _, v := range st.Validated {
			validFor[v.GPUModel] = append(validFor[v.GPUModel], st)
		}
	}
	driver := map[string]string{}
	for _, n := range nodes {
		driver[n.Name] = n.Versions[gpufleet.StackDriver]
		for _, f := range Check(n.Versions, n.CCs) {
			switch {
			case f.Severity == Incompatible:
				add(n.Name, "incompatible stack: "+f.Message)
			case isKnownBad(f):
				add(n.Name, "known-bad version: "+f.Message)
			}
		}
		for _, m := range n.GPUModels {
			valid := validFor[m]
			if len(valid) == 0 || slices.ContainsFunc(valid, func(st gpufleet.Stack) bool { return runsStack(st, n.Versions) }) {
				continue
			}
			names := make([]string, len(valid))
			for i, st := range valid {
				names[i] = st.Name
			}
			add(n.Name, fmt.Sprintf("runs no stack validated for %s (validated: %s)", m, strings.Join(names, ", ")))
		}
	}
	// Nodes that must agree: each NVLink domain's, and each gang's.
	groups := map[string][]string{}
	for _, n := range nodes {
		for _, d := range n.Domains {
			if !slices.Contains(groups["NVLink domain "+d], n.Name) {
				groups["NVLink domain "+d] = append(groups["NVLink domain "+d], n.Name)
			}
		}
	}
	for i, g := range gangs {
		groups[fmt.Sprintf("gang %d", i)] = g
	}
	for _, what := range slices.Sorted(maps.Keys(groups)) {
		members := groups[what]
		byDriver := map[string][]string{}
		for _, m := range members {
			if d, ok := driver[m]; ok {
				byDriver[d] = append(byDriver[d], m)
			}
		}
		if len(byDriver) < 2 {
			continue
		}
		var parts []string
		for _, d := range slices.Sorted(maps.Keys(byDriver)) {
			parts = append(parts, fmt.Sprintf("%s on %s", orUnknown(d), strings.Join(byDriver[d], ", ")))
		}
		label := what
		if strings.HasPrefix(what, "gang ") {
			label = "a running multi-node job's nodes"
		}
		why := fmt.Sprintf("%s run different drivers: %s", label, strings.Join(parts, "; "))
		for _, m := range members {
			if _, ok := driver[m]; ok {
				add(m, why)
			}
		}
	}
	return out
}

// isKnownBad reports whether a finding comes from the published defects.
func isKnownBad(f Finding) bool {
	return slices.ContainsFunc(knownBad, func(k defect) bool { return k.source == f.Source })
}

// runsStack reports whether versions meet a stack's pinned versions.
func runsStack(st gpufleet.Stack, v gpufleet.StackVersions) bool {
	pin, err := gpufleet.PinStack(st.StackVersions())
	return err == nil && pin.Unmet(v) == ""
}

func orUnknown(s string) string {
	if s == "" {
		return "no driver reported"
	}
	return s
}

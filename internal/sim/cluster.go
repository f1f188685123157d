package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// ClusterSpec describes a simulated fleet: groups of identical nodes and
// the teams that share them. It is read from YAML or JSON.
type ClusterSpec struct {
	NodeGroups []NodeGroup `json:"node_groups"`
	Teams      []TeamSpec  `json:"teams,omitempty"`
	// Stacks are named stacks jobs may require (trace column stack):
	// component to version.
	Stacks map[string]map[string]string `json:"stacks,omitempty"`
}

// NodeGroup is Count identical nodes.
type NodeGroup struct {
	Name        string `json:"name"`
	Count       int    `json:"count"`
	GPU         string `json:"gpu"` // catalog id or alias; with Opaque, any name
	GPUsPerNode int    `json:"gpus_per_node"`
	// NVLinkDomainGPUs is the size of an NVLink domain in GPUs (8 for an
	// HGX board, 72 for an NVL72 rack); 0 means PCIe only.
	NVLinkDomainGPUs int `json:"nvlink_domain_gpus,omitempty"`
	// NodesPerRack groups nodes into racks; 0 means no rack labels.
	NodesPerRack int `json:"nodes_per_rack,omitempty"`
	// Opaque marks an undisclosed GPU model that matches only by name.
	Opaque bool              `json:"opaque,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Stack is the nodes' software versions, component to version
	// ("driver": "550.54.15", "cuda": "12.4"), that jobs' stack and
	// requires are matched against.
	Stack map[string]string `json:"stack,omitempty"`
	// Names, when set, names the nodes (len(Names) == Count).
	Names []string `json:"names,omitempty"`
}

// TeamSpec is a tenant of the simulated cluster.
type TeamSpec struct {
	Name  string         `json:"name"`
	Quota map[string]int `json:"quota,omitempty"`
	// Weight is the fair-share weight; 0 means 1.
	Weight float64 `json:"weight,omitempty"`
	// BorrowingLimit caps borrowing beyond quota; nil means no limit.
	BorrowingLimit *int `json:"borrowing_limit,omitempty"`
}

// Cluster is a built fleet, ready for the engine.
type Cluster struct {
	Nodes   []scheduler.Node
	Teams   []scheduler.Team // sorted by name
	Models  map[string]catalog.GPU
	Classes map[string][]string
	Stacks  map[string]gpufleet.StackVersions
}

// GPUs is the number of physical GPUs in the cluster.
func (c *Cluster) GPUs() int {
	n := 0
	for _, nd := range c.Nodes {
		n += len(nd.GPUs)
	}
	return n
}

// ParseClusterSpec reads a cluster spec in YAML or JSON. Unknown fields are
// errors.
func ParseClusterSpec(r io.Reader) (ClusterSpec, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return ClusterSpec{}, err
	}
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		var doc any
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return ClusterSpec{}, fmt.Errorf("%w: cluster spec: %v", gpufleet.ErrInvalid, err)
		}
		// Decode once, strictly, through JSON.
		if data, err = json.Marshal(doc); err != nil {
			return ClusterSpec{}, fmt.Errorf("%w: cluster spec: %v", gpufleet.ErrInvalid, err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var spec ClusterSpec
	if err := dec.Decode(&spec); err != nil {
		return ClusterSpec{}, fmt.Errorf("%w: cluster spec: %v", gpufleet.ErrInvalid, err)
	}
	return spec, nil
}

// maxClusterGPUs bounds a simulated cluster.
const maxClusterGPUs = gpufleet.MaxFleetGPUs

// BuildCluster turns a spec into nodes and teams, resolving GPU models in
// cat. GPU ids are "<node>-gpu<i>".
func BuildCluster(spec ClusterSpec, cat *catalog.Catalog) (*Cluster, error) {
	c := &Cluster{Models: map[string]catalog.GPU{}}
	if len(spec.NodeGroups) == 0 {
		return nil, fmt.Errorf("%w: cluster spec: no node_groups", gpufleet.ErrInvalid)
	}
	names := map[string]bool{}
	gpus := 0
	for gi, g := range spec.NodeGroups {
		where := fmt.Sprintf("node_groups[%d]", gi)
		if g.Name == "" {
			return nil, fmt.Errorf("%w: %s: name is required", gpufleet.ErrInvalid, where)
		}
		if g.Count <= 0 || g.GPUsPerNode <= 0 || g.NVLinkDomainGPUs < 0 || g.NodesPerRack < 0 {
			return nil, fmt.Errorf("%w: %s (%s): count and gpus_per_node must be positive", gpufleet.ErrInvalid, where, g.Name)
		}
		if g.GPUsPerNode > gpufleet.MaxNodeGPUs || g.Count > gpufleet.MaxFleetNodes {
			return nil, fmt.Errorf("%w: %s (%s): at most %d nodes of at most %d GPUs", gpufleet.ErrInvalid, where, g.Name, gpufleet.MaxFleetNodes, gpufleet.MaxNodeGPUs)
		}
		if gpus += g.Count * g.GPUsPerNode; gpus > maxClusterGPUs {
			return nil, fmt.Errorf("%w: %s (%s): more than %d GPUs in the cluster", gpufleet.ErrInvalid, where, g.Name, maxClusterGPUs)
		}
		if len(g.Names) > 0 && len(g.Names) != g.Count {
			return nil, fmt.Errorf("%w: %s (%s): %d names for %d nodes", gpufleet.ErrInvalid, where, g.Name, len(g.Names), g.Count)
		}
		model := g.GPU
		if g.Opaque {
			if model == "" {
				return nil, fmt.Errorf("%w: %s (%s): gpu is required", gpufleet.ErrInvalid, where, g.Name)
			}
			c.Models[model] = catalog.GPU{ID: model, Name: model}
		} else {
			gpu, err := cat.Lookup(g.GPU)
			if err != nil {
				return nil, fmt.Errorf("%s (%s): gpu: %w", where, g.Name, err)
			}
			model = gpu.ID
			c.Models[model] = gpu
		}
		for i := range g.Count {
			name := fmt.Sprintf("%s-%03d", g.Name, i)
			if len(g.Names) > 0 {
				name = g.Names[i]
			}
			if names[name] {
				return nil, fmt.Errorf("%w: %s: duplicate node name %s", gpufleet.ErrInvalid, where, gpufleet.Quote(name))
			}
			names[name] = true
			nd := scheduler.Node{Name: name, State: scheduler.Ready, GPUs: make([]scheduler.GPU, g.GPUsPerNode)}
			if len(g.Labels) > 0 {
				nd.Labels = maps.Clone(g.Labels)
			}
			if len(g.Stack) > 0 {
				st, err := stackVersions(where+".stack", g.Stack)
				if err != nil {
					return nil, err
				}
				nd.Stack = st
			}
			if g.NodesPerRack > 0 {
				nd.Rack = fmt.Sprintf("%s-rack%02d", g.Name, i/g.NodesPerRack)
			}
			for k := range nd.GPUs {
				gpu := scheduler.GPU{ID: fmt.Sprintf("%s-gpu%d", name, k), Index: k, Model: model, State: scheduler.Ready}
				if g.NVLinkDomainGPUs > 1 {
					if g.NVLinkDomainGPUs <= g.GPUsPerNode {
						gpu.NVLinkDomain = fmt.Sprintf("%s-nvl%d", name, k/g.NVLinkDomainGPUs)
					} else {
						gpu.NVLinkDomain = fmt.Sprintf("%s-nvl%d", g.Name, (i*g.GPUsPerNode+k)/g.NVLinkDomainGPUs)
					}
				}
				nd.GPUs[k] = gpu
			}
			c.Nodes = append(c.Nodes, nd)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(spec.Stacks)) {
		if err := gpufleet.ValidateName("stacks", name); err != nil {
			return nil, err
		}
		v, err := stackVersions("stacks."+name, spec.Stacks[name])
		if err != nil {
			return nil, err
		}
		if c.Stacks == nil {
			c.Stacks = map[string]gpufleet.StackVersions{}
		}
		c.Stacks[name] = v
	}
	seen := map[string]bool{}
	for ti, t := range spec.Teams {
		if t.Name == "" || seen[t.Name] {
			return nil, fmt.Errorf("%w: teams[%d]: empty or duplicate name %s", gpufleet.ErrInvalid, ti, gpufleet.Quote(t.Name))
		}
		seen[t.Name] = true
		if t.Weight < 0 {
			return nil, fmt.Errorf("%w: teams[%d] (%s): negative weight", gpufleet.ErrInvalid, ti, t.Name)
		}
		team := scheduler.Team{Name: t.Name, Quota: maps.Clone(t.Quota), Weight: t.Weight, BorrowingLimit: -1}
		if team.Weight == 0 {
			team.Weight = 1
		}
		if t.BorrowingLimit != nil {
			team.BorrowingLimit = *t.BorrowingLimit
		}
		c.Teams = append(c.Teams, team)
	}
	slices.SortFunc(c.Teams, func(a, b scheduler.Team) int { return cmpString(a.Name, b.Name) })
	return c, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ParseOpenbNodes reads the openb node list (openb_node_list_all_node.csv)
// into a cluster spec with one group per run of identical nodes, keeping the
// trace's node names. CPU-only nodes are left out (cpuOnly counts them).
// V100 nodes get one NVLink domain per node (SXM2 boards); the other types
// are PCIe cards, and the undisclosed G1/G2/G3 are opaque and PCIe-only.
func ParseOpenbNodes(r io.Reader, opt ReadOptions) (spec ClusterSpec, cpuOnly int, err error) {
	opaque := map[string]catalog.GPU{}
	_, err = readCSV(r, opt, []string{"sn", "gpu", "model"}, func(rw row) error {
		name := rw.get("sn")
		if name == "" {
			return errors.New("sn: empty")
		}
		gpus, err := rw.int("gpu", gpufleet.MaxNodeGPUs)
		if err != nil {
			return err
		}
		if gpus == 0 {
			cpuOnly++
			return nil
		}
		t := rw.get("model")
		if t == "" {
			return errors.New("model: empty for a GPU node")
		}
		model := openbModel(t, opaque)
		_, isOpaque := opaque[model]
		if n := len(spec.NodeGroups); n > 0 {
			last := &spec.NodeGroups[n-1]
			if last.GPU == model && last.GPUsPerNode == gpus {
				last.Count++
				last.Names = append(last.Names, name)
				return nil
			}
		}
		g := NodeGroup{Name: fmt.Sprintf("openb-%d-%s", len(spec.NodeGroups), t), Count: 1, GPU: model, GPUsPerNode: gpus, Opaque: isOpaque, Names: []string{name}}
		if t == "V100M16" || t == "V100M32" {
			g.NVLinkDomainGPUs = gpus
		}
		spec.NodeGroups = append(spec.NodeGroups, g)
		return nil
	})
	return spec, cpuOnly, err
}

// stackVersions reads a spec's component-to-version map, checking each.
func stackVersions(field string, in map[string]string) (gpufleet.StackVersions, error) {
	out := gpufleet.StackVersions{}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		c, err := gpufleet.ParseStackComponent(k)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if _, err := gpufleet.ParseSoftwareVersion(in[k]); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", field, k, err)
		}
		out[c] = in[k]
	}
	return out, nil
}

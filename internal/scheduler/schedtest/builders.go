// Package schedtest drives the scheduler from scenario scripts and builds
// fixtures for its tests: fluent node and job builders, a mini catalog of
// real models, and the Harness that runs testdata/scenarios/*.txt.
package schedtest

import (
	"fmt"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// T0 is the base time of scenarios: "at=10s" means T0 plus ten seconds.
var T0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// ModelIDs are the catalog models of the mini catalog.
var ModelIDs = []string{"h100-sxm-80gb", "a100-sxm-80gb", "l4", "h200-sxm-141gb", "v100-sxm2-16gb", "p100-pcie-16gb", "k80"}

// Opaque is a model known only by name, as in traces that hide GPU types.
const Opaque = "opaque-t1"

// Models returns the mini catalog: seven real models from catalog.Default()
// plus one opaque model with only ID and Name.
func Models() map[string]catalog.GPU {
	c := catalog.Default()
	out := map[string]catalog.GPU{}
	for _, id := range ModelIDs {
		g, err := c.Lookup(id)
		if err != nil {
			panic(fmt.Sprintf("schedtest: catalog lacks %s: %v", id, err))
		}
		out[id] = g
	}
	out[Opaque] = catalog.GPU{ID: Opaque, Name: Opaque}
	return out
}

// NodeBuilder builds a scheduler.Node.
type NodeBuilder struct {
	n scheduler.Node
}

// MakeNode starts a ready node with gpus GPUs of one model, all in one
// NVLink domain named after the node.
func MakeNode(name, model string, gpus int) *NodeBuilder {
	b := &NodeBuilder{n: scheduler.Node{Name: name, State: scheduler.Ready}}
	for i := range gpus {
		b.n.GPUs = append(b.n.GPUs, scheduler.GPU{ID: fmt.Sprintf("%s-g%d", name, i), Index: i, Model: model,
			State: scheduler.Ready, NVLinkDomain: name + "-d0"})
	}
	return b
}

// Domains splits the GPUs into NVLink domains of size GPUs each; 0 or 1
// leaves them on PCIe only.
func (b *NodeBuilder) Domains(size int) *NodeBuilder {
	for i := range b.n.GPUs {
		if size <= 1 {
			b.n.GPUs[i].NVLinkDomain = ""
			continue
		}
		b.n.GPUs[i].NVLinkDomain = fmt.Sprintf("%s-d%d", b.n.Name, i/size)
	}
	return b
}

// Rack sets the node's rack.
func (b *NodeBuilder) Rack(r string) *NodeBuilder { b.n.Rack = r; return b }

// Block sets the node's network block.
func (b *NodeBuilder) Block(x string) *NodeBuilder { b.n.Block = x; return b }

// Stack sets the node's software versions.
func (b *NodeBuilder) Stack(v gpufleet.StackVersions) *NodeBuilder {
	b.n.Stack = v
	return b
}

// Label adds a node label.

func (b *NodeBuilder) Label(k, v string) *NodeBuilder {
	if b.n.Labels == nil {
		b.n.Labels = map[string]string{}
	}
	b.n.Labels[k] = v
	return b
}

// State sets the node's state.
func (b *NodeBuilder) State(s scheduler.GPUState) *NodeBuilder { b.n.State = s; return b }

// GPUState sets one GPU's state.
func (b *NodeBuilder) GPUState(index int, s scheduler.GPUState) *NodeBuilder {
	b.n.GPUs[index].State = s
	return b
}

// MIG puts the first count GPUs in MIG mode with instances instances of
// profile each.
func (b *NodeBuilder) MIG(count int, profile string, instances int) *NodeBuilder {
	for i := 0; i < count && i < len(b.n.GPUs); i++ {
		g := &b.n.GPUs[i]
		g.MIG = nil
		for k := range instances {
			g.MIG = append(g.MIG, scheduler.MIGInstance{ID: fmt.Sprintf("%s-m%d", g.ID, k), Profile: profile})
		}
	}
	return b
}

// Obj returns the node.
func (b *NodeBuilder) Obj() scheduler.Node { return b.n }

// JobBuilder builds a scheduler.Job.
type JobBuilder struct {
	j scheduler.Job
}

// MakeJob starts an exclusive training job of gpus GPUs submitted at T0
// with a one-hour estimate.
func MakeJob(id, team string, gpus int) *JobBuilder {
	return &JobBuilder{j: scheduler.Job{ID: id, Team: team, Priority: gpufleet.Training, Submitted: T0,
		Estimate: time.Hour, Resources: gpufleet.Resources{GPUs: gpus}}}
}

// Priority sets the class.
func (b *JobBuilder) Priority(p gpufleet.Priority) *JobBuilder { b.j.Priority = p; return b }

// Estimate sets the estimated run time.
func (b *JobBuilder) Estimate(d time.Duration) *JobBuilder { b.j.Estimate = d; return b }

// Submitted sets the submit time relative to T0.
func (b *JobBuilder) Submitted(d time.Duration) *JobBuilder { b.j.Submitted = T0.Add(d); return b }

// Nodes spreads the job over n nodes.
func (b *JobBuilder) Nodes(n int) *JobBuilder { b.j.Resources.Nodes = n; return b }

// Models sets the model allowlist.
func (b *JobBuilder) Models(m ...string) *JobBuilder { b.j.Resources.GPUModels = m; return b }

// MIG asks for MIG instances of a profile.
func (b *JobBuilder) MIG(profile string) *JobBuilder {
	b.j.Resources.Sharing = gpufleet.Sharing{Kind: gpufleet.MIG, Profile: profile}
	return b
}

// TimeSlice asks for a time-slice share of each GPU.
func (b *JobBuilder) TimeSlice(f float64) *JobBuilder {
	b.j.Resources.Sharing = gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: f}
	return b
}

// Prefer sets the model preference: "cheapest" or "fastest".
func (b *JobBuilder) Prefer(p gpufleet.Preference) *JobBuilder { b.j.Resources.Prefer = p; return b }

// NVLink requires one NVLink domain.
func (b *JobBuilder) NVLink() *JobBuilder { b.j.Resources.Interconnect = gpufleet.NVLink; return b }

// Preemptible marks the job preemptible with a grace period.
func (b *JobBuilder) Preemptible(grace time.Duration) *JobBuilder {
	b.j.Preemptible, b.j.Grace = true, grace
	return b
}

// Running places the job as running since T0+d.
func (b *JobBuilder) Running(d time.Duration, p ...scheduler.Placement) *JobBuilder {
	b.j.Started = T0.Add(d)
	b.j.Placement = p
	return b
}

// Obj returns the job.
func (b *JobBuilder) Obj() scheduler.Job { return b.j }

package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Fabric is what an all-reduce across nodes crosses between them.
type Fabric string

// Fabrics.
const (
	// FabricNetwork is the scale-out network (InfiniBand or RoCE NICs,
	// one rail per GPU on HGX systems).
	FabricNetwork Fabric = "network"
	// FabricNVLink is a multi-node NVLink domain (GB200 NVL72's trays):
	// the nodes' GPUs share one NVLink fabric.
	FabricNVLink Fabric = "nvlink"
)

// MaxGroupNodes bounds the nodes of one all-reduce across nodes: a rack
// or an NVLink domain (72 GPUs in 18 trays for GB200 NVL72) with room.
const MaxGroupNodes = 256

// MaxTokenBytes bounds a rendezvous token: NCCL's ncclUniqueId is 128
// bytes (NCCL_UNIQUE_ID_BYTES in nccl.h).
const MaxTokenBytes = 256

// GroupRun is one node's part in an all-reduce across nodes, as
// nccl-tests runs it across hosts: every GPU of every node one rank, the
// nodes in rank order, rank 0's rendezvous token handed to the others.
type GroupRun struct {
	// ID names the run; every member's measurement carries it.
	ID string `json:"id"`
	// Nodes are the members in rank order: node i holds ranks
	// i*GPUsPerNode to (i+1)*GPUsPerNode-1.
	Nodes []string `json:"nodes"`
	// Rank is this node's index in Nodes.
	Rank        int    `json:"rank"`
	GPUsPerNode int    `json:"gpus_per_node"`
	Fabric      Fabric `json:"fabric"`
	// Token is what rank 0 opened for the others to join (NCCL's unique
	// id); absent in the order that asks rank 0 to open it.
	Token []byte `json:"token,omitempty"`
}

// Ranks is how many GPUs the run spans.
func (g GroupRun) Ranks() int { return len(g.Nodes) * g.GPUsPerNode }

// Validate checks a run as an order carries it across a trust boundary.
func (g GroupRun) Validate(field string) error {
	bad := func(sub, format string, args ...any) error {
		return fmt.Errorf("%w: %s.%s: %s", gpufleet.ErrInvalid, field, sub, fmt.Sprintf(format, args...))
	}
	if err := gpufleet.CheckText(field+".id", g.ID, maxText, false); err != nil {
		return err
	}
	if len(g.Nodes) < 2 || len(g.Nodes) > MaxGroupNodes {
		return bad("nodes", "%d nodes: expected 2 to %d", len(g.Nodes), MaxGroupNodes)
	}
	for i, n := range g.Nodes {
		if err := gpufleet.CheckText(fmt.Sprintf("%s.nodes[%d]", field, i), n, maxText, false); err != nil {
			return err
		}
		if n == "" || slices.Contains(g.Nodes[:i], n) {
			return bad(fmt.Sprintf("nodes[%d]", i), "%s: empty or listed twice", gpufleet.Quote(n))
		}
	}
	if g.Rank < 0 || g.Rank >= len(g.Nodes) {
		return bad("rank", "%d: expected 0 to %d", g.Rank, len(g.Nodes)-1)
	}
	if g.GPUsPerNode < 1 || g.GPUsPerNode > gpufleet.MaxNodeGPUs {
		return bad("gpus_per_node", "%d: expected 1 to %d", g.GPUsPerNode, gpufleet.MaxNodeGPUs)
	}
	if g.Fabric != FabricNetwork && g.Fabric != FabricNVLink {
		return bad("fabric", "%s: expected network or nvlink", gpufleet.Quote(string(g.Fabric)))
	}
	if len(g.Token) > MaxTokenBytes {
		return bad("token", "%d bytes, at most %d", len(g.Token), MaxTokenBytes)
	}
	return nil
}

// GroupName is the figure name of an all-reduce across nodes of one
// shape: "allreduce-2x8" over the network, "allreduce-2x8-nvlink" in an
// NVLink domain. Figures compare only within one name (and model).
func GroupName(nodes, gpusPerNode int, f Fabric) string {
	n := fmt.Sprintf("allreduce-%dx%d", nodes, gpusPerNode)
	if f == FabricNVLink {
		n += "-nvlink"
	}
	return n
}

// GroupBackend runs all-reduces across nodes. The simulated GPUs model
// them; the CUDA backend runs them through NCCL.
type GroupBackend interface {
	// GroupToken opens the rendezvous that the other ranks join (NCCL's
	// unique id, whose bootstrap listens in this process).
	GroupToken(ctx context.Context) ([]byte, error)
	// MeasureGroup runs this node's part of g on the GPUs o selects (all
	// of them: g.GPUsPerNode) and returns the bus bandwidth each timed
	// run reached as this node saw it.
	MeasureGroup(ctx context.Context, g GroupRun, o Options, progress func(string)) (Measurement, error)
}

// CombineGroup is the figure of an all-reduce across nodes from every
// member's measurement (parts[i] from g.Nodes[i]): each run at the pace
// of the slowest member, since a ring collective moves at the rate of
// its slowest link. It returns one measurement per member, each on that
// member's first GPU, carrying the run's id and members, so that each
// node's history holds the figure and the fleet rule counts the run once.
func CombineGroup(g GroupRun, parts []Measurement) ([]Measurement, error) {
	if len(parts) != len(g.Nodes) {
		return nil, fmt.Errorf("%w: %d measurements for %d nodes", gpufleet.ErrInvalid, len(parts), len(g.Nodes))
	}
	runs := 0
	for i, p := range parts {
		if len(p.Rates) == 0 {
			return nil, fmt.Errorf("%w: %s measured no run", gpufleet.ErrInvalid, g.Nodes[i])
		}
		if i == 0 || len(p.Rates) < runs {
			runs = len(p.Rates)
		}
	}
	rates := make([]float64, runs)
	for r := range runs {
		for i, p := range parts {
			if i == 0 || p.Rates[r] < rates[r] {
				rates[r] = p.Rates[r]
			}
		}
	}
	out := make([]Measurement, len(parts))
	for i, p := range parts {
		m := p
		m.Name, m.Test = GroupName(len(g.Nodes), g.GPUsPerNode, g.Fabric), AllReduce
		m.GPUs, m.Nodes, m.Group, m.Members, m.Fabric = g.Ranks(), len(g.Nodes), g.ID, slices.Clone(g.Nodes), g.Fabric
		m.Rates = slices.Clone(rates)
		m.Peer = nil
		out[i] = m
	}
	return out, nil
}

// GroupState is where an all-reduce across nodes stands.
type GroupState string

// Group states, in order.
const (
	// GroupRendezvous: rank 0 is opening the rendezvous.
	GroupRendezvous GroupState = "rendezvous"
	// GroupRunning: every member has its order; parts are arriving.
	GroupRunning GroupState = "running"
	// GroupDone: every member reported; the figure is stored.
	GroupDone GroupState = "done"
	// GroupFailed: a member could not take part, or did not answer in
	// time; Detail says which and why.
	GroupFailed GroupState = "failed"
)

// GroupReport is an all-reduce across nodes as the server follows it.
type GroupReport struct {
	ID          string     `json:"id"`
	State       GroupState `json:"state"`
	Nodes       []string   `json:"nodes"`
	GPUModel    string     `json:"gpu_model"`
	GPUsPerNode int        `json:"gpus_per_node"`
	Fabric      Fabric     `json:"fabric"`
	Level       Level      `json:"level"`
	Started     time.Time  `json:"started"`
	Ended       *time.Time `json:"ended,omitempty"`
	// Reported are the members whose part has arrived.
	Reported []string `json:"reported"`
	// Detail says why a run failed, in words.
	Detail string `json:"detail,omitempty"`
	// Figure is the run's figure once done, judged against the other runs
	// of the same shape on the same GPU model (Fleet).
	Figure *Figure     `json:"figure,omitempty"`
	Fleet  *Comparison `json:"fleet,omitempty"`
}

package simgpu

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/bench"
)

var _ bench.GroupBackend = (*Backend)(nil)

// The scale-out network of a simulated node, for the all-reduce across
// nodes:
const (
	// RailBytesPerSGen5 is one GPU's rail on an HGX node whose GPUs are
	// PCIe Gen5 (H100, H200, B200): a 400 Gb/s ConnectX-7 per GPU, as in
	// the DGX H100 user guide's compute fabric (8 x 400 Gb/s).
	RailBytesPerSGen5 = 50e9
	// RailBytesPerSGen4 is the same on Gen4 HGX nodes (A100): a 200 Gb/s
	// HDR ConnectX-6 per GPU, as in the DGX A100 user guide (8 x 200 Gb/s).
	RailBytesPerSGen4 = 25e9
	// PCIeServerNetworkBytesPerS is a server of PCIe cards without an
	// NVLink domain (L4, L40S): one 200 Gb/s NIC for the node. A
	// modelling choice; such servers vary from 25 to 400 Gb/s.
	PCIeServerNetworkBytesPerS = 25e9
	// NetworkEfficiency is the bus bandwidth NCCL reaches of the nodes'
	// network line rate: nccl-tests#119 measured 84.8 of 100 GB/s busbw
	// for 4 x HDR 200 Gb/s per 8 A100s.
	NetworkEfficiency = 0.85
	// HostNetworkBytesPerS is what is left when a PCIe server's one NIC is
	// down: the management network (10 GbE), through the host.
	HostNetworkBytesPerS = 1.25e9
)

// GroupToken stands for NCCL's unique id: 128 random bytes, which the
// simulated members carry but need not use.
func (b *Backend) GroupToken(context.Context) ([]byte, error) {
	tok := make([]byte, 128)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	return tok, nil
}

// MeasureGroup models this node's part of an all-reduce across nodes: a
// ring through every GPU of every node runs at the pace of its slowest
// link, which is the node's own ring (its NVLink or PCIe, as Measure's
// all-reduce) or what it sends between nodes: in an NVLink domain the
// same fabric, over the network every rail that is up (one NIC per GPU on
// HGX nodes, nic-down faults take theirs out) at NetworkEfficiency. The
// server takes the slowest member's rate for each run.
func (b *Backend) MeasureGroup(ctx context.Context, g bench.GroupRun, o bench.Options, progress func(string)) (bench.Measurement, error) {
	if progress == nil {
		progress = func(string) {}
	}
	if err := g.Validate("group"); err != nil {
		return bench.Measurement{}, err
	}
	b.mu.Lock()
	var cards []benchCard
	for _, d := range b.devs {
		if !o.Selects(d.info.Index) {
			continue
		}
		b.advance(d)
		if d.gone || d.info.MIGMode {
			b.mu.Unlock()
			return bench.Measurement{}, fmt.Errorf("gpu %d is off the bus or in MIG mode: every GPU of the node takes part", d.info.Index)
		}
		cards = append(cards, b.benchCard(d))
	}
	b.mu.Unlock()
	if len(cards) != g.GPUsPerNode {
		return bench.Measurement{}, fmt.Errorf("%d GPUs to measure, the run has %d a node", len(cards), g.GPUsPerNode)
	}
	if err := ctx.Err(); err != nil {
		return bench.Measurement{}, err
	}
	rate := b.ringBusBW(cards)
	if len(cards) == 1 {
		rate = 1e18 // no link inside the node
	}
	path := "NVLink across the domain"
	if g.Fabric == bench.FabricNetwork {
		net := networkBytesPerS(cards) * NetworkEfficiency
		rate = min(rate, net)
		path = fmt.Sprintf("the network (%s of rails up)", bench.Human(net/NetworkEfficiency, bench.BytesPerS))
	}
	size := "512 MiB"
	if o.Quick || o.Level == bench.LevelQuick {
		size = "128 MiB"
	}
	runs := o.Runs()
	progress(fmt.Sprintf("allreduce rank %d of %d nodes x %d gpus over %s: %s x%d", g.Rank, len(g.Nodes), g.GPUsPerNode, path, size, runs))
	c := &cards[0]
	m := bench.Measurement{Name: bench.GroupName(len(g.Nodes), g.GPUsPerNode, g.Fabric), Test: bench.AllReduce,
		GPU: c.index, UUID: c.uuid, Model: c.model.ID, GPUs: g.Ranks(), Nodes: len(g.Nodes), Group: g.ID, Members: g.Nodes, Fabric: g.Fabric,
		Size: size + " float32 sum", Unit: bench.BytesPerS, Check: "sums equal n(n+1)/2"}
	for range runs {
		m.Rates = append(m.Rates, rate*c.card*(1+RunNoise*c.rng.NormFloat64()))
	}
	return m, nil
}

// networkBytesPerS is the line rate cards' node sends to other nodes
// with: a rail per GPU on an HGX node, one NIC on a server of PCIe cards.
func networkBytesPerS(cards []benchCard) float64 {
	g := cards[0].model
	if g.InterconnectKind != catalog.InterconnectNVLink || g.DomainSize <= 1 {
		for _, c := range cards {
			if c.nicDown {
				return HostNetworkBytesPerS
			}
		}
		return PCIeServerNetworkBytesPerS
	}
	rail := RailBytesPerSGen4
	if g.PCIeGen >= 5 {
		rail = RailBytesPerSGen5
	}
	up := 0
	for _, c := range cards {
		if !c.nicDown {
			up++
		}
	}
	if up == 0 {
		return HostNetworkBytesPerS
	}
	return float64(up) * rail
}

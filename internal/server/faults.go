package server

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

var (
	_ api.FaultService    = (*Server)(nil)
	_ api.AgentLogService = (*Server)(nil)
)

// agentExtras holds what the server relays to agents beside assignments
// (fault orders) and serialises log intake. Its zero value is ready.
type agentExtras struct {
	mu     sync.Mutex
	seq    int64
	faults map[string][]api.FaultOrder // pending per node, until acknowledged
	// benches are bench orders pending per node, until reported.
	benches map[string][]api.BenchOrder
	// groups are the all-reduces across nodes this replica follows.
	groups map[string]*groupBench
	logMu  sync.Mutex
}

// InjectFault queues a fault for a simulated node's GPU; the agent applies
// it on its next heartbeat. Nodes reading real GPUs (NVML) refuse.
func (s *Server) InjectFault(ctx context.Context, p api.Principal, node string, r api.FaultRequest) (api.FaultOrder, error) {
	if err := requireAdmin(p); err != nil {
		return api.FaultOrder{}, err
	}
	if r.GPU == nil {
		return api.FaultOrder{}, fmt.Errorf("%w: gpu: required (a GPU index)", gpufleet.ErrInvalid)
	}
	switch {
	case (r.XID != 0) == (r.Kind != ""):
		return api.FaultOrder{}, fmt.Errorf("%w: give either xid or kind", gpufleet.ErrInvalid)
	case r.XID < 0:
		return api.FaultOrder{}, fmt.Errorf("%w: xid %d: expected a positive number", gpufleet.ErrInvalid, r.XID)
	case r.Kind != "" && !slices.Contains(api.FaultKinds, r.Kind):
		return api.FaultOrder{}, fmt.Errorf("%w: kind %s: expected one of %v", gpufleet.ErrInvalid, gpufleet.Quote(string(r.Kind)), api.FaultKinds)
	}
	if err := s.faultTarget(ctx, node, *r.GPU); err != nil {
		return api.FaultOrder{}, err
	}
	o := s.queueFault(api.FaultOrder{Node: node, GPU: *r.GPU, XID: r.XID, Kind: r.Kind})
	what := string(r.Kind)
	if r.XID != 0 {
		what = fmt.Sprintf("XID %d", r.XID)
	}
	s.faultEvent(ctx, p, o, fmt.Sprintf("injected %s into gpu %d (simulated; fault %s)", what, o.GPU, o.ID))
	return o, nil
}

// faultEvent records a fault order in the event log, so that what follows
// (health findings, drains) can be read against the fault that caused it.
// The order is queued either way: a failed write is logged.
func (s *Server) faultEvent(ctx context.Context, p api.Principal, o api.FaultOrder, detail string) {
	kind := "node.fault_injected"
	if o.Clear {
		kind = "node.fault_cleared"
	}
	if err := s.st.AppendEvent(ctx, gpufleet.Event{At: s.now(), Actor: actor(p), Kind: kind, Object: o.Node, Detail: detail}); err != nil {
		s.log.Warn("fault queued but not recorded as an event", "fault", o.ID, "err", err)
	}
}

// ClearFaults queues the end of every fault of a simulated node's GPU.
func (s *Server) ClearFaults(ctx context.Context, p api.Principal, node string, gpu int) (api.FaultOrder, error) {
	if err := requireAdmin(p); err != nil {
		return api.FaultOrder{}, err
	}
	if err := s.faultTarget(ctx, node, gpu); err != nil {
		return api.FaultOrder{}, err
	}
	o := s.queueFault(api.FaultOrder{Node: node, GPU: gpu, Clear: true})
	s.faultEvent(ctx, p, o, fmt.Sprintf("cleared the faults of gpu %d (simulated; fault %s)", gpu, o.ID))
	return o, nil
}

// faultTarget checks that node exists, is simulated and has GPU index gpu.
func (s *Server) faultTarget(ctx context.Context, node string, gpu int) error {
	n, err := s.st.Node(ctx, node)
	if err != nil {
		return err
	}
	if b := n.Labels["backend"]; b != "sim" {
		if b == "" {
			b = "unknown"
		}
		return fmt.Errorf("%w: node %s reads real GPUs (backend %s): faults can only be injected into simulated GPUs (gpufleet agent --backend sim)",
			gpufleet.ErrUnsupported, node, b)
	}
	if !slices.ContainsFunc(n.GPUs, func(g gpufleet.NodeGPU) bool { return g.Index == gpu }) {
		return fmt.Errorf("%w: node %s has no gpu %d", gpufleet.ErrNotFound, node, gpu)
	}
	return nil
}

func (s *Server) queueFault(o api.FaultOrder) api.FaultOrder {
	x := &s.agentExt
	x.mu.Lock()
	defer x.mu.Unlock()
	x.seq++
	o.ID = "f-" + strconv.FormatInt(x.seq, 10) + "-" + randomString(4)
	if x.faults == nil {
		x.faults = map[string][]api.FaultOrder{}
	}
	x.faults[o.Node] = append(x.faults[o.Node], o)
	s.log.Info("fault queued", "node", o.Node, "gpu", o.GPU, "kind", o.Kind, "xid", o.XID, "clear", o.Clear, "id", o.ID)
	return o
}

// relayFaults drops the orders node acknowledged and returns the rest, in
// the order they were given.
func (s *Server) relayFaults(node string, acks []string) []api.FaultOrder {
	x := &s.agentExt
	x.mu.Lock()
	defer x.mu.Unlock()
	pending := slices.DeleteFunc(x.faults[node], func(o api.FaultOrder) bool { return slices.Contains(acks, o.ID) })
	if len(pending) == 0 {
		delete(x.faults, node)
		return nil
	}
	x.faults[node] = pending
	return slices.Clone(pending)
}

package server

import (
	"context"
	"fmt"
	"slices"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// PutRack creates or replaces a rack (admin).
func (s *Server) PutRack(ctx context.Context, p api.Principal, r gpufleet.Rack) (gpufleet.Rack, error) {
	if err := requireAdmin(p); err != nil {
		return gpufleet.Rack{}, err
	}
	r.Members, r.RatedWatts, r.DrawWatts = nil, 0, nil
	if err := s.st.PutRack(ctx, r, actor(p)); err != nil {
		return gpufleet.Rack{}, err
	}
	s.nudge()
	return s.rack(ctx, r.Name)
}

// DeleteRack removes a rack (admin): its nodes have no budget any more.
func (s *Server) DeleteRack(ctx context.Context, p api.Principal, name string) error {
	if err := requireAdmin(p); err != nil {
		return err
	}
	if err := s.st.DeleteRack(ctx, name, actor(p)); err != nil {
		return err
	}
	s.nudge()
	return nil
}

// Racks lists the racks with their members, rated draw and projected
// draw now.
func (s *Server) Racks(ctx context.Context, p api.Principal) ([]gpufleet.Rack, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	racks, err := s.st.Racks(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	members := rackMembers(racks, nodes)
	byName := map[string]gpufleet.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	for i := range racks {
		r := &racks[i]
		r.Members = members[r.Name]
		var ns []gpufleet.Node
		for _, m := range r.Members {
			ns = append(ns, byName[m])
		}
		r.RatedWatts = s.ratedDraw(ns)
		if d, ok := s.projectedDraw(ns, nil); ok {
			r.DrawWatts = &d
		}
	}
	return racks, nil
}

// rack is one rack as Racks gives it.
func (s *Server) rack(ctx context.Context, name string) (gpufleet.Rack, error) {
	all, err := s.Racks(ctx, api.Principal{Role: gpufleet.RoleAdmin})
	if err != nil {
		return gpufleet.Rack{}, err
	}
	i := slices.IndexFunc(all, func(r gpufleet.Rack) bool { return r.Name == name })
	if i < 0 {
		return gpufleet.Rack{}, fmt.Errorf("%w: rack %s", gpufleet.ErrNotFound, gpufleet.Quote(name))
	}
	return all[i], nil
}

// rackMembers is each rack's nodes: those it lists, then those whose rack
// label names it and that no rack lists.
func rackMembers(racks []gpufleet.Rack, nodes []gpufleet.Node) map[string][]string {
	listed := map[string]string{}
	out := map[string][]string{}
	for _, r := range racks {
		for _, n := range r.Nodes {
			if _, ok := listed[n]; !ok {
				listed[n] = r.Name
			}
		}
	}
	known := map[string]bool{}
	for _, r := range racks {
		known[r.Name] = true
	}
	for _, n := range nodes {
		rack, ok := listed[n.Name]
		if !ok {
			rack = n.Labels["rack"]
		}
		if known[rack] {
			out[rack] = append(out[rack], n.Name)
		}
	}
	return out
}

// nodeModel is the catalog entry of a node's GPUs (its first GPU's).
func (s *Server) nodeModel(n gpufleet.Node) catalog.GPU {
	if len(n.GPUs) == 0 {
		return catalog.GPU{}
	}
	g, err := s.cat.Lookup(n.GPUs[0].Model)
	if err != nil {
		return catalog.GPU{ID: n.GPUs[0].Model, Name: n.GPUs[0].Model}
	}
	return g
}

// ratedDraw is what nodes draw at their rating (GPUs at TDP and host
// overheads).
func (s *Server) ratedDraw(nodes []gpufleet.Node) gpufleet.Watts {
	var w gpufleet.Watts
	for _, n := range nodes {
		w += power.RatedNode(s.nodeModel(n), len(n.GPUs))
	}
	return w
}

// heldGPU is who holds a GPU: the job's priority class and the attempt.
type heldGPU struct {
	class   gpufleet.Priority
	attempt string
}

// heldBy maps each GPU (physical UUID or MIG instance) an active attempt
// holds to its job's priority class and the attempt.
func heldBy(jobs []gpufleet.Job) map[string]heldGPU {
	out := map[string]heldGPU{}
	for _, j := range jobs {
		if a := activeAttempt(j); a != nil {
			for _, n := range a.Nodes {
				for _, u := range n.GPUs {
					out[u] = heldGPU{class: j.Priority, attempt: a.ID}
				}
			}
		}
	}
	return out
}

// projectedDraw is nodes' projected draw now (power.ProjectRack): the
// measured draw of every GPU the leader has a reading of, a held GPU (held;
// nil: the holders the leader last recorded) charged its limit until
// measured under its holder and then its peak with the margin
// (power.Charging), idle draws where there is no reading, and host
// overheads. ok is false on a replica that does not lead: it has no live
// readings.
func (s *Server) projectedDraw(nodes []gpufleet.Node, held map[string]heldGPU) (gpufleet.Watts, bool) {
	leads := s.Leader()
	return power.ProjectRack(s.nodeReadings(nodes, held), s.charging()), leads
}

// charging is how the server charges held GPUs (Config.PowerPeakMargin).
func (s *Server) charging() power.Charging {
	return power.Charging{PeakMargin: s.cfg.PowerPeakMargin}
}

// nodeReadings is what power.ProjectRack reads of nodes: their host
// overheads and each GPU's model, latest reading, holder's class and
// measured peak.
func (s *Server) nodeReadings(nodes []gpufleet.Node, held map[string]heldGPU) []power.NodeReading {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	readings := make([]power.NodeReading, 0, len(nodes))
	s.tele.read(func(v gpuView) {
		for _, n := range nodes {
			model := s.nodeModel(n)
			nr := power.NodeReading{HostWatts: float64(power.HostOverhead(model, len(n.GPUs)))}
			var samples []api.GPUSample
			if ln := s.nodes[n.Name]; ln != nil {
				samples = ln.samples
			}
			for _, g := range n.GPUs {
				gm := model
				if g.Model != model.ID {
					gm, _ = s.cat.Lookup(g.Model)
				}
				r := power.GPUReading{Model: gm}
				if i := slices.IndexFunc(samples, func(x api.GPUSample) bool { return x.UUID == g.UUID }); i >= 0 {
					r.Watts = samples[i].PowerWatts
				}
				switch {
				case held != nil:
					// The peak counts when it was read under one of the
					// GPU's holders now (it may have changed since the
					// last snapshot).
					h, ok := held[g.UUID]
					r.Class, r.Held = h.class, ok
					same := ok && h.attempt == v.info(g.UUID).holder
					for _, m := range g.MIGInstances {
						if h, ok := held[m.UUID]; ok {
							if !r.Held {
								r.Class, r.Held = h.class, true
							}
							same = same || h.attempt == v.info(g.UUID).holder
						}
					}
					if same {
						r.PeakWatts = v.peak(g.UUID)
					}
				case v.info(g.UUID).team != "":
					r.Held, r.Class = true, v.info(g.UUID).class
					r.PeakWatts = v.peak(g.UUID)
				}
				nr.GPUs = append(nr.GPUs, r)
			}
			readings = append(readings, nr)
		}
	})
	return readings
}

// racksPUE is the PUE of each node in a rack that gives one.
func racksPUE(racks []gpufleet.Rack, members map[string][]string) map[string]float64 {
	out := map[string]float64{}
	for _, r := range racks {
		if r.PUE == nil {
			continue
		}
		for _, n := range members[r.Name] {
			out[n] = *r.PUE
		}
	}
	return out
}

// powerInput gives the scheduler the racks with a budget, their members'
// Node.Rack, their projected draw and what placed GPUs add.
func (s *Server) powerInput(ctx context.Context, in *scheduler.Input, nodes []gpufleet.Node, held map[string]heldGPU) error {
	racks, err := s.st.Racks(ctx)
	if err != nil {
		return err
	}
	if len(racks) == 0 {
		s.metrics.setRacks(nil)
		s.acct.setNodePUE(nil)
		return nil
	}
	members := rackMembers(racks, nodes)
	rackOf := map[string]string{}
	for r, ns := range members {
		for _, n := range ns {
			rackOf[n] = r
		}
	}
	s.acct.setNodePUE(racksPUE(racks, members))
	for i := range in.Nodes {
		if r, ok := rackOf[in.Nodes[i].Name]; ok {
			in.Nodes[i].Rack = r
		}
	}
	byName := map[string]gpufleet.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	inputs := make([]power.RackInput, 0, len(racks))
	for _, r := range racks {
		var ns []gpufleet.Node
		for _, m := range members[r.Name] {
			ns = append(ns, byName[m])
		}
		inputs = append(inputs, power.RackInput{Name: r.Name, BudgetWatts: r.PowerBudgetWatts,
			ProductionReserveW: r.ProductionReserveWatts, Nodes: s.nodeReadings(ns, held)})
	}
	// The simulator builds its input with the same function.
	rs, draw, projected := power.SchedulerRacks(inputs, in.Models, s.charging())
	in.Racks, in.GPUDraw = append(in.Racks, rs...), draw
	gauges := make([]rackPower, 0, len(racks))
	for i, r := range racks {
		var ns []gpufleet.Node
		for _, m := range members[r.Name] {
			ns = append(ns, byName[m])
		}
		gauges = append(gauges, rackPower{name: r.Name, budget: r.PowerBudgetWatts, reserve: r.ProductionReserveWatts, rated: s.ratedDraw(ns), projected: projected[i]})
	}
	s.metrics.setRacks(gauges)
	return nil
}

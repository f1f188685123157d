package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// rackStore is what racks reads and writes.
type rackStore interface {
	Racks(ctx context.Context) ([]gpufleet.Rack, error)
	Nodes(ctx context.Context) ([]gpufleet.Node, error)
	PutRack(ctx context.Context, r gpufleet.Rack, actor string) error
	AssignRack(ctx context.Context, node, rack, actor string) (string, error)
	DeleteRack(ctx context.Context, name, actor string) error
	AppendEvent(ctx context.Context, e gpufleet.Event) error
}

// racks is the power domains: their changes, and their projection (each
// rack's members, rated draw and projected draw), for the API, the
// scheduler's input and the accounting's PUE. Racks live in the store;
// what racks reads of the nodes' draw now comes through readings (the
// server's latest samples and telemetry's holders and peaks). Its lock
// serialises changes.
type racks struct {
	st       rackStore
	cat      *catalog.Catalog
	charging power.Charging // how held GPUs are charged (Config.PowerPeakMargin)
	// readings is what power.ProjectRack reads of nodes now (held: who
	// holds each GPU; nil: the holders the leader last recorded).
	readings func(nodes []gpufleet.Node, held map[string]heldGPU) []power.NodeReading

	// mu serialises changes: what a change checks holds until it is
	// written.
	mu sync.Mutex

	// over is the leader's memory of racks over their budget, under its
	// own lock.
	overMu sync.Mutex
	over   overMemory
}

// overMemory is what the leader remembers of racks over their budget
// between cycles: since when each rack's projected draw has been over
// (the stop policy reads how long, scheduler.Rack.OverBudgetFor), which
// of them it has alerted about this time over, and when it last looked.
type overMemory struct {
	since   map[string]time.Time
	alerted map[string]bool
	last    time.Time
}

// overBudgetGap is how long the leader may go without a cycle before its
// memory of racks over budget is forgotten: a replica that leads again
// after a while does not trust what it saw then.
const overBudgetGap = time.Minute

// overBudget sets each rack's OverBudgetFor from the leader's memory:
// the time since the first cycle that saw its projected draw over its
// budget, 0 while under (and then it is forgotten).
func (k *racks) overBudget(rs []scheduler.Rack, now time.Time) {
	k.overMu.Lock()
	defer k.overMu.Unlock()
	m := &k.over
	if m.since == nil || now.Sub(m.last) > overBudgetGap {
		m.since, m.alerted = map[string]time.Time{}, map[string]bool{}
	}
	m.last = now
	over := map[string]bool{}
	for i := range rs {
		r := &rs[i]
		if r.BudgetWatts <= 0 || r.DrawWatts <= r.BudgetWatts {
			continue
		}
		over[r.Name] = true
		since, ok := m.since[r.Name]
		if !ok || since.After(now) {
			since = now
			m.since[r.Name] = since
		}
		r.OverBudgetFor = now.Sub(since)
	}
	for name := range m.since {
		if !over[name] {
			delete(m.since, name)
			delete(m.alerted, name)
		}
	}
}

// newAlerts is the alerts the leader has not raised yet this time over.
func (k *racks) newAlerts(alerts []scheduler.PowerAlert) []scheduler.PowerAlert {
	k.overMu.Lock()
	defer k.overMu.Unlock()
	var out []scheduler.PowerAlert
	for _, a := range alerts {
		if k.over.alerted == nil {
			k.over.alerted = map[string]bool{}
		}
		if !k.over.alerted[a.Rack] {
			k.over.alerted[a.Rack] = true
			out = append(out, a)
		}
	}
	return out
}

func newRacks(st rackStore, cat *catalog.Catalog, charging power.Charging, readings func([]gpufleet.Node, map[string]heldGPU) []power.NodeReading) *racks {
	return &racks{st: st, cat: cat, charging: charging, readings: readings}
}

// PutRack creates or replaces a rack (admin). A change that moves nodes
// from another rack or leaves the rack's projected draw over its budget
// needs r.Force.
func (s *Server) PutRack(ctx context.Context, p api.Principal, r api.PutRackRequest) (gpufleet.Rack, error) {
	if err := requireAdmin(p); err != nil {
		return gpufleet.Rack{}, err
	}
	if err := s.racks.put(ctx, r.Rack, r.Force, actor(p), s.now()); err != nil {
		return gpufleet.Rack{}, err
	}
	s.nudge()
	return s.racks.get(ctx, r.Name, s.Leader())
}

// DeleteRack removes a rack (admin): its nodes have no budget any more.
func (s *Server) DeleteRack(ctx context.Context, p api.Principal, name string) error {
	if err := requireAdmin(p); err != nil {
		return err
	}
	if err := s.racks.delete(ctx, name, actor(p)); err != nil {
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
	return s.racks.list(ctx, s.Leader())
}

// put creates or replaces a rack. A rack created lists, beside the nodes
// it is given, the nodes labelled with its name that no rack lists. A
// change that takes nodes from another rack's list, or that leaves the
// rack's projected draw over its budget, is refused unless forced; a
// forced one is recorded (rack.forced) with what it forced.
func (k *racks) put(ctx context.Context, r gpufleet.Rack, force bool, actor string, at time.Time) error {
	if err := r.Validate(); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r.Members, r.RatedWatts, r.DrawWatts = nil, 0, nil
	racks, err := k.st.Racks(ctx)
	if err != nil {
		return err
	}
	nodes, err := k.st.Nodes(ctx)
	if err != nil {
		return err
	}
	listed := rackOf(racks)
	r.Nodes = slices.Clone(r.Nodes)
	if !slices.ContainsFunc(racks, func(x gpufleet.Rack) bool { return x.Name == r.Name }) {
		for _, n := range nodes {
			if _, ok := listed[n.Name]; !ok && n.Labels[gpufleet.RackLabel] == r.Name && !slices.Contains(r.Nodes, n.Name) {
				r.Nodes = append(r.Nodes, n.Name)
			}
		}
	}
	var ch rackChange
	for _, n := range r.Nodes {
		if from, ok := listed[n]; ok && from != r.Name {
			ch.moves = append(ch.moves, fmt.Sprintf("node %s from rack %s", gpufleet.Quote(n), gpufleet.Quote(from)))
		}
	}
	var members []gpufleet.Node
	for _, n := range nodes {
		if slices.Contains(r.Nodes, n.Name) {
			members = append(members, n)
		}
	}
	if draw := power.ProjectRack(k.readings(members, nil), k.charging); r.PowerBudgetWatts > 0 && draw > r.PowerBudgetWatts {
		ch.over, ch.draw, ch.budget = true, draw, r.PowerBudgetWatts
	}
	if ch.forced() && !force {
		return fmt.Errorf("%w: rack %s: %s: pass --force (gpufleet racks set %s ... --force) or \"force\": true to do it anyway",
			gpufleet.ErrUnsatisfiable, gpufleet.Quote(r.Name), ch, r.Name)
	}
	if err := k.st.PutRack(ctx, r, actor); err != nil {
		return err
	}
	if !ch.forced() {
		return nil
	}
	return k.st.AppendEvent(ctx, gpufleet.Event{At: at, Actor: actor, Kind: "rack.forced", Object: r.Name, Detail: "forced: " + ch.String()})
}

// rackChange is what a rack's change does that needs force: the nodes it
// takes from other racks, and whether it leaves the rack's projected draw
// over its budget.
type rackChange struct {
	moves        []string // "node N from rack R"
	over         bool
	draw, budget gpufleet.Watts
}

func (c rackChange) forced() bool { return len(c.moves) > 0 || c.over }

// String says what the change does, in words.
func (c rackChange) String() string {
	var parts []string
	if len(c.moves) > 0 {
		parts = append(parts, "it moves "+strings.Join(c.moves, ", "))
	}
	if c.over {
		parts = append(parts, fmt.Sprintf("its projected draw, %s, would be over its %s budget", c.draw.Human(), c.budget.Human()))
	}
	return strings.Join(parts, "; ")
}

// assign honours the rack label of a node that registers for the first
// time: unless a rack lists it already, it joins the list of the rack the
// label names, if that rack exists. A label naming another rack than the
// one that lists the node changes nothing; an event says so.
func (k *racks) assign(ctx context.Context, node string, labels map[string]string, at time.Time) error {
	want := labels[gpufleet.RackLabel]
	if want == "" {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	who := "agent:" + node
	in, err := k.st.AssignRack(ctx, node, want, who)
	if err != nil || in == "" || in == want {
		return err
	}
	return k.st.AppendEvent(ctx, gpufleet.Event{At: at, Actor: who, Kind: "node.rack_label_ignored", Object: node,
		Detail: fmt.Sprintf("its rack label names rack %s, but rack %s lists the node: a rack's nodes list alone says what it holds "+
			"(to move the node, list it in rack %s: gpufleet racks set %s --nodes ... --force)", gpufleet.Quote(want), gpufleet.Quote(in), want, want)})
}

// delete removes a rack.
func (k *racks) delete(ctx context.Context, name, actor string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.st.DeleteRack(ctx, name, actor)
}

// list is the racks with their members, rated draw and projected draw now
// (only where leads: a replica that does not lead has no live readings).
func (k *racks) list(ctx context.Context, leads bool) ([]gpufleet.Rack, error) {
	racks, err := k.st.Racks(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := k.st.Nodes(ctx)
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
		r.RatedWatts = k.ratedDraw(ns)
		if leads {
			r.DrawWatts = new(power.ProjectRack(k.readings(ns, nil), k.charging))
		}
	}
	return racks, nil
}

// get is one rack as list gives it.
func (k *racks) get(ctx context.Context, name string, leads bool) (gpufleet.Rack, error) {
	all, err := k.list(ctx, leads)
	if err != nil {
		return gpufleet.Rack{}, err
	}
	i := slices.IndexFunc(all, func(r gpufleet.Rack) bool { return r.Name == name })
	if i < 0 {
		return gpufleet.Rack{}, fmt.Errorf("%w: rack %s", gpufleet.ErrNotFound, gpufleet.Quote(name))
	}
	return all[i], nil
}

// rackMembers is each rack's members: the registered nodes it lists, in
// the nodes' order. It is the one place membership is read from (the
// API's racks, the scheduler's Node.Rack and power input, the PUE of
// usage): a rack's nodes list alone says what it holds; a node's rack
// label only ever adds it to a list, at its first registration or when
// its rack is created (racks.assign, racks.put).
func rackMembers(racks []gpufleet.Rack, nodes []gpufleet.Node) map[string][]string {
	listed := rackOf(racks)
	out := map[string][]string{}
	for _, n := range nodes {
		if r, ok := listed[n.Name]; ok {
			out[r] = append(out[r], n.Name)
		}
	}
	return out
}

// rackOf maps each listed node to the rack that lists it. The store lists
// a node in one rack at most; were it in two, the first by name has it.
func rackOf(racks []gpufleet.Rack) map[string]string {
	out := map[string]string{}
	for _, r := range racks {
		for _, n := range r.Nodes {
			if _, ok := out[n]; !ok {
				out[n] = r.Name
			}
		}
	}
	return out
}

// modelCache looks GPU models up in the catalog once each (a lookup
// copies the entry): a cycle reads the model of every GPU of the fleet.
type modelCache struct {
	cat *catalog.Catalog
	m   map[string]catalog.GPU
}

func newModelCache(cat *catalog.Catalog) modelCache {
	return modelCache{cat: cat, m: map[string]catalog.GPU{}}
}

// gpu is model id's catalog entry; an unknown id gets an entry of its
// name only.
func (c modelCache) gpu(id string) catalog.GPU {
	g, ok := c.m[id]
	if !ok {
		var err error
		if g, err = c.cat.Lookup(id); err != nil {
			g = catalog.GPU{ID: id, Name: id}
		}
		c.m[id] = g
	}
	return g
}

// node is the catalog entry of a node's GPUs (its first GPU's).
func (c modelCache) node(n gpufleet.Node) catalog.GPU {
	if len(n.GPUs) == 0 {
		return catalog.GPU{}
	}
	return c.gpu(n.GPUs[0].Model)
}

// ratedDraw is what nodes draw at their rating (GPUs at TDP and host
// overheads).
func (k *racks) ratedDraw(nodes []gpufleet.Node) gpufleet.Watts {
	var w gpufleet.Watts
	models := newModelCache(k.cat)
	for _, n := range nodes {
		w += power.RatedNode(models.node(n), len(n.GPUs))
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

// nodeReadings is what power.ProjectRack reads of nodes now: their host
// overheads and each GPU's model, latest reading, holder's class and
// measured peak: the measured draw of every GPU the leader has a reading
// of, idle draws where there is none, and a held GPU (held; nil: the
// holders the leader last recorded) charged by power.Charging once it
// was measured under its holder.
func (s *Server) nodeReadings(nodes []gpufleet.Node, held map[string]heldGPU) []power.NodeReading {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	readings := make([]power.NodeReading, 0, len(nodes))
	models := newModelCache(s.cat)
	s.tele.read(func(v gpuView) {
		for _, n := range nodes {
			model := models.node(n)
			nr := power.NodeReading{HostWatts: float64(power.HostOverhead(model, len(n.GPUs)))}
			caps := s.capsEnforced(n) // a capped GPU there is charged its cap
			var samples []api.GPUSample
			if ln := s.live.nodes[n.Name]; ln != nil {
				samples = ln.samples
			}
			for _, g := range n.GPUs {
				gm := model
				if g.Model != model.ID {
					gm = models.gpu(g.Model)
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
						if caps {
							r.CapWatts = v.capWatts(g.UUID)
						}
					}
				case v.info(g.UUID).team != "":
					r.Held, r.Class = true, v.info(g.UUID).class
					r.PeakWatts = v.peak(g.UUID)
					if caps {
						r.CapWatts = v.capWatts(g.UUID)
					}
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

// input gives the scheduler the racks with a budget, their members'
// Node.Rack, their projected draw and what placed GPUs add (held: who
// holds each GPU as the cycle sees it). It returns each rack's figures
// for the metrics and each node's PUE (nil without racks).
func (k *racks) input(ctx context.Context, in *scheduler.Input, nodes []gpufleet.Node, held map[string]heldGPU) ([]rackPower, map[string]float64, error) {
	racks, err := k.st.Racks(ctx)
	if err != nil || len(racks) == 0 {
		return nil, nil, err
	}
	members := rackMembers(racks, nodes)
	rackOf := map[string]string{}
	for r, ns := range members {
		for _, n := range ns {
			rackOf[n] = r
		}
	}
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
			ProductionReserveW: r.ProductionReserveWatts, Nodes: k.readings(ns, held)})
	}
	// The simulator builds its input with the same function.
	rs, draw, projected := power.SchedulerRacks(inputs, in.Models, k.charging)
	in.Racks, in.GPUDraw = append(in.Racks, rs...), draw
	gauges := make([]rackPower, 0, len(racks))
	for i, r := range racks {
		var ns []gpufleet.Node
		for _, m := range members[r.Name] {
			ns = append(ns, byName[m])
		}
		gauges = append(gauges, rackPower{name: r.Name, budget: r.PowerBudgetWatts, reserve: r.ProductionReserveWatts, rated: k.ratedDraw(ns), projected: projected[i]})
	}
	return gauges, racksPUE(racks, members), nil
}

// nodesPUE is the PUE of each node in a rack that gives one, from the
// stored racks (a follower answers usage too).
func (k *racks) nodesPUE(ctx context.Context) (map[string]float64, error) {
	racks, err := k.st.Racks(ctx)
	if err != nil || len(racks) == 0 {
		return nil, err
	}
	nodes, err := k.st.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	return racksPUE(racks, rackMembers(racks, nodes)), nil
}

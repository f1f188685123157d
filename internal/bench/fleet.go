package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/planner"
)

// DefaultGate is the fraction of its model's fleet median below which a
// GPU's figure makes it degraded: healthy cards of one model measure
// within a few percent of each other (docs/BENCH.md), so a card a tenth
// under its siblings has lost something.
const DefaultGate = 0.9

// MinPeers is how many other GPUs of a model must have a figure before
// the fleet median judges one: with fewer, one bad card would move the
// median as far as the card it judges.
const MinPeers = 2

// Gates are the fractions of the fleet median below which a figure is
// degraded, per test; a test not listed takes DefaultGate.
type Gates map[Test]float64

// ParseGates reads "0.85" (every test) or "copy=0.9,gemm=0.85".
func ParseGates(s string) (Gates, error) {
	s = strings.TrimSpace(s)
	g := Gates{}
	if s == "" {
		return g, nil
	}
	parse := func(field, v string) (float64, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(f > 0 && f <= 1) {
			return 0, fmt.Errorf("%w: %s: %s: expected a fraction above 0 and at most 1", gpufleet.ErrInvalid, field, gpufleet.Quote(v))
		}
		return f, nil
	}
	if !strings.Contains(s, "=") {
		f, err := parse("bench gate", s)
		if err != nil {
			return nil, err
		}
		for _, t := range Tests() {
			g[t] = f
		}
		return g, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		t := Test(strings.ToLower(strings.TrimSpace(k)))
		if !ok || !slices.Contains(Tests(), t) {
			return nil, fmt.Errorf("%w: bench gate: %s: expected TEST=FRACTION with TEST one of copy, gemm, h2d, p2p, allreduce, memory, stress", gpufleet.ErrInvalid, gpufleet.Quote(kv))
		}
		f, err := parse("bench gate "+string(t), v)
		if err != nil {
			return nil, err
		}
		g[t] = f
	}
	return g, nil
}

// For is the gate of test t.
func (g Gates) For(t Test) float64 {
	if f, ok := g[t]; ok {
		return f
	}
	return DefaultGate
}

// String writes the gates as ParseGates reads them.
func (g Gates) String() string {
	var parts []string
	for _, t := range Tests() {
		parts = append(parts, fmt.Sprintf("%s=%g", t, g.For(t)))
	}
	return strings.Join(parts, ",")
}

// Trigger says why a benchmark ran.
type Trigger string

// Triggers.
const (
	TriggerJoin       Trigger = "join"       // the node joined (or its agent started)
	TriggerValidation Trigger = "validation" // a return-to-service check, after a repair or a stack update
	TriggerManual     Trigger = "manual"     // somebody ran gpufleet bench and sent it
	TriggerScheduled  Trigger = "scheduled"  // the bench schedule re-benched an idle node
)

// Result is a stored figure: the node, when and why it was measured.
type Result struct {
	Figure
	Node    string    `json:"node"`
	At      time.Time `json:"at"`
	Trigger Trigger   `json:"trigger"`
	// Order is the bench order, validation or join bench that measured it.
	Order string `json:"order,omitempty"`
	// Fleet is the comparison with the fleet, filled when results are
	// listed.
	Fleet *Comparison `json:"fleet,omitempty"`
}

// Judged reports whether the fleet rule judges figures named like f: the
// per-GPU ones (every figure but a single p2p pair).
func Judged(f Figure) bool { return !(f.Test == P2P && f.Peer != nil) }

// Comparison is one figure against the same figure of the other GPUs of
// its model (the latest figure of each; allreduce figures compare with
// nodes of as many GPUs).
type Comparison struct {
	// Median is the fleet median without this GPU; Peers how many GPUs
	// (for an all-reduce across nodes, how many other runs) it is of.
	// Zero peers: no baseline.
	Median float64 `json:"median"`
	Peers  int     `json:"peers"`
	// Fraction is Value / Median, absent without enough peers.
	Fraction *float64 `json:"fraction"`
	Gate     float64  `json:"gate"`
	// Degraded is true when Fraction is below Gate.
	Degraded bool `json:"degraded"`
}

// key groups comparable figures.
type key struct {
	model, name string
	gpus, nodes int
}

func keyOf(f Figure) key { return key{f.Model, f.Name, f.GPUs, f.Nodes} }

// peerOf is what one figure counts as in its baseline: its GPU, or for an
// all-reduce across nodes its run, which every member stores: a run
// counts once, and never toward a member's own baseline.
func peerOf(f Figure) string {
	if f.Nodes > 1 && f.Group != "" {
		return "group " + f.Group
	}
	return f.UUID
}

// Baseline is the fleet's newest figures grouped for comparison: built
// once, it compares any number of figures in O(log n) each.
type Baseline struct {
	groups map[key]*group
}

type group struct {
	sorted []float64          // every GPU's value, ascending
	own    map[string]float64 // by peerOf
}

// NewBaseline groups the latest results of every GPU (duplicates of one
// GPU and figure count once: the last).
func NewBaseline(fleet []Result) *Baseline {
	b := &Baseline{groups: map[key]*group{}}
	for _, r := range fleet {
		if !Judged(r.Figure) || r.Value <= 0 {
			continue
		}
		k := keyOf(r.Figure)
		g := b.groups[k]
		if g == nil {
			g = &group{own: map[string]float64{}}
			b.groups[k] = g
		}
		g.own[peerOf(r.Figure)] = r.Value
	}
	for _, g := range b.groups {
		for _, v := range g.own {
			g.sorted = append(g.sorted, v)
		}
		slices.Sort(g.sorted)
	}
	return b
}

// Compare judges f against the other GPUs of its model: a GPU never
// counts toward its own baseline.
func (b *Baseline) Compare(f Figure, gates Gates) Comparison {
	c := Comparison{Gate: gates.For(f.Test)}
	if !Judged(f) {
		return c
	}
	g := b.groups[keyOf(f)]
	if g == nil {
		return c
	}
	vals := g.sorted
	skip := -1
	if v, ok := g.own[peerOf(f)]; ok {
		skip, _ = slices.BinarySearch(vals, v)
	}
	n := len(vals)
	if skip >= 0 {
		n--
	}
	at := func(i int) float64 { // the i-th value without the skipped one
		if skip >= 0 && i >= skip {
			return vals[i+1]
		}
		return vals[i]
	}
	c.Peers = n
	if n == 0 {
		return c
	}
	c.Median = at(n / 2)
	if n%2 == 0 {
		c.Median = (at(n/2-1) + at(n/2)) / 2
	}
	if c.Peers >= MinPeers && c.Median > 0 {
		c.Fraction = ptr(f.Value / c.Median)
		c.Degraded = *c.Fraction < c.Gate
	}
	return c
}

// Compare judges f against fleet, the latest results of every GPU (f's
// own among them or not), as NewBaseline(fleet).Compare does.
func Compare(f Figure, fleet []Result, gates Gates) Comparison {
	return NewBaseline(fleet).Compare(f, gates)
}

// Shortfall is a figure under its gate, with the evidence in words.
type Shortfall struct {
	Figure     Figure     `json:"figure"`
	Comparison Comparison `json:"comparison"`
	// Reason is a short phrase ("copy at 0.62 of the fleet median").
	Reason string `json:"reason"`
	// Evidence is the sentence a person reads.
	Evidence string `json:"evidence"`
}

// Judge returns the figures of figs under their gates against fleet.
func Judge(figs []Figure, fleet []Result, gates Gates) []Shortfall {
	var out []Shortfall
	base := NewBaseline(fleet)
	for _, f := range figs {
		where, peers := fmt.Sprintf("GPU %d", f.GPU), "other GPUs"
		switch {
		case f.Nodes > 1:
			where = fmt.Sprintf("all-reduce across %d nodes (%s; %d GPUs)", f.Nodes, strings.Join(f.Members, ", "), f.GPUs)
			peers = "other runs of this shape"
		case f.Test == AllReduce:
			where = fmt.Sprintf("all-reduce over %d GPUs", f.GPUs)
		}
		if why := f.Failed(); why != "" {
			out = append(out, Shortfall{Figure: f, Reason: fmt.Sprintf("%s failed: %s", f.Name, why),
				Evidence: fmt.Sprintf("%s: %s failed (%s): %s", where, f.Name, f.Size, why)})
			continue
		}
		c := base.Compare(f, gates)
		if !c.Degraded {
			continue
		}
		out = append(out, Shortfall{
			Figure: f, Comparison: c,
			Reason: fmt.Sprintf("%s at %.2f of the fleet median", f.Name, *c.Fraction),
			Evidence: fmt.Sprintf("%s: %s measured %s, %.2f of the %s fleet median %s (%d %s; gate %.2f)",
				where, f.Name, Human(f.Value, f.Unit), *c.Fraction, f.Model, Human(c.Median, f.Unit), c.Peers, peers, c.Gate),
		})
	}
	return out
}

// SortResults orders results by node, then as Summarize orders a node's
// figures (by GPU, test, name and peer, the all-reduce last), newest
// first among equals.
func SortResults(rs []Result) {
	slices.SortStableFunc(rs, func(a, b Result) int {
		if a.Node != b.Node {
			return strings.Compare(a.Node, b.Node)
		}
		if c := compareFigures(a.Figure, b.Figure); c != 0 {
			return c
		}
		return b.At.Compare(a.At)
	})
}

// Latest keeps the newest result of each GPU and figure (by At, then
// order), in the order of rs.
func Latest(rs []Result) []Result {
	type id struct {
		uuid, name string
		peer       int
	}
	newest := map[id]int{}
	for i, r := range rs {
		k := id{r.UUID, r.Name, -1}
		if r.Peer != nil {
			k.peer = *r.Peer
		}
		if j, ok := newest[k]; !ok || !rs[j].At.After(r.At) {
			newest[k] = i
		}
	}
	var out []Result
	for i, r := range rs {
		k := id{r.UUID, r.Name, -1}
		if r.Peer != nil {
			k.peer = *r.Peer
		}
		if newest[k] == i {
			out = append(out, r)
		}
	}
	return out
}

// Calibration turns the newest figures of every GPU into the planner's
// calibration per GPU model: the median over the model's GPUs of the
// copy's share of datasheet bandwidth and of each precision's matrix
// product share of peak (gpufleet plan --calibration fleet). Models
// without a copy or product figure are absent.
func Calibration(latest []Result) map[string]planner.Calibration {
	type acc struct {
		memory  []float64
		compute map[gpufleet.Precision][]float64
		gpus    map[string]bool
	}
	by := map[string]*acc{}
	for _, r := range latest {
		if r.Ratio == nil || (r.Test != Copy && r.Test != GEMM) {
			continue
		}
		a := by[r.Model]
		if a == nil {
			a = &acc{compute: map[gpufleet.Precision][]float64{}, gpus: map[string]bool{}}
			by[r.Model] = a
		}
		a.gpus[r.UUID] = true
		if r.Test == Copy {
			a.memory = append(a.memory, *r.Ratio)
		} else {
			a.compute[r.Precision] = append(a.compute[r.Precision], *r.Ratio)
		}
	}
	out := map[string]planner.Calibration{}
	for m, a := range by {
		c := planner.Calibration{Memory: Median(a.memory), Compute: map[gpufleet.Precision]float64{}, GPUs: len(a.gpus),
			Source: "the fleet's benchmarks"}
		for p, v := range a.compute {
			c.Compute[p] = Median(v)
		}
		out[m] = c
	}
	return out
}

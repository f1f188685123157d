package scheduler

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// shape is what placement sees of a job: jobs with the same shape fit or do
// not fit alike, so "does not fit" is cached per shape.
type shape struct {
	id       int32
	key      string
	kind     gpufleet.SharingKind
	gpus     int32 // GPUs, MIG instances or time-slice shares
	nodes    int32 // explicit node count, 0 = automatic (1 = one node, never spread)
	perNode  int32 // GPUs per node when spread over nodes
	units    int32 // time-slice units per GPU
	profile  int32 // MIG profile, -1 when unknown
	nvlink   bool  // all GPUs in one NVLink domain required
	selector [][2]string
	// container: only nodes that run containers (Resources.Runtime).
	container bool
	// stackOK, when the job requires a stack or versions, says per
	// distinct node stack (fleet.stacks) whether it meets them; stackWhy
	// says, when none does, why.
	stackOK  []bool
	stackWhy *gpufleet.StackMismatch
	// isoOK, when the job requires isolation or caps overhead, says per
	// distinct node virtualization (fleet.virts) whether the mechanism the
	// job would get there meets it.
	isoOK    []bool
	iso      gpufleet.Isolation
	overhead *gpufleet.OverheadLimit
	models   []int32 // eligible models: preference order when prefer, else by id
	prefer   bool    // take the first model that fits
	// slower, for shapes that prefer the fastest model, is per model id how
	// many times slower than the shape's fastest model a job would run on
	// it, conservatively (see slowerWait); nil otherwise.
	slower  []float64
	multi   bool   // spans nodes
	invalid string // a request no fleet could satisfy, in words

	static     *why // unplaceable on an empty fleet (nil = placeable); set lazily
	staticSet  bool
	quotaNever []quotaNeverEntry // per team, set lazily (staticWhy)
	scan       *staticScan       // the static filters per node, set lazily (staticOf)
	group      *simGroup
}

// spreads reports whether a whole-GPU shape with no explicit node count
// goes over as few nodes as possible on model m: it needs more GPUs than
// any node has of m. One that asks for one node (nodes 1) never does.
func (sh *shape) spreads(f *fleet, m int32) bool {
	return sh.gpus > f.maxK[m] && sh.nodes != 1
}

// shapeKey is the identity of a job's shape, built into buf.
func shapeKey(buf []byte, r *gpufleet.Resources, want gpufleet.Preference, prefer bool) []byte {
	b := buf[:0]
	for _, m := range r.GPUModels {
		b = strconv.AppendInt(b, int64(len(m)), 10) // length-prefixed: a name may hold a comma
		b = append(b, ':')
		b = append(b, m...)
	}
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(r.GPUs), 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(r.Nodes), 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(r.GPUMemoryMinBytes), 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(r.MinComputeCapability.Major), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(r.MinComputeCapability.Minor), 10)
	for _, x := range []string{string(r.Precision), string(r.Interconnect), string(r.Sharing.Kind), r.Sharing.Profile} {
		b = append(b, '|')
		b = append(b, x...)
	}
	b = append(b, '|')
	b = strconv.AppendFloat(b, r.Sharing.Fraction, 'g', -1, 64)
	b = append(b, '|')
	b = append(b, r.Runtime...)
	b = append(b, '|')
	b = append(b, r.Isolation...)
	if r.Overhead != nil {
		b = append(b, '<')
		b = strconv.AppendFloat(b, float64(*r.Overhead), 'g', -1, 64)
	}
	if prefer {
		b = append(b, '|')
		b = append(b, want...)
		if want == gpufleet.Efficient {
			for _, m := range sortedKeys(r.JoulesPerUnit) {
				b = append(b, '|')
				b = strconv.AppendInt(b, int64(len(m)), 10)
				b = append(b, ':')
				b = append(b, m...)
				b = append(b, '=')
				b = strconv.AppendFloat(b, r.JoulesPerUnit[m], 'g', -1, 64)
			}
		}
	}
	for _, k := range sortedKeys(r.NodeSelector) {
		for _, x := range []string{k, r.NodeSelector[k]} {
			b = append(b, '|')
			b = strconv.AppendInt(b, int64(len(x)), 10)
			b = append(b, ':')
			b = append(b, x...)
		}
	}
	return b
}

// flatten lists a map's keys and values, by key.
func flatten(m map[string]string) []string {
	var out []string
	for _, k := range sortedKeys(m) {
		out = append(out, k, m[k])
	}
	return out
}

// stackNeed is a request's stack needs judged on this call's fleet: per
// distinct node stack whether it meets them (nil: every node does), and
// why none does.
type stackNeed struct {
	ok  []bool
	why *gpufleet.StackMismatch
}

// appendStackKey adds a request's stack needs to its shape key as the
// node stacks they allow, so that requests allowing the same nodes share a
// shape (and its caches) whatever their wording; a request no node meets
// keeps its own words.
func appendStackKey(b []byte, n stackNeed) []byte {
	if n.ok == nil {
		return b
	}
	b = append(b, "|stacks:"...)
	none := true
	for _, ok := range n.ok {
		if ok {
			b, none = append(b, '1'), false
		} else {
			b = append(b, '0')
		}
	}
	if none {
		b = append(b, n.why.String()...)
	}
	return b
}

// shapeOf returns the interned shape of a job's resources.
func (s *sched) shapeOf(r *gpufleet.Resources) *shape {
	prefer := s.cfg.HeterogeneityPreference && r.Prefer != ""
	want := r.Prefer
	need := s.stackNeeds(r)
	s.keyBuf = appendStackKey(shapeKey(s.keyBuf, r, want, prefer), need)
	if sh, ok := s.shapeIdx[string(s.keyBuf)]; ok {
		return sh
	}
	key := string(s.keyBuf)
	sh := &shape{id: int32(len(s.shapes)), key: key, profile: -1, prefer: prefer, stackOK: need.ok, stackWhy: need.why}
	// Counts are held in 32 bits: narrow only what the limits allow. A
	// request beyond them (a stored row no validation saw) is invalid,
	// never wrapped around.
	if r.GPUs > 0 && r.GPUs <= gpufleet.MaxFleetGPUs && r.Nodes >= 0 && r.Nodes <= gpufleet.MaxFleetNodes {
		sh.gpus, sh.nodes = int32(r.GPUs), int32(r.Nodes)
	}
	sh.kind = r.Sharing.Kind
	if sh.kind == "" {
		sh.kind = gpufleet.Exclusive
	}
	sh.nvlink = r.Interconnect == gpufleet.NVLink && r.GPUs > 1
	for _, k := range sortedKeys(r.NodeSelector) {
		sh.selector = append(sh.selector, [2]string{k, r.NodeSelector[k]})
	}
	sh.container = r.Runtime == gpufleet.RuntimeContainer
	// The same validation as at every edge, once per shape: a request that
	// fails it (a stored row no edge saw) is failed, never narrowed.
	rr := *r
	rr.CPUs, rr.MemoryBytes = 0, 0 // the scheduler places by GPUs only
	if err := rr.Validate(); err != nil {
		sh.invalid = strings.TrimPrefix(err.Error(), gpufleet.ErrInvalid.Error()+": ")
	}
	if sh.kind == gpufleet.TimeSlice {
		sh.units = int32(math.Round(r.Sharing.Fraction * unit))
		if sh.units <= 0 && sh.invalid == "" {
			sh.invalid = fmt.Sprintf("time-slice fraction %g is too small", r.Sharing.Fraction)
		}
	}
	if sh.kind == gpufleet.MIG {
		if p, ok := s.f.profileIdx[strings.ToLower(r.Sharing.Profile)]; ok {
			sh.profile = p
		}
	}
	if r.Nodes > 1 && sh.invalid == "" {
		sh.multi = true
		sh.perNode = int32(r.GPUs / r.Nodes)
	}
	sh.isoOK, sh.iso, sh.overhead = s.isolationNeeds(r), r.Isolation, r.Overhead
	sh.models = s.eligibleModels(r, sh)
	if prefer {
		s.rankModels(sh.models, want, r.JoulesPerUnit)
		if want == gpufleet.Fastest && len(sh.models) > 1 {
			sh.slower = make([]float64, len(s.f.models))
			for _, m := range sh.models {
				sh.slower[m] = slowdownOn(&s.f.models[sh.models[0]].gpu, &s.f.models[m].gpu)
			}
		}
	}
	s.shapeIdx[key] = sh
	s.shapes = append(s.shapes, sh)
	return sh
}

// eligibleModels lists the models of the fleet a request may use, by id.
func (s *sched) eligibleModels(r *gpufleet.Resources, sh *shape) []int32 {
	var out []int32
	constrained := r.GPUMemoryMinBytes > 0 || !r.MinComputeCapability.IsZero() || r.Precision != ""
	for m := range s.f.models {
		mi := &s.f.models[m]
		if mi.gpus == 0 {
			continue // a catalog entry no node has
		}
		named := len(r.GPUModels) == 0
		for _, name := range r.GPUModels {
			if s.modelNamed(mi, name) {
				named = true
				break
			}
		}
		if !named {
			continue
		}
		if mi.opaque {
			// An opaque model matches only when a job names it, or asks
			// nothing a catalog entry would be needed to check.
			if len(r.GPUModels) == 0 && constrained {
				continue
			}
			out = append(out, int32(m))
			continue
		}
		mem := mi.gpu.MemoryBytes
		if sh.kind == gpufleet.MIG {
			if mp, ok := mi.gpu.MIG(r.Sharing.Profile); ok {
				mem = mp.MemoryBytes
			}
		}
		if r.GPUMemoryMinBytes > 0 && mem < int64(r.GPUMemoryMinBytes) {
			continue
		}
		if !mi.gpu.ComputeCapability.AtLeast(r.MinComputeCapability) {
			continue
		}
		if r.Precision != "" {
			if _, ok := mi.gpu.Peak(r.Precision); !ok {
				continue
			}
		}
		out = append(out, int32(m))
	}
	return out
}

// modelNamed reports whether an allowlist entry names a model: its catalog
// id, its name, an alias, or an admin-defined class that contains it.
func (s *sched) modelNamed(mi *modelInfo, name string) bool {
	if strings.EqualFold(name, mi.id) || strings.EqualFold(name, mi.gpu.Name) {
		return true
	}
	if mi.opaque {
		return false
	}
	for _, a := range mi.gpu.Aliases {
		if strings.EqualFold(a, name) {
			return true
		}
	}
	for _, id := range s.in.Classes[name] {
		if strings.EqualFold(id, mi.id) {
			return true
		}
	}
	return false
}

// rankModels orders models by preference: cheapest adequate (lowest price,
// unknown price last), fastest (highest bf16 or fp16 peak) or most
// efficient (fewest joules per unit of the job's work, see joulesPerUnit;
// unknown last).
func (s *sched) rankModels(models []int32, prefer gpufleet.Preference, perUnit map[string]float64) {
	ms := s.f.models
	var joules []float64
	if prefer == gpufleet.Efficient {
		joules = s.joulesPerUnit(models, perUnit)
	}
	slices.SortStableFunc(models, func(a, b int32) int {
		switch prefer {
		case gpufleet.Cheapest:
			pa, pb := ms[a].price, ms[b].price
			switch {
			case pa != nil && pb != nil && *pa != *pb:
				return cmp.Compare(*pa, *pb)
			case pa != nil && pb == nil:
				return -1
			case pa == nil && pb != nil:
				return 1
			}
		case gpufleet.Fastest:
			if ms[a].speed != ms[b].speed {
				return cmp.Compare(ms[b].speed, ms[a].speed)
			}
		case gpufleet.Efficient:
			ja, jb := joules[a], joules[b]
			switch {
			case ja > 0 && jb > 0 && ja != jb:
				return cmp.Compare(ja, jb)
			case ja > 0 && jb == 0:
				return -1
			case ja == 0 && jb > 0:
				return 1
			}
		}
		return cmp.Compare(a, b)
	})
}

// joulesPerUnit is, per model index, the energy a unit of the job's work
// takes (0: unknown). A model perUnit names (by catalog id) takes its
// figure. One it leaves out is estimated from the named models of the
// fleet by peak per watt: energy per unit of compute-bound work scales as
// its inverse, so the estimate is the mean of figure x (their peak per
// watt / its own); unknown when no named model has a peak per watt.
// Without figures it is 1 / peak per watt, in the same order.
func (s *sched) joulesPerUnit(models []int32, perUnit map[string]float64) []float64 {
	ms := s.f.models
	out := make([]float64, len(ms))
	var refs []float64 // figure x peak per watt of the named models
	named := false
	for _, m := range models {
		if v, ok := perUnit[ms[m].id]; ok && v > 0 {
			out[m], named = v, true
			if ms[m].perWatt > 0 {
				refs = append(refs, v*ms[m].perWatt)
			}
		}
	}
	for _, m := range models {
		if out[m] > 0 || ms[m].perWatt <= 0 || (named && len(refs) == 0) {
			continue
		}
		if !named {
			out[m] = 1 / ms[m].perWatt
			continue
		}
		sum := 0.0
		for _, r := range refs {
			sum += r / ms[m].perWatt
		}
		out[m] = sum / float64(len(refs))
	}
	return out
}

// selects reports whether a node carries every label the shape selects
// and runs the stack it requires.
func (sh *shape) selects(n *nodeSlot) bool {
	for _, kv := range sh.selector {
		if v, ok := n.labels[kv[0]]; !ok || v != kv[1] {
			return false
		}
	}
	return (sh.stackOK == nil || sh.stackOK[n.stack]) && (sh.isoOK == nil || sh.isoOK[n.virt]) && (!sh.container || n.containers)
}

// isolationWhy explains a job that fits the free GPUs only on nodes whose
// mechanism does not meet its isolation or overhead requirement: what the
// job requires and the mechanisms give (Explanation.Isolation). ok is
// false when isolation is not the reason.
func (s *sched) isolationWhy(sh *shape, models []int32, mode fitMode) (*gpufleet.IsolationShortfall, bool) {
	if sh.isoOK == nil {
		return nil, false
	}
	iso := sh.isoOK
	sh.isoOK = nil
	_, ok := s.search(sh, models, mode)
	sh.isoOK = iso
	if !ok {
		return nil, false
	}
	return s.isolationShortfall(sh), true
}

// isolationNeeds judges a request's isolation and overhead requirements
// per distinct node virtualization: nil when it has none.
func (s *sched) isolationNeeds(r *gpufleet.Resources) []bool {
	if (r.Isolation == "" || r.Isolation == gpufleet.IsolationAny) && r.Overhead == nil {
		return nil
	}
	ok := make([]bool, len(s.f.virts))
	for i, v := range s.f.virts {
		ok[i] = gpufleet.MechanismOf(v, r.Sharing).Meets(r.Isolation, r.Overhead)
	}
	return ok
}

// stackNeeds judges a request's stack and version requirements on the
// fleet (the zero stackNeed without any): the named stack's versions
// pinned, and each constraint, once per distinct node stack, remembered
// per wording for the call. An unknown stack or an unreadable constraint
// (a row no edge saw) matches no node, with why.
func (s *sched) stackNeeds(r *gpufleet.Resources) stackNeed {
	if r.Stack == "" && len(r.Requires) == 0 {
		return stackNeed{}
	}
	key := strings.Join(append([]string{r.Stack}, flatten(r.Requires)...), "\x00")
	if n, ok := s.stackCache[key]; ok {
		return n
	}
	n := s.judgeStack(r)
	if s.stackCache == nil {
		s.stackCache = map[string]stackNeed{}
	}
	s.stackCache[key] = n
	return n
}

func (s *sched) judgeStack(r *gpufleet.Resources) stackNeed {
	none := stackNeed{ok: make([]bool, len(s.f.stacks)), why: &gpufleet.StackMismatch{Stack: r.Stack}}
	need, err := gpufleet.ParseStackRequirements("resources.requires", r.Requires)
	if err != nil {
		none.why.Invalid, none.why.Error = "requires", err.Error()
		return none
	}
	if r.Stack != "" {
		versions, ok := s.in.Stacks[r.Stack]
		if !ok {
			none.why.Unknown = true
			return none
		}
		pin, err := gpufleet.PinStack(versions)
		if err != nil {
			none.why.Invalid, none.why.Error = "stack", err.Error()
			return none
		}
		need = need.And(pin)
	}
	out := stackNeed{ok: make([]bool, len(s.f.stacks))}
	for i, v := range s.f.stacks {
		unmet := need.Unmet(v)
		out.ok[i] = unmet == ""
		if unmet != "" && out.why == nil {
			out.why = &gpufleet.StackMismatch{Stack: r.Stack, Node: s.f.stackNode[i], Unmet: unmet}
		}
	}
	if out.why == nil {
		// Every node meets them: no filter, and the placement searches
		// keep their fast paths.
		return stackNeed{}
	}
	return out
}

// charge is what one placement of the shape on model m counts against a
// quota, in milli-GPUs.
func (s *sched) charge(sh *shape, m int32) int64 {
	switch sh.kind {
	case gpufleet.TimeSlice:
		return int64(sh.gpus) * int64(sh.units)
	case gpufleet.MIG:
		if sh.profile < 0 {
			return int64(sh.gpus) * unit / 7
		}
		return int64(sh.gpus) * s.f.migCharge(m, sh.profile)
	}
	return int64(sh.gpus) * unit
}

func sortedKeys[M ~map[K]V, K cmp.Ordered, V any](m M) []K {
	return slices.Sorted(maps.Keys(m))
}

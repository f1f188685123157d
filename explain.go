package gpufleet

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// FilterCode says why the scheduler left a node out of a job's placement.
// Where a filter is also a wait reason (stack_mismatch, isolation,
// runtime_missing, capacity, topology, rack_power, reservation, quota,
// slower_model) the code is the reason code's word.
type FilterCode string

// Filter codes of Explanation.NodesFiltered, in the order a node meets
// them: a node is counted under the first it fails.
const (
	FilterModel             FilterCode = "model"              // no GPU of a model the job names
	FilterMemory            FilterCode = "memory"             // its GPUs have less memory than gpu_memory_min_bytes
	FilterComputeCapability FilterCode = "compute_capability" // below min_compute_capability
	FilterPrecision         FilterCode = "precision"          // no native support for the job's precision
	FilterSelector          FilterCode = "selector"           // lacks a label of node_selector
	FilterStack             FilterCode = "stack_mismatch"     // does not run the stack or versions required
	FilterIsolation         FilterCode = "isolation"          // its mechanism isolates less than required
	FilterOverhead          FilterCode = "overhead"           // its mechanism costs more overhead than allowed
	FilterRuntime           FilterCode = "runtime_missing"    // runs no containers, and the job runs in an image
	FilterQuota             FilterCode = "quota"              // its GPUs' class is beyond the team's quota now
	FilterSlowerModel       FilterCode = "slower_model"       // its GPUs are too slow to take yet
	FilterNotReady          FilterCode = "not_ready"          // cordoned, draining or down (node or GPUs)
	FilterCapacity          FilterCode = "capacity"           // not enough free GPUs (instances, shares)
	FilterTopology          FilterCode = "topology"           // enough GPUs, not in one NVLink domain
	FilterRackPower         FilterCode = "rack_power"         // its rack would go over its power budget
	FilterReservation       FilterCode = "reservation"        // its free GPUs are held for the backfill reservation
)

// Dimension names the resource a waiting job ran out of
// (Explanation.Exhausted).
type Dimension string

// Dimensions of Explanation.Exhausted.
const (
	DimGPUs         Dimension = "gpus"            // free GPUs on one node
	DimFleetGPUs    Dimension = "fleet_gpus"      // free GPUs on all matching nodes (a job spread over as few as possible)
	DimNodes        Dimension = "nodes"           // nodes with GPUs per node free (a multi-node job)
	DimNVLinkDomain Dimension = "nvlink_domain"   // free GPUs in one NVLink domain
	DimMIGInstances Dimension = "mig_instances"   // free MIG instances of the profile on one node
	DimTimeSlice    Dimension = "timeslice_share" // GPUs with room for the share on one node
	DimRackPower    Dimension = "rack_power"      // a rack's power budget
	DimQuota        Dimension = "quota"           // the team's quota (and borrowing)
)

// Explanation is why a job waits, or is refused at submission, as data:
// the nodes the scheduler looked at, how many each filter left out, and
// the dimension that ran out, with the figures. The reason sentence of a
// queue entry is rendered from it (String); clients read the counts.
type Explanation struct {
	// Code is the reason code (QueueEntry.ReasonCode).
	Code string `json:"code"`
	// NodesEvaluated is the number of nodes of the fleet looked at;
	// NodesFiltered how many each filter left out, in filter order, each
	// node under the first it fails (a code with no node is left out).
	NodesEvaluated int           `json:"nodes_evaluated"`
	NodesFiltered  []FilterCount `json:"nodes_filtered"`
	Exhausted      Dimension     `json:"exhausted,omitempty"`
	// Need is what the job needs of the exhausted dimension (GPUs,
	// instances, nodes); Most the most any node (domain, set of nodes)
	// has of it; PerNode the GPUs per node of a multi-node job.
	Need    int `json:"need,omitempty"`
	Most    int `json:"most"`
	PerNode int `json:"per_node,omitempty"`
	// Never: judged on the fleet with nothing running and every node
	// ready (a job that can never start: Most is what the nodes hold).
	Never bool `json:"never,omitempty"`
	// NotReady counts the matching nodes that are not ready: the job may
	// fit once they return.
	NotReady int `json:"not_ready,omitempty"`
	// Profile is the MIG profile, Share the time-slice fraction, of the
	// job's request, for the words.
	Profile string  `json:"mig_profile,omitempty"`
	Share   float64 `json:"share,omitempty"`
	// Selector is the job's node_selector (k=v,k=v), when the selector
	// left out every node.
	Selector string `json:"selector,omitempty"`
	// Rack is the rack that held the job, when Exhausted is rack_power.
	Rack *RackShortfall `json:"rack,omitempty"`
	// Quota is the team's figures, when Exhausted is quota.
	Quota *QuotaShortfall `json:"quota,omitempty"`
	// Detail is what the counts do not say, in words: the request no
	// model matches; for isolation, stack_mismatch and runtime_missing the
	// words of Isolation, Stack and the code, kept for clients that read
	// them (String writes those from the data). It is part of the
	// sentence.
	Detail string `json:"detail,omitempty"`

	// Brief: the job is past the scheduler's reason depth, and its
	// explanation, shared with the other jobs of the reason, leaves out
	// the job's own figures (Quota's use, Reservation's estimate,
	// Slower's slowdown, the node counts of a rack-power hold).
	Brief bool `json:"brief,omitempty"`
	// NoModel is the request's constraints on the GPU model, when no
	// model of the fleet meets them (unplaceable).
	NoModel *ModelTerms `json:"no_model,omitempty"`
	// Invalid is why the request is invalid (unplaceable).
	Invalid string `json:"invalid,omitempty"`
	// EmptyFleet: no node with a GPU has joined (unplaceable).
	EmptyFleet bool `json:"empty_fleet,omitempty"`
	// Stack is why no node runs the stack or versions the job requires
	// (stack_mismatch).
	Stack *StackMismatch `json:"stack,omitempty"`
	// Isolation is what the job requires of the mechanism and what the
	// mechanisms that fail it give (isolation).
	Isolation *IsolationShortfall `json:"isolation,omitempty"`
	// Blocker is the job it waits behind in strict order (order).
	Blocker *Blocker `json:"blocker,omitempty"`
	// Reservation is the backfill reservation it would delay
	// (reservation).
	Reservation *ReservationHold `json:"reservation,omitempty"`
	// CycleLimit is the placements per cycle reached (cycle_limit).
	CycleLimit int `json:"cycle_limit,omitempty"`
	// Preemption is the running jobs it waits for to leave its GPUs
	// (preempting, or capacity when they were stopping already).
	Preemption *Preemption `json:"preemption,omitempty"`
	// Slower is the slower model that has room while the job waits for a
	// faster one (slower_model).
	Slower *SlowerWait `json:"slower,omitempty"`
	// SpareHeld is the GPUs held free for production failover while the
	// job was placed (a capacity, topology or rack_power wait of a job
	// below production).
	SpareHeld int `json:"spare_held,omitempty"`
	// SearchLimit is the preemption searches per cycle reached before
	// the job's turn: it did not look for victims this cycle.
	SearchLimit int `json:"search_limit,omitempty"`
}

// StackMismatch is why no node runs what a job requires of the software
// stack (resources.stack, resources.requires): Node, the first node in
// the fleet's order, lacks Unmet; or the stack is Unknown; or Invalid
// names what could not be read ("requires" or "stack") and Error why.
type StackMismatch struct {
	Stack   string `json:"stack,omitempty"`
	Node    string `json:"node,omitempty"`
	Unmet   string `json:"unmet,omitempty"`
	Unknown bool   `json:"unknown,omitempty"`
	Invalid string `json:"invalid,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ModelTerms are a request's constraints on the GPU model (and its node
// selector), as the request gives them: MinComputeCapability as "9.0",
// NodeSelector as k=v,k=v.
type ModelTerms struct {
	GPUModels            []string `json:"gpu_models,omitempty"`
	GPUMemoryMinBytes    Bytes    `json:"gpu_memory_min_bytes,omitempty"`
	MinComputeCapability string   `json:"min_compute_capability,omitempty"`
	Precision            string   `json:"precision,omitempty"`
	MIGProfile           string   `json:"mig_profile,omitempty"`
	NodeSelector         string   `json:"node_selector,omitempty"`
}

// String lists the constraints in words: "gpu_models [b200], native
// precision fp8"; "the request" when there are none.
func (m *ModelTerms) String() string {
	var parts []string
	if len(m.GPUModels) > 0 {
		parts = append(parts, fmt.Sprintf("gpu_models [%s]", strings.Join(m.GPUModels, " ")))
	}
	if m.GPUMemoryMinBytes > 0 {
		parts = append(parts, fmt.Sprintf("gpu_memory_min_bytes %d (%.0f GiB)", m.GPUMemoryMinBytes, float64(m.GPUMemoryMinBytes)/(1<<30)))
	}
	if m.MinComputeCapability != "" {
		parts = append(parts, "min_compute_capability "+m.MinComputeCapability)
	}
	if m.Precision != "" {
		parts = append(parts, "native precision "+m.Precision)
	}
	if m.MIGProfile != "" {
		parts = append(parts, "MIG profile "+m.MIGProfile)
	}
	if m.NodeSelector != "" {
		parts = append(parts, "node_selector "+m.NodeSelector)
	}
	if len(parts) == 0 {
		return "the request"
	}
	return strings.Join(parts, ", ")
}

// IsolationShortfall is what a job requires of its GPUs' mechanism
// (resources.isolation, unless any; resources.overhead, OverheadMax as a
// fraction) and what each mechanism of the fleet that does not meet it
// gives.
type IsolationShortfall struct {
	Isolation   Isolation            `json:"isolation,omitempty"`
	OverheadMax *float64             `json:"overhead_max,omitempty"`
	Mechanisms  []MechanismShortfall `json:"mechanisms"`
}

// MechanismShortfall is a mechanism (virtualization/sharing) that does
// not meet a job's requirement: the isolation it gives and its overhead,
// 0-1.
type MechanismShortfall struct {
	Name      string    `json:"name"`
	Isolation Isolation `json:"isolation"`
	Overhead  float64   `json:"overhead"`
}

// String is what the job requires and what the mechanisms give: "it
// requires isolation hard; vgpu:A100-4C/exclusive gives soft (5% overhead)".
func (s *IsolationShortfall) String() string {
	var need, gives []string
	if s.Isolation != "" {
		need = append(need, "isolation "+string(s.Isolation))
	}
	if s.OverheadMax != nil {
		need = append(need, "overhead "+OverheadLimit(*s.OverheadMax).String())
	}
	for _, m := range s.Mechanisms {
		gives = append(gives, fmt.Sprintf("%s gives %s (%.0f%% overhead)", m.Name, m.Isolation, m.Overhead*100))
	}
	return fmt.Sprintf("it requires %s; %s", strings.Join(need, " and "), strings.Join(gives, ", "))
}

// Blocker is the job a job waits behind in strict order: the first that
// could not start, at Position in the queue (from 1).
type Blocker struct {
	Job      string `json:"job"`
	Position int    `json:"position"`
}

// ReservationHold is the backfill reservation a job that fits would
// delay: Job is reserved to start by Start on GPUs the job needs, and the
// job's estimate, EstimateS seconds (0 when brief), runs past it.
type ReservationHold struct {
	Job       string    `json:"job"`
	Start     time.Time `json:"start"`
	EstimateS float64   `json:"estimate_s,omitempty"`
}

// Preemption is the running jobs a job waits for: Victims of them, the
// longest grace GraceS seconds. Stopping: not every one was stopped for a
// preemptor (some stop for other reasons: a drain, a cancel); Starving:
// they were preempted for its starvation.
type Preemption struct {
	Victims  int     `json:"victims"`
	GraceS   float64 `json:"grace_s"`
	Stopping bool    `json:"stopping,omitempty"`
	Starving bool    `json:"starving,omitempty"`
}

// SlowerWait is a slower model that has room for a job that prefers the
// fastest: it would run Slowdown times slower on Model, and the job takes
// it in TakesInS seconds if nothing faster frees up. Both figures are 0
// when brief.
type SlowerWait struct {
	Model    string  `json:"model"`
	Slowdown float64 `json:"slowdown,omitempty"`
	TakesInS float64 `json:"takes_in_s,omitempty"`
}

// FilterCount is how many nodes one filter left out.
type FilterCount struct {
	Code  FilterCode `json:"code"`
	Nodes int        `json:"nodes"`
}

// CanNeverStart reports whether the job cannot start on the fleet as it
// is, whatever ends: it does not fit even with nothing running and every
// node ready, or no rack can hold its least share even idle.
func (e *Explanation) CanNeverStart() bool {
	return e != nil && (e.Never || (e.Rack != nil && e.Rack.NeverGPUs > 0))
}

// RackShortfall is a rack whose power budget holds a job back, in watts:
// it draws DrawWatts, the job would add AddWatts, and the job may take it
// to LimitWatts (BudgetWatts less the production reserve, for other
// classes).
type RackShortfall struct {
	Rack        string  `json:"rack"`
	DrawWatts   float64 `json:"draw_watts"`
	AddWatts    float64 `json:"add_watts"`
	LimitWatts  float64 `json:"limit_watts"`
	BudgetWatts float64 `json:"budget_watts"`
	// NeverGPUs and NeverWatts, when set, say that no rack with the GPUs
	// the job may use can hold its least share (NeverGPUs GPUs, drawing
	// NeverWatts) even idle: it cannot start until a budget grows.
	NeverGPUs  int     `json:"never_gpus,omitempty"`
	NeverWatts float64 `json:"never_watts,omitempty"`
	// Placement: the rack is the first a placement of the job found with
	// power ignored would take over its limit (a job over several racks,
	// or one past the reason depth), not the best rack of a node count.
	Placement bool `json:"placement,omitempty"`
}

// QuotaShortfall is a team's use of a GPU class against its quota, in
// GPUs: it uses Used, the job asks Asked, beyond Quota. With Limit set the
// borrowing limit is reached (Borrowed of it); else the Free GPUs are held
// for teams under their quota, which wait for Waiting. Of a brief
// explanation only Class and LimitReached are set; of quota_exceeded,
// Asked, Quota and Limit (the most the team may ever use is Quota+Limit).
type QuotaShortfall struct {
	Class    string   `json:"class"`
	Used     float64  `json:"used"`
	Asked    float64  `json:"asked"`
	Quota    float64  `json:"quota"`
	Borrowed *float64 `json:"borrowed,omitempty"`
	Limit    *float64 `json:"limit,omitempty"`
	Free     *float64 `json:"free,omitempty"`
	Waiting  *float64 `json:"waiting,omitempty"`
	// LimitReached: the borrowing limit is reached (the figures are in
	// Borrowed and Limit), not the idle capacity held for others.
	LimitReached bool `json:"limit_reached,omitempty"`
}

// Filtered is how many nodes filter c left out.
func (e *Explanation) Filtered(c FilterCode) int {
	for _, f := range e.NodesFiltered {
		if f.Code == c {
			return f.Nodes
		}
	}
	return 0
}

// String is the explanation's sentence: the one place a queue entry's
// reason, and a refused submission's, is written from its data. It is
// empty for nil, and for an explanation that carries only a code.
func (e *Explanation) String() string {
	if e == nil {
		return ""
	}
	text := e.sentence()
	if e.SpareHeld > 0 {
		text += fmt.Sprintf(" (%d GPUs are held free for production failover)", e.SpareHeld)
	}
	if e.SearchLimit > 0 {
		text += fmt.Sprintf("; preemption not tried this cycle (search limit of %d per cycle reached)", e.SearchLimit)
	}
	return text
}

// sentence is the explanation's sentence without the suffixes of
// SpareHeld and SearchLimit.
func (e *Explanation) sentence() string {
	switch {
	case e.Invalid != "":
		return "invalid request: " + e.Invalid
	case e.EmptyFleet:
		return "the fleet has no GPU: no node has joined"
	case e.Blocker != nil:
		return fmt.Sprintf("fits now, but waits behind job %s (position %d) in strict order", e.Blocker.Job, e.Blocker.Position)
	case e.Reservation != nil:
		r := e.Reservation
		text := fmt.Sprintf("fits now, but would delay job %s, reserved to start by %s", r.Job, r.Start.UTC().Format(time.RFC3339))
		if !e.Brief {
			text += fmt.Sprintf("; backfill needs it to finish by then (estimate %s)", seconds(r.EstimateS))
		}
		return text
	case e.CycleLimit > 0:
		return fmt.Sprintf("placement limit of %d jobs per cycle reached", e.CycleLimit)
	case e.Preemption != nil:
		return e.Preemption.words(e.Code)
	case e.Slower != nil:
		if e.Brief {
			return fmt.Sprintf("waiting for a faster GPU than %s, which has room but would run it slower", e.Slower.Model)
		}
		return fmt.Sprintf("waiting for a faster GPU than %s, which has room but would run it about %.1fx slower; takes it in %s if nothing faster frees up",
			e.Slower.Model, e.Slower.Slowdown, seconds(e.Slower.TakesInS))
	}
	free := "free "
	if e.Never {
		free = ""
	}
	var text string
	switch e.Exhausted {
	case DimQuota:
		if e.Quota == nil {
			return ""
		}
		return e.Quota.words(e.Code, e.Brief)
	case DimRackPower:
		r := e.Rack
		if r == nil {
			return "" // no rack: a bare code
		}
		budget := fmt.Sprintf("its %s budget", Watts(r.BudgetWatts))
		if r.LimitWatts < r.BudgetWatts-1e-6 {
			budget = fmt.Sprintf("the %s of its %s budget not reserved for production", Watts(r.LimitWatts), Watts(r.BudgetWatts))
		}
		text = fmt.Sprintf("the GPUs are free, but rack %s would draw %s (%s now + %s for this job) over %s",
			r.Rack, Watts(toTenWatts(r.DrawWatts+r.AddWatts)), Watts(toTenWatts(r.DrawWatts)), Watts(toTenWatts(r.AddWatts)), budget)
		switch n := e.Filtered(FilterRackPower); {
		case r.NeverGPUs > 0:
			text += fmt.Sprintf("; no rack with its GPUs can hold %s of it (%d GPUs) even idle, so it cannot start until a budget grows",
				Watts(toTenWatts(r.NeverWatts)), r.NeverGPUs)
		case n > 1 && !r.Placement:
			text += fmt.Sprintf("; %d matching nodes have the GPUs, all on racks without the power", n)
		}
	case DimMIGInstances:
		noun := "instances"
		if e.Need == 1 {
			noun = "instance"
		}
		text = fmt.Sprintf("needs %d %sMIG %s %s on one node; the most on a matching node is %d", e.Need, free, e.Profile, noun, e.Most)
	case DimTimeSlice:
		text = fmt.Sprintf("needs %s with a %s%.2f time-slice share on one node; the most on a matching node is %d", countNoun(e.Need, "GPU"), free, e.Share, e.Most)
	case DimNodes:
		text = fmt.Sprintf("needs %d nodes with %d %sGPUs each; %d matching nodes have that many", e.Need, e.PerNode, free, e.Most)
	case DimFleetGPUs:
		text = fmt.Sprintf("needs %d GPUs over as few nodes as possible; %d are free on matching nodes", e.Need, e.Most)
		if e.Never {
			text = fmt.Sprintf("needs %d GPUs over as few nodes as possible; matching nodes hold %d", e.Need, e.Most)
		}
	case DimNVLinkDomain:
		if e.Most < 2 {
			text = fmt.Sprintf("needs %d GPUs in one NVLink domain; no %smatching GPU has an NVLink peer (PCIe only)", e.Need, free)
		} else {
			text = fmt.Sprintf("needs %d GPUs in one NVLink domain; the largest %sset is %d", e.Need, free, e.Most)
		}
	case DimGPUs:
		text = fmt.Sprintf("needs %s on one node; the most %son a matching node is %d", countNoun(e.Need, "GPU"), free, e.Most)
	default:
		return e.filteredWords()
	}
	if e.Never {
		return "never fits the fleet: " + text
	}
	switch e.NotReady {
	case 0:
	case 1:
		text += "; 1 matching node is not ready (cordoned, draining or down)"
	default:
		text += fmt.Sprintf("; %d matching nodes are not ready (cordoned, draining or down)", e.NotReady)
	}
	return text
}

// filteredWords explains a job the filters leave no node for.
func (e *Explanation) filteredWords() string {
	switch e.Code {
	case "unplaceable":
		switch {
		case e.NoModel != nil:
			return "no GPU model in the fleet matches " + e.NoModel.String()
		case e.Selector != "":
			return fmt.Sprintf("no node with a matching GPU carries node_selector %s", e.Selector)
		case e.Profile != "" && e.Detail == "":
			return fmt.Sprintf("no GPU in the fleet has MIG instances of profile %s", e.Profile)
		}
		return e.Detail
	case "isolation":
		detail := e.Detail
		if e.Isolation != nil {
			detail = e.Isolation.String()
		}
		if e.Never {
			return "no node can give it: " + detail
		}
		return "GPUs are free, but not under a mechanism it accepts: " + detail
	case "stack_mismatch":
		if e.Stack != nil {
			return e.Stack.String()
		}
		return e.Detail
	case "runtime_missing":
		return "it runs in an image, and no node with a matching GPU runs containers: their agents run --runtime process, not podman or docker"
	}
	return ""
}

// String is the sentence of a stack no node runs.
func (m *StackMismatch) String() string {
	switch {
	case m.Invalid == "stack":
		return fmt.Sprintf("stack %s: %s", m.Stack, m.Error)
	case m.Invalid != "":
		return m.Error
	case m.Unknown:
		return fmt.Sprintf("no stack named %s", Quote(m.Stack))
	}
	what := "the versions it requires"
	if m.Stack != "" {
		what = "stack " + m.Stack
	}
	return fmt.Sprintf("no node runs %s (node %s: %s)", what, m.Node, m.Unmet)
}

// words is the sentence of the running jobs a job waits for, under code
// (preempting; capacity when nothing stopped for it).
func (p *Preemption) words(code string) string {
	grace := seconds(p.GraceS)
	if code != "preempting" {
		verb := "leave"
		if p.Victims == 1 {
			verb = "leaves"
		}
		return fmt.Sprintf("the GPUs it needs come free when %s %s (grace up to %s)", countNoun(p.Victims, "stopping job"), verb, grace)
	}
	noun := "preempted job"
	if p.Stopping {
		noun = "stopping job"
	}
	prefix := ""
	if p.Starving {
		prefix = "starving: "
	}
	return prefix + fmt.Sprintf("waiting for %s to stop (grace up to %s)", countNoun(p.Victims, noun), grace)
}

// seconds is a figure in seconds as a duration, to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// words is a quota shortfall's sentence under code (quota, or
// quota_exceeded: never within quota and borrowing limit); brief leaves
// out the team's figures.
func (q *QuotaShortfall) words(code string, brief bool) string {
	g := func(v float64) string {
		if v == float64(int64(v)) {
			return fmt.Sprint(int64(v))
		}
		return fmt.Sprintf("%.2f", v)
	}
	switch {
	case code == "quota_exceeded":
		return fmt.Sprintf("needs %s %s GPUs but team quota %s plus borrowing limit %s allow at most %s",
			g(q.Asked), q.Class, g(q.Quota), g(deref(q.Limit)), g(q.Quota+deref(q.Limit)))
	case brief && q.LimitReached:
		return fmt.Sprintf("team quota for %s exhausted and borrowing limit reached", q.Class)
	case brief:
		return fmt.Sprintf("team quota for %s exhausted; the free GPUs are held for teams under their quota", q.Class)
	case q.Limit != nil:
		return fmt.Sprintf("team quota for %s exhausted (%s used + %s asked > %s) and borrowing limit reached (%s borrowed, limit %s)",
			q.Class, g(q.Used), g(q.Asked), g(q.Quota), g(deref(q.Borrowed)), g(*q.Limit))
	}
	return fmt.Sprintf("team quota for %s exhausted (%s used + %s asked > %s); the %s free GPUs are held for teams under their quota (%s waiting)",
		q.Class, g(q.Used), g(q.Asked), g(q.Quota), g(deref(q.Free)), g(deref(q.Waiting)))
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// countNoun writes "1 GPU", "2 GPUs".
func countNoun(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// toTenWatts rounds a power to 10 W, for words.
func toTenWatts(w float64) float64 { return float64(int64(w/10+0.5)) * 10 }

// ExplainedError is an error with its reason as data: a submission no node
// of the fleet can ever run (ErrUnsatisfiable) carries the explanation the
// API sends in its error body.
type ExplainedError struct {
	Err         error
	Explanation *Explanation
}

func (e *ExplainedError) Error() string { return e.Err.Error() }

// Unwrap returns the error the explanation is about.
func (e *ExplainedError) Unwrap() error { return e.Err }

package gpufleet

import "fmt"

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
	// Detail is what the counts do not say (the isolation the job needs
	// and what the mechanisms give; why no node runs its stack). It is
	// part of the sentence.
	Detail string `json:"detail,omitempty"`
}

// FilterCount is how many nodes one filter left out.
type FilterCount struct {
	Code  FilterCode `json:"code"`
	Nodes int        `json:"nodes"`
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
}

// QuotaShortfall is a team's use of a GPU class against its quota, in
// GPUs: it uses Used, the job asks Asked, beyond Quota. With Limit set the
// borrowing limit is reached (Borrowed of it); else the Free GPUs are held
// for teams under their quota, which wait for Waiting.
type QuotaShortfall struct {
	Class    string   `json:"class"`
	Used     float64  `json:"used"`
	Asked    float64  `json:"asked"`
	Quota    float64  `json:"quota"`
	Borrowed *float64 `json:"borrowed,omitempty"`
	Limit    *float64 `json:"limit,omitempty"`
	Free     *float64 `json:"free,omitempty"`
	Waiting  *float64 `json:"waiting,omitempty"`
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
// reason is written from its counts. It is empty for an explanation whose
// code it has no words for (the scheduler writes those itself).
func (e *Explanation) String() string {
	if e == nil {
		return ""
	}
	free := "free "
	if e.Never {
		free = ""
	}
	var text string
	switch e.Exhausted {
	case DimQuota:
		return e.Quota.words()
	case DimRackPower:
		r := e.Rack
		if r == nil {
			return "" // a spread over racks: the scheduler writes it
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
		case n > 1:
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
		if e.Selector != "" {
			return fmt.Sprintf("no node with a matching GPU carries node_selector %s", e.Selector)
		}
		return e.Detail
	case "isolation":
		if e.Never {
			return "no node can give it: " + e.Detail
		}
		return "GPUs are free, but not under a mechanism it accepts: " + e.Detail
	case "stack_mismatch", "runtime_missing":
		return e.Detail
	}
	return ""
}

// words is a quota shortfall's sentence.
func (q *QuotaShortfall) words() string {
	g := func(v float64) string {
		if v == float64(int64(v)) {
			return fmt.Sprint(int64(v))
		}
		return fmt.Sprintf("%.2f", v)
	}
	if q.Limit != nil {
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

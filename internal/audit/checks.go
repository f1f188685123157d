package audit

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/capacity"
	"github.com/gpufleet/gpufleet/internal/health"
)

// Thresholds of the checks (docs/AUDIT.md).
const (
	// IdleShare: an attempt idle (under 10% effective) for at least this
	// share of the GPU time it held is a finding; HighIdleShare makes it high.
	IdleShare, HighIdleShare = 0.5, 0.8
	// MinGPUMinutes is the least GPU time an attempt must have held for the
	// usage checks to judge it.
	MinGPUMinutes = 5
	// MemoryShare: a whole-GPU attempt whose peak memory stays under this
	// share of the card's is oversized.
	MemoryShare = 0.25
	// MemoryBound: DRAM activity at least this, with tensor (or SM)
	// activity under ComputeIdle, is memory-bound work.
	MemoryBound, ComputeIdle = 0.5, 0.3
	// RackNear is the share of its budget a rack's projected draw may
	// reach before it is near it.
	RackNear = 0.9
	// ETAMiss: a wait longer than ETAMissFactor x its prediction (and an
	// hour more) missed; a fleet where at least ETAMissShare of at least
	// ETAMinWaits waits missed is a finding.
	ETAMissFactor, ETAMissShare, ETAMinWaits = 2.0, 0.25, 5
	// RepeatedXIDs is how many XID events on one GPU make a pattern.
	RepeatedXIDs = 2
)

var checks = []Check{
	{ID: "memory-oversized", Title: "jobs on cards far larger than their memory use", Mistakes: []int{1},
		Looks: fmt.Sprintf("per attempt holding whole GPUs for at least %d GPU-minutes: the peak memory any of its GPUs used (rollups), under %.0f%% of the card's", MinGPUMinutes, MemoryShare*100),
		Fix:   "ask for a MIG slice (--sharing mig:PROFILE) or a smaller card (--gpu-model), or let the planner size it (--model)", run: memoryOversized},
	{ID: "pcie-split", Title: "multi-GPU jobs across PCIe while an NVLink domain was free", Mistakes: []int{3},
		Looks: "per attempt of 2 or more GPUs not all in one NVLink domain: a ready, healthy NVLink domain of as many GPUs that no other attempt held when it started; a job that chose its placement (a node selector, or only GPU models with no NVLink) is left out, and the GPU-to-GPU traffic it did is not measured",
		Fix:   "ask for --interconnect nvlink (the scheduler then keeps the job inside one domain), or name NVLink models in --gpu-model", run: pcieSplit},
	{ID: "idle-allocated", Title: "allocated GPUs that idle", Mistakes: []int{4},
		Looks: fmt.Sprintf("per attempt holding GPUs for at least %d GPU-minutes: the share of its GPU time under 10%% effective utilization (SM activity, else utilization); %.0f%% or more is a finding, %.0f%% or more high; sized in idle GPU-hours at the catalog's price", MinGPUMinutes, IdleShare*100, HighIdleShare*100),
		Fix:   "release what is not used: end idle sessions, give jobs a --time-limit, share small work (--sharing timeslice or mig); gpufleet usage shows idle GPU-hours by team", run: idleAllocated},
	{ID: "past-break-even", Title: "generations past their value", Mistakes: []int{5},
		Looks: "the lifecycle report (gpufleet lifecycle): models whose decision is replace or retire",
		Fix:   "follow gpufleet lifecycle: retire what costs more to run than it serves, replace where the newer card pays back in the horizon", run: pastBreakEven},
	{ID: "soft-isolation-production", Title: "production work under soft isolation", Mistakes: []int{6, 9},
		Looks: "attempts of production jobs in the period whose mechanism (node virtualization with the job's sharing, docs/ISOLATION.md) is not hard",
		Fix:   "give production a whole GPU or a MIG slice on bare metal, passthrough or a MIG-backed vGPU: resources.isolation hard (the production default)", run: softProduction},
	{ID: "rack-power", Title: "racks near or over their power budget", Mistakes: []int{7},
		Looks: fmt.Sprintf("each rack's projected draw (gpufleet racks) against its budget: %.0f%% or more is near (medium), over it high; rated draw over budget is low (the scheduler holds work back)", RackNear*100),
		Fix:   "move nodes to racks with headroom, cap GPU power, or raise the provision with facilities; gpufleet racks shows the draw", run: rackPower},
	{ID: "throttling", Title: "GPUs slowed by heat or power", Mistakes: []int{7},
		Looks: "GPUs whose clocks are held down now by hardware slowdown, thermal slowdown or power brake (a software power cap is normal), and throttling health findings in the period",
		Fix:   "check airflow, inlet temperature and the rack's power; the thermal runbook (docs/runbooks/thermal.md) says what to look at", run: throttling},
	{ID: "memory-bound", Title: "memory-bound work on compute-rich cards", Mistakes: []int{8},
		Looks: fmt.Sprintf("per attempt of at least %d GPU-minutes: mean DRAM activity %.0f%% or more with tensor (else SM) activity under %.0f%%, on a model the fleet has a cheaper card per unit of memory bandwidth for", MinGPUMinutes, MemoryBound*100, ComputeIdle*100),
		Fix:   "run it where bandwidth is cheaper (--gpu-model, or --prefer cheapest); adding compute will not speed it", run: memoryBound},
	{ID: "stack-drift", Title: "nodes on unvalidated or mixed stacks", Mistakes: []int{10, 16},
		Looks: "each GPU model's nodes: more than one driver version among them (mixed), and nodes that run no stack validated for their model (gpufleet stacks)",
		Fix:   "validate a stack for the model and roll it out in waves (gpufleet rollout); pin jobs with --stack", run: stackDrift},
	{ID: "no-spare", Title: "no spare for the production class", Mistakes: []int{11},
		Looks: "GPU models production jobs ran on in the period with no spare held for them (server --spare MODEL=N)",
		Fix:   "hold GPUs free for production failover: gpufleet server --spare MODEL=N", run: noSpare},
	{ID: "quarantine-tripped", Title: "quarantine breaker tripped", Mistakes: []int{11},
		Looks: "health.quarantine_refused events in the period: the health rules wanted more nodes out of service than the breaker allows",
		Fix:   "find the common cause (a bad driver, a rack, a rollout) before repairing nodes one by one; docs/RELIABILITY.md", run: quarantine},
	{ID: "repeated-xid", Title: "repeated XIDs on one GPU", Mistakes: []int{11},
		Looks: fmt.Sprintf("GPUs with %d or more XID health findings in the period, or as many XIDs in their last hour", RepeatedXIDs),
		Fix:   "drain the GPU and follow its XID's runbook (docs/runbooks/xid.md); a GPU that keeps raising XIDs is a replacement candidate", run: repeatedXID},
	{ID: "bench-below-median", Title: "cards below their model's bench median", Mistakes: []int{12},
		Looks: "each GPU's newest benchmark figures against the fleet median of its model (gpufleet bench): those under the gate",
		Fix:   "re-run gpufleet bench on the node; a card that stays low goes to repair (the bench runbook, docs/runbooks/bench.md)", run: benchBelow},
	{ID: "precision-not-native", Title: "formats the card does not run natively", Mistakes: []int{14},
		Looks: "attempts of jobs that asked for a precision (resources.precision, or the planner's precision at admission) on a card with no native peak for it",
		Fix:   "run it on a card with native support (--precision makes the scheduler require it), or serve in a format this card runs natively", run: precisionNotNative},
	{ID: "forecast-shortfall", Title: "a capacity shortfall inside the lead time", Mistakes: []int{17},
		Looks: "the procurement decision (gpufleet procure): models that miss their target within their lead time (the order-by date has passed); later orders are low",
		Fix:   "order what gpufleet procure says now, or cut demand; each week late is a week of missed targets", run: forecastShortfall},
	{ID: "runbook-missing", Title: "runbooks missing for a rule that fired", Mistakes: []int{19, 13},
		Looks: "XIDs the health rules reported in the period that have no runbook section of their own (they fall under xid-unknown)",
		Fix:   "add the XID to internal/health/xid.go with its action and advice; the runbook is generated from it", run: runbookMissing},
	{ID: "energy-unmeasured", Title: "GPU time without energy readings", Mistakes: []int{21},
		Looks: "attempts whose GPUs reported no power in any minute they held them: their energy, and energy per unit of work, cannot be counted",
		Fix:   "run the agent with NVML (--backend nvml) on drivers that report power, so energy per job and team is counted", run: energyUnmeasured},
	{ID: "no-quota-waiting", Title: "teams waiting with no quota", Mistakes: []int{22},
		Looks: "teams with queued jobs and no quota, while other teams have one: they run only on what others leave idle",
		Fix:   "give the team a quota (gpufleet teams put --quota MODEL=N) or tell it it is best-effort", run: noQuotaWaiting},
	{ID: "eta-miss", Title: "waits far above the ETA shown", Mistakes: []int{22},
		Looks: fmt.Sprintf("recent waits against the ETA the job was shown at submission: one longer than %.0fx its ETA and an hour more missed; %.0f%% or more of at least %d waits missing is a finding", ETAMissFactor, ETAMissShare*100, ETAMinWaits),
		Fix:   "give jobs estimates (--estimate) and time limits; look at what took the capacity (gpufleet queue, gpufleet usage)", run: etaMiss},
}

func hours(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) + " GPU-h" }

// jobSubject is a job, with the node of its newest attempt that had one
// (findings about jobs on one node fold into one row).
func jobSubject(j *gpufleet.Job) Subject {
	s := Subject{Kind: "job", Name: j.ID, Title: j.Name, Team: j.Team}
	for i := len(j.Attempts) - 1; i >= 0 && s.Node == ""; i-- {
		s.Node = j.Attempts[i].Node
	}
	return s
}

func gpuSubject(n *gpufleet.Node, g gpufleet.NodeGPU) Subject {
	return Subject{Kind: "gpu", Name: fmt.Sprintf("%s gpu %d", n.Name, g.Index), Node: n.Name}
}

// judged lists the attempts of the period that held GPUs long enough for
// the usage checks, with whether any usage was recorded at all.
func judged(s *Snapshot) (out []*use, any bool) {
	for _, u := range s.derive().uses {
		if u.minutes > 0 {
			any = true
		}
		if u.allocS >= MinGPUMinutes*60 {
			out = append(out, u)
		}
	}
	return out, any || len(s.Usage) > 0
}

const noUsage = "no per-GPU usage (rollups) recorded in the period"

func idleAllocated(s *Snapshot) ([]Finding, string) {
	us, any := judged(s)
	if !any {
		return nil, noUsage
	}
	var out []Finding
	for _, u := range us {
		share := u.idleS / u.allocS
		if share < IdleShare {
			continue
		}
		sev := Medium
		if share >= HighIdleShare {
			sev = High
		}
		idle := u.idleS / 3600
		eff := "no utilization reading"
		if v, ok := u.eff.value(); ok {
			eff = fmt.Sprintf("mean effective utilization %.0f%%", v*100)
		}
		out = append(out, Finding{Severity: sev, Subject: jobSubject(u.job),
			Summary:  fmt.Sprintf("held %d %s GPU(s) that idled %.0f%% of the time", len(u.gpus), u.model, share*100),
			Evidence: fmt.Sprintf("%s held, %s of it under 10%% effective utilization (%s), attempt %s", hours(u.gpuHours()), hours(idle), eff, u.att.ID),
			GPUHours: ptr(round2(idle)), CostUSD: s.cost(u.model, idle)})
	}
	return out, ""
}

func memoryOversized(s *Snapshot) ([]Finding, string) {
	us, any := judged(s)
	if !any {
		return nil, noUsage
	}
	var out []Finding
	for _, u := range us {
		g, ok := s.Models[u.model]
		if !ok || u.memMax < 0 || g.MemoryBytes <= 0 || !u.job.Resources.Sharing.Exclusive() {
			continue
		}
		share := float64(u.memMax) / float64(g.MemoryBytes)
		if share >= MemoryShare {
			continue
		}
		need := int64(float64(u.memMax) * 1.2)
		instead := ""
		for _, p := range g.MIGProfiles {
			if p.MemoryBytes >= need {
				instead = fmt.Sprintf("a MIG %s slice of the same card (%s)", p.Name, gpufleet.Bytes(p.MemoryBytes))
				break
			}
		}
		if instead == "" {
			for _, m := range s.fleetModels() {
				if m.MemoryBytes >= need && m.MemoryBytes < g.MemoryBytes {
					instead = fmt.Sprintf("a %s (%s)", m.ID, gpufleet.Bytes(m.MemoryBytes))
					break
				}
			}
		}
		if instead == "" {
			continue // nothing smaller would hold it
		}
		out = append(out, Finding{Severity: Low, Subject: jobSubject(u.job),
			Summary:  fmt.Sprintf("used at most %s of %s per GPU; %s would hold it", gpufleet.Bytes(u.memMax), gpufleet.Bytes(g.MemoryBytes), instead),
			Evidence: fmt.Sprintf("peak memory %.0f%% of the %s's over %s held (attempt %s)", share*100, g.ID, hours(u.gpuHours()), u.att.ID),
			GPUHours: ptr(round2(u.gpuHours())), CostUSD: s.cost(u.model, u.gpuHours())})
	}
	return out, ""
}

func memoryBound(s *Snapshot) ([]Finding, string) {
	us, any := judged(s)
	if !any {
		return nil, noUsage
	}
	var out []Finding
	for _, u := range us {
		dram, ok := u.dram.value()
		if !ok || dram < MemoryBound {
			continue
		}
		compute, ok := u.tensor.value()
		if !ok {
			compute, ok = u.sm.value()
		}
		if !ok || compute >= ComputeIdle {
			continue
		}
		g, ok := s.Models[u.model]
		if !ok || g.PricePerHourUSD == nil || g.MemoryBandwidthBytesPerS <= 0 {
			continue
		}
		perBW := *g.PricePerHourUSD / g.MemoryBandwidthBytesPerS
		best, bestPerBW := "", perBW
		for _, m := range s.fleetModels() {
			if m.ID == g.ID || m.PricePerHourUSD == nil || m.MemoryBandwidthBytesPerS <= 0 || m.MemoryBytes < u.memMax {
				continue
			}
			if v := *m.PricePerHourUSD / m.MemoryBandwidthBytesPerS; v < bestPerBW*0.9 {
				best, bestPerBW = m.ID, v
			}
		}
		if best == "" {
			continue
		}
		saved := u.gpuHours() * (perBW - bestPerBW) * g.MemoryBandwidthBytesPerS
		out = append(out, Finding{Severity: Low, Subject: jobSubject(u.job),
			Summary:  fmt.Sprintf("memory-bound on %s; %s moves its bytes %.0f%% cheaper", g.ID, best, (1-bestPerBW/perBW)*100),
			Evidence: fmt.Sprintf("mean DRAM activity %.0f%%, compute activity %.0f%% over %s (attempt %s)", dram*100, compute*100, hours(u.gpuHours()), u.att.ID),
			GPUHours: ptr(round2(u.gpuHours())), CostUSD: ptr(round2(saved))})
	}
	return out, ""
}

// planPrecision is the precision a job's admission plan ran the model in.
func planPrecision(plan any) gpufleet.Precision {
	if plan == nil {
		return ""
	}
	b, err := json.Marshal(plan)
	if err != nil {
		return ""
	}
	var p struct {
		Precision string `json:"precision"`
	}
	if json.Unmarshal(b, &p) != nil {
		return ""
	}
	v, err := gpufleet.ParsePrecision(p.Precision)
	if err != nil {
		return ""
	}
	return v
}

func precisionNotNative(s *Snapshot) ([]Finding, string) {
	var out []Finding
	for _, u := range s.derive().uses {
		want := u.job.Resources.Precision
		if want == "" {
			want = planPrecision(u.job.Plan)
		}
		g, ok := s.Models[u.model]
		if want == "" || !ok {
			continue
		}
		if _, native := g.Peak(want); native {
			continue
		}
		held := u.end.Sub(u.start).Hours() * float64(len(u.gpus))
		out = append(out, Finding{Severity: Medium, Subject: jobSubject(u.job),
			Summary:  fmt.Sprintf("asked for %s on %s, which has no native %s", want, g.ID, want),
			Evidence: fmt.Sprintf("attempt %s ran on %d %s GPU(s) for %s; the card's natively supported formats lack %s, so the work is dequantized or emulated at a wider format's speed", u.att.ID, len(u.gpus), g.ID, u.end.Sub(u.start).Round(time.Second), want),
			GPUHours: ptr(round2(held)), CostUSD: s.cost(g.ID, held)})
	}
	return out, ""
}

// busy lists, per GPU UUID, the intervals attempts held it.
func busyIntervals(s *Snapshot, ix fleetIndex) map[string][][2]time.Time {
	out := map[string][][2]time.Time{}
	for _, j := range s.Jobs {
		for _, a := range j.Attempts {
			if a.StartedAt == nil {
				continue
			}
			end := s.Now
			if a.FinishedAt != nil {
				end = *a.FinishedAt
			}
			for _, id := range a.AllGPUs() {
				if info, ok := ix.gpus[id]; ok {
					out[info.gpu.UUID] = append(out[info.gpu.UUID], [2]time.Time{*a.StartedAt, end})
				}
			}
		}
	}
	return out
}

func heldAt(iv [][2]time.Time, t time.Time, self [2]time.Time) bool {
	for _, x := range iv {
		if x == self {
			continue
		}
		if !t.Before(x[0]) && t.Before(x[1]) {
			return true
		}
	}
	return false
}

func pcieSplit(s *Snapshot) ([]Finding, string) {
	d := s.derive()
	ix, busy := d.ix, d.busy
	var out []Finding
	for _, u := range d.uses {
		if len(u.gpus) < 2 || choseNoNVLink(u.job, s.Models) {
			continue
		}
		domains := map[string]bool{}
		for _, id := range u.gpus {
			domains[ix.gpus[id].domain] = true
		}
		if len(domains) == 1 && !domains[""] {
			continue // one NVLink domain
		}
		self := [2]time.Time{u.start, u.end}
		// Free NVLink domains of as many GPUs at its start (the first three,
		// by node order).
		var fits []string
		for ni := 0; ni < len(s.Nodes) && len(fits) < 3; ni++ {
			n := &s.Nodes[ni]
			if n.State != gpufleet.NodeReady {
				continue
			}
			free := map[string]int{}
			for _, g := range n.GPUs {
				if g.NVLinkDomain == "" || len(g.MIGInstances) > 0 || g.State != gpufleet.NodeReady || g.Health == gpufleet.Unhealthy ||
					heldAt(busy[g.UUID], u.start, self) {
					continue
				}
				free[g.NVLinkDomain]++
			}
			for _, d := range slices.Sorted(maps.Keys(free)) {
				if free[d] >= len(u.gpus) && len(fits) < 3 {
					fits = append(fits, fmt.Sprintf("%s (%s): %d free", n.Name, n.GPUs[0].Model, free[d]))
				}
			}
		}
		if len(fits) == 0 {
			continue
		}
		how := "over PCIe (no NVLink between them)"
		if len(domains) > 1 && !domains[""] {
			how = fmt.Sprintf("across %d NVLink domains", len(domains))
		}
		held := u.end.Sub(u.start).Hours() * float64(len(u.gpus))
		out = append(out, Finding{Severity: Medium, Subject: jobSubject(u.job),
			Summary:  fmt.Sprintf("%d %s GPUs talked %s while an NVLink domain was free", len(u.gpus), u.model, how),
			Evidence: fmt.Sprintf("attempt %s started %s on %s; NVLink domains free then: %s", u.att.ID, u.start.Format(time.RFC3339), u.att.Node, strings.Join(fits, "; ")),
			GPUHours: ptr(round2(held)), CostUSD: s.cost(u.model, held)})
	}
	return out, ""
}

// choseNoNVLink reports whether a job made its placement its own choice:
// it pinned its nodes by selector, or allowed only GPU models with no
// NVLink between cards. Models it names that the snapshot does not know
// (aliases, classes) do not count as a choice.
func choseNoNVLink(j *gpufleet.Job, models map[string]catalog.GPU) bool {
	r := j.Resources
	if len(r.NodeSelector) > 0 {
		return true
	}
	if len(r.GPUModels) == 0 {
		return false
	}
	for _, m := range r.GPUModels {
		g, ok := models[m]
		if !ok || (g.InterconnectKind == catalog.InterconnectNVLink && g.DomainSize > 1) {
			return false
		}
	}
	return true
}

func softProduction(s *Snapshot) ([]Finding, string) {
	virt := map[string]gpufleet.Virtualization{}
	for _, n := range s.Nodes {
		virt[n.Name] = gpufleet.NodeVirtualization(n.Labels)
	}
	var out []Finding
	for ji := range s.Jobs {
		j := &s.Jobs[ji]
		if j.Priority != gpufleet.Production {
			continue
		}
		for _, a := range j.Attempts {
			if a.StartedAt == nil || (a.FinishedAt != nil && !a.FinishedAt.After(s.Since)) {
				continue
			}
			v, ok := virt[a.Node]
			if !ok {
				continue
			}
			m := gpufleet.MechanismOf(v, j.Resources.Sharing)
			if m.Isolation() == gpufleet.IsolationHard {
				continue
			}
			out = append(out, Finding{Severity: High, Subject: jobSubject(j),
				Summary:  fmt.Sprintf("production work under %s isolation (%s)", m.Isolation(), m.Name),
				Evidence: fmt.Sprintf("attempt %s on %s: %s", a.ID, a.Node, m.Describe())})
		}
	}
	return out, ""
}

func rackPower(s *Snapshot) ([]Finding, string) {
	if len(s.Racks) == 0 {
		return nil, "no rack has a power budget (gpufleet racks put)"
	}
	var out []Finding
	for _, r := range s.Racks {
		if r.PowerBudgetWatts <= 0 {
			continue
		}
		sub := Subject{Kind: "rack", Name: r.Name}
		if r.DrawWatts != nil {
			share := float64(*r.DrawWatts / r.PowerBudgetWatts)
			switch {
			case share > 1:
				out = append(out, Finding{Severity: High, Subject: sub, Summary: fmt.Sprintf("projected draw %s over its %s budget", *r.DrawWatts, r.PowerBudgetWatts),
					Evidence: fmt.Sprintf("%.0f%% of budget; nodes %s", share*100, strings.Join(r.Members, ", "))})
				continue
			case share >= RackNear:
				out = append(out, Finding{Severity: Medium, Subject: sub, Summary: fmt.Sprintf("projected draw %s is %.0f%% of its %s budget", *r.DrawWatts, share*100, r.PowerBudgetWatts),
					Evidence: "nodes " + strings.Join(r.Members, ", ")})
				continue
			}
		}
		if r.RatedWatts > r.PowerBudgetWatts {
			out = append(out, Finding{Severity: Low, Subject: sub, Summary: fmt.Sprintf("rated %s against a %s budget: the scheduler holds work back to stay under it", r.RatedWatts, r.PowerBudgetWatts),
				Evidence: "nodes " + strings.Join(r.Members, ", "), Fix: "move a node to a rack with headroom, or cap GPU power, to use every GPU at once"})
		}
	}
	return out, ""
}

// badThrottle reports a clock-event reason that means heat or power
// trouble (a software power cap, idle and the like are normal).
func badThrottle(r string) bool {
	r = strings.ToLower(r)
	return strings.Contains(r, "thermal") || strings.Contains(r, "hw_slowdown") || strings.Contains(r, "hardware") || strings.Contains(r, "power_brake") || strings.Contains(r, "brake")
}

func throttling(s *Snapshot) ([]Finding, string) {
	var out []Finding
	seen := map[string]bool{}
	for _, n := range s.Nodes {
		for _, g := range n.GPUs {
			if g.Live == nil {
				continue
			}
			var bad []string
			for _, r := range g.Live.ThrottleReasons {
				if badThrottle(r) {
					bad = append(bad, r)
				}
			}
			if len(bad) == 0 {
				continue
			}
			seen[g.UUID] = true
			out = append(out, Finding{Severity: Medium, Subject: gpuSubject(&n, g),
				Summary: "clocks held down by " + strings.Join(bad, ", "), Evidence: fmt.Sprintf("%s %s now", g.Model, g.UUID)})
		}
	}
	ix := s.derive().ix
	for _, e := range s.Events {
		if !strings.HasPrefix(e.Kind, "gpu.") || !slowed(e.Detail) || seen[e.Object] {
			continue
		}
		seen[e.Object] = true
		sub := Subject{Kind: "gpu", Name: e.Object}
		if info, ok := ix.gpus[e.Object]; ok {
			sub = gpuSubject(info.node, info.gpu)
		}
		out = append(out, Finding{Severity: Medium, Subject: sub,
			Summary: "sustained throttling found by the health rules", Evidence: e.At.Format(time.RFC3339) + ": " + e.Detail})
	}
	return out, ""
}

// slowed reports whether a GPU event's detail is a sustained clock-event
// finding of the health rules (power brake, thermal throttling, hardware
// slowdown).
func slowed(detail string) bool {
	d := strings.ToLower(detail)
	return slices.ContainsFunc(health.ClockReasonWords(), func(w string) bool { return strings.Contains(d, w) })
}

func stackDrift(s *Snapshot) ([]Finding, string) {
	var out []Finding
	drivers := map[string]map[string][]string{} // model -> driver -> nodes
	for _, n := range s.Nodes {
		if len(n.GPUs) == 0 {
			continue
		}
		m := n.GPUs[0].Model
		if drivers[m] == nil {
			drivers[m] = map[string][]string{}
		}
		d := n.Versions["driver"]
		drivers[m][d] = append(drivers[m][d], n.Name)
	}
	for _, m := range slices.Sorted(maps.Keys(drivers)) {
		if len(drivers[m]) < 2 {
			continue
		}
		var parts []string
		for _, d := range slices.Sorted(maps.Keys(drivers[m])) {
			parts = append(parts, fmt.Sprintf("%s on %s", orUnknown(d), strings.Join(drivers[m][d], ", ")))
		}
		out = append(out, Finding{Severity: Medium, Subject: Subject{Kind: "model", Name: m},
			Summary:  fmt.Sprintf("%d driver versions on %s nodes", len(drivers[m]), m),
			Evidence: strings.Join(parts, "; ")})
	}
	var validated []gpufleet.Stack
	for _, st := range s.Stacks {
		if st.State == gpufleet.StackValidated {
			validated = append(validated, st)
		}
	}
	if len(validated) == 0 {
		if len(out) > 0 {
			return out, ""
		}
		return nil, "no stack is validated (gpufleet stacks): nodes cannot be told validated from not"
	}
	for _, n := range s.Nodes {
		if len(n.GPUs) == 0 {
			continue
		}
		model := n.GPUs[0].Model
		ok := false
		for _, st := range validated {
			if slices.Contains(st.Nodes, n.Name) && slices.ContainsFunc(st.Validated, func(v gpufleet.StackValidation) bool { return v.GPUModel == model }) {
				ok = true
				break
			}
		}
		if !ok {
			out = append(out, Finding{Severity: Medium, Subject: Subject{Kind: "node", Name: n.Name},
				Summary:  fmt.Sprintf("runs no stack validated for %s", model),
				Evidence: "versions " + kv(n.Versions)})
		}
	}
	return out, ""
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func kv(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func noSpare(s *Snapshot) ([]Finding, string) {
	ix := s.derive().ix
	models := map[string]bool{}
	for _, j := range s.Jobs {
		if j.Priority != gpufleet.Production {
			continue
		}
		for _, a := range j.Attempts {
			if a.StartedAt == nil || (a.FinishedAt != nil && !a.FinishedAt.After(s.Since)) {
				continue
			}
			for _, id := range a.AllGPUs() {
				if info, ok := ix.gpus[id]; ok {
					models[info.gpu.Model] = true
				}
			}
		}
	}
	if len(models) == 0 {
		return nil, ""
	}
	covered := func(m string) bool {
		for key, n := range s.Spare {
			if n > 0 && (key == m || slices.Contains(s.Classes[key], m)) {
				return true
			}
		}
		return false
	}
	var out []Finding
	for _, m := range slices.Sorted(maps.Keys(models)) {
		if covered(m) {
			continue
		}
		out = append(out, Finding{Severity: High, Subject: Subject{Kind: "model", Name: m},
			Summary:  "production ran on " + m + " with no spare held for failover",
			Evidence: "server --spare has no entry for " + m + " or a class holding it: a failed GPU's production work waits for lower classes to finish"})
	}
	return out, ""
}

func quarantine(s *Snapshot) ([]Finding, string) {
	var out []Finding
	for _, e := range s.Events {
		if e.Kind != "health.quarantine_refused" {
			continue
		}
		out = append(out, Finding{Severity: High, Subject: Subject{Kind: "node", Name: e.Object},
			Summary: "the quarantine breaker kept a failing node in service", Evidence: e.At.Format(time.RFC3339) + ": " + e.Detail})
	}
	return out, ""
}

var xidRe = regexp.MustCompile(`\bXID (\d{1,5})\b`)

// xidEvents lists, per GPU UUID, the XIDs its health events of the period
// name.
func xidEvents(s *Snapshot) map[string][]int {
	out := map[string][]int{}
	for _, e := range s.Events {
		if !strings.HasPrefix(e.Kind, "gpu.") || e.At.Before(s.Since) {
			continue
		}
		for _, m := range xidRe.FindAllStringSubmatch(e.Detail, -1) {
			x, _ := strconv.Atoi(m[1])
			out[e.Object] = append(out[e.Object], x)
		}
	}
	return out
}

func repeatedXID(s *Snapshot) ([]Finding, string) {
	ev := xidEvents(s)
	var out []Finding
	for _, n := range s.Nodes {
		for _, g := range n.GPUs {
			xs := ev[g.UUID]
			src := "health findings in the period"
			if g.Live != nil && len(g.Live.RecentXIDs) > len(xs) {
				xs, src = g.Live.RecentXIDs, "in the last hour"
			}
			if len(xs) < RepeatedXIDs {
				continue
			}
			var words []string
			for _, x := range xs {
				words = append(words, strconv.Itoa(x))
			}
			out = append(out, Finding{Severity: High, Subject: gpuSubject(&n, g),
				Summary:  fmt.Sprintf("%d XIDs on one GPU", len(xs)),
				Evidence: fmt.Sprintf("%s %s: XIDs %s (%s)", g.Model, g.UUID, strings.Join(words, ", "), src)})
		}
	}
	return out, ""
}

func benchBelow(s *Snapshot) ([]Finding, string) {
	if len(s.Bench) == 0 {
		return nil, "no benchmark figures recorded (gpufleet bench)"
	}
	var out []Finding
	for _, r := range s.Bench {
		if r.Fleet == nil || !r.Fleet.Degraded || r.Fleet.Fraction == nil {
			continue
		}
		out = append(out, Finding{Severity: Medium, Subject: Subject{Kind: "gpu", Name: fmt.Sprintf("%s gpu %d", r.Node, r.GPU), Node: r.Node},
			Summary:  fmt.Sprintf("%s at %.0f%% of the %s median", r.Name, *r.Fleet.Fraction*100, r.Model),
			Evidence: fmt.Sprintf("%.4g against a median of %.4g over %d peers (gate %.0f%%), measured %s", r.Value, r.Fleet.Median, r.Fleet.Peers, r.Fleet.Gate*100, r.At.Format(time.RFC3339))})
	}
	return out, ""
}

func forecastShortfall(s *Snapshot) ([]Finding, string) {
	if s.ProcureErr != "" {
		return nil, "no procurement decision: " + s.ProcureErr
	}
	var out []Finding
	for _, r := range s.Procure {
		if r.Action != capacity.Order || r.Crossing == nil {
			continue
		}
		sev := Low
		if r.OrderBy == nil || !r.OrderBy.After(s.Now) {
			sev = High
		}
		ev := fmt.Sprintf("target %s missed from %s; lead time %d days (%s)", r.TargetText, r.Crossing.Format(time.DateOnly), r.LeadTimeDays, r.LeadTimeSource)
		if r.LateDays > 0 {
			ev += fmt.Sprintf("; the order is %d days late", r.LateDays)
		}
		out = append(out, Finding{Severity: sev, Subject: Subject{Kind: "model", Name: r.GPUModel},
			Summary:  fmt.Sprintf("order %d node(s) (%d GPUs) of %s", r.Nodes, r.GPUs, r.GPUModel),
			Evidence: ev})
	}
	return out, ""
}

func pastBreakEven(s *Snapshot) ([]Finding, string) {
	if s.Lifecycle == nil {
		return nil, "no lifecycle report: " + s.LifecycleErr
	}
	var out []Finding
	for _, m := range s.Lifecycle.Models {
		if m.Decision != capacity.Replace && m.Decision != capacity.Retire {
			continue
		}
		out = append(out, Finding{Severity: Low, Subject: Subject{Kind: "model", Name: m.GPUModel},
			Summary:  fmt.Sprintf("%s %d %s GPU(s)", m.Decision, m.GPUs, m.GPUModel),
			Evidence: strings.Join(m.Reasons, "; ")})
	}
	return out, ""
}

func runbookMissing(s *Snapshot) ([]Finding, string) {
	var out []Finding
	seen := map[int]bool{}
	for _, xs := range xidEvents(s) {
		for _, x := range xs {
			if s.RunbookXIDs[x] || seen[x] {
				continue
			}
			seen[x] = true
			out = append(out, Finding{Severity: Medium, Subject: Subject{Kind: "rule", Name: fmt.Sprintf("xid-%d", x)},
				Summary:  fmt.Sprintf("XID %d fired and has no runbook section", x),
				Evidence: "only the catch-all xid-unknown page covers it (docs/runbooks/xid.md)"})
		}
	}
	return out, ""
}

func energyUnmeasured(s *Snapshot) ([]Finding, string) {
	us, any := judged(s)
	if !any {
		return nil, noUsage
	}
	var out []Finding
	for _, u := range us {
		if u.powerMinutes > 0 {
			continue
		}
		out = append(out, Finding{Severity: Low, Subject: jobSubject(u.job),
			Summary:  "no power readings: its energy is not counted",
			Evidence: fmt.Sprintf("%s held on %s with no power reading in any minute (attempt %s)", hours(u.gpuHours()), u.model, u.att.ID),
			GPUHours: ptr(round2(u.gpuHours()))})
	}
	return out, ""
}

func noQuotaWaiting(s *Snapshot) ([]Finding, string) {
	quota := map[string]bool{}
	anyQuota := false
	for _, t := range s.Teams {
		for _, n := range t.Quota {
			if n > 0 {
				quota[t.Name], anyQuota = true, true
			}
		}
	}
	if !anyQuota {
		return nil, ""
	}
	waiting := map[string]int{}
	for _, q := range s.Queue {
		if !quota[q.Team] {
			waiting[q.Team]++
		}
	}
	var out []Finding
	for _, t := range slices.Sorted(maps.Keys(waiting)) {
		out = append(out, Finding{Severity: Medium, Subject: Subject{Kind: "team", Name: t, Team: t},
			Summary:  fmt.Sprintf("%d job(s) waiting with no quota", waiting[t]),
			Evidence: "the team runs only on capacity teams with quota leave idle, and is preempted when they reclaim it"})
	}
	return out, ""
}

func etaMiss(s *Snapshot) ([]Finding, string) {
	if len(s.Waits) < ETAMinWaits {
		return nil, fmt.Sprintf("%d waits with a recorded ETA, fewer than %d (the leader keeps them since it started)", len(s.Waits), ETAMinWaits)
	}
	missed := 0
	var worst time.Duration
	for _, w := range s.Waits {
		if w.Actual > time.Duration(ETAMissFactor*float64(w.Predicted))+time.Hour {
			missed++
			worst = max(worst, w.Actual-w.Predicted)
		}
	}
	share := float64(missed) / float64(len(s.Waits))
	if share < ETAMissShare {
		return nil, ""
	}
	return []Finding{{Severity: Medium, Subject: Subject{Kind: "fleet", Name: "queue"},
		Summary:  fmt.Sprintf("%.0f%% of waits ran far past the ETA shown", share*100),
		Evidence: fmt.Sprintf("%d of %d waits longer than %.0fx their ETA and an hour more; the worst by %s", missed, len(s.Waits), ETAMissFactor, worst.Round(time.Minute))}}, ""
}

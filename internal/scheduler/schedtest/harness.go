package schedtest

import (
	"bufio"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// Harness runs a scenario script against scheduler.Schedule. A script is
// a list of commands, one per line ('#' starts a comment):
//
//	policy gpufleet                      built-in policy (default gpufleet)
//	config backfill=off packing=best-fit switch features (see setConfig)
//	class big=h100-sxm-80gb,h200-sxm-141gb
//	node n1 model=h100-sxm-80gb gpus=8 [domain=D|domains=SIZE|pcie] [rack=R] [block=B]
//	     [label=k:v] [state=cordoned] [mig=COUNT:PROFILE:INSTANCES]
//	     [stack=driver:550.54.15,cuda:12.4,torch:2.5.1+cu124]
//	gpustate n1 3 down
//	team a quota=h100-sxm-80gb:8 borrow=8 weight=1 usage=0
//	submit j1 team=a gpus=4 prio=training est=1h at=0s [nodes=2] [models=a,b]
//	     [mem=80GiB] [cc=9.0] [precision=fp8] [sharing=mig:1g.10gb|timeslice:0.25]
//	     [nvlink] [prefer=cheapest] [joules=l4:0.9,h100-sxm-80gb:0.3] [select=k:v]
//	     [stack=NAME] [require=cuda:>=12.4;driver:>=550,<560]
//	     [isolation=hard|soft|any] [overhead=<=5%] [runtime=container]
//	     [preemptible] [grace=30s] [requeued] [workload=W] [est=none]
//	     [limit=2h]                      a time limit for each run
//	     [preempted=N] [preempted-at=1h,2h] its preemptions so far, and when
//	                                     the recent ones ended (from T0)
//	     [attained=2h]                   GPU-time of its earlier runs (LAS)
//	     [invalid=WORDS]                 the caller's validation refused the stored request
//	     [retries=N]                     failed runs it may retry (retries-used=N: used so far)
//	run j0 team=a gpus=4 ... since=0s on=n1[:0,1,2,3]   a job already running
//	arrived j9 team=a gpus=1 ... at=2h   a job submitted then (Input.Arrivals): the ETAs
//	                                     expect it again a window later
//	finish j0                            a running job ends
//	ended j0 failed [exit=1] at=40s      a running job's run ended (succeeded, failed,
//	----                                 stopped or lost), and what became of the job
//	next j0 queued retry: attempt failed (exit 1); retry 1 of 2
//	drain n1 [gpu=3] [reason=WORDS]      the node (or one GPU) drains
//	waited gpus=1 est=1h predicted=10h actual=2h [count=30]
//	                                     recent waits the ETAs are calibrated on
//	                                     (Input.WaitHistory); pending lines then read
//	                                     eta=P50..P90@CONFIDENCE
//	ran team=a [workload=W] gpus=4 for=30m [count=N]
//	                                     finished runs the estimates of jobs without
//	                                     one learn from (Input.Runs); pending lines of
//	                                     jobs planned on them read est=RUN@FROM/RUNS
//	stack prod driver:550.54.15,cuda:12.4
//	                                     a named stack jobs may require (Input.Stacks)
//	rack r1 budget=10kW [reserve=1kW] [draw=6kW] [over=3m]
//	                                     a power budget for the nodes of rack r1 (Input.Racks);
//	                                     over: how long its draw has been over it
//	                                     (config over-budget=stop over-budget-after=2m)
//	gpudraw MODEL CLASS=WATTS ...        what a GPU of MODEL adds to its rack's draw per class
//	silent n1 since=10s                  the node's agent last reported then (Node.LastSeen);
//	                                     its runs are lost after config lost-after=
//	quarantine n1 reason=WORDS [max=0.1] the health rules take the node out of service
//	----                                 (scheduler.Quarantine within scheduler.Breaker)
//	node n1 draining health: WORDS
//	repaired n1 / validated n1 pass|fail [detail=WORDS]
//	----                                 the repair path (scheduler.Repaired, Validated);
//	node n1 validating operator: ...     a schedule first moves drained nodes to repairing
//	cancel j0                            the job's cancel is requested (scheduler.Cancel:
//	                                     a queued job ends at once, a running one is stopped)
//	schedule at=10s [dry] [recheck] [explain]
//	                                     recheck prints Output.Recheck; explain
//	                                     each pending job's explanation (counts)
//	feasible j9 team=a gpus=1 ...        the submit-time check of a job (not
//	                                     queued): "refused" with its
//	                                     explanation, or "feasible"
//	----
//	expected output, up to a blank line
//	advance at=40s
//	----
//	what ended at the graces' ends, up to a blank line
//
// Time moves with scheduler.Apply, as in the simulator: a schedule first
// advances to its time, and after it (unless dry) its decisions are
// applied: starts become running jobs, stopped jobs hold their GPUs until
// their grace ends, then requeue (preempted, drained) or end (time limit,
// cancel). advance moves time alone and says which jobs left their GPUs.
type Harness struct {
	in     scheduler.Input
	check  scheduler.Job // the job of the last feasible command
	policy string
	cfgOps [][2]string
	// life is each node's place on the repair path (scheduler.NodeLife),
	// for nodes the lifecycle commands moved; maxQuarantine the breaker's
	// fraction (0: the health rules' default).
	life          map[string]scheduler.NodeLife
	maxQuarantine float64
	// Explained, when set, sees every reason the script's commands give
	// as data: each pending entry's code, sentence and explanation, and
	// each refusal of feasible (job "").
	Explained func(job, code, reason string, e *gpufleet.Explanation)
}

// NewHarness returns a harness with the mini catalog and policy gpufleet.
func NewHarness() *Harness {
	h := &Harness{policy: "gpufleet"}
	h.in.Models = Models()
	h.in.Classes = map[string][]string{}
	return h
}

// Run executes a script and returns it with every expected block replaced
// by the actual output, so the caller compares it with the original (and
// writes it back under -update).
func Run(script string) (string, error) {
	return NewHarness().Run(script)
}

// Run executes a script on h; see the package function Run.
func (h *Harness) Run(script string) (string, error) {
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(script))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lineNo := 0
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		lineNo = i + 1
		out.WriteString(line + "\n")
		trim := strings.TrimSpace(line)
		if trim == "" || strings.HasPrefix(trim, "#") {
			continue
		}
		fields := strings.Fields(trim)
		if !blockCommands[fields[0]] {
			if err := h.command(fields); err != nil {
				return "", fmt.Errorf("line %d: %w", lineNo, err)
			}
			continue
		}
		var got string
		var err error
		switch fields[0] {
		case "schedule":
			got, err = h.schedule(fields[1:])
		case "ended":
			got, err = h.ended(fields[1:])
		case "quarantine", "repaired", "validated":
			got, err = h.nodeLife(fields[0], fields[1:])
		case "feasible":
			got, err = h.feasible(fields[1:])
		default:
			got, err = h.advance(fields[1:])
		}
		if err != nil {
			return "", fmt.Errorf("line %d: %w", lineNo, err)
		}
		// Skip the old expected block.
		if i+1 < len(lines) && strings.TrimSpace(lines[i+1]) == "----" {
			i++
			for i+1 < len(lines) && strings.TrimSpace(lines[i+1]) != "" {
				i++
			}
		}
		out.WriteString("----\n" + got)
	}
	return out.String(), nil
}

func (h *Harness) command(f []string) error {
	args, flags := parseArgs(f[1:])
	switch f[0] {
	case "policy":
		if len(f) != 2 {
			return fmt.Errorf("policy NAME")
		}
		if _, err := scheduler.PolicyConfig(f[1]); err != nil {
			return err
		}
		h.policy, h.cfgOps = f[1], nil
	case "config":
		for _, k := range sortedArgKeys(args) {
			h.cfgOps = append(h.cfgOps, [2]string{k, args[k]})
		}
	case "class":
		for k, v := range args {
			h.in.Classes[k] = strings.Split(v, ",")
		}
	case "node":
		return h.node(f[1], args, flags)
	case "gpustate":
		if len(f) != 4 {
			return fmt.Errorf("gpustate NODE INDEX STATE")
		}
		idx, _ := strconv.Atoi(f[2])
		for i := range h.in.Nodes {
			if h.in.Nodes[i].Name == f[1] {
				h.in.Nodes[i].GPUs[idx].State = scheduler.GPUState(f[3])
			}
		}
	case "team":
		return h.team(f[1], args)
	case "submit", "run", "arrived":
		return h.job(f[0], f[1], args, flags)
	case "finish":
		h.in.Jobs = slices.DeleteFunc(h.in.Jobs, func(j scheduler.Job) bool { return j.ID == f[1] })
	case "drain":
		return h.drain(f[1], args)
	case "waited":
		var w scheduler.WaitSample
		var err error
		count := 1
		if v, ok := args["count"]; ok {
			count, err = strconv.Atoi(v)
		}
		if err == nil {
			w.GPUs, err = strconv.Atoi(args["gpus"])
		}
		for _, d := range []struct {
			k   string
			dst *time.Duration
		}{{"est", &w.Estimate}, {"predicted", &w.Predicted}, {"actual", &w.Actual}} {
			if err == nil {
				*d.dst, err = gpufleet.ParseDuration(args[d.k])
			}
		}
		if err != nil {
			return fmt.Errorf("waited: %w", err)
		}
		for range count {
			h.in.WaitHistory = append(h.in.WaitHistory, w)
		}
	case "ran":
		r := scheduler.RunSample{Team: args["team"], Workload: args["workload"]}
		count := 1
		var err error
		if v, ok := args["count"]; ok {
			count, err = strconv.Atoi(v)
		}
		if err == nil {
			r.GPUs, err = strconv.Atoi(args["gpus"])
		}
		if err == nil {
			r.Ran, err = gpufleet.ParseDuration(args["for"])
		}
		if err != nil {
			return fmt.Errorf("ran: %w", err)
		}
		for range count {
			h.in.Runs = scheduler.KeepRun(h.in.Runs, r)
		}
	case "rack":
		r := scheduler.Rack{Name: f[1]}
		for k, dst := range map[string]*gpufleet.Watts{"budget": &r.BudgetWatts, "reserve": &r.ProductionReserveWatts, "draw": &r.DrawWatts, "idle": &r.IdleWatts} {
			if v, ok := args[k]; ok {
				w, err := gpufleet.ParsePower(v)
				if err != nil {
					return fmt.Errorf("rack %s %s: %w", f[1], k, err)
				}
				*dst = w
			}
		}
		if v, ok := args["over"]; ok {
			d, err := gpufleet.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("rack %s over: %w", f[1], err)
			}
			r.OverBudgetFor = d
		}
		h.in.Racks = slices.DeleteFunc(h.in.Racks, func(x scheduler.Rack) bool { return x.Name == r.Name })
		h.in.Racks = append(h.in.Racks, r)
	case "stack":
		if len(f) < 3 {
			return fmt.Errorf("stack: want a name and component:version pairs")
		}
		if h.in.Stacks == nil {
			h.in.Stacks = map[string]gpufleet.StackVersions{}
		}
		h.in.Stacks[f[1]] = stackVersions(f[2])
	case "gpudraw":
		if h.in.GPUDraw == nil {
			h.in.GPUDraw = scheduler.GPUDraw{}
		}
		m := map[gpufleet.Priority]float64{}
		for _, k := range sortedArgKeys(args) {
			p, err := gpufleet.ParsePriority(k)
			if err != nil {
				return fmt.Errorf("gpudraw: %w", err)
			}
			w, err := gpufleet.ParsePower(args[k])
			if err != nil {
				return fmt.Errorf("gpudraw %s: %w", k, err)
			}
			m[p] = float64(w)
		}
		h.in.GPUDraw[f[1]] = m
	case "silent":
		since, err := gpufleet.ParseDuration(args["since"])
		if err != nil {
			return fmt.Errorf("silent %s since: %w", f[1], err)
		}
		for i := range h.in.Nodes {
			if h.in.Nodes[i].Name == f[1] {
				h.in.Nodes[i].LastSeen = T0.Add(since)
				return nil
			}
		}
		return fmt.Errorf("silent: no node %s", f[1])
	case "cancel":
		for i := range h.in.Jobs {
			j := &h.in.Jobs[i]
			if j.ID != f[1] {
				continue
			}
			state := gpufleet.JobQueued
			if j.Running() {
				state = gpufleet.JobRunning
			}
			switch scheduler.Cancel(state, j.CancelRequested) {
			case scheduler.CancelNow:
				h.in.Jobs = slices.Delete(h.in.Jobs, i, i+1)
			case scheduler.CancelStop:
				j.CancelRequested = true
			}
			return nil
		}
		return fmt.Errorf("cancel: no job %s", f[1])
	default:
		return fmt.Errorf("unknown command %q", f[0])
	}
	return nil
}

func (h *Harness) config() (scheduler.Config, error) {
	c, err := scheduler.PolicyConfig(h.policy)
	if err != nil {
		return c, err
	}
	for _, op := range h.cfgOps {
		on := op[1] == "on" || op[1] == "true"
		switch op[0] {
		case "backfill":
			c.Backfill = on
		case "fairshare":
			c.FairShare = on
		case "quotas":
			c.Quotas = on
		case "preemption":
			c.Preemption = on
		case "heterogeneity":
			c.HeterogeneityPreference = on
		case "strict":
			c.StrictOrder = on
		case "priorities":
			c.PriorityClasses = on
		case "eta":
			c.ETA = on
		case "packing":
			c.Packing = op[1]
		case "limit":
			c.MaxPlacementsPerCycle, err = strconv.Atoi(op[1])
		case "preempt-searches":
			c.MaxPreemptionSearches, err = strconv.Atoi(op[1])
		case "reason-depth":
			c.ReasonDepth, err = strconv.Atoi(op[1])
		case "default-est":
			c.DefaultEstimate, err = gpufleet.ParseDuration(op[1])
		case "lost-after":
			c.LostAfter, err = gpufleet.ParseDuration(op[1])
		case "over-budget":
			c.OverBudget, err = scheduler.ParseOverBudgetPolicy(op[1])
		case "over-budget-after":
			c.OverBudgetAfter, err = gpufleet.ParseDuration(op[1])
		case "arrival-window":
			c.ArrivalWindow, err = gpufleet.ParseDuration(op[1])
		case "ratio":
			c.ResponseRatio = on
		case "max-preemptions":
			c.MaxPreemptionsPerJob, err = strconv.Atoi(op[1])
		case "max-preemptions-day":
			c.MaxPreemptionsPerDay, err = strconv.Atoi(op[1])
		case "spare": // MODEL:N
			model, n, ok := strings.Cut(op[1], ":")
			if !ok {
				return c, fmt.Errorf("config spare: want MODEL:N, got %q", op[1])
			}
			if c.Spare == nil {
				c.Spare = map[string]int{}
			}
			c.Spare[model], err = strconv.Atoi(n)
		case "starvation": // a slowdown, or off
			c.StarvationSlowdown = 0
			if op[1] != "off" && op[1] != "false" {
				c.StarvationSlowdown, err = strconv.ParseFloat(op[1], 64)
			}
		case "upgrade": // a gain, or off
			c.UpgradeGain = 0
			if op[1] != "off" && op[1] != "false" {
				c.UpgradeGain, err = strconv.ParseFloat(op[1], 64)
			}
		case "restart":
			c.RestartCost, err = gpufleet.ParseDuration(op[1])
		case "size":
			c.SizeSlack = 0
			if op[1] != "off" && op[1] != "false" {
				c.SizeSlack, err = strconv.ParseFloat(op[1], 64)
			}
		default:
			return c, fmt.Errorf("unknown config %q", op[0])
		}
		if err != nil {
			return c, fmt.Errorf("config %s: %w", op[0], err)
		}
	}
	return c, c.Validate()
}

func (h *Harness) node(name string, a map[string]string, flags map[string]bool) error {
	n, err := strconv.Atoi(a["gpus"])
	if err != nil {
		return fmt.Errorf("node %s: gpus: %w", name, err)
	}
	b := MakeNode(name, a["model"], n).Rack(a["rack"]).Block(a["block"])
	if d := a["domains"]; d != "" {
		size, _ := strconv.Atoi(d)
		b.Domains(size)
	}
	if flags["pcie"] {
		b.Domains(0)
	}
	if d := a["domain"]; d != "" {
		for i := range b.n.GPUs {
			b.n.GPUs[i].NVLinkDomain = d
		}
	}
	if l := a["label"]; l != "" {
		for _, kv := range strings.Split(l, ",") {
			k, v, _ := strings.Cut(kv, ":")
			b.Label(k, v)
		}
	}
	if v := a["stack"]; v != "" {
		b.n.Stack = stackVersions(v)
	}
	if s := a["state"]; s != "" {
		b.State(scheduler.GPUState(s))
	}
	if m := a["mig"]; m != "" {
		parts := strings.Split(m, ":")
		if len(parts) != 3 {
			return fmt.Errorf("node %s: mig=COUNT:PROFILE:INSTANCES", name)
		}
		count, _ := strconv.Atoi(parts[0])
		inst, _ := strconv.Atoi(parts[2])
		b.MIG(count, parts[1], inst)
	}
	h.in.Nodes = append(h.in.Nodes, b.Obj())
	return nil
}

func (h *Harness) team(name string, a map[string]string) error {
	t := scheduler.Team{Name: name, BorrowingLimit: -1, Weight: 1}
	if q := a["quota"]; q != "" {
		t.Quota = map[string]int{}
		for _, kv := range strings.Split(q, ",") {
			k, v, _ := strings.Cut(kv, ":")
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("team %s quota: %w", name, err)
			}
			t.Quota[k] = n
		}
	}
	var err error
	if v, ok := a["borrow"]; ok {
		t.BorrowingLimit, err = strconv.Atoi(v)
	}
	if v, ok := a["weight"]; ok && err == nil {
		t.Weight, err = strconv.ParseFloat(v, 64)
	}
	if v, ok := a["usage"]; ok && err == nil {
		t.Usage, err = strconv.ParseFloat(v, 64)
	}
	if err != nil {
		return fmt.Errorf("team %s: %w", name, err)
	}
	h.in.Teams = append(h.in.Teams, t)
	return nil
}

func (h *Harness) job(kind, id string, a map[string]string, flags map[string]bool) error {
	gpus, err := strconv.Atoi(a["gpus"])
	if err != nil {
		return fmt.Errorf("job %s: gpus: %w", id, err)
	}
	b := MakeJob(id, a["team"], gpus)
	j := &b.j
	if p := a["prio"]; p != "" {
		if j.Priority, err = gpufleet.ParsePriority(p); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
	}
	dur := func(k string, dst *time.Duration) {
		if v, ok := a[k]; ok && err == nil {
			*dst, err = gpufleet.ParseDuration(v)
		}
	}
	var at, since time.Duration
	if a["est"] == "none" {
		j.Estimate = 0 // planned on Input.Runs (estimate.go)
	} else {
		dur("est", &j.Estimate)
	}
	dur("at", &at)
	dur("since", &since)
	dur("grace", &j.Grace)
	dur("limit", &j.TimeLimit)
	dur("attained", &j.Attained)
	j.Workload = a["workload"]
	if err != nil {
		return fmt.Errorf("job %s: %w", id, err)
	}
	j.Submitted = T0.Add(at)
	if v := a["nodes"]; v != "" {
		j.Resources.Nodes, _ = strconv.Atoi(v)
	}
	if v := a["models"]; v != "" {
		j.Resources.GPUModels = strings.Split(v, ",")
	}
	if v := a["mem"]; v != "" {
		if j.Resources.GPUMemoryMinBytes, err = gpufleet.ParseBytes(v); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
	}
	if v := a["cc"]; v != "" {
		if j.Resources.MinComputeCapability, err = gpufleet.ParseComputeCapability(v); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
	}
	if v := a["precision"]; v != "" {
		if j.Resources.Precision, err = gpufleet.ParsePrecision(v); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
	}
	j.Resources.Prefer = gpufleet.Preference(a["prefer"])
	if err := j.Resources.Prefer.Validate(); err != nil {
		return fmt.Errorf("job %s: %w", id, err)
	}
	if v := a["joules"]; v != "" {
		j.Resources.JoulesPerUnit = map[string]float64{}
		for _, kv := range strings.Split(v, ",") {
			m, x, _ := strings.Cut(kv, ":")
			if j.Resources.JoulesPerUnit[m], err = strconv.ParseFloat(x, 64); err != nil {
				return fmt.Errorf("job %s: joules: %w", id, err)
			}
		}
	}
	if flags["nvlink"] {
		j.Resources.Interconnect = gpufleet.NVLink
	}
	if v := a["select"]; v != "" {
		j.Resources.NodeSelector = map[string]string{}
		for _, kv := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(kv, ":")
			j.Resources.NodeSelector[k] = val
		}
	}
	j.Resources.Stack = a["stack"]
	if v := a["require"]; v != "" {
		j.Resources.Requires = map[string]string{}
		for _, kv := range strings.Split(v, ";") {
			k, val, _ := strings.Cut(kv, ":")
			j.Resources.Requires[k] = val
		}
	}
	if v := a["sharing"]; v != "" {
		if j.Resources.Sharing, err = gpufleet.ParseSharing(v); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
	}
	if v := a["isolation"]; v != "" {
		if j.Resources.Isolation, err = gpufleet.ParseIsolation(v); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
	}
	j.Resources.Runtime = a["runtime"]
	if v := a["overhead"]; v != "" {
		o, err := gpufleet.ParseOverhead(v)
		if err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
		j.Resources.Overhead = &o
	}
	if v := a["preempted"]; v != "" {
		if j.Preemptions, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("job %s: preempted: %w", id, err)
		}
	}
	if v := a["preempted-at"]; v != "" {
		for _, x := range strings.Split(v, ",") {
			d, err := gpufleet.ParseDuration(x)
			if err != nil {
				return fmt.Errorf("job %s: preempted-at: %w", id, err)
			}
			j.RecentPreemptions = append(j.RecentPreemptions, T0.Add(d))
		}
	}
	if v := a["retries"]; v != "" {
		if j.Retries.Max, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("job %s: retries: %w", id, err)
		}
	}
	if v := a["retries-used"]; v != "" {
		if j.Retries.Used, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("job %s: retries-used: %w", id, err)
		}
	}
	j.Preemptible = flags["preemptible"]
	j.Requeued = flags["requeued"]
	j.Invalid = strings.ReplaceAll(a["invalid"], "_", " ")
	switch kind {
	case "arrived":
		h.in.Arrivals = append(h.in.Arrivals, *j)
		return nil
	case "feasible":
		h.check = *j
		return nil
	case "run":
		j.Started = T0.Add(since)
		if j.Placement, err = h.placeRunning(j, a["on"]); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
	}
	h.in.Jobs = append(h.in.Jobs, *j)
	return nil
}

// placeRunning turns on=NODE[:i,j] into a placement on free GPUs.
func (h *Harness) placeRunning(j *scheduler.Job, on string) ([]scheduler.Placement, error) {
	nodeName, idxs, _ := strings.Cut(on, ":")
	var node *scheduler.Node
	for i := range h.in.Nodes {
		if h.in.Nodes[i].Name == nodeName {
			node = &h.in.Nodes[i]
		}
	}
	if node == nil {
		return nil, fmt.Errorf("on=%q: no such node", on)
	}
	used := map[string]float64{}
	for _, r := range h.in.Jobs {
		for _, p := range r.Placement {
			for _, g := range p.GPUs {
				used[g] += p.Fraction
			}
		}
	}
	share := 1.0
	if j.Resources.Sharing.Kind == gpufleet.TimeSlice {
		share = j.Resources.Sharing.Fraction
	}
	p := scheduler.Placement{Node: nodeName, Fraction: share}
	if idxs != "" {
		for _, s := range strings.Split(idxs, ",") {
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(node.GPUs) {
				return nil, fmt.Errorf("on=%q: bad GPU index %q", on, s)
			}
			p.GPUs = append(p.GPUs, node.GPUs[i].ID)
		}
		return []scheduler.Placement{p}, nil
	}
	for _, g := range node.GPUs {
		if len(p.GPUs) == j.Resources.GPUs {
			break
		}
		if j.Resources.Sharing.Kind == gpufleet.MIG {
			for _, in := range g.MIG {
				if len(p.GPUs) < j.Resources.GPUs && in.Profile == j.Resources.Sharing.Profile && used[in.ID] == 0 {
					p.GPUs = append(p.GPUs, in.ID)
					used[in.ID] = 1
				}
			}
			continue
		}
		if len(g.MIG) == 0 && used[g.ID]+share <= 1+1e-9 {
			p.GPUs = append(p.GPUs, g.ID)
		}
	}
	if len(p.GPUs) != j.Resources.GPUs {
		return nil, fmt.Errorf("on=%q: only %d free GPUs for %d", on, len(p.GPUs), j.Resources.GPUs)
	}
	return []scheduler.Placement{p}, nil
}

// at reads at=DURATION, a time from T0 no earlier than the harness's.
func (h *Harness) at(a map[string]string) (time.Time, error) {
	d, err := gpufleet.ParseDuration(a["at"])
	if err != nil {
		return time.Time{}, fmt.Errorf("at: %w", err)
	}
	t := T0.Add(d)
	if t.Before(h.in.Now) {
		return time.Time{}, fmt.Errorf("at=%s is before the time already reached (%s)", a["at"], h.in.Now.Sub(T0))
	}
	return t, nil
}

func (h *Harness) schedule(f []string) (string, error) {
	a, flags := parseArgs(f)
	now, err := h.at(a)
	if err != nil {
		return "", err
	}
	cfg, err := h.config()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	h.moveTo(now, &b)
	h.drained(&b)
	in := h.in
	in.Config = cfg
	out := scheduler.Schedule(in)
	if h.Explained != nil {
		for _, p := range out.Pending {
			h.Explained(p.Job, p.ReasonCode, p.Reason, p.Explanation)
		}
	}
	for _, st := range out.Starts {
		fmt.Fprintf(&b, "start %s %s", st.Job, formatPlacement(st.Placement))
		if st.Backfilled {
			b.WriteString(" backfilled")
		}
		b.WriteString("\n")
	}
	for _, st := range out.Stops {
		fmt.Fprintf(&b, "stop %s %s grace=%s", st.Job, st.Code, st.Grace)
		if st.For != "" {
			fmt.Fprintf(&b, " for %s", st.For)
		}
		fmt.Fprintf(&b, ": %s\n", st.Reason)
	}
	for _, f := range out.Fails {
		fmt.Fprintf(&b, "fail %s %s: %s\n", f.Job, f.Code, f.Reason)
	}
	for _, a := range out.PowerAlerts {
		fmt.Fprintf(&b, "alert %s: %s\n", a.Rack, a.Reason)
	}
	for _, p := range out.Pending {
		eta := "none"
		if p.EstimatedStart != nil {
			eta = p.EstimatedStart.Sub(T0).String()
		}
		if p.EstimatedStartP90 != nil && p.ETAConfidence != nil {
			eta += fmt.Sprintf("..%s@%.2f", p.EstimatedStartP90.Sub(T0), *p.ETAConfidence)
		}
		switch e := p.Estimate; e.From {
		case gpufleet.EstimateWorkload, gpufleet.EstimateTeamSize, gpufleet.EstimateSize, gpufleet.EstimateTimeLimit:
			eta += fmt.Sprintf(" est=%s@%s/%d", e.Duration(), e.From, e.Runs)
		}
		fmt.Fprintf(&b, "pending %s pos=%d team-pos=%d eta=%s %s: %s\n", p.Job, p.Position, p.TeamPosition, eta, p.ReasonCode, p.Reason)
		if flags["explain"] {
			fmt.Fprintf(&b, "  explained %s\n", FormatExplanation(p.Explanation))
		}
	}
	if flags["recheck"] && !out.Recheck.IsZero() {
		fmt.Fprintf(&b, "recheck at %s\n", out.Recheck.Sub(T0))
	}
	if !flags["dry"] {
		h.in = scheduler.Apply(in, out, now)
	}
	if b.Len() == 0 {
		b.WriteString("nothing to do\n")
	}
	return b.String(), nil
}

// advance moves time to at= and says which jobs left their GPUs.
func (h *Harness) advance(f []string) (string, error) {
	a, _ := parseArgs(f)
	now, err := h.at(a)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	h.moveTo(now, &b)
	if b.Len() == 0 {
		b.WriteString("nothing to do\n")
	}
	return b.String(), nil
}

// blockCommands are the commands followed by an expected block.
var blockCommands = map[string]bool{"schedule": true, "advance": true, "ended": true, "quarantine": true, "repaired": true,
	"validated": true, "feasible": true}

// lifeOf is node i's place on the repair path.
func (h *Harness) lifeOf(name string) scheduler.NodeLife {
	if l, ok := h.life[name]; ok {
		return l
	}
	return scheduler.NodeLife{State: gpufleet.NodeReady}
}

// setLife moves a node along the repair path, and the scheduler's view of
// it with it (scheduler.StateOf), and says so: "node N STATE CAUSE: REASON".
func (h *Harness) setLife(name string, l scheduler.NodeLife, b *strings.Builder) {
	if h.life == nil {
		h.life = map[string]scheduler.NodeLife{}
	}
	h.life[name] = l
	for i := range h.in.Nodes {
		if h.in.Nodes[i].Name == name {
			h.in.Nodes[i].State, h.in.Nodes[i].Reason = scheduler.StateOf(l.State), l.Reason
		}
	}
	fmt.Fprintf(b, "node %s %s", name, l.State)
	if l.Cause != "" || l.Reason != "" {
		fmt.Fprintf(b, " %s: %s", l.Cause, l.Reason)
	}
	b.WriteString("\n")
}

// nodeLife runs quarantine, repaired and validated.
func (h *Harness) nodeLife(cmd string, f []string) (string, error) {
	if len(f) < 1 {
		return "", fmt.Errorf("%s NODE", cmd)
	}
	name := f[0]
	if !slices.ContainsFunc(h.in.Nodes, func(n scheduler.Node) bool { return n.Name == name }) {
		return "", fmt.Errorf("%s: no node %s", cmd, name)
	}
	a, flags := parseArgs(f[1:])
	words := strings.ReplaceAll(a["reason"]+a["detail"], "_", " ")
	var b strings.Builder
	cur := h.lifeOf(name)
	switch cmd {
	case "quarantine":
		if v, ok := a["max"]; ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return "", fmt.Errorf("quarantine max: %w", err)
			}
			h.maxQuarantine = x
		}
		l, ok := scheduler.Quarantine(cur, words)
		if !ok {
			return fmt.Sprintf("node %s stays %s\n", name, cur.State), nil
		}
		var fleet []gpufleet.Node
		adding := 0
		for _, n := range h.in.Nodes {
			nl := h.lifeOf(n.Name)
			fleet = append(fleet, gpufleet.Node{Name: n.Name, State: nl.State, StateCause: nl.Cause, GPUs: make([]gpufleet.NodeGPU, len(n.GPUs))})
			if n.Name == name {
				adding = len(n.GPUs)
			}
		}
		if q := scheduler.Breaker(fleet, adding, h.maxQuarantine); !q.Allowed {
			return "refused: " + q.Reason + "\n", nil
		}
		h.setLife(name, l, &b)
	case "repaired":
		l, err := scheduler.Repaired(cur, "admin")
		if err != nil {
			return "refused: " + err.Error() + "\n", nil
		}
		h.setLife(name, l, &b)
	case "validated":
		l, ok := scheduler.Validated(cur, flags["pass"], words)
		if !ok {
			return fmt.Sprintf("node %s stays %s\n", name, cur.State), nil
		}
		h.setLife(name, l, &b)
	}
	return b.String(), nil
}

// drained moves every draining node on the repair path that no running
// job holds any more to repairing (scheduler.Drained), as the server
// does at the start of its cycle.
func (h *Harness) drained(b *strings.Builder) {
	busy := map[string]bool{}
	for _, j := range h.in.Jobs {
		for _, p := range j.Placement {
			busy[p.Node] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(h.life)) {
		if l, ok := scheduler.Drained(h.life[name], busy[name]); ok {
			h.setLife(name, l, b)
		}
	}
}

// ended ends a running job's run with scheduler.Ended and says what
// became of the job: "next J STATE CAUSE: DETAIL".
func (h *Harness) ended(f []string) (string, error) {
	if len(f) < 2 {
		return "", fmt.Errorf("ended JOB succeeded|failed|stopped|lost [exit=N] [stop=CODE] at=T")
	}
	a, _ := parseArgs(f[2:])
	now, err := h.at(a)
	if err != nil {
		return "", err
	}
	e := scheduler.End{Job: f[0], RunEnd: scheduler.RunEnd{State: gpufleet.AttemptState(f[1])}}
	if !e.State.Terminal() {
		return "", fmt.Errorf("ended %s: state %q: expected succeeded, failed, stopped or lost", f[0], f[1])
	}
	if v, ok := a["exit"]; ok {
		code, err := strconv.Atoi(v)
		if err != nil {
			return "", fmt.Errorf("ended %s: exit: %w", f[0], err)
		}
		e.ExitCode = &code
	}
	if v, ok := a["stop"]; ok {
		if e.Stop, err = gpufleet.ParseStopCode(v); err != nil {
			return "", fmt.Errorf("ended %s: %w", f[0], err)
		}
	}
	var b strings.Builder
	h.moveTo(now, &b)
	in, next := scheduler.Ended(h.in, []scheduler.End{e}, now)
	if next[0].State == "" {
		return "", fmt.Errorf("ended %s: no such running job", f[0])
	}
	h.in = in
	n := next[0]
	fmt.Fprintf(&b, "next %s %s %s: %s\n", e.Job, n.State, n.Cause, n.Describe(e.Job+".run", e.RunEnd))
	return b.String(), nil
}

// moveTo advances the harness to now with scheduler.Apply and writes a
// line for each job whose grace ended: "requeue J CODE" or "end J CODE".
func (h *Harness) moveTo(now time.Time, b *strings.Builder) {
	before := map[string]scheduler.Job{}
	for _, j := range h.in.Jobs {
		if j.Running() && !j.StopAt.IsZero() {
			before[j.ID] = j
		}
	}
	h.in = scheduler.Apply(h.in, scheduler.Output{}, now)
	after := map[string]bool{}
	for _, j := range h.in.Jobs {
		after[j.ID] = j.Running()
	}
	for _, id := range slices.Sorted(maps.Keys(before)) {
		j := before[id]
		running, kept := after[id]
		switch {
		case !kept:
			fmt.Fprintf(b, "end %s %s at %s\n", id, j.StopCode, j.StopAt.Sub(T0))
		case !running:
			fmt.Fprintf(b, "requeue %s %s at %s\n", id, j.StopCode, j.StopAt.Sub(T0))
		}
	}
}

// drain sets a node, or one of its GPUs, draining.
func (h *Harness) drain(name string, a map[string]string) error {
	for i := range h.in.Nodes {
		n := &h.in.Nodes[i]
		if n.Name != name {
			continue
		}
		n.GPUs = slices.Clone(n.GPUs)
		if g, ok := a["gpu"]; ok {
			idx, err := strconv.Atoi(g)
			if err != nil || idx < 0 || idx >= len(n.GPUs) {
				return fmt.Errorf("drain %s: gpu %q", name, g)
			}
			n.GPUs[idx].State, n.GPUs[idx].Reason = scheduler.Draining, strings.ReplaceAll(a["reason"], "_", " ")
			return nil
		}
		n.State, n.Reason = scheduler.Draining, strings.ReplaceAll(a["reason"], "_", " ")
		return nil
	}
	return fmt.Errorf("drain: no node %s", name)
}

// formatPlacement prints node[gpu ...] with ids short of the node prefix,
// and the share for time-sliced GPUs.
func formatPlacement(ps []scheduler.Placement) string {
	var parts []string
	for _, p := range ps {
		var ids []string
		for _, g := range p.GPUs {
			ids = append(ids, strings.TrimPrefix(g, p.Node+"-"))
		}
		s := fmt.Sprintf("%s[%s]", p.Node, strings.Join(ids, " "))
		if p.Fraction != 1 {
			s += fmt.Sprintf("x%g", p.Fraction)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func parseArgs(f []string) (map[string]string, map[string]bool) {
	args, flags := map[string]string{}, map[string]bool{}
	for _, x := range f {
		if k, v, ok := strings.Cut(x, "="); ok {
			args[k] = v
		} else {
			flags[x] = true
		}
	}
	return args, flags
}

func sortedArgKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// stackVersions reads component:version pairs joined by commas.
func stackVersions(s string) gpufleet.StackVersions {
	v := gpufleet.StackVersions{}
	for _, kv := range strings.Split(s, ",") {
		k, ver, _ := strings.Cut(kv, ":")
		v[gpufleet.StackComponent(k)] = ver
	}
	return v
}

// feasible runs the submit-time check (scheduler.Explain) on a job that is
// not queued.
func (h *Harness) feasible(f []string) (string, error) {
	if len(f) < 1 {
		return "", fmt.Errorf("feasible: want a job id")
	}
	args, flags := parseArgs(f[1:])
	if _, ok := args["at"]; !ok {
		args["at"] = "0s"
		if h.in.Now.After(T0) {
			args["at"] = h.in.Now.Sub(T0).String()
		}
	}
	if err := h.job("feasible", f[0], args, flags); err != nil {
		return "", err
	}
	cfg, err := h.config()
	if err != nil {
		return "", err
	}
	in := h.in
	in.Config = cfg
	e, reason := scheduler.Explain(in, h.check)
	if e == nil {
		return "feasible\n", nil
	}
	if h.Explained != nil {
		h.Explained("", e.Code, reason, e)
	}
	return fmt.Sprintf("refused %s: %s\n  explained %s\n", e.Code, reason, FormatExplanation(e)), nil
}

// FormatExplanation writes an explanation's counts on one line, then the
// key of its other data:
// "rack_power: evaluated=2 capacity=1 rack_power=1 exhausted=rack_power rack=r1",
// "order: evaluated=0 blocker=j1@1".
func FormatExplanation(e *gpufleet.Explanation) string {
	if e == nil {
		return "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: evaluated=%d", e.Code, e.NodesEvaluated)
	for _, c := range e.NodesFiltered {
		fmt.Fprintf(&b, " %s=%d", c.Code, c.Nodes)
	}
	if e.Exhausted != "" {
		fmt.Fprintf(&b, " exhausted=%s", e.Exhausted)
		switch e.Exhausted {
		case gpufleet.DimRackPower:
			if e.Rack != nil {
				fmt.Fprintf(&b, " rack=%s", e.Rack.Rack)
			}
		case gpufleet.DimQuota:
		default:
			fmt.Fprintf(&b, " need=%d most=%d", e.Need, e.Most)
		}
	}
	if e.Never {
		b.WriteString(" never")
	}
	if e.Brief {
		b.WriteString(" brief")
	}
	if q := e.Quota; q != nil {
		fmt.Fprintf(&b, " class=%s", q.Class)
	}
	if s := e.Stack; s != nil {
		switch {
		case s.Invalid != "":
			fmt.Fprintf(&b, " stack_invalid=%s", s.Invalid)
		case s.Unknown:
			fmt.Fprintf(&b, " stack_unknown=%s", s.Stack)
		default:
			fmt.Fprintf(&b, " stack_node=%s", s.Node)
		}
	}
	if x := e.Blocker; x != nil {
		fmt.Fprintf(&b, " blocker=%s@%d", x.Job, x.Position)
	}
	if r := e.Reservation; r != nil {
		fmt.Fprintf(&b, " reservation=%s", r.Job)
	}
	if e.CycleLimit > 0 {
		fmt.Fprintf(&b, " cycle_limit=%d", e.CycleLimit)
	}
	if p := e.Preemption; p != nil {
		fmt.Fprintf(&b, " victims=%d", p.Victims)
	}
	if s := e.Slower; s != nil {
		fmt.Fprintf(&b, " slower=%s", s.Model)
	}
	if e.SpareHeld > 0 {
		fmt.Fprintf(&b, " spare=%d", e.SpareHeld)
	}
	if e.SearchLimit > 0 {
		fmt.Fprintf(&b, " search_limit=%d", e.SearchLimit)
	}
	return b.String()
}

package schedtest

import (
	"bufio"
	"fmt"
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
//	gpustate n1 3 down
//	team a quota=h100-sxm-80gb:8 borrow=8 weight=1 usage=0
//	submit j1 team=a gpus=4 prio=training est=1h at=0s [nodes=2] [models=a,b]
//	     [mem=80GiB] [cc=9.0] [precision=fp8] [sharing=mig:1g.10gb|timeslice:0.25]
//	     [nvlink] [prefer=cheapest] [select=k:v] [preemptible] [grace=30s] [requeued]
//	run j0 team=a gpus=4 ... since=0s on=n1[:0,1,2,3]   a job already running
//	finish j0                            a running job ends
//	schedule at=10s [dry]
//	----
//	expected output, up to a blank line
//
// After a schedule (unless dry) the starts become running jobs and the
// preempted jobs return to the queue, requeued.
type Harness struct {
	in     scheduler.Input
	policy string
	cfgOps [][2]string
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
		if fields[0] != "schedule" {
			if err := h.command(fields); err != nil {
				return "", fmt.Errorf("line %d: %w", lineNo, err)
			}
			continue
		}
		got, err := h.schedule(fields[1:])
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
	case "submit", "run":
		return h.job(f[0] == "run", f[1], args, flags)
	case "finish":
		h.in.Jobs = slices.DeleteFunc(h.in.Jobs, func(j scheduler.Job) bool { return j.ID == f[1] })
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
		case "default-est":
			c.DefaultEstimate, err = time.ParseDuration(op[1])
		case "ratio":
			c.ResponseRatio = on
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

func (h *Harness) job(running bool, id string, a map[string]string, flags map[string]bool) error {
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
	dur("est", &j.Estimate)
	dur("at", &at)
	dur("since", &since)
	dur("grace", &j.Grace)
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
	if v := a["sharing"]; v != "" {
		if j.Resources.Sharing, err = gpufleet.ParseSharing(v); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
	}
	j.Preemptible = flags["preemptible"]
	j.Requeued = flags["requeued"]
	if running {
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

func (h *Harness) schedule(f []string) (string, error) {
	a, flags := parseArgs(f)
	at, err := time.ParseDuration(a["at"])
	if err != nil {
		return "", fmt.Errorf("schedule at: %w", err)
	}
	cfg, err := h.config()
	if err != nil {
		return "", err
	}
	in := h.in
	in.Now = T0.Add(at)
	in.Config = cfg
	out := scheduler.Schedule(in)
	var b strings.Builder
	for _, st := range out.Starts {
		fmt.Fprintf(&b, "start %s %s", st.Job, formatPlacement(st.Placement))
		if st.Backfilled {
			b.WriteString(" backfilled")
		}
		b.WriteString("\n")
	}
	for _, p := range out.Preemptions {
		fmt.Fprintf(&b, "preempt %s for %s %s: %s\n", p.Job, p.For, p.Code, p.Reason)
	}
	for _, p := range out.Pending {
		eta := "none"
		if p.EstimatedStart != nil {
			eta = p.EstimatedStart.Sub(T0).String()
		}
		fmt.Fprintf(&b, "pending %s pos=%d team-pos=%d eta=%s %s: %s\n", p.Job, p.Position, p.TeamPosition, eta, p.ReasonCode, p.Reason)
	}
	if b.Len() == 0 {
		b.WriteString("nothing to do\n")
	}
	if !flags["dry"] {
		h.apply(out, in.Now)
	}
	return b.String(), nil
}

// apply turns starts into running jobs and requeues preempted ones.
func (h *Harness) apply(out scheduler.Output, now time.Time) {
	starts := map[string]scheduler.Start{}
	for _, s := range out.Starts {
		starts[s.Job] = s
	}
	stopped := map[string]bool{}
	for _, p := range out.Preemptions {
		stopped[p.Job] = true
	}
	for i := range h.in.Jobs {
		j := &h.in.Jobs[i]
		if s, ok := starts[j.ID]; ok {
			j.Started, j.Placement = now, s.Placement
		}
		if stopped[j.ID] {
			j.Started, j.Placement, j.Requeued, j.Queued = time.Time{}, nil, true, now
		}
	}
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

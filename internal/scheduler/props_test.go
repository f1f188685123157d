package scheduler_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

var propModels = []string{"h100-sxm-80gb", "a100-sxm-80gb", "l4", "k80"}

// genFleet draws a small heterogeneous fleet: NVLink domains or PCIe, MIG
// GPUs, racks, nodes and GPUs that are not ready.
func genFleet(t *rapid.T) []scheduler.Node {
	n := rapid.IntRange(1, 6).Draw(t, "nodes")
	var nodes []scheduler.Node
	for i := range n {
		model := rapid.SampledFrom(propModels).Draw(t, "model")
		gpus := rapid.SampledFrom([]int{1, 2, 4, 8}).Draw(t, "gpus")
		b := schedtest.MakeNode(fmt.Sprintf("n%d", i), model, gpus).
			Rack(fmt.Sprintf("r%d", rapid.IntRange(0, 2).Draw(t, "rack"))).
			Domains(rapid.SampledFrom([]int{0, 2, 4, 8}).Draw(t, "domain"))
		if (model == "h100-sxm-80gb" || model == "a100-sxm-80gb") && rapid.IntRange(0, 3).Draw(t, "mig") == 0 {
			b.MIG(rapid.IntRange(1, gpus).Draw(t, "migGPUs"), "1g.10gb", 7)
		}
		if rapid.IntRange(0, 9).Draw(t, "cordon") == 0 {
			b.State(scheduler.Cordoned)
		}
		if rapid.IntRange(0, 9).Draw(t, "down") == 0 {
			b.GPUState(rapid.IntRange(0, gpus-1).Draw(t, "downGPU"), scheduler.Down)
		}
		nodes = append(nodes, b.Obj())
	}
	return nodes
}

// genJob draws a queued job.
func genJob(t *rapid.T, id string) scheduler.Job {
	b := schedtest.MakeJob(id, rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "team"),
		rapid.SampledFrom([]int{1, 1, 1, 2, 3, 4, 8, 16}).Draw(t, "gpus")).
		Priority(rapid.SampledFrom(gpufleet.Priorities()).Draw(t, "prio")).
		Estimate(time.Duration(rapid.IntRange(1, 300).Draw(t, "est")) * time.Minute).
		Submitted(time.Duration(rapid.IntRange(0, 3600).Draw(t, "at")) * time.Second)
	j := b.Obj()
	switch rapid.IntRange(0, 9).Draw(t, "kind") {
	case 0:
		b.MIG("1g.10gb")
	case 1:
		b.TimeSlice(rapid.SampledFrom([]float64{0.25, 0.5, 0.75}).Draw(t, "frac"))
	case 2:
		if j.Resources.GPUs >= 2 && j.Resources.GPUs%2 == 0 {
			b.Nodes(2)
		}
	case 3:
		b.NVLink()
	case 4:
		b.Models(rapid.SampledFrom(propModels).Draw(t, "allow"))
	case 5, 6:
		b.Prefer(rapid.SampledFrom([]gpufleet.Preference{gpufleet.Fastest, gpufleet.Cheapest}).Draw(t, "prefer"))
	}
	if rapid.Bool().Draw(t, "preemptible") {
		b.Preemptible(time.Duration(rapid.IntRange(0, 60).Draw(t, "grace")) * time.Second)
	}
	out := b.Obj()
	// History: GPU-time of earlier runs (LAS) and preemptions (the bounds).
	out.Attained = time.Duration(rapid.IntRange(0, 20000).Draw(t, "attained")) * time.Second
	out.Preemptions = rapid.IntRange(0, 12).Draw(t, "preemptions")
	for range rapid.IntRange(0, out.Preemptions).Draw(t, "recent") {
		out.RecentPreemptions = append(out.RecentPreemptions, schedtest.T0.Add(time.Duration(rapid.IntRange(0, 7200).Draw(t, "recentAt"))*time.Second))
	}
	return out
}

// genConfig draws a policy with features switched on and off.
func genConfig(t *rapid.T) scheduler.Config {
	c, err := scheduler.PolicyConfig(rapid.SampledFrom(scheduler.Policies()).Draw(t, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	c.Backfill = c.Backfill && rapid.Bool().Draw(t, "backfill")
	c.Preemption = c.Preemption && rapid.Bool().Draw(t, "preemption")
	c.FairShare = c.FairShare && rapid.Bool().Draw(t, "fairshare")
	c.Packing = rapid.SampledFrom([]string{scheduler.PackFirstFit, scheduler.PackBestFit, scheduler.PackTopology}).Draw(t, "packing")
	c.Seed = rapid.Uint64().Draw(t, "seed")
	if c.StarvationSlowdown > 0 {
		// Running work here is an hour old: let starvation preemption in.
		c.StarvationSlowdown = rapid.SampledFrom([]float64{0, 2, 20}).Draw(t, "starvation")
		c.StarvationMinRun = rapid.SampledFrom([]time.Duration{0, 30 * time.Minute, 6 * time.Hour}).Draw(t, "minrun")
	}
	return c
}

// genInput draws a fleet, teams, running work (placed by the scheduler
// itself in an earlier cycle) and a queue.
func genInput(t *rapid.T) scheduler.Input {
	in := scheduler.Input{Now: schedtest.T0.Add(2 * time.Hour), Models: schedtest.Models(), Nodes: genFleet(t)}
	for _, name := range []string{"a", "b", "c"} {
		in.Teams = append(in.Teams, scheduler.Team{Name: name, Weight: 1, BorrowingLimit: rapid.IntRange(-1, 8).Draw(t, "borrow"),
			Quota: map[string]int{rapid.SampledFrom(propModels).Draw(t, "qmodel"): rapid.IntRange(0, 16).Draw(t, "quota")},
			Usage: float64(rapid.IntRange(0, 10000).Draw(t, "usage"))})
	}
	first := rapid.IntRange(0, 12).Draw(t, "running")
	for i := range first {
		in.Jobs = append(in.Jobs, genJob(t, fmt.Sprintf("r%d", i)))
	}
	in.Config = genConfig(t)
	warm := in
	warm.Now = schedtest.T0.Add(time.Hour)
	out := scheduler.Schedule(warm)
	started := map[string]scheduler.Start{}
	for _, s := range out.Starts {
		started[s.Job] = s
	}
	var jobs []scheduler.Job
	for _, j := range in.Jobs {
		if s, ok := started[j.ID]; ok {
			j.Started, j.Placement = warm.Now, s.Placement
			jobs = append(jobs, j)
		}
	}
	n := rapid.IntRange(0, 15).Draw(t, "pending")
	for i := range n {
		jobs = append(jobs, genJob(t, fmt.Sprintf("q%d", i)))
	}
	in.Jobs = jobs
	in.Config = genConfig(t)
	return in
}

// gpuUse is what the jobs hold of one GPU.
type gpuUse struct {
	whole int
	share float64
	mig   map[string]int
}

// checkOutput verifies the invariants of one decision: no GPU or MIG
// instance double-booked, time-slice shares within 1.0, nothing on GPUs
// or nodes that are not ready, gangs all-or-nothing with the asked GPU and
// node counts, every queued job either started or pending exactly once.
func checkOutput(t *rapid.T, in scheduler.Input, out scheduler.Output) {
	type where struct {
		node  *scheduler.Node
		gpu   *scheduler.GPU
		inMIG string // instance id
	}
	loc := map[string]where{}
	for i := range in.Nodes {
		n := &in.Nodes[i]
		for g := range n.GPUs {
			gp := &n.GPUs[g]
			loc[gp.ID] = where{node: n, gpu: gp}
			for _, m := range gp.MIG {
				loc[m.ID] = where{node: n, gpu: gp, inMIG: m.ID}
			}
		}
	}
	use := map[string]*gpuUse{}
	hold := func(j scheduler.Job, ps []scheduler.Placement, fresh bool) {
		for _, p := range ps {
			for _, id := range p.GPUs {
				w, ok := loc[id]
				if !ok {
					t.Fatalf("job %s placed on unknown GPU %s", j.ID, id)
				}
				if w.node.Name != p.Node {
					t.Fatalf("job %s: GPU %s is not on node %s", j.ID, id, p.Node)
				}
				if fresh && (w.node.State != scheduler.Ready || w.gpu.State != scheduler.Ready) {
					t.Fatalf("job %s started on %s/%s, which is not ready", j.ID, p.Node, id)
				}
				u := use[w.gpu.ID]
				if u == nil {
					u = &gpuUse{mig: map[string]int{}}
					use[w.gpu.ID] = u
				}
				switch {
				case w.inMIG != "":
					u.mig[w.inMIG]++
				case j.Resources.Sharing.Kind == gpufleet.TimeSlice:
					if len(w.gpu.MIG) > 0 {
						t.Fatalf("job %s time-slices GPU %s, which is in MIG mode", j.ID, id)
					}
					u.share += p.Fraction
				default:
					if len(w.gpu.MIG) > 0 {
						t.Fatalf("job %s holds GPU %s whole, which is in MIG mode", j.ID, id)
					}
					u.whole++
				}
			}
		}
	}
	jobs := map[string]scheduler.Job{}
	for _, j := range in.Jobs {
		jobs[j.ID] = j
		if j.Running() {
			hold(j, j.Placement, false)
		}
	}
	seen := map[string]bool{}
	for _, s := range out.Starts {
		j, ok := jobs[s.Job]
		if !ok || j.Running() || seen[s.Job] {
			t.Fatalf("start of %s: unknown, running or started twice", s.Job)
		}
		seen[s.Job] = true
		hold(j, s.Placement, true)
		total := 0
		models := map[string]bool{}
		for _, p := range s.Placement {
			total += len(p.GPUs)
			if j.Resources.Nodes > 1 && len(p.GPUs) != j.Resources.GPUs/j.Resources.Nodes {
				t.Fatalf("job %s: %d GPUs on %s, want %d per node", j.ID, len(p.GPUs), p.Node, j.Resources.GPUs/j.Resources.Nodes)
			}
			for _, id := range p.GPUs {
				models[loc[id].gpu.Model] = true
			}
		}
		if total != j.Resources.GPUs {
			t.Fatalf("job %s got %d GPUs, asked %d", j.ID, total, j.Resources.GPUs)
		}
		if j.Resources.Nodes > 1 && len(s.Placement) != j.Resources.Nodes {
			t.Fatalf("job %s on %d nodes, asked %d", j.ID, len(s.Placement), j.Resources.Nodes)
		}
		if len(models) != 1 {
			t.Fatalf("job %s spans models %v", j.ID, models)
		}
		for m := range models {
			if a := j.Resources.GPUModels; len(a) > 0 && !slices.ContainsFunc(a, func(name string) bool { return names(in, name, m) }) {
				t.Fatalf("job %s on %s, allowed %v", j.ID, m, a)
			}
		}
	}
	for id, u := range use {
		if u.whole > 1 || (u.whole == 1 && u.share > 0) || u.share > 1+1e-9 {
			t.Fatalf("GPU %s double-booked: %d whole holders, shares %.2f", id, u.whole, u.share)
		}
		for inst, c := range u.mig {
			if c > 1 {
				t.Fatalf("MIG instance %s held by %d jobs", inst, c)
			}
		}
	}
	for i, p := range out.Pending {
		if seen[p.Job] {
			t.Fatalf("job %s both started and pending", p.Job)
		}
		seen[p.Job] = true
		if p.Position != i+1 || p.ReasonCode == "" || p.Reason == "" {
			t.Fatalf("pending %+v at %d: bad position or missing reason", p, i)
		}
	}
	for _, f := range out.Fails {
		if seen[f.Job] {
			t.Fatalf("job %s both failed and started or pending", f.Job)
		}
		seen[f.Job] = true
	}
	for _, j := range in.Jobs {
		if !j.Running() && !seen[j.ID] {
			t.Fatalf("queued job %s neither started, pending nor failed", j.ID)
		}
	}
	stopped := map[string]bool{}
	for _, st := range out.Stops {
		j, ok := jobs[st.Job]
		switch {
		case !ok || !j.Running():
			t.Fatalf("stopped %s: not a running job", st.Job)
		case stopped[st.Job]:
			t.Fatalf("job %s stopped twice", st.Job)
		case !j.StopAt.IsZero():
			t.Fatalf("job %s stopped again while stopping", st.Job)
		case st.Grace <= 0:
			t.Fatalf("stop of %s with grace %s: never 0 by omission", st.Job, st.Grace)
		case st.Code.IsPreemption() && !j.Preemptible:
			t.Fatalf("preempted %s: not preemptible", st.Job)
		}
		stopped[st.Job] = true
	}
}

func TestPropertyInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		checkOutput(t, in, scheduler.Schedule(in))
	})
}

// TestPropertyDeterministic: the same input gives byte-identical output,
// also with the nodes in another order.
func TestPropertyDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		a, _ := json.Marshal(scheduler.Schedule(in))
		b, _ := json.Marshal(scheduler.Schedule(in))
		if string(a) != string(b) {
			t.Fatalf("two runs differ:\n%s\n%s", a, b)
		}
		perm := rapid.Permutation(in.Nodes).Draw(t, "nodeOrder")
		shuffled := in
		shuffled.Nodes = perm
		c, _ := json.Marshal(scheduler.Schedule(shuffled))
		if string(a) != string(c) {
			t.Fatalf("node order changed the output:\n%s\n%s", a, c)
		}
	})
}

// TestPropertyQuotaGuaranteed: a team under its quota whose queued job
// fits in that quota is not blocked by borrowers. If borrowers already
// hold the GPUs, they are preempted (reclaim), whatever their class; if
// borrowers queue ahead of it, they do not get the capacity first.
func TestPropertyQuotaGuaranteed(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := rapid.IntRange(1, 4).Draw(t, "nodes")
		size := rapid.SampledFrom([]int{1, 2, 4, 8}).Draw(t, "size")
		in := scheduler.Input{Now: schedtest.T0.Add(time.Hour), Models: schedtest.Models()}
		in.Config, _ = scheduler.PolicyConfig("gpufleet")
		in.Config.Packing = rapid.SampledFrom([]string{scheduler.PackFirstFit, scheduler.PackBestFit, scheduler.PackTopology}).Draw(t, "packing")
		for i := range nodes {
			in.Nodes = append(in.Nodes, schedtest.MakeNode(fmt.Sprintf("n%d", i), "h100-sxm-80gb", 8).Obj())
		}
		quota := size * rapid.IntRange(1, nodes*8/size).Draw(t, "quotaUnits")
		in.Teams = []scheduler.Team{
			{Name: "owner", Weight: 1, BorrowingLimit: 0, Quota: map[string]int{"h100-sxm-80gb": quota}},
			{Name: "borrower", Weight: 1, BorrowingLimit: -1, Usage: 0},
		}
		running := rapid.Bool().Draw(t, "borrowerRunning")
		ownerPrio := rapid.SampledFrom(gpufleet.Priorities()).Draw(t, "ownerPrio")
		borrowPrio := rapid.SampledFrom(gpufleet.Priorities()).Draw(t, "borrowPrio")
		id := 0
		for n := range nodes {
			for g := 0; g < 8; g += size {
				b := schedtest.MakeJob(fmt.Sprintf("b%02d", id), "borrower", size).Priority(borrowPrio).Preemptible(0)
				if running {
					var gpus []string
					for k := g; k < g+size; k++ {
						gpus = append(gpus, fmt.Sprintf("n%d-g%d", n, k))
					}
					b.Running(time.Duration(id)*time.Second, scheduler.Placement{Node: fmt.Sprintf("n%d", n), GPUs: gpus, Fraction: 1})
				}
				in.Jobs = append(in.Jobs, b.Obj())
				id++
			}
		}
		in.Jobs = append(in.Jobs, schedtest.MakeJob("owned", "owner", size).Priority(ownerPrio).Submitted(time.Minute).Obj())
		out := scheduler.Schedule(in)
		checkOutput(t, in, out)
		for _, s := range out.Starts {
			if s.Job == "owned" {
				return
			}
		}
		for _, p := range out.Pending {
			if p.Job == "owned" && p.ReasonCode != scheduler.ReasonPreempting {
				t.Fatalf("owner's job waits: %s: %s", p.ReasonCode, p.Reason)
			}
		}
		for _, p := range out.Stops {
			if p.For != "owned" || p.Code != scheduler.PreemptReclaim && p.Code != scheduler.PreemptPriority {
				t.Fatalf("unexpected stop %+v", p)
			}
		}
	})
}

// names reports whether an allowlist entry names model id: the id, the
// catalog's name or an alias, or a class holding it.
func names(in scheduler.Input, entry, id string) bool {
	g := in.Models[id]
	return strings.EqualFold(entry, id) || strings.EqualFold(entry, g.Name) || slices.Contains(in.Classes[entry], id) ||
		slices.ContainsFunc(g.Aliases, func(a string) bool { return strings.EqualFold(a, entry) })
}

// TestPropertyLifecycle drives the core over several cycles with runs
// that end on their own (succeeded, failed with or without retries left,
// stopped, lost) and nodes moved along the repair path (Quarantine,
// Drained, Repaired, Validated) between them: every cycle's output keeps
// the invariants (nothing starts on a node out of service),
// a job AfterRun ends leaves the snapshot, and a job that queues again
// holds no GPUs, has used no more retries than it has, and counts an
// interruption only when no retry was used.
func TestPropertyLifecycle(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		life := map[string]scheduler.NodeLife{}
		for step := range rapid.IntRange(1, 4).Draw(t, "steps") {
			busy := map[string]bool{}
			for _, j := range in.Jobs {
				for _, p := range j.Placement {
					busy[p.Node] = true
				}
			}
			for i := range in.Nodes {
				n := &in.Nodes[i]
				l, ok := life[n.Name]
				if !ok {
					l = scheduler.NodeLife{State: gpufleet.NodeReady}
				}
				switch rapid.IntRange(0, 4).Draw(t, "life") {
				case 1:
					l, _ = scheduler.Quarantine(l, "finding")
				case 2:
					l, _ = scheduler.Drained(l, busy[n.Name])
				case 3:
					if r, err := scheduler.Repaired(l, "admin"); err == nil {
						l = r
					}
				case 4:
					l, _ = scheduler.Validated(l, rapid.Bool().Draw(t, "pass"), "check")
				}
				if l.State == gpufleet.NodeRepairing && busy[n.Name] {
					t.Fatalf("step %d: node %s in repair while a job holds it", step, n.Name)
				}
				life[n.Name] = l
				if l.State != gpufleet.NodeReady || n.State == scheduler.Ready {
					n.State = scheduler.StateOf(l.State)
				}
			}
			out := scheduler.Schedule(in)
			checkOutput(t, in, out)
			in = scheduler.Apply(in, out, in.Now.Add(time.Duration(rapid.IntRange(0, 120).Draw(t, "dt"))*time.Second))
			var ends []scheduler.End
			for i := range in.Jobs {
				j := &in.Jobs[i]
				if !j.Running() || !rapid.Bool().Draw(t, "ends") {
					continue
				}
				if j.Retries.Used == 0 {
					j.Retries.Max = rapid.IntRange(0, 2).Draw(t, "retries")
				}
				state := rapid.SampledFrom([]gpufleet.AttemptState{gpufleet.AttemptSucceeded, gpufleet.AttemptFailed,
					gpufleet.AttemptStopped, gpufleet.AttemptLost}).Draw(t, "state")
				ends = append(ends, scheduler.End{Job: j.ID, RunEnd: scheduler.RunEnd{State: state, Stop: j.StopCode}})
			}
			before := map[string]scheduler.Job{}
			for _, j := range in.Jobs {
				before[j.ID] = j
			}
			next, outcomes := scheduler.Ended(in, ends, in.Now)
			after := map[string]scheduler.Job{}
			for _, j := range next.Jobs {
				after[j.ID] = j
			}
			for i, e := range ends {
				n, j, kept := outcomes[i], after[e.Job], false
				_, kept = after[e.Job]
				switch {
				case n.State == gpufleet.JobQueued && (!kept || j.Running()):
					t.Fatalf("step %d: %s queued again but %v in the snapshot (running %v)", step, e.Job, kept, j.Running())
				case n.State != gpufleet.JobQueued && kept:
					t.Fatalf("step %d: %s ended %s but is still in the snapshot", step, e.Job, n.State)
				case n.State == gpufleet.JobQueued && j.Retries.Used > j.Retries.Max:
					t.Fatalf("step %d: %s queued again with retries %+v", step, e.Job, j.Retries)
				case n.Interrupted && n.Retries.Used != before[e.Job].Retries.Used:
					t.Fatalf("step %d: %s interrupted but used a retry", step, e.Job)
				case e.State == gpufleet.AttemptSucceeded && n.State != gpufleet.JobSucceeded:
					t.Fatalf("step %d: %s succeeded but the job is %s", step, e.Job, n.State)
				}
			}
			in = next
		}
	})
}

package schedtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// LargeSpec sizes a synthetic fleet and queue.
type LargeSpec struct {
	Nodes   int // 8-GPU nodes, each one NVLink domain
	Pending int // queued jobs
	Teams   int
	Seed    uint64
}

// DefaultLarge is the scale goal: 5,000 nodes x 8 GPUs, 50,000 queued jobs,
// 70% of the fleet busy, 20 teams.
var DefaultLarge = LargeSpec{Nodes: 5000, Pending: 50000, Teams: 20, Seed: 1}

// HugeLarge is ten times DefaultLarge in nodes and queued jobs, with the
// same mix: 50,000 nodes x 8 GPUs, 500,000 queued jobs, 20 teams (whose
// quotas scale with the fleet). Building it takes seconds and about a
// GiB, so only benchmarks that ask for it pay for it.
var HugeLarge = LargeSpec{Nodes: 50000, Pending: 500000, Teams: 20, Seed: 1}

// Large builds a synthetic fleet and queue for benchmarks:
//
//   - nodes: 60% H100, 30% A100, 10% H200, 8 GPUs in one NVLink domain,
//     32 nodes to a rack, 8 racks to a block; 10% of A100 and H200 nodes
//     have 4 GPUs in MIG mode (seven 1g instances each);
//   - GPU counts of queued jobs as in the Philly trace (Jeon et al., ATC'19,
//     rounded): 1 GPU 70%, 2 GPUs 10%, 4 GPUs 10%, 8 GPUs 8%, 16 or more 2%
//     (16: 60%, 32: 30%, 64: 10% of those);
//   - 10% of jobs share GPUs (half MIG 1g, half time-slice 0.25 or 0.5);
//   - 5% span nodes: every 16+ job (8 GPUs per node) plus 3% of all jobs
//     as 8 GPUs over 2 nodes;
//   - model allowlists: 50% none, 30% H100, 10% A100, 10% H100 or H200;
//   - classes: 5% production, 15% interactive, 50% training, 30% batch;
//     estimates log-uniform from 10 minutes to 2 days;
//   - 20 teams whose quotas add up to 90% of each model's GPUs;
//   - running jobs fill about 70% of the GPUs (45% of nodes full, 20% idle,
//     35% with 1-4 GPUs free), half of them preemptible.
func Large(spec LargeSpec) scheduler.Input {
	rng := rand.New(rand.NewPCG(spec.Seed, 0x9e3779b97f4a7c15))
	now := T0.Add(24 * time.Hour)
	in := scheduler.Input{Now: now, Models: Models(), Classes: map[string][]string{}}
	count := map[string]int{}
	for i := range spec.Nodes {
		model, prof := "h100-sxm-80gb", ""
		switch r := float64(i%10) / 10; {
		case r >= 0.9:
			model, prof = "h200-sxm-141gb", "1g.18gb"
		case r >= 0.6:
			model, prof = "a100-sxm-80gb", "1g.10gb"
		}
		name := fmt.Sprintf("n%05d", i)
		b := MakeNode(name, model, 8).Rack(fmt.Sprintf("r%03d", i/32)).Block(fmt.Sprintf("b%02d", i/256))
		if prof != "" && (i/10)%10 == 0 {
			b.MIG(4, prof, 7)
			count[model] += 4
		} else {
			count[model] += 8
		}
		in.Nodes = append(in.Nodes, b.Obj())
	}
	for t := range spec.Teams {
		team := scheduler.Team{Name: fmt.Sprintf("team%02d", t), Weight: 1 + float64(t%3), BorrowingLimit: -1,
			Usage: float64(rng.IntN(1_000_000)), Quota: map[string]int{}}
		if t%4 == 0 {
			team.BorrowingLimit = 64
		}
		for _, m := range []string{"h100-sxm-80gb", "a100-sxm-80gb", "h200-sxm-141gb"} {
			team.Quota[m] = int(0.9 * float64(count[m]) / float64(spec.Teams))
		}
		in.Teams = append(in.Teams, team)
	}
	prios := gpufleet.Priorities() // highest first
	pickPrio := func() gpufleet.Priority {
		switch r := rng.Float64(); {
		case r < 0.05:
			return prios[0]
		case r < 0.20:
			return prios[1]
		case r < 0.70:
			return prios[2]
		}
		return prios[3]
	}
	est := func() time.Duration {
		lo, hi := math.Log(600), math.Log(172800)
		return time.Duration(math.Exp(lo+rng.Float64()*(hi-lo))) * time.Second
	}
	// Running work, leaving free capacity fragmented like a real fleet's.
	id := 0
	for ni := range in.Nodes {
		n := &in.Nodes[ni]
		free := []int{}
		for gi, g := range n.GPUs {
			if len(g.MIG) == 0 {
				free = append(free, gi)
			} else if rng.IntN(2) == 0 {
				// half the MIG GPUs run a few instances
				j := MakeJob(fmt.Sprintf("r%06d", id), fmt.Sprintf("team%02d", rng.IntN(spec.Teams)), 1).
					MIG(g.MIG[0].Profile).Priority(pickPrio()).Estimate(est()).Obj()
				j.Started = now.Add(-time.Duration(rng.IntN(36000)) * time.Second)
				j.Placement = []scheduler.Placement{{Node: n.Name, GPUs: []string{g.MIG[0].ID}, Fraction: 1}}
				j.Preemptible = rng.IntN(2) == 0
				in.Jobs = append(in.Jobs, j)
				id++
			}
		}
		keep := 0
		switch r := rng.Float64(); {
		case r < 0.45:
		case r < 0.65:
			keep = len(free)
		default:
			keep = 1 + rng.IntN(4)
		}
		for len(free) > keep {
			size := []int{1, 1, 1, 2, 2, 4, 8}[rng.IntN(7)]
			size = min(size, len(free)-keep)
			if size <= 0 {
				break
			}
			j := MakeJob(fmt.Sprintf("r%06d", id), fmt.Sprintf("team%02d", rng.IntN(spec.Teams)), size).
				Priority(pickPrio()).Estimate(est()).Obj()
			j.Started = now.Add(-time.Duration(rng.IntN(36000)) * time.Second)
			p := scheduler.Placement{Node: n.Name, Fraction: 1}
			for _, gi := range free[:size] {
				p.GPUs = append(p.GPUs, n.GPUs[gi].ID)
			}
			free = free[size:]
			j.Placement = []scheduler.Placement{p}
			j.Preemptible = rng.IntN(2) == 0
			in.Jobs = append(in.Jobs, j)
			id++
		}
	}
	allow := func() []string {
		switch r := rng.Float64(); {
		case r < 0.5:
			return nil
		case r < 0.8:
			return []string{"h100-sxm-80gb"}
		case r < 0.9:
			return []string{"a100-sxm-80gb"}
		}
		return []string{"h100-sxm-80gb", "h200-sxm-141gb"}
	}
	for i := range spec.Pending {
		size := 1
		switch r := rng.Float64(); {
		case r < 0.70:
		case r < 0.80:
			size = 2
		case r < 0.90:
			size = 4
		case r < 0.98:
			size = 8
		default:
			size = []int{16, 16, 16, 16, 16, 16, 32, 32, 32, 64}[rng.IntN(10)]
		}
		b := MakeJob(fmt.Sprintf("q%06d", i), fmt.Sprintf("team%02d", rng.IntN(spec.Teams)), size).
			Priority(pickPrio()).Estimate(est()).Submitted(time.Duration(rng.IntN(86400)) * time.Second)
		b.j.Resources.GPUModels = allow()
		switch {
		case size >= 16:
			b.Nodes(size / 8)
		case rng.Float64() < 0.03:
			b.j.Resources.GPUs = 8
			b.Nodes(2)
		case size == 1 && rng.Float64() < 0.143:
			if rng.IntN(2) == 0 {
				if rng.IntN(2) == 0 {
					b.MIG("1g.10gb").Models("a100-sxm-80gb")
				} else {
					b.MIG("1g.18gb").Models("h200-sxm-141gb")
				}
			} else {
				b.TimeSlice([]float64{0.25, 0.5}[rng.IntN(2)])
			}
		}
		if rng.IntN(2) == 0 {
			b.j.Preemptible = true
		}
		in.Jobs = append(in.Jobs, b.Obj())
	}
	return in
}

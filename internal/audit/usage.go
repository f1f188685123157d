package audit

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// gpuInfo is one physical GPU of the fleet.
type gpuInfo struct {
	node   *gpufleet.Node
	gpu    gpufleet.NodeGPU
	domain string // NVLink domain, "" when PCIe only
}

// fleetIndex finds GPUs (or their MIG instances) by UUID.
type fleetIndex struct {
	gpus map[string]gpuInfo // by GPU UUID and by MIG instance UUID
}

func indexFleet(nodes []gpufleet.Node) fleetIndex {
	ix := fleetIndex{gpus: map[string]gpuInfo{}}
	for i := range nodes {
		n := &nodes[i]
		for _, g := range n.GPUs {
			info := gpuInfo{node: n, gpu: g, domain: g.NVLinkDomain}
			ix.gpus[g.UUID] = info
			for _, m := range g.MIGInstances {
				ix.gpus[m.UUID] = info
			}
		}
	}
	return ix
}

// use is what one attempt held and did in the period.
type use struct {
	job        *gpufleet.Job
	att        *gpufleet.Attempt
	gpus       []string // physical GPU UUIDs, each once
	model      string   // catalog id of its first GPU
	start, end time.Time
	// From the rollups of its GPUs while it held them.
	minutes       int
	allocS, idleS float64
	eff, dram     mean
	tensor, sm    mean
	memMax        int64 // -1 when no GPU reported memory
	powerMinutes  int
}

// mean accumulates an average of the readings present.
type mean struct{ sum, n float64 }

func (m *mean) add(p *float64) {
	if p != nil {
		m.sum += *p
		m.n++
	}
}

func (m mean) value() (float64, bool) {
	if m.n == 0 {
		return 0, false
	}
	return m.sum / m.n, true
}

// derived is what several checks read, computed once: the fleet index,
// every attempt's use, and which GPUs each attempt held when.
type derived struct {
	ix   fleetIndex
	uses []*use
	busy map[string][][2]time.Time
}

// derive computes (once) what the checks share.
func (s *Snapshot) derive() *derived {
	if s.derived == nil {
		ix := indexFleet(s.Nodes)
		s.derived = &derived{ix: ix, uses: uses(s, ix), busy: busyIntervals(s, ix)}
	}
	return s.derived
}

// gpuHours is the GPU-hours the attempt held in the period, from the
// rollups.
func (u *use) gpuHours() float64 { return u.allocS / 3600 }

// uses attributes the period's rollups to the attempts that held the GPUs:
// a GPU-minute counts for an attempt when the attempt held the GPU in that
// minute and the rollup says the GPU was allocated to the job's team.
func uses(s *Snapshot, ix fleetIndex) []*use {
	byGPU := map[string][]GPUMinute{}
	for _, m := range s.Usage {
		byGPU[m.GPU] = append(byGPU[m.GPU], m)
	}
	for _, rows := range byGPU {
		slices.SortFunc(rows, func(a, b GPUMinute) int { return a.Minute.Compare(b.Minute) })
	}
	var out []*use
	for ji := range s.Jobs {
		j := &s.Jobs[ji]
		for ai := range j.Attempts {
			a := &j.Attempts[ai]
			if a.StartedAt == nil {
				continue
			}
			end := s.Now
			if a.FinishedAt != nil {
				end = *a.FinishedAt
			}
			if !end.After(s.Since) {
				continue
			}
			u := &use{job: j, att: a, start: *a.StartedAt, end: end, memMax: -1}
			for _, id := range a.AllGPUs() {
				info, ok := ix.gpus[id]
				if !ok || slices.Contains(u.gpus, info.gpu.UUID) {
					continue
				}
				u.gpus = append(u.gpus, info.gpu.UUID)
				if u.model == "" {
					u.model = info.gpu.Model
				}
				rows := byGPU[info.gpu.UUID]
				from := a.StartedAt.Truncate(time.Minute)
				i, _ := slices.BinarySearchFunc(rows, from, func(r GPUMinute, t time.Time) int { return r.Minute.Compare(t) })
				for ; i < len(rows) && rows[i].Minute.Before(end); i++ {
					r := rows[i]
					if r.AllocatedS <= 0 || (r.Team != "" && r.Team != j.Team) {
						continue
					}
					u.minutes++
					u.allocS += r.AllocatedS
					u.idleS += r.IdleAllocatedS
					u.eff.add(r.Effective)
					u.dram.add(r.DRAMActivity)
					u.tensor.add(r.TensorActivity)
					u.sm.add(r.SMActivity)
					if r.MemoryUsedMax != nil {
						u.memMax = max(u.memMax, *r.MemoryUsedMax)
					}
					if r.PowerWatts != nil {
						u.powerMinutes++
					}
				}
			}
			out = append(out, u)
		}
	}
	return out
}

// price is the catalog's hourly price of model id, or nil.
func (s *Snapshot) price(id string) *float64 {
	if g, ok := s.Models[id]; ok && g.PricePerHourUSD != nil {
		return g.PricePerHourUSD
	}
	return nil
}

// cost prices GPU-hours of model id (nil without a price).
func (s *Snapshot) cost(id string, hours float64) *float64 {
	if p := s.price(id); p != nil {
		return ptr(round2(*p * hours))
	}
	return nil
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

// fleetModels lists the catalog entries of the models the fleet has, by
// memory, smallest first.
func (s *Snapshot) fleetModels() []catalog.GPU {
	seen := map[string]bool{}
	var out []catalog.GPU
	for _, n := range s.Nodes {
		for _, g := range n.GPUs {
			if c, ok := s.Models[g.Model]; ok && !seen[c.ID] {
				seen[c.ID] = true
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b catalog.GPU) int {
		return cmp.Or(cmp.Compare(a.MemoryBytes, b.MemoryBytes), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// ModelMap indexes catalog entries by id, for Snapshot.Models.
func ModelMap(gs []catalog.GPU) map[string]catalog.GPU {
	out := make(map[string]catalog.GPU, len(gs))
	for _, g := range gs {
		out[g.ID] = g
	}
	return out
}

package server

import (
	"context"

	"github.com/gpufleet/gpufleet"
)

// workHistory is how many of a job's earlier attempts measure its energy
// per unit of work.
const workHistory = 32

// joulesPerUnit is what prefer efficient ranks a new job's GPU models by:
// the GPU energy per unit of work its namesakes measured on each model
// (the team's ended attempts of jobs with the same name and work unit,
// all their energy over all their work), else the planner's joules per
// token for a job that describes its model, else nothing (the scheduler
// then ranks by peak per watt). Measured and planned figures are never
// mixed: they count different units and carry different errors.
func (s *Server) joulesPerUnit(ctx context.Context, team, name string, work *gpufleet.WorkCounter, planned map[string]float64) (map[string]float64, error) {
	if name != "" && work != nil {
		as, err := s.st.WorkHistory(ctx, team, name, work.UnitName(), workHistory)
		if err != nil {
			return nil, err
		}
		if len(as) > 0 {
			nodes, err := s.st.Nodes(ctx)
			if err != nil {
				return nil, err
			}
			if m := measuredJoules(as, modelsByUUID(nodes)); len(m) > 0 {
				return m, nil
			}
		}
	}
	if len(planned) == 0 {
		return nil, nil
	}
	return planned, nil
}

// measuredJoules sums energy and work per GPU model (of each attempt's
// first GPU) and divides.
func measuredJoules(as []gpufleet.Attempt, model map[string]string) map[string]float64 {
	energy, work := map[string]float64{}, map[string]float64{}
	for _, a := range as {
		if a.Work == nil || *a.Work <= 0 || len(a.GPUs) == 0 {
			continue
		}
		m, ok := model[a.GPUs[0]]
		if !ok {
			continue // the node left the fleet
		}
		energy[m] += a.EnergyJoules
		work[m] += *a.Work
	}
	out := map[string]float64{}
	for m, w := range work {
		if v := energy[m] / w; v > 0 && v <= gpufleet.MaxJoulesPerUnit {
			out[m] = v
		}
	}
	return out
}

// modelsByUUID maps every GPU and MIG instance UUID of the nodes to its
// GPU model.
func modelsByUUID(nodes []gpufleet.Node) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		for _, g := range n.GPUs {
			out[g.UUID] = g.Model
			for _, m := range g.MIGInstances {
				out[m.UUID] = g.Model
			}
		}
	}
	return out
}

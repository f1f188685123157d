package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
)

// benchView is the bench page: the workload benches the viewer may see,
// newest first, each a report with a row per GPU model (docs/BENCH.md).
type benchView struct {
	AllReduces []allReduceRow
	Workloads  []workloadCard
	Err        string
}

// allReduceRow is one all-reduce across nodes (docs/BENCH.md#across-nodes).
type allReduceRow struct {
	ID, State, Nodes, Model, Shape, Fabric, BusBW, Median, OfMedian, Verdict, Started string
	Bad                                                                               bool
}

type workloadCard struct {
	ID, Team, Created, Command, Metric, Unit string
	GPUs                                     int
	Done                                     bool
	Rows                                     []workloadRow
}

type workloadRow struct {
	GPUModel, JobID, State, Throughput, Cost, Energy, SM, Tensor, DRAM, Power, Bound, Predicted, Ratio, Note string
}

// maxWorkloads bounds the workload benches the page shows.
const maxWorkloads = 20

func (u *UI) benchPage(r *http.Request, v *viewer) (view, error) {
	var bv benchView
	bs, ok := u.svc.(api.BenchService)
	if !ok {
		bv.Err = "This server runs no benchmarks."
		return view{page: "bench", title: "Bench", nav: "bench", live: "/ui/bench", data: bv}, nil
	}
	runs, err := bs.AllReduceBenches(r.Context(), v.P)
	if err != nil {
		return view{}, fmt.Errorf("all-reduce runs: %w", err)
	}
	for i, g := range runs {
		if i == maxWorkloads {
			break
		}
		row := allReduceRow{ID: g.ID, State: string(g.State), Nodes: strings.Join(g.Nodes, ", "), Model: g.GPUModel,
			Shape: fmt.Sprintf("%d x %d GPUs", len(g.Nodes), g.GPUsPerNode), Fabric: string(g.Fabric), BusBW: dash, Median: dash,
			OfMedian: dash, Verdict: g.Detail, Started: fmtClock(g.Started), Bad: g.State == bench.GroupFailed}
		if f := g.Figure; f != nil {
			row.BusBW, row.Verdict = bench.Human(f.Value, f.Unit), "no baseline"
			if c := g.Fleet; c != nil && c.Peers > 0 {
				row.Median = fmt.Sprintf("%s (%d runs)", bench.Human(c.Median, f.Unit), c.Peers)
				if c.Fraction != nil {
					row.OfMedian = strconv.FormatFloat(*c.Fraction, 'f', 2, 64)
					row.Verdict, row.Bad = "ok", c.Degraded
					if c.Degraded {
						row.Verdict = fmt.Sprintf("under the %.2f gate: every member degraded", c.Gate)
					}
				}
			}
		}
		bv.AllReduces = append(bv.AllReduces, row)
	}
	all, err := bs.WorkloadBenches(r.Context(), v.P)
	if err != nil {
		return view{}, fmt.Errorf("workload benches: %w", err)
	}
	for i, w := range all {
		if i == maxWorkloads {
			break
		}
		card := workloadCard{ID: w.ID, Team: w.Team, Created: fmtClock(w.CreatedAt), Command: strings.Join(w.Command, " "),
			Metric: w.Metric, Unit: w.Unit, GPUs: w.GPUs, Done: w.Done}
		for _, row := range w.Rows {
			card.Rows = append(card.Rows, workloadRow{GPUModel: row.GPUModel, JobID: row.JobID, State: row.State,
				Throughput: optNum(row.Throughput, 1), Cost: optMoney(row.USDPerMillion), Energy: optNum(row.JoulesPerUnit, 3),
				SM: optPct(row.SMActivity), Tensor: optPct(row.TensorActivity), DRAM: optPct(row.DRAMActivity),
				Power: optNum(row.PowerWatts, 0), Bound: row.Bound, Predicted: optNum(row.Predicted, 1), Ratio: optNum(row.Ratio, 2), Note: row.Note})
		}
		bv.Workloads = append(bv.Workloads, card)
	}
	return view{page: "bench", title: "Bench", nav: "bench", live: "/ui/bench", data: bv}, nil
}

func optNum(v *float64, prec int) string {
	if v == nil {
		return dash
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}

func optPct(v *float64) string {
	if v == nil {
		return dash
	}
	return strconv.FormatFloat(*v*100, 'f', 0, 64) + "%"
}

func optMoney(v *float64) string {
	if v == nil {
		return dash
	}
	return "$" + strconv.FormatFloat(*v, 'f', 3, 64)
}

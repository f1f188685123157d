package cli

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/capacity"
)

// newProcureCmd is `gpufleet procure`: what to order and by when, checked
// by replay (docs/CAPACITY.md).
func newProcureCmd(e *env) *cobra.Command {
	c := &clientEnv{env: e, now: time.Now}
	var (
		model, target, plot string
		horizon             time.Duration
		quantile            float64
		leads               []string
	)
	cmd := &cobra.Command{
		Use:   "procure [--gpu-model M] [--horizon 180d] [--target p90-wait:training<4h] [--lead-time MODEL=DAYSd] [-o json]",
		Short: "Say what GPUs to order and by when, checked by replaying forecast demand through the scheduler",
		Long: `For each GPU model of the fleet (admin): forecast the demand of the jobs that
ran on it, replay each forecast week (at --quantile of each day's demand,
jobs sampled from its finished jobs) through the server's scheduling policy
in the simulator until a week misses --target, and find the fewest nodes that
make the replay meet it. It says the week the target is first missed, what to
order, the order-by date given the lead time (the catalog's, with its source,
or --lead-time), how likely the miss is, and the replay with and without the
purchase; or that nothing is needed. A purchase is only recommended when the
replay shows it meets the target.

Targets: allocation<85% (the share of GPUs held over a week) or
pNN-wait[:CLASS]<DURATION (queue wait of the week's jobs).`,
		Example: `  gpufleet procure
  gpufleet procure --gpu-model h100-sxm-80gb --target 'allocation<80%' --lead-time h100-sxm-80gb=120d --plot h100.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h := int(horizon / (24 * time.Hour))
			if horizon%(24*time.Hour) != 0 || h < 7 || h > capacity.MaxHorizonDays {
				return usageErr("--horizon %s: expected whole days from 7d to %dd", horizon, capacity.MaxHorizonDays)
			}
			t, err := capacity.ParseTarget(target)
			if err != nil {
				return usageErr("--target: %v", err)
			}
			if !(quantile >= 0.5 && quantile <= 0.99) {
				return usageErr("--quantile %g: expected 0.5 to 0.99", quantile)
			}
			q := api.ProcureQuery{GPUModel: model, HorizonDays: h, Target: t, Quantile: quantile, LeadTimeDays: map[string]int{}}
			for _, kv := range leads {
				m, v, ok := strings.Cut(kv, "=")
				d, err := gpufleet.ParseDuration(v)
				days := int(d / (24 * time.Hour))
				if !ok || m == "" || err != nil || d%(24*time.Hour) != 0 || days < 1 || days > catalog.MaxLeadTimeDays {
					return usageErr("--lead-time %s: expected MODEL=DAYSd, 1d to %dd", kv, catalog.MaxLeadTimeDays)
				}
				q.LeadTimeDays[m] = days
			}
			if plot != "" && model == "" {
				return usageErr("--plot: needs --gpu-model (one plot per model)")
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			resp, err := cl.Procure(cmd.Context(), q)
			if err != nil {
				return err
			}
			for _, m := range resp.Models {
				if plot == "" {
					break
				}
				if err := writePlot(plot, "GPU demand: "+m.Recommendation.GPUModel, m.History, m.Forecast, m.CapacityGPUHoursPerDay, m.Recommendation.Marks()...); err != nil {
					return err
				}
			}
			if e.output == outputJSON {
				return writeJSON(e.stdout, resp)
			}
			return printProcure(e.stdout, resp)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&model, "gpu-model", "", "one GPU model of the fleet (default: every model)")
	durationFlag(fs, &horizon, "horizon", 180*24*time.Hour, "how far ahead to look (180d)")
	fs.StringVar(&target, "target", capacity.DefaultTarget.String(), "service target: allocation<85% or pNN-wait[:CLASS]<DURATION")
	fs.Float64Var(&quantile, "quantile", 0.8, "plan for this quantile of each day's forecast demand")
	fs.StringArrayVar(&leads, "lead-time", nil, "MODEL=DAYSd lead time, over the catalog's; repeatable")
	fs.StringVar(&plot, "plot", "", "with --gpu-model: draw history, forecast, intervals, capacity and the order-by date to FILE.svg")
	return cmd
}

// printProcure prints procurement decisions for people.
func printProcure(w io.Writer, resp api.ProcureResponse) error {
	t := newTable(w, "GPU MODEL", "ACTION", "NODES", "GPUS", "TARGET MISSED", "ORDER BY", "LEAD", "CHANCE", "WAIT/ALLOC WITHOUT", "WITH")
	for _, m := range resp.Models {
		r := m.Recommendation
		without, with := "-", "-"
		if r.Without != nil {
			without = replayCell(*r.Without, r.Target)
		}
		if r.With != nil {
			with = replayCell(*r.With, r.Target)
		}
		t.row(r.GPUModel, string(r.Action), intOrDash(r.Nodes), intOrDash(r.GPUs), dateOrDash(r.Crossing), dateOrDash(r.OrderBy),
			fmt.Sprintf("%dd", r.LeadTimeDays), pctOrDash(r.Probability, r.Crossing != nil), without, with)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, m := range resp.Models {
		fmt.Fprintf(w, "\n%s (%d finished jobs sampled):\n", m.Recommendation.GPUModel, m.PoolJobs)
		for _, s := range m.Recommendation.Reasons {
			fmt.Fprintf(w, "  - %s\n", s)
		}
	}
	for _, k := range sortedKeys(resp.Skipped) {
		fmt.Fprintf(w, "\n%s: no decision: %s\n", k, resp.Skipped[k])
	}
	return nil
}

func replayCell(r capacity.Replay, t capacity.Target) string {
	return fmt.Sprintf("p%d %s / %.0f%%", cmpOr(t.Percentile, 90), capacity.WaitText(r.WaitS), 100*r.Allocation)
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func intOrDash(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func dateOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.DateOnly)
}

func pctOrDash(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

// newLifecycleCmd is `gpufleet lifecycle`: keep, redeploy, replace or
// retire each GPU model (docs/CAPACITY.md).
func newLifecycleCmd(e *env) *cobra.Command {
	c := &clientEnv{env: e, now: time.Now}
	var (
		horizon, since              time.Duration
		priceFile                   string
		energy, depreciation, fixes float64
	)
	cmd := &cobra.Command{
		Use:   "lifecycle [--horizon 3y] [--since 30d] [--price-file F] [-o json]",
		Short: "Keep, redeploy, replace or retire each GPU model: age, depreciation, failures, energy and cost per unit against newer models",
		Long: `For each GPU model of the fleet (admin): its age (the nodes' purchased label,
YYYY-MM-DD or YYYY-MM), book value and depreciation, allocation and failures
per GPU-year over --since, energy cost, and its cost per unit of the fleet's
own mix of memory-bound and compute-bound work (from the rollups; the bench
medians where measured) against the newer models of the catalog of the same
vendor that hold as much memory and have a purchase price (the catalog's, or
--price-file). Per model a decision with its reasons: retire (nearly idle),
replace (a newer model pays for itself within --horizon out of the running
costs it saves, with the break-even month), redeploy (only compute-bound
work pays to move: keep it for memory-bound work; or newer CUDA no longer
supports it), or keep.

--price-file is CSV with a header: gpu_model,price_usd (one GPU's price).`,
		Example: `  gpufleet lifecycle
  gpufleet lifecycle --horizon 5y --price-file quotes.csv --energy-price 0.15 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hd := int(horizon / (24 * time.Hour))
			if hd < 30 || hd > 3650 {
				return usageErr("--horizon %s: expected 30d to 10y", horizon)
			}
			sd := int(since / (24 * time.Hour))
			if sd < 1 || sd > 365 {
				return usageErr("--since %s: expected 1d to 365d", since)
			}
			q := api.LifecycleQuery{HorizonMonths: max(int(float64(hd)/30.44+0.5), 1), SinceDays: sd, EnergyUSDPerKWh: energy,
				DepreciationYears: depreciation, RepairHours: fixes}
			if priceFile != "" {
				f, err := os.Open(priceFile)
				if err != nil {
					return fmt.Errorf("--price-file: %w", err)
				}
				q.Prices, err = readPrices(f)
				f.Close()
				if err != nil {
					return fmt.Errorf("--price-file %s: %w", priceFile, err)
				}
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			rep, err := cl.Lifecycle(cmd.Context(), q)
			if err != nil {
				return err
			}
			if e.output == outputJSON {
				return writeJSON(e.stdout, rep)
			}
			return printLifecycle(e.stdout, rep)
		},
	}
	fs := cmd.Flags()
	durationFlag(fs, &horizon, "horizon", 3*365*24*time.Hour, "how long a replacement may take to pay for itself (3y)")
	durationFlag(fs, &since, "since", 30*24*time.Hour, "the period use and failures are read over (30d)")
	fs.StringVar(&priceFile, "price-file", "", "CSV gpu_model,price_usd: purchase prices per GPU over the catalog's")
	fs.Float64Var(&energy, "energy-price", capacity.DefaultEnergyUSDPerKWh, "electricity in USD per kWh")
	fs.Float64Var(&depreciation, "depreciation-years", capacity.DefaultDepreciationYears, "straight-line life of a GPU server in years")
	fs.Float64Var(&fixes, "repair-hours", capacity.DefaultRepairHours, "hours a GPU failure takes out of service")
	return cmd
}

// readPrices reads a price file: a header naming gpu_model and price_usd,
// then one row per model.
func readPrices(r io.Reader) (map[string]float64, error) {
	cr := csv.NewReader(bufio.NewReader(io.LimitReader(r, 1<<20)))
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("line 1: expected a header gpu_model,price_usd")
	}
	if err != nil {
		return nil, err
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	mi, ok1 := col["gpu_model"]
	pi, ok2 := col["price_usd"]
	if !ok1 || !ok2 {
		return nil, errors.New("line 1: expected columns gpu_model and price_usd")
	}
	out := map[string]float64{}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if mi >= len(rec) || pi >= len(rec) {
			return nil, fmt.Errorf("line %d: expected gpu_model and price_usd", line)
		}
		p, err := strconv.ParseFloat(strings.TrimSpace(rec[pi]), 64)
		m := strings.TrimSpace(rec[mi])
		if m == "" || err != nil || !(p >= 1 && p <= 1e8) {
			return nil, fmt.Errorf("line %d: price_usd %q of %q: expected a GPU model and a price from 1 to 1e8 USD", line, rec[pi], rec[mi])
		}
		if len(out) >= 64 {
			return nil, fmt.Errorf("line %d: at most 64 prices", line)
		}
		out[m] = p
	}
}

// printLifecycle prints the lifecycle table for people.
func printLifecycle(w io.Writer, rep capacity.LifecycleReport) error {
	fmt.Fprintf(w, "unit: %s; energy %.2f USD/kWh at PUE %.2f; %g-year depreciation; replacements must pay for themselves within %d months\n",
		rep.Unit, rep.EnergyUSDPerKWh, rep.PUE, rep.DepreciationYears, rep.HorizonMonths)
	t := newTable(w, "GPU MODEL", "GPUS", "AGE", "BOOK VALUE", "ALLOC", "FAIL/GPU-YR (95%)", "ENERGY/GPU-MO", "$/UNIT", "BEST NEWER", "$/UNIT", "BREAK-EVEN", "DECISION")
	for _, m := range rep.Models {
		age, book := "-", "-"
		if m.AgeYears != nil {
			age = fmt.Sprintf("%.1fy", *m.AgeYears)
		}
		if m.BookValueUSD != nil {
			book = fmt.Sprintf("$%.0f", *m.BookValueUSD)
		}
		cand, ccost, be := "-", "-", "-"
		if c := m.Candidate; c != nil {
			cand, ccost = fmt.Sprintf("%s (%.1fx)", c.GPUModel, c.Speedup), fmt.Sprintf("%.3f", c.CostPerUnitUSD)
			if c.BreakEvenMonth != nil {
				be = fmt.Sprintf("month %d", *c.BreakEvenMonth)
			} else {
				be = "never"
			}
		}
		t.row(m.GPUModel, strconv.Itoa(m.GPUs), age, book, fmt.Sprintf("%.0f%%", 100*m.Allocation), m.Failures.String(),
			fmt.Sprintf("$%.0f", m.EnergyUSDPerGPUMonth), fmt.Sprintf("%.3f", m.CostPerUnitUSD), cand, ccost, be, string(m.Decision))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, m := range rep.Models {
		fmt.Fprintf(w, "\n%s: %s\n", m.GPUModel, m.Decision)
		for _, s := range m.Reasons {
			fmt.Fprintf(w, "  - %s\n", s)
		}
	}
	return nil
}

package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/agent"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/forecast"
)

// maxHorizonDays bounds --horizon: two years of days.
const maxHorizonDays = 730

// newForecastCmd is `gpufleet forecast`: daily GPU demand forecast from a
// demand history, and its backtest against the seasonal-naive baseline
// (docs/CAPACITY.md).
func newForecastCmd(e *env) *cobra.Command {
	c := &clientEnv{env: e, now: time.Now}
	var (
		demand, model, team, plot string
		horizon                   time.Duration
		backtest, allModels       bool
		step                      int
	)
	cmd := &cobra.Command{
		Use:   "forecast [--gpu-model M] [--team T] [--horizon 28d] [-o json] | --demand FILE [--backtest]",
		Short: "Forecast daily GPU demand with intervals, and backtest the forecaster against the seasonal-naive baseline",
		Long: `Forecast daily GPU demand (the GPU-hours each day's submissions ask for,
served or not): additive Holt-Winters with a damped trend and a weekly
season, its parameters chosen on the history, with 80% and 95% prediction
intervals. Without --demand the server forecasts from its own jobs (a
member: its team's; --team and --gpu-model narrow it) and gives the fleet's
capacity to read it against; with --demand FILE it reads a demand history,
as gpufleet sim --demand-out writes from a trace replay.

--backtest makes a forecast of --horizon days from every --step days of the
history (once three weeks exist) and scores it against what happened, beside
the seasonal-naive baseline (each day as the same weekday last week) on the
same origins: the mean absolute percentage error over days with demand,
the absolute errors over the demand summed over every day (WAPE), and the
share of days inside the 80% and 95% intervals. docs/CAPACITY.md has the
models.`,
		Example: `  gpufleet sim --trace traces/philly-gavel/philly_gavel.csv.gz --format philly-gavel \
      --cluster traces/clusters/philly.yaml --demand-out philly-demand.csv
  gpufleet forecast --demand philly-demand.csv --backtest --horizon 14d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h := int(horizon / (24 * time.Hour))
			if horizon%(24*time.Hour) != 0 || h < 1 || h > maxHorizonDays {
				return usageErr("--horizon %s: expected whole days from 1d to %dd", horizon, maxHorizonDays)
			}
			if demand == "" {
				if backtest {
					return usageErr("--backtest: needs --demand FILE (a demand history to score the forecaster on)")
				}
				cl, err := c.client(cmd)
				if err != nil {
					return err
				}
				resp, err := cl.Forecast(cmd.Context(), api.ForecastQuery{GPUModel: model, Team: team, HorizonDays: h})
				if err != nil {
					return err
				}
				if err := writePlot(plot, "GPU demand", resp.History, resp.Forecast, resp.CapacityGPUHoursPerDay); err != nil {
					return err
				}
				if e.output == outputJSON {
					return writeJSON(e.stdout, resp)
				}
				if model == "" && !allModels {
					return printModelForecasts(e, resp.Models)
				}
				if model == "" {
					fmt.Fprintln(e.stdout, "every GPU model's hours together, for reference only: GPUs are not interchangeable")
				}
				fmt.Fprintf(e.stdout, "capacity %.0f GPU-hours a day\n", resp.CapacityGPUHoursPerDay)
				return printForecast(e, resp.History, resp.Forecast)
			}
			if step < 1 || step > maxHorizonDays {
				return usageErr("--step %d: expected 1 to %d days", step, maxHorizonDays)
			}
			f, err := os.Open(demand)
			if err != nil {
				return fmt.Errorf("--demand: %w", err)
			}
			s, err := forecast.ReadDemandCSV(f, model)
			f.Close()
			if err != nil {
				return fmt.Errorf("--demand %s: %w", demand, err)
			}
			if backtest {
				return runBacktest(e, s, h, step)
			}
			fc, err := forecast.HoltWinters(s, h)
			if err != nil {
				return err
			}
			if err := writePlot(plot, "GPU demand from "+filepath.Base(demand), s, fc, 0); err != nil {
				return err
			}
			if e.output == outputJSON {
				return writeJSON(e.stdout, fc)
			}
			return printForecast(e, s, fc)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&demand, "demand", "", "demand history CSV (day, gpu_model, gpu_hours_asked, ...), as gpufleet sim --demand-out writes it")
	fs.StringVar(&model, "gpu-model", "", "one GPU model's demand, day by day (default: each model of the fleet against its own capacity)")
	fs.BoolVar(&allModels, "all-models", false, "from the server: every model's hours added into one series, day by day (for reference: GPUs are not interchangeable)")
	fs.StringVar(&plot, "plot", "", "also draw the history, the forecast with its intervals and the capacity to FILE.svg")
	fs.StringVar(&team, "team", "", "from the server: one team's demand (a member sees only its own)")
	durationFlag(fs, &horizon, "horizon", 28*24*time.Hour, "days to forecast (28d)")
	fs.BoolVar(&backtest, "backtest", false, "score the forecaster against the seasonal-naive baseline on the history instead of forecasting")
	fs.IntVar(&step, "step", 7, "with --backtest: days between forecast origins")
	return cmd
}

// writePlot draws a forecast to path as SVG, when path is set.
func writePlot(path, title string, s forecast.Series, fc forecast.Forecast, capacity float64, marks ...forecast.Mark) error {
	if path == "" {
		return nil
	}
	var buf bytes.Buffer
	if err := forecast.WriteSVG(&buf, title, s, fc, capacity, marks...); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if err := agent.WriteFileAtomic(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}

// printModelForecasts prints each GPU model's forecast against its own
// capacity, a line each: the demand of the last week, the forecast of the
// next, the highest 80% bound of the horizon and the days the forecast
// passes the capacity.
func printModelForecasts(e *env, ms []api.ModelForecast) error {
	fmt.Fprintln(e.stdout, "each GPU model against its own capacity (gpufleet forecast --gpu-model M for its days; --all-models adds them up, for reference only)")
	t := newTable(e.stdout, "GPU MODEL", "CAPACITY GPU-H/DAY", "LAST 7 DAYS", "NEXT 7 DAYS", "HIGHEST 80%", "DAYS OVER CAPACITY", "NOTE")
	for _, m := range ms {
		if m.Error != "" {
			t.row(m.GPUModel, fmt.Sprintf("%.0f", m.CapacityGPUHoursPerDay), "-", "-", "-", "-", m.Error)
			continue
		}
		v, fc := m.History.Values, m.Forecast
		last := mean(v[max(0, len(v)-7):])
		next := mean(fc.Mean[:min(7, len(fc.Mean))])
		over := 0
		for _, x := range fc.Mean {
			if x > m.CapacityGPUHoursPerDay {
				over++
			}
		}
		hi := 0.0
		for _, x := range fc.Hi80 {
			hi = max(hi, x)
		}
		t.row(m.GPUModel, fmt.Sprintf("%.0f", m.CapacityGPUHoursPerDay), fmt.Sprintf("%.0f", last), fmt.Sprintf("%.0f", next), fmt.Sprintf("%.0f", hi),
			fmt.Sprintf("%d of %d", over, len(fc.Mean)), "-")
	}
	return t.flush()
}

// mean is the mean of v, 0 for none.
func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// printForecast prints a forecast for people.
func printForecast(e *env, s forecast.Series, fc forecast.Forecast) error {
	if p := fc.Params; p != nil {
		fmt.Fprintf(e.stdout, "%d days of history from %s; %s (alpha %.2f, beta %.2f, gamma %.2f, phi %.2f), one-step error sd %.1f GPU-hours\n",
			len(s.Values), s.Start.Format(time.DateOnly), fc.Method, p.Alpha, p.Beta, p.Gamma, p.Phi, fc.SD)
	}
	t := newTable(e.stdout, "DAY", "GPU-HOURS", "80% INTERVAL", "95% INTERVAL")
	for j := range fc.Mean {
		t.row(fc.Start.AddDate(0, 0, j).Format("2006-01-02 Mon"), fmt.Sprintf("%.0f", fc.Mean[j]),
			fmt.Sprintf("%.0f-%.0f", fc.Lo80[j], fc.Hi80[j]), fmt.Sprintf("%.0f-%.0f", fc.Lo95[j], fc.Hi95[j]))
	}
	return t.flush()
}

// backtestReport is what gpufleet forecast --backtest -o json prints.
type backtestReport struct {
	Days     int              `json:"days"`
	Horizon  int              `json:"horizon_days"`
	Forecast forecast.Score   `json:"forecast"`
	Baseline forecast.Score   `json:"baseline"`
	Scores   []forecast.Score `json:"scores"`
}

func runBacktest(e *env, s forecast.Series, h, step int) error {
	hw, err := forecast.Backtest(s, h, step, "holt-winters", forecast.HoltWinters)
	if err != nil {
		return err
	}
	sn, err := forecast.Backtest(s, h, step, "seasonal-naive", forecast.SeasonalNaive)
	if err != nil {
		return err
	}
	rep := backtestReport{Days: len(s.Values), Horizon: h, Forecast: hw, Baseline: sn, Scores: []forecast.Score{hw, sn}}
	if e.output == outputJSON {
		return writeJSON(e.stdout, rep)
	}
	fmt.Fprintf(e.stdout, "%d days from %s, %d-day forecasts from %d origins\n", len(s.Values), s.Start.Format(time.DateOnly), h, hw.Origins)
	t := newTable(e.stdout, "METHOD", "MAPE", "WAPE", "IN 80% INTERVAL", "IN 95% INTERVAL", "DAYS SCORED")
	for _, sc := range rep.Scores {
		t.row(sc.Method, fmt.Sprintf("%.1f%%", 100*sc.MAPE), fmt.Sprintf("%.1f%%", 100*sc.WAPE), fmt.Sprintf("%.0f%%", 100*sc.Coverage80),
			fmt.Sprintf("%.0f%%", 100*sc.Coverage95), fmt.Sprint(sc.Points))
	}
	return t.flush()
}

package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

func newRollupsCmd(c *clientEnv) *cobra.Command {
	var q api.RollupQuery
	var from, to string
	cmd := &cobra.Command{
		Use:   "rollups (--node NODE [--gpu UUID] | --job ID)",
		Short: "Per-GPU one-minute telemetry rollups of a node or of the GPUs a job held",
		Long: `The server keeps one-minute aggregates per GPU (mean utilization, SM, DRAM and
tensor activity, peak memory, mean power, energy, peak temperature) for its
--rollup-retention. --from and --to take RFC 3339 times, dates or durations
ago (2h); the default is the last hour.`,
		Example: `  gpufleet rollups --node dev-h100-0 --from 30m
  gpufleet rollups --job j-01m8p570g07htt8m -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (q.Node == "") == (q.JobID == "") {
				return fmt.Errorf("%w: expected exactly one of --node or --job", gpufleet.ErrInvalid)
			}
			if q.GPU != "" && q.Node == "" {
				return fmt.Errorf("%w: --gpu needs --node", gpufleet.ErrInvalid)
			}
			var err error
			if q.From, q.To, err = c.parsePeriod(from, to); err != nil {
				return err
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			rows, err := cl.Rollups(cmd.Context(), q)
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, api.RollupList{Rollups: rows})
			}
			t := newTable(c.stdout, "MINUTE", "NODE", "GPU", "TEAM", "UTIL", "EFFECTIVE", "MEM PEAK", "POWER", "ENERGY", "TEMP PEAK")
			for _, r := range rows {
				mem := "-"
				if r.MemoryUsedBytesMax != nil {
					mem = fmt.Sprintf("%.1f GiB", float64(*r.MemoryUsedBytesMax)/(1<<30))
				}
				t.row(r.Minute.UTC().Format(time.DateTime), r.Node, r.GPU, orDash(r.Team), pct(r.Utilization), pct(r.EffectiveUtilization),
					mem, unit(r.PowerWatts, "%.0f W"), fmt.Sprintf("%.0f J", r.EnergyJoules), unit(r.TemperatureCMax, "%.0f C"))
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&q.Node, "node", "", "a node's GPUs")
	cmd.Flags().StringVar(&q.GPU, "gpu", "", "only this GPU (UUID) of --node")
	cmd.Flags().StringVar(&q.JobID, "job", "", "the GPUs a job's attempts held, while they held them")
	cmd.Flags().StringVar(&from, "from", "", "start (default: an hour before --to)")
	cmd.Flags().StringVar(&to, "to", "", "end (default: now)")
	return cmd
}

// unit formats an optional reading, "-" when absent.
func unit(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

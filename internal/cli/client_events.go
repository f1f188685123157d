package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

func newEventsCmd(c *clientEnv) *cobra.Command {
	var (
		since  int64
		limit  int
		object string
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "The audit log: who changed what, when and why (members see their team's)",
		Long: `Every state change is an event: job submitted, attempt started or stopped,
node drained by the health rules, validation failed, fault injected... --since
shows events after an id; --object keeps those of one job, attempt, node or GPU
UUID; -f keeps printing new ones as they happen.`,
		Example: `  gpufleet events --object dev-h100-0
  gpufleet events -f`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			keep := func(e gpufleet.Event) bool {
				return object == "" || e.Object == object || strings.Contains(e.Detail, object)
			}
			var shown []gpufleet.Event
			last := since
			for {
				page, err := cl.Events(cmd.Context(), api.EventQuery{Since: last, Limit: 1000})
				if err != nil {
					return err
				}
				for _, e := range page.Events {
					last = max(last, e.ID)
					if keep(e) {
						shown = append(shown, e)
					}
				}
				if page.NextToken == "" {
					break
				}
			}
			if limit > 0 && len(shown) > limit {
				shown = shown[len(shown)-limit:]
			}
			if c.output == outputJSON && !follow {
				return writeJSON(c.stdout, shown)
			}
			enc := json.NewEncoder(c.stdout)
			print := func(e gpufleet.Event) error {
				if c.output == outputJSON {
					return enc.Encode(e) // one event per line while following
				}
				_, err := fmt.Fprintf(c.stdout, "%-6d %s  %-20s %-26s %-22s %s\n", e.ID, e.At.Local().Format(time.DateTime), e.Actor, e.Kind, e.Object, e.Detail)
				return err
			}
			if c.output != outputJSON {
				fmt.Fprintf(c.stdout, "%-6s %-19s  %-20s %-26s %-22s %s\n", "ID", "AT", "ACTOR", "KIND", "OBJECT", "DETAIL")
			}
			for _, e := range shown {
				if err := print(e); err != nil {
					return err
				}
			}
			if !follow {
				return nil
			}
			return cl.Watch(cmd.Context(), last, func(e gpufleet.Event) error {
				if !keep(e) {
					return nil
				}
				return print(e)
			})
		},
	}
	cmd.Flags().Int64Var(&since, "since", 0, "only events after this id")
	cmd.Flags().IntVar(&limit, "limit", 50, "show at most the last N events (0: all)")
	cmd.Flags().StringVar(&object, "object", "", "only events about this job, attempt, node or GPU UUID")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	return cmd
}

package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/rollout"
)

// newRolloutCmd is `gpufleet rollout`: move nodes to a stack in waves,
// gated by validation and health (docs/STACKS.md#rollouts).
func newRolloutCmd(c *clientEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Move nodes to a stack in waves: canary first, each node drained, updated, validated and baked; halts on the first failure",
		Args:  cobra.NoArgs,
	}
	var (
		stackName, gpuModel, waves, updateCommand string
		maxUnavailable, drainPolicy, onHalt       string
		selector                                  []string
		canary                                    int
		bake, updateTimeout                       time.Duration
		force                                     bool
	)
	start := &cobra.Command{
		Use:   "start --stack NAME (--gpu-model M | --selector KEY=VALUE) [--canary 1] [--waves 10%,50%,100%] [--max-unavailable 1|25%] [--drain-policy timeout:1h] [--on-halt pause] [--bake 30m] [--update-command CMD] [--force]",
		Short: "Start a rollout (admin)",
		Long: `Start a rollout (admin).

Before any node is touched, the compatibility rules judge the stack on every
targeted node as it would be after the update; a stack they say cannot work
there is refused (exit 4), naming the nodes and the rule, unless --force
(the findings are then kept as the rollout's warnings).

--drain-policy says what a node's running work gets before its update:
wait (cordon the node and let its jobs finish, however long), timeout:DUR
(wait up to DUR, then stop what still runs with each job's grace; the
default, timeout:1h) or now (stop it at once with its grace).
--on-halt says what a failed gate does: pause (stop and wait for the
operator, the default) or rollback (roll every updated node back at once).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if stackName == "" {
				return usageErr("--stack: required")
			}
			sel, err := parseKV(selector)
			if err != nil {
				return fmt.Errorf("--selector: %w", err)
			}
			if gpuModel == "" && len(sel) == 0 {
				return usageErr("--gpu-model or --selector: required (which nodes to update)")
			}
			w, err := parseWaves(waves)
			if err != nil {
				return err
			}
			count, pct, err := rollout.ParseMaxUnavailable(maxUnavailable)
			if err != nil {
				return usageErr("--max-unavailable: %v", err)
			}
			if _, err := rollout.ParseDrainPolicy(drainPolicy); err != nil {
				return usageErr("--drain-policy: %v", err)
			}
			if _, err := rollout.ParseOnHalt(onHalt); err != nil {
				return usageErr("--on-halt: %v", err)
			}
			req := api.RolloutRequest{Stack: stackName, GPUModel: gpuModel, Selector: sel, Canary: canary, Waves: w,
				MaxUnavailable: count, MaxUnavailablePercent: pct, DrainPolicy: drainPolicy, OnHalt: onHalt, Force: force, UpdateCommand: updateCommand}
			b, t := bake.Seconds(), updateTimeout.Seconds()
			req.BakeS, req.UpdateTimeoutS = &b, &t
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			r, err := cl.StartRollout(cmd.Context(), req)
			if err != nil {
				return err
			}
			return c.showRollout(r)
		},
	}
	start.Flags().StringVar(&stackName, "stack", "", "the stack to move the nodes to (gpufleet stacks)")
	start.Flags().StringVar(&gpuModel, "gpu-model", "", "the nodes with GPUs of this model")
	start.Flags().StringArrayVar(&selector, "selector", nil, "only nodes with this label KEY=VALUE (repeatable)")
	start.Flags().IntVar(&canary, "canary", 1, "nodes updated first, alone")
	start.Flags().StringVar(&waves, "waves", "100%", "cumulative shares of the other nodes per wave, such as 10%,50%,100%")
	start.Flags().StringVar(&maxUnavailable, "max-unavailable", "1", "nodes out of service at once: a count, or a share of the selected nodes such as 25% (rounded up)")
	start.Flags().StringVar(&drainPolicy, "drain-policy", rollout.DefaultDrainPolicy.String(), "wait, timeout:DURATION or now: what a node's running jobs get before its update")
	start.Flags().StringVar(&onHalt, "on-halt", string(rollout.HaltPause), "pause or rollback: what a failed gate does")
	start.Flags().BoolVar(&force, "force", false, "start even when the compatibility rules say the stack cannot work on targeted nodes")
	start.Flags().DurationVar(&bake, "bake", rollout.DefaultBake, "how long an updated node stays healthy before it returns to service")
	start.Flags().DurationVar(&updateTimeout, "update-timeout", rollout.DefaultUpdateTimeout, "how long a node may take to come back on the stack")
	start.Flags().StringVar(&updateCommand, "update-command", "", "the command each agent runs to update its node (sh -c; the target versions in GPUFLEET_STACK_<COMPONENT>); simulated GPUs need none")
	var watch bool
	status := &cobra.Command{
		Use:   "status [ID] [--watch]",
		Short: "Show a rollout (the newest without an id): waves, nodes, gates and reasons",
		Long: `Show a rollout (the newest without an id): waves, nodes, gates and reasons.

Exits 0 while the rollout runs, is paused or is done, and 1 (after showing
it) when it halted, was aborted or rolled back: the stack is not in place.
With --watch it waits until the rollout stops moving first.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			for {
				var r rollout.Rollout
				if len(args) == 1 {
					r, err = cl.Rollout(cmd.Context(), args[0])
				} else {
					var all []rollout.Rollout
					all, err = cl.Rollouts(cmd.Context())
					if err == nil && len(all) == 0 {
						return fmt.Errorf("%w: no rollout yet", gpufleet.ErrNotFound)
					}
					if err == nil {
						r = all[0]
					}
				}
				if err != nil {
					return err
				}
				if err := c.showRollout(r); err != nil {
					return err
				}
				if !watch || (r.State != rollout.Running && r.State != rollout.RollingBack && r.State != rollout.Paused) {
					return rolloutOutcome(r)
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(2 * time.Second):
				}
			}
		},
	}
	status.Flags().BoolVar(&watch, "watch", false, "show it again every 2 s until it stops moving")
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List rollouts, newest first",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			all, err := cl.Rollouts(cmd.Context())
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, all)
			}
			t := newTable(c.stdout, "ID", "STACK", "STATE", "NODES", "COMPLETE", "FAILED", "REASON")
			for _, r := range all {
				done, failed := 0, 0
				for _, n := range r.Nodes {
					switch n.Phase {
					case rollout.Complete:
						done++
					case rollout.Failed:
						failed++
					}
				}
				t.row(r.ID, r.Stack, string(r.State), strconv.Itoa(len(r.Nodes)), strconv.Itoa(done), strconv.Itoa(failed), orDash(r.Reason))
			}
			return t.flush()
		},
	}
	cmd.AddCommand(start, status, list)
	for _, a := range []struct{ name, short string }{
		{"pause", "Pause a rollout (admin): no new node starts; those in flight finish"},
		{"resume", "Resume a paused rollout (admin)"},
		{"abort", "Abort a rollout (admin): nodes in flight stay as they are"},
		{"rollback", "Return a rollout's updated nodes to their previous versions, through the same gates (admin)"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   a.name + " ID",
			Short: a.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, err := c.client(cmd)
				if err != nil {
					return err
				}
				r, err := cl.RolloutAction(cmd.Context(), args[0], a.name)
				if err != nil {
					return err
				}
				return c.showRollout(r)
			},
		})
	}
	cmd.RunE = list.RunE
	return cmd
}

// parseWaves reads cumulative shares: "10%,50%,100%" or "0.1,0.5,1".
func parseWaves(s string) ([]float64, error) {
	var out []float64
	for _, f := range splitComma(s) {
		pct := strings.HasSuffix(f, "%")
		v, err := strconv.ParseFloat(strings.TrimSuffix(f, "%"), 64)
		if err != nil {
			return nil, usageErr("--waves %q: expected shares such as 10%%,50%%,100%%", s)
		}
		if pct {
			v /= 100
		}
		out = append(out, v)
	}
	return out, nil
}

// showRollout prints a rollout and its nodes, or its JSON.
func (c *clientEnv) showRollout(r rollout.Rollout) error {
	if c.output == outputJSON {
		return writeJSON(c.stdout, r)
	}
	fmt.Fprintf(c.stdout, "rollout %s: stack %s, %s", r.ID, r.Stack, r.State)
	if r.Reason != "" {
		fmt.Fprintf(c.stdout, ": %s", r.Reason)
	}
	wave := fmt.Sprintf("wave %d of %d", r.Wave, len(r.Waves))
	switch {
	case r.Wave == 0:
		wave = "the canary"
	case r.Wave > len(r.Waves) && r.State == rollout.RolledBack:
		wave = "every updated node rolled back"
	case r.Wave > len(r.Waves):
		wave = "every wave through"
	}
	maxU := strconv.Itoa(r.MaxUnavailable)
	if r.MaxUnavailablePercent > 0 {
		maxU = fmt.Sprintf("%d (%g%%)", r.MaxUnavailable, r.MaxUnavailablePercent)
	}
	fmt.Fprintf(c.stdout, "\n  %s, canary %d, max unavailable %s, bake %s", wave, r.Canary, maxU, time.Duration(r.BakeS*float64(time.Second)))
	if r.DrainPolicy.Mode != "" {
		fmt.Fprintf(c.stdout, ", drain %s, on halt %s", r.DrainPolicy, orDash(string(r.OnHalt)))
	}
	fmt.Fprintln(c.stdout)
	if r.Halt != "" && r.State != rollout.Halted {
		fmt.Fprintf(c.stdout, "  halted: %s\n", r.Halt)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(c.stdout, "  warning: %s\n", w)
	}
	t := newTable(c.stdout, "NODE", "WAVE", "PHASE", "SINCE", "REASON")
	for _, n := range r.Nodes {
		since := "-"
		if !n.Since.IsZero() {
			since = n.Since.Format("15:04:05")
		}
		why := n.Reason
		if why == "" && n.Waiting != "" {
			why = "waiting: " + n.Waiting
		}
		t.row(n.Name, strconv.Itoa(n.Wave), string(n.Phase), since, orDash(why))
	}
	return t.flush()
}

// rolloutOutcome is status's verdict on a rollout it showed: an error
// (exit 1) when it stopped without its stack in place.
func rolloutOutcome(r rollout.Rollout) error {
	switch r.State {
	case rollout.Halted, rollout.Aborted, rollout.RolledBack:
		why := ""
		if r.Reason != "" {
			why = ": " + r.Reason
		}
		return &exitError{code: ExitError, err: fmt.Errorf("rollout %s %s%s", r.ID, r.State, why)}
	}
	return nil
}

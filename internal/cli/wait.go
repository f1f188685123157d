package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// waitFields are the fields `gpufleet wait` can wait on, per kind, with
// the values each takes.
var waitFields = map[string]map[string][]string{
	"job": {"state": {string(gpufleet.JobQueued), string(gpufleet.JobScheduled), string(gpufleet.JobRunning),
		string(gpufleet.JobSucceeded), string(gpufleet.JobFailed), string(gpufleet.JobCancelled)}},
	"node": {
		"state": {string(gpufleet.NodeReady), string(gpufleet.NodeCordoned), string(gpufleet.NodeDraining), string(gpufleet.NodeDown),
			string(gpufleet.NodeRepairing), string(gpufleet.NodeValidating)},
		"health": {string(gpufleet.Healthy), string(gpufleet.Degraded), string(gpufleet.Unhealthy)},
	},
}

// waitCond is what `gpufleet wait` waits for: a field of one object
// taking one of the values listed.
type waitCond struct {
	kind, name, field string
	values            []string
}

// parseWait reads "job/ID" or "node/NAME" and "--for FIELD=V1,V2".
func parseWait(object, cond string) (waitCond, error) {
	kind, name, ok := strings.Cut(object, "/")
	fields, known := waitFields[kind]
	if !ok || !known || name == "" {
		return waitCond{}, usageErr("%s: expected job/ID or node/NAME", gpufleet.Quote(object))
	}
	field, vals, ok := strings.Cut(cond, "=")
	allowed, known := fields[field]
	if !ok || !known {
		var names []string
		for f := range fields {
			names = append(names, f)
		}
		slices.Sort(names)
		return waitCond{}, usageErr("--for %s: expected FIELD=VALUE with FIELD one of %s for a %s", gpufleet.Quote(cond), strings.Join(names, ", "), kind)
	}
	w := waitCond{kind: kind, name: name, field: field}
	for _, v := range strings.Split(vals, ",") {
		v = strings.TrimSpace(v)
		if !slices.Contains(allowed, v) {
			return waitCond{}, usageErr("--for %s: %s: a %s's %s is one of %s", gpufleet.Quote(cond), gpufleet.Quote(v), kind, field, strings.Join(allowed, ", "))
		}
		w.values = append(w.values, v)
	}
	return w, nil
}

// now reads the field and what a person reads beside it (the reason).
func (w waitCond) now(ctx context.Context, cl *api.Client) (value, why string, err error) {
	switch w.kind {
	case "job":
		j, err := cl.Job(ctx, w.name)
		if err != nil {
			return "", "", err
		}
		if n := len(j.Attempts); n > 0 {
			a := j.Attempts[n-1]
			why = "attempt " + a.ID + " " + string(a.State)
			if a.Node != "" {
				why += " on " + a.Node
			}
		}
		return string(j.State), why, nil
	default:
		n, err := cl.Node(ctx, w.name)
		if err != nil {
			return "", "", err
		}
		if w.field == "health" {
			return string(n.Health), n.HealthReason, nil
		}
		return string(n.State), n.StateReason, nil
	}
}

// newWaitCmd is `gpufleet wait`: kubectl wait's idiom for scripts that
// must not race the control plane (a walkthrough, a CI job).
func newWaitCmd(c *clientEnv) *cobra.Command {
	var (
		cond    string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait (job/ID | node/NAME) --for FIELD=VALUE[,VALUE...] [--timeout 5m]",
		Short: "Wait until a job or node field takes a value: exit 0 then, 1 on the timeout",
		Long: `Wait until a field of a job or node takes one of the values given, as kubectl
wait does, so that a script moves on only once the control plane is there:

  gpufleet wait job/$J --for state=running
  gpufleet wait job/$J --for state=succeeded,failed,cancelled --timeout 1h
  gpufleet wait node/dev-h100-0 --for state=repairing
  gpufleet wait node/dev-h100-0 --for health=unhealthy

Fields: a job's state; a node's state and health. It prints the object and
the value when it is reached and exits 0; after --timeout it says where the
object is instead and exits 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := parseWait(args[0], cond)
			if err != nil {
				return err
			}
			if timeout <= 0 {
				return usageErr("--timeout %s: expected a positive duration", timeout)
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			var value, why string
			for {
				if value, why, err = w.now(ctx, cl); err != nil && ctx.Err() == nil {
					return err
				}
				if err == nil && slices.Contains(w.values, value) {
					fmt.Fprintf(c.stdout, "%s/%s %s=%s\n", w.kind, w.name, w.field, value)
					return nil
				}
				select {
				case <-ctx.Done():
					if cmd.Context().Err() != nil {
						return cmd.Context().Err()
					}
					where := value
					if why != "" {
						where += " (" + why + ")"
					}
					return fmt.Errorf("%s/%s: %s is still %s after %s, not %s", w.kind, w.name, w.field, where, timeout, strings.Join(w.values, " or "))
				case <-time.After(250 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().StringVar(&cond, "for", "", "FIELD=VALUE[,VALUE...]: a job's state, a node's state or health (required)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait before exiting 1")
	_ = cmd.MarkFlagRequired("for")
	return cmd
}

package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// completeFromServer completes the first argument with names the server
// lists (job ids, node names); it stays quiet when the server is not
// reachable.
func (c *clientEnv) completeFromServer(list func(context.Context, *api.Client) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		cl, err := c.client(cmd)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
		defer cancel()
		names, err := list(ctx, cl)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

func listJobIDs(ctx context.Context, cl *api.Client) ([]string, error) {
	jobs, err := cl.AllJobs(ctx, api.JobQuery{})
	ids := make([]string, 0, len(jobs))
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids, err
}

func listNodeNames(ctx context.Context, cl *api.Client) ([]string, error) {
	nodes, err := cl.Nodes(ctx)
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	return names, err
}

// valueCompletions are the fixed vocabularies flags take, completed in
// every command that has the flag (gpu-model from the catalog; comma
// lists complete their last element).
func valueCompletions(e *env) map[string]func() []string {
	words := func(ws ...string) func() []string { return func() []string { return ws } }
	prios := func() []string {
		var out []string
		for _, p := range gpufleet.Priorities() {
			out = append(out, string(p))
		}
		return out
	}
	precisions := func() []string {
		var out []string
		for _, p := range gpufleet.Precisions() {
			out = append(out, string(p))
		}
		return out
	}
	models := func() []string {
		cat, err := e.loadCatalog()
		if err != nil {
			return nil
		}
		var out []string
		for _, g := range cat.All() {
			out = append(out, g.ID)
		}
		return out
	}
	return map[string]func() []string{
		"gpu-model": models, "priority": prios, "precision": precisions,
		"isolation": words("hard", "soft", "any"), "prefer": words("cheapest", "fastest", "efficient"),
		"sharing": words("exclusive", "mig:", "timeslice:"), "interconnect": words("nvlink", "any"),
		"sim-load": words("compute", "memory", "idle"),
	}
}

// registerValueCompletions adds valueCompletions to every command of the
// tree that has one of those flags and no completion of its own.
func registerValueCompletions(root *cobra.Command, e *env) {
	vals := valueCompletions(e)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for name, list := range vals {
			if c.Flags().Lookup(name) == nil {
				continue
			}
			if _, ok := c.GetFlagCompletionFunc(name); ok {
				continue
			}
			_ = c.RegisterFlagCompletionFunc(name, func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				prefix := ""
				if i := strings.LastIndex(toComplete, ","); i >= 0 {
					prefix = toComplete[:i+1]
				}
				d := cobra.ShellCompDirectiveNoFileComp
				var out []string
				for _, w := range list() {
					out = append(out, prefix+w)
					if strings.HasSuffix(w, ":") {
						d |= cobra.ShellCompDirectiveNoSpace // mig:PROFILE, timeslice:F go on
					}
				}
				return out, d
			})
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

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

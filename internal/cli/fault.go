package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet/internal/api"
)

// newFaultCmd is `gpufleet fault inject|clear`: fault injection into
// simulated nodes, relayed by the server to the agent.
func newFaultCmd(e *env) *cobra.Command {
	c := &clientEnv{env: e, now: time.Now}
	cmd := &cobra.Command{
		Use:   "fault",
		Short: "Inject or clear GPU faults on simulated nodes (admin)",
		Long: `Inject a hardware fault into one GPU of a simulated node (gpufleet agent
--backend sim), or clear its faults. The server relays the order to the
node's agent with its next heartbeat; the agent's health report and metrics
then show the fault's evidence. Nodes with real GPUs (NVML) refuse.`,
	}
	var node string
	var gpu, xid int
	var kind string
	inject := &cobra.Command{
		Use:   "inject --node NODE --gpu INDEX (--xid N | --kind KIND)",
		Short: "Inject a fault into one GPU",
		Example: `  gpufleet fault inject --node dev-h100-0 --gpu 3 --xid 79
  gpufleet fault inject --node dev-a100-0 --gpu 0 --kind ecc-dbe`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (xid != 0) == (kind != "") {
				return usageErr("give either --xid N or --kind %s", strings.Join(api.FaultKinds, "|"))
			}
			return c.sendFault(cmd, node, gpu, func(cl *api.Client) (api.FaultOrder, error) {
				g := gpu
				return cl.InjectFault(cmd.Context(), node, api.FaultRequest{GPU: &g, XID: xid, Kind: kind})
			})
		},
	}
	inject.Flags().IntVar(&xid, "xid", 0, "raise this XID (79: fell off the bus, 48: double-bit ECC, 13: graphics engine exception, ...)")
	inject.Flags().StringVar(&kind, "kind", "", "fault kind: "+strings.Join(api.FaultKinds, ", "))
	clearCmd := &cobra.Command{
		Use:   "clear --node NODE --gpu INDEX",
		Short: "Clear every fault of one GPU (as a GPU reset would)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.sendFault(cmd, node, gpu, func(cl *api.Client) (api.FaultOrder, error) {
				return cl.ClearFaults(cmd.Context(), node, gpu)
			})
		},
	}
	for _, sub := range []*cobra.Command{inject, clearCmd} {
		sub.Flags().StringVar(&node, "node", "", "node name")
		sub.Flags().IntVar(&gpu, "gpu", -1, "GPU index")
		cmd.AddCommand(sub)
	}
	return cmd
}

func (c *clientEnv) sendFault(cmd *cobra.Command, node string, gpu int, send func(*api.Client) (api.FaultOrder, error)) error {
	if node == "" {
		return usageErr("--node: required")
	}
	if gpu < 0 {
		return usageErr("--gpu: required (a GPU index)")
	}
	if f := cmd.Flags().Lookup("context"); f != nil {
		c.context = f.Value.String()
	}
	cl, err := c.client(cmd)
	if err != nil {
		return err
	}
	o, err := send(cl)
	if err != nil {
		return err
	}
	if c.output == outputJSON {
		return writeJSON(c.stdout, o)
	}
	what := o.Kind
	switch {
	case o.Clear:
		what = "clear"
	case o.XID != 0:
		what = fmt.Sprintf("xid %d", o.XID)
	}
	_, err = fmt.Fprintf(c.stdout, "fault %s: %s on %s gpu %d, relayed with the next heartbeat\n", o.ID, what, o.Node, o.GPU)
	return err
}

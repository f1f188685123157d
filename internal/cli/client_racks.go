package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// newRacksCmd is `gpufleet racks`: power domains with a budget that
// placements keep under (docs/POWER.md).
func newRacksCmd(c *clientEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "racks",
		Short: "Create, change and list racks: power budgets that placements keep under",
		Args:  cobra.NoArgs,
	}
	var budget, reserve, cooling, nodes string
	var pue float64
	var force bool
	set := &cobra.Command{
		Use:     "create NAME --power-budget 17.3kW [--production-reserve 2kW] [--cooling 20kW] [--pue 1.3] [--nodes N1,N2] [--force]",
		Aliases: []string{"set"},
		Short:   "Create or change a rack (admin); its nodes are those it lists (--nodes)",
		Long: `Create or change a rack (admin). A rack holds the nodes it lists, and only
those: --nodes replaces the list (set keeps what it is not given). A rack
created lists, besides --nodes, the nodes labelled rack=NAME that no rack
lists; a node's rack label counts at its first registration too, never
after (docs/POWER.md#racks).

A change that takes nodes from another rack's list, or that leaves the
rack's projected draw (what its nodes draw now) over its budget, is refused
with the nodes, the draw and the budget named; --force makes it, and an
event records what was forced.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			r := gpufleet.Rack{Name: args[0]}
			if cmd.Name() == "set" || cmd.CalledAs() == "set" {
				// set changes only what it is given.
				all, err := cl.Racks(cmd.Context())
				if err != nil {
					return err
				}
				for _, x := range all {
					if x.Name == r.Name {
						r = x
					}
				}
			}
			for _, f := range []struct {
				flag string
				dst  *gpufleet.Watts
				v    string
			}{{"power-budget", &r.PowerBudgetWatts, budget}, {"production-reserve", &r.ProductionReserveWatts, reserve}} {
				if cmd.Flags().Changed(f.flag) {
					w, err := gpufleet.ParsePower(f.v)
					if err != nil {
						return gpufleet.InField("--"+f.flag, err)
					}
					*f.dst = w
				}
			}
			if cmd.Flags().Changed("cooling") {
				w, err := gpufleet.ParsePower(cooling)
				if err != nil {
					return gpufleet.InField("--cooling", err)
				}
				r.CoolingWatts = &w
			}
			if cmd.Flags().Changed("pue") {
				r.PUE = &pue
			}
			if cmd.Flags().Changed("nodes") {
				r.Nodes = splitComma(nodes)
			}
			if r.PowerBudgetWatts <= 0 && !cmd.Flags().Changed("power-budget") {
				return usageErr("--power-budget: required, such as 17.3kW")
			}
			r.Members, r.RatedWatts, r.DrawWatts = nil, 0, nil
			out, err := cl.PutRack(cmd.Context(), api.PutRackRequest{Rack: r, Force: force})
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, out)
			}
			return c.printRacks([]gpufleet.Rack{out})
		},
	}
	set.Flags().StringVar(&budget, "power-budget", "", "the most the rack may draw, such as 17.3kW")
	set.Flags().StringVar(&reserve, "production-reserve", "", "the part of the budget only production work may use, such as 2kW")
	set.Flags().StringVar(&cooling, "cooling", "", "the heat the rack's cooling removes, such as 20kW")
	set.Flags().Float64Var(&pue, "pue", 0, "the facility's power usage effectiveness for this rack's energy (1 to 3)")
	set.Flags().StringVar(&nodes, "nodes", "", "the nodes of the rack, comma-separated: the whole list")
	set.Flags().BoolVar(&force, "force", false, "make a change that moves nodes from another rack or leaves the rack's projected draw over its budget")
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List racks: budget, projected draw, rated draw and nodes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			racks, err := c.racks(cmd)
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, racks)
			}
			return c.printRacks(racks)
		},
	}
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show one rack",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			racks, err := c.racks(cmd)
			if err != nil {
				return err
			}
			for _, r := range racks {
				if r.Name == args[0] {
					if c.output == outputJSON {
						return writeJSON(c.stdout, r)
					}
					return c.printRack(r)
				}
			}
			return fmt.Errorf("%w: rack %s", gpufleet.ErrNotFound, gpufleet.Quote(args[0]))
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a rack (admin): its nodes have no budget any more",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			return cl.DeleteRack(cmd.Context(), args[0])
		},
	}
	cmd.AddCommand(set, list, show, del)
	cmd.RunE = list.RunE
	return cmd
}

func watts(v *gpufleet.Watts) string {
	if v == nil {
		return "-"
	}
	return v.Human()
}

func (c *clientEnv) printRacks(racks []gpufleet.Rack) error {
	t := newTable(c.stdout, "NAME", "BUDGET", "DRAW", "USED", "RESERVE", "RATED", "PUE", "NODES")
	for _, r := range racks {
		used := "-"
		if r.DrawWatts != nil && r.PowerBudgetWatts > 0 {
			used = fmt.Sprintf("%.0f%%", float64(*r.DrawWatts/r.PowerBudgetWatts)*100)
		}
		pue := "-"
		if r.PUE != nil {
			pue = fmt.Sprintf("%.2f", *r.PUE)
		}
		t.row(r.Name, watts(&r.PowerBudgetWatts), watts(r.DrawWatts), used, watts(&r.ProductionReserveWatts), watts(&r.RatedWatts), pue,
			orDash(strings.Join(r.Members, ",")))
	}
	return t.flush()
}

func (c *clientEnv) printRack(r gpufleet.Rack) error {
	kv := newTable(c.stdout, "FIELD", "VALUE")
	kv.row("name", r.Name)
	kv.row("budget", watts(&r.PowerBudgetWatts))
	kv.row("production reserve", watts(&r.ProductionReserveWatts))
	kv.row("projected draw", watts(r.DrawWatts))
	kv.row("rated draw", watts(&r.RatedWatts)+" (GPUs at TDP and host overheads)")
	kv.row("cooling", watts(r.CoolingWatts))
	pue := "server default"
	if r.PUE != nil {
		pue = fmt.Sprintf("%.2f", *r.PUE)
	}
	kv.row("pue", pue)
	kv.row("nodes listed", orDash(strings.Join(r.Nodes, ",")))
	kv.row("members", orDash(strings.Join(r.Members, ",")))
	return kv.flush()
}

// racks fetches every rack.
func (c *clientEnv) racks(cmd *cobra.Command) ([]gpufleet.Rack, error) {
	cl, err := c.client(cmd)
	if err != nil {
		return nil, err
	}
	return cl.Racks(cmd.Context())
}

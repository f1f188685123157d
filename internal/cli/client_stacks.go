package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// newStacksCmd is `gpufleet stacks`: named sets of driver, firmware and
// software versions, validated per GPU model by evidence
// (docs/STACKS.md).
func newStacksCmd(c *clientEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stacks",
		Short: "Named driver, firmware and CUDA stacks: create, validate by evidence, retire, and check every node against the rules",
		Args:  cobra.NoArgs,
	}
	var versions []string
	var notes string
	var force bool
	create := &cobra.Command{
		Use:   "create NAME --version driver=550.54.15 --version cuda=12.4 [--version torch=2.5.1+cu124] [--notes TEXT] [--force]",
		Short: "Record a stack (admin): a candidate until nodes of a GPU model run it and it validates",
		Long: `Record a stack (admin): a candidate until nodes of a GPU model run it and it validates.

The compatibility rules judge it first on every GPU model of the fleet. A
stack that works on none of them is refused (exit 4) unless --force; the
models it cannot work on are printed as warnings on stderr.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			v, err := parseKV(versions)
			if err != nil {
				return fmt.Errorf("--version: %w", err)
			}
			st := gpufleet.Stack{Name: args[0], Versions: v, Notes: notes}
			if err := st.Validate(); err != nil {
				return err
			}
			out, err := cl.CreateStack(cmd.Context(), api.CreateStackRequest{Stack: st, Force: force})
			if err != nil {
				return err
			}
			for _, w := range out.Incompatible {
				fmt.Fprintf(c.stderr, "warning: stack %s: %s\n", out.Name, w)
			}
			return c.showStack(out)
		},
	}
	create.Flags().BoolVar(&force, "force", false, "record it even when the compatibility rules say it works on none of the fleet's GPU models")
	create.Flags().StringArrayVar(&versions, "version", nil, "COMPONENT=VERSION: driver, cuda, cuda_toolkit, cudnn, nccl, torch, vbios, inforom, gsp, fabric_manager, kernel (repeatable)")
	create.Flags().StringVar(&notes, "notes", "", "what the stack is for")
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the stacks: state, versions, the GPU models validated and the nodes running each",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			stacks, err := cl.Stacks(cmd.Context())
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, stacks)
			}
			t := newTable(c.stdout, "NAME", "STATE", "VERSIONS", "VALIDATED FOR", "NODES")
			for _, st := range stacks {
				var models []string
				for _, v := range st.Validated {
					models = append(models, v.GPUModel)
				}
				t.row(st.Name, st.State, versionsText(st.Versions), orDash(strings.Join(models, ",")), fmt.Sprint(len(st.Nodes)))
			}
			return t.flush()
		},
	}
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show one stack with its evidence",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			stacks, err := cl.Stacks(cmd.Context())
			if err != nil {
				return err
			}
			for _, st := range stacks {
				if st.Name == args[0] {
					return c.showStack(st)
				}
			}
			return fmt.Errorf("%w: stack %s", gpufleet.ErrNotFound, gpufleet.Quote(args[0]))
		},
	}
	var gpuModel string
	var bake time.Duration
	validate := &cobra.Command{
		Use:   "validate NAME --gpu-model M [--bake 30m]",
		Short: "Validate a stack for a GPU model (admin): every node of the model on the stack ready, healthy through the bake time and clean by the rules",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if gpuModel == "" {
				return usageErr("--gpu-model: required")
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			out, err := cl.ValidateStack(cmd.Context(), args[0], gpuModel, bake)
			if err != nil {
				return err
			}
			return c.showStack(out)
		},
	}
	validate.Flags().StringVar(&gpuModel, "gpu-model", "", "the GPU model (catalog id) whose nodes give the evidence")
	validate.Flags().DurationVar(&bake, "bake", api.DefaultStackBake, "how long each node must have run the stack and stayed healthy")
	retire := &cobra.Command{
		Use:   "retire NAME",
		Short: "Retire a stack (admin): it stays on record, and jobs that require it match no node",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			return cl.RetireStack(cmd.Context(), args[0])
		},
	}
	check := &cobra.Command{
		Use:   "check",
		Short: "Judge every node's driver, CUDA, firmware and software by the compatibility rules, with their sources",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			nodes, err := cl.StackCheck(cmd.Context())
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, nodes)
			}
			return c.printStackCheck(nodes)
		},
	}
	cmd.AddCommand(create, list, show, validate, retire, check)
	cmd.RunE = list.RunE
	return cmd
}

// showStack prints one stack, or its JSON.
func (c *clientEnv) showStack(st gpufleet.Stack) error {
	if c.output == outputJSON {
		return writeJSON(c.stdout, st)
	}
	fmt.Fprintf(c.stdout, "stack %s (%s), created by %s %s\n", st.Name, st.State, st.CreatedBy, st.CreatedAt.Format("2006-01-02 15:04"))
	fmt.Fprintf(c.stdout, "  versions: %s\n", versionsText(st.Versions))
	if st.Notes != "" {
		fmt.Fprintf(c.stdout, "  notes: %s\n", st.Notes)
	}
	for _, v := range st.Validated {
		fmt.Fprintf(c.stdout, "  validated for %s on %s by %s, %s: %s\n", v.GPUModel, strings.Join(v.Nodes, ", "), v.ApprovedBy, v.At.Format("2006-01-02 15:04"), v.Evidence)
	}
	fmt.Fprintf(c.stdout, "  nodes running it: %s\n", orDash(strings.Join(st.Nodes, ", ")))
	for _, x := range st.Incompatible {
		fmt.Fprintf(c.stdout, "  cannot work: %s\n", x)
	}
	return nil
}

// printStackCheck prints each node's versions and the rules' findings.
func (c *clientEnv) printStackCheck(nodes []api.NodeStack) error {
	t := newTable(c.stdout, "NODE", "GPU MODELS", "DRIVER", "CUDA", "STACKS", "FINDINGS")
	var notes []string
	for _, n := range nodes {
		summary := "ok"
		if len(n.Findings) > 0 {
			counts := map[string]int{}
			for _, f := range n.Findings {
				counts[string(f.Severity)]++
				notes = append(notes, fmt.Sprintf("%s: %s %s: %s (%s)", n.Node, f.Severity, f.Component, f.Message, orDash(f.Source)))
			}
			var parts []string
			for _, s := range []string{"incompatible", "risk"} {
				if counts[s] > 0 {
					parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
				}
			}
			summary = strings.Join(parts, ", ")
		}
		t.row(n.Node, strings.Join(n.GPUModels, ","), orDash(n.Versions[gpufleet.StackDriver]), orDash(n.Versions[gpufleet.StackCUDA]),
			orDash(strings.Join(n.Stacks, ",")), summary)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(c.stdout, "  - "+n)
	}
	return nil
}

// versionsText writes versions in the components' order: driver=550.54.15 cuda=12.4.
func versionsText(v map[string]string) string {
	var parts []string
	for _, comp := range gpufleet.StackComponents {
		if x, ok := v[string(comp)]; ok {
			parts = append(parts, string(comp)+"="+x)
		}
	}
	return strings.Join(parts, " ")
}

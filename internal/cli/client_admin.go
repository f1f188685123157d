package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

func newNodesCmd(c *clientEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nodes [NAME]",
		Short: "List nodes with state, health and GPUs (or show one)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			var nodes []gpufleet.Node
			if len(args) == 1 {
				n, err := cl.Node(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if c.output == outputJSON {
					return writeJSON(c.stdout, n)
				}
				return c.printNode(n)
			}
			if nodes, err = cl.Nodes(cmd.Context()); err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, nodes)
			}
			return c.printNodes(nodes)
		},
	}
	cmd.AddCommand(newNodeReplaceCmd(c))
	return cmd
}

// newNodeReplaceCmd is `nodes replace NAME`.
func newNodeReplaceCmd(c *clientEnv) *cobra.Command {
	return &cobra.Command{
		Use:   "replace NAME",
		Short: "Replace a node by another machine of the same name (admin)",
		Long: `Revoke the node's credential, so its agent can no longer act as the node,
and issue a join token bound to its name (valid for an hour) for the machine
that replaces it: gpufleet agent --name NAME --join-token TOKEN. A join token
bound to no name cannot take over a node that is alive; this is the admin's
way to. The event log records who did it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			jt, err := cl.ReplaceNode(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, jt)
			}
			_, err = fmt.Fprintf(c.stdout, "node %s: credential revoked; start its replacement with\n  gpufleet agent --name %s --join-token %s\n", args[0], args[0], jt.Token)
			return err
		},
	}
}

func (c *clientEnv) printNodes(nodes []gpufleet.Node) error {
	cols := []string{"NAME", "STATE", "HEALTH", "GPUS", "HEARTBEAT", "REASON"}
	if c.output == outputWide {
		cols = append(cols, "DRIVER", "ISOLATION", "LABELS")
	}
	t := newTable(c.stdout, cols...)
	for _, n := range nodes {
		row := []string{n.Name, string(n.State), string(n.Health), gpuSummary(n.GPUs), heartbeat(n.HeartbeatAgeS), reasons(n)}
		if c.output == outputWide {
			row = append(row, orDash(n.Versions["driver"]), gpufleet.IsolationSummary(n), kvList(n.Labels))
		}
		t.row(row...)
	}
	return t.flush()
}

func (c *clientEnv) printNode(n gpufleet.Node) error {
	kv := newTable(c.stdout, "FIELD", "VALUE")
	kv.row("name", n.Name)
	kv.row("state", string(n.State))
	kv.row("health", string(n.Health))
	kv.row("state reason", orDash(n.StateReason))
	kv.row("health reason", orDash(n.HealthReason))
	kv.row("heartbeat", heartbeat(n.HeartbeatAgeS))
	kv.row("metrics", orDash(n.MetricsURL))
	kv.row("labels", kvList(n.Labels))
	kv.row("versions", kvList(n.Versions))
	if err := kv.flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	t := newTable(c.stdout, "INDEX", "UUID", "MODEL", "MEMORY", "STATE", "HEALTH", "MIG", "MECHANISM", "ISOLATION", "REASON")
	virt := gpufleet.NodeVirtualization(n.Labels)
	for _, g := range n.GPUs {
		var mig []string
		for _, m := range g.MIGInstances {
			mig = append(mig, m.Profile)
		}
		reason := g.Reason
		if g.StateReason != "" && g.StateReason != g.Reason {
			reason = strings.Trim(g.StateReason+"; "+g.Reason, "; ")
		}
		m := gpufleet.GPUMechanism(virt, g)
		t.row(strconv.Itoa(g.Index), g.UUID, g.Model, gpufleet.Bytes(g.MemoryBytes).String(), string(g.State), string(g.Health),
			orDash(strings.Join(mig, ",")), m.Name, m.Short(), orDash(reason))
	}
	return t.flush()
}

// reasons joins a node's state and health reasons, each once.
func reasons(n gpufleet.Node) string {
	var parts []string
	for _, r := range []string{n.StateReason, n.HealthReason} {
		r = strings.TrimSuffix(r, ".")
		if r != "" && !slices.Contains(parts, r) {
			parts = append(parts, r)
		}
	}
	if len(parts) == 0 {
		return orDash(n.Reason)
	}
	return strings.Join(parts, "; ")
}

// gpuSummary prints a node's GPUs as counts per model: "8x h100-sxm-80gb".
func gpuSummary(gpus []gpufleet.NodeGPU) string {
	if len(gpus) == 0 {
		return "-"
	}
	counts := map[string]int{}
	var order []string
	for _, g := range gpus {
		if counts[g.Model] == 0 {
			order = append(order, g.Model)
		}
		counts[g.Model]++
	}
	parts := make([]string, len(order))
	for i, m := range order {
		parts[i] = fmt.Sprintf("%dx %s", counts[m], m)
	}
	return strings.Join(parts, ", ")
}

func heartbeat(age *float64) string {
	if age == nil {
		return "never"
	}
	return gpufleet.FormatDuration(time.Duration(*age*float64(time.Second))) + " ago"
}

func newNodeActionCmd(c *clientEnv, a api.NodeAction) *cobra.Command {
	short := map[api.NodeAction]string{
		api.Cordon:   "Stop placing new work on a node (admin)",
		api.Uncordon: "Return a node to ready (admin)",
		api.Drain:    "Cordon a node and stop its attempts; they requeue elsewhere (admin)",
		api.Repaired: "Mark a node (or its GPUs in repair) repaired; it returns to ready once the agent's validation passes (admin)",
	}[a]
	var (
		reason  string
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   string(a) + " NODE",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := gpufleet.CheckText("--reason", reason, api.MaxReasonLen, false); err != nil {
				return err
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			n, err := cl.NodeActionBecause(cmd.Context(), args[0], a, reason)
			if err != nil {
				return err
			}
			if wait {
				if n, err = waitValidated(cmd.Context(), cl, n, timeout, c.stderr); err != nil {
					if c.output == outputJSON {
						writeJSON(c.stdout, n)
					}
					return err
				}
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, n)
			}
			_, err = fmt.Fprintf(c.stdout, "node %s: %s\n", n.Name, n.State)
			return err
		},
	}
	if a != api.Repaired {
		cmd.Flags().StringVar(&reason, "reason", "", "why, for the node's state reason and the event log (\"rack r12 maintenance\")")
	} else {
		cmd.Flags().BoolVar(&wait, "wait", false, "wait for the validation: exit 0 once the node is ready, 1 if it fails (back in repairing)")
		durationFlag(cmd.Flags(), &timeout, "timeout", 10*time.Minute, "with --wait, how long to wait for the validation")
	}
	return cmd
}

// waitValidated polls a node marked repaired until its validation ends:
// ready is success; back in repairing (or draining) is a failure, with
// the node's reason; still validating at the timeout is a failure too.
func waitValidated(ctx context.Context, cl *api.Client, n gpufleet.Node, timeout time.Duration, progress io.Writer) (gpufleet.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fmt.Fprintf(progress, "node %s: %s, waiting for its validation\n", n.Name, n.State)
	for {
		state := n.State
		for _, g := range n.GPUs { // a repair of single GPUs validates them
			if g.State == gpufleet.NodeValidating || (state == gpufleet.NodeReady && g.State == gpufleet.NodeRepairing) {
				state = g.State
			}
		}
		switch state {
		case gpufleet.NodeReady:
			return n, nil
		case gpufleet.NodeRepairing, gpufleet.NodeDraining, gpufleet.NodeDown:
			why := orDash(reasons(n))
			if !strings.Contains(why, "validation failed") {
				why = "validation failed: " + why
			}
			return n, &exitError{code: 1, err: fmt.Errorf("node %s: %s (%s)", n.Name, why, state)}
		}
		select {
		case <-ctx.Done():
			return n, &exitError{code: 1, err: fmt.Errorf("node %s: still %s after %s", n.Name, n.State, timeout)}
		case <-time.After(time.Second):
		}
		var err error
		if n, err = cl.Node(ctx, n.Name); err != nil {
			if ctx.Err() != nil {
				continue
			}
			return n, err
		}
	}
}

func newTeamsCmd(c *clientEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "teams",
		Short: "Create and list teams: quotas per GPU class, borrowing and fair-share weight",
		Args:  cobra.NoArgs,
	}
	var (
		quota, mounts, noAuth []string
		borrow                int
		weight                float64
		noLimit, noMounts     bool
		authReg, authUser     string
		authStdin             bool
	)
	create := &cobra.Command{
		Use:     "create NAME [--quota CLASS=N ...] [--borrow-limit N] [--weight W]",
		Aliases: []string{"update", "set"},
		Short:   "Create or update a team (admin)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.TeamRequest{Name: args[0]}
			kv, err := parseKV(quota)
			if err != nil {
				return fmt.Errorf("%w: --quota %s", gpufleet.ErrInvalid, detail(err))
			}
			for k, v := range kv {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return usageErr("--quota %s=%s: expected CLASS=GPUS with a non-negative count", k, v)
				}
				if req.Quota == nil {
					req.Quota = map[string]int{}
				}
				req.Quota[k] = n
			}
			fs := cmd.Flags()
			switch {
			case fs.Changed("borrow-limit") && fs.Changed("no-borrow-limit"):
				return usageErr("--borrow-limit and --no-borrow-limit exclude each other")
			case fs.Changed("borrow-limit"):
				if borrow < 0 {
					return usageErr("--borrow-limit %d: expected a non-negative GPU count (or --no-borrow-limit)", borrow)
				}
				req.BorrowingLimit = &borrow
			case noLimit:
				none := -1
				req.BorrowingLimit = &none
			}
			if fs.Changed("weight") {
				if weight <= 0 {
					return usageErr("--weight %v: expected a positive number", weight)
				}
				req.Weight = &weight
			}
			if fs.Changed("allow-mount") || noMounts {
				list := []gpufleet.MountAllow{}
				for _, v := range mounts {
					m, err := gpufleet.ParseMountAllow(v)
					if err != nil {
						return gpufleet.InField("--allow-mount", err)
					}
					list = append(list, m)
				}
				req.Mounts = &list
			}
			if authReg != "" {
				if authUser == "" || !authStdin {
					return usageErr("--registry-auth %s: needs --registry-username and --registry-password-stdin (the password is read from standard input, never a flag)", authReg)
				}
				pw, err := io.ReadAll(io.LimitReader(c.stdin, 8192))
				if err != nil {
					return fmt.Errorf("--registry-password-stdin: %w", err)
				}
				req.RegistryAuth = map[string]*gpufleet.RegistryCredential{authReg: {Username: authUser, Password: strings.TrimRight(string(pw), "\r\n")}}
			}
			for _, r := range noAuth {
				if req.RegistryAuth == nil {
					req.RegistryAuth = map[string]*gpufleet.RegistryCredential{}
				}
				req.RegistryAuth[r] = nil
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			t, err := cl.PutTeam(cmd.Context(), req)
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, t)
			}
			return c.printTeams([]gpufleet.Team{t})
		},
	}
	create.Flags().StringArrayVar(&quota, "quota", nil, "guaranteed GPUs of a class, CLASS=N (repeatable)")
	create.Flags().IntVar(&borrow, "borrow-limit", 0, "GPUs the team may borrow beyond its quota")
	create.Flags().BoolVar(&noLimit, "no-borrow-limit", false, "let the team borrow without limit")
	create.Flags().Float64Var(&weight, "weight", 1, "fair-share weight")
	create.Flags().StringArrayVar(&mounts, "allow-mount", nil, "a host path the team's container jobs may mount, PATH[:ro|rw] (repeatable; replaces the list; read-only unless :rw)")
	create.Flags().BoolVar(&noMounts, "no-mounts", false, "the team's container jobs may mount nothing")
	create.Flags().StringVar(&authReg, "registry-auth", "", "set the team's credentials for this registry (nvcr.io), with --registry-username and the password on standard input")
	create.Flags().StringVar(&authUser, "registry-username", "", "username for --registry-auth")
	create.Flags().BoolVar(&authStdin, "registry-password-stdin", false, "read --registry-auth's password from standard input")
	create.Flags().StringArrayVar(&noAuth, "remove-registry-auth", nil, "remove the team's credentials for this registry (repeatable)")
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List teams with quota and use (members see their own)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			teams, err := cl.Teams(cmd.Context())
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, teams)
			}
			return c.printTeams(teams)
		},
	}
	cmd.AddCommand(create, list)
	cmd.RunE = list.RunE // plain `teams` lists
	return cmd
}

func (c *clientEnv) printTeams(teams []gpufleet.Team) error {
	t := newTable(c.stdout, "NAME", "QUOTA", "USED", "BORROW LIMIT", "WEIGHT", "MOUNTS", "REGISTRIES")
	for _, tm := range teams {
		limit := strconv.Itoa(tm.BorrowingLimit)
		if tm.BorrowingLimit < 0 {
			limit = "none"
		}
		ms := make([]string, len(tm.Mounts))
		for i, m := range tm.Mounts {
			ms[i] = m.String()
		}
		t.row(tm.Name, kvList(tm.Quota), kvList(tm.Used), limit, strconv.FormatFloat(tm.Weight, 'g', -1, 64),
			orDash(strings.Join(ms, ",")), orDash(strings.Join(tm.Registries, ",")))
	}
	return t.flush()
}

func newClassesCmd(c *clientEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "classes",
		Short: "Create and list GPU classes: named groups of catalog ids",
		Args:  cobra.NoArgs,
	}
	var models string
	create := &cobra.Command{
		Use:     "create NAME --models ID,ID",
		Aliases: []string{"update", "set"},
		Short:   "Create or update a GPU class (admin)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := splitComma(models)
			if len(ids) == 0 {
				return usageErr("--models: required, catalog ids separated by commas")
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			cls, err := cl.PutClass(cmd.Context(), gpufleet.Class{Name: args[0], Models: ids})
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, cls)
			}
			return c.printClasses([]gpufleet.Class{cls})
		},
	}
	create.Flags().StringVar(&models, "models", "", "catalog ids in the class, comma-separated")
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List GPU classes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			classes, err := cl.Classes(cmd.Context())
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, classes)
			}
			return c.printClasses(classes)
		},
	}
	cmd.AddCommand(create, list)
	cmd.RunE = list.RunE // plain `classes` lists
	return cmd
}

func (c *clientEnv) printClasses(classes []gpufleet.Class) error {
	t := newTable(c.stdout, "NAME", "MODELS")
	for _, cl := range classes {
		t.row(cl.Name, strings.Join(cl.Models, ","))
	}
	return t.flush()
}

func newTokensCmd(c *clientEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Create, list and revoke API tokens (admin)",
		Args:  cobra.NoArgs,
	}
	var req api.TokenRequest
	var role string
	create := &cobra.Command{
		Use:   "create --team NAME --role member|admin|monitor",
		Short: "Create an API token; its secret is printed once",
		Long: "Create an API token; its secret is printed once. A member token acts for one team, an admin token\n" +
			"for the whole fleet, and a monitor token only reads /metrics and /api/v1/sd/agents (for Prometheus).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := gpufleet.ParseRole(role)
			if err != nil {
				return usageErr("--role %q: expected member, admin or monitor", role)
			}
			if r == gpufleet.RoleMember && req.Team == "" {
				return usageErr("--team: required for a member token")
			}
			req.Role = r
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			tok, err := cl.CreateToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, tok)
			}
			t := newTable(c.stdout, "ID", "TEAM", "ROLE", "TOKEN")
			t.row(tok.ID, orDash(tok.Team), string(tok.Role), tok.Token)
			fmt.Fprintln(c.stderr, "store the token now: it is not shown again")
			return t.flush()
		},
	}
	create.Flags().StringVar(&req.Team, "team", "", "the member's team")
	create.Flags().StringVar(&role, "role", string(gpufleet.RoleMember), "member (one team), admin (fleet-wide) or monitor (metrics and service discovery only)")
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List API tokens (never their secrets)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			toks, err := cl.Tokens(cmd.Context())
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, toks)
			}
			t := newTable(c.stdout, "ID", "TEAM", "ROLE", "CREATED", "REVOKED")
			for _, tok := range toks {
				t.row(tok.ID, orDash(tok.Team), string(tok.Role), c.ago(&tok.CreatedAt), c.ago(tok.RevokedAt))
			}
			return t.flush()
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API token",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			if err := cl.RevokeToken(cmd.Context(), args[0]); err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, map[string]any{"id": args[0], "revoked": true})
			}
			_, err = fmt.Fprintf(c.stdout, "token %s: revoked\n", args[0])
			return err
		},
	}
	cmd.AddCommand(create, list, revoke)
	cmd.RunE = list.RunE // plain `tokens` lists
	return cmd
}

func newJoinTokensCmd(c *clientEnv) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "join-tokens",
		Short: "Create join tokens that let agents register (admin)",
		Args:  cobra.NoArgs,
	}
	var req api.JoinTokenRequest
	create := &cobra.Command{
		Use:   "create [--node NAME] [--ttl D]",
		Short: "Create a join token; without --ttl it is single-use and does not expire",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			jt, err := cl.CreateJoinToken(cmd.Context(), req)
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, jt)
			}
			expires := "never"
			if jt.ExpiresAt != nil {
				expires = jt.ExpiresAt.UTC().Format(time.RFC3339)
			}
			t := newTable(c.stdout, "ID", "NODE", "EXPIRES", "SINGLE USE", "TOKEN")
			t.row(jt.ID, orDash(jt.Node), expires, strconv.FormatBool(jt.SingleUse), jt.Token)
			return t.flush()
		},
	}
	create.Flags().StringVar(&req.Node, "node", "", "only this node name may register with it")
	create.Flags().Var(textFlag{&req.TTL}, "ttl", "valid for this long and reusable until then (1h, 7d)")
	cmd.AddCommand(create)
	return cmd
}

func newUsageCmd(c *clientEnv) *cobra.Command {
	var team, from, to, by, period string
	var energy bool
	cmd := &cobra.Command{
		Use:   "usage [--team T] [--from TIME] [--to TIME] [--energy [--by team|job|gpu-model] [--period day|week|month]]",
		Short: "GPU-hours, effective GPU-hours, idle allocated GPU-hours and energy by team; --energy for facility energy and CO2e",
		Long: `Accounting by team and GPU model over a period. Idle allocated counts the
GPU-minutes a team held at under 5% effective utilization (SM activity where
the GPU reports it, else utilization), priced at the catalog's hourly price.
--from and --to take RFC 3339 times
(2025-01-31T00:00:00Z), dates (2025-01-31), or durations meaning that long ago
(7d, 24h). Without them the server picks its default period.

--energy reports energy instead: GPU energy as the GPUs measured it, facility
energy (GPU energy times the PUE) and CO2e at the server's grid intensity
(gpufleet server --pue, --grid-intensity, --grid-intensity-file), by team,
job or GPU model (--by), per day, week or month (--period) or over the whole
period. Energies are in kWh, the average draw in W per GPU; docs/POWER.md
gives the model and the defaults' sources.`,
		Example: `  gpufleet usage --team team-a --from 7d
  gpufleet usage --energy --by gpu-model --period week --from 30d
  gpufleet usage --energy --by job -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := api.UsageQuery{Team: team, By: by, Period: period}
			if !energy && (cmd.Flags().Changed("by") || cmd.Flags().Changed("period")) {
				return usageErr("--by and --period go with --energy")
			}
			var err error
			if q.From, q.To, err = c.parsePeriod(from, to); err != nil {
				return err
			}
			cl, err := c.client(cmd)
			if err != nil {
				return err
			}
			rep, err := cl.Usage(cmd.Context(), q)
			if err != nil {
				return err
			}
			if c.output == outputJSON {
				return writeJSON(c.stdout, rep)
			}
			fmt.Fprintf(c.stdout, "from %s to %s\n", rep.From.UTC().Format(time.RFC3339), rep.To.UTC().Format(time.RFC3339))
			if energy {
				return writeEnergy(c.stdout, rep)
			}
			t := newTable(c.stdout, "TEAM", "GPU MODEL", "GPU-HOURS", "EFFECTIVE", "EFFICIENCY", "IDLE ALLOCATED", "IDLE COST", "ENERGY")
			row := func(team, model string, gpuH, effH, idleH, idleUSD, joules float64) {
				eff := "-"
				if gpuH > 0 {
					eff = fmt.Sprintf("%.0f%%", 100*effH/gpuH)
				}
				t.row(team, model, fmt.Sprintf("%.1f", gpuH), fmt.Sprintf("%.1f", effH), eff,
					fmt.Sprintf("%.1f", idleH), fmt.Sprintf("$%.2f", idleUSD), energyText(joules))
			}
			for _, u := range rep.Teams {
				for _, m := range u.Models {
					row(u.Team, m.Model, m.GPUHours, m.EffectiveGPUHours, m.IdleAllocatedGPUHour, m.IdleAllocatedUSD, m.EnergyJoules)
				}
				if len(u.Models) != 1 {
					row(u.Team, "(all)", u.GPUHours, u.EffectiveGPUHours, u.IdleAllocatedGPUHour, u.IdleAllocatedUSD, u.EnergyJoules)
				}
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&team, "team", "", "only this team")
	cmd.Flags().StringVar(&from, "from", "", "start of the period")
	cmd.Flags().StringVar(&to, "to", "", "end of the period")
	cmd.Flags().BoolVar(&energy, "energy", false, "report GPU energy, facility energy and CO2e")
	cmd.Flags().StringVar(&by, "by", api.EnergyByTeam, "with --energy: group by team, job or gpu-model")
	cmd.Flags().StringVar(&period, "period", "", "with --energy: one row per day, week or month (default: the whole period)")
	return cmd
}

// writeEnergy prints a usage report's energy rows, with a total.
func writeEnergy(w io.Writer, rep api.UsageReport) error {
	intensity := fmt.Sprintf("%g g CO2e/kWh", rep.GridIntensity)
	if rep.GridIntensityHourly {
		intensity = "hourly file, else " + intensity
	}
	fmt.Fprintf(w, "PUE %.2f where a rack gives none, grid %s\n", rep.PUE, intensity)
	var head []string
	switch rep.By {
	case api.EnergyByJob:
		head = []string{"TEAM", "JOB"}
	case api.EnergyByModel:
		head = []string{"GPU MODEL"}
	default:
		head = []string{"TEAM"}
	}
	if rep.Period != "" && rep.Period != "all" {
		head = append(head, strings.ToUpper(rep.Period))
	}
	cols := append(head, "GPU-HOURS", "GPU ENERGY", "FACILITY ENERGY", "CO2E", "AVG DRAW")
	if rep.By == api.EnergyByJob {
		cols = append(cols, "WORK", "ENERGY/UNIT")
	}
	t := newTable(w, cols...)
	var total api.EnergyRow
	for _, r := range rep.Energy {
		var cells []string
		switch rep.By {
		case api.EnergyByJob:
			cells = []string{r.Team, r.Job}
		case api.EnergyByModel:
			cells = []string{r.Model}
		default:
			cells = []string{r.Team}
		}
		if len(head) > len(cells) {
			at := "-"
			if r.PeriodStart != nil {
				at = r.PeriodStart.UTC().Format(time.DateOnly)
			}
			cells = append(cells, at)
		}
		cells = append(cells, energyCells(r)...)
		if rep.By == api.EnergyByJob {
			cells = append(cells, workCells(r)...)
		}
		t.row(cells...)
		total.GPUHours += r.GPUHours
		total.GPUEnergyKWh += r.GPUEnergyKWh
		total.FacilityEnergyKWh += r.FacilityEnergyKWh
		total.CO2eKg += r.CO2eKg
	}
	if len(rep.Energy) > 1 {
		if total.GPUHours > 0 {
			total.AvgGPUWatts = total.GPUEnergyKWh * 1000 / total.GPUHours
		}
		cells := make([]string, len(head))
		cells[0] = "(total)"
		cells = append(cells, energyCells(total)...)
		if rep.By == api.EnergyByJob {
			cells = append(cells, "", "") // units differ between jobs
		}
		t.row(cells...)
	}
	return t.flush()
}

func energyCells(r api.EnergyRow) []string {
	// Three significant digits, so that a short job's hours and carbon
	// read 0.0167 and 0.00601 kg rather than 0.0 and 0.00.
	return []string{fixed3(r.GPUHours), energyText(r.GPUEnergyKWh * 3.6e6),
		energyText(r.FacilityEnergyKWh * 3.6e6), fixed3(r.CO2eKg) + " kg", fmt.Sprintf("%.0f W", r.AvgGPUWatts)}
}

// workCells are a job's work and GPU energy per unit of it, "-" when it
// reports none.
func workCells(r api.EnergyRow) []string {
	if r.Work == nil {
		return []string{"-", "-"}
	}
	per := "-"
	if r.JoulesPerUnit != nil {
		per = fmt.Sprintf("%s J/%s", sig3(*r.JoulesPerUnit), singular(r.WorkUnit))
	}
	return []string{fmt.Sprintf("%s %s", sig3(*r.Work), r.WorkUnit), per}
}

// singular names one unit: "tokens" -> "token".
func singular(unit string) string {
	if len(unit) > 1 && strings.HasSuffix(unit, "s") {
		return unit[:len(unit)-1]
	}
	return unit
}

// parsePeriod reads --from and --to with parseWhen.
func (c *clientEnv) parsePeriod(from, to string) (time.Time, time.Time, error) {
	f, err := c.parseWhen("--from", from)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	t, err := c.parseWhen("--to", to)
	return f, t, err
}

// parseWhen reads an RFC 3339 time, a date, or a duration ago.
func (c *clientEnv) parseWhen(flag, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		// The query carries it in UTC: an offset must not push it out of
		// the years RFC 3339 can write (0000-01-01T00:00:00+01:00).
		if t = t.UTC(); t.Year() < 0 || t.Year() > 9999 {
			return time.Time{}, usageErr("%s %q: in UTC it falls outside the years 0000 to 9999", flag, s)
		}
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, err := gpufleet.ParseDuration(s); err == nil {
		return c.now().Add(-d).UTC().Truncate(time.Second), nil
	}
	return time.Time{}, usageErr("%s %q: expected an RFC 3339 time, a date (2025-01-31) or a duration ago (7d)", flag, s)
}

// sig3 writes a count or rate with three significant digits, in
// thousands (k), millions (M), billions (G) or trillions (T) from 10,000:
// 3000, 0.00134, 12.5k, 450M.
func sig3(v float64) string {
	suffix := ""
	for _, s := range []struct {
		min, div float64
		suffix   string
	}{{1e12, 1e12, "T"}, {1e9, 1e9, "G"}, {1e6, 1e6, "M"}, {1e4, 1e3, "k"}} {
		if math.Abs(v) >= s.min {
			v, suffix = v/s.div, s.suffix
			break
		}
	}
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', -1, 64) + suffix
	}
	// Round to three significant digits, then print just the decimals
	// they need: the rounded float itself (0.00015999999999999999) is not
	// what a reader wants.
	out := fixed3(v)
	if strings.Contains(out, ".") {
		out = strings.TrimRight(strings.TrimRight(out, "0"), ".")
	}
	return out + suffix
}

// fixed3 writes v rounded to three significant digits with the decimals
// they need, trailing zeros kept: 0.000160, 5.56, 39.5, 1230.
func fixed3(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	exp := int(math.Floor(math.Log10(math.Abs(v))))
	p := math.Pow(10, float64(exp-2))
	v = math.Round(v/p) * p
	if e := int(math.Floor(math.Log10(math.Abs(v)))); e > exp { // 999.6 rounds up to 1000
		exp = e
	}
	return strconv.FormatFloat(v, 'f', max(0, 2-exp), 64)
}

// energyText writes an energy with three significant digits in Wh under
// 1 kWh, kWh under 1 MWh, else MWh: a short job's "5.56 Wh", not
// "0.000 kWh".
func energyText(joules float64) string {
	switch a := math.Abs(joules); {
	case a >= 3.6e9:
		return fixed3(joules/3.6e9) + " MWh"
	case a >= 3.6e6:
		return fixed3(joules/3.6e6) + " kWh"
	}
	return fixed3(joules/3600) + " Wh"
}

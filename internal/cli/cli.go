// Package cli is gpufleet's command line: the only place that reads flags,
// environment variables and files for the other packages. Each command's
// RunE is a few lines that call into the packages that do the work.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
)

// Output formats accepted by -o.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputWide  = "wide"
	outputYAML  = "yaml"
)

// env carries the process's streams and the options every command shares.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	output  string // table, json or wide once setOutput has read -o
	server  string
	token   string
	catalog string // --catalog FILE
	// started: the command line parsed and a command began (errors
	// before it are usage errors).
	started bool
}

// exitError carries an exit code other than 1 through cobra.
type exitError struct {
	code int
	err  error
	// silent: the code is the whole answer (an attempt's own exit status,
	// passed on by its init), nothing is printed.
	silent bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Main runs the gpufleet command line with args (without the program name)
// and returns the process exit code. Errors are printed to stderr.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRoot(e)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	if !e.started {
		// cobra refused the command line (an unknown command, a bad flag
		// or argument count) before any command ran.
		err = asUsage(err)
	}
	var ee *exitError
	if !errors.As(err, &ee) || !ee.silent {
		fmt.Fprintf(stderr, "gpufleet: %v\n", err)
	}
	code := exitCode(err)
	if code == ExitUsage && cmd != nil {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "gpufleet",
		Short: "GPU infrastructure control plane that treats GPUs as specialised hardware",
		Long: `gpufleet plans, schedules and watches GPU fleets with the hardware's real
characteristics in every decision: memory capacity and bandwidth, interconnect,
precision support, power and heat, and failure modes.

Commands that need no server: catalog, plan, version.

` + exitCodeHelp(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       gpufleet.Version,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if e.server == "" {
				e.server = os.Getenv("GPUFLEET_SERVER")
			}
			if e.token == "" {
				e.token = os.Getenv("GPUFLEET_TOKEN")
			}
			// Commands write JSON for yaml, name and jsonpath; a writer
			// rewrites it.
			if err := e.setOutput(cmd); err != nil {
				return asUsage(err)
			}
			e.started = true
			return nil
		},
		PersistentPostRunE: func(*cobra.Command, []string) error {
			if d, ok := e.stdout.(*docWriter); ok {
				return d.Close()
			}
			return nil
		},
	}
	root.SetVersionTemplate(strings.NewReplacer("{{", "", "}}", "").Replace(buildVersion().line()) + "\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return asUsage(err) })
	pf := root.PersistentFlags()
	pf.StringVarP(&e.output, "output", "o", outputTable, "output format: "+outputWant+" (kubectl's JSONPath templates: -o jsonpath='{[*].id}')")
	pf.StringVar(&e.server, "server", "", "server URL[,URL...] (env GPUFLEET_SERVER)")
	pf.StringVar(&e.token, "token", "", "API token (env GPUFLEET_TOKEN)")
	pf.StringVar(&e.catalog, "catalog", "", "CSV or JSON file that adds or overrides GPU catalog entries")
	_ = root.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{outputTable, outputJSON, outputYAML, outputWide, outputName, outputJSONPath + "="}, cobra.ShellCompDirectiveNoFileComp
	})

	root.AddCommand(
		newVersionCmd(e),
		newCatalogCmd(e),
		newPlanCmd(e),
		newSimCmd(e),
		newServerCmd(e),
		newAgentCmd(e),
		newFaultCmd(e),
		newBenchCmd(e),
		newForecastCmd(e),
		newProcureCmd(e),
		newLifecycleCmd(e),
		newAuditCmd(e),
		newConfigCmd(e),
		newDevCmd(e),
	)
	addClientCommands(root, e)
	refuseUnknownSubcommands(root)
	registerValueCompletions(root, e)
	return root
}

// refuseUnknownSubcommands makes every command that only groups others
// (gpufleet fault, gpufleet stacks, ...) exit non-zero on an argument that
// names none of them, as the root does, instead of printing its help and
// succeeding; with no argument it prints its help.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		refuseUnknownSubcommands(c)
	}
	if cmd.HasParent() && cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil {
		cmd.Args = cobra.ArbitraryArgs
		cmd.Annotations = map[string]string{groupAnnotation: "true"}
		cmd.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			return usageErr("unknown command %q for %q (its commands: %s)", args[0], c.CommandPath(), subcommandNames(c))
		}
	}
}

// groupAnnotation marks the commands refuseUnknownSubcommands made
// runnable.
const groupAnnotation = "gpufleet/group"

func subcommandNames(c *cobra.Command) string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return strings.Join(names, ", ")
}

// usageErr is a command line refused before any request (exit 2): the
// message names the flag or argument and what was expected.
func usageErr(format string, args ...any) error {
	return &usageError{fmt.Errorf("%w: %s", gpufleet.ErrInvalid, fmt.Sprintf(format, args...))}
}

// joinComma splits a comma-separated flag value, trimming blanks.
func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

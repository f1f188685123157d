package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// clientEnv is what the client commands share: the process's env plus the
// --context flag.
type clientEnv struct {
	*env
	context string // --context NAME
	now     func() time.Time
}

// addClientCommands adds the commands that talk to a server and the global
// --context flag.
func addClientCommands(root *cobra.Command, e *env) {
	c := &clientEnv{env: e, now: time.Now}
	root.PersistentFlags().StringVar(&c.context, "context", "",
		"named context of the client config file (env GPUFLEET_CONTEXT; file ~/.config/gpufleet/config.yaml or GPUFLEET_CONFIG)")
	jobID, nodeName := c.completeFromServer(listJobIDs), c.completeFromServer(listNodeNames)
	withCompletion := func(cmd *cobra.Command, f cobra.CompletionFunc) *cobra.Command {
		cmd.ValidArgsFunction = f
		return cmd
	}
	root.AddCommand(
		newSubmitCmd(c), newJobsCmd(c), withCompletion(newJobCmd(c), jobID), withCompletion(newCancelCmd(c), jobID),
		withCompletion(newLogsCmd(c), jobID), newQueueCmd(c), withCompletion(newNodesCmd(c), nodeName),
		withCompletion(newNodeActionCmd(c, api.Cordon), nodeName), withCompletion(newNodeActionCmd(c, api.Uncordon), nodeName),
		withCompletion(newNodeActionCmd(c, api.Repaired), nodeName),
		withCompletion(newNodeActionCmd(c, api.Drain), nodeName),
		newTeamsCmd(c), newClassesCmd(c), newRacksCmd(c), newStacksCmd(c), newRolloutCmd(c), newTokensCmd(c), newJoinTokensCmd(c), newUsageCmd(c), newRollupsCmd(c), newEventsCmd(c),
		newWaitCmd(c),
	)
}

// clientConfig is the client config file: named contexts, like kubeconfig.
//
//	current: dev
//	contexts:
//	  dev: {server: http://127.0.0.1:7080, token: ...}
//	  prod: {server: "https://a:8443,https://b:8443", token: ...}
type clientConfig struct {
	Current  string                   `yaml:"current,omitempty"`
	Contexts map[string]clientContext `yaml:"contexts"`
}

// clientContext is one server (or replica set) and a token for it.
type clientContext struct {
	Server string `yaml:"server"` // URL[,URL...]
	Token  string `yaml:"token"`
}

// parseClientConfig reads a client config file strictly.
func parseClientConfig(r io.Reader, name string) (clientConfig, error) {
	var cfg clientConfig
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("%w: %s: %s", gpufleet.ErrInvalid, name, gpufleet.Quote(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	if cfg.Current != "" {
		if _, ok := cfg.Contexts[cfg.Current]; !ok {
			return cfg, fmt.Errorf("%w: %s: current context %s is not among contexts", gpufleet.ErrInvalid, name, gpufleet.Quote(cfg.Current))
		}
	}
	return cfg, nil
}

// clientConfigPath is GPUFLEET_CONFIG, else $XDG_CONFIG_HOME/gpufleet/config.yaml,
// else ~/.config/gpufleet/config.yaml.
func clientConfigPath() string {
	if p := os.Getenv("GPUFLEET_CONFIG"); p != "" {
		return p
	}
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "gpufleet", "config.yaml")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".config", "gpufleet", "config.yaml")
}

// connection resolves server and token: --server/--token flags, then a
// context named by --context (or GPUFLEET_CONTEXT), then GPUFLEET_SERVER
// and GPUFLEET_TOKEN, then the config file's current context. A context
// asked for by name beats the environment because asking is explicit.
func (c *clientEnv) connection(cmd *cobra.Command) (servers []string, token string, err error) {
	flags := cmd.Flags()
	server, tok := "", ""
	if flags.Changed("server") {
		server = c.server
	}
	if flags.Changed("token") {
		tok = c.token
	}
	name := c.context
	if name == "" {
		name = os.Getenv("GPUFLEET_CONTEXT")
	}
	var cfg clientConfig
	path := clientConfigPath()
	if path != "" {
		f, oerr := os.Open(path)
		switch {
		case oerr == nil:
			cfg, err = parseClientConfig(f, path)
			f.Close()
			if err != nil {
				return nil, "", err
			}
		case !errors.Is(oerr, fs.ErrNotExist):
			return nil, "", fmt.Errorf("client config: %w", oerr)
		}
	}
	fromContext := func(ctxName string) error {
		cc, ok := cfg.Contexts[ctxName]
		if !ok {
			return fmt.Errorf("%w: --context %q: no such context in %s (have: %s)", gpufleet.ErrNotFound, ctxName, path,
				strings.Join(slices.Sorted(mapKeys(cfg.Contexts)), ", "))
		}
		if server == "" {
			server = cc.Server
		}
		if tok == "" {
			tok = cc.Token
		}
		return nil
	}
	if name != "" {
		if err := fromContext(name); err != nil {
			return nil, "", err
		}
	}
	if server == "" {
		server = os.Getenv("GPUFLEET_SERVER")
	}
	if tok == "" {
		tok = os.Getenv("GPUFLEET_TOKEN")
	}
	if cc, ok := cfg.Contexts[cfg.Current]; ok && name == "" {
		// The current context fills gaps, but its token only goes to its
		// own server.
		if server == "" {
			server = cc.Server
		}
		if tok == "" && server == cc.Server {
			tok = cc.Token
		}
	}
	servers = splitComma(server)
	if len(servers) == 0 {
		return nil, "", usageErr("no server: pass --server URL[,URL...], set GPUFLEET_SERVER, or add a context to %s", path)
	}
	return servers, tok, nil
}

// client returns an API client for the resolved connection.
func (c *clientEnv) client(cmd *cobra.Command) (*api.Client, error) {
	servers, tok, err := c.connection(cmd)
	if err != nil {
		return nil, err
	}
	return api.NewClient(servers, tok, api.WithUserAgent("gpufleet-cli/"+gpufleet.Version))
}

// ago prints how long ago t was, in relative words ("3m ago").
func (c *clientEnv) ago(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	d := c.now().Sub(*t)
	if d < 0 {
		return "in " + gpufleet.FormatDuration(-d)
	}
	return gpufleet.FormatDuration(d) + " ago"
}

// eta prints when t is, in relative words ("in 12m", "now", "unknown").
func (c *clientEnv) eta(e gpufleet.QueueEntry) string {
	t := e.EstimatedStart
	if (t == nil || t.IsZero()) && scheduler.NeverStarts(e.ReasonCode) {
		return "never, as submitted"
	}
	if t == nil || t.IsZero() {
		return "unknown"
	}
	in := func(t time.Time) string {
		if d := t.Sub(c.now()); d > 30*time.Second {
			return "in " + gpufleet.FormatDuration(d)
		}
		return "now"
	}
	s := in(*t)
	if p := e.EstimatedStartP90; p != nil && p.Sub(*t) > 30*time.Second {
		s += ", 90% by " + strings.TrimPrefix(in(*p), "in ")
	}
	return s
}

// confidence is a queue entry's ETA confidence in words: the share of
// similar recent jobs that started within max(1 h, 25 %) of their median;
// "uncalibrated" while too few jobs have started for the scheduler to say
// (the ETA is its simulation alone), "-" without an ETA.
func confidence(e gpufleet.QueueEntry) string {
	switch {
	case e.ETAConfidence != nil:
		return fmt.Sprintf("%.0f%%", *e.ETAConfidence*100)
	case e.EstimatedStart != nil:
		return "uncalibrated"
	}
	return "-"
}

// runEstimate is the run time a queued job is planned on, and where it
// came from, for a table cell: "3h (workload, 4 runs)".
func runEstimate(e *gpufleet.RunEstimate) string {
	if e == nil {
		return "-"
	}
	d := gpufleet.FormatDuration(e.Duration())
	switch e.From {
	case gpufleet.EstimateWorkload:
		return fmt.Sprintf("%s (workload, %d runs)", d, e.Runs)
	case gpufleet.EstimateTeamSize:
		return fmt.Sprintf("%s (team, size, %d runs)", d, e.Runs)
	case gpufleet.EstimateSize:
		return fmt.Sprintf("%s (size, %d runs)", d, e.Runs)
	case gpufleet.EstimateTimeLimit:
		return d + " (time limit)"
	}
	return fmt.Sprintf("%s (%s)", d, e.From)
}

// seconds prints an optional duration in seconds.
func seconds(v *float64) string {
	if v == nil {
		return "-"
	}
	return gpufleet.FormatDuration(time.Duration(*v * float64(time.Second)))
}

// orDash prints s, or - when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// kvList prints a map as k=v,k=v in key order.
func kvList[V any](m map[string]V) string {
	if len(m) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(mapKeys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return strings.Join(parts, ",")
}

// parseKV reads repeated K=V flag values into a map.
func parseKV(vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, &gpufleet.ValueError{Field: "value", Value: gpufleet.Quote(v), Want: "expected KEY=VALUE"}
		}
		k = strings.TrimSpace(k)
		if _, dup := out[k]; dup {
			return nil, &gpufleet.ValueError{Field: "value", Value: gpufleet.Quote(v), Want: "each KEY once (" + gpufleet.Quote(k) + " is given twice)"}
		}
		out[k] = val
	}
	return out, nil
}

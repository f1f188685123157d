package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/gpufleet/gpufleet"
)

// readClientConfig reads the client config file at path; a missing file
// is an empty config.
func readClientConfig(path string) (clientConfig, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return clientConfig{}, nil
	}
	if err != nil {
		return clientConfig{}, fmt.Errorf("client config: %w", err)
	}
	defer f.Close()
	return parseClientConfig(f, path)
}

// writeClientConfig replaces the client config file at path (mode 0600,
// its directory 0700 when created): written beside it, then renamed, so a
// crash never leaves half a file.
func writeClientConfig(path string, cfg clientConfig) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("client config: %w", err)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("client config: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("client config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// setContexts adds or replaces contexts in the client config file and,
// when current is not empty, makes it the current one.
func setContexts(path string, add map[string]clientContext, current string) error {
	cfg, err := readClientConfig(path)
	if err != nil {
		return err
	}
	if cfg.Contexts == nil {
		cfg.Contexts = map[string]clientContext{}
	}
	for name, c := range add {
		cfg.Contexts[name] = c
	}
	if current != "" {
		cfg.Current = current
	}
	return writeClientConfig(path, cfg)
}

// newConfigCmd is `gpufleet config`: the client config file's contexts.
func newConfigCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Manage the client config file's contexts (a server URL and a token each), like kubectl config",
		Long: `The client config file (GPUFLEET_CONFIG, else $XDG_CONFIG_HOME/gpufleet/config.yaml,
else ~/.config/gpufleet/config.yaml) names contexts, each a server (URL, or URLs
of replicas, comma-separated) and a token, and which one is current:

  current: dev
  contexts:
    dev: {server: http://127.0.0.1:7080, token: gpa_...}
    prod: {server: "https://a:8443,https://b:8443", token: gpf_...}

Client commands take --server and --token first, then --context NAME (or
GPUFLEET_CONTEXT), then GPUFLEET_SERVER and GPUFLEET_TOKEN, then the current
context. gpufleet dev writes the contexts dev (admin) and dev-team-a,
dev-team-b (members) and makes dev current.`,
	}
	path := clientConfigPath
	cmd.AddCommand(&cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts; * marks the current one",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cfg, err := readClientConfig(path())
			if err != nil {
				return err
			}
			names := slices.Sorted(mapKeys(cfg.Contexts))
			if e.output == outputJSON {
				type ctxOut struct {
					Name    string `json:"name"`
					Server  string `json:"server"`
					Current bool   `json:"current"`
				}
				out := []ctxOut{}
				for _, n := range names {
					out = append(out, ctxOut{n, cfg.Contexts[n].Server, n == cfg.Current})
				}
				return writeJSON(e.stdout, out)
			}
			t := newTable(e.stdout, "CURRENT", "NAME", "SERVER", "TOKEN")
			for _, n := range names {
				cur := ""
				if n == cfg.Current {
					cur = "*"
				}
				t.row(cur, n, cfg.Contexts[n].Server, maskToken(cfg.Contexts[n].Token))
			}
			return t.flush()
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "current-context",
		Short: "Print the current context's name",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cfg, err := readClientConfig(path())
			if err != nil {
				return err
			}
			if cfg.Current == "" {
				return fmt.Errorf("%w: no current context in %s", gpufleet.ErrNotFound, path())
			}
			_, err = fmt.Fprintln(e.stdout, cfg.Current)
			return err
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "use-context NAME",
		Short: "Make a context the current one",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, err := readContext(path(), args[0])
			if err != nil {
				return err
			}
			cfg.Current = args[0]
			if err := writeClientConfig(path(), cfg); err != nil {
				return err
			}
			_, err = fmt.Fprintf(e.stdout, "current context: %s\n", args[0])
			return err
		},
	})
	var server, token string
	var use bool
	set := &cobra.Command{
		Use:   "set-context NAME [--server URL[,URL...]] [--token T] [--use]",
		Short: "Create a context, or change its server or token",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			name := args[0]
			if err := gpufleet.ValidateName("context", name); err != nil {
				return err
			}
			cfg, err := readClientConfig(path())
			if err != nil {
				return err
			}
			cur, exists := cfg.Contexts[name]
			if c.Flags().Changed("server") {
				for _, u := range splitComma(server) {
					if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
						return usageErr("--server %s: expected http:// or https:// URLs", gpufleet.Quote(u))
					}
				}
				cur.Server = server
			}
			if c.Flags().Changed("token") {
				cur.Token = token
			}
			if cur.Server == "" {
				return usageErr("set-context %s: a new context needs --server", name)
			}
			current := ""
			if use {
				current = name
			}
			if err := setContexts(path(), map[string]clientContext{name: cur}, current); err != nil {
				return err
			}
			verb := "created"
			if exists {
				verb = "updated"
			}
			_, err = fmt.Fprintf(e.stdout, "context %s %s\n", name, verb)
			return err
		},
	}
	set.Flags().StringVar(&server, "server", "", "server URL, or replicas' URLs comma-separated")
	set.Flags().StringVar(&token, "token", "", "API token")
	set.Flags().BoolVar(&use, "use", false, "make it the current context")
	cmd.AddCommand(set)
	cmd.AddCommand(&cobra.Command{
		Use:   "delete-context NAME",
		Short: "Remove a context",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, err := readContext(path(), args[0])
			if err != nil {
				return err
			}
			delete(cfg.Contexts, args[0])
			if cfg.Current == args[0] {
				cfg.Current = ""
			}
			if err := writeClientConfig(path(), cfg); err != nil {
				return err
			}
			_, err = fmt.Fprintf(e.stdout, "context %s deleted\n", args[0])
			return err
		},
	})
	return cmd
}

// readContext reads the client config file and checks it has the
// context named.
func readContext(path, name string) (clientConfig, error) {
	cfg, err := readClientConfig(path)
	if err != nil {
		return cfg, err
	}
	if _, ok := cfg.Contexts[name]; !ok {
		return cfg, fmt.Errorf("%w: context %s: not in %s (have: %s)", gpufleet.ErrNotFound, gpufleet.Quote(name), path,
			strings.Join(slices.Sorted(mapKeys(cfg.Contexts)), ", "))
	}
	return cfg, nil
}

// maskToken shows a token's kind and last four characters.
func maskToken(t string) string {
	if t == "" {
		return "-"
	}
	prefix, _, _ := strings.Cut(t, "_")
	if len(t) <= 8 || prefix == t {
		return "****"
	}
	return prefix + "_****" + t[len(t)-4:]
}

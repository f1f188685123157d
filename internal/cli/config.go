package cli

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/gpufleet/gpufleet"
)

// envName is the environment variable standing in for a flag:
// --data-dir -> GPUFLEET_DATA_DIR.
func envName(flag string) string {
	return "GPUFLEET_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnvAndConfig fills every flag of cmd that was not given on the
// command line from the environment, then from the --config file: flags
// beat the environment, which beats the file.
func applyEnvAndConfig(cmd *cobra.Command, configFile string) error {
	file := map[string]any{}
	if configFile != "" {
		f, err := os.Open(configFile)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		file, err = parseFlagFile(f, configFile)
		f.Close()
		if err != nil {
			return err
		}
	}
	return applyFlagValues(cmd, file, os.LookupEnv, configFile)
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// maxFlagFileBytes bounds a --config file.
const maxFlagFileBytes = 1 << 20

// parseFlagFile reads a --config file: one YAML mapping of flag names to
// values (scalars, or lists for repeatable flags).
func parseFlagFile(r io.Reader, name string) (map[string]any, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFlagFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", name, err)
	}
	if len(data) > maxFlagFileBytes {
		return nil, fmt.Errorf("%w: --config %s: larger than %d bytes", gpufleet.ErrInvalid, name, maxFlagFileBytes)
	}
	file := map[string]any{}
	if err := yaml.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("%w: --config %s: %s", gpufleet.ErrInvalid, name, gpufleet.Quote(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	if file == nil {
		file = map[string]any{}
	}
	return file, nil
}

// applyFlagValues sets every flag of cmd not given on the command line from
// the environment (lookup), else from file; name labels errors.
func applyFlagValues(cmd *cobra.Command, file map[string]any, lookup func(string) (string, bool), name string) error {
	known := map[string]bool{}
	var firstErr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		known[f.Name] = true
		if f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		// A repeatable flag takes each value of a list, or of a
		// comma-separated environment variable; any other flag one value.
		slice, repeatable := f.Value.(pflag.SliceValue)
		var vals []string
		if v, ok := lookup(envName(f.Name)); ok {
			vals = []string{v}
			if repeatable {
				vals = splitList(v)
			}
		} else if v, ok := file[f.Name]; ok {
			switch t := v.(type) {
			case []any:
				for _, p := range t {
					vals = append(vals, fmt.Sprint(p))
				}
				if !repeatable {
					vals = []string{strings.Join(vals, ",")}
				}
			case map[string]any:
				if firstErr == nil {
					firstErr = fmt.Errorf("%w: --config %s: %s: expected a value or a list, not a mapping", gpufleet.ErrInvalid, name, f.Name)
				}
				return
			default:
				vals = []string{fmt.Sprint(t)}
			}
		} else {
			return
		}
		var err error
		if repeatable {
			err = slice.Replace(vals)
		} else {
			err = f.Value.Set(vals[0])
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%w: %s %s: %s", gpufleet.ErrInvalid, f.Name, gpufleet.Quote(strings.Join(vals, ",")), gpufleet.Quote(err.Error()))
		}
	})
	if firstErr != nil {
		return firstErr
	}
	for _, k := range slices.Sorted(maps.Keys(file)) {
		if !known[k] {
			return fmt.Errorf("%w: --config %s: unknown key %s (keys are flag names)", gpufleet.ErrInvalid, name, gpufleet.Quote(k))
		}
	}
	return nil
}

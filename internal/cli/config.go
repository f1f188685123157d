package cli

import (
	"fmt"
	"os"
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
		data, err := os.ReadFile(configFile)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		if err := dec.Decode(&file); err != nil && err.Error() != "EOF" {
			return fmt.Errorf("%w: --config %s: %v", gpufleet.ErrInvalid, configFile, err)
		}
	}
	known := map[string]bool{}
	var firstErr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		known[f.Name] = true
		if f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		var val string
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			val = v
		} else if v, ok := file[f.Name]; ok {
			switch t := v.(type) {
			case []any:
				parts := make([]string, len(t))
				for i, p := range t {
					parts[i] = fmt.Sprint(p)
				}
				val = strings.Join(parts, ",")
			default:
				val = fmt.Sprint(t)
			}
		} else {
			return
		}
		if err := f.Value.Set(val); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%w: %s: %v", gpufleet.ErrInvalid, f.Name, err)
		}
	})
	if firstErr != nil {
		return firstErr
	}
	for k := range file {
		if !known[k] {
			return fmt.Errorf("%w: --config %s: unknown key %q (keys are flag names)", gpufleet.ErrInvalid, configFile, k)
		}
	}
	return nil
}

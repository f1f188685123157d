package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
)

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the gpufleet version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := struct {
				Version   string `json:"version"`
				GoVersion string `json:"go_version"`
				Commit    string `json:"commit,omitempty"`
				Platform  string `json:"platform"`
			}{Version: gpufleet.Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						v.Commit = s.Value
					}
				}
			}
			if e.output == outputJSON {
				return writeJSON(e.stdout, v)
			}
			fmt.Fprintf(e.stdout, "gpufleet %s (%s, %s", v.Version, v.GoVersion, v.Platform)
			if v.Commit != "" {
				fmt.Fprintf(e.stdout, ", commit %.12s", v.Commit)
			}
			fmt.Fprintln(e.stdout, ")")
			return nil
		},
	}
}

package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
)

// versionInfo is what `gpufleet version` and `gpufleet --version` print.
type versionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Commit    string `json:"commit,omitempty"`
	Platform  string `json:"platform"`
}

// buildVersion reads the version of this binary.
func buildVersion() versionInfo {
	v := versionInfo{Version: gpufleet.Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Commit = s.Value
			}
		}
	}
	return v
}

// line is the one version line: "gpufleet 0.9.0 (go1.26.8, linux/amd64,
// commit 0123456789ab)".
func (v versionInfo) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gpufleet %s (%s, %s", v.Version, v.GoVersion, v.Platform)
	if v.Commit != "" {
		fmt.Fprintf(&b, ", commit %.12s", v.Commit)
	}
	b.WriteString(")")
	return b.String()
}

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the gpufleet version (the same line as --version)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := buildVersion()
			if e.output == outputJSON {
				return writeJSON(e.stdout, v)
			}
			_, err := fmt.Fprintln(e.stdout, v.line())
			return err
		},
	}
}

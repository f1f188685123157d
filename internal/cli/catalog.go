package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// loadCatalog returns the embedded catalog with the --catalog file, if any,
// merged over it.
func (e *env) loadCatalog() (*catalog.Catalog, error) {
	c := catalog.Default()
	if e.catalog == "" {
		return c, nil
	}
	f, err := os.Open(e.catalog)
	if err != nil {
		return nil, fmt.Errorf("--catalog: %w", err)
	}
	defer f.Close()
	c, err = c.WithOverrides(f)
	if err != nil {
		return nil, fmt.Errorf("--catalog %s: %w", e.catalog, err)
	}
	return c, nil
}

func newCatalogCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "List the GPUs and accelerators gpufleet knows, with their real characteristics",
		Long: `List the accelerator catalog: memory capacity and bandwidth, dense peak
throughput per precision (a dash means the format is not supported natively),
interconnect, power, and default prices. Every figure keeps its source
(catalog show ID, or -o json).

--catalog FILE adds or overrides entries (new cards, local prices) for every
command that uses the catalog.`,
		Example: `  gpufleet catalog
  gpufleet catalog -o wide
  gpufleet catalog show h100-sxm-80gb
  gpufleet catalog --catalog my-prices.json -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			c, err := e.loadCatalog()
			if err != nil {
				return err
			}
			gpus := c.All()
			if e.output == outputJSON {
				return writeJSON(e.stdout, gpus)
			}
			header := []string{"ID", "VENDOR", "MEMORY", "BANDWIDTH", "BF16", "FP8", "FP4", "INTERCONNECT", "DOMAIN", "TDP", "$/GPU-H"}
			if e.output == outputWide {
				header = append(header, "ARCH", "CC", "FP16", "INT8", "FP32", "FP64", "MIG")
			}
			t := newTable(e.stdout, header...)
			for _, g := range gpus {
				row := []string{
					g.ID, g.Vendor,
					fmtBytes(float64(g.MemoryBytes)),
					fmtRate(g.MemoryBandwidthBytesPerS),
					fmtPeak(g, gpufleet.BF16), fmtPeak(g, gpufleet.FP8), fmtPeak(g, gpufleet.FP4),
					string(g.InterconnectKind) + " " + fmtRate(g.InterconnectBandwidthBytesPerS),
					strconv.Itoa(g.DomainSize),
					fmtWatts(g.TDPWatts),
					fmtUSD(g.PricePerHourUSD),
				}
				if e.output == outputWide {
					mig := "-"
					if len(g.MIGProfiles) > 0 {
						mig = strconv.Itoa(len(g.MIGProfiles)) + " profiles"
					}
					row = append(row, g.Architecture, dash(g.ComputeCapability.String()),
						fmtPeak(g, gpufleet.FP16), fmtPeak(g, gpufleet.INT8), fmtPeak(g, gpufleet.FP32), fmtPeak(g, gpufleet.FP64), mig)
				}
				t.row(row...)
			}
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "\nMemory in GiB as NVML counts it; bandwidth in GB/s or TB/s (1e9, 1e12); peaks are dense TFLOPS (TOPS for int8); - = not native.")
			return nil
		},
	}
	cmd.AddCommand(newCatalogShowCmd(e))
	return cmd
}

func newCatalogShowCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one catalog entry with every figure and its source",
		Args:  cobra.ExactArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			var ids []string
			for _, g := range catalog.Default().All() {
				ids = append(ids, g.ID)
			}
			return ids, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			c, err := e.loadCatalog()
			if err != nil {
				return err
			}
			g, err := c.Lookup(args[0])
			if err != nil {
				return err
			}
			if e.output == outputJSON {
				return writeJSON(e.stdout, g)
			}
			t := newTable(e.stdout, "FIELD", "VALUE")
			t.row("id", g.ID)
			t.row("name", g.Name)
			t.row("vendor", g.Vendor)
			t.row("architecture", g.Architecture)
			t.row("compute capability", dash(g.ComputeCapability.String()))
			t.row("launch year", strconv.Itoa(g.LaunchYear))
			t.row("memory", fmtBytes(float64(g.MemoryBytes))+" "+g.MemoryType)
			t.row("memory bandwidth", fmtRate(g.MemoryBandwidthBytesPerS))
			for _, p := range gpufleet.Precisions() {
				v := "not native"
				if _, ok := g.Peak(p); ok {
					v = fmtPeak(g, p) + " dense TFLOPS"
					if p == gpufleet.INT8 {
						v = fmtPeak(g, p) + " dense TOPS"
					}
				}
				t.row("peak "+string(p), v)
			}
			t.row("interconnect", fmt.Sprintf("%s (%s, %s per GPU, domain of %d)", g.Interconnect, g.InterconnectKind, fmtRate(g.InterconnectBandwidthBytesPerS), g.DomainSize))
			t.row("pcie gen", dash(strconv.Itoa(g.PCIeGen)))
			t.row("tdp", fmtWatts(g.TDPWatts))
			t.row("idle power", fmtWatts(g.IdleWatts))
			t.row("form factor", g.FormFactor)
			for _, m := range g.MIGProfiles {
				t.row("mig "+m.Name, fmt.Sprintf("%d slices, %s, up to %d per GPU", m.Slices, fmtBytes(float64(m.MemoryBytes)), m.MaxInstances))
			}
			t.row("price per GPU-hour", fmtUSD(g.PricePerHourUSD)+" "+sourced(g.PriceSource, g.PriceDate))
			t.row("purchase price", fmtUSD(g.PurchasePriceUSD)+" "+sourced(g.PurchasePriceSource, g.PurchasePriceDate))
			if g.LeadTimeDays > 0 {
				t.row("lead time", fmt.Sprintf("%d days %s", g.LeadTimeDays, sourced(g.LeadTimeSource, g.LeadTimeDate)))
			}
			if len(g.Aliases) > 0 {
				t.row("aliases", strings.Join(g.Aliases, "; "))
			}
			if g.Notes != "" {
				t.row("notes", g.Notes)
			}
			t.row("source", g.Source)
			return t.flush()
		},
	}
}

func sourced(src, date string) string {
	switch {
	case src == "" && date == "":
		return ""
	case date == "":
		return "(" + src + ")"
	}
	return "(" + src + ", " + date + ")"
}

func dash(s string) string {
	if s == "" || s == "0" {
		return "-"
	}
	return s
}

func fmtPeak(g catalog.GPU, p gpufleet.Precision) string {
	v, ok := g.Peak(p)
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(v/1e12, 'f', -1, 64)
}

// fmtBytes prints a memory size in binary units, as NVML and nvidia-smi do.
func fmtBytes(b float64) string {
	switch {
	case b >= 1<<40:
		return trimFloat(b/(1<<40)) + " TiB"
	case b >= 1<<30:
		return trimFloat(b/(1<<30)) + " GiB"
	case b >= 1<<20:
		return trimFloat(b/(1<<20)) + " MiB"
	case b >= 1<<10:
		return trimFloat(b/(1<<10)) + " KiB"
	}
	return trimFloat(b) + " B"
}

// fmtRate prints a bandwidth in bytes per second, decimal units.
func fmtRate(b float64) string {
	if b >= 1e12 {
		return trimFloat(b/1e12) + " TB/s"
	}
	return trimFloat(b/1e9) + " GB/s"
}

func fmtWatts(w *float64) string {
	if w == nil {
		return "-"
	}
	return trimFloat(*w) + " W"
}

func fmtUSD(v *float64) string {
	if v == nil {
		return "-"
	}
	if *v >= 1000 {
		return "$" + strconv.FormatFloat(*v, 'f', 0, 64)
	}
	return "$" + strconv.FormatFloat(*v, 'f', 2, 64)
}

func trimFloat(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

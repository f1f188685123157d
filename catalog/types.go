package catalog

import "github.com/gpufleet/gpufleet"

// InterconnectKind classifies the GPU-to-GPU fabric of an accelerator.
type InterconnectKind string

// Interconnect kinds.
const (
	InterconnectNVLink         InterconnectKind = "nvlink"          // NVLink with NVSwitch (HGX, NVL72) or bridges
	InterconnectPCIe           InterconnectKind = "pcie"            // no GPU-to-GPU fabric beyond PCIe
	InterconnectInfinityFabric InterconnectKind = "infinity-fabric" // AMD xGMI
	InterconnectICI            InterconnectKind = "ici"             // Google TPU inter-chip interconnect
	InterconnectRoCE           InterconnectKind = "roce"            // Intel Gaudi on-chip Ethernet
	InterconnectNeuronLink     InterconnectKind = "neuronlink"      // AWS Trainium
)

// GPU is one accelerator model of the catalog. Throughput figures are dense
// (vendors' sparse figures halved). A nil pointer means "not published" or,
// in PeakFLOPS, "not supported natively"; it is never a zero.
type GPU struct {
	ID                string                     `json:"id"`
	Name              string                     `json:"name"`
	Vendor            string                     `json:"vendor"`
	Architecture      string                     `json:"architecture"`
	ComputeCapability gpufleet.ComputeCapability `json:"compute_capability,omitzero"` // NVIDIA only, "9.0"
	LaunchYear        int                        `json:"launch_year"`
	Aliases           []string                   `json:"aliases,omitempty"`

	MemoryBytes              int64   `json:"memory_bytes"`
	MemoryType               string  `json:"memory_type"`
	MemoryBandwidthBytesPerS float64 `json:"memory_bandwidth_bytes_per_s"`

	// PeakFLOPS maps every precision of Precisions to dense FLOP/s (OP/s for
	// int8), or nil where the format is not supported natively.
	PeakFLOPS map[gpufleet.Precision]*float64 `json:"peak_flops"`

	Interconnect     string           `json:"interconnect"` // as the vendor writes it
	InterconnectKind InterconnectKind `json:"interconnect_kind"`
	// InterconnectBandwidthBytesPerS is the per-GPU GPU-to-GPU bandwidth,
	// both directions added, as vendors quote it (900 GB/s for H100 SXM).
	InterconnectBandwidthBytesPerS float64 `json:"interconnect_bandwidth_bytes_per_s"`
	// DomainSize is how many GPUs share the fast fabric: 8 on an HGX board,
	// 72 in an NVL72 rack, 2 for an NVLink bridge pair, 1 for PCIe-only cards.
	DomainSize int `json:"domain_size"`

	PCIeGen    int      `json:"pcie_gen,omitempty"`
	TDPWatts   *float64 `json:"tdp_watts"`
	IdleWatts  *float64 `json:"idle_watts"` // typical idle draw, for simulation and energy floors
	FormFactor string   `json:"form_factor"`

	MIGProfiles []MIGProfile `json:"mig_profiles,omitempty"`

	// PricePerHourUSD is a default on-demand cloud price per GPU-hour.
	PricePerHourUSD *float64 `json:"price_per_hour_usd"`
	PriceSource     string   `json:"price_source,omitempty"`
	PriceDate       string   `json:"price_date,omitempty"` // YYYY-MM
	// PurchasePriceUSD is an estimate of the price of one GPU bought outright.
	PurchasePriceUSD    *float64 `json:"purchase_price_usd"`
	PurchasePriceSource string   `json:"purchase_price_source,omitempty"`
	PurchasePriceDate   string   `json:"purchase_price_date,omitempty"`

	// LeadTimeDays is the days from an order to GPUs in the rack, as last
	// published for this model; 0 when no figure is known (procurement
	// then assumes DefaultLeadTimeDays).
	LeadTimeDays   int    `json:"lead_time_days,omitempty"`
	LeadTimeSource string `json:"lead_time_source,omitempty"`
	LeadTimeDate   string `json:"lead_time_date,omitempty"`

	Notes  string `json:"notes,omitempty"`
	Source string `json:"source"`
}

// DefaultLeadTimeDays is the lead time assumed for a model without a
// published one: a quarter, between the 8-12 weeks of Hopper servers in
// 2024 and the year of Blackwell's backlog.
const DefaultLeadTimeDays = 90

// MaxLeadTimeDays bounds a lead time: three years.
const MaxLeadTimeDays = 3 * 365

// LeadTime is the model's lead time in days and where the figure comes
// from: the catalog's, or DefaultLeadTimeDays with a note saying so.
func (g GPU) LeadTime() (days int, source string) {
	if g.LeadTimeDays > 0 {
		return g.LeadTimeDays, g.LeadTimeSource
	}
	return DefaultLeadTimeDays, "no published lead time for this model: a quarter assumed"
}

// MIGProfile is one Multi-Instance GPU profile of a GPU model.
type MIGProfile struct {
	Name         string `json:"name"`          // "1g.10gb", "1g.10gb+me"
	Slices       int    `json:"slices"`        // compute slices (the "g" count)
	MemoryBytes  int64  `json:"memory_bytes"`  // memory of one instance
	MaxInstances int    `json:"max_instances"` // instances of this profile one GPU holds
}

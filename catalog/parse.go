package catalog

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// Unit multipliers of the data file. Capacities and rates use decimal SI
// prefixes, as vendors print them: 1 GB = 1e9 bytes, 1 GB/s = 1e9 bytes/s,
// 1 TFLOPS = 1e12 FLOP/s. A memory cell may instead end in "GiB" (2^30 bytes).
const (
	bytesPerGB  = 1e9
	bytesPerGiB = 1 << 30
	flopsPerTF  = 1e12
)

// column describes one column of the data file: its header, whether a file
// must carry it, and how a cell is stored into a GPU.
type column struct {
	name     string
	required bool
	set      func(g *GPU, cell string) error
}

// errCell is what a setter returns: the expectation; parseRows adds line and
// column.
type errCell string

func (e errCell) Error() string { return string(e) }

// positiveFloat parses a finite number > 0.
func positiveFloat(s string) (float64, bool) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 || v != v || v > 1e30 {
		return 0, false
	}
	return v, true
}

func nonNegFloat(s string) (float64, bool) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v != v || v > 1e30 {
		return 0, false
	}
	return v, true
}

// optFloat stores an optional non-negative number (empty = nil).
func optFloat(get func(g *GPU) **float64, scale float64, want string) func(*GPU, string) error {
	return func(g *GPU, s string) error {
		if s == "" {
			*get(g) = nil
			return nil
		}
		v, ok := positiveFloat(s)
		if !ok {
			return errCell(want)
		}
		v *= scale
		*get(g) = &v
		return nil
	}
}

func peakColumn(name string, p gpufleet.Precision) column {
	return column{name: name, set: func(g *GPU, s string) error {
		if s == "" {
			g.PeakFLOPS[p] = nil
			return nil
		}
		v, ok := positiveFloat(s)
		if !ok {
			return errCell("a number of tera-operations per second > 0, or empty for not supported")
		}
		v *= flopsPerTF
		g.PeakFLOPS[p] = &v
		return nil
	}}
}

func intColumn(name string, required bool, min, max int, dst func(*GPU) *int) column {
	return column{name: name, required: required, set: func(g *GPU, s string) error {
		if s == "" {
			if required {
				return errCell(fmt.Sprintf("an integer in [%d, %d]", min, max))
			}
			return nil
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < min || v > max {
			return errCell(fmt.Sprintf("an integer in [%d, %d]", min, max))
		}
		*dst(g) = v
		return nil
	}}
}

// columns lists the data-file columns in their canonical order.
var columns = []column{
	{name: "id", required: true, set: func(g *GPU, s string) error {
		if !validID(s) {
			return errCell("an id of lowercase letters, digits, '-' and '.'")
		}
		g.ID = s
		return nil
	}},
	{name: "vendor", set: func(g *GPU, s string) error { g.Vendor = s; return nil }},
	{name: "name", required: true, set: func(g *GPU, s string) error {
		if s == "" {
			return errCell("a non-empty name")
		}
		g.Name = s
		return nil
	}},
	{name: "architecture", set: func(g *GPU, s string) error { g.Architecture = s; return nil }},
	{name: "compute_capability", set: func(g *GPU, s string) error {
		if err := g.ComputeCapability.UnmarshalText([]byte(s)); err != nil {
			return errCell(`a compute capability "major.minor" such as "9.0", or empty`)
		}
		return nil
	}},
	intColumn("launch_year", false, 1990, 2100, func(g *GPU) *int { return &g.LaunchYear }),
	{name: "memory_gb", required: true, set: func(g *GPU, s string) error {
		b, ok := parseMemory(s)
		if !ok {
			return errCell(`a memory capacity in GB > 0 (or "NGiB")`)
		}
		g.MemoryBytes = b
		return nil
	}},
	{name: "memory_type", set: func(g *GPU, s string) error { g.MemoryType = s; return nil }},
	{name: "memory_bw_gbs", required: true, set: func(g *GPU, s string) error {
		v, ok := positiveFloat(s)
		if !ok {
			return errCell("a memory bandwidth in GB/s > 0")
		}
		g.MemoryBandwidthBytesPerS = v * bytesPerGB
		return nil
	}},
	peakColumn("fp64_tflops", gpufleet.FP64),
	peakColumn("fp32_tflops", gpufleet.FP32),
	peakColumn("tf32_tflops", gpufleet.TF32),
	peakColumn("bf16_tflops", gpufleet.BF16),
	peakColumn("fp16_tflops", gpufleet.FP16),
	peakColumn("fp8_tflops", gpufleet.FP8),
	peakColumn("int8_tops", gpufleet.INT8),
	peakColumn("fp4_tflops", gpufleet.FP4),
	{name: "tdp_w", set: optFloat(func(g *GPU) **float64 { return &g.TDPWatts }, 1, "a power in W > 0, or empty if unpublished")},
	{name: "idle_w", set: optFloat(func(g *GPU) **float64 { return &g.IdleWatts }, 1, "a power in W > 0, or empty if unknown")},
	{name: "interconnect", set: func(g *GPU, s string) error { g.Interconnect = s; return nil }},
	{name: "interconnect_kind", set: func(g *GPU, s string) error {
		if s != "" && !validKind(InterconnectKind(s)) {
			return errCell("one of " + kindList())
		}
		g.InterconnectKind = InterconnectKind(s)
		return nil
	}},
	{name: "interconnect_bw_gbs", set: func(g *GPU, s string) error {
		if s == "" {
			g.InterconnectBandwidthBytesPerS = 0
			return nil
		}
		v, ok := nonNegFloat(s)
		if !ok {
			return errCell("a bandwidth in GB/s >= 0")
		}
		g.InterconnectBandwidthBytesPerS = v * bytesPerGB
		return nil
	}},
	intColumn("domain_size", false, 1, 1<<20, func(g *GPU) *int { return &g.DomainSize }),
	intColumn("pcie_gen", false, 1, 9, func(g *GPU) *int { return &g.PCIeGen }),
	{name: "form_factor", set: func(g *GPU, s string) error { g.FormFactor = s; return nil }},
	{name: "mig", set: func(g *GPU, s string) error {
		m, err := parseMIGCell(s)
		if err != nil {
			return err
		}
		g.MIGProfiles = m
		return nil
	}},
	{name: "price_per_hour_usd", set: optFloat(func(g *GPU) **float64 { return &g.PricePerHourUSD }, 1, "a price in USD per GPU-hour > 0, or empty")},
	{name: "price_source", set: func(g *GPU, s string) error { g.PriceSource = s; return nil }},
	{name: "price_date", set: func(g *GPU, s string) error {
		if s != "" && !validMonth(s) {
			return errCell(`a date "YYYY-MM", or empty`)
		}
		g.PriceDate = s
		return nil
	}},
	{name: "purchase_price_usd", set: optFloat(func(g *GPU) **float64 { return &g.PurchasePriceUSD }, 1, "a price in USD > 0, or empty")},
	{name: "purchase_price_source", set: func(g *GPU, s string) error { g.PurchasePriceSource = s; return nil }},
	{name: "purchase_price_date", set: func(g *GPU, s string) error {
		if s != "" && !validMonth(s) {
			return errCell(`a date "YYYY-MM", or empty`)
		}
		g.PurchasePriceDate = s
		return nil
	}},
	intColumn("lead_time_days", false, 1, MaxLeadTimeDays, func(g *GPU) *int { return &g.LeadTimeDays }),
	{name: "lead_time_source", set: func(g *GPU, s string) error { g.LeadTimeSource = s; return nil }},
	{name: "lead_time_date", set: func(g *GPU, s string) error {
		if s != "" && !validMonth(s) {
			return errCell(`a date "YYYY-MM", or empty`)
		}
		g.LeadTimeDate = s
		return nil
	}},
	{name: "aliases", set: func(g *GPU, s string) error {
		g.Aliases = nil
		for a := range strings.SplitSeq(s, "|") {
			a = strings.TrimSpace(a)
			if a == "" {
				continue
			}
			if normalize(a) == "" {
				return errCell("aliases separated by '|', each with a letter or digit")
			}
			g.Aliases = append(g.Aliases, a)
		}
		return nil
	}},
	{name: "notes", set: func(g *GPU, s string) error { g.Notes = s; return nil }},
	{name: "source", set: func(g *GPU, s string) error { g.Source = s; return nil }},
}

// Parse reads the catalog data-file format: a CSV file with a header row
// naming columns of the embedded catalog/data/gpus.csv (id, name, memory_gb
// and memory_bw_gbs are required; other columns may be left out, in any
// order). Capacities are in GB (1e9 bytes; a cell may end in "GiB"),
// bandwidths in GB/s, throughputs in TFLOPS (TOPS for int8), power in W. An
// empty precision cell means the format is not supported natively. Errors
// wrap gpufleet.ErrInvalid and name the line, the column and what was
// expected.
func Parse(r io.Reader) ([]GPU, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 0
	cr.ReuseRecord = false
	header, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: line 1: want a header row, got an empty file", gpufleet.ErrInvalid)
	}
	if err != nil {
		return nil, csvErr(err)
	}
	cols, err := headerColumns(header)
	if err != nil {
		return nil, err
	}
	var out []GPU
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, csvErr(err)
		}
		line, _ := cr.FieldPos(0)
		g := newGPU()
		for i, cell := range rec {
			cell = strings.TrimSpace(cell)
			if err := cols[i].set(&g, cell); err != nil {
				l, _ := cr.FieldPos(i)
				return nil, fmt.Errorf("%w: line %d, column %d (%s): want %v, got %s", gpufleet.ErrInvalid, l, i+1, cols[i].name, err, gpufleet.Quote(cell))
			}
		}
		if prev, dup := seen[g.ID]; dup {
			return nil, fmt.Errorf("%w: line %d, column 1 (id): want a unique id, got %s again (first on line %d)", gpufleet.ErrInvalid, line, gpufleet.Quote(g.ID), prev)
		}
		seen[g.ID] = line
		if err := validate(g); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, g)
	}
	return out, nil
}

func csvErr(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("%w: line %d, column %d: want well-formed CSV: %v", gpufleet.ErrInvalid, pe.Line, pe.Column, pe.Err)
	}
	return fmt.Errorf("%w: read csv: %v", gpufleet.ErrInvalid, err)
}

// headerColumns maps header cells to columns, rejecting unknown, duplicate and
// missing required columns.
func headerColumns(header []string) ([]column, error) {
	byName := map[string]column{}
	for _, c := range columns {
		byName[c.name] = c
	}
	out := make([]column, len(header))
	have := map[string]bool{}
	var unknown []string
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		c, ok := byName[h]
		if !ok {
			if len(unknown) < 5 { // a header of garbage makes a short error
				unknown = append(unknown, gpufleet.Quote(h))
			} else if len(unknown) == 5 {
				unknown = append(unknown, fmt.Sprintf("and %d more", len(header)-i))
			}
			continue
		}
		if have[h] {
			return nil, fmt.Errorf("%w: line 1, column %d: want each column once, got %s twice", gpufleet.ErrInvalid, i+1, gpufleet.Quote(h))
		}
		have[h] = true
		out[i] = c
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%w: line 1: unknown column %s (want columns of %s)", gpufleet.ErrInvalid, strings.Join(unknown, ", "), columnList())
	}
	var missing []string
	for _, c := range columns {
		if c.required && !have[c.name] {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: line 1: missing required column %s", gpufleet.ErrInvalid, strings.Join(missing, ", "))
	}
	return out, nil
}

func columnList() string {
	names := make([]string, len(columns))
	for i, c := range columns {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// parseMemory reads the memory_gb column: a bare number is GB (the
// column's unit, "80"); with a unit it is a size as gpufleet.ParseBytes
// reads one ("96GiB", "141GB").
func parseMemory(s string) (int64, bool) {
	if v, ok := positiveFloat(s); ok {
		if v*bytesPerGB >= 1<<62 || v*bytesPerGB < 1 {
			return 0, false
		}
		return int64(v * bytesPerGB), true
	}
	b, err := gpufleet.ParseBytes(s)
	if err != nil || b <= 0 {
		return 0, false
	}
	return int64(b), true
}

// parseMIGCell reads "1g.10gb x7; 1g.10gb+me x1; ...".
func parseMIGCell(s string) ([]MIGProfile, error) {
	var out []MIGProfile
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, count, ok := strings.Cut(part, " x")
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if !ok || err != nil || n < 1 || n > 8 {
			return nil, errCell(`MIG profiles like "1g.10gb x7; 3g.40gb x2" (count 1-8)`)
		}
		p, ok := migFromName(strings.TrimSpace(name), n)
		if !ok {
			return nil, errCell(`MIG profile names like "1g.10gb" or "1g.10gb+me"`)
		}
		out = append(out, p)
	}
	return out, nil
}

// migFromName derives slices and memory from a profile name
// (gpufleet.ParseMIGProfile). The memory is the nominal figure of the
// name in GB (1e9 bytes).
func migFromName(name string, instances int) (MIGProfile, bool) {
	p, err := gpufleet.ParseMIGProfile(name)
	if err != nil {
		return MIGProfile{}, false
	}
	return MIGProfile{Name: name, Slices: p.Slices, MemoryBytes: int64(p.MemoryGB) * bytesPerGB, MaxInstances: instances}, true
}

func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return normalize(s) != ""
}

func validMonth(s string) bool {
	if len(s) != 7 || s[4] != '-' {
		return false
	}
	y, err1 := strconv.Atoi(s[:4])
	m, err2 := strconv.Atoi(s[5:])
	return err1 == nil && err2 == nil && y >= 1990 && m >= 1 && m <= 12
}

var kinds = []InterconnectKind{InterconnectNVLink, InterconnectPCIe, InterconnectInfinityFabric, InterconnectICI, InterconnectRoCE, InterconnectNeuronLink}

func validKind(k InterconnectKind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

func kindList() string {
	s := make([]string, len(kinds))
	for i, k := range kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// newGPU returns an entry with every precision present (nil) and the
// defaults of a PCIe-only card.
func newGPU() GPU {
	g := GPU{PeakFLOPS: make(map[gpufleet.Precision]*float64, len(gpufleet.Precisions())), DomainSize: 1}
	for _, p := range gpufleet.Precisions() {
		g.PeakFLOPS[p] = nil
	}
	return g
}

// validate checks the invariants every entry keeps, naming the field at fault.
func validate(g GPU) error {
	bad := func(field, want string, got any) error {
		return fmt.Errorf("%w: gpu %s field %s: want %s, got %v", gpufleet.ErrInvalid, gpufleet.Quote(g.ID), field, want, got)
	}
	switch {
	case !validID(g.ID):
		return bad("id", "lowercase letters, digits, '-' and '.'", gpufleet.Quote(g.ID))
	case strings.TrimSpace(g.Name) == "":
		return bad("name", "a non-empty name", `""`)
	case g.MemoryBytes <= 0:
		return bad("memory_bytes", "a positive byte count", g.MemoryBytes)
	case !(g.MemoryBandwidthBytesPerS > 0) || g.MemoryBandwidthBytesPerS > 1e30:
		return bad("memory_bandwidth_bytes_per_s", "a positive rate", g.MemoryBandwidthBytesPerS)
	case !(g.InterconnectBandwidthBytesPerS >= 0) || g.InterconnectBandwidthBytesPerS > 1e30:
		return bad("interconnect_bandwidth_bytes_per_s", "a rate >= 0", g.InterconnectBandwidthBytesPerS)
	case g.DomainSize < 1:
		return bad("domain_size", "at least 1", g.DomainSize)
	case g.PCIeGen < 0:
		return bad("pcie_gen", "0 (unknown) or a PCIe generation", g.PCIeGen)
	case g.LaunchYear < 0:
		return bad("launch_year", "a year or 0", g.LaunchYear)
	case g.InterconnectKind != "" && !validKind(g.InterconnectKind):
		return bad("interconnect_kind", "one of "+kindList(), gpufleet.Quote(string(g.InterconnectKind)))
	case g.ComputeCapability.Validate() != nil:
		return bad("compute_capability", `"major.minor"`, gpufleet.Quote(g.ComputeCapability.String()))
	}
	hasPeak := false
	for p, v := range g.PeakFLOPS {
		if !p.Valid() {
			return bad("peak_flops", "keys among "+precisionList(), gpufleet.Quote(string(p)))
		}
		if v == nil {
			continue
		}
		if !(*v > 0) || *v > 1e30 {
			return bad("peak_flops."+string(p), "a positive rate or null (never 0)", *v)
		}
		hasPeak = true
	}
	if !hasPeak {
		return bad("peak_flops", "at least one precision with a rate", "none")
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"tdp_watts", g.TDPWatts}, {"idle_watts", g.IdleWatts}, {"price_per_hour_usd", g.PricePerHourUSD}, {"purchase_price_usd", g.PurchasePriceUSD}} {
		if f.v != nil && (!(*f.v > 0) || *f.v > 1e30) {
			return bad(f.name, "a positive number or null", *f.v)
		}
	}
	if g.LeadTimeDays < 0 || g.LeadTimeDays > MaxLeadTimeDays {
		return bad("lead_time_days", fmt.Sprintf("0 (unknown) to %d days", MaxLeadTimeDays), g.LeadTimeDays)
	}
	for i, m := range g.MIGProfiles {
		if m.Name == "" || m.Slices < 1 || m.Slices > 8 || m.MemoryBytes <= 0 || m.MemoryBytes > g.MemoryBytes || m.MaxInstances < 1 || m.MaxInstances > 8 {
			return bad(fmt.Sprintf("mig_profiles[%d]", i), "a name, 1-8 slices, memory within the GPU's, 1-8 instances", fmt.Sprintf("%+v", m))
		}
	}
	for i, a := range g.Aliases {
		if normalize(a) == "" {
			return bad(fmt.Sprintf("aliases[%d]", i), "a name with a letter or digit", gpufleet.Quote(a))
		}
	}
	return nil
}

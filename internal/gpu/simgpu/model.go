package simgpu

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// The simulation's constants. Each is a modelling choice, picked so the
// readings look like a real card's and respond to load and faults the way
// the real readings do; none is a measurement. docs/GPU.md explains them.
const (
	// AmbientC is the inlet air temperature.
	AmbientC = 30.0
	// TDPTemperatureC is the steady GPU temperature at TDP draw. The
	// thermal resistance of every card is (TDPTemperatureC-AmbientC)/TDP,
	// so an H100 at 700 W settles at 78°C and idles near 35°C.
	TDPTemperatureC = 78.0
	// ThermalTauSeconds is the time constant of the first-order lag
	// between power and temperature: T += (T_target-T)*(1-exp(-dt/tau)).
	ThermalTauSeconds = 30.0
	// SlowdownC is the software thermal-slowdown temperature of most cards;
	// HBMSlowdownC that of Hopper-and-newer HBM cards (H100, H200, B200).
	SlowdownC    = 87.0
	HBMSlowdownC = 90.0
	// HWSlowdownMarginC is how far above the software slowdown the
	// hardware thermal slowdown engages.
	HWSlowdownMarginC = 5.0
	// ThrottlePerC is the fraction of SM clock lost per °C above the
	// slowdown temperature, down to MinClockFactor of the boost clock.
	ThrottlePerC   = 0.05
	MinClockFactor = 0.5
	// RunawayOvershootC is where a thermal-runaway fault (lost cooling)
	// drives the temperature: the slowdown temperature plus this.
	RunawayOvershootC = 15.0
	// PowerBrakeClockFactor is the SM clock factor under HW power brake
	// (NVML: HW slowdown cuts clocks "by a factor of 2 or more").
	PowerBrakeClockFactor = 0.5
	// IdleFractionOfTDP is the idle draw of a card whose catalog entry has
	// no IdleWatts.
	IdleFractionOfTDP = 0.10
	// IdleSMClockMHz is the SM clock of a GPU running no kernel.
	IdleSMClockMHz = 345.0
	// MemoryTempOffsetC and MemoryTempPerDRAM give the HBM temperature:
	// GPU temperature + offset + per-DRAM × DRAM activity.
	MemoryTempOffsetC = 3.0
	MemoryTempPerDRAM = 7.0
	// SBEIntervalSeconds is how often an active single-bit ECC fault adds
	// one more corrected error.
	SBEIntervalSeconds = 10.0
	// PCIeReplaysPerSecond is the replay counter growth of a degraded link.
	PCIeReplaysPerSecond = 5.0
	// NVLinkErrorsPerLinkSecond is the error counter growth per down link.
	NVLinkErrorsPerLinkSecond = 10.0
	// PowerNoiseFraction and ActivityNoise bound the seeded jitter on
	// power readings (fraction of TDP) and on GPM ratios of a busy GPU.
	PowerNoiseFraction = 0.005
	ActivityNoise      = 0.01
	// MaxMemoryFraction caps the memory the loads allocate.
	MaxMemoryFraction = 0.95
)

// pcieLaneBytesPerS is one lane's data rate per direction by PCIe
// generation, after line encoding (PCI-SIG: 2.5, 5, 8, 16, 32 and 64 GT/s;
// 8b/10b for gen 1-2, 128b/130b from gen 3; gen 6 ignores FLIT overhead).
var pcieLaneBytesPerS = [...]float64{0, 250e6, 500e6, 984.6e6, 1969.2e6, 3938.5e6, 7877e6}

// pcieBytesPerS is a link's bandwidth per direction.
func pcieBytesPerS(gen, width int) float64 {
	gen = min(max(gen, 1), len(pcieLaneBytesPerS)-1)
	return pcieLaneBytesPerS[gen] * float64(width)
}

// Load is the kind of work an attempt runs on a GPU.
type Load string

// Load profiles.
const (
	// LoadCompute is a tensor-core-bound job (training, prefill).
	LoadCompute Load = "compute"
	// LoadMemory is a memory-bandwidth-bound job (decode, embeddings).
	LoadMemory Load = "memory"
	// LoadIdle holds memory but runs no kernel (a stuck or waiting job).
	LoadIdle Load = "idle"
)

var loads = []Load{LoadCompute, LoadMemory, LoadIdle}

// ParseLoad returns the Load named s ("compute", "memory", "idle").
func ParseLoad(s string) (Load, error) {
	for _, l := range loads {
		if strings.EqualFold(strings.TrimSpace(s), string(l)) {
			return l, nil
		}
	}
	return "", fmt.Errorf("%w: load %q: want compute, memory or idle", gpufleet.ErrInvalid, s)
}

// profile is how one load, at full share, drives the readings.
type profile struct {
	util, memUtil         float64 // NVML utilization rates
	sm, occ, tensor, dram float64 // GPM ratios
	powerOfTDP            float64 // steady draw as a fraction of TDP (0: idle draw)
	memAlloc              float64 // fraction of GPU memory allocated
	pcie                  float64 // host-to-GPU traffic, fraction of the link's bandwidth (GPU-to-host is half)
	nvlink                float64 // GPU-to-GPU traffic, fraction of the NVLink bandwidth, each direction
}

// profiles are the modelling choices per load (docs/GPU.md):
//   - compute: a kernel always runs; SMs 90% active, tensor pipes 60%,
//     DRAM 30%; draws 95% of TDP; holds 75% of memory.
//   - memory: a kernel always runs but SMs wait on DRAM: SM 30%, DRAM 85%,
//     tensor 5%; draws 70% of TDP; holds 90% of memory.
//   - idle: no kernel, nothing active, idle draw; holds 60% of memory.
//
// Interconnect traffic is assumed, not measured: a compute load streams its
// input at 2% of the PCIe link and exchanges gradients at 30% of NVLink
// (where the GPU has it); a memory load 1% and 5%. Neither uses the video
// engines, which read 0.
var profiles = map[Load]profile{
	LoadCompute: {util: 1, memUtil: 0.35, sm: 0.90, occ: 0.50, tensor: 0.60, dram: 0.30, powerOfTDP: 0.95, memAlloc: 0.75, pcie: 0.02, nvlink: 0.30},
	LoadMemory:  {util: 1, memUtil: 0.90, sm: 0.30, occ: 0.25, tensor: 0.05, dram: 0.85, powerOfTDP: 0.70, memAlloc: 0.90, pcie: 0.01, nvlink: 0.05},
	LoadIdle:    {memAlloc: 0.60},
}

// nvmlNames are the names NVML reports for catalog models (nvidia-smi
// spells them the same way).
var nvmlNames = map[string]string{
	"h100-sxm-80gb":  "NVIDIA H100 80GB HBM3",
	"h100-pcie-80gb": "NVIDIA H100 PCIe",
	"h100-nvl-94gb":  "NVIDIA H100 NVL",
	"h200-sxm-141gb": "NVIDIA H200",
	"gh200-144gb":    "NVIDIA GH200 144G HBM3e",
	"b200-hgx":       "NVIDIA B200",
	"gb200-per-gpu":  "NVIDIA GB200",
	"a100-sxm-40gb":  "NVIDIA A100-SXM4-40GB",
	"a100-sxm-80gb":  "NVIDIA A100-SXM4-80GB",
	"a100-pcie-80gb": "NVIDIA A100 80GB PCIe",
	"a10":            "NVIDIA A10",
	"a10g":           "NVIDIA A10G",
	"l4":             "NVIDIA L4",
	"l40s":           "NVIDIA L40S",
	"t4":             "Tesla T4",
	"v100-sxm2-16gb": "Tesla V100-SXM2-16GB",
	"v100-sxm2-32gb": "Tesla V100-SXM2-32GB",
	"p100-pcie-16gb": "Tesla P100-PCIE-16GB",
	"k80":            "Tesla K80",
	"rtx-4090":       "NVIDIA GeForce RTX 4090",
	"rtx-6000-ada":   "NVIDIA RTX 6000 Ada Generation",
}

// nvmlName returns the name NVML would report for g.
func nvmlName(g catalog.GPU) string {
	if n, ok := nvmlNames[g.ID]; ok {
		return n
	}
	for _, a := range g.Aliases {
		if strings.HasPrefix(a, "NVIDIA ") {
			return a
		}
	}
	return "NVIDIA " + g.Name
}

// clocks are approximate published max SM (boost) and memory clocks, MHz.
var clocks = map[string][2]float64{
	"h100-sxm-80gb":  {1980, 2619},
	"h100-pcie-80gb": {1755, 1593},
	"h100-nvl-94gb":  {1785, 2619},
	"h200-sxm-141gb": {1980, 3201},
	"gh200-144gb":    {1980, 2619},
	"b200-hgx":       {1965, 3996},
	"gb200-per-gpu":  {2062, 3996},
	"a100-sxm-40gb":  {1410, 1215},
	"a100-sxm-80gb":  {1410, 1593},
	"a100-pcie-80gb": {1410, 1512},
	"a10":            {1695, 6251},
	"a10g":           {1710, 6251},
	"l4":             {2040, 6251},
	"l40s":           {2520, 9001},
	"t4":             {1590, 5001},
	"v100-sxm2-16gb": {1530, 877},
	"v100-sxm2-32gb": {1530, 877},
	"p100-pcie-16gb": {1328, 715},
	"k80":            {875, 2505},
	"rtx-4090":       {2520, 10501},
	"rtx-6000-ada":   {2505, 10001},
}

// defaultClocks are used for models missing from clocks.
var defaultClocks = [2]float64{1500, 1500}

// busNumbers are the PCI buses of the eight GPUs of an HGX H100 board.
var busNumbers = []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}

func busID(i int) string {
	if i < len(busNumbers) {
		return fmt.Sprintf("00000000:%02X:00.0", busNumbers[i])
	}
	return fmt.Sprintf("00000000:%02X:00.0", (0x10+i*0x10)&0xff)
}

var linksRE = regexp.MustCompile(`(\d+) links`)

// nvlinkLinks is the link count of an NVLink model: from the catalog's
// interconnect text ("NVLink 4 (18 links)"), else 12 (a bridge set).
func nvlinkLinks(g catalog.GPU) int {
	if m := linksRE.FindStringSubmatch(g.Interconnect); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
			return n
		}
	}
	return 12
}

// computeCapability parses "9.0" into 90.
// traits are what a model supports, derived once from the catalog.
type traits struct {
	cc            int // 90 for "9.0"
	tdp, idle     float64
	rth           float64 // °C per W
	slowdown      float64
	smMHz, memMHz float64
	hbm           bool
	gpm           bool // Hopper and newer
	ecc           bool // every data-center and workstation card; not GeForce
	rowRemap      bool // Ampere and newer
	pageRetire    bool // before Ampere
	nvlinks       int  // 0: PCIe only
	pcieGen       int
}

func traitsOf(g catalog.GPU) traits {
	t := traits{cc: g.ComputeCapability.Major*10 + g.ComputeCapability.Minor, pcieGen: g.PCIeGen}
	t.tdp = 300
	if g.TDPWatts != nil {
		t.tdp = *g.TDPWatts
	}
	t.idle = IdleFractionOfTDP * t.tdp
	if g.IdleWatts != nil {
		t.idle = *g.IdleWatts
	}
	t.rth = (TDPTemperatureC - AmbientC) / t.tdp
	t.hbm = strings.HasPrefix(strings.ToUpper(g.MemoryType), "HBM")
	t.gpm = t.cc >= 90
	t.slowdown = SlowdownC
	if t.gpm && t.hbm {
		t.slowdown = HBMSlowdownC
	}
	c, ok := clocks[g.ID]
	if !ok {
		c = defaultClocks
	}
	t.smMHz, t.memMHz = c[0], c[1]
	t.ecc = !strings.Contains(g.Name, "GeForce")
	t.rowRemap = t.ecc && t.cc >= 80
	t.pageRetire = t.ecc && t.cc < 80
	if g.InterconnectKind == catalog.InterconnectNVLink && g.DomainSize > 1 {
		t.nvlinks = nvlinkLinks(g)
	}
	if t.pcieGen == 0 {
		t.pcieGen = 4
	}
	return t
}

// migLayout is one "profile xN" item of Spec.MIG.
type migLayout struct {
	profile catalog.MIGProfile
	count   int
}

// parseMIG parses "1g.18gb x7" or "3g.71gb x2; 1g.18gb x1" against g: each
// count follows x, × or *, with or without a space; no count means one.
func parseMIG(g catalog.GPU, s string) ([]migLayout, error) {
	var out []migLayout
	slices := 0
	var mem int64
	for item := range strings.SplitSeq(s, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, count := item, 1
		if i := strings.LastIndexAny(item, " x×*"); i > 0 {
			_, w := utf8.DecodeRuneInString(item[i:]) // × is two bytes
			n, err := strconv.Atoi(strings.TrimSpace(item[i+w:]))
			if err == nil {
				name, count = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(item[:i]), "x×*")), n
			}
		}
		p, ok := g.MIG(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s has no MIG profile %q", gpufleet.ErrInvalid, g.ID, name)
		}
		if count < 1 || count > p.MaxInstances {
			return nil, fmt.Errorf("%w: MIG %s x%d: a GPU holds 1 to %d", gpufleet.ErrInvalid, p.Name, count, p.MaxInstances)
		}
		slices += p.Slices * count
		mem += p.MemoryBytes * int64(count)
		out = append(out, migLayout{p, count})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty MIG layout %q", gpufleet.ErrInvalid, s)
	}
	if slices > 7 || mem > g.MemoryBytes {
		return nil, fmt.Errorf("%w: MIG layout %q needs %d slices and %d bytes; %s has 7 and %d",
			gpufleet.ErrInvalid, s, slices, mem, g.ID, g.MemoryBytes)
	}
	return out, nil
}

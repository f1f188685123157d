package catalog

import (
	"errors"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet"
)

func ptr(v float64) *float64 { return &v }

var allIDs = []string{
	"v100-sxm2-32gb", "t4", "a10", "a10g", "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb",
	"l4", "l40s", "h100-sxm-80gb", "h800-sxm-80gb", "h100-pcie-80gb", "h100-nvl-94gb", "h200-sxm-141gb", "gh200-144gb",
	"b200-hgx", "gb200-per-gpu", "rtx-4090", "rtx-6000-ada", "mi250x", "mi300x", "mi325x",
	"gaudi2", "gaudi3", "tpu-v5e", "tpu-v5p", "tpu-v6e", "trainium2", "p100-pcie-16gb", "k80",
	"v100-sxm2-16gb",
}

func TestDefaultHoldsEveryIDInDataOrder(t *testing.T) {
	if diff := cmp.Diff(allIDs, Default().IDs()); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
}

func TestEmbeddedDataIsConsistent(t *testing.T) {
	owner := map[string]string{}
	for _, g := range Default().All() {
		if g.Source == "" {
			t.Errorf("%s: empty source", g.ID)
		}
		if len(g.PeakFLOPS) != len(gpufleet.Precisions()) {
			t.Errorf("%s: peak_flops has %d keys, want %d", g.ID, len(g.PeakFLOPS), len(gpufleet.Precisions()))
		}
		if g.Vendor == "NVIDIA" && g.ComputeCapability.IsZero() {
			t.Errorf("%s: NVIDIA entry without compute capability", g.ID)
		}
		if g.InterconnectKind == "" || g.Interconnect == "" {
			t.Errorf("%s: no interconnect", g.ID)
		}
		if g.PricePerHourUSD != nil && (g.PriceSource == "" || g.PriceDate == "") {
			t.Errorf("%s: price without source or date", g.ID)
		}
		if g.LeadTimeDays > 0 && (g.LeadTimeSource == "" || g.LeadTimeDate == "") {
			t.Errorf("%s: lead time without source or date", g.ID)
		}
		if g.PurchasePriceUSD != nil && (g.PurchasePriceSource == "" || g.PurchasePriceDate == "") {
			t.Errorf("%s: purchase price without source or date", g.ID)
		}
		if g.IdleWatts != nil && (g.TDPWatts == nil || *g.IdleWatts >= *g.TDPWatts) {
			t.Errorf("%s: idle watts %v not below TDP", g.ID, *g.IdleWatts)
		}
		// No two entries may claim the same normalised name.
		for _, n := range append([]string{g.ID}, g.Aliases...) {
			k := normalize(n)
			if o, ok := owner[k]; ok && o != g.ID {
				t.Errorf("name %q of %s already names %s", n, g.ID, o)
			}
			owner[k] = g.ID
		}
	}
}

func TestSpotValues(t *testing.T) {
	type want struct {
		memoryBytes int64
		bandwidth   float64
		peaks       map[gpufleet.Precision]*float64
		cc          string
		domain      int
		tdp         *float64
	}
	cases := map[string]struct {
		id   string
		want want
	}{
		"H100 SXM carries halved datasheet tensor rates": {
			id: "h100-sxm-80gb",
			want: want{memoryBytes: 80 << 30, bandwidth: 3.35e12, cc: "9.0", domain: 8, tdp: ptr(700),
				peaks: map[gpufleet.Precision]*float64{gpufleet.FP64: ptr(34e12), gpufleet.FP32: ptr(67e12), gpufleet.TF32: ptr(494.5e12), gpufleet.BF16: ptr(989.5e12), gpufleet.FP16: ptr(989.5e12), gpufleet.FP8: ptr(1979e12), gpufleet.INT8: ptr(1979e12), gpufleet.FP4: nil}},
		},
		"K80 is one GPU of the dual board at base clock": {
			id: "k80",
			want: want{memoryBytes: 12e9, bandwidth: 240e9, cc: "3.7", domain: 1, tdp: ptr(150),
				peaks: map[gpufleet.Precision]*float64{gpufleet.FP64: ptr(0.935e12), gpufleet.FP32: ptr(2.8e12), gpufleet.TF32: nil, gpufleet.BF16: nil, gpufleet.FP16: nil, gpufleet.FP8: nil, gpufleet.INT8: nil, gpufleet.FP4: nil}},
		},
		"V100 has no bf16 and a 16 GB variant": {
			id: "v100-sxm2-16gb",
			want: want{memoryBytes: 16 << 30, bandwidth: 900e9, cc: "7.0", domain: 8, tdp: ptr(300),
				peaks: map[gpufleet.Precision]*float64{gpufleet.FP64: ptr(7.8e12), gpufleet.FP32: ptr(15.7e12), gpufleet.TF32: nil, gpufleet.BF16: nil, gpufleet.FP16: ptr(125e12), gpufleet.FP8: nil, gpufleet.INT8: ptr(62e12), gpufleet.FP4: nil}},
		},
		"Trainium2 memory is 96 GiB and TDP unpublished": {
			id: "trainium2",
			want: want{memoryBytes: 96 << 30, bandwidth: 2.9e12, domain: 16, tdp: nil,
				peaks: map[gpufleet.Precision]*float64{gpufleet.FP64: nil, gpufleet.FP32: ptr(181e12), gpufleet.TF32: ptr(667e12), gpufleet.BF16: ptr(667e12), gpufleet.FP16: ptr(667e12), gpufleet.FP8: ptr(1299e12), gpufleet.INT8: nil, gpufleet.FP4: nil}},
		},
		"GB200 shares a 72-GPU NVLink domain": {
			id: "gb200-per-gpu",
			want: want{memoryBytes: 186 << 30, bandwidth: 8e12, cc: "10.0", domain: 72, tdp: ptr(1200),
				peaks: map[gpufleet.Precision]*float64{gpufleet.FP64: ptr(40e12), gpufleet.FP32: ptr(80e12), gpufleet.TF32: ptr(1250e12), gpufleet.BF16: ptr(2500e12), gpufleet.FP16: ptr(2500e12), gpufleet.FP8: ptr(5000e12), gpufleet.INT8: ptr(5000e12), gpufleet.FP4: ptr(10000e12)}},
		},
	}
	approx := cmp.Comparer(func(a, b float64) bool {
		d := a - b
		return d < 1e-9*max(a, b, 1) && -d < 1e-9*max(a, b, 1)
	})
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := Default().Lookup(tc.id)
			if err != nil {
				t.Fatal(err)
			}
			got := want{memoryBytes: g.MemoryBytes, bandwidth: g.MemoryBandwidthBytesPerS, peaks: g.PeakFLOPS, cc: g.ComputeCapability.String(), domain: g.DomainSize, tdp: g.TDPWatts}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), approx); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnsupportedPrecisionIsNilNeverZero(t *testing.T) {
	for _, g := range Default().All() {
		for p, v := range g.PeakFLOPS {
			if v != nil && *v <= 0 {
				t.Errorf("%s %s = %v, want nil or positive", g.ID, p, *v)
			}
		}
	}
	l4, _ := Default().Lookup("l4")
	if v, ok := l4.Peak(gpufleet.FP64); ok || v != 0 {
		t.Errorf("L4 fp64 = %v, %v; want 0, false", v, ok)
	}
	if v, ok := l4.Peak(gpufleet.FP8); !ok || v != 242.5e12 {
		t.Errorf("L4 fp8 = %v, %v; want 242.5e12, true", v, ok)
	}
}

func TestMIGProfiles(t *testing.T) {
	cases := map[string]struct {
		id, profile string
		want        MIGProfile
		wantOK      bool
	}{
		"A100 80GB holds seven 1g.10gb":    {id: "a100-sxm-80gb", profile: "1g.10gb", want: MIGProfile{Name: "1g.10gb", Slices: 1, MemoryBytes: 10e9, MaxInstances: 7}, wantOK: true},
		"A100 40GB holds two 3g.20gb":      {id: "a100-sxm-40gb", profile: "MIG 3g.20gb", want: MIGProfile{Name: "3g.20gb", Slices: 3, MemoryBytes: 20e9, MaxInstances: 2}, wantOK: true},
		"media extension profile is named": {id: "h100-sxm-80gb", profile: "1G.10GB+ME", want: MIGProfile{Name: "1g.10gb+me", Slices: 1, MemoryBytes: 10e9, MaxInstances: 1}, wantOK: true},
		"H200 whole-GPU profile":           {id: "h200-sxm-141gb", profile: "7g.141gb", want: MIGProfile{Name: "7g.141gb", Slices: 7, MemoryBytes: 141e9, MaxInstances: 1}, wantOK: true},
		"L4 has no MIG":                    {id: "l4", profile: "1g.10gb"},
		"A100 profile is not on H200":      {id: "h200-sxm-141gb", profile: "1g.10gb"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := Default().Lookup(tc.id)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := g.MIG(tc.profile)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	l4, _ := Default().Lookup("l4")
	if len(l4.MIGProfiles) != 0 {
		t.Errorf("L4 MIG profiles = %v, want none", l4.MIGProfiles)
	}
}

func TestLookupAliases(t *testing.T) {
	cases := map[string]struct {
		name string
		want string
	}{
		"bare H100":                    {"H100", "h100-sxm-80gb"},
		"NVML H100 SXM":                {"NVIDIA H100 80GB HBM3", "h100-sxm-80gb"},
		"NVML H100 PCIe":               {"NVIDIA H100 PCIe", "h100-pcie-80gb"},
		"NVML H100 NVL":                {"NVIDIA H100 NVL", "h100-nvl-94gb"},
		"NVML H200":                    {"NVIDIA H200", "h200-sxm-141gb"},
		"NVML H200 long":               {"NVIDIA H200 141GB HBM3e", "h200-sxm-141gb"},
		"NVML A100 SXM 80GB":           {"NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"},
		"NVML A100 SXM 40GB":           {"NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"},
		"NVML A100 PCIe":               {"NVIDIA A100 80GB PCIe", "a100-pcie-80gb"},
		"NVML L4":                      {"NVIDIA L4", "l4"},
		"NVML L40S":                    {"NVIDIA L40S", "l40s"},
		"NVML T4":                      {"Tesla T4", "t4"},
		"NVML A10":                     {"NVIDIA A10", "a10"},
		"NVML A10G":                    {"NVIDIA A10G", "a10g"},
		"NVML V100 16GB":               {"Tesla V100-SXM2-16GB", "v100-sxm2-16gb"},
		"NVML V100 32GB":               {"Tesla V100-SXM2-32GB", "v100-sxm2-32gb"},
		"NVML P100":                    {"Tesla P100-PCIE-16GB", "p100-pcie-16gb"},
		"NVML K80":                     {"Tesla K80", "k80"},
		"NVML RTX 4090":                {"NVIDIA GeForce RTX 4090", "rtx-4090"},
		"NVML RTX 6000 Ada":            {"NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"},
		"NVML B200":                    {"NVIDIA B200", "b200-hgx"},
		"NVML GH200 96GB":              {"NVIDIA GH200 480GB", "gh200-144gb"},
		"NVML GH200 144GB":             {"NVIDIA GH200 144G HBM3e", "gh200-144gb"},
		"ROCm MI300X":                  {"AMD Instinct MI300X", "mi300x"},
		"trace V100M16":                {"V100M16", "v100-sxm2-16gb"},
		"trace V100M32":                {"V100M32", "v100-sxm2-32gb"},
		"trace P100":                   {"P100", "p100-pcie-16gb"},
		"trace T4":                     {"T4", "t4"},
		"trace A10":                    {"A10", "a10"},
		"trace K80":                    {"K80", "k80"},
		"trace V100":                   {"V100", "v100-sxm2-16gb"},
		"id in capitals":               {"H100-SXM-80GB", "h100-sxm-80gb"},
		"id with underscores":          {"h100_sxm_80gb", "h100-sxm-80gb"},
		"id with spaces":               {" h100 sxm 80gb ", "h100-sxm-80gb"},
		"vendor prefix on an id":       {"NVIDIA a100-sxm-40gb", "a100-sxm-40gb"},
		"TPU written with a space":     {"TPU v5e", "tpu-v5e"},
		"A100 alone is the 80GB SXM4":  {"a100", "a100-sxm-80gb"},
		"A10 does not capture A100 40": {"A100 40GB", "a100-sxm-40gb"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := Default().Lookup(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if g.ID != tc.want {
				t.Errorf("Lookup(%q) = %s, want %s", tc.name, g.ID, tc.want)
			}
		})
	}
}

func TestLookupUnknownSuggests(t *testing.T) {
	cases := map[string]struct {
		name       string
		wantPrefix string
		wantFirst  string
	}{
		"truncated id":     {name: "h100-sxm", wantPrefix: `unknown GPU "h100-sxm" (did you mean h100-sxm-80gb, `, wantFirst: "h100-sxm-80gb"},
		"typo in an alias": {name: "NVIDIA L40", wantPrefix: `unknown GPU "NVIDIA L40" (did you mean `, wantFirst: "l40s"},
		"typo in an id":    {name: "gaudi-4", wantPrefix: `unknown GPU "gaudi-4" (did you mean gaudi`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Default().Lookup(tc.name)
			if !errors.Is(err, gpufleet.ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
			msg := strings.TrimPrefix(err.Error(), gpufleet.ErrNotFound.Error()+": ")
			if !strings.HasPrefix(msg, tc.wantPrefix) {
				t.Errorf("message = %q, want prefix %q", msg, tc.wantPrefix)
			}
			if tc.wantFirst != "" && !strings.Contains(msg, "did you mean "+tc.wantFirst) {
				t.Errorf("message = %q, want %s suggested first", msg, tc.wantFirst)
			}
			if n := strings.Count(msg, ","); n > 2 {
				t.Errorf("message = %q, want at most 3 suggestions", msg)
			}
		})
	}
	if _, err := Default().Lookup(""); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("empty name: err = %v, want ErrNotFound", err)
	}
}

func TestAllReturnsCopies(t *testing.T) {
	c := Default()
	all := c.All()
	*all[0].PeakFLOPS[gpufleet.FP16] = 1
	all[0].Aliases[0] = "changed"
	all[0].Name = "changed"
	g, _ := c.Lookup(all[0].ID)
	*g.TDPWatts = 1
	again, _ := c.Lookup(all[0].ID)
	if v, _ := again.Peak(gpufleet.FP16); v != 125e12 {
		t.Errorf("fp16 after caller mutation = %v, want 125e12", v)
	}
	if again.Aliases[0] == "changed" || again.Name == "changed" || *again.TDPWatts != 300 {
		t.Errorf("catalog changed through a returned copy: %+v", again)
	}
}

// TestPackageIsPure guards the rule that catalog does no I/O, logging or
// clock reading.
func TestPackageIsPure(t *testing.T) {
	banned := map[string]bool{"os": true, "net": true, "net/http": true, "database/sql": true, "log": true, "log/slog": true, "time": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if banned[p] {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}

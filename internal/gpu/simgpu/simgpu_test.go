package simgpu

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

func TestNVMLNamesResolveToTheirModel(t *testing.T) {
	cat := catalog.Default()
	for _, g := range cat.All() {
		if g.Vendor != "NVIDIA" {
			continue
		}
		got, err := cat.Lookup(nvmlName(g))
		if err != nil || got.ID != g.ID {
			t.Errorf("%s: NVML name %q resolves to %q, %v", g.ID, nvmlName(g), got.ID, err)
		}
	}
}

var uuidRE = regexp.MustCompile(`^(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestDevicesAreDeterministicPerNode(t *testing.T) {
	specs := []Spec{{Model: "h200-sxm-141gb", Count: 2, MIG: "1g.18gb x7", MIGCount: 1}}
	read := func(node string) []gpu.Device {
		b, err := New(specs, WithNodeName(node))
		if err != nil {
			t.Fatal(err)
		}
		devs, err := b.Devices(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return devs
	}
	a, again, other := read("node-a"), read("node-a"), read("node-b")
	if diff := cmp.Diff(a, again); diff != "" {
		t.Errorf("same node, different devices:\n%s", diff)
	}
	if a[0].UUID == other[0].UUID || a[0].MIG[0].UUID == other[0].MIG[0].UUID || a[0].Serial == other[0].Serial {
		t.Error("two nodes share GPU or MIG UUIDs or serials")
	}
	for _, d := range a {
		if !uuidRE.MatchString(d.UUID) || d.UUID[:4] != "GPU-" {
			t.Errorf("GPU UUID %q is not NVML-shaped", d.UUID)
		}
		for _, m := range d.MIG {
			if !uuidRE.MatchString(m.UUID) || m.UUID[:4] != "MIG-" {
				t.Errorf("MIG UUID %q is not NVML-shaped", m.UUID)
			}
		}
	}
	want := gpu.Device{
		Index: 0, UUID: a[0].UUID, Name: "NVIDIA H200", Model: "h200-sxm-141gb", PCIBusID: "00000000:18:00.0", Serial: a[0].Serial,
		Architecture: "Hopper (GH100)", ComputeCapability: gpufleet.ComputeCapability{Major: 9, Minor: 0}, MemoryBytes: 141 << 30,
		NVLinkPeers: []int{1}, NVLinkDomain: "nvlink:" + a[0].UUID, MIGMode: true,
	}
	for i, m := range a[0].MIG { // the driver numbers 1-slice GPU instances from 7
		want.MIG = append(want.MIG, gpu.MIGInstance{UUID: m.UUID, Profile: "1g.18gb", MemoryBytes: 18e9, GPUInstanceID: 7 + i})
	}
	if diff := cmp.Diff(want, a[0]); diff != "" {
		t.Errorf("device 0 (-want +got):\n%s", diff)
	}
	if len(a[0].MIG) != 7 || a[1].MIGMode || a[1].MIG != nil {
		t.Errorf("MIG on %d instances of gpu 0 and %v on gpu 1, want 7 and none", len(a[0].MIG), a[1].MIG)
	}
}

func TestNVLinkDomainsFollowTheCatalog(t *testing.T) {
	tests := map[string]struct {
		spec        Spec
		wantPeers   [][]int
		wantDomains []int // index of the GPU naming the domain, -1 for none
	}{
		"HGX H100: all eight in one domain": {
			spec:        Spec{Model: "h100-sxm-80gb", Count: 8},
			wantPeers:   [][]int{{1, 2, 3, 4, 5, 6, 7}, {0, 2, 3, 4, 5, 6, 7}, {0, 1, 3, 4, 5, 6, 7}, {0, 1, 2, 4, 5, 6, 7}, {0, 1, 2, 3, 5, 6, 7}, {0, 1, 2, 3, 4, 6, 7}, {0, 1, 2, 3, 4, 5, 7}, {0, 1, 2, 3, 4, 5, 6}},
			wantDomains: []int{0, 0, 0, 0, 0, 0, 0, 0},
		},
		"PCIe L4 cards: no NVLink": {
			spec:        Spec{Model: "l4", Count: 3},
			wantPeers:   [][]int{nil, nil, nil},
			wantDomains: []int{-1, -1, -1},
		},
		"bridged A100 PCIe: pairs, the odd one alone": {
			spec:        Spec{Model: "a100-pcie-80gb", Count: 5},
			wantPeers:   [][]int{{1}, {0}, {3}, {2}, nil},
			wantDomains: []int{0, 0, 2, 2, -1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := New([]Spec{tc.spec})
			if err != nil {
				t.Fatal(err)
			}
			devs, _ := b.Devices(t.Context())
			var peers [][]int
			var domains []int
			for _, d := range devs {
				peers = append(peers, d.NVLinkPeers)
				dom := -1
				for j, o := range devs {
					if d.NVLinkDomain == "nvlink:"+o.UUID {
						dom = j
					}
				}
				domains = append(domains, dom)
			}
			if diff := cmp.Diff(tc.wantPeers, peers); diff != "" {
				t.Errorf("peers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDomains, domains); diff != "" {
				t.Errorf("domains (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewRejectsBadSpecs(t *testing.T) {
	tests := map[string]struct {
		spec Spec
		want error
	}{
		"unknown model":          {Spec{Model: "h900", Count: 1}, gpufleet.ErrNotFound},
		"not NVIDIA":             {Spec{Model: "mi300x", Count: 1}, gpufleet.ErrUnsupported},
		"no GPUs":                {Spec{Model: "l4", Count: 0}, gpufleet.ErrInvalid},
		"MIG on a card without":  {Spec{Model: "l4", Count: 1, MIG: "1g.6gb x4"}, gpufleet.ErrInvalid},
		"too many instances":     {Spec{Model: "h100-sxm-80gb", Count: 1, MIG: "1g.10gb x8"}, gpufleet.ErrInvalid},
		"more than seven slices": {Spec{Model: "h100-sxm-80gb", Count: 1, MIG: "3g.40gb x2; 2g.20gb x1"}, gpufleet.ErrInvalid},
		"MIG on more GPUs than":  {Spec{Model: "h100-sxm-80gb", Count: 1, MIG: "7g.80gb", MIGCount: 2}, gpufleet.ErrInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := New([]Spec{tc.spec}); !errors.Is(err, tc.want) {
				t.Errorf("New = %v, want %v", err, tc.want)
			}
		})
	}
}

func near(got *float64, want, tol float64) bool { return got != nil && math.Abs(*got-want) <= tol }

func TestLoadProfilesDriveTheReadings(t *testing.T) {
	type want struct {
		util, sm, tensor, dram, powerOfTDP, memFrac, tempC float64
		idleBit                                            bool
	}
	tests := map[string]struct {
		loads map[Load]float64
		want  want
	}{
		"no load":            {nil, want{0, 0, 0, 0, 0.10, 0, 35, true}},
		"compute":            {map[Load]float64{LoadCompute: 1}, want{1, 0.9, 0.6, 0.3, 0.95, 0.75, 76, false}},
		"memory":             {map[Load]float64{LoadMemory: 1}, want{1, 0.3, 0.05, 0.85, 0.70, 0.90, 64, false}},
		"idle but allocated": {map[Load]float64{LoadIdle: 1}, want{0, 0, 0, 0, 0.10, 0.60, 35, true}},
		"half compute, half memory time-sliced": {
			map[Load]float64{LoadCompute: 0.5, LoadMemory: 0.5}, want{1, 0.6, 0.325, 0.575, 0.825, 0.825, 70, false},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := newClock()
			b := newSim(t, clk, Spec{Model: "h100-sxm-80gb", Count: 1})
			id := uuids(t, b)[0]
			for l, f := range tc.loads {
				if err := b.SetLoad(id, l, f); err != nil {
					t.Fatal(err)
				}
			}
			clk.step(10 * time.Minute) // 20 time constants: settled
			s := sampleOne(t, b, 0)
			w := tc.want
			if !near(s.Utilization, w.util, 0.005) || !near(s.SMActivity, w.sm, 0.011) || !near(s.TensorActivity, w.tensor, 0.011) || !near(s.DRAMActivity, w.dram, 0.011) {
				t.Errorf("activity: util %v sm %v tensor %v dram %v, want %v %v %v %v", *s.Utilization, *s.SMActivity, *s.TensorActivity, *s.DRAMActivity, w.util, w.sm, w.tensor, w.dram)
			}
			if !near(s.PowerWatts, w.powerOfTDP*700, 0.005*700+0.01) {
				t.Errorf("power %v, want %v", *s.PowerWatts, w.powerOfTDP*700)
			}
			if got := float64(*s.MemoryUsedBytes) / float64(80<<30); math.Abs(got-w.memFrac) > 0.001 {
				t.Errorf("memory used %.3f of the GPU, want %.3f", got, w.memFrac)
			}
			if *s.MemoryUsedBytes+*s.MemoryFreeBytes != 80<<30 {
				t.Error("used + free != total")
			}
			if !near(s.TemperatureC, w.tempC, 1) {
				t.Errorf("temperature %v, want about %v", *s.TemperatureC, w.tempC)
			}
			if idle := *s.ClockEventReasons&gpu.ClockEventGPUIdle != 0; idle != w.idleBit {
				t.Errorf("idle bit %v, want %v", idle, w.idleBit)
			}
		})
	}
}

func TestEnergyIntegratesPower(t *testing.T) {
	clk := newClock()
	b := newSim(t, clk, Spec{Model: "h100-sxm-80gb", Count: 1})
	clk.step(100 * time.Second)
	if s := sampleOne(t, b, 0); *s.EnergyMillijoules != 70*100*1000 {
		t.Errorf("idle 100 s: energy %d mJ, want 7000000 (70 W idle)", *s.EnergyMillijoules)
	}
	if err := b.SetLoad(uuids(t, b)[0], LoadCompute, 1); err != nil {
		t.Fatal(err)
	}
	prev := uint64(0)
	for range 50 {
		clk.step(1500 * time.Millisecond)
		e := *sampleOne(t, b, 0).EnergyMillijoules
		if e <= prev {
			t.Fatalf("energy %d after %d: not monotonic", e, prev)
		}
		prev = e
	}
	if want := uint64(7e6 + 665*75*1000); prev != want {
		t.Errorf("energy %d mJ, want %d (75 s at 665 W after the idle)", prev, want)
	}
}

func TestGPMOnlyOnHopperAndNewer(t *testing.T) {
	for model, want := range map[string]bool{"h100-sxm-80gb": true, "b200-hgx": true, "a100-sxm-80gb": false, "l4": false, "t4": false} {
		b, err := New([]Spec{{Model: model, Count: 1}})
		if err != nil {
			t.Fatal(err)
		}
		s := sampleOne(t, b, 0)
		if got := s.SMActivity != nil && s.SMOccupancy != nil && s.TensorActivity != nil && s.DRAMActivity != nil; got != want {
			t.Errorf("%s: GPM present %v, want %v", model, got, want)
		}
		if s.Utilization == nil || s.PowerWatts == nil {
			t.Errorf("%s: utilization or power absent", model)
		}
	}
}

func TestMIGInstanceLoadIsItsShareOfTheGPU(t *testing.T) {
	clk := newClock()
	b := newSim(t, clk, Spec{Model: "h100-sxm-80gb", Count: 1, MIG: "3g.40gb x2"})
	devs, _ := b.Devices(t.Context())
	if err := b.SetLoad(devs[0].MIG[0].UUID, LoadCompute, 1); err != nil {
		t.Fatal(err)
	}
	s := sampleOne(t, b, 0)
	if s.Utilization != nil || s.RemappedRowsCorrectable != nil {
		t.Errorf("MIG GPU reports utilization %v / remapped rows %v, want absent as in NVML", s.Utilization, s.RemappedRowsCorrectable)
	}
	if !near(s.SMActivity, 0.9*3/7, 0.011) {
		t.Errorf("SM activity %v, want about %.3f", *s.SMActivity, 0.9*3/7)
	}
	if err := b.SetLoad("MIG-nope", LoadCompute, 1); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("SetLoad on an unknown UUID = %v", err)
	}
	if err := b.SetLoad(devs[0].UUID, LoadCompute, 1.5); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("SetLoad 1.5 = %v", err)
	}
}

func TestAddAndClearLoad(t *testing.T) {
	clk := newClock()
	b := newSim(t, clk, Spec{Model: "h100-sxm-80gb", Count: 1})
	id := uuids(t, b)[0]
	for range 2 {
		if err := b.AddLoad(id, LoadCompute, 0.25); err != nil {
			t.Fatal(err)
		}
	}
	if s := sampleOne(t, b, 0); !near(s.Utilization, 0.5, 0.001) {
		t.Errorf("two quarter attempts: utilization %v, want 0.5", *s.Utilization)
	}
	if err := b.AddLoad(id, LoadCompute, -0.25); err != nil {
		t.Fatal(err)
	}
	if s := sampleOne(t, b, 0); !near(s.Utilization, 0.25, 0.001) {
		t.Errorf("after one left: utilization %v, want 0.25", *s.Utilization)
	}
	if err := b.ClearLoad(id); err != nil {
		t.Fatal(err)
	}
	if s := sampleOne(t, b, 0); *s.Utilization != 0 || *s.MemoryUsedBytes != 0 {
		t.Errorf("after clear: utilization %v memory %v", *s.Utilization, *s.MemoryUsedBytes)
	}
}

func eventNames(es []gpu.Event) []string {
	var out []string
	for _, e := range es {
		if e.Kind == gpu.EventXID {
			out = append(out, fmt.Sprintf("xid:%d", e.XID))
		} else {
			out = append(out, string(e.Kind))
		}
	}
	return out
}

func TestFaultEvidence(t *testing.T) {
	tests := map[string]struct {
		model      string
		fault      Fault
		load       bool          // run a compute load
		after      time.Duration // time between injection and reading
		wantEvents []string
		check      func(t *testing.T, s gpu.Sample, devs []gpu.Device)
	}{
		"xid 13 raises only the event": {
			model: "h100-sxm-80gb", fault: Fault{Kind: FaultXID, XID: 13}, wantEvents: []string{"xid:13"},
			check: func(t *testing.T, s gpu.Sample, _ []gpu.Device) {
				if *s.ECCUncorrectedVolatile != 0 || *s.RowRemapPending {
					t.Error("xid 13 changed ECC state")
				}
			},
		},
		"single-bit ECC keeps correcting": {
			model: "h100-sxm-80gb", fault: Fault{Kind: FaultECCSingleBit}, after: 25 * time.Second,
			wantEvents: []string{"ecc-sbe", "ecc-sbe", "ecc-sbe"},
			check: func(t *testing.T, s gpu.Sample, _ []gpu.Device) {
				if *s.ECCCorrectedVolatile != 3 || *s.ECCCorrectedAggregate != 3 || *s.ECCUncorrectedVolatile != 0 {
					t.Errorf("corrected %d/%d uncorrected %d, want 3/3 0", *s.ECCCorrectedVolatile, *s.ECCCorrectedAggregate, *s.ECCUncorrectedVolatile)
				}
			},
		},
		"double-bit ECC on Hopper remaps a row": {
			model: "h100-sxm-80gb", fault: Fault{Kind: FaultECCDoubleBit}, wantEvents: []string{"ecc-dbe", "xid:48", "xid:63"},
			check: func(t *testing.T, s gpu.Sample, _ []gpu.Device) {
				if *s.ECCUncorrectedVolatile != 1 || *s.ECCUncorrectedAggregate != 1 || *s.RemappedRowsUncorrectable != 1 || !*s.RowRemapPending {
					t.Errorf("sample %+v lacks the DBE evidence", s)
				}
				if s.RetiredPagesDBE != nil {
					t.Error("Hopper reports retired pages")
				}
			},
		},
		"double-bit ECC on Volta retires a page": {
			model: "v100-sxm2-32gb", fault: Fault{Kind: FaultECCDoubleBit}, wantEvents: []string{"ecc-dbe", "xid:48", "xid:63"},
			check: func(t *testing.T, s gpu.Sample, _ []gpu.Device) {
				if *s.RetiredPagesDBE != 1 || !*s.RetiredPagesPending || s.RemappedRowsUncorrectable != nil {
					t.Errorf("sample %+v lacks the page retirement", s)
				}
			},
		},
		"row remap pending": {
			model: "a100-sxm-80gb", fault: Fault{Kind: FaultRowRemapPending}, wantEvents: []string{"xid:63"},
			check: func(t *testing.T, s gpu.Sample, _ []gpu.Device) {
				if !*s.RowRemapPending || *s.RowRemapFailure || *s.RemappedRowsUncorrectable != 1 {
					t.Errorf("pending %v failure %v unc %d", *s.RowRemapPending, *s.RowRemapFailure, *s.RemappedRowsUncorrectable)
				}
			},
		},
		"row remap failure": {
			model: "a100-sxm-80gb", fault: Fault{Kind: FaultRowRemapFailure}, wantEvents: []string{"xid:64"},
			check: func(t *testing.T, s gpu.Sample, _ []gpu.Device) {
				if !*s.RowRemapFailure {
					t.Error("no remap failure")
				}
			},
		},
		"thermal runaway": {
			model: "h100-sxm-80gb", fault: Fault{Kind: FaultThermalRunaway}, load: true, after: 3 * time.Minute,
			check: func(t *testing.T, s gpu.Sample, _ []gpu.Device) {
				bits := gpu.ClockEventSWThermalSlowdown | gpu.ClockEventHWThermalSlowdown
				if *s.TemperatureC <= HBMSlowdownC || *s.ClockEventReasons&bits != bits || *s.SMClockMHz >= 1980 || *s.ThermalViolationNs == 0 {
					t.Errorf("temp %v reasons %#x sm %v thermal violation %d", *s.TemperatureC, *s.ClockEventReasons, *s.SMClockMHz, *s.ThermalViolationNs)
				}
			},
		},
		"power brake": {
			model: "h100-sxm-80gb", fault: Fault{Kind: FaultPowerBrake}, load: true, after: 10 * time.Second,
			check: func(t *testing.T, s gpu.Sample, _ []gpu.Device) {
				bits := gpu.ClockEventHWPowerBrake | gpu.ClockEventHWSlowdown
				if *s.ClockEventReasons&bits != bits || *s.SMClockMHz != 990 || *s.PowerWatts > 0.6*700 || *s.PowerViolationNs != 10e9 {
					t.Errorf("reasons %#x sm %v power %v violation %d", *s.ClockEventReasons, *s.SMClockMHz, *s.PowerWatts, *s.PowerViolationNs)
				}
			},
		},
		"PCIe link downgrade": {
			model: "h100-sxm-80gb", fault: Fault{Kind: FaultPCIeDowngrade}, after: 10 * time.Second,
			check: func(t *testing.T, s gpu.Sample, _ []gpu.Device) {
				if *s.PCIeGen != 4 || *s.PCIeWidth != 8 || *s.PCIeMaxGen != 5 || *s.PCIeMaxWidth != 16 || *s.PCIeReplayCount != 50 {
					t.Errorf("gen %d/%d width %d/%d replays %d", *s.PCIeGen, *s.PCIeMaxGen, *s.PCIeWidth, *s.PCIeMaxWidth, *s.PCIeReplayCount)
				}
			},
		},
		"one NVLink down": {
			model: "h100-sxm-80gb", fault: Fault{Kind: FaultNVLinkDown}, after: 10 * time.Second, wantEvents: []string{"xid:74"},
			check: func(t *testing.T, s gpu.Sample, devs []gpu.Device) {
				if *s.NVLinkLinksUp != 17 || *s.NVLinkLinksTotal != 18 || *s.NVLinkErrors != 100 {
					t.Errorf("links %d/%d errors %d", *s.NVLinkLinksUp, *s.NVLinkLinksTotal, *s.NVLinkErrors)
				}
				if len(devs[0].NVLinkPeers) != 1 {
					t.Error("one link down lost the peer")
				}
			},
		},
		"every NVLink down isolates the GPU": {
			model: "h100-sxm-80gb", fault: Fault{Kind: FaultNVLinkDown, Links: 18}, wantEvents: []string{"xid:74"},
			check: func(t *testing.T, s gpu.Sample, devs []gpu.Device) {
				if *s.NVLinkLinksUp != 0 || devs[0].NVLinkPeers != nil || devs[1].NVLinkPeers != nil || devs[0].NVLinkDomain != "" {
					t.Errorf("links up %d, devices %+v", *s.NVLinkLinksUp, devs)
				}
			},
		},
		"fallen off the bus": {
			model: "h100-sxm-80gb", fault: Fault{Kind: FaultFallenOffBus}, wantEvents: []string{"xid:79"},
			check: func(t *testing.T, s gpu.Sample, devs []gpu.Device) {
				if len(devs) != 1 || devs[0].Index != 1 || s.UUID != devs[0].UUID {
					t.Errorf("devices %+v, first sample %s", devs, s.UUID)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := newClock()
			b := newSim(t, clk, Spec{Model: tc.model, Count: 2})
			if tc.load {
				if err := b.SetLoad(uuids(t, b)[0], LoadCompute, 1); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Inject(0, tc.fault); err != nil {
				t.Fatal(err)
			}
			clk.step(tc.after)
			events, err := b.Events(t.Context(), 0)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantEvents, eventNames(events)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			devs, _ := b.Devices(t.Context())
			samples, _ := b.Sample(t.Context())
			tc.check(t, samples[0], devs)
			if got, _ := b.Faults(0); len(got) != 1 && tc.fault.Kind != FaultXID {
				t.Errorf("active faults %v, want the injected one", got)
			}
			// Clear ends it: the GPU is back, healthy readings return.
			if err := b.Clear(0); err != nil {
				t.Fatal(err)
			}
			clk.step(10 * time.Minute)
			devs, _ = b.Devices(t.Context())
			s := sampleOne(t, b, 0)
			if len(devs) != 2 || *s.ClockEventReasons&^gpu.ClockEventGPUIdle != 0 || *s.PCIeGen != *s.PCIeMaxGen ||
				(s.NVLinkLinksUp != nil && *s.NVLinkLinksUp != *s.NVLinkLinksTotal) || (s.RowRemapPending != nil && *s.RowRemapPending) ||
				(s.ECCCorrectedVolatile != nil && *s.ECCCorrectedVolatile != 0) {
				t.Errorf("after Clear: devices %d, sample %+v", len(devs), s)
			}
		})
	}
}

func TestInjectErrors(t *testing.T) {
	b, err := New([]Spec{{Model: "v100-sxm2-32gb", Count: 1}, {Model: "l4", Count: 1}, {Model: "rtx-4090", Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		index int
		fault Fault
		want  error
	}{
		"no such GPU":                 {5, Fault{Kind: FaultXID, XID: 13}, gpufleet.ErrNotFound},
		"negative index":              {-1, Fault{Kind: FaultPowerBrake}, gpufleet.ErrNotFound},
		"row remap on Volta":          {0, Fault{Kind: FaultRowRemapPending}, gpufleet.ErrUnsupported},
		"NVLink on a PCIe card":       {1, Fault{Kind: FaultNVLinkDown}, gpufleet.ErrUnsupported},
		"ECC on GeForce":              {2, Fault{Kind: FaultECCDoubleBit}, gpufleet.ErrUnsupported},
		"more links than the GPU has": {0, Fault{Kind: FaultNVLinkDown, Links: 7}, gpufleet.ErrInvalid},
		"xid zero":                    {0, Fault{Kind: FaultXID}, gpufleet.ErrInvalid},
		"unknown kind":                {0, Fault{Kind: "melted"}, gpufleet.ErrInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := b.Inject(tc.index, tc.fault); !errors.Is(err, tc.want) {
				t.Errorf("Inject = %v, want %v", err, tc.want)
			}
		})
	}
	if err := b.Clear(9); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("Clear(9) = %v", err)
	}
	if err := b.Inject(1, Fault{Kind: FaultFallenOffBus}); err != nil {
		t.Fatal(err)
	}
	if err := b.Inject(1, Fault{Kind: FaultPowerBrake}); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("Inject into a GPU off the bus = %v", err)
	}
}

func TestAbsentReadingsByModel(t *testing.T) {
	b, err := New([]Spec{{Model: "rtx-4090", Count: 1}, {Model: "l4", Count: 1}, {Model: "v100-sxm2-32gb", Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ss, _ := b.Sample(t.Context())
	geforce, l4, v100 := ss[0], ss[1], ss[2]
	if geforce.ECCCorrectedVolatile != nil || geforce.RemappedRowsCorrectable != nil || geforce.MemoryTemperatureC != nil {
		t.Error("GeForce reports ECC, remapped rows or HBM temperature")
	}
	if l4.ECCCorrectedVolatile == nil || l4.RemappedRowsCorrectable == nil || l4.NVLinkLinksTotal != nil || l4.MemoryTemperatureC != nil {
		t.Error("L4: want ECC and row remapping, no NVLink, no HBM temperature")
	}
	if v100.RetiredPagesDBE == nil || v100.RemappedRowsCorrectable != nil || v100.MemoryTemperatureC == nil || *v100.NVLinkLinksTotal != 6 {
		t.Error("V100: want retired pages, no row remapping, HBM temperature, 6 NVLinks")
	}
}

func TestParseFaultAndLoad(t *testing.T) {
	good := map[string]Fault{
		"xid:13":          {Kind: FaultXID, XID: 13},
		"ECC-DBE":         {Kind: FaultECCDoubleBit},
		"nvlink-down":     {Kind: FaultNVLinkDown},
		"nvlink-down:18":  {Kind: FaultNVLinkDown, Links: 18},
		"thermal-runaway": {Kind: FaultThermalRunaway},
	}
	for in, want := range good {
		got, err := ParseFault(in)
		if err != nil || got != want {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if again, _ := ParseFault(got.String()); again != got {
			t.Errorf("%+v does not round-trip through %q", got, got.String())
		}
	}
	for _, in := range []string{"xid", "xid:abc", "xid:0", "ecc-sbe:3", "melted"} {
		if _, err := ParseFault(in); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("ParseFault(%q) = %v, want ErrInvalid", in, err)
		}
	}
	if l, err := ParseLoad(" Memory "); err != nil || l != LoadMemory {
		t.Errorf("ParseLoad = %v, %v", l, err)
	}
	if _, err := ParseLoad("busy"); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("ParseLoad(busy) = %v", err)
	}
}

func TestEventsWaitsForAnInjection(t *testing.T) {
	b, err := New([]Spec{{Model: "h100-sxm-80gb", Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []gpu.Event)
	go func() {
		es, _ := b.Events(t.Context(), 10*time.Second)
		done <- es
	}()
	time.Sleep(20 * time.Millisecond)
	if err := b.Inject(0, Fault{Kind: FaultXID, XID: 31}); err != nil {
		t.Fatal(err)
	}
	select {
	case es := <-done:
		if diff := cmp.Diff([]string{"xid:31"}, eventNames(es)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Events did not wake on the injection")
	}
}

func TestInterconnectAndVideoReadings(t *testing.T) {
	clk := newClock()
	b := newSim(t, clk, Spec{Model: "h100-sxm-80gb", Count: 2}, Spec{Model: "l4", Count: 1})
	ids := uuids(t, b)
	for _, i := range []int{0, 2} {
		if err := b.SetLoad(ids[i], LoadCompute, 1); err != nil {
			t.Fatal(err)
		}
	}
	clk.step(10 * time.Second)
	h100, idle, l4 := sampleOne(t, b, 0), sampleOne(t, b, 1), sampleOne(t, b, 2)
	// 2% of a PCIe 5 x16 link (3.9385 GB/s a lane) in, half that out.
	if !near(h100.PCIeRxBytesPerSecond, 0.02*3938.5e6*16, 1) || !near(h100.PCIeTxBytesPerSecond, 0.01*3938.5e6*16, 1) {
		t.Errorf("H100 PCIe rx %v tx %v", *h100.PCIeRxBytesPerSecond, *h100.PCIeTxBytesPerSecond)
	}
	if !near(l4.PCIeRxBytesPerSecond, 0.02*1969.2e6*16, 1) {
		t.Errorf("L4 (PCIe 4) rx %v", *l4.PCIeRxBytesPerSecond)
	}
	// 30% of 450 GB/s each way for 10 s.
	if h100.NVLinkTxBytes == nil || *h100.NVLinkTxBytes != 1.35e12 || *h100.NVLinkRxBytes != 1.35e12 {
		t.Errorf("H100 NVLink bytes %v/%v, want 1.35e12", h100.NVLinkTxBytes, h100.NVLinkRxBytes)
	}
	if *idle.NVLinkTxBytes != 0 || *idle.PCIeRxBytesPerSecond != 0 || l4.NVLinkTxBytes != nil {
		t.Errorf("idle H100 NVLink %d PCIe %v; L4 NVLink %v (want 0, 0, absent)", *idle.NVLinkTxBytes, *idle.PCIeRxBytesPerSecond, l4.NVLinkTxBytes)
	}
	if !near(h100.EncoderUtilization, 0, 0) || !near(h100.DecoderUtilization, 0, 0) {
		t.Errorf("video engines %v %v, want 0", h100.EncoderUtilization, h100.DecoderUtilization)
	}
	// With every link down the counters stop.
	if err := b.Inject(0, Fault{Kind: FaultNVLinkDown, Links: 18}); err != nil {
		t.Fatal(err)
	}
	clk.step(10 * time.Second)
	if s := sampleOne(t, b, 0); *s.NVLinkTxBytes != 1.35e12 {
		t.Errorf("NVLink bytes grew to %d with every link down", *s.NVLinkTxBytes)
	}
}

func TestMIGInstanceMemory(t *testing.T) {
	clk := newClock()
	b := newSim(t, clk, Spec{Model: "h100-sxm-80gb", Count: 1, MIG: "3g.40gb x1; 1g.10gb x2"})
	devs, _ := b.Devices(t.Context())
	if err := b.SetLoad(devs[0].MIG[0].UUID, LoadCompute, 1); err != nil {
		t.Fatal(err)
	}
	s := sampleOne(t, b, 0)
	if len(s.MIG) != 3 {
		t.Fatalf("MIG samples %+v, want 3", s.MIG)
	}
	for i, m := range s.MIG {
		want := int64(0)
		if i == 0 {
			want = int64(0.75 * float64(devs[0].MIG[0].MemoryBytes))
		}
		if m.UUID != devs[0].MIG[i].UUID || *m.MemoryUsedBytes != want || *m.MemoryUsedBytes+*m.MemoryFreeBytes != devs[0].MIG[i].MemoryBytes {
			t.Errorf("instance %d: %s used %d free %d, want used %d", i, m.UUID, *m.MemoryUsedBytes, *m.MemoryFreeBytes, want)
		}
	}
	if ids := []int{devs[0].MIG[0].GPUInstanceID, devs[0].MIG[1].GPUInstanceID, devs[0].MIG[2].GPUInstanceID}; !slices.Equal(ids, []int{1, 7, 8}) {
		t.Errorf("GPU instance ids %v, want [1 7 8] as the driver numbers them", ids)
	}
}

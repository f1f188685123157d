package stack

import (
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
)

func cc(s string) gpufleet.ComputeCapability {
	c, err := gpufleet.ParseComputeCapability(s)
	if err != nil {
		panic(err)
	}
	return c
}

// TestCheck runs the rules over stacks whose verdicts the sources state.
func TestCheck(t *testing.T) {
	tests := map[string]struct {
		v    gpufleet.StackVersions
		ccs  []string
		want []string // "severity component: words in the message"; none for a clean stack
	}{
		"a matched H100 stack": {
			gpufleet.StackVersions{gpufleet.StackDriver: "550.54.15", gpufleet.StackCUDA: "12.4", gpufleet.StackCUDAToolkit: "12.4.1", gpufleet.StackTorch: "2.5.1+cu124", gpufleet.StackFabricManager: "550.54.15", gpufleet.StackNCCL: "2.21.5"},
			[]string{"9.0"}, nil},
		"a toolkit newer than the driver, same major": {
			gpufleet.StackVersions{gpufleet.StackDriver: "535.104.05", gpufleet.StackCUDAToolkit: "12.4"}, []string{"9.0"},
			[]string{"risk driver: only through minor version compatibility"}},
		"a toolkit of a newer major than the driver": {
			gpufleet.StackVersions{gpufleet.StackDriver: "535.104.05", gpufleet.StackCUDAToolkit: "13.0"}, []string{"9.0"},
			[]string{"incompatible driver: needs driver 580 or later, 580.65.06 for all its features"}},
		"below the major's floor": {
			gpufleet.StackVersions{gpufleet.StackDriver: "520.61.05", gpufleet.StackCUDAToolkit: "12.1"}, []string{"8.0"},
			[]string{"incompatible driver: needs driver 525.60.13 or later"}},
		"hopper on a toolkit that predates it": {
			gpufleet.StackVersions{gpufleet.StackDriver: "525.85.12", gpufleet.StackCUDAToolkit: "11.7"}, []string{"9.0"},
			[]string{"incompatible cuda_toolkit: cannot run on Hopper (compute capability 9.0, sm_90): it needs CUDA 11.8 or later"}},
		"blackwell under a cu124 pytorch and an old driver": {
			gpufleet.StackVersions{gpufleet.StackDriver: "550.54.15", gpufleet.StackTorch: "2.5.1+cu124"}, []string{"10.0"},
			[]string{"incompatible cuda_toolkit: PyTorch 2.5.1+cu124 (a CUDA 12.4 build) cannot run on Blackwell", "incompatible driver: Blackwell (compute capability 10.0) needs driver R570"}},
		"volta on CUDA 13": {
			gpufleet.StackVersions{gpufleet.StackDriver: "580.65.06", gpufleet.StackCUDAToolkit: "13.0"}, []string{"7.0"},
			[]string{"incompatible cuda_toolkit: no longer supports Volta (compute capability 7.0): CUDA 13.0 removed it"}},
		"volta past its last driver": {
			gpufleet.StackVersions{gpufleet.StackDriver: "590.44.01"}, []string{"7.0"},
			[]string{"incompatible driver: past the last branch for Volta"}},
		"fabric manager off the driver": {
			gpufleet.StackVersions{gpufleet.StackDriver: "550.54.15", gpufleet.StackFabricManager: "550.54.14"}, []string{"9.0"},
			[]string{"incompatible fabric_manager: does not match driver 550.54.15"}},
		"NCCL 2.18.1 on hopper": {
			gpufleet.StackVersions{gpufleet.StackNCCL: "2.18.1"}, []string{"9.0"}, []string{"risk nccl: LL128 can corrupt data"}},
		"NCCL 2.18.1 on ampere": {gpufleet.StackVersions{gpufleet.StackNCCL: "2.18.1"}, []string{"8.0"}, nil},
		"NCCL 2.19.3": {
			gpufleet.StackVersions{gpufleet.StackNCCL: "2.19.3"}, []string{"8.0"}, []string{"risk nccl: all-to-all connection setup can deadlock"}},
		"a pytorch build that was never published": {
			gpufleet.StackVersions{gpufleet.StackTorch: "2.7.0+cu124", gpufleet.StackDriver: "550.54.15"}, []string{"8.0"},
			[]string{"risk torch: PyTorch 2.7 has no official CUDA 12.4 wheel"}},
		"no driver, the driver's CUDA too old": {
			gpufleet.StackVersions{gpufleet.StackCUDA: "11.8", gpufleet.StackCUDAToolkit: "12.1"}, []string{"8.0"},
			[]string{"incompatible cuda: CUDA toolkit 12.1 needs a CUDA 12 driver; the driver supports CUDA 11.8"}},
		"an unreadable version": {gpufleet.StackVersions{gpufleet.StackDriver: "five-fifty"}, nil, []string{`risk driver: driver "five-fifty" is not a version`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ccs []gpufleet.ComputeCapability
			for _, c := range tc.ccs {
				ccs = append(ccs, cc(c))
			}
			got := Check(tc.v, ccs)
			if len(got) != len(tc.want) {
				t.Fatalf("%d findings %+v, want %d: %q", len(got), got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				head, words, _ := strings.Cut(w, ": ")
				f := got[i]
				if string(f.Severity)+" "+string(f.Component) != head || !strings.Contains(f.Message, words) {
					t.Errorf("finding %d = %s %s: %q; want %s: ...%s...", i, f.Severity, f.Component, f.Message, head, words)
				}
				if f.Source == "" && !strings.Contains(w, "not a version") {
					t.Errorf("finding %d has no source", i)
				}
			}
		})
	}
}

// TestRulesData checks the tables themselves: every version parses, each
// toolkit row's driver is at least its major's floor and no older than
// the row before, and every compute capability appears once.
func TestRulesData(t *testing.T) {
	var prev gpufleet.SoftwareVersion
	for _, row := range toolkitDrivers {
		tk, dr := gpufleet.MustSoftwareVersion(row.toolkit), gpufleet.MustSoftwareVersion(row.driver)
		if _, ok := minorCompatDrivers[tk.Part(0)]; !ok {
			t.Errorf("toolkit %s: no minor-version floor for its major", tk)
		}
		if dr.Compare(prev) < 0 {
			t.Errorf("toolkit %s: driver %s older than the row before (%s)", tk, dr, prev)
		}
		prev = dr
	}
	seen := map[string]bool{}
	for _, a := range archs {
		if seen[a.cc] {
			t.Errorf("compute capability %s listed twice", a.cc)
		}
		seen[a.cc] = true
		cc(a.cc)
	}
	for _, k := range knownBad {
		MustConstraint(k.versions)
		if k.source == "" {
			t.Errorf("%s %s: no source", k.component, k.versions)
		}
	}
}

// FuzzCheck runs the rules over any versions: never a panic, and every
// finding in words.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"550.54.15", "2.5.1+cu124", "13.0", "2.18.1", "", "G520.0200.00.05", "999999999.1"} {
		f.Add(s, 9, 0)
	}
	f.Fuzz(func(t *testing.T, ver string, major, minor int) {
		c := gpufleet.ComputeCapability{Major: major, Minor: minor}
		for _, x := range Check(gpufleet.StackVersions{gpufleet.StackDriver: ver, gpufleet.StackCUDA: ver, gpufleet.StackCUDAToolkit: ver,
			gpufleet.StackTorch: ver, gpufleet.StackNCCL: ver, gpufleet.StackFabricManager: ver}, []gpufleet.ComputeCapability{c}) {
			if x.Message == "" || (x.Severity != Incompatible && x.Severity != Risk) {
				t.Fatalf("finding %+v", x)
			}
		}
	})
}

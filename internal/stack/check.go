package stack

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// Severity says how bad a finding is.
type Severity string

// Severities.
const (
	// Incompatible: the combination cannot work as intended (a toolkit
	// newer than the driver runs, a card the toolkit does not compile
	// for, a fabric manager that refuses its driver).
	Incompatible Severity = "incompatible"
	// Risk: it works, with a published defect or a reduced feature set.
	Risk Severity = "risk"
)

// Finding is one rule's verdict on a node's stack, in words, with the
// rule's source.
type Finding struct {
	Severity  Severity                `json:"severity"`
	Component gpufleet.StackComponent `json:"component"`
	Message   string                  `json:"message"`
	Source    string                  `json:"source"`
}

// judged are the components the rules read; firmware and the kernel are
// pinned by named stacks, not judged.
var judged = []gpufleet.StackComponent{gpufleet.StackDriver, gpufleet.StackCUDA, gpufleet.StackCUDAToolkit,
	gpufleet.StackTorch, gpufleet.StackNCCL, gpufleet.StackFabricManager}

// Check evaluates a node's versions against the rules for the compute
// capabilities of its GPUs. It returns the findings in a fixed order
// (incompatible first); none means the rules know nothing against the
// stack. Components the node does not report are not judged, and
// versions that do not parse are findings themselves.
func Check(v gpufleet.StackVersions, ccs []gpufleet.ComputeCapability) []Finding {
	var out []Finding
	parsed := map[gpufleet.StackComponent]gpufleet.SoftwareVersion{}
	for _, c := range judged {
		raw := strings.TrimSpace(v[c])
		if raw == "" {
			continue
		}
		ver, err := gpufleet.ParseSoftwareVersion(raw)
		if err != nil {
			out = append(out, Finding{Risk, c, fmt.Sprintf("%s %q is not a version the rules can read", c, raw), ""})
			continue
		}
		parsed[c] = ver
	}
	driver, hasDriver := parsed[gpufleet.StackDriver]

	// The CUDA the software was built for: the toolkit, else a PyTorch
	// wheel's build ("+cu124").
	type built struct {
		what string
		v    gpufleet.SoftwareVersion
	}
	var builds []built
	if t, ok := parsed[gpufleet.StackCUDAToolkit]; ok {
		builds = append(builds, built{"CUDA toolkit " + t.String(), t})
	}
	if t, ok := parsed[gpufleet.StackTorch]; ok {
		if b, ok := torchCUDA(t); ok {
			builds = append(builds, built{fmt.Sprintf("PyTorch %s (a CUDA %s build)", t, b), b})
			if list, known := torchBuilds[minor(t)]; known && !slices.Contains(list, minor(b)) {
				out = append(out, Finding{Risk, gpufleet.StackTorch, fmt.Sprintf("PyTorch %s has no official CUDA %s wheel (its builds: CUDA %s)", minor(t), minor(b), strings.Join(list, ", ")), SourceTorch})
			}
		}
	}
	for _, b := range builds {
		if hasDriver {
			out = append(out, driverFindings(b.what, b.v, driver)...)
		} else if cuda, ok := parsed[gpufleet.StackCUDA]; ok && b.v.Compare(cuda) > 0 && b.v.Part(0) != cuda.Part(0) {
			out = append(out, Finding{Incompatible, gpufleet.StackCUDA, fmt.Sprintf("%s needs a CUDA %d driver; the driver supports CUDA %s", b.what, b.v.Part(0), cuda), SourceMinorCompat})
		}
		for _, cc := range ccs {
			out = append(out, archFindings(b.what, b.v, cc)...)
		}
	}
	if hasDriver {
		for _, cc := range ccs {
			a, ok := arch(cc)
			if !ok {
				continue
			}
			if a.lastDriver != "" && driver.Part(0) > gpufleet.MustSoftwareVersion(a.lastDriver).Part(0) {
				out = append(out, Finding{Incompatible, gpufleet.StackDriver, fmt.Sprintf("driver %s is past the last branch for %s (compute capability %s): R%s", driver, a.name, cc, a.lastDriver), SourceDriverBranch})
			}
			if a.firstDriver != "" && driver.Part(0) < gpufleet.MustSoftwareVersion(a.firstDriver).Part(0) {
				out = append(out, Finding{Incompatible, gpufleet.StackDriver, fmt.Sprintf("%s (compute capability %s) needs driver R%s or later; the node has %s", a.name, cc, a.firstDriver, driver), SourceDriverBranch})
			}
		}
		if fm, ok := parsed[gpufleet.StackFabricManager]; ok && fm.Compare(driver) != 0 {
			out = append(out, Finding{Incompatible, gpufleet.StackFabricManager, fmt.Sprintf("fabric manager %s does not match driver %s: it refuses to start, and NVSwitch peers stay unreachable", fm, driver), SourceFabricManager})
		}
	}
	for _, k := range knownBad {
		ver, ok := parsed[k.component]
		if !ok || !MustConstraint(k.versions).Allows(ver) {
			continue
		}
		if len(k.ccs) > 0 && !slices.ContainsFunc(ccs, func(c gpufleet.ComputeCapability) bool { return slices.Contains(k.ccs, c.String()) }) {
			continue
		}
		out = append(out, Finding{Risk, k.component, fmt.Sprintf("%s %s: %s", k.component, ver, k.what), k.source})
	}
	slices.SortStableFunc(out, func(a, b Finding) int {
		if a.Severity == b.Severity {
			return 0
		}
		if a.Severity == Incompatible {
			return -1
		}
		return 1
	})
	return slices.CompactFunc(out, func(a, b Finding) bool { return a == b })
}

// driverFindings checks that the driver runs what was built for CUDA b:
// at or above the toolkit release's own driver, or within its major's
// minor version compatibility (a risk: no PTX JIT of newer code).
func driverFindings(what string, b, driver gpufleet.SoftwareVersion) []Finding {
	need, ok := toolkitDriver(b)
	floor, hasFloor := minorCompatDrivers[b.Part(0)]
	switch {
	case !hasFloor:
		return nil // a major the rules do not cover
	case ok && driver.Compare(need) >= 0:
		return nil
	case driver.Compare(gpufleet.MustSoftwareVersion(floor)) >= 0:
		if !ok {
			return nil // a release the table does not list: its major's floor is all that is known
		}
		return []Finding{{Risk, gpufleet.StackDriver, fmt.Sprintf("%s runs on driver %s only through minor version compatibility (its own driver is %s): code that needs PTX JIT or newer driver features fails", what, driver, need), SourceMinorCompat}}
	}
	own := ""
	if ok {
		own = fmt.Sprintf(", %s for all its features", need)
	}
	return []Finding{{Incompatible, gpufleet.StackDriver, fmt.Sprintf("%s needs driver %s or later%s; the node has %s", what, floor, own, driver), SourceMinorCompat + "; " + SourceToolkitDrivers}}
}

// archFindings checks that CUDA b compiles for the compute capability.
func archFindings(what string, b gpufleet.SoftwareVersion, cc gpufleet.ComputeCapability) []Finding {
	a, ok := arch(cc)
	if !ok {
		return nil
	}
	if a.firstToolkit != "" && b.Compare(gpufleet.MustSoftwareVersion(a.firstToolkit)) < 0 {
		return []Finding{{Incompatible, gpufleet.StackCUDAToolkit, fmt.Sprintf("%s cannot run on %s (compute capability %s, sm_%d%d): it needs CUDA %s or later", what, a.name, cc, cc.Major, cc.Minor, a.firstToolkit), SourceArchMatrix}}
	}
	if a.dropped != "" && b.Compare(gpufleet.MustSoftwareVersion(a.dropped)) >= 0 {
		return []Finding{{Incompatible, gpufleet.StackCUDAToolkit, fmt.Sprintf("%s no longer supports %s (compute capability %s): CUDA %s removed it", what, a.name, cc, a.dropped), SourceArchDrops}}
	}
	return nil
}

// arch finds a compute capability's support window.
func arch(cc gpufleet.ComputeCapability) (archSupport, bool) {
	i := slices.IndexFunc(archs, func(a archSupport) bool { return a.cc == cc.String() })
	if i < 0 {
		return archSupport{}, false
	}
	return archs[i], true
}

// toolkitDriver is the driver that toolkit release t ships with: the
// newest release of t's major.minor at or below t.
func toolkitDriver(t gpufleet.SoftwareVersion) (gpufleet.SoftwareVersion, bool) {
	var found gpufleet.SoftwareVersion
	for _, row := range toolkitDrivers {
		r := gpufleet.MustSoftwareVersion(row.toolkit)
		if r.Part(0) == t.Part(0) && r.Part(1) == t.Part(1) && r.Compare(t) <= 0 {
			found = gpufleet.MustSoftwareVersion(row.driver)
		}
	}
	if found.IsZero() {
		// An unknown patch below the first listed (11.0.0): the first.
		for _, row := range toolkitDrivers {
			r := gpufleet.MustSoftwareVersion(row.toolkit)
			if r.Part(0) == t.Part(0) && r.Part(1) == t.Part(1) {
				return gpufleet.MustSoftwareVersion(row.driver), true
			}
		}
		return gpufleet.SoftwareVersion{}, false
	}
	return found, true
}

// torchCUDA is the CUDA version of a PyTorch wheel's build ("+cu124" is
// 12.4, "+cu118" 11.8), when its suffix says.
func torchCUDA(t gpufleet.SoftwareVersion) (gpufleet.SoftwareVersion, bool) {
	s, ok := strings.CutPrefix(t.Suffix(), "+cu")
	if !ok || len(s) < 3 || len(s) > 4 {
		return gpufleet.SoftwareVersion{}, false
	}
	v, err := gpufleet.ParseSoftwareVersion(s[:len(s)-1] + "." + s[len(s)-1:])
	return v, err == nil
}

// minor writes MAJOR.MINOR.
func minor(v gpufleet.SoftwareVersion) string { return fmt.Sprintf("%d.%d", v.Part(0), v.Part(1)) }

// MustConstraint parses a constraint known to be valid (the rules' data).
func MustConstraint(s string) gpufleet.VersionConstraint {
	c, err := gpufleet.ParseVersionConstraint(s)
	if err != nil {
		panic(err)
	}
	return c
}

// Dropped says, for a GPU whose architecture newer CUDA no longer
// supports, which release removed it and the last driver branch that
// runs it (SourceArchDrops); ok is false while every release does.
func Dropped(cc gpufleet.ComputeCapability) (note string, ok bool) {
	a, found := arch(cc)
	if !found || a.dropped == "" {
		return "", false
	}
	note = fmt.Sprintf("CUDA %s removed %s (compute capability %s)", a.dropped, a.name, cc)
	if a.lastDriver != "" {
		note += fmt.Sprintf("; driver branch %s is the last to support it", a.lastDriver)
	}
	return note, true
}

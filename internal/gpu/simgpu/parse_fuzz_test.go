package simgpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// The flag parsers of the simulated backend (--sim-fault, --sim-load and
// the MIG part of --sim-gpus): every error wraps gpufleet.ErrInvalid and
// what they accept reads back the same from its own spelling.

func FuzzParseFault(f *testing.F) {
	for _, k := range FaultKinds {
		f.Add(string(k))
	}
	for _, s := range []string{
		"xid:13", "XID:79", " nvlink-down:18 ", "nvlink-down", "Thermal-Runaway",
		"xid", "xid:", "xid:0", "xid:-1", "xid:+5", "xid:1_000", "xid: 5", "xid:99999999999999999999",
		"ecc-dbe:1", "nvlink-down:0", ":", "", "xid:13:14", "fallen-off-bus\x00", "ecc-sbe\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fault, err := ParseFault(s)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("ParseFault(%q) = %v: does not wrap ErrInvalid", s, err)
			}
			return
		}
		if !slices.Contains(FaultKinds, fault.Kind) {
			t.Fatalf("ParseFault(%q) = %+v: unknown kind", s, fault)
		}
		if (fault.Kind == FaultXID) != (fault.XID > 0) || fault.Links < 0 || (fault.Links > 0 && fault.Kind != FaultNVLinkDown) {
			t.Fatalf("ParseFault(%q) = %+v: argument on the wrong kind", s, fault)
		}
		again, err := ParseFault(fault.String())
		if err != nil || again != fault {
			t.Fatalf("ParseFault(%q) = %+v, spelled %q, reads back as %+v, %v", s, fault, fault.String(), again, err)
		}
	})
}

func FuzzParseLoad(f *testing.F) {
	for _, s := range []string{"compute", "memory", "idle", " Compute ", "IDLE", "", "comp", "compute\x00", "memory idle", "ıdle"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLoad(s)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("ParseLoad(%q) = %v: does not wrap ErrInvalid", s, err)
			}
			return
		}
		if _, ok := profiles[l]; !ok {
			t.Fatalf("ParseLoad(%q) = %q: no profile", s, l)
		}
		if again, err := ParseLoad(string(l)); err != nil || again != l {
			t.Fatalf("ParseLoad(%q) = %q reads back as %q, %v", s, l, again, err)
		}
	})
}

// migModels are the catalog models with MIG profiles, the ones a layout
// can be parsed against.
func migModels(t testing.TB) []catalog.GPU {
	var out []catalog.GPU
	for _, g := range catalog.Default().All() {
		if len(g.MIGProfiles) > 0 && g.Vendor == "NVIDIA" {
			out = append(out, g)
		}
	}
	if len(out) == 0 {
		t.Fatal("the catalog has no MIG-capable model")
	}
	return out
}

// spellMIG writes a layout back in parseMIG's syntax with sep before each
// count ("x", " x", "×", "*"...).
func spellMIG(layout []migLayout, sep string) string {
	items := make([]string, len(layout))
	for i, l := range layout {
		items[i] = fmt.Sprintf("%s%s%d", l.profile.Name, sep, l.count)
	}
	return strings.Join(items, "; ")
}

func FuzzParseMIG(f *testing.F) {
	models := migModels(f)
	for _, s := range []string{
		"1g.10gb x7", "3g.40gb x2; 1g.10gb x1", "7g.80gb", "1g.10gb+me", "MIG-1g.10gb x2", "1g.10gb*7", "1g.10gb ×7",
		"1g.10gb×3", "1g.10gb x 7", "1g.10gbx7", "1g.10gb x0", "1g.10gb x8", "1g.10gb x-1", "1g.10gb x99999999999999999999",
		"3g.40gb x2; 2g.20gb x1", ";", "", " ; 4g.40gb ;", "1g.18gb x7", "2g.35gb x3", "1g.5gb x7", "x7", "×",
	} {
		for i := range 3 {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, model uint8, s string) {
		g := models[int(model)%len(models)]
		layout, err := parseMIG(g, s)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("parseMIG(%s, %q) = %v: does not wrap ErrInvalid", g.ID, s, err)
			}
			return
		}
		used, mem := 0, int64(0)
		for _, l := range layout {
			p, ok := g.MIG(l.profile.Name)
			if !ok || p != l.profile || l.count < 1 || l.count > p.MaxInstances {
				t.Fatalf("parseMIG(%s, %q) = %+v: not a profile of the model or a count it cannot hold", g.ID, s, layout)
			}
			used += p.Slices * l.count
			mem += p.MemoryBytes * int64(l.count)
		}
		if len(layout) == 0 || used > 7 || mem > g.MemoryBytes {
			t.Fatalf("parseMIG(%s, %q) = %+v: %d slices, %d bytes", g.ID, s, layout, used, mem)
		}
		// Every spelling of the counts reads back as the same layout.
		for _, sep := range []string{" x", "x", " x ", "×", " ×", "*", " * "} {
			spelled := spellMIG(layout, sep)
			again, err := parseMIG(g, spelled)
			if err != nil || !slices.Equal(again, layout) {
				t.Fatalf("parseMIG(%s, %q) = %+v, spelled %q, reads back as %+v, %v", g.ID, s, layout, spelled, again, err)
			}
		}
		// The backend builds the GPU with exactly those instances.
		b, err := New([]Spec{{Model: g.ID, Count: 1, MIG: s}})
		if err != nil {
			t.Fatalf("New with MIG %q on %s: %v", s, g.ID, err)
		}
		want := 0
		for _, l := range layout {
			want += l.count
		}
		if got := len(b.devs[0].info.MIG); got != want || !b.devs[0].info.MIGMode {
			t.Fatalf("New with MIG %q on %s: %d instances, want %d", s, g.ID, got, want)
		}
		for _, m := range b.devs[0].info.MIG {
			if w := b.byUUID[m.UUID].weight; w <= 0 || w > 1 {
				t.Fatalf("MIG instance %s weighs %g of its GPU", m.Profile, w)
			}
		}
	})
}

func FuzzMIGSlices(f *testing.F) {
	for _, s := range []string{"1g.10gb", "3g.40gb", "7g.80gb", "8g.192gb", "1g.10gb+me", "g.10gb", "", "0g", "07g.1gb",
		"99999999999999999999g.1gb", "18446744073709551617g", "９g"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, profile string) {
		n := migSlices(profile)
		if n < 1 || n > 7 {
			t.Fatalf("migSlices(%q) = %d, want 1 to 7", profile, n)
		}
		// A well-formed profile weighs what the agent's accounting and the
		// scheduler give it (gpufleet.MIGProfile.Share).
		if p, err := gpufleet.ParseMIGProfile(profile); err == nil && p.Name == profile {
			if got, want := float64(n)/7, p.Share(); got != want {
				t.Fatalf("migSlices(%q)/7 = %g, the profile's share is %g", profile, got, want)
			}
		}
	})
}

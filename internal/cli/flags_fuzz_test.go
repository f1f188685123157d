package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// spellSimGPUs writes specs back as a --sim-gpus value. It is exact for
// specs whose MIG layout names catalog profiles (no "; " or " x" inside).
func spellSimGPUs(specs []simgpu.Spec) string {
	items := make([]string, len(specs))
	for i, s := range specs {
		items[i] = fmt.Sprintf("%s:%d", s.Model, s.Count)
		if s.MIG == "" {
			continue
		}
		var layout []string
		for it := range strings.SplitSeq(s.MIG, "; ") {
			i := strings.LastIndex(it, " x")
			layout = append(layout, it[:i]+"*"+it[i+2:])
		}
		items[i] += ":mig=" + strings.Join(layout, "+")
		if s.MIGCount > 0 {
			items[i] += fmt.Sprintf("@0-%d", s.MIGCount-1)
		}
	}
	return strings.Join(items, ",")
}

// FuzzParseSimGPUs: --sim-gpus is refused with ErrInvalid or gives specs
// within a node's limits that the simulated backend builds (or refuses
// with a clear sentinel) GPU for GPU, and that read back the same.
func FuzzParseSimGPUs(f *testing.F) {
	for _, s := range []string{
		"h100-sxm-80gb:8", "l4:4, a100-sxm-80gb:2", "h200-sxm-141gb:8:mig=1g.18gb*7@0-1", "h100-sxm-80gb:2:mig=3g.40gb*2+1g.10gb@1",
		"a100-sxm-80gb:2:mig=1g.10gb*7", "h100-sxm-80gb:1:mig=1g.10gb+me", "h100-sxm-80gb:1:mig=1g.10gb+me*1+1g.10gb*2",
		"h100-sxm-80gb:1:mig=3g.40gb*2 + mig-1g.10gb", "h100-sxm-80gb:2:mig=7g.80gb@2", "l4", "l4:0", "l4:-1", "l4:1:foo", "l4:1:mig=",
		"h200-sxm-141gb:2:mig=1g.18gb*7@0-3", "", ",", "l4:99999999999999999999", "l4:1000000000", "l4:256", "l4:200,t4:57",
		"h100-sxm-80gb:1:mig=1g.10gb@0-9223372036854775807", "h100-sxm-80gb:1:mig=1g.10gb@9223372036854775807", "l4:1:mig=+",
		":1", "mi300x:8", "H100:8", "h100-sxm-80gb:4:mig=1g.10gb*2+@0", "h100-sxm-80gb:1:mig=1g.10gb*x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		specs, err := parseSimGPUs(s)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("parseSimGPUs(%q) = %v: does not wrap ErrInvalid", s, err)
			}
			return
		}
		total, mig := 0, 0
		for _, sp := range specs {
			if sp.Count < 1 || sp.MIGCount < 0 || sp.MIGCount > sp.Count {
				t.Fatalf("parseSimGPUs(%q) = %+v: count %d, MIG on %d", s, specs, sp.Count, sp.MIGCount)
			}
			total += sp.Count
			switch {
			case sp.MIG != "" && sp.MIGCount == 0:
				mig += sp.Count
			case sp.MIG != "":
				mig += sp.MIGCount
			}
		}
		if total > gpufleet.MaxNodeGPUs {
			t.Fatalf("parseSimGPUs(%q): %d GPUs, a node reports at most %d", s, total, gpufleet.MaxNodeGPUs)
		}
		b, err := simgpu.New(specs)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) && !errors.Is(err, gpufleet.ErrNotFound) && !errors.Is(err, gpufleet.ErrUnsupported) {
				t.Fatalf("simgpu.New(%+v) = %v: no sentinel", specs, err)
			}
			return
		}
		devs, err := b.Devices(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		withMIG := 0
		for _, d := range devs {
			if d.MIGMode {
				withMIG++
			}
		}
		if len(devs) != total || withMIG != mig {
			t.Fatalf("--sim-gpus %q: %d GPUs (%d with MIG), want %d (%d)", s, len(devs), withMIG, total, mig)
		}
		spelled := spellSimGPUs(specs)
		again, err := parseSimGPUs(spelled)
		if diff := cmp.Diff(specs, again); err != nil || diff != "" {
			t.Fatalf("--sim-gpus %q spelled %q reads back differently (%v): %s", s, spelled, err, diff)
		}
	})
}

// TestSimGPUsTakeEveryMIGProfile: every MIG profile of the catalog can be
// simulated with --sim-gpus, the "+attribute" ones (1g.10gb+me) too,
// alone and after another profile.
func TestSimGPUsTakeEveryMIGProfile(t *testing.T) {
	for _, g := range catalog.Default().All() {
		if g.Vendor != "NVIDIA" {
			continue
		}
		for _, p := range g.MIGProfiles {
			for _, flag := range []string{
				fmt.Sprintf("%s:1:mig=%s", g.ID, p.Name),
				fmt.Sprintf("%s:2:mig=%s*1@1", g.ID, p.Name),
			} {
				specs, err := parseSimGPUs(flag)
				if err != nil {
					t.Errorf("--sim-gpus %s: %v", flag, err)
					continue
				}
				if _, err := simgpu.New(specs); err != nil {
					t.Errorf("--sim-gpus %s: %v", flag, err)
				}
			}
		}
	}
}

// FuzzParsePeriod: --from and --to (usage, rollups) are refused with
// ErrInvalid or are times the client can send: their RFC 3339 spelling in
// UTC, the one the query carries, reads back as the same second.
func FuzzParsePeriod(f *testing.F) {
	for _, p := range [][2]string{
		{"2025-01-31T00:00:00Z", "2025-02-01"}, {"7d", "24h"}, {"", ""}, {"90s", "0"}, {"1.5d", "3600"},
		{"2025-01-31T00:00:00.123456789+05:30", "2025-01-31T00:00:00-23:59"}, {"0000-01-01T00:00:00+01:00", "9999-12-31T23:00:00-05:00"},
		{"0000-01-01", "9999-12-31"}, {"-5h", "yesterday"}, {"106751d", "292y"}, {"1e300", "NaN"}, {"2025-13-01", "2025-02-30T00:00:00Z"},
		{"2025-01-31 00:00:00", "2025-01-31T00:00:00"}, {"\x00", "Inf"},
	} {
		f.Add(p[0], p[1])
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := &clientEnv{now: func() time.Time { return now }}
	f.Fuzz(func(t *testing.T, from, to string) {
		gf, gt, err := c.parsePeriod(from, to)
		wf, errF := c.parseWhen("--from", from)
		wt, errT := c.parseWhen("--to", to)
		if want := errors.Join(errF, errT); (err != nil) != (want != nil) {
			t.Fatalf("parsePeriod(%q, %q): %v; parseWhen: %v", from, to, err, want)
		}
		for _, w := range []struct {
			flag, in string
			got      time.Time
			err      error
		}{{"--from", from, wf, errF}, {"--to", to, wt, errT}} {
			if w.err != nil {
				if !errors.Is(w.err, gpufleet.ErrInvalid) || !strings.Contains(w.err.Error(), w.flag) {
					t.Fatalf("parseWhen(%s %q) = %v: not ErrInvalid naming the flag", w.flag, w.in, w.err)
				}
				continue
			}
			if w.in == "" {
				if !w.got.IsZero() {
					t.Fatalf("parseWhen(%s \"\") = %v, want the zero time (the server's default)", w.flag, w.got)
				}
				continue
			}
			if w.got.Location() != time.UTC {
				t.Fatalf("parseWhen(%s %q) = %v: not in UTC", w.flag, w.in, w.got)
			}
			sent := w.got.Format(time.RFC3339)
			back, err := time.Parse(time.RFC3339, sent)
			if err != nil || !back.Equal(w.got.Truncate(time.Second)) {
				t.Fatalf("parseWhen(%s %q) = %v: the query carries %q, which reads back as %v, %v", w.flag, w.in, w.got, sent, back, err)
			}
		}
		if err == nil && (!gf.Equal(wf) || !gt.Equal(wt)) {
			t.Fatalf("parsePeriod(%q, %q) = %v, %v; parseWhen gives %v, %v", from, to, gf, gt, wf, wt)
		}
	})
}

// FuzzDevState: DIR/dev.json from an earlier `gpufleet dev` is refused
// with ErrInvalid, or holds tokens the server and an Authorization header
// take, and reads back the same once written again.
func FuzzDevState(f *testing.F) {
	good := devState{APIURL: "http://127.0.0.1:7080", LoginURL: "http://127.0.0.1:7080/?token=gpa_0123456789abcdef", AdminToken: "gpa_0123456789abcdef",
		Teams: map[string]string{"team-a": "gpm_0123", "team-b": "gpm_4567"}, Nodes: map[string]string{"dev-l4-0": "http://127.0.0.1:9400/metrics"}}
	data, _ := json.MarshalIndent(good, "", "  ")
	for _, s := range []string{
		string(data), `{}`, `null`, `[]`, `"x"`, ``, `{"admin_token":"short"}`, `{"admin_token":"0123456789abcdef"}`,
		`{"admin_token":"0123456789abcdef\n"}`, `{"admin_token":"0123456789 abcdef"}`, `{"teams":{"team-a":"tok\r\nX-Evil: 1"}}`,
		`{"teams":{"team-a":""}}`, `{"teams":null,"nodes":{}}`, `{"admin_token":1}`, `{"unknown":true}`, `{} trailing`,
		`{"admin_token":"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"}`, "{\"admin_token\":\"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := parseDevState(data)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) || len(err.Error()) > 2*gpufleet.QuoteLimit+200 {
				t.Fatalf("parseDevState(%q) = %.300q (%d bytes): not ErrInvalid or too long", data, err, len(err.Error()))
			}
			return
		}
		toks := []string{st.AdminToken}
		for _, tok := range st.Teams {
			toks = append(toks, tok)
		}
		for _, tok := range toks {
			if strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) {
				t.Fatalf("parseDevState(%q) keeps token %q, which no Authorization header carries", data, tok)
			}
		}
		if st.AdminToken != "" && len(st.AdminToken) < 16 {
			t.Fatalf("parseDevState(%q) keeps admin token %q, which the server refuses", data, st.AdminToken)
		}
		// What dev writes back (writeJSONFile's form) reads back the same.
		out, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseDevState(out)
		if diff := cmp.Diff(st, again, cmpopts.EquateEmpty()); err != nil || diff != "" {
			t.Fatalf("dev.json %s reads back differently (%v): %s", out, err, diff)
		}
	})
}

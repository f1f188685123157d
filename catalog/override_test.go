package catalog

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpufleet/gpufleet"
)

const csvHeader = "id,name,memory_gb,memory_bw_gbs,bf16_tflops,fp16_tflops,tdp_w,interconnect,interconnect_kind,aliases,source\n"

func TestWithOverrides(t *testing.T) {
	type want struct {
		id      string
		price   *float64
		memory  int64
		bf16    *float64
		fp8     *float64
		name    string
		aliases []string
		count   int
	}
	cases := map[string]struct {
		input string
		want  want
	}{
		"JSON object changes only the price": {
			input: `{"id":"h100-sxm-80gb","price_per_hour_usd":2.1}`,
			want:  want{id: "h100-sxm-80gb", price: ptr(2.1), memory: 80 << 30, bf16: ptr(989.5e12), fp8: ptr(1979e12), name: "H100 SXM5 80GB", aliases: []string{"H100", "NVIDIA H100", "NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"}, count: 31},
		},
		"JSON peak_flops merges one precision": {
			input: ` [ {"id":"h100-sxm-80gb","peak_flops":{"fp8":null}} ]`,
			want:  want{id: "h100-sxm-80gb", price: ptr(6.88), memory: 80 << 30, bf16: ptr(989.5e12), fp8: nil, name: "H100 SXM5 80GB", aliases: []string{"H100", "NVIDIA H100", "NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"}, count: 31},
		},
		"JSON adds a new accelerator": {
			input: `[{"id":"mi355x","name":"Instinct MI355X","memory_bytes":288000000000,"memory_bandwidth_bytes_per_s":8e12,"peak_flops":{"bf16":2.3e15},"aliases":["AMD Instinct MI355X"]}]`,
			want:  want{id: "mi355x", memory: 288e9, bf16: ptr(2.3e15), name: "Instinct MI355X", aliases: []string{"AMD Instinct MI355X"}, count: 32},
		},
		"CSV row adds a new id found by alias": {
			input: csvHeader + "b300-hgx,B300,288,8000,2250,2250,1100,NVLink 5,nvlink,NVIDIA B300,https://example.com\n",
			want:  want{id: "b300-hgx", memory: 288e9, bf16: ptr(2250e12), name: "B300", aliases: []string{"NVIDIA B300"}, count: 32},
		},
		"CSV row replaces a whole entry": {
			input: csvHeader + "l4,L4 (measured),24,280,100,100,72,PCIe only,pcie,NVIDIA L4,lab\n",
			want:  want{id: "l4", memory: 24e9, bf16: ptr(100e12), name: "L4 (measured)", aliases: []string{"NVIDIA L4"}, count: 31},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			base := Default()
			before := base.All()
			c, err := base.WithOverrides(strings.NewReader(tc.input))
			if err != nil {
				t.Fatal(err)
			}
			lookupName := tc.want.id
			if len(tc.want.aliases) > 0 {
				lookupName = tc.want.aliases[len(tc.want.aliases)-1]
			}
			g, err := c.Lookup(lookupName)
			if err != nil {
				t.Fatal(err)
			}
			got := want{id: g.ID, price: g.PricePerHourUSD, memory: g.MemoryBytes, bf16: g.PeakFLOPS[gpufleet.BF16], fp8: g.PeakFLOPS[gpufleet.FP8], name: g.Name, aliases: g.Aliases, count: len(c.All())}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, base.All()); diff != "" {
				t.Errorf("original catalog changed (-before +after):\n%s", diff)
			}
			if all := c.All(); len(all) > 31 && all[len(all)-1].ID != tc.want.id {
				t.Errorf("new id at %s, want appended last", all[len(all)-1].ID)
			}
		})
	}
}

func TestWithOverridesErrors(t *testing.T) {
	cases := map[string]struct {
		input    string
		wantSubs []string
	}{
		"unknown JSON key is named": {
			input:    `{"id":"h100-sxm-80gb","price_per_hour":2.1,"colour":"green"}`,
			wantSubs: []string{`unknown key "colour", "price_per_hour"`},
		},
		"new JSON id lacks required keys": {
			input:    `{"id":"new-gpu","name":"New"}`,
			wantSubs: []string{`gpu "new-gpu"`, "memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops"},
		},
		"negative memory names the field": {
			input:    `{"id":"t4","memory_bytes":-1}`,
			wantSubs: []string{"memory_bytes", "positive"},
		},
		"zero peak is rejected": {
			input:    `{"id":"t4","peak_flops":{"fp16":0}}`,
			wantSubs: []string{"peak_flops.fp16", "never 0"},
		},
		"unknown precision key": {
			input:    `{"id":"t4","peak_flops":{"fp12":1e12}}`,
			wantSubs: []string{"peak_flops", `"fp12"`},
		},
		"wrong JSON type names the key": {
			input:    `{"id":"t4","domain_size":"eight"}`,
			wantSubs: []string{"domain_size"},
		},
		"bad interconnect kind": {
			input:    `{"id":"t4","interconnect_kind":"carrier-pigeon"}`,
			wantSubs: []string{"interconnect_kind", "carrier-pigeon"},
		},
		"bad CSV cell names line and column": {
			input:    csvHeader + "x1,X,16,300,100,100,70,PCIe,pcie,,s\nx2,Y,lots,300,100,100,70,PCIe,pcie,,s\n",
			wantSubs: []string{"line 3", "column 3 (memory_gb)", `got "lots"`, "GB"},
		},
		"unknown CSV column": {
			input:    "id,name,memory_gb,memory_bw_gbs,speed\nx,X,1,1,1\n",
			wantSubs: []string{"line 1", `unknown column "speed"`},
		},
		"missing required CSV column": {
			input:    "id,name,memory_gb\nx,X,1\n",
			wantSubs: []string{"missing required column memory_bw_gbs"},
		},
		"CSV row without any peak": {
			input:    "id,name,memory_gb,memory_bw_gbs\nx,X,1,1\n",
			wantSubs: []string{"line 2", "peak_flops", "at least one"},
		},
		"trailing JSON": {
			input:    `{"id":"t4"} {"id":"l4"}`,
			wantSubs: []string{"single JSON value"},
		},
		"empty input": {
			input:    " \n",
			wantSubs: []string{"empty"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := Default().WithOverrides(strings.NewReader(tc.input))
			if c != nil || !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("got %v, %v; want nil, ErrInvalid", c, err)
			}
			for _, s := range tc.wantSubs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestParseEmbeddedRoundTrip(t *testing.T) {
	gpus, err := Parse(strings.NewReader(string(embeddedCSV)))
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 31 {
		t.Fatalf("Parse returned %d entries, want 31", len(gpus))
	}
	c, err := New(gpus)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Default().All(), c.All()); diff != "" {
		t.Errorf("New(Parse(data)) differs from Default (-want +got):\n%s", diff)
	}
	if _, err := New(append(gpus, gpus[0])); !errors.Is(err, gpufleet.ErrInvalid) {
		t.Errorf("duplicate id: err = %v, want ErrInvalid", err)
	}
}

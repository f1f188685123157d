package catalog

import (
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	// The header and first two rows of the embedded data: a whole 20 KB file
	// makes each fuzz step (and minimisation) slow.
	lines := strings.SplitAfterN(string(embeddedCSV), "\n", 4)
	f.Add(strings.Join(lines[:3], ""))
	f.Add(csvHeader + "x,X,16,300,100,100,70,PCIe,pcie,A|B,s\n")
	f.Add("id,name,memory_gb,memory_bw_gbs,mig,fp16_tflops\nx,X,96GiB,1,1g.10gb x7; 7g.80gb x1,1\n")
	f.Add("id,name\n\"unterminated\n")
	f.Fuzz(func(t *testing.T, s string) {
		gpus, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, g := range gpus {
			if err := validate(g); err != nil {
				t.Errorf("Parse returned an invalid entry: %v", err)
			}
		}
	})
}

func FuzzWithOverrides(f *testing.F) {
	f.Add(`{"id":"h100-sxm-80gb","price_per_hour_usd":2.1}`)
	f.Add(`[{"id":"n","name":"N","memory_bytes":1,"memory_bandwidth_bytes_per_s":1,"peak_flops":{"fp8":1}}]`)
	f.Add(`{"id":"t4","mig_profiles":[{"name":"1g.5gb","slices":1,"memory_bytes":5,"max_instances":7}],"peak_flops":null}`)
	f.Add(csvHeader + "l4,L4,24,280,100,100,72,PCIe only,pcie,NVIDIA L4,lab\n")
	f.Fuzz(func(t *testing.T, s string) {
		base := Default()
		c, err := base.WithOverrides(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, g := range c.All() {
			if err := validate(g); err != nil {
				t.Errorf("WithOverrides kept an invalid entry: %v", err)
			}
			if _, err := c.Lookup(g.ID); err != nil {
				t.Errorf("Lookup(%q) after overrides: %v", g.ID, err)
			}
		}
		if len(base.All()) != 31 {
			t.Errorf("base catalog changed")
		}
	})
}

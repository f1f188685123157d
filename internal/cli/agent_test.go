package cli

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

func TestParseSimGPUs(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    []simgpu.Spec
		wantErr bool
	}{
		"one model":     {in: "h100-sxm-80gb:8", want: []simgpu.Spec{{Model: "h100-sxm-80gb", Count: 8}}},
		"two models":    {in: "l4:4, a100-sxm-80gb:2", want: []simgpu.Spec{{Model: "l4", Count: 4}, {Model: "a100-sxm-80gb", Count: 2}}},
		"mig on 0-1":    {in: "h200-sxm-141gb:8:mig=1g.18gb*7@0-1", want: []simgpu.Spec{{Model: "h200-sxm-141gb", Count: 8, MIG: "1g.18gb x7", MIGCount: 2}}},
		"mixed layout":  {in: "h100-sxm-80gb:2:mig=3g.40gb*2+1g.10gb@1", want: []simgpu.Spec{{Model: "h100-sxm-80gb", Count: 2, MIG: "3g.40gb x2; 1g.10gb x1", MIGCount: 1}}},
		"mig on all":    {in: "a100-sxm-80gb:2:mig=1g.10gb*7", want: []simgpu.Spec{{Model: "a100-sxm-80gb", Count: 2, MIG: "1g.10gb x7"}}},
		"no count":      {in: "l4", wantErr: true},
		"zero count":    {in: "l4:0", wantErr: true},
		"bad mig part":  {in: "l4:1:foo", wantErr: true},
		"mig past GPUs": {in: "h200-sxm-141gb:2:mig=1g.18gb*7@0-3", wantErr: true},
		"empty":         {in: "", wantErr: true},
	}
	for name, tc := range cases {
		got, err := parseSimGPUs(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err %v, want error %v", name, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got); !tc.wantErr && diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

package cli

import (
	"strings"
	"testing"
)

func TestReadPrices(t *testing.T) {
	got, err := readPrices(strings.NewReader("gpu_model,price_usd,note\nh100-sxm-80gb, 25000 ,quote\nb200-hgx,38000,\n"))
	if err != nil || len(got) != 2 || got["h100-sxm-80gb"] != 25000 || got["b200-hgx"] != 38000 {
		t.Errorf("%v %v", got, err)
	}
	for name, in := range map[string]string{
		"empty":          "",
		"no header":      "h100-sxm-80gb,25000\n",
		"free":           "gpu_model,price_usd\nh100-sxm-80gb,0\n",
		"not a number":   "gpu_model,price_usd\nh100-sxm-80gb,cheap\n",
		"no model":       "gpu_model,price_usd\n,100\n",
		"short row":      "price_usd,gpu_model\n100\n",
		"infinite":       "gpu_model,price_usd\nh100-sxm-80gb,1e400\n",
		"unbalanced csv": "gpu_model,price_usd\n\"h100,1\n",
	} {
		if _, err := readPrices(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func FuzzReadPrices(f *testing.F) {
	f.Add("gpu_model,price_usd\nh100-sxm-80gb,25000\n")
	f.Add("price_usd,gpu_model\n1,a\n2,b\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := readPrices(strings.NewReader(in))
		if err != nil {
			return
		}
		for m, p := range got {
			if m == "" || !(p >= 1 && p <= 1e8) {
				t.Errorf("%q: accepted %q at %g", in, m, p)
			}
		}
	})
}

// TestCapacityFlagsRefused: bad flags exit 2 naming the flag, before any
// request.
func TestCapacityFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"procure", "--horizon", "3d"},
		{"procure", "--horizon", "36h"},
		{"procure", "--target", "p90-queue<4h"},
		{"procure", "--quantile", "1.5"},
		{"procure", "--lead-time", "h100-sxm-80gb"},
		{"procure", "--lead-time", "h100-sxm-80gb=5y"},
		{"procure", "--plot", "x.svg"},
		{"lifecycle", "--horizon", "1d"},
		{"lifecycle", "--since", "2y"},
		{"lifecycle", "--price-file", "/no/such/file"},
	} {
		_, errOut, code := run(t, append(args, "--server", "http://127.0.0.1:1", "--token", "x")...)
		flag := args[1]
		if code == 0 || !strings.Contains(errOut, flag) {
			t.Errorf("%v: exit %d, stderr %q: want non-zero naming %s", args, code, errOut, flag)
		}
	}
}

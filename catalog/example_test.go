package catalog_test

import (
	"fmt"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

func Example() {
	gpu, err := catalog.Default().Lookup("NVIDIA H100 80GB HBM3")
	if err != nil {
		fmt.Println(err)
		return
	}
	bf16, _ := gpu.Peak(gpufleet.BF16)
	_, fp4 := gpu.Peak(gpufleet.FP4)
	fmt.Printf("%s: %.0f GiB, %.2f TB/s, bf16 %.1f TFLOPS, fp4 supported: %v\n",
		gpu.ID, float64(gpu.MemoryBytes)/(1<<30), gpu.MemoryBandwidthBytesPerS/1e12, bf16/1e12, fp4)

	_, err = catalog.Default().Lookup("h100-sxm")
	fmt.Println(err)
	// Output:
	// h100-sxm-80gb: 80 GiB, 3.35 TB/s, bf16 989.5 TFLOPS, fp4 supported: false
	// not found: unknown GPU "h100-sxm" (did you mean h100-sxm-80gb, h100-nvl-94gb, h100-pcie-80gb?)
}

func ExampleCatalog_WithOverrides() {
	c, err := catalog.Default().WithOverrides(strings.NewReader(`{"id":"h100-sxm-80gb","price_per_hour_usd":2.1}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	gpu, _ := c.Lookup("H100")
	old, _ := catalog.Default().Lookup("H100")
	fmt.Printf("%.2f (default %.2f)\n", *gpu.PricePerHourUSD, *old.PricePerHourUSD)
	// Output: 2.10 (default 6.88)
}

func ExampleParsePrecision() {
	p, _ := gpufleet.ParsePrecision("BF16")
	fmt.Println(p)
	// Output: bf16
}

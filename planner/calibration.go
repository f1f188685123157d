package planner

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// gemmReference is the share of dense peak a large square matrix product
// reaches on the cards the compute constants were read from (bf16 8192³
// through cuBLAS: about 790 of 989 TFLOP/s on H200, as PyTorch measures
// it). computeEfficiency and trainEfficiency are that share times what
// real kernel mixes lose against it; a calibration keeps the second part
// and measures the first.
const gemmReference = 0.80

// Calibration is what one GPU model measured in the fleet's benchmarks
// (gpufleet bench; docs/BENCH.md), used instead of the built-in
// efficiencies for that model:
//   - Memory, a large device-to-device copy's share of datasheet memory
//     bandwidth, replaces memEfficiency (the copy streams memory as decode
//     streams weights and KV);
//   - Compute, a large matrix product's share of dense peak per
//     precision, replaces gemmReference inside the compute efficiencies:
//     the planner's kernel mix keeps its ratio to a large product, and the
//     card's large product is measured.
//
// Zero or absent values keep the built-in ones.
type Calibration struct {
	Memory  float64                        `json:"memory"`
	Compute map[gpufleet.Precision]float64 `json:"compute"`
	// GPUs is how many GPUs the figures are the median of; Source says
	// where they come from.
	GPUs   int    `json:"gpus"`
	Source string `json:"source"`
}

// validate checks a calibration's shares: from 0 to 2.5 (fp64 on
// tensor cores measures about twice the catalog's vector rate; nothing
// else comes near).
func (c Calibration) validate(model string) error {
	check := func(what string, v float64) error {
		if v < 0 || v > 2.5 || v != v {
			return fmt.Errorf("%w: calibration of %s: %s %g: expected a share of the spec from 0 to 2.5", gpufleet.ErrInvalid, model, what, v)
		}
		return nil
	}
	if err := check("memory", c.Memory); err != nil {
		return err
	}
	for p, v := range c.Compute {
		if err := check(string(p), v); err != nil {
			return err
		}
	}
	return nil
}

// memoryShare is the share of datasheet bandwidth the planner assumes.
func (c *Calibration) memoryShare() float64 {
	if c != nil && c.Memory > 0 {
		return c.Memory
	}
	return memEfficiency
}

// computeScale is what the mode's efficiency is multiplied by for
// precision p: 1 without a measured figure.
func (c *Calibration) computeScale(p gpufleet.Precision) float64 {
	if c == nil {
		return 1
	}
	if v := c.Compute[p]; v > 0 {
		return v / gemmReference
	}
	return 1
}

// note says what a candidate's calibration changed, for its notes.
func (c *Calibration) note(p gpufleet.Precision) string {
	if c == nil {
		return ""
	}
	var parts []string
	if c.Memory > 0 {
		parts = append(parts, fmt.Sprintf("memory bandwidth at %.2f of datasheet (built-in %.2f)", c.Memory, memEfficiency))
	}
	if v := c.Compute[p]; v > 0 {
		parts = append(parts, fmt.Sprintf("%s matrix products at %.2f of peak (built-in assumes %.2f)", p, v, gemmReference))
	}
	if len(parts) == 0 {
		return ""
	}
	src := c.Source
	if src == "" {
		src = "the fleet's benchmarks"
	}
	return fmt.Sprintf("calibrated from %s (median of %d GPUs): %s", src, c.GPUs, strings.Join(parts, ", "))
}

// calibrationFor is the calibration of GPU model id, nil when none.
func (r Request) calibrationFor(id string) *Calibration {
	c, ok := r.Calibration[id]
	if !ok {
		return nil
	}
	return &c
}

// sortedModels lists a calibration map's models, for stable errors.
func sortedModels(m map[string]Calibration) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

package agent

import (
	"math"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// Usage is an attempt's accounting totals.
type Usage struct {
	GPUSeconds          float64 `json:"gpu_seconds"`
	EffectiveGPUSeconds float64 `json:"effective_gpu_seconds"`
	EnergyJoules        float64 `json:"energy_joules"`
}

// hold is one attempt's share of one physical GPU: 1 for a whole GPU, the
// time-slice fraction, or a MIG instance's slices/7 (times the fraction).
type hold struct {
	Attempt string `json:"attempt"`
	GPU     string `json:"gpu"` // physical GPU UUID
	// Device is the UUID the attempt was given: the GPU, or one of its MIG
	// instances.
	Device string  `json:"device,omitempty"`
	Share  float64 `json:"share"`
	// Since is when the attempt was last accounted (or started): only the
	// time after it counts.
	Since time.Time `json:"-"`
}

// migShare is the part of a GPU a MIG profile ("1g.18gb", "3g.71gb")
// takes: its compute slices out of 7; an unreadable name counts as the
// smallest instance.
func migShare(profile string) float64 {
	p, err := gpufleet.ParseMIGProfile(profile)
	if err != nil {
		return 1.0 / 7
	}
	return p.Share()
}

// account attributes the sampling interval that ends at now, between the
// samples prev (taken dt seconds earlier) and cur (by physical GPU UUID),
// to the attempts holding GPUs. Each hold counts the part of the interval
// after its Since (an attempt that started mid-interval counts from its
// start):
//
//   - GPU-seconds: seconds × share.
//   - Effective GPU-seconds: seconds × share × activity, where activity is
//     the GPU's SM activity where present (GPM, Hopper and newer), else its
//     utilization, divided among the holders by share: each holder's
//     activity is min(1, GPU activity / total share held), which assumes
//     the holders of one GPU are equally busy (time slices, MIG instances).
//   - Energy: the GPU's energy counter delta over the interval, times the
//     part of the interval the hold covers, split by share / total share,
//     so a GPU's whole draw while held goes to its holders. A counter that
//     went backwards (driver reload) counts nothing.
//
// Readings that are absent count nothing: no activity means no effective
// seconds, no energy counter means no energy.
func account(now time.Time, dt float64, prev, cur map[string]gpu.Sample, holds []hold) map[string]Usage {
	out := map[string]Usage{}
	total := map[string]float64{}
	for _, h := range holds {
		total[h.GPU] += h.Share
	}
	for _, h := range holds {
		secs := now.Sub(h.Since).Seconds()
		if h.Since.IsZero() || secs > dt {
			secs = dt
		}
		if secs <= 0 {
			continue
		}
		u := out[h.Attempt]
		u.GPUSeconds += secs * h.Share
		c, ok := cur[h.GPU]
		if ok && total[h.GPU] > 0 {
			act := c.SMActivity
			if act == nil {
				act = c.Utilization
			}
			if act != nil {
				u.EffectiveGPUSeconds += secs * h.Share * math.Min(1, *act/total[h.GPU])
			}
			if p, ok := prev[h.GPU]; ok && p.EnergyMillijoules != nil && c.EnergyMillijoules != nil &&
				*c.EnergyMillijoules >= *p.EnergyMillijoules && dt > 0 {
				u.EnergyJoules += float64(*c.EnergyMillijoules-*p.EnergyMillijoules) / 1000 * (secs / dt) * h.Share / total[h.GPU]
			}
		}
		out[h.Attempt] = u
	}
	return out
}

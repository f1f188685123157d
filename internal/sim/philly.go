package sim

import (
	"fmt"
	"io"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// phillyModels maps the philly-gavel column suffixes to catalog ids.
var phillyModels = []struct{ col, id string }{
	{"v100", "v100-sxm2-16gb"},
	{"p100", "p100-pcie-16gb"},
	{"k80", "k80"},
}

// parsePhillyGavel reads Gavel's per-VC resampling of the Philly trace
// (philly_gavel.csv.gz). Teams are the virtual clusters; every job is
// preemptible training. A job's duration on a GPU type is the trace's
// measured duration_s_<type>; where the trace has none, it is
// single_gpu_s_<type> / (gpus * eff), eff = opt.ScalingEfficiency.
func parsePhillyGavel(r io.Reader, opt ReadOptions) (*Trace, error) {
	eff := opt.ScalingEfficiency
	if eff <= 0 || eff > 1 {
		eff = DefaultScalingEfficiency
	}
	tr := &Trace{Name: opt.Name, Format: "philly-gavel", Models: map[string]catalog.GPU{}}
	required := []string{"vc", "arrival_s", "gpus"}
	for _, m := range phillyModels {
		required = append(required, "duration_s_"+m.col, "single_gpu_s_"+m.col)
	}
	scaled := 0
	bad, err := readCSV(r, opt, required, func(rw row) error {
		vc := rw.get("vc")
		if vc == "" {
			return fmt.Errorf("vc: empty")
		}
		arrival, err := rw.float("arrival_s")
		if err != nil {
			return err
		}
		gpus, err := rw.int("gpus", gpufleet.MaxFleetGPUs)
		if err != nil {
			return err
		}
		if gpus == 0 {
			return fmt.Errorf("gpus: 0")
		}
		j := Job{
			ID: fmt.Sprintf("philly-%05d", len(tr.Jobs)), Team: vc, Name: rw.get("job_type"), Class: gpufleet.Training,
			Submit: arrival, GPUs: gpus,
			DurationOn: make(map[string]float64, len(phillyModels)), Preemptible: true,
		}
		usedScaling := false
		for _, m := range phillyModels {
			d, ok, err := rw.optFloat("duration_s_" + m.col)
			if err != nil {
				return err
			}
			if !ok {
				single, err := rw.float("single_gpu_s_" + m.col)
				if err != nil {
					return err
				}
				d = single
				if gpus > 1 {
					d = single / (float64(gpus) * eff)
				}
				usedScaling = true
			}
			j.DurationOn[m.id] = max(d, 1)
		}
		if usedScaling {
			scaled++
		}
		j.Duration = j.DurationOn["v100-sxm2-16gb"]
		return tr.add(j, opt)
	})
	tr.BadLines = bad
	if err != nil {
		return nil, err
	}
	tr.Notes = append(tr.Notes, fmt.Sprintf("%d jobs lack a measured duration on some GPU type: single-GPU time / (gpus x %.2f)", scaled, eff))
	return tr, nil
}

package sim

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// openbModels maps the openb trace's GPU type names to catalog ids. Types
// not listed (G1, G2, G3: undisclosed) become opaque models.
var openbModels = map[string]string{
	"V100M16": "v100-sxm2-16gb",
	"V100M32": "v100-sxm2-32gb",
	"P100":    "p100-pcie-16gb",
	"T4":      "t4",
	"A10":     "a10",
}

// openbModel maps a trace GPU type to a model name, recording opaque ones.
func openbModel(name string, opaque map[string]catalog.GPU) string {
	if id, ok := openbModels[name]; ok {
		return id
	}
	opaque[name] = catalog.GPU{ID: name, Name: name}
	return name
}

// openbClass maps the openb QoS column to a priority class and whether the
// job may be preempted.
//
//	LS, Guaranteed -> production (not preemptible)
//	Burstable      -> training   (preemptible)
//	BE             -> batch      (preemptible)
func openbClass(qos string) (gpufleet.Priority, bool, error) {
	switch qos {
	case "LS", "Guaranteed":
		return gpufleet.Production, false, nil
	case "Burstable":
		return gpufleet.Training, true, nil
	case "BE":
		return gpufleet.Batch, true, nil
	}
	return "", false, fmt.Errorf("qos: %s is not LS, Guaranteed, Burstable or BE", gpufleet.Quote(qos))
}

// parseOpenb reads an Alibaba openb pod list (cluster-trace-gpu-v2023).
//
// Pods asking for no GPU are skipped and counted. A pod's duration is
// deletion_time - scheduled_time; pods the trace never scheduled (empty
// scheduled_time, phase Pending) still arrive, with deletion_time -
// creation_time as their duration (how long their owner kept them). A
// duration under one second counts as one second. The trace has no tenants:
// every pod belongs to team "openb".
func parseOpenb(r io.Reader, opt ReadOptions) (*Trace, error) {
	tr := &Trace{Name: opt.Name, Format: "openb", Models: map[string]catalog.GPU{}}
	seen := map[string]bool{}
	unscheduled := 0
	required := []string{"name", "num_gpu", "gpu_milli", "qos", "creation_time", "deletion_time", "scheduled_time"}
	bad, err := readCSV(r, opt, required, func(rw row) error {
		id := rw.get("name")
		gpus, err := rw.int("num_gpu", gpufleet.MaxFleetGPUs)
		if err != nil {
			return err
		}
		if gpus == 0 {
			if err := checkUnique(seen, id); err != nil {
				return err
			}
			tr.Skipped++
			return nil
		}
		milli, err := rw.int("gpu_milli", 1000)
		if err != nil {
			return err
		}
		if milli == 0 {
			return errors.New("gpu_milli: 0 for a GPU pod")
		}
		if gpus > 1 && milli != 1000 {
			return fmt.Errorf("gpu_milli: %d with num_gpu %d (shares are for one GPU)", milli, gpus)
		}
		class, preemptible, err := openbClass(rw.get("qos"))
		if err != nil {
			return err
		}
		created, err := rw.float("creation_time")
		if err != nil {
			return err
		}
		deleted, err := rw.float("deletion_time")
		if err != nil {
			return err
		}
		start, scheduled, err := rw.optFloat("scheduled_time")
		if err != nil {
			return err
		}
		if !scheduled {
			start = created
			unscheduled++
		}
		if start < created || deleted < start {
			return fmt.Errorf("times out of order: creation %g, scheduled %g, deletion %g", created, start, deleted)
		}
		j := Job{
			ID: id, Team: "openb", Class: class, Submit: created, GPUs: gpus,
			Duration:    max(deleted-start, 1),
			Preemptible: preemptible,
		}
		if milli < 1000 {
			j.Sharing = gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: float64(milli) / 1000}
		}
		if spec := rw.get("gpu_spec"); spec != "" {
			for _, m := range strings.Split(spec, "|") {
				m = strings.TrimSpace(m)
				if m == "" {
					return fmt.Errorf("gpu_spec: empty type in %s", gpufleet.Quote(spec))
				}
				if id := openbModel(m, tr.Models); !slices.Contains(j.GPUModels, id) {
					j.GPUModels = append(j.GPUModels, id)
				}
			}
		}
		if err := checkUnique(seen, id); err != nil {
			return err
		}
		return tr.add(j, opt)
	})
	tr.BadLines = bad
	if err != nil {
		return nil, err
	}
	tr.Notes = append(tr.Notes,
		fmt.Sprintf("%d pods without GPUs skipped", tr.Skipped),
		fmt.Sprintf("%d pods never scheduled in the trace arrive with duration deletion-creation", unscheduled),
		"QoS LS/Guaranteed -> production, Burstable -> training, BE -> batch; one team \"openb\"")
	return tr, nil
}

// OpenbModelName maps an openb GPU type (V100M16, T4, G2, ...) to the model
// name the simulator uses: a catalog id, or the type itself for undisclosed
// types.
func OpenbModelName(t string) string {
	if id, ok := openbModels[t]; ok {
		return id
	}
	return t
}

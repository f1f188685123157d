package forecast

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
)

func TestReadDemandCSV(t *testing.T) {
	in := "day,gpu_model,gpu_hours_asked,jobs_submitted\n" +
		"2026-01-01,a100,10,1\n2026-01-01,any,5,2\n2026-01-03,a100,7.5,0\n"
	s, err := ReadDemandCSV(strings.NewReader(in), "")
	if err != nil || !s.Start.Equal(day0.AddDate(0, 0, -4)) || len(s.Values) != 3 || s.Values[0] != 15 || s.Values[1] != 0 || s.Values[2] != 7.5 {
		t.Fatalf("all models: %+v %v", s, err)
	}
	s, err = ReadDemandCSV(strings.NewReader(in), "a100")
	if err != nil || s.Values[0] != 10 {
		t.Fatalf("a100: %+v %v", s, err)
	}
	if _, err := ReadDemandCSV(strings.NewReader(in), "h100"); !errors.Is(err, gpufleet.ErrNotFound) {
		t.Errorf("unknown model: %v", err)
	}
	for name, bad := range map[string]string{
		"header":   "when,what\n",
		"day":      "day,gpu_model,gpu_hours_asked\n01/02/2026,a,1\n",
		"negative": "day,gpu_model,gpu_hours_asked\n2026-01-01,a,-1\n",
		"nan":      "day,gpu_model,gpu_hours_asked\n2026-01-01,a,NaN\n",
		"short":    "day,gpu_model,gpu_hours_asked\n2026-01-01,a\n",
		"span":     "day,gpu_model,gpu_hours_asked\n1900-01-01,a,1\n2026-01-01,a,1\n",
		"empty":    "day,gpu_model,gpu_hours_asked\n",
	} {
		if _, err := ReadDemandCSV(strings.NewReader(bad), ""); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}

// FuzzReadDemandCSV: no input panics, and what reads is a valid series.
func FuzzReadDemandCSV(f *testing.F) {
	f.Add("day,gpu_model,gpu_hours_asked\n2026-01-01,a,1\n2026-01-09,b,2e3\n")
	f.Add("day,gpu_model,gpu_hours_asked,x\n2026-02-30,a,1,\n")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ReadDemandCSV(strings.NewReader(in), "")
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil || len(s.Values) == 0 || len(s.Values) > maxDays+1 {
			t.Fatalf("read %d days: %v", len(s.Values), err)
		}
	})
}

func TestStoreDemand(t *testing.T) {
	now := day0.Add(50 * time.Hour)
	f := func(v float64) *float64 { return &v }
	jobs := []gpufleet.Job{
		// Ran and ended: its GPU-seconds.
		{ID: "a", State: gpufleet.JobSucceeded, SubmittedAt: day0.Add(time.Hour), Resources: gpufleet.Resources{GPUs: 2},
			Attempts: []gpufleet.Attempt{{GPUSeconds: 7200}, {GPUSeconds: 3600}}},
		// Waiting: its estimate.
		{ID: "b", State: gpufleet.JobQueued, SubmittedAt: day0.Add(2 * time.Hour), Resources: gpufleet.Resources{GPUs: 4}, EstimateS: f(1800)},
		// Running past its estimate: what it has run.
		{ID: "c", State: gpufleet.JobRunning, SubmittedAt: day0.Add(25 * time.Hour), Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"l4"}},
			EstimateS: f(60), Attempts: []gpufleet.Attempt{{GPUSeconds: 7200}}},
		// Nothing said: an hour.
		{ID: "d", State: gpufleet.JobQueued, SubmittedAt: day0.Add(26 * time.Hour), Resources: gpufleet.Resources{GPUs: 1}},
		// Outside the window.
		{ID: "e", State: gpufleet.JobQueued, SubmittedAt: day0.Add(-time.Hour), Resources: gpufleet.Resources{GPUs: 8}},
	}
	s := StoreDemand(jobs, day0, day0.AddDate(0, 0, 3), now, nil)
	if len(s.Values) != 3 || s.Values[0] != 3+2 || s.Values[1] != 2+1 || s.Values[2] != 0 {
		t.Errorf("demand %v", s.Values)
	}
	l4 := StoreDemand(jobs, day0, day0.AddDate(0, 0, 3), now, func(j gpufleet.Job) bool { return slices.Contains(j.Resources.GPUModels, "l4") })
	if l4.Values[1] != 2 || l4.Values[0] != 0 {
		t.Errorf("l4 demand %v", l4.Values)
	}
}

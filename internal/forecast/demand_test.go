package forecast

import (
	"errors"
	"strings"
	"testing"

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

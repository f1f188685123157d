package sim

import (
	"strings"
	"testing"
	"time"
)

// TestWriteDemandCSV: each job's GPU-hours land on its submission day and
// the model it ran on: the run time a completed job took, the trace's
// duration on that model for one stopped short, the plain duration under
// "any" for one that never ran.
func TestWriteDemandCSV(t *testing.T) {
	tr := &Trace{Jobs: []Job{
		{ID: "a", GPUs: 2, Duration: 7200},
		{ID: "b", GPUs: 1, Duration: 3600, DurationOn: map[string]float64{"v100": 1800}},
		{ID: "c", GPUs: 4, Duration: 36000},
	}}
	res := []JobResult{
		{ID: "a", GPUs: 2, SubmitS: 100, FirstStartS: 200, FinishS: 7400, RunS: 7200, Model: "k80", End: "completed"},
		{ID: "b", GPUs: 1, SubmitS: 86400 + 5, FirstStartS: 86400 + 5, FinishS: -1, Model: "v100"},
		{ID: "c", GPUs: 4, SubmitS: 86400 + 10, FirstStartS: -1, FinishS: -1},
	}
	var b strings.Builder
	if err := WriteDemandCSV(&b, tr, res, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	want := `day,gpu_model,gpu_hours_asked,jobs_submitted
2026-01-01,any,0.000,0
2026-01-01,k80,4.000,1
2026-01-01,v100,0.000,0
2026-01-02,any,40.000,1
2026-01-02,k80,0.000,0
2026-01-02,v100,0.500,1
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

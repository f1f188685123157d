package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/bench"
)

// workloadServer answers a workload bench of two jobs that stay queued:
// j-l4 waits for capacity, j-h100 either waits too or can never start
// (never). It records the jobs cancelled.
func workloadServer(t *testing.T, never bool) (*httptest.Server, *[]string) {
	t.Helper()
	isolateClientEnv(t)
	var mu sync.Mutex
	var cancelled []string
	rep := bench.WorkloadReport{Workload: bench.Workload{ID: "wb-1", Command: []string{"./bench.sh"}, GPUs: 1, Metric: "tok/s=([0-9.]+)", Unit: "tokens"},
		Rows: []bench.WorkloadRow{{GPUModel: "l4", JobID: "j-l4", State: "queued"}, {GPUModel: "h100-sxm-80gb", JobID: "j-h100", State: "queued"}}}
	if never { // the l4 job ran; the h100 one can never start
		rep.Rows[0].State = "succeeded"
	}
	queue := map[string]*gpufleet.QueueEntry{
		"j-l4": {ID: "j-l4", ReasonCode: "capacity", Reason: "no l4 node has 1 free GPU",
			Explanation: &gpufleet.Explanation{Code: "capacity", Exhausted: gpufleet.DimGPUs, Need: 1}},
		"j-h100": {ID: "j-h100", ReasonCode: "rack_power", Reason: "no rack can hold it even idle",
			Explanation: &gpufleet.Explanation{Code: "rack_power", Exhausted: gpufleet.DimRackPower, Never: never}},
	}
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("POST /api/v1/bench/workloads", func(w http.ResponseWriter, _ *http.Request) { reply(w, rep) })
	mux.HandleFunc("GET /api/v1/bench/workloads/{id}", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		out := rep
		out.Rows = append([]bench.WorkloadRow(nil), rep.Rows...)
		for i, r := range out.Rows {
			for _, c := range cancelled {
				if c == r.JobID {
					out.Rows[i].State = "cancelled"
				}
			}
		}
		reply(w, out)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		reply(w, gpufleet.Job{ID: id, Team: "team-a", State: gpufleet.JobQueued, Queue: queue[id]})
	})
	mux.HandleFunc("POST /api/v1/jobs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		cancelled = append(cancelled, r.PathValue("id"))
		mu.Unlock()
		reply(w, gpufleet.Job{ID: r.PathValue("id"), CancelRequested: true})
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs, &cancelled
}

// TestBenchWorkloadGivesUp: bench workload never waits for ever. A job
// that can never start on the fleet is cancelled and the command says so
// and what to do (exit 4); past --timeout it gives up on the jobs still
// waiting, naming each one's reason and leaving them queued (exit 1).
func TestBenchWorkloadGivesUp(t *testing.T) {
	args := func(url string, extra ...string) []string {
		return append(append([]string{"bench", "workload", "--server", url, "--token", "t", "--gpu-models", "l4,h100-sxm-80gb",
			"--metric", "tok/s=([0-9.]+)"}, extra...), "--", "./bench.sh")
	}
	t.Run("timeout", func(t *testing.T) {
		hs, cancelled := workloadServer(t, false)
		start := time.Now()
		out, errOut, code := run(t, args(hs.URL, "--timeout", "1s")...)
		if code != ExitError || !strings.Contains(errOut, "gave up after 1s with jobs still waiting") ||
			!strings.Contains(errOut, "l4 (job j-l4) waits: no l4 node has 1 free GPU") || !strings.Contains(errOut, "they stay queued") {
			t.Fatalf("exit %d, stderr %s", code, errOut)
		}
		if len(*cancelled) != 0 {
			t.Errorf("a timeout cancelled %v; the jobs should stay queued", *cancelled)
		}
		if !strings.Contains(out, "workload bench wb-1") {
			t.Errorf("the report so far is not printed: %s", out)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("gave up after %s", d)
		}
	})
	t.Run("never", func(t *testing.T) {
		hs, cancelled := workloadServer(t, true)
		_, errOut, code := run(t, args(hs.URL, "--timeout", "1m")...)
		if code != ExitUnsatisfiable || !strings.Contains(errOut, "h100-sxm-80gb (job j-h100, cancelled): no rack can hold it even idle") ||
			!strings.Contains(errOut, "leave it out of --gpu-models") {
			t.Fatalf("exit %d, stderr %s", code, errOut)
		}
		if len(*cancelled) != 1 || (*cancelled)[0] != "j-h100" {
			t.Errorf("cancelled %v, want the job that can never start", *cancelled)
		}
	})
}

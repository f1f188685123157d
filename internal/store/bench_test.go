package store

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
)

// benchJob is a job of realistic size.
func benchJob(i int64) gpufleet.Job {
	est := 3600.0
	return gpufleet.Job{
		Team: "team-a", Name: "bench", Priority: "batch", RequestID: fmt.Sprint("req-", i),
		Resources: gpufleet.Resources{GPUs: 8, GPUModels: []string{"h100-sxm-80gb"}},
		Command:   []string{"python", "train.py", "--epochs", "3"}, Env: map[string]string{"WANDB_PROJECT": "x"},
		EstimateS: &est, Retries: gpufleet.Retries{Max: 2},
	}
}

// BenchmarkSubmit measures single-job SubmitJobs calls: one caller at a
// time (every call its own commit), and concurrent callers that the
// committer gathers into shared transactions. It reports submissions/s.
func BenchmarkSubmit(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"normal", nil},
		{"fullsync", []Option{WithFullSync()}},
		{"window2ms", []Option{WithGroupCommit(2*time.Millisecond, 256)}},
	} {
		b.Run(tc.name+"/sequential", func(b *testing.B) {
			s := openTemp(b, tc.opts...)
			var n int64
			start := time.Now()
			for b.Loop() {
				n++
				if _, err := s.SubmitJobs(b.Context(), []gpufleet.Job{benchJob(n)}, "bench"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "submissions/s")
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			s := openTemp(b, tc.opts...)
			var n atomic.Int64
			b.SetParallelism(16) // many API handlers at once
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := s.SubmitJobs(b.Context(), []gpufleet.Job{benchJob(i)}, "bench"); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "submissions/s")
		})
	}
	b.Run("batch100", func(b *testing.B) {
		s := openTemp(b)
		var n int64
		start := time.Now()
		for b.Loop() {
			jobs := make([]gpufleet.Job, 100)
			for i := range jobs {
				n++
				jobs[i] = benchJob(n)
			}
			if _, err := s.SubmitJobs(b.Context(), jobs, "bench"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "submissions/s")
	})
}

// BenchmarkSchedulingCycle measures the leader's store work per cycle
// with 10,000 queued jobs: the ActiveJobs snapshot, and an ApplySchedule
// that starts none (a full cluster: the queue does not change) or 10 jobs
// (every position behind them changes).
func BenchmarkSchedulingCycle(b *testing.B) {
	s := openTemp(b)
	ctx := b.Context()
	const queued = 10000
	for i := 0; i < queued; i += 500 {
		jobs := make([]gpufleet.Job, 500)
		for k := range jobs {
			jobs[k] = benchJob(int64(i + k))
		}
		if _, err := s.SubmitJobs(ctx, jobs, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	l, _, _ := s.TryLease(ctx, "bench", time.Hour)
	b.Run("ActiveJobs", func(b *testing.B) {
		for b.Loop() {
			if js, err := s.ActiveJobs(ctx); err != nil || len(js) < queued-1000 {
				b.Fatal(len(js), err)
			}
		}
	})
	for _, starts := range []int{0, 10} {
		b.Run(fmt.Sprintf("ApplySchedule/starts=%d", starts), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				js, err := s.ActiveJobs(ctx)
				if err != nil {
					b.Fatal(err)
				}
				var d Decision
				pos := 0
				for _, j := range js {
					if j.State != gpufleet.JobQueued {
						continue
					}
					if len(d.Starts) < starts {
						d.Starts = append(d.Starts, Start{JobID: j.ID, Nodes: []gpufleet.AttemptNode{{Name: "n1", GPUs: []string{"g0"}}}})
						continue
					}
					pos++
					d.Queue = append(d.Queue, gpufleet.QueueEntry{ID: j.ID, Position: pos, TeamPosition: pos, Reason: "waiting"})
				}
				b.StartTimer()
				if err := s.ApplySchedule(ctx, l.Epoch, d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

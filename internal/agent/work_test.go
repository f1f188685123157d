package agent

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

var tokens = &gpufleet.WorkCounter{Metric: `tokens=([0-9,._e+]+)`, Unit: "tokens"}

// scanAll feeds out in chunks of n bytes, with each chunk sent twice and
// an overlapping resend, as the log shipper does after a failed send.
func scanAll(out string, n int) *float64 {
	var w workScan
	for off := 0; off < len(out); off += n {
		end := min(off+n, len(out))
		w.feed(tokens, int64(off), []byte(out[off:end]))
		w.feed(tokens, int64(off), []byte(out[off:end])) // resent: read once
		if off > 0 {
			w.feed(tokens, int64(off-1), []byte(out[off-1:end])) // overlapping resend
		}
	}
	w.end(tokens)
	if !w.Done {
		panic("end did not mark the scan done")
	}
	return w.Count
}

func TestWorkScan(t *testing.T) {
	long := strings.Repeat("x", maxWorkLine+10)
	for name, tc := range map[string]struct {
		out  string
		want float64 // -1: no count
	}{
		"last match counts":         {out: "step 1 tokens=100\nloss 2.3\nstep 2 tokens=250\n", want: 250},
		"a lower count is the last": {out: "tokens=900\ntokens=10\n", want: 10},
		"no newline at the end":     {out: "tokens=1\ntokens=77", want: 77},
		"separators and exponents":  {out: "tokens=1,200,000\n", want: 1.2e6},
		"exponent":                  {out: "tokens=3.5e9\n", want: 3.5e9},
		"nothing matches":           {out: "loss 2.3\n", want: -1},
		"an unreadable count":       {out: "tokens=5\ntokens=...\n", want: 5},
		"an over-long line skipped": {out: "tokens=5\n" + long + " tokens=9\ntokens=6\n", want: 6},
		"over-long, then the end":   {out: "tokens=5\n" + long + " tokens=9", want: 5},
		"carriage returns":          {out: "tokens=5\r\ntokens=8\r", want: 8},
		"empty":                     {out: "", want: -1},
	} {
		for _, n := range []int{1, 7, 4096, 1 << 20} {
			got := scanAll(tc.out, n)
			switch {
			case tc.want < 0 && got != nil:
				t.Errorf("%s, chunks of %d: count %g, want none", name, n, *got)
			case tc.want >= 0 && (got == nil || *got != tc.want):
				t.Errorf("%s, chunks of %d: count %v, want %g", name, n, got, tc.want)
			}
		}
	}
}

// TestWorkScanResumes: a scan saved mid-line and reloaded (a restarted
// agent, no compiled expression) goes on where it was.
func TestWorkScanResumes(t *testing.T) {
	var w workScan
	w.feed(tokens, 0, []byte("tokens=12\ntoke"))
	saved := workScan{Count: w.Count, Scanned: w.Scanned, Carry: append([]byte(nil), w.Carry...)}
	saved.feed(tokens, 14, []byte("ns=40\n"))
	if saved.Count == nil || *saved.Count != 40 {
		t.Fatalf("count %v after a reload mid-line, want 40", saved.Count)
	}
	if saved.feed(tokens, 100, []byte("tokens=1\n")) || *saved.Count != 40 {
		t.Errorf("bytes past a gap were read: %g", *saved.Count)
	}
}

// FuzzWorkScan: however the output is cut into chunks, the count is the
// one a single read of the whole output finds, and it is never negative,
// infinite or NaN.
func FuzzWorkScan(f *testing.F) {
	f.Add("tokens=5\ntokens=7", 3)
	f.Add("tokens=1,2,3\ntokens=-4\ntokens=1e400\n", 1)
	f.Add("tokens=\xff9\n", 2)
	f.Fuzz(func(t *testing.T, out string, n int) {
		if n <= 0 || n > 1<<16 {
			return
		}
		whole := scanAll(out, len(out)+1)
		got := scanAll(out, n)
		if (whole == nil) != (got == nil) || (got != nil && *got != *whole) {
			t.Fatalf("chunks of %d: %v, whole: %v", n, got, whole)
		}
		if got != nil && !(*got >= 0 && *got <= math.MaxFloat64) {
			t.Fatalf("count %g", *got)
		}
	})
}

// TestAgentReportsTheWorkItsJobPrints runs real jobs that print their
// running token count and checks that the terminal report carries the
// last one, read from the log as it ships (and when the server refuses
// the log too).
func TestAgentReportsTheWorkItsJobPrints(t *testing.T) {
	t.Setenv("GPUFLEET_TEST_SUPERVISE", "1")
	for name, refuse := range map[string]error{"log shipped": nil, "log refused": gpufleet.ErrUnsupported} {
		t.Run(name, func(t *testing.T) {
			be, err := simgpu.New([]simgpu.Spec{{Model: "h100-sxm-80gb", Count: 1}}, simgpu.WithNodeName("n1"))
			if err != nil {
				t.Fatal(err)
			}
			cp := &fakePlane{refuseLog: refuse}
			a, err := New(Config{Name: "n1", DataDir: t.TempDir(), Backend: "sim", JoinToken: "j",
				Runner: RunnerConfig{Supervisor: []string{os.Args[0]}, Environ: os.Environ()}}, be, cp, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { killAll(a.runner) })
			ctx := t.Context()
			if err := a.discover(ctx); err != nil {
				t.Fatal(err)
			}
			if err := a.register(ctx); err != nil {
				t.Fatal(err)
			}
			cp.resp = api.HeartbeatResponse{Start: []api.Assignment{{AttemptID: "a-1", JobID: "j-1", Team: "team-a", GPUs: []string{a.inventory[0].UUID},
				Work:    tokens,
				Command: []string{"sh", "-c", `echo "step 1 tokens=100"; echo "loss 2.1" >&2; echo "step 2 tokens=2,500"; printf "step 3 tokens=4000"`}}}}
			if err := a.beat(ctx); err != nil {
				t.Fatal(err)
			}
			var last api.AttemptReport
			poll(15*time.Second, func() bool {
				a.runner.Poll()
				a.shipLogs(ctx)
				reps := a.runner.Reports()
				if len(reps) == 1 && reps[0].State.Terminal() {
					last = reps[0]
					return true
				}
				return false
			})
			if last.State != gpufleet.AttemptSucceeded {
				t.Fatalf("attempt did not end: %+v", a.runner.Reports())
			}
			if last.Work == nil || *last.Work != 4000 {
				t.Errorf("reported work %v, want the last count printed, 4000 (no newline after it)", last.Work)
			}
		})
	}
}

// TestWorkOfAnAttemptThatNeverRan: an attempt refused before it launched
// has no output to count, and its failure is reported at once, not held
// for a work count that cannot come.
func TestWorkOfAnAttemptThatNeverRan(t *testing.T) {
	r := testRunner(t, t.TempDir(), time.Now)
	r.Start(api.Assignment{AttemptID: "a-1", GPUs: []string{"GPU-9"}, Command: []string{"true"}, Work: tokens})
	reps := r.Reports()
	if len(reps) != 1 || reps[0].State != gpufleet.AttemptFailed || reps[0].Work != nil {
		t.Fatalf("reports %+v, want a-1 failed without work", reps)
	}
}

// benchLog is 4 MiB of training output, one line in ten a token count.
func benchLog() []byte {
	var b strings.Builder
	for i := 0; b.Len() < 4<<20; i++ {
		if i%10 == 0 {
			fmt.Fprintf(&b, "step %d tokens=%d\n", i, i*4096)
		} else {
			fmt.Fprintf(&b, "step %d loss %.4f lr 3e-4 grad_norm 0.91 throughput 1234.5 samples/s\n", i, 2.5-float64(i)/1e6)
		}
	}
	return []byte(b.String())
}

// BenchmarkWorkScan is the work counter's cost on the agent per byte of
// output, fed in the log shipper's chunks.
func BenchmarkWorkScan(b *testing.B) {
	data := benchLog()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var w workScan
		for off := 0; off < len(data); off += logChunk {
			w.feed(tokens, int64(off), data[off:min(off+logChunk, len(data))])
		}
	}
}

// BenchmarkLineSplit is the baseline: only finding the lines.
func BenchmarkLineSplit(b *testing.B) {
	data := benchLog()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		n := 0
		for rest := data; len(rest) > 0; {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				break
			}
			n++
			rest = rest[i+1:]
		}
		_ = n
	}
}

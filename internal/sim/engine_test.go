package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

func mustTrace(t testing.TB, csv string) *Trace {
	t.Helper()
	tr, err := Read(strings.NewReader(csv), "csv", ReadOptions{Name: "test.csv"})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func mustCluster(t testing.TB, spec string) *Cluster {
	t.Helper()
	s, err := ParseClusterSpec(strings.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := BuildCluster(s, catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

const oneNode = `{"node_groups": [{"name": "n", "count": 1, "gpu": "v100-sxm2-16gb", "gpus_per_node": 8}]}`

func fakeConfig() Config {
	return Config{Policy: scheduler.Config{Name: "fake", UsageHalfLife: 100 * time.Second}, Schedule: fakeSchedule}
}

func f(v float64) *float64 { return &v }

func TestEngineHandComputed(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus\nj1,0,100,8\nj2,10,50,4\n")
	res, err := Run(tr, mustCluster(t, oneNode), fakeConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	want := Latency{
		Jobs: 2, Completed: 2,
		AvgJCTS: f(120), P50JCTS: f(100), P95JCTS: f(140), P99JCTS: f(140),
		AvgWaitS: f(45), P50WaitS: f(0), P95WaitS: f(90), P99WaitS: f(90),
		AvgSlowdown: f((1 + 140.0/50) / 2),
	}
	if diff := cmp.Diff(want, r.Latency); diff != "" {
		t.Errorf("latency (-want +got):\n%s", diff)
	}
	if r.MakespanS != 150 || math.Abs(r.GPUAllocationRatio-1000.0/1200) > 1e-12 {
		t.Errorf("makespan %v allocation %v, want 150 and 0.8333", r.MakespanS, r.GPUAllocationRatio)
	}
	// j2 queued at 10 with an ETA of 10+3600 s and started at 100.
	if r.ETAJobs != 1 || *r.ETAMedianAbsErrorS != 3510 {
		t.Errorf("eta jobs %d median error %v, want 1 and 3510", r.ETAJobs, *r.ETAMedianAbsErrorS)
	}
	// j2's 4 GPUs were free but too few for nobody: j2 needed 4 of 0 free
	// while j1 ran, so no fragmentation.
	if r.FragmentationGPUs != 0 {
		t.Errorf("fragmentation = %v, want 0", r.FragmentationGPUs)
	}
}

func TestEnginePreemptionKeepsProgress(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus,priority,team\nb,0,100,8,batch,x\np,40,10,8,production,y\n")
	res, err := Run(tr, mustCluster(t, oneNode), fakeConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	// b runs 0-40 (40%), p runs 40-50, b resumes 50-110.
	if r.Preemptions != 1 || *r.ByTeam["x"].AvgJCTS != 110 || *r.ByTeam["y"].AvgJCTS != 10 || r.MakespanS != 110 {
		t.Errorf("preemptions %d, JCT x %v y %v, makespan %v; want 1, 110, 10, 110",
			r.Preemptions, *r.ByTeam["x"].AvgJCTS, *r.ByTeam["y"].AvgJCTS, r.MakespanS)
	}
	// b's slowdown is JCT over time on GPUs: 110/100.
	if got := *r.ByTeam["x"].AvgSlowdown; math.Abs(got-1.1) > 1e-12 {
		t.Errorf("b slowdown = %v, want 1.1", got)
	}
}

func TestJobResultsCSV(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus,priority,team\nb,0,100,8,batch,x\np,40,10,8,production,y\n")
	res, err := Run(tr, mustCluster(t, oneNode), fakeConfig())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteJobsCSV(&buf, res.Jobs); err != nil {
		t.Fatal(err)
	}
	// b ran 0-40, was preempted for p (40-50), and ran again 50-110. p
	// queued at submission and was shown the fake scheduler's ETA, an hour
	// away, with no p90 (no history); b started at once and was shown none.
	want := "id,team,class,gpus,submit_s,first_start_s,finish_s,wait_s,run_s,jct_s,slowdown,stops,model,end,eta_p50_s,eta_p90_s\n" +
		"b,x,batch,8,0,0,110,0,100,110,1.1,1,v100-sxm2-16gb,completed,,\n" +
		"p,y,production,8,40,40,50,0,10,10,1,0,v100-sxm2-16gb,completed,3600,\n"
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("jobs CSV (-want +got):\n%s", diff)
	}
}

func TestEngineHeterogeneousSpeed(t *testing.T) {
	cl := mustCluster(t, `{"node_groups": [{"name": "k", "count": 1, "gpu": "k80", "gpus_per_node": 8}]}`)
	tr := mustTrace(t, "id,submit_s,duration_s,gpus,duration_s_k80\nj,0,100,8,400\n")
	res, err := Run(tr, cl, fakeConfig())
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.MakespanS != 400 {
		t.Errorf("makespan on K80 = %v, want the K80 duration 400", res.Report.MakespanS)
	}
}

func TestUsageDecay(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus,team\nj,0,100,8,a\nk,200,1,1,b\n")
	var seen []scheduler.Team
	cfg := fakeConfig()
	cfg.Schedule = func(in scheduler.Input) scheduler.Output {
		if in.Now.Equal(DefaultEpoch.Add(200 * time.Second)) {
			seen = append(seen, in.Teams...)
		}
		return fakeSchedule(in)
	}
	if _, err := Run(tr, mustCluster(t, oneNode), cfg); err != nil {
		t.Fatal(err)
	}
	// 8 GPUs for 100 s with a 100 s half-life: 8*100/ln2*(1-1/2), then
	// halved again by t=200.
	want := 8 * 100 / math.Ln2 * 0.5 * 0.5
	if len(seen) != 2 || seen[0].Name != "a" || math.Abs(seen[0].Usage-want) > 1e-9 || seen[1].Usage != 0 {
		t.Errorf("teams at 200 s = %+v, want a's usage %v", seen, want)
	}
}

func TestFillNeverEnds(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus,sharing\na,0,10,1,timeslice:0.3\nb,0,10,2,\n")
	cfg := fakeConfig()
	cfg.Fill = 1.5
	cfg.Seed = 7
	res, err := Run(tr, mustCluster(t, oneNode), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	if r.Completed != 0 || r.FinalAllocatedGPUs > 8 || r.FinalAllocatedGPUs+r.UnallocatedGPUs != 8 || r.Unfinished == 0 {
		t.Errorf("fill: completed %d allocated %v unallocated %v unfinished %d", r.Completed, r.FinalAllocatedGPUs, r.UnallocatedGPUs, r.Unfinished)
	}
}

func TestEngineRejectsDoubleBooking(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus\nj1,0,100,1\nj2,0,100,1\n")
	cfg := fakeConfig()
	cfg.Schedule = func(in scheduler.Input) scheduler.Output {
		var out scheduler.Output
		for _, j := range in.Jobs {
			if !j.Running() {
				out.Starts = append(out.Starts, scheduler.Start{Job: j.ID, Placement: []scheduler.Placement{{Node: "n-000", GPUs: []string{"n-000-gpu0"}, Fraction: 1}}})
			}
		}
		return out
	}
	_, err := Run(tr, mustCluster(t, oneNode), cfg)
	if err == nil || !strings.Contains(err.Error(), "n-000-gpu0") {
		t.Errorf("err = %v, want a double-booking error naming the GPU", err)
	}
}

func tinyRun(t *testing.T, cfg Config) []byte {
	t.Helper()
	f, err := os.Open("testdata/tiny.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := Read(f, "csv", ReadOptions{Name: "tiny.csv"})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := os.ReadFile("testdata/tiny-cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(tr, mustCluster(t, string(cf)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res.Report); err != nil {
		t.Fatal(err)
	}
	if err := WriteSVG(&buf, res); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDeterministicWithNoiseAndFailures(t *testing.T) {
	cfg := fakeConfig()
	cfg.EstimateError, cfg.Seed, cfg.NodeMTBF, cfg.RepairTime = 0.5, 42, 3000, 600
	a, b := tinyRun(t, cfg), tinyRun(t, cfg)
	if !bytes.Equal(a, b) {
		t.Fatalf("two runs with the same seed differ")
	}
	cfg.Seed = 43
	if c := tinyRun(t, cfg); bytes.Equal(a, c) {
		t.Errorf("a different seed gave the same report; the seed is not used")
	}
}

func TestEngineRestartOverhead(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus,priority,team\nb,0,100,8,batch,x\np,40,10,8,production,y\n")
	cfg := fakeConfig()
	cfg.RestartOverhead = 15
	res, err := Run(tr, mustCluster(t, oneNode), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// b runs 0-40 (40%), p 40-50, b restarts 50-65, then its last 60% 65-125.
	if got := *res.Report.ByTeam["x"].AvgJCTS; got != 125 {
		t.Errorf("JCT of the preempted job = %v, want 125 (15 s to restart)", got)
	}
}

func TestEngineGraceHoldsGPUs(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus,priority,team,grace_s\nb,0,100,8,batch,x,5\np,40,10,8,production,y,\n")
	res, err := Run(tr, mustCluster(t, oneNode), fakeConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	// b is told to stop at 40 (40% done) and holds its GPUs through its 5 s
	// grace; p runs 45-55; b resumes 55-115. b was on GPUs 45 + 60 s.
	if *r.ByTeam["x"].AvgJCTS != 115 || *r.ByTeam["y"].AvgJCTS != 15 || r.Stops[string(scheduler.PreemptPriority)] != 1 {
		t.Errorf("JCT x %v y %v, stops %v; want 115, 15 and one preempted_priority", *r.ByTeam["x"].AvgJCTS, *r.ByTeam["y"].AvgJCTS, r.Stops)
	}
	if b := res.Jobs[0]; b.RunS != 105 || b.Stops != 1 || b.End != "completed" {
		t.Errorf("b = %+v, want 105 s on GPUs, 1 stop, completed", b)
	}
}

// realConfig is the gpufleet policy, with its 30 s default grace.
func realConfig(t *testing.T) Config {
	t.Helper()
	pc, err := scheduler.PolicyConfig("gpufleet")
	if err != nil {
		t.Fatal(err)
	}
	return Config{Policy: pc}
}

func TestEngineTimeLimitAndCancel(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus,time_limit_s,cancel_s,grace_s\n"+
		"long,0,1000,2,100,,\n"+ // stopped at 100, ends at 130 (the default grace)
		"fits,0,50,2,100,,\n"+ // done before its limit
		"quit,0,1000,2,,60,10\n"+ // cancelled at 60, ends at 70
		"big,1,10,8,,5,\n"+ // cancelled at 6 while it queues: never runs
		"early,2,10,2,,5,\n") // backfills at 2, cancelled at 7, done at 12 within its grace
	res, err := Run(tr, mustCluster(t, oneNode), realConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]JobResult{}
	for _, j := range res.Jobs {
		got[j.ID] = j
	}
	want := map[string]struct {
		end        string
		run, start float64
	}{
		"long":  {string(scheduler.StopTimeLimit), 130, 0},
		"fits":  {"completed", 50, 0},
		"quit":  {string(scheduler.StopCancel), 70, 0},
		"big":   {string(scheduler.StopCancel), 0, -1},
		"early": {"completed", 10, 2},
	}
	for id, w := range want {
		if j := got[id]; j.End != w.end || j.RunS != w.run || j.FirstStartS != w.start {
			t.Errorf("%s = %+v, want end %s, %v s on GPUs, first start %v", id, j, w.end, w.run, w.start)
		}
	}
	r := res.Report
	want2 := Report{Completed: 2, Ended: map[string]int{"time_limit": 1, "cancelled": 2}, Stops: map[string]int{"time_limit": 1, "cancelled": 2}}
	if r.Completed != want2.Completed || !maps.Equal(r.Ended, want2.Ended) || !maps.Equal(r.Stops, want2.Stops) {
		t.Errorf("completed %d, ended %v, stops %v; want %d, %v, %v", r.Completed, r.Ended, r.Stops, want2.Completed, want2.Ended, want2.Stops)
	}
}

// TestEngineRetries replays failing runs: the core's retry decision
// (scheduler.AfterRun) queues a job again while its retries last, then
// fails it; a retried job resumes from its checkpoint.
func TestEngineRetries(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus,retries,fails,fail_after_s\n"+
		"flaky,0,100,1,2,2,10\n"+ // fails twice, then succeeds on its last retry
		"doomed,0,100,1,1,3,10\n"+ // fails twice with one retry: it fails
		"solid,0,100,1,0,0,\n")
	cfg := realConfig(t)
	cfg.RestartOverhead = 0
	res, err := Run(tr, mustCluster(t, oneNode), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	if r.FailedRuns != 4 || r.Retries != 3 || r.Completed != 2 || r.Ended[string(scheduler.CauseNoRetries)] != 1 {
		t.Errorf("failed runs %d, retries %d, completed %d, ended %v; want 4, 3, 2, one %s", r.FailedRuns, r.Retries, r.Completed, r.Ended, scheduler.CauseNoRetries)
	}
	for _, j := range res.Jobs {
		if j.ID == "flaky" && j.RunS != 100 {
			t.Errorf("flaky ran %v s, want 100 (each failure at 10 s resumes from there)", j.RunS)
		}
	}
}

func TestEngineTimeLimitFactor(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus,estimate_s\nover,0,1000,1,100\nunder,0,150,1,100\n")
	cfg := realConfig(t)
	cfg.TimeLimitFactor = 2 // limits of 200 s
	res, err := Run(tr, mustCluster(t, oneNode), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Report; r.Completed != 1 || r.Ended[string(scheduler.StopTimeLimit)] != 1 || res.Jobs[0].RunS != 230 {
		t.Errorf("completed %d, ended %v, over ran %v s; want 1, one time_limit, 200 s + 30 s grace", r.Completed, r.Ended, res.Jobs[0].RunS)
	}
}

func TestEngineFailedRequest(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus\nok,0,10,1\nbad,0,10,1\n")
	cfg := fakeConfig()
	cfg.Schedule = func(in scheduler.Input) scheduler.Output {
		out := fakeSchedule(in)
		for i, s := range out.Starts {
			if s.Job == "bad" {
				out.Starts = slices.Delete(out.Starts, i, i+1)
				out.Fails = append(out.Fails, scheduler.Fail{Job: "bad", Code: scheduler.FailInvalid, Reason: "test"})
				break
			}
		}
		return out
	}
	res, err := Run(tr, mustCluster(t, oneNode), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Report; r.Completed != 1 || r.Ended[scheduler.FailInvalid] != 1 || res.Jobs[1].End != scheduler.FailInvalid {
		t.Errorf("completed %d, ended %v, bad %+v; want 1 and one invalid_request", r.Completed, r.Ended, res.Jobs[1])
	}
}

func TestEngineDrains(t *testing.T) {
	two := `{"node_groups": [{"name": "n", "count": 2, "gpu": "h100-sxm-80gb", "gpus_per_node": 8}]}`
	var rows strings.Builder
	rows.WriteString("id,submit_s,duration_s,gpus,preemptible\n")
	for i := range 40 {
		fmt.Fprintf(&rows, "j%02d,%d,3600,4,true\n", i, i*600)
	}
	cfg := realConfig(t)
	cfg.DrainMTBF, cfg.RepairTime, cfg.Seed = 4*3600, 1800, 3
	res, err := Run(mustTrace(t, rows.String()), mustCluster(t, two), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	if r.Drains == 0 || r.Stops[string(scheduler.StopDrain)] == 0 || r.Completed != 40 {
		t.Fatalf("drains %d, stops %v, completed %d; want drains, drain stops, and every job done", r.Drains, r.Stops, r.Completed)
	}
	stopped := 0
	for _, j := range res.Jobs {
		if j.Stops > 0 {
			stopped++
			if j.RunS <= 3600 {
				t.Errorf("%s was drained but ran only %v s: the grace and the lost work must show", j.ID, j.RunS)
			}
		}
	}
	if stopped == 0 {
		t.Errorf("no job records a stop")
	}
	again, err := Run(mustTrace(t, rows.String()), mustCluster(t, two), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, again.Report); diff != "" {
		t.Errorf("same seed, different report:\n%s", diff)
	}
}

// TestEnginePreemptionBounds replays one batch job that four production
// jobs in a row would preempt: the replay keeps the job's preemption
// history (through scheduler.Apply) so the per-day bound holds, and the
// report says how often one job was stopped.
func TestEnginePreemptionBounds(t *testing.T) {
	trace := "id,submit_s,duration_s,gpus,priority,team,preemptible\nb,0,10000,8,batch,x,true\n" +
		"p1,100,10,8,production,x,false\np2,1000,10,8,production,x,false\np3,2000,10,8,production,x,false\np4,3000,10,8,production,x,false\n"
	tests := map[string]struct {
		perDay, want int
	}{
		"default bound, two a day": {perDay: 0, want: 2},
		"one a day":                {perDay: 1, want: 1},
		"no bound":                 {perDay: -1, want: 4},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pc, err := scheduler.PolicyConfig("gpufleet")
			if err != nil {
				t.Fatal(err)
			}
			pc.MaxPreemptionsPerDay = tc.perDay
			res, err := Run(mustTrace(t, trace), mustCluster(t, oneNode), Config{Policy: pc})
			if err != nil {
				t.Fatal(err)
			}
			r := res.Report
			if r.Preemptions != tc.want || r.MaxJobPreemptions != tc.want || r.MaxJobStops != tc.want || r.Completed != 5 {
				t.Errorf("preemptions %d, most of one job %d, most stops %d, completed %d; want %d, %d, %d, 5",
					r.Preemptions, r.MaxJobPreemptions, r.MaxJobStops, r.Completed, tc.want, tc.want, tc.want)
			}
		})
	}
}

// TestRackBudgetHolds: with every rack's budget below its rated draw and
// every running GPU drawing its TDP (the prior the scheduler starts
// from), the replay never runs a rack over its budget, and jobs wait for
// power (rack_power) where, without budgets, they would have run.
func TestRackBudgetHolds(t *testing.T) {
	cluster := `{"node_groups": [{"name": "n", "count": 4, "gpu": "v100-sxm2-16gb", "gpus_per_node": 8, "nodes_per_rack": 2}]}`
	var trace strings.Builder
	trace.WriteString("id,submit_s,duration_s,gpus\n")
	for i := range 40 {
		fmt.Fprintf(&trace, "j%d,%d,%d,%d\n", i, i*60, 3000+i*97%2000, 1+i%8)
	}
	run := func(budget float64) Report {
		pc, _ := scheduler.PolicyConfig("gpufleet")
		res, err := Run(mustTrace(t, trace.String()), mustCluster(t, cluster), Config{Policy: pc, RackBudget: budget})
		if err != nil {
			t.Fatal(err)
		}
		return res.Report
	}
	free, tight := run(0), run(0.7)
	if tight.RackPower == nil || tight.RackPower.Racks != 2 {
		t.Fatalf("rack power report %+v, want 2 racks", tight.RackPower)
	}
	if tight.RackPower.MinutesOverBudget != 0 {
		t.Errorf("%.1f rack-minutes over budget with the prior holding, want 0", tight.RackPower.MinutesOverBudget)
	}
	if tight.WaitReasons[scheduler.ReasonRackPower] == 0 || tight.Completed != 40 {
		t.Errorf("waits %v, completed %d: want jobs held for power, all completed", tight.WaitReasons, tight.Completed)
	}
	if *tight.AvgJCTS <= *free.AvgJCTS {
		t.Errorf("avg JCT %v with a 70%% budget, %v without: the budget should cost time", *tight.AvgJCTS, *free.AvgJCTS)
	}
}

// TestEngineHistoryEstimates: with --estimates history no job carries an
// estimate; the scheduler learns one from the replay's finished runs. Three
// ten-minute 8-GPU jobs finish, then j5 queues behind j4 and is told it
// starts ten minutes later; with --estimates none it is told the default's
// four hours.
func TestEngineHistoryEstimates(t *testing.T) {
	tr := mustTrace(t, "id,submit_s,duration_s,gpus\nj1,0,600,8\nj2,1000,600,8\nj3,2000,600,8\nj4,3000,600,8\nj5,3001,600,8\n")
	eta := map[string]float64{}
	for _, mode := range []string{EstimatesHistory, EstimatesNone} {
		cfg := Config{Estimates: mode}
		var err error
		if cfg.Policy, err = scheduler.PolicyConfig("gpufleet"); err != nil {
			t.Fatal(err)
		}
		res, err := Run(tr, mustCluster(t, oneNode), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range res.Jobs {
			if j.ID == "j5" {
				eta[mode] = j.ETAP50S
			}
		}
	}
	if got := eta[EstimatesHistory]; math.Abs(got-599) > 2 {
		t.Errorf("history: j5 told %g s, want j4's learned ten minutes (599 s)", got)
	}
	if got := eta[EstimatesNone]; got < 3*3600 {
		t.Errorf("none: j5 told %g s, want the default's hours", got)
	}
	if _, err := Run(tr, mustCluster(t, oneNode), Config{Estimates: "guess"}); err == nil {
		t.Error("an unknown estimates mode is accepted")
	}
}

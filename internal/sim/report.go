package sim

import (
	"encoding/csv"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
)

// Latency is the wait and job-completion-time summary of a set of jobs, in
// seconds. Values are null when no job of the set completed.
type Latency struct {
	Jobs      int      `json:"jobs"`
	Completed int      `json:"completed"`
	AvgJCTS   *float64 `json:"avg_jct_s"`
	P50JCTS   *float64 `json:"p50_jct_s"`
	P95JCTS   *float64 `json:"p95_jct_s"`
	P99JCTS   *float64 `json:"p99_jct_s"`
	AvgWaitS  *float64 `json:"avg_wait_s"`
	P50WaitS  *float64 `json:"p50_wait_s"`
	P95WaitS  *float64 `json:"p95_wait_s"`
	P99WaitS  *float64 `json:"p99_wait_s"`
	// AvgSlowdown is the mean of JCT / run time.
	AvgSlowdown *float64 `json:"avg_slowdown"`
}

// Report is the outcome of a simulation, as `gpufleet sim -o json` prints
// it. Keys are a contract: add, never rename.
type Report struct {
	Policy string `json:"policy"`
	Trace  string `json:"trace"`
	Format string `json:"format"`
	Jobs   int    `json:"jobs"`
	// Completed jobs finished their work; Unfinished did not: they never
	// started, never ended (nothing in the cluster fits them, or the FGD
	// fill never ends them), or ended unfinished (Ended says how).
	Completed  int `json:"completed"`
	Unfinished int `json:"unfinished"`
	// NeverStarted counts the jobs still queued, never started, when the
	// replay ended (it runs until the queue drains or nothing more can
	// start); jobs cancelled or refused before they started are in Ended
	// instead. NeverStartedBySize is the same by GPUs asked.
	NeverStarted       int            `json:"never_started"`
	NeverStartedBySize map[string]int `json:"never_started_by_gpus,omitempty"`
	// Ended counts the jobs that ended unfinished by code: time_limit,
	// cancelled, invalid_request.
	Ended    map[string]int `json:"ended"`
	Skipped  int            `json:"skipped"`
	BadLines int            `json:"bad_lines"`
	// InvalidRows counts rows kept as invalid jobs (ReadOptions.KeepInvalid).
	InvalidRows int `json:"invalid_rows"`

	Latency

	CapacityGPUs int `json:"capacity_gpus"`
	// GPUAllocationRatio is allocated GPUs over capacity, time-weighted
	// from the first arrival to the end of the run.
	GPUAllocationRatio float64 `json:"gpu_allocation_ratio"`
	// FragmentationGPUs is the free GPU capacity the job at the head of the
	// queue cannot use, time-averaged (0 while the queue is empty).
	FragmentationGPUs float64 `json:"fragmentation_gpus"`
	// FinalAllocatedGPUs and UnallocatedGPUs are the state at the end of
	// the run: the FGD experiment's measure.
	FinalAllocatedGPUs float64 `json:"final_allocated_gpus"`
	UnallocatedGPUs    float64 `json:"unallocated_gpus"`
	// JainFairness is Jain's index over the teams' mean slowdowns.
	JainFairness *float64 `json:"jain_fairness"`
	// ETA accuracy: |actual start - EstimatedStart reported in the job's
	// submission cycle|, over jobs that queued then started.
	ETAMedianAbsErrorS *float64 `json:"eta_median_abs_error_s"`
	ETAP90AbsErrorS    *float64 `json:"eta_p90_abs_error_s"`
	ETAJobs            int      `json:"eta_jobs"`
	ETAUnknown         int      `json:"eta_unknown"`
	// ETAScore judges the ETA ranges shown at submission by size and
	// run-time class, against the forward simulation alone, "starts now"
	// and the median recent wait (etascore.go); null when no job queued.
	ETAScore *ETAScore `json:"eta_score"`

	MakespanS float64 `json:"makespan_s"`
	// Preemptions counts stops with a preempted_* code; Stops counts every
	// stop the scheduler decided by reason code (preempted_priority,
	// preempted_reclaim, preempted_starvation, drain, time_limit,
	// cancelled). Failures counts node failures and Lost the runs they
	// took down, which requeue (the server's attempt code node_lost);
	// Drains counts health drains.
	Preemptions int            `json:"preemptions"`
	Stops       map[string]int `json:"stops"`
	// MaxJobStops is the most stops one job went through (preemptions,
	// drains, lost runs), MaxJobPreemptions the most preemptions of one
	// job, and JobsStopped10 the jobs stopped ten times or more: what the
	// preemption bounds (scheduler.Config.MaxPreemptionsPerJob, PerDay)
	// limit.
	MaxJobStops       int `json:"max_job_stops"`
	MaxJobPreemptions int `json:"max_job_preemptions"`
	JobsStopped10     int `json:"jobs_stopped_10_plus"`
	Failures          int `json:"failures"`
	Lost              int `json:"lost"`
	// FailedRuns counts runs that failed (a trace's fails column) and
	// Retries those of them after which the core queued the job again
	// (scheduler.AfterRun, with the job's retries); the others ended their
	// job (Ended's retries_exhausted).
	FailedRuns int `json:"failed_runs"`
	// DrainsRefused counts health drains the quarantine circuit breaker
	// refused (scheduler.Breaker).
	DrainsRefused int `json:"drains_refused"`
	Retries       int `json:"retries"`
	Drains        int `json:"drains"`
	// WaitReasons counts, by reason code, why jobs that queued at their
	// submission waited then, as the scheduler told them.
	WaitReasons   map[string]int `json:"wait_reasons"`
	Cycles        int            `json:"cycles"`
	Decisions     int            `json:"decisions"`
	SimWallS      float64        `json:"sim_wall_s"`
	DecisionsPerS float64        `json:"decisions_per_s"`

	ByClass map[string]Latency `json:"by_class"`
	ByTeam  map[string]Latency `json:"by_team"`

	OfferedLoad *Load `json:"offered_load,omitempty"`
	// RackPower is the racks' power budgets and how often they were
	// exceeded; null without budgets (Config.RackBudget).
	RackPower *RackPower `json:"rack_power,omitempty"`
}

// Load is the offered load of a trace on a cluster: work asked for over
// capacity, with both counted in reference-GPU seconds.
//
//	speed(m)  = median over jobs of duration(ref) / duration(m)
//	work(j)   = gpus(j) * duration_ref(j)
//	capacity  = sum over GPUs of speed(model)
//	load(P)   = sum of work(j) for j arriving in P / (|P| * capacity)
type Load struct {
	RefModel        string             `json:"ref_model"`
	Speeds          map[string]float64 `json:"speeds"`
	CapacityRefGPUs float64            `json:"capacity_ref_gpus"`
	Overall         float64            `json:"overall"`
	PeriodS         float64            `json:"period_s,omitempty"`
	Periods         []LoadPeriod       `json:"periods,omitempty"`
}

// LoadPeriod is the offered load of the arrivals in [StartS, EndS).
type LoadPeriod struct {
	StartS float64 `json:"start_s"`
	EndS   float64 `json:"end_s"`
	Jobs   int     `json:"jobs"`
	Load   float64 `json:"load"`
}

func (e *engine) result() *Result {
	rep := Report{
		Policy: e.cfg.Policy.Name, Trace: e.tr.Name, Format: e.tr.Format,
		Jobs: len(e.jobs), Skipped: e.tr.Skipped, BadLines: e.tr.BadLines, InvalidRows: e.tr.Invalid,
		CapacityGPUs: e.total, Preemptions: e.preemptions, Failures: e.failures, Lost: e.lost, Drains: e.drains,
		FailedRuns: e.runFails, Retries: e.retried, DrainsRefused: e.drainsRefused,
		Stops: e.stopCodes, Ended: e.endCodes, WaitReasons: e.waitCodes,
		Cycles: e.cycles, Decisions: e.decisions,
		FinalAllocatedGPUs: e.allocated, UnallocatedGPUs: float64(e.total) - e.allocated,
		ByClass: map[string]Latency{}, ByTeam: map[string]Latency{},
	}
	end := e.now
	var all []*jobState
	byClass := map[string][]*jobState{}
	byTeam := map[string][]*jobState{}
	var waits, etaErr []float64
	for _, js := range e.jobs {
		all = append(all, js)
		byClass[string(js.j.Class)] = append(byClass[string(js.j.Class)], js)
		byTeam[js.j.Team] = append(byTeam[js.j.Team], js)
		rep.MaxJobStops = max(rep.MaxJobStops, js.stops)
		rep.MaxJobPreemptions = max(rep.MaxJobPreemptions, js.preemptions)
		if js.stops >= 10 {
			rep.JobsStopped10++
		}
		if js.phase == phaseDone {
			rep.Completed++
			end = max(end, js.finish)
		} else {
			rep.Unfinished++
		}
		if !js.started && js.phase != phaseEnded {
			rep.NeverStarted++
			if rep.NeverStartedBySize == nil {
				rep.NeverStartedBySize = map[string]int{}
			}
			rep.NeverStartedBySize[strconv.Itoa(js.j.GPUs)]++
		}
		if js.started {
			waits = append(waits, js.firstStart-js.submit)
			if js.etaOK {
				if js.eta < 0 {
					rep.ETAUnknown++
				} else {
					etaErr = append(etaErr, math.Abs(js.firstStart-js.eta))
				}
			}
		} else if js.etaOK && js.eta < 0 {
			rep.ETAUnknown++
		}
	}
	rep.ETAJobs = len(etaErr)
	slices.Sort(etaErr)
	rep.ETAMedianAbsErrorS = percentile(etaErr, 50)
	rep.ETAP90AbsErrorS = percentile(etaErr, 90)
	rep.Latency = latency(all)
	for _, k := range slices.Sorted(maps.Keys(byClass)) {
		rep.ByClass[k] = latency(byClass[k])
	}
	var slowdowns []float64
	for _, k := range slices.Sorted(maps.Keys(byTeam)) {
		l := latency(byTeam[k])
		rep.ByTeam[k] = l
		if l.AvgSlowdown != nil {
			slowdowns = append(slowdowns, *l.AvgSlowdown)
		}
	}
	rep.JainFairness = jain(slowdowns)
	if len(e.jobs) > 0 {
		rep.MakespanS = end - e.t0
		if span := end - e.t0; span > 0 {
			rep.GPUAllocationRatio = e.allocInt / (span * float64(e.total))
			rep.FragmentationGPUs = e.fragInt / span
		}
	}
	if e.cfg.Fill == 0 {
		rep.OfferedLoad = e.offeredLoad()
	}
	rep.ETAScore = e.etaScore()
	rep.RackPower = e.powerReport()
	slices.Sort(waits)
	return &Result{Report: rep, Timeline: e.timeline, Waits: waits, Jobs: e.jobResults()}
}

func (e *engine) jobResults() []JobResult {
	out := make([]JobResult, 0, len(e.jobs))
	for _, js := range e.jobs {
		r := JobResult{ID: js.j.ID, Team: js.j.Team, Class: string(js.j.Class), GPUs: js.j.GPUs,
			SubmitS: js.submit - e.t0, FirstStartS: -1, FinishS: -1, RunS: js.runTime, Stops: js.stops, Model: js.model, End: js.endCode,
			ETAP50S: -1, ETAP90S: -1}
		if js.eta >= 0 {
			r.ETAP50S = js.eta - js.submit
		}
		if js.etaP90 >= 0 {
			r.ETAP90S = js.etaP90 - js.submit
		}
		if js.started {
			r.FirstStartS = js.firstStart - e.t0
		}
		if js.phase == phaseDone {
			r.FinishS = js.finish - e.t0
		}
		out = append(out, r)
	}
	return out
}

// latency summarises a set of jobs.
func latency(jobs []*jobState) Latency {
	l := Latency{Jobs: len(jobs)}
	var jct, wait, slow []float64
	for _, js := range jobs {
		if js.phase != phaseDone {
			continue
		}
		l.Completed++
		c := js.finish - js.submit
		jct = append(jct, c)
		wait = append(wait, js.firstStart-js.submit)
		slow = append(slow, c/max(js.runTime, 1e-9))
	}
	slices.Sort(jct)
	slices.Sort(wait)
	l.AvgJCTS, l.P50JCTS, l.P95JCTS, l.P99JCTS = mean(jct), percentile(jct, 50), percentile(jct, 95), percentile(jct, 99)
	l.AvgWaitS, l.P50WaitS, l.P95WaitS, l.P99WaitS = mean(wait), percentile(wait, 50), percentile(wait, 95), percentile(wait, 99)
	l.AvgSlowdown = mean(slow)
	return l
}

// percentile is the nearest-rank percentile of sorted xs: the smallest
// value with at least p% of the values at or below it. nil when empty.
func percentile(sorted []float64, p float64) *float64 {
	n := len(sorted)
	if n == 0 {
		return nil
	}
	i := int(math.Ceil(p/100*float64(n))) - 1
	i = min(max(i, 0), n-1)
	v := sorted[i]
	return &v
}

func mean(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	v := s / float64(len(xs))
	return &v
}

// jain is Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when every x is
// equal, 1/n when one takes all. nil when empty.
func jain(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	s, s2 := 0.0, 0.0
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	v := 1.0
	if s2 > 0 {
		v = s * s / (float64(len(xs)) * s2)
	}
	return &v
}

// offeredLoad computes the trace's offered load on the cluster.
func (e *engine) offeredLoad() *Load {
	if len(e.jobs) == 0 {
		return nil
	}
	count := map[string]int{}
	for _, n := range e.nodes {
		for _, g := range n.GPUs {
			count[g.Model]++
		}
	}
	models := slices.Sorted(maps.Keys(count))
	// The reference is the model with the smallest median duration among
	// those the trace measured.
	ref, best := "", math.Inf(1)
	for _, m := range models {
		var ds []float64
		for _, js := range e.jobs {
			if d, ok := js.j.DurationOn[m]; ok {
				ds = append(ds, d)
			}
		}
		slices.Sort(ds)
		if p := percentile(ds, 50); p != nil && *p < best {
			ref, best = m, *p
		}
	}
	ld := &Load{RefModel: ref, Speeds: map[string]float64{}}
	for _, m := range models {
		speed := 1.0
		if ref != "" {
			var rs []float64
			for _, js := range e.jobs {
				dm, ok1 := js.j.DurationOn[m]
				dr, ok2 := js.j.DurationOn[ref]
				if ok1 && ok2 && dm > 0 {
					rs = append(rs, dr/dm)
				}
			}
			slices.Sort(rs)
			if p := percentile(rs, 50); p != nil {
				speed = *p
			}
		}
		ld.Speeds[m] = speed
		ld.CapacityRefGPUs += speed * float64(count[m])
	}
	work := func(js *jobState) float64 {
		return js.j.GPUDemand() * js.j.DurationFor(ref)
	}
	first, last := e.jobs[0].submit, e.jobs[len(e.jobs)-1].submit
	total := 0.0
	for _, js := range e.jobs {
		total += work(js)
	}
	if span := last - first; span > 0 && ld.CapacityRefGPUs > 0 {
		ld.Overall = total / (span * ld.CapacityRefGPUs)
	}
	if p := e.cfg.LoadPeriod; p > 0 && ld.CapacityRefGPUs > 0 {
		ld.PeriodS = p
		for start := first; start <= last; start += p {
			lp := LoadPeriod{StartS: start, EndS: min(start+p, last)}
			w := 0.0
			for _, js := range e.jobs {
				if js.submit >= start && (js.submit < start+p) {
					w += work(js)
					lp.Jobs++
				}
			}
			if d := lp.EndS - lp.StartS; d > 0 {
				lp.Load = w / (d * ld.CapacityRefGPUs)
			}
			ld.Periods = append(ld.Periods, lp)
			if p <= 0 {
				break
			}
		}
	}
	return ld
}

// WriteJobsCSV writes every job's outcome as CSV with a header: id, team,
// class, gpus, submit_s, first_start_s, finish_s, wait_s, run_s, jct_s,
// slowdown (JCT over run time), stops, model, end (completed, time_limit,
// cancelled, invalid_request; empty while unfinished), eta_p50_s and
// eta_p90_s (the range shown at submission, in seconds after it; empty
// when none). Times are seconds from the trace's first arrival; a job that
// never started or finished has empty cells for what it lacks.
func WriteJobsCSV(w io.Writer, jobs []JobResult) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"id", "team", "class", "gpus", "submit_s", "first_start_s", "finish_s", "wait_s", "run_s", "jct_s", "slowdown", "stops", "model", "end", "eta_p50_s", "eta_p90_s"})
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, r := range jobs {
		start, finish, wait, jct, slow := "", "", "", "", ""
		if r.FirstStartS >= 0 {
			start, wait = num(r.FirstStartS), num(r.FirstStartS-r.SubmitS)
		}
		if r.FinishS >= 0 {
			finish, jct = num(r.FinishS), num(r.FinishS-r.SubmitS)
			slow = num((r.FinishS - r.SubmitS) / max(r.RunS, 1e-9))
		}
		eta := func(v float64) string {
			if v < 0 {
				return ""
			}
			return num(v)
		}
		_ = cw.Write([]string{r.ID, r.Team, r.Class, strconv.Itoa(r.GPUs), num(r.SubmitS), start, finish, wait, num(r.RunS), jct, slow,
			strconv.Itoa(r.Stops), r.Model, r.End, eta(r.ETAP50S), eta(r.ETAP90S)})
	}
	cw.Flush()
	return cw.Error()
}

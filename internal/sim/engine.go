package sim

import (
	"container/heap"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/scheduler"
)

// ScheduleFunc is the scheduling core the engine drives:
// scheduler.Schedule, or a stand-in in tests.
type ScheduleFunc func(scheduler.Input) scheduler.Output

// Config is one simulation run.
type Config struct {
	// Policy is the scheduler configuration (scheduler.PolicyConfig).
	Policy scheduler.Config
	// Schedule is the scheduling core; nil means scheduler.Schedule.
	Schedule ScheduleFunc
	// EstimateError is the sigma of the multiplicative lognormal noise on
	// users' run-time estimates: estimate = true * exp(sigma * N(0,1)),
	// drawn once per job. 0 means estimates equal true run times.
	EstimateError float64
	// Estimates is where the scheduler's run-time estimates come from:
	// EstimatesUser (the trace's, or the true run time with EstimateError
	// noise; the zero value), EstimatesHistory (jobs are submitted without
	// one and the scheduler plans each on the runs of similar jobs that
	// finished before it, scheduler.Input.Runs: its workload Job.Name, its
	// team and size class, as the server does) or EstimatesNone (without
	// one and without a history: the policy's default for every job, what
	// a scheduler that ignores history does).
	Estimates string
	// Seed seeds the PCG behind every random draw (estimate noise,
	// failures, fill sampling).
	Seed uint64
	// TimeScale divides arrival times: 2 replays the arrivals twice as
	// fast. 0 means 1. Run times are not scaled.
	TimeScale float64
	// NodeMTBF is each node's mean time between failures in seconds
	// (exponential); 0 means no failures. A failed node is down for
	// RepairTime seconds; its jobs return to the queue with their progress.
	NodeMTBF, RepairTime float64
	// DrainMTBF is each node's mean time between health drains in seconds
	// (exponential); 0 means none. A drain follows the server's node
	// lifecycle (scheduler.Quarantine, Drained, Repaired, Validated): the
	// quarantine circuit breaker may refuse it (QuarantineMaxFraction of
	// the fleet's GPUs, 0 = the health rules' default); a drained node
	// takes no new work, the scheduler stops its jobs (reason code drain)
	// with their grace, and once it is empty it is in repair for
	// RepairTime seconds, then validates and returns to ready.
	DrainMTBF             float64
	QuarantineMaxFraction float64
	// TimeLimitFactor, when positive, gives every job without a time limit
	// of its own one of this many times its user's estimate, as a Slurm
	// user sets --time from an estimate; jobs that outrun it are stopped
	// (reason code time_limit) and end unfinished.
	TimeLimitFactor float64
	// RestartOverhead is the seconds a stopped job (preempted, drained, or
	// on a failed node) needs to resume from its checkpoint: added to its
	// remaining work. 0 means none; the CLI's default is
	// DefaultRestartOverhead.
	RestartOverhead float64
	// WindowStart and WindowEnd, when WindowEnd is positive, replay only
	// the jobs that arrive in [WindowStart, WindowEnd), in seconds from the
	// trace's first arrival before TimeScale: a time split of a trace (tune
	// on one window, score on another). The cluster starts empty.
	WindowStart, WindowEnd float64
	// RackBudget, when positive, gives every rack (Node.Rack) a power
	// budget of this fraction of its rated draw, which placements keep
	// under (scheduler.Input.Racks; see power.go). 0 means no budgets.
	RackBudget float64
	// DrawNoise is the sigma of the lognormal factor on each job's draw
	// per GPU around 0.75 of the TDP (capped at the TDP); 0 means every
	// running GPU draws its TDP, the prior the scheduler starts from.
	DrawNoise float64
	// RackReserve is the share of each rack's budget reserved for
	// production work (scheduler.Rack.ProductionReserveWatts); 0: none.
	RackReserve float64
	// TelemetryLag is how late the scheduler sees a GPU's draw, in
	// seconds: a job's GPUs are measured that long after it starts and
	// are charged their limit until then (power.Charging). 0 means
	// DefaultTelemetryLag; negative, no lag.
	TelemetryLag float64
	// PeakMargin is how far above its measured draw a running job's GPUs
	// are charged (power.Charging.PeakMargin); negative: always their
	// limit.
	PeakMargin float64
	// DrawSwing moves each running GPU's draw every telemetry period by a
	// uniform share of up to this much, up or down (a job's phases), so a
	// job can draw more than it was measured at; 0: constant per job.
	DrawSwing float64
	// PowerCaps models power limits set through NVML: a measured GPU's
	// draw is clipped to the charge its job was measured at.
	PowerCaps bool
	// Fill runs the FGD experiment: jobs never finish and arrive one per
	// second, sampled with replacement from the trace, until the GPUs they
	// ask for reach Fill times the cluster's GPUs. 0 means a normal replay.
	Fill float64
	// LoadPeriod, when positive, splits the offered-load report into
	// periods of this many seconds.
	LoadPeriod float64
	// Epoch is virtual time zero; the zero value means 2026-01-01 UTC.
	Epoch time.Time
	// Clock reads the wall clock for sim_wall_s and decisions_per_s; nil
	// leaves them 0 (and the report byte-identical across runs).
	Clock func() time.Time
	// Progress, when set, is called about every 2% of the arrivals and
	// every 256 cycles; the caller throttles.
	Progress func(Progress)
}

// Progress is a snapshot of a running simulation.
type Progress struct {
	Arrived, Jobs, Completed, Pending, Running int
	VirtualS                                   float64
}

// DefaultEpoch is virtual time zero unless Config.Epoch says otherwise.
var DefaultEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Result is a finished simulation.
type Result struct {
	Report   Report
	Timeline []Sample // one per event time, for plots
	// Waits are the first-start waits of every started job, in seconds.
	Waits []float64
	// Jobs is every job's outcome, in trace order.
	Jobs []JobResult
}

// JobResult is one job's outcome. Times are virtual seconds from the
// trace's first arrival; FirstStartS and FinishS are -1 when the job never
// started or never finished.
type JobResult struct {
	ID, Team, Class string
	GPUs            int
	SubmitS         float64
	FirstStartS     float64
	FinishS         float64
	RunS            float64 // time on GPUs, all runs together
	Stops           int     // preemptions, drains and failures it went through
	Model           string  // GPU model of its last run
	// End is how the job ended: "completed", a stop's reason code
	// (time_limit, cancelled), invalid_request, or "" when it had not
	// ended when the replay stopped.
	End string
	// ETAP50S and ETAP90S are the range the job was shown at submission,
	// in seconds after it; -1 when none was shown (it started at once, no
	// start could be estimated, or the p90 awaited more history).
	ETAP50S, ETAP90S float64
}

// Sample is the cluster's state after the decisions at one event time.
type Sample struct {
	T         float64 // virtual seconds
	Allocated float64 // GPUs allocated (time-slice shares count their fraction)
	Pending   int
	Running   int
}

type jobPhase int

const (
	phaseFuture jobPhase = iota
	phasePending
	phaseRunning
	phaseDone  // completed
	phaseEnded // ended unfinished: timed out, cancelled or failed
)

// The sources of the scheduler's estimates (Config.Estimates).
const (
	EstimatesUser    = ""
	EstimatesHistory = "history"
	EstimatesNone    = "none"
)

// endCompleted is JobResult.End of a job that finished its work.
const endCompleted = "completed"

type jobState struct {
	j      *Job
	submit float64 // scaled arrival
	// baseEstimate is the user's estimate of the whole run on the job's
	// reference (fastest) model, noise included.
	baseEstimate float64
	remaining    float64 // fraction of the work left
	restart      float64 // seconds of restart overhead owed at the next start (Config.RestartOverhead)
	paid         float64 // restart seconds included in the current run
	phase        jobPhase
	requeued     bool
	stops        int     // times stopped before its end
	endCode      string  // how a phaseEnded job ended
	timeLimit    float64 // seconds a run may last, 0 = none
	cancel       bool    // the user asked to cancel it
	// failsLeft is the runs still to fail (Job.Fails); retries the job's
	// budget as the core keeps it (scheduler.AfterRun).
	failsLeft int
	retries   gpufleet.Retries
	// A stopping job (stopAt >= 0) holds its GPUs until stopAt, when its
	// grace ends; its work counts until stopFrom, when it was told to stop.
	stopAt, stopFrom float64
	stopCode         gpufleet.StopCode
	queued           float64 // when it last entered the queue
	model            string  // GPU model of the current or last run
	version          int     // bumps on every stop, to drop stale completions

	start, end  float64       // current run
	etaEst      time.Duration // the run time it was planned on at submission (history estimates)
	runEstimate float64       // estimate of the current run, seconds
	placement   []scheduler.Placement
	gpus        []gpuRef
	fractions   []float64
	demand      float64

	firstStart float64 // -1 until started
	finish     float64
	runTime    float64
	// The ETAs the job was shown at submission, in virtual seconds, -1
	// unknown: the median (eta), the p90 (etaP90), the forward
	// simulation's start (etaSim) and, as a baseline, the median wait of
	// recent jobs of its size class (etaRecent).
	eta, etaP90, etaSim, etaRecent float64
	etaOK                          bool
	drawFactor                     float64 // its GPUs' draw, as a share of their TDP (Config.DrawNoise)
	started                        bool

	// preemptions, recentPreemptions and attained (GPU-time of its ended
	// runs, for LAS) are scheduler.Job's, as Apply keeps them.
	preemptions       int
	recentPreemptions []time.Time
	attained          time.Duration
}

type gpuRef struct{ node, gpu int }

type evKind int

// Events at one time are handled in this order, before the arrivals.
const (
	evComplete evKind = iota // a run ends its work
	evStopEnd                // a stopping job's grace ends
	evFail                   // a node fails: its jobs are lost
	evDrain                  // a health rule drains a node
	evRepair                 // a failed or drained node is back
	evLimit                  // a run reaches its time limit
	evCancel                 // the user cancels a job
	evWake                   // the scheduler asked to be run again (Output.Recheck)
	evRunFail                // a run fails (Job.Fails): the core retries the job or fails it
)

type event struct {
	t       float64
	kind    evKind
	seq     int
	job     *jobState
	version int // the job's or the node's, to drop stale events
	node    int
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(a, b int) bool {
	if h[a].t != h[b].t {
		return h[a].t < h[b].t
	}
	if h[a].kind != h[b].kind {
		return h[a].kind < h[b].kind
	}
	return h[a].seq < h[b].seq
}
func (h eventHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type engine struct {
	cfg   Config
	tr    *Trace
	epoch time.Time

	nodes   []scheduler.Node
	nodeVer []int // bumps whenever a node goes down, to drop its stale events
	// life is each node's place on the repair path, as the core moves it.
	life    []scheduler.NodeLife
	gpuIdx  map[string]gpuRef
	used    [][]float64
	total   int
	teams   []scheduler.Team
	teamIdx map[string]int
	rate    []float64 // GPUs each team holds now
	models  map[string]catalog.GPU
	stacks  map[string]gpufleet.StackVersions

	jobs    []*jobState
	byID    map[string]*jobState
	pending []*jobState
	running []*jobState
	// stopping are the running jobs in their grace.
	stopping []*jobState
	events   eventHeap
	// decide asks for a cycle even with an empty queue: a running job may
	// have to stop (time limit, cancel, drain). expire asks for graces that
	// have ended to be carried out.
	decide, expire bool
	draining       int     // nodes draining now
	wakeAt         float64 // the earliest evWake queued, +Inf when none
	seq            int
	rng            *rand.Rand

	now         float64
	t0          float64 // first arrival
	allocated   float64
	frag        float64
	allocInt    float64
	fragInt     float64
	timeline    []Sample
	cycles      int
	decisions   int
	preemptions int
	failures    int
	lost        int // runs lost with their node
	// drainsRefused counts drains the quarantine circuit breaker refused.
	drainsRefused int
	runFails      int // runs that failed (Job.Fails)
	retried       int // of them, the ones the core retried
	drains        int
	completed     int
	stopCodes     map[string]int // stops decided, by reason code
	endCodes      map[string]int // jobs ended unfinished, by code
	waitCodes     map[string]int // why jobs queued at their submission, by code
	buf           []scheduler.Job
	// fleetVersion changes whenever a node's state changes (failures,
	// repairs), so the scheduler may reuse its fleet index in between.
	fleetVersion uint64
	cache        scheduler.FleetCache
	// power is the racks' budgets and draws (Config.RackBudget); nil
	// without budgets. drawRNG draws the jobs' draw factors, apart from
	// rng so that other draws do not move with it.
	power   *rackPower
	drawRNG *rand.Rand
	// history is the recent waits the scheduler calibrates its ETAs on
	// (scheduler.Input.WaitHistory), oldest first, kept with
	// scheduler.KeepWait.
	history []scheduler.WaitSample
	// runs is the finished runs the estimates learn from with
	// Config.Estimates history (scheduler.Input.Runs), oldest first.
	runs        []scheduler.RunSample
	runsVersion uint64 // bumps on every run kept
	// arrivals is the jobs submitted in the policy's arrival window
	// (scheduler.Input.Arrivals), kept with scheduler.KeepArrivals.
	arrivals []scheduler.Job
}

// Run replays the trace on the cluster under cfg.
func Run(tr *Trace, cl *Cluster, cfg Config) (*Result, error) {
	if cfg.Schedule == nil {
		cfg.Schedule = defaultSchedule
	}
	if cfg.Schedule == nil {
		return nil, fmt.Errorf("%w: no scheduler", gpufleet.ErrUnsupported)
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 1
	}
	if cfg.Estimates != EstimatesUser && cfg.Estimates != EstimatesHistory && cfg.Estimates != EstimatesNone {
		return nil, fmt.Errorf("%w: estimates %q: want user, history or none", gpufleet.ErrInvalid, cfg.Estimates)
	}
	if cfg.TimeScale < 0 || cfg.EstimateError < 0 || cfg.NodeMTBF < 0 || cfg.DrainMTBF < 0 || cfg.RepairTime < 0 || cfg.Fill < 0 || cfg.TimeLimitFactor < 0 {
		return nil, fmt.Errorf("%w: time scale, estimate error, MTBFs, repair time, fill and time-limit factor must not be negative", gpufleet.ErrInvalid)
	}
	if cfg.WindowEnd > 0 && (cfg.WindowStart < 0 || cfg.WindowStart >= cfg.WindowEnd) {
		return nil, fmt.Errorf("%w: window [%g, %g): want 0 <= start < end", gpufleet.ErrInvalid, cfg.WindowStart, cfg.WindowEnd)
	}
	if len(cl.Nodes) == 0 {
		return nil, fmt.Errorf("%w: cluster has no nodes", gpufleet.ErrInvalid)
	}
	var wallStart time.Time
	if cfg.Clock != nil {
		wallStart = cfg.Clock()
	}
	e := newEngine(tr, cl, cfg)
	if err := e.loop(); err != nil {
		return nil, err
	}
	res := e.result()
	if cfg.Clock != nil {
		wall := cfg.Clock().Sub(wallStart).Seconds()
		res.Report.SimWallS = wall
		if wall > 0 {
			res.Report.DecisionsPerS = float64(e.decisions) / wall
		}
	}
	return res, nil
}

func newEngine(tr *Trace, cl *Cluster, cfg Config) *engine {
	e := &engine{
		cfg: cfg, tr: tr, epoch: cfg.Epoch,
		gpuIdx:  map[string]gpuRef{},
		teamIdx: map[string]int{},
		byID:    map[string]*jobState{},

		stopCodes: map[string]int{},
		endCodes:  map[string]int{},
		waitCodes: map[string]int{},
		models:    maps.Clone(cl.Models),
		stacks:    cl.Stacks,
		rng:       rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)),
		drawRNG:   rand.New(rand.NewPCG(cfg.Seed, 0x51ed270b27a39c7d)),

		fleetVersion: 1,
		wakeAt:       math.Inf(1),
	}
	if e.epoch.IsZero() {
		e.epoch = DefaultEpoch
	}
	for k, v := range tr.Models {
		if _, ok := e.models[k]; !ok {
			e.models[k] = v
		}
	}
	// Copy nodes so failures can change their state.
	e.nodes = make([]scheduler.Node, len(cl.Nodes))
	e.used = make([][]float64, len(cl.Nodes))
	e.nodeVer = make([]int, len(cl.Nodes))
	e.life = make([]scheduler.NodeLife, len(cl.Nodes))
	for i := range e.life {
		e.life[i].State = gpufleet.NodeReady
	}
	for i, n := range cl.Nodes {
		n.GPUs = slices.Clone(n.GPUs)
		e.nodes[i] = n
		e.used[i] = make([]float64, len(n.GPUs))
		for k, g := range n.GPUs {
			e.gpuIdx[g.ID] = gpuRef{i, k}
		}
		e.total += len(n.GPUs)
	}
	e.teams = slices.Clone(cl.Teams)
	for i := range e.teams {
		e.teams[i].Quota = maps.Clone(e.teams[i].Quota)
	}
	have := map[string]bool{}
	for _, t := range e.teams {
		have[t.Name] = true
	}
	jobs := tr.Jobs
	if cfg.Fill > 0 {
		jobs = e.fillJobs()
	} else if cfg.WindowEnd > 0 {
		jobs = window(jobs, cfg.WindowStart, cfg.WindowEnd)
	}
	for i := range jobs {
		j := &jobs[i]
		if !have[j.Team] {
			have[j.Team] = true
			e.teams = append(e.teams, scheduler.Team{Name: j.Team, Weight: 1, BorrowingLimit: -1})
		}
		est := j.Estimate
		if est <= 0 {
			est = j.RefDuration()
			if cfg.EstimateError > 0 {
				est *= math.Exp(cfg.EstimateError * e.rng.NormFloat64())
			}
		}
		js := &jobState{j: j, submit: j.Submit / cfg.TimeScale, baseEstimate: max(est, 1), remaining: 1, firstStart: -1,
			eta: -1, etaP90: -1, etaSim: -1, etaRecent: -1, stopAt: -1,
			timeLimit: j.TimeLimit, failsLeft: j.Fails, retries: gpufleet.Retries{Max: j.Retries}}
		if js.timeLimit == 0 && cfg.TimeLimitFactor > 0 && !math.IsInf(js.baseEstimate, 1) {
			js.timeLimit = cfg.TimeLimitFactor * js.baseEstimate
		}
		js.drawFactor = e.drawFactor()
		if j.Cancel > 0 {
			e.push(event{t: js.submit + j.Cancel, kind: evCancel, job: js})
		}
		e.jobs = append(e.jobs, js)
		e.byID[j.ID] = js
	}
	slices.SortFunc(e.teams, func(a, b scheduler.Team) int { return cmpString(a.Name, b.Name) })
	for i, t := range e.teams {
		e.teamIdx[t.Name] = i
	}
	e.rate = make([]float64, len(e.teams))
	slices.SortStableFunc(e.jobs, func(a, b *jobState) int {
		switch {
		case a.submit < b.submit:
			return -1
		case a.submit > b.submit:
			return 1
		}
		return 0
	})
	if len(e.jobs) > 0 {
		e.t0 = e.jobs[0].submit
		e.now = e.t0
	}
	for i := range e.nodes {
		e.pushNodeEvents(i)
	}
	e.power = e.newRackPower()
	return e
}

// window returns the jobs that arrive in [start, end) seconds from the
// first arrival, in trace order.
func window(jobs []Job, start, end float64) []Job {
	if len(jobs) == 0 {
		return nil
	}
	first := math.Inf(1)
	for i := range jobs {
		first = min(first, jobs[i].Submit)
	}
	var out []Job
	for _, j := range jobs {
		if t := j.Submit - first; t >= start && t < end {
			out = append(out, j)
		}
	}
	return out
}

// fillJobs samples the trace's jobs with replacement, one arrival per
// second, until they ask for Fill times the cluster's GPUs. They never end.
func (e *engine) fillJobs() []Job {
	if len(e.tr.Jobs) == 0 {
		return nil
	}
	var out []Job
	asked, target := 0.0, e.cfg.Fill*float64(e.total)
	for asked < target {
		j := e.tr.Jobs[e.rng.IntN(len(e.tr.Jobs))]
		j.ID = fmt.Sprintf("fill-%06d", len(out))
		j.Submit = float64(len(out)) * e.cfg.TimeScale
		j.Duration, j.DurationOn = math.Inf(1), nil
		asked += j.GPUDemand()
		out = append(out, j)
	}
	return out
}

func (e *engine) push(ev event) {
	e.seq++
	ev.seq = e.seq
	heap.Push(&e.events, ev)
}

func (e *engine) vtime(s float64) time.Time {
	return e.epoch.Add(time.Duration(math.Round(s * 1e9)))
}

func (e *engine) loop() error {
	ai := 0
	lastProgress := -1
	for {
		next := math.Inf(1)
		if ai < len(e.jobs) {
			next = e.jobs[ai].submit
		}
		if len(e.events) > 0 {
			next = min(next, e.events[0].t)
		}
		if math.IsInf(next, 1) {
			break
		}
		if ai >= len(e.jobs) && len(e.running) == 0 && (len(e.pending) == 0 || e.allReady()) && next > e.now {
			break // nothing left that could run; failures alone do not keep the clock going
		}
		e.advance(next)
		for len(e.events) > 0 && e.events[0].t <= next {
			ev := heap.Pop(&e.events).(event)
			e.handle(ev)
		}
		var arrived []*jobState
		for ai < len(e.jobs) && e.jobs[ai].submit <= next {
			js := e.jobs[ai]
			ai++
			if js.cancel {
				e.end(js, string(scheduler.StopCancel)) // cancelled before it arrived
				continue
			}
			js.phase = phasePending
			e.pending = append(e.pending, js)
			arrived = append(arrived, js)
		}
		if e.expire {
			// Graces that end now are carried out as Apply says, before
			// the cycle that may use the GPUs they free.
			e.expire = false
			if _, err := e.apply(scheduler.Output{}); err != nil {
				return err
			}
			// The cycle below, at this instant, may use the GPUs they freed.
		}
		e.frag = 0
		if len(e.pending) > 0 || e.decide {
			e.decide = false
			if err := e.cycle(arrived); err != nil {
				return err
			}
		}
		if e.draining > 0 {
			e.repairDrained()
		}
		e.powerAfter()
		e.powerWake()
		e.timeline = append(e.timeline, Sample{T: e.now, Allocated: e.allocated, Pending: len(e.pending), Running: len(e.running)})
		if e.cfg.Progress != nil && len(e.jobs) > 0 {
			if p := ai * 50 / len(e.jobs); p != lastProgress || e.cycles%256 == 0 {
				lastProgress = p
				e.cfg.Progress(Progress{Arrived: ai, Jobs: len(e.jobs), Completed: e.completed, Pending: len(e.pending), Running: len(e.running), VirtualS: e.now})
			}
		}
	}
	return nil
}

func (e *engine) allReady() bool {
	for _, n := range e.nodes {
		if n.State != scheduler.Ready {
			return false
		}
	}
	return true
}

// advance moves the clock to t, integrating allocation, fragmentation and
// the teams' decayed usage over the interval.
func (e *engine) advance(t float64) {
	dt := t - e.now
	if dt <= 0 {
		return
	}
	e.powerAdvance(dt)
	e.allocInt += e.allocated * dt
	e.fragInt += e.frag * dt
	h := e.cfg.Policy.UsageHalfLife.Seconds()
	for i := range e.teams {
		u, r := e.teams[i].Usage, e.rate[i]
		if h > 0 {
			d := math.Exp2(-dt / h)
			e.teams[i].Usage = u*d + r*h/math.Ln2*(1-d)
		} else {
			e.teams[i].Usage = u + r*dt
		}
	}
	e.now = t
}

func (e *engine) handle(ev event) {
	js := ev.job
	switch ev.kind {
	case evComplete:
		if js.phase != phaseRunning || js.version != ev.version {
			return
		}
		e.release(js)
		js.runTime += e.now - js.start
		js.remaining = 0
		js.phase = phaseDone
		if e.cfg.Estimates == EstimatesHistory {
			e.runs = scheduler.KeepRun(e.runs, scheduler.RunSample{Team: js.j.Team, Workload: js.j.Name, GPUs: js.j.GPUs,
				Ran: seconds(js.runTime)})
			e.runsVersion++
		}
		js.finish = e.now
		js.endCode = endCompleted
		e.completed++
		// The GPUs it freed may be worth moving a running job to
		// (Config.UpgradeGain), queue or not: the server's leader runs
		// its cycle whatever the queue holds.
		e.decide = e.decide || e.cfg.Policy.UpgradeGain > 0
	case evStopEnd:
		e.expire = true
	case evLimit:
		if js.phase == phaseRunning && js.version == ev.version {
			e.decide = true // the scheduler stops it
		}
	case evCancel:
		js.cancel = true
		switch js.phase {
		case phasePending:
			// A queued job being cancelled is the caller's to drop, as the
			// server's store does.
			e.pending = slices.DeleteFunc(e.pending, func(p *jobState) bool { return p == js })
			e.end(js, string(scheduler.StopCancel))
		case phaseRunning:
			e.decide = true
		}
	case evFail:
		if ev.version != e.nodeVer[ev.node] || e.nodes[ev.node].State == scheduler.Down {
			return
		}
		// The node stops reporting: the scheduler declares its runs lost
		// (node_lost, no grace) and they requeue with their progress.
		e.failures++
		e.down(ev.node)
		e.nodes[ev.node].LastSeen = e.vtime(e.now)
		e.decide = true
	case evDrain:
		n := &e.nodes[ev.node]
		if ev.version != e.nodeVer[ev.node] || n.State != scheduler.Ready {
			return
		}
		l, ok := scheduler.Quarantine(e.life[ev.node], "simulated health drain")
		if !ok {
			return
		}
		if q := scheduler.Breaker(e.fleetView(), len(n.GPUs), e.cfg.QuarantineMaxFraction); !q.Allowed {
			e.drainsRefused++
			e.pushNodeEvents(ev.node)
			return
		}
		e.drains++
		e.draining++
		e.life[ev.node] = l
		e.setNode(ev.node, scheduler.StateOf(l.State), l.Reason)
		e.decide = true
	case evWake:
		if ev.t == e.wakeAt {
			e.wakeAt = math.Inf(1)
		}
		e.decide = true
	case evRunFail:
		if js.phase == phaseRunning && js.version == ev.version {
			e.runFailed(js)
		}
	case evRepair:
		if l, err := scheduler.Repaired(e.life[ev.node], "simulator"); err == nil {
			// Repaired after RepairTime; its validation passes.
			e.life[ev.node], _ = scheduler.Validated(l, true, "")
		}
		e.setNode(ev.node, scheduler.StateOf(e.life[ev.node].State), "")
		e.nodes[ev.node].LastSeen = time.Time{}
		e.pushNodeEvents(ev.node)
	}
}

// runFailed ends js's run as failed (exit 1) and carries out what the
// core decides (scheduler.Ended, as the server's store does): the job
// queues again with a retry used, resuming from its checkpoint, or fails.
func (e *engine) runFailed(js *jobState) {
	exit := 1
	in := scheduler.Input{Now: e.vtime(e.now), Jobs: []scheduler.Job{e.schedJob(js)}}
	_, next := scheduler.Ended(in, []scheduler.End{{Job: js.j.ID, RunEnd: scheduler.RunEnd{State: gpufleet.AttemptFailed, ExitCode: &exit}}}, in.Now)
	js.failsLeft--
	e.runFails++
	n := next[0]
	js.retries = n.Retries
	switch n.State {
	case gpufleet.JobQueued:
		e.retried++
		e.requeue(js, e.now)
	default:
		e.end(js, string(n.Cause))
	}
	e.decide = true
}

// pushNodeEvents draws node i's next failure and drain.
func (e *engine) pushNodeEvents(i int) {
	if e.cfg.NodeMTBF > 0 {
		e.push(event{t: e.now + e.rng.ExpFloat64()*e.cfg.NodeMTBF, kind: evFail, node: i, version: e.nodeVer[i]})
	}
	if e.cfg.DrainMTBF > 0 {
		e.push(event{t: e.now + e.rng.ExpFloat64()*e.cfg.DrainMTBF, kind: evDrain, node: i, version: e.nodeVer[i]})
	}
}

// setNode sets a node and its GPUs to state.
func (e *engine) setNode(i int, state scheduler.GPUState, reason string) {
	e.fleetVersion++
	n := &e.nodes[i]
	n.State, n.Reason = state, reason
	n.GPUs = slices.Clone(n.GPUs) // the last input shares the old slice
	for k := range n.GPUs {
		n.GPUs[k].State = state
	}
}

// down takes node i down (it went silent) until RepairTime passes; its
// pending failure and drain events go stale. Its place on the repair path
// (e.life) is kept: a draining node that comes back still drains.
func (e *engine) down(i int) {
	e.nodeVer[i]++
	e.setNode(i, scheduler.Down, "")
	e.push(event{t: e.now + max(e.cfg.RepairTime, 1), kind: evRepair, node: i})
}

// fleetView is the fleet as the quarantine circuit breaker counts it:
// each node's GPUs and its place on the repair path.
func (e *engine) fleetView() []gpufleet.Node {
	out := make([]gpufleet.Node, len(e.nodes))
	for i, n := range e.nodes {
		out[i] = gpufleet.Node{Name: n.Name, State: e.life[i].State, StateCause: e.life[i].Cause, GPUs: make([]gpufleet.NodeGPU, len(n.GPUs))}
	}
	return out
}

// repairDrained moves every draining node that no job holds any more to
// repair (scheduler.Drained) for RepairTime; its pending failure and
// drain events go stale.
func (e *engine) repairDrained() {
	held := map[int]bool{}
	for _, js := range e.running {
		for _, g := range js.gpus {
			held[g.node] = true
		}
	}
	for i := range e.nodes {
		l, ok := scheduler.Drained(e.life[i], held[i])
		if !ok || e.nodes[i].State == scheduler.Down {
			continue
		}
		e.life[i] = l
		e.draining--
		e.nodeVer[i]++
		e.setNode(i, scheduler.StateOf(l.State), l.Reason)
		e.push(event{t: e.now + max(e.cfg.RepairTime, 1), kind: evRepair, node: i})
	}
}

// stop takes a running job off its GPUs and queues it again with the work
// it had left at from: when it was told to stop (preemption, drain), or
// now (node failure).
func (e *engine) stop(js *jobState, from float64) {
	e.requeue(js, from)
	js.requeued = true
	js.stops++
}

// requeue takes a running job off its GPUs and queues it again with the
// work it had left at from, plus the restart overhead.
func (e *engine) requeue(js *jobState, from float64) {
	e.release(js)
	js.runTime += e.now - js.start
	// The run first paid its restart overhead; the rest was work.
	work, d := from-js.start-js.paid, js.end-js.start-js.paid
	if work < 0 {
		js.restart += -work // stopped again while still restarting
		work = 0
	}
	if d > 0 {
		js.remaining *= max(0, 1-work/d)
	}
	js.restart += e.cfg.RestartOverhead // resuming from its checkpoint costs time
	js.phase = phasePending
	js.queued = e.now
	e.pending = append(e.pending, js)
}

// end ends a job unfinished with code; a running one leaves its GPUs.
func (e *engine) end(js *jobState, code string) {
	if js.phase == phaseRunning {
		e.release(js)
		js.runTime += e.now - js.start
	}
	js.phase, js.endCode = phaseEnded, code
	e.endCodes[code]++
}

// release takes js off its GPUs and out of the running set.
func (e *engine) release(js *jobState) {
	for i, g := range js.gpus {
		e.used[g.node][g.gpu] = max(0, e.used[g.node][g.gpu]-js.fractions[i])
	}
	e.allocated -= js.demand
	if e.allocated < 1e-9 {
		e.allocated = 0
	}
	e.rate[e.teamIdx[js.j.Team]] -= js.demand
	if i := slices.Index(e.running, js); i >= 0 {
		e.running = slices.Delete(e.running, i, i+1)
	}
	js.version++ // its completion and time-limit events go stale
	js.placement, js.gpus, js.fractions = nil, nil, nil
	if js.stopAt >= 0 {
		e.stopping = slices.DeleteFunc(e.stopping, func(s *jobState) bool { return s == js })
	}
	js.stopAt, js.stopCode = -1, ""
}

// cycle asks the scheduler for decisions at the current time and carries
// them out with scheduler.Apply, as the fleet would: a stopped job holds its
// GPUs until its grace ends (an evStopEnd event then frees them and the
// next cycle may use them).
func (e *engine) cycle(arrived []*jobState) error {
	in := e.input()
	// Estimated starts are only read for jobs that just arrived (ETA
	// accuracy is judged at submission), so the forward simulation runs
	// only in cycles that have arrivals.
	in.Config.ETA = in.Config.ETA && len(arrived) > 0
	for _, js := range arrived {
		e.arrivals = scheduler.KeepArrivals(e.arrivals, in.Now, in.Config.ArrivalWindow, e.schedJob(js))
	}
	if in.Config.ETA {
		in.WaitHistory = e.waitHistory()
		in.Arrivals = e.arrivals
	}
	if e.cfg.Estimates == EstimatesHistory {
		in.Runs, in.RunsVersion = e.runs, e.runsVersion+1 // non-zero: the index is cached between cycles
	}
	e.powerInput(&in)
	out := e.cfg.Schedule(in)
	e.cycles++
	e.recordArrivals(arrived, out.Pending)
	if err := e.check(out); err != nil {
		return fmt.Errorf("cycle at %.0f s: %w", e.now, err)
	}
	freed, err := e.apply(out)
	if err != nil {
		return fmt.Errorf("cycle at %.0f s: %w", e.now, err)
	}
	if freed {
		// A stop with no grace freed GPUs now: another cycle at this
		// instant may use them.
		e.push(event{t: e.now, kind: evWake})
	}
	if !out.Recheck.IsZero() {
		if t := out.Recheck.Sub(e.epoch).Seconds(); t > e.now && t < e.wakeAt {
			e.wakeAt = t
			e.push(event{t: t, kind: evWake})
		}
	}
	if len(out.Pending) > 0 {
		if js := e.byID[out.Pending[0].Job]; js != nil && js.phase == phasePending {
			e.frag = e.fragmentation(js)
		}
	}
	return nil
}

// check rejects decisions the scheduler may not make: starting a job that
// is not queued, stopping one that is not running or already stopping,
// failing one that is not queued.
func (e *engine) check(out scheduler.Output) error {
	for _, s := range out.Starts {
		if js := e.byID[s.Job]; js == nil || js.phase != phasePending {
			return fmt.Errorf("scheduler started %q, which is not pending", s.Job)
		}
	}
	for _, s := range out.Stops {
		if js := e.byID[s.Job]; js == nil || js.phase != phaseRunning || js.stopAt >= 0 {
			return fmt.Errorf("scheduler stopped %q, which is not running or is stopping already", s.Job)
		}
		if s.Grace < 0 {
			return fmt.Errorf("scheduler stopped %q with a negative grace %s", s.Job, s.Grace)
		}
	}
	for _, f := range out.Fails {
		if js := e.byID[f.Job]; js == nil || js.phase != phasePending {
			return fmt.Errorf("scheduler failed %q, which is not pending", f.Job)
		}
	}
	return nil
}

// apply carries out at the current time, with scheduler.Apply, the
// decisions of out (empty: only graces that end now). Apply treats each job
// on its own, so the engine hands it only the jobs out names and the jobs
// stopping, not the whole queue; sync then follows what Apply made of
// them. It reports whether a job left its GPUs.
func (e *engine) apply(out scheduler.Output) (freed bool, err error) {
	var touched []*jobState
	seen := make(map[*jobState]bool, len(out.Starts)+len(out.Stops)+len(out.Fails)+len(e.stopping))
	add := func(js *jobState) {
		if js != nil && !seen[js] {
			seen[js] = true
			touched = append(touched, js)
		}
	}
	for _, st := range out.Starts {
		add(e.byID[st.Job])
	}
	for _, st := range out.Stops {
		add(e.byID[st.Job])
	}
	for _, f := range out.Fails {
		add(e.byID[f.Job])
	}
	for _, js := range e.stopping {
		add(js)
	}
	in := scheduler.Input{Now: e.vtime(e.now), Jobs: make([]scheduler.Job, len(touched))}
	for i, js := range touched {
		in.Jobs[i] = e.schedJob(js)
	}
	return e.sync(touched, in, out, scheduler.Apply(in, out, in.Now))
}

// sync brings the engine's jobs to next, the snapshot Apply made of in
// (whose jobs are touched) after out: starts take their GPUs, stops begin
// their grace, ended graces free GPUs and requeue or end their jobs, and
// failed jobs end. Apply keeps the order of in.Jobs, so one pass pairs
// them.
func (e *engine) sync(touched []*jobState, in scheduler.Input, out scheduler.Output, next scheduler.Input) (freed bool, err error) {
	codes := make(map[string]string, len(out.Stops)+len(out.Fails))
	for _, s := range out.Stops {
		codes[s.Job] = string(s.Code)
		e.stopCodes[string(s.Code)]++
		switch {
		case s.Code.IsPreemption():
			e.preemptions++
		case s.Code == scheduler.StopNodeLost:
			e.lost++
		}
	}
	for _, f := range out.Fails {
		codes[f.Job] = f.Code
	}
	e.decisions += len(out.Starts) + len(out.Stops) + len(out.Fails)
	k, requeue := 0, false
	for i := range in.Jobs {
		js := touched[i]
		var nj *scheduler.Job
		if k < len(next.Jobs) && next.Jobs[k].ID == in.Jobs[i].ID {
			nj = &next.Jobs[k]
			k++
		}
		code := string(js.stopCode)
		if c, ok := codes[js.j.ID]; ok {
			code = c
		}
		switch {
		case nj == nil: // ended: failed, timed out or cancelled
			requeue = requeue || js.phase == phasePending // it leaves the queue
			freed = freed || js.phase == phaseRunning
			e.end(js, code)
		case js.phase == phasePending && nj.Running():
			if err := e.start(js, nj.Placement); err != nil {
				return false, err
			}
			requeue = true
		case js.phase == phaseRunning && !nj.Running(): // grace ended: back to the queue
			from := e.now
			if js.stopAt >= 0 {
				from = js.stopFrom
			}
			js.preemptions, js.recentPreemptions, js.attained = nj.Preemptions, nj.RecentPreemptions, nj.Attained
			e.stop(js, from)
			freed = true
		case js.phase == phaseRunning && !nj.StopAt.IsZero() && js.stopAt < 0: // told to stop
			js.stopAt, js.stopFrom, js.stopCode = nj.StopAt.Sub(e.epoch).Seconds(), e.now, nj.StopCode
			e.stopping = append(e.stopping, js)
			e.push(event{t: js.stopAt, kind: evStopEnd, job: js, version: js.version})
		}
	}
	if requeue {
		e.pending = slices.DeleteFunc(e.pending, func(js *jobState) bool { return js.phase != phasePending })
	}
	return freed, nil
}

func (e *engine) recordArrivals(arrived []*jobState, pending []scheduler.Pending) {
	if len(arrived) == 0 {
		return
	}
	want := make(map[string]*jobState, len(arrived))
	for _, js := range arrived {
		want[js.j.ID] = js
	}
	recent := e.recentWaits()
	for _, p := range pending {
		js := want[p.Job]
		if js == nil {
			continue
		}
		e.waitCodes[p.ReasonCode]++
		js.etaOK = true
		at := func(t *time.Time) float64 {
			if t == nil {
				return -1
			}
			return t.Sub(e.epoch).Seconds()
		}
		js.eta, js.etaP90, js.etaSim = at(p.EstimatedStart), at(p.EstimatedStartP90), at(p.Simulated)
		js.etaEst = p.Estimate.Duration()
		if w, ok := recent[sizeClass(js.j.GPUs)]; ok && js.eta >= 0 {
			js.etaRecent = e.now + w
		}
	}
}

// recentWaits is the median wait of the recent jobs of each size class
// (the history the scheduler calibrates on): the "median recent wait"
// predictor the ETA is scored against.
func (e *engine) recentWaits() map[string]float64 {
	by := map[string][]float64{}
	for _, s := range e.history {
		by[sizeClass(s.GPUs)] = append(by[sizeClass(s.GPUs)], s.Actual.Seconds())
	}
	out := make(map[string]float64, len(by))
	for k, ws := range by {
		slices.Sort(ws)
		out[k] = *percentile(ws, 50)
	}
	return out
}

// waitHistory is what the scheduler calibrates ETAs on, as a server keeps
// it: the recent starts, and the jobs still waiting since their
// submission (censored, their wait so far), the longest waiting first, at
// most scheduler.ETAHistory of each.
func (e *engine) waitHistory() []scheduler.WaitSample {
	out := slices.Clone(e.history)
	n := 0
	for _, js := range e.pending { // in arrival order: the longest waiting first, requeued ones aside
		if n == scheduler.ETAHistory {
			break
		}
		if js.started || js.etaSim < 0 {
			continue
		}
		out = append(out, scheduler.WaitSample{GPUs: js.j.GPUs, Estimate: e.sampleEstimate(js),
			Predicted: seconds(js.etaSim - js.submit), Actual: seconds(e.now - js.submit), Censored: true})
		n++
	}
	return out
}

// waited records a job's first start after it queued at submission, for
// the ETA calibration.
func (e *engine) waited(js *jobState) {
	if !js.etaOK || js.etaSim < 0 {
		return
	}
	e.history = scheduler.KeepWait(e.history, scheduler.WaitSample{GPUs: js.j.GPUs, Estimate: e.sampleEstimate(js),
		Predicted: seconds(js.etaSim - js.submit), Actual: seconds(e.now - js.submit)})
}

// sampleEstimate is the estimate a wait sample keeps: the user's, or with
// history estimates the one the job was planned on at submission.
func (e *engine) sampleEstimate(js *jobState) time.Duration {
	if e.cfg.Estimates != EstimatesUser {
		return js.etaEst
	}
	return seconds(js.baseEstimate)
}

// input builds the scheduler's snapshot.
func (e *engine) input() scheduler.Input {
	e.buf = e.buf[:0]
	for _, js := range e.pending {
		e.buf = append(e.buf, e.schedJob(js))
	}
	for _, js := range e.running {
		e.buf = append(e.buf, e.schedJob(js))
	}
	return scheduler.Input{
		Now:    e.vtime(e.now),
		Nodes:  e.nodes,
		Teams:  e.teams,
		Jobs:   e.buf,
		Models: e.models,
		Stacks: e.stacks,
		Config: e.cfg.Policy,

		FleetVersion: e.fleetVersion,
		Cache:        &e.cache,
	}
}

func (e *engine) schedJob(js *jobState) scheduler.Job {
	j := js.j
	sj := scheduler.Job{
		ID: j.ID, Team: j.Team, Priority: j.Class,
		Resources:       j.Resources(),
		Submitted:       e.vtime(js.submit),
		Preemptible:     j.Preemptible,
		Grace:           seconds(j.Grace),
		TimeLimit:       seconds(js.timeLimit),
		CancelRequested: js.cancel,
		Requeued:        js.requeued,
		Retries:         js.retries,
		Invalid:         j.Invalid,

		Preemptions:       js.preemptions,
		RecentPreemptions: js.recentPreemptions,
		Attained:          js.attained,
	}
	if js.stops > 0 || js.retries.Used > 0 {
		sj.Queued = e.vtime(js.queued)
	}
	if len(j.DurationOn) > 1 {
		// A job whose run time the trace gives per GPU model is one whose
		// user knows the speeds: it asks for the fastest model (honoured by
		// policies with HeterogeneityPreference, ignored by the others).
		sj.Resources.Prefer = gpufleet.Fastest
	}
	if js.phase == phaseRunning {
		sj.Started = e.vtime(js.start)
		sj.Placement = js.placement
		sj.Estimate = seconds(js.runEstimate)
		if js.stopAt >= 0 {
			sj.StopAt, sj.StopCode = e.vtime(js.stopAt), js.stopCode
		}
	} else {
		sj.Estimate = seconds(js.remaining * js.baseEstimate)
	}
	if e.cfg.Estimates != EstimatesUser {
		sj.Estimate, sj.Workload = 0, j.Name
	}
	return sj
}

func seconds(s float64) time.Duration {
	if s > float64(math.MaxInt64)/1e9 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Round(s * 1e9))
}

// start puts js on its placement after checking it against the engine's
// own view of the GPUs: a scheduler that double-books a GPU is an error.
func (e *engine) start(js *jobState, placement []scheduler.Placement) error {
	id := js.j.ID
	if len(placement) == 0 {
		return fmt.Errorf("scheduler started %q without a placement", id)
	}
	var gpus []gpuRef
	var fracs []float64
	demand := 0.0
	slowest := 0.0
	for _, p := range placement {
		f := p.Fraction
		if f <= 0 {
			f = 1
		}
		for _, gid := range p.GPUs {
			ref, ok := e.gpuIdx[gid]
			if !ok {
				return fmt.Errorf("scheduler placed %q on unknown GPU %q", id, gid)
			}
			if e.nodes[ref.node].Name != p.Node {
				return fmt.Errorf("scheduler placed %q on GPU %q, which is not on node %q", id, gid, p.Node)
			}
			if e.nodes[ref.node].GPUs[ref.gpu].State != scheduler.Ready {
				return fmt.Errorf("scheduler placed %q on GPU %q, which is %s", id, gid, e.nodes[ref.node].GPUs[ref.gpu].State)
			}
			if e.used[ref.node][ref.gpu]+f > 1+1e-9 {
				return fmt.Errorf("scheduler placed %q on GPU %q, which has %.3f free, needs %.3f", id, gid, 1-e.used[ref.node][ref.gpu], f)
			}
			e.used[ref.node][ref.gpu] += f
			gpus = append(gpus, ref)
			fracs = append(fracs, f)
			demand += f
			slowest = max(slowest, js.j.DurationFor(e.nodes[ref.node].GPUs[ref.gpu].Model))
		}
	}
	js.phase = phaseRunning
	js.model = e.nodes[gpus[0].node].GPUs[gpus[0].gpu].Model
	js.start = e.now
	js.placement = placement
	js.gpus, js.fractions, js.demand = gpus, fracs, demand
	js.paid, js.restart = js.restart, 0
	js.end = e.now + js.remaining*slowest + js.paid
	// The estimate the server knows is the user's, scaled to the speed of
	// the model the job landed on.
	js.runEstimate = js.remaining * js.baseEstimate
	if ref := js.j.RefDuration(); ref > 0 && !math.IsInf(slowest, 1) {
		js.runEstimate *= slowest / ref
	}
	if !js.started {
		js.started = true
		js.firstStart = e.now
		e.waited(js)
	}
	e.allocated += demand
	e.rate[e.teamIdx[js.j.Team]] += demand
	e.running = append(e.running, js)
	if !math.IsInf(js.end, 1) {
		e.push(event{t: js.end, kind: evComplete, job: js, version: js.version})
	}
	if js.timeLimit > 0 {
		e.push(event{t: e.now + js.timeLimit, kind: evLimit, job: js, version: js.version})
	}
	if js.failsLeft > 0 {
		after := js.j.FailAfter
		if after <= 0 {
			after = (js.end - e.now) / 2
		}
		if t := e.now + after; t < js.end {
			e.push(event{t: t, kind: evRunFail, job: js, version: js.version})
		}
	}
	return nil
}

// fragmentation counts the free GPU capacity that job js (the head of the
// queue) cannot use: all free capacity of the nodes it cannot fit on (wrong
// model, too few whole free GPUs for its per-node share, no GPU with a big
// enough free share), plus the partial leftovers on the nodes it can use
// that are too small for it.
func (e *engine) fragmentation(js *jobState) float64 {
	j := js.j
	need := j.GPUs
	if j.Nodes > 1 {
		need = (j.GPUs + j.Nodes - 1) / j.Nodes
	}
	share := 1.0
	if j.Sharing.Kind == gpufleet.TimeSlice && j.Sharing.Fraction > 0 {
		share = j.Sharing.Fraction
	}
	total := 0.0
	for i, n := range e.nodes {
		if n.State != scheduler.Ready {
			continue
		}
		free, whole, fits, small := 0.0, 0, false, 0.0
		allowedOnNode := 0
		for k, g := range n.GPUs {
			if g.State != scheduler.Ready {
				continue
			}
			f := 1 - e.used[i][k]
			if f < 1e-9 {
				continue
			}
			free += f
			if !e.allowed(j, g.Model) {
				continue
			}
			allowedOnNode++
			if share < 1 {
				if f+1e-9 >= share {
					fits = true
				} else {
					small += f
				}
				continue
			}
			if f > 1-1e-9 {
				whole++
			} else {
				small += f
			}
		}
		if share >= 1 {
			fits = whole >= min(need, len(n.GPUs))
		}
		if allowedOnNode == 0 || !fits {
			total += free
		} else {
			total += small
		}
	}
	return total
}

func (e *engine) allowed(j *Job, model string) bool {
	if len(j.GPUModels) == 0 {
		return true
	}
	return slices.Contains(j.GPUModels, model)
}

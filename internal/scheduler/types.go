package scheduler

import (
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
)

// GPUState is what the scheduler may do with a GPU or node.
type GPUState string

// GPU and node states the scheduler cares about. Anything but Ready takes
// no new work; running work on a Draining node or GPU is stopped (reason
// code drain, with its grace); on the others it stays.
const (
	Ready    GPUState = "ready"
	Cordoned GPUState = "cordoned"
	Draining GPUState = "draining"
	Down     GPUState = "down"
)

// GPU is one physical GPU of a node.
type GPU struct {
	ID    string   `json:"id"`    // UUID
	Index int      `json:"index"` // index on the node
	Model string   `json:"model"` // key into Input.Models
	State GPUState `json:"state"`
	// NVLinkDomain groups GPUs that share an NVLink/NVSwitch fabric; empty
	// means the GPU talks to its peers over PCIe only.
	NVLinkDomain string `json:"nvlink_domain,omitempty"`
	// MIG lists the GPU's MIG instances when it is in MIG mode; a GPU in MIG
	// mode only takes MIG jobs.
	MIG []MIGInstance `json:"mig,omitempty"`
	// Reason says why the GPU is not ready (a health rule's drain), for
	// the words of the stops it causes.
	Reason string `json:"reason,omitempty"`
}

// MIGInstance is one MIG instance of a GPU.
type MIGInstance struct {
	ID      string `json:"id"` // MIG UUID
	Profile string `json:"profile"`
}

// Node is one machine of the fleet as the scheduler sees it.
type Node struct {
	Name   string            `json:"name"`
	State  GPUState          `json:"state"`
	Rack   string            `json:"rack,omitempty"`  // multi-node jobs prefer one rack
	Block  string            `json:"block,omitempty"` // then one network block
	Labels map[string]string `json:"labels,omitempty"`
	// Stack is the node's software and firmware versions, which jobs'
	// resources.stack and resources.requires are matched against.
	Stack gpufleet.StackVersions `json:"stack,omitempty"`
	GPUs  []GPU                  `json:"gpus"`
	// Reason says why the node is not ready, as GPU.Reason does.
	Reason string `json:"reason,omitempty"`
	// LastSeen is when the node's agent last reported. Zero means the
	// node is live (the simulator's nodes, until one fails). Running jobs
	// on a node silent for Config.LostAfter are lost (StopNodeLost).
	LastSeen time.Time `json:"last_seen,omitzero"`
}

// Team is a tenant with guaranteed quota per GPU class.
type Team struct {
	Name string `json:"name"`
	// Quota maps a GPU class (catalog id or Input.Classes name) to the GPUs
	// guaranteed to the team.
	Quota map[string]int `json:"quota,omitempty"`
	// BorrowingLimit caps the GPUs the team may use beyond its quota out of
	// other teams' idle capacity; negative means no limit.
	BorrowingLimit int     `json:"borrowing_limit"`
	Weight         float64 `json:"weight"` // fair-share weight, > 0
	// Usage is the team's decayed past usage in GPU-seconds, maintained by
	// the caller (the server or the simulator) with Config.UsageHalfLife.
	Usage float64 `json:"usage"`
}

// Placement is where a job runs: one entry per node.
type Placement struct {
	Node string   `json:"node"`
	GPUs []string `json:"gpus"` // GPU UUIDs or MIG instance ids
	// Fraction is the time-slice share on each GPU (1 for exclusive and MIG).
	Fraction float64 `json:"fraction"`
}

// Job is pending or running work.
type Job struct {
	ID        string             `json:"id"`
	Team      string             `json:"team"`
	Priority  gpufleet.Priority  `json:"priority"`
	Resources gpufleet.Resources `json:"resources"`
	Submitted time.Time          `json:"submitted"`
	Estimate  time.Duration      `json:"estimate"` // user's estimate of the run time; 0: learned (estimate.go)
	// Workload is the caller's word for "the same job run again" (the
	// server's: the job's name, else its command): a job without an
	// estimate is planned on its workload's runs first (Input.Runs).
	Workload string `json:"workload,omitempty"`
	// Preemptible jobs may be stopped for higher-priority work or quota
	// reclaim. Grace is the time every stop gives the job between the
	// checkpoint signal and the kill; 0 means Config.DefaultGrace.
	Preemptible bool          `json:"preemptible"`
	Grace       time.Duration `json:"grace,omitempty"`
	// TimeLimit stops a running job (reason code time_limit) once its
	// current run has lasted this long; 0 means none. The job then ends.
	TimeLimit time.Duration `json:"time_limit,omitempty"`
	// CancelRequested stops a running job (reason code cancelled); the job
	// then ends. A queued job being cancelled is the caller's to drop.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Invalid, when set, says why the caller's validation refused the
	// job's stored request: the scheduler fails it if queued, or stops it
	// (code invalid_request, with its grace; the job then ends) if running,
	// and places it nowhere. A running one's Resources need only describe
	// what it holds.
	Invalid string `json:"invalid,omitempty"`
	// StopAt, on a running job, says an earlier cycle decided to stop it:
	// it holds its GPUs until StopAt, when its grace ends, and is neither
	// stopped again nor a victim meanwhile. StopCode is that stop's reason
	// code. Apply sets both.
	StopAt   time.Time         `json:"stop_at,omitzero"`
	StopCode gpufleet.StopCode `json:"stop_code,omitempty"`

	// Running jobs carry their start time and placement.
	Started   time.Time   `json:"started,omitzero"`
	Placement []Placement `json:"placement,omitempty"`
	// Requeued jobs (preempted, drained, lost) go to the front of their class.
	Requeued bool `json:"requeued,omitempty"`
	// Retries is the job's retry budget and what its failed runs used of
	// it: AfterRun reads it when a run ends.
	Retries gpufleet.Retries `json:"retries,omitzero"`
	// Queued is when a queued job last entered the queue: its submit time,
	// or when it was last stopped; zero means Submitted.
	Queued time.Time `json:"queued,omitzero"`
	// Attained is the GPU-time the job received in its earlier runs (GPUs,
	// or time-slice shares, times run time), not counting a running job's
	// current run, which the scheduler adds (GPUs x (Now - Started)). Only
	// the LAS order reads it (Config.LASThresholds); the simulator keeps it
	// from its replay, the server sums its ended attempts' gpu_seconds.
	Attained time.Duration `json:"attained,omitempty"`
	// Preemptions counts the times the job was stopped by a preemption (a
	// preempted_* code) in its whole life, and RecentPreemptions holds when
	// (the ends of those stops' graces), at least those within
	// PreemptionWindow before Now; older ones are ignored. A job that has
	// reached Config.MaxPreemptionsPerJob or MaxPreemptionsPerDay is no
	// victim of any preemption. The caller keeps both (Apply does it: the
	// simulator from its own replay, the server from the job's attempts'
	// reason codes).
	Preemptions       int         `json:"preemptions,omitempty"`
	RecentPreemptions []time.Time `json:"recent_preemptions,omitempty"`
}

// Running reports whether the job holds GPUs.
func (j *Job) Running() bool { return len(j.Placement) > 0 }

// Input is one scheduling problem: a snapshot of the fleet and the work.
type Input struct {
	Now   time.Time
	Nodes []Node
	Teams []Team
	Jobs  []Job // pending and running
	// Models maps every GPU model named by a node to its catalog entry. An
	// opaque model (a trace's undisclosed type) has only ID and Name set and
	// matches only by name.
	Models map[string]catalog.GPU
	// Classes maps admin-defined GPU class names to catalog ids.
	Classes map[string][]string
	// Stacks are the named stacks jobs may require (resources.stack): the
	// versions a node must run, component by component.
	Stacks map[string]gpufleet.StackVersions `json:"stacks,omitempty"`
	Config Config
	// Racks are the power domains with a budget; nodes name theirs in
	// Node.Rack. Placements keep every rack's projected draw under its
	// budget (reason code rack_power). GPUDraw is what a placed GPU adds.
	Racks   []Rack  `json:",omitempty"`
	GPUDraw GPUDraw `json:",omitempty"`
	// WaitHistory is the recent waits the ETAs are calibrated on: one
	// WaitSample per job that queued at submission and then started
	// (kept with KeepWait: at most ETAHistory per size class), and the
	// jobs still waiting as censored samples.
	WaitHistory []WaitSample
	// Runs is the finished runs the estimates of jobs without one learn
	// from (estimate.go), oldest first, kept by the caller with KeepRun.
	Runs []RunSample `json:",omitempty"`
	// RunsVersion, with Cache, lets a caller skip rebuilding the
	// estimates' index of Runs: a call whose RunsVersion (non-zero)
	// equals the previous call's reuses it. The caller bumps it whenever
	// Runs changes. Zero builds it afresh; the output is the same.
	RunsVersion uint64 `json:",omitempty"`
	// Arrivals is the jobs submitted in the last Config.ArrivalWindow,
	// whatever became of them, oldest first, kept by the caller with
	// KeepArrivals: the ETA simulation expects them again.
	Arrivals []Job `json:",omitempty"`
	// FleetVersion and Cache let a caller that schedules the same fleet
	// cycle after cycle skip rebuilding the fleet index: with both set, a
	// call whose FleetVersion (non-zero), Nodes slice and Models equal the
	// previous call's reuses the index built then. The caller bumps
	// FleetVersion whenever anything of Nodes or Models changes (a node or
	// GPU added, removed, relabelled or changing state, MIG layout); what
	// runs where is read from Jobs every call. Zero, or a nil Cache, builds
	// the index afresh. The output is the same either way.
	FleetVersion uint64
	Cache        *FleetCache `json:"-"`
}

// Config is the policy. Policies are configurations of the same code.
type Config struct {
	Name string // fifo, bestfit, backfill, hetero-easy, hrrn, srtf, slurm, las, drf, themis, gandiva-fair, gpufleet
	// Priorities orders the classes, highest first; empty = gpufleet.Priorities().
	Priorities []gpufleet.Priority
	// PriorityClasses orders the queue by class before anything else;
	// off, the queue is one class (fifo ignores priorities).
	PriorityClasses bool
	// StrictOrder stops at the first job that cannot be placed (fifo);
	// otherwise later jobs may start when Backfill allows it.
	StrictOrder bool
	Backfill    bool // EASY backfill behind the reservation of the head job
	FairShare   bool // order teams by weighted decayed usage within a class
	Quotas      bool // honour quotas, borrowing limits and reclaim
	Preemption  bool // preempt lower classes, reclaim borrowed quota, and (with StarvationSlowdown) for starving jobs
	// Packing chooses GPUs: "first-fit", "best-fit" (fewest free GPUs left on
	// the node) or "topology" (NVLink domain, rack, fragmentation scoring).
	// Ties between equally good nodes go by the fleet's node order: the
	// fastest model first, then an order seeded by Seed (never by name).
	Packing string
	// Seed seeds the node order that breaks placement ties (a PCG per node,
	// seeded with Seed and the node's name): a different seed gives another
	// order among nodes of the same speed. The zero value is a seed like any
	// other, so the default is fixed; the simulator passes its --seed.
	Seed uint64 `json:",omitempty"`
	// HeterogeneityPreference honours Resources.Prefer (cheapest adequate
	// or fastest model) instead of taking the first model that fits.
	HeterogeneityPreference bool
	// SizeSlack, when positive, orders the queue within a class (after
	// requeued jobs) by a virtual deadline instead of submit time:
	// submit + SizeSlack x Estimate. Short jobs go first; a job is passed
	// only by jobs whose deadline comes before its own, so none starves
	// (the deadline is when the job's slowdown would reach 1 + SizeSlack).
	SizeSlack float64
	// ResponseRatio, with SizeSlack > 0, orders the queue within a class by
	// response ratio instead: (now - submit + Estimate) / Estimate, the
	// slowdown the job would have if it started now, highest first
	// (Brinch Hansen's highest-response-ratio-next). See docs/SCHEDULER.md.
	ResponseRatio bool
	// ShortestFirst orders the queue within a class (after requeued jobs)
	// by estimated remaining run time, shortest first (SRTF without
	// preemption; a queued job's Estimate is what it has left).
	ShortestFirst bool `json:",omitempty"`
	// LASThresholds, when set, orders the queue by discretized 2D-LAS
	// (Tiresias): a job's attained service, GPU-time so far (Job.Attained
	// plus its current run), is cut at these thresholds, ascending, into
	// queues, the least served first; first come first served within a
	// queue. With Preemption a queued job preempts running jobs of its
	// class in later queues. No run-time estimate is read. See las.go.
	LASThresholds []time.Duration `json:",omitempty"`
	// DominantShare orders the queue within a class (after requeued jobs)
	// by dominant resource fairness (Ghodsi et al., NSDI 2011) across
	// teams: progressive filling, the team with the smallest share of the
	// fleet's GPUs held now, over its weight, next; each of its queued jobs
	// adds its GPUs to that share. GPUs are the only resource the scheduler
	// models, so the dominant share is the GPU share. See drf in order.go.
	DominantShare bool `json:",omitempty"`
	// FinishTimeFair orders the queue within a class by Themis' finish-time
	// fairness (Mahajan et al., NSDI 2020), highest first: rho = the job's
	// time in the shared fleet (since submit, plus its estimate left) over
	// the time it would take on its 1/N share of the fleet alone (N the
	// teams with work), a job larger than that share running slower by
	// its excess. Themis' auctions and leases are not built: it is an order.
	FinishTimeFair bool `json:",omitempty"`
	// Multifactor, when set, orders the queue within a class by Slurm's
	// multifactor priority: a weighted sum of age, fair-share and job-size
	// factors, highest first (see Multifactor).
	Multifactor *Multifactor `json:",omitempty"`
	// StarvationSlowdown, when positive, marks a queued job starving once
	// its slowdown so far, (wait + estimate) / estimate, reaches it:
	// starving jobs go ahead of requeued ones in their class, and a starving
	// backfill head whose reserved start is far may preempt preemptible jobs
	// of its class or lower that have far longer to run (see
	// docs/SCHEDULER.md#starvation).
	StarvationSlowdown float64 `json:",omitempty"`
	// StarvationMinRun: a job is stopped for a starving job only once its
	// current run has lasted this long, which bounds the share of its time
	// lost to restarts at RestartCost / StarvationMinRun.
	StarvationMinRun time.Duration `json:",omitempty"`
	// RestartCost is what a stopped job is expected to lose to resume
	// (checkpoint load, warm-up); starvation preemption weighs it.
	RestartCost time.Duration `json:",omitempty"`
	// UpgradeGain, when above 0, moves a running preemptible job from a
	// GPU model at least 1.2x slower than the fastest it may use to a
	// model at least 1.2x faster than its own that has room after the cycle's placements (in the
	// cycle's backfill mode, so a reservation holds): it is stopped with
	// code upgrade and placed there once requeued, as Gavel's rounds move
	// jobs to the models they run fastest on. Only when the time it saves,
	// its estimated time left here less its time left there, is at least
	// UpgradeGain times RestartCost (at least a minute): a job near its end
	// stays. 0 is off.
	UpgradeGain float64 `json:",omitempty"`
	// StarvationLeftFactor: a running job is a victim for a starving job
	// only if it has at least this many times the starving job's estimate
	// (plus RestartCost) left to run, so the starving job's run is a small
	// delay to it. Higher spares more jobs and preempts less. 0 means 10.
	StarvationLeftFactor float64 `json:",omitempty"`
	// StarvationGainFactor: a starving job preempts only if the GPU-seconds
	// it saves (its wait so far, or its reservation's distance for the
	// backfill head) are at least this many times what its victims lose
	// (RestartCost plus the starving job's run, per victim GPU). Higher
	// preempts less and later. 0 means 4.
	StarvationGainFactor float64 `json:",omitempty"`
	// StarvationOrderMargin: a victim's own response ratio, times this, must
	// stay below the starving job's, or once requeued it would sort ahead
	// of it and take its GPUs back; at least FairShareClamp² (the most fair
	// share moves a ratio). 0 means 4.
	StarvationOrderMargin float64 `json:",omitempty"`
	// StarvationMaxReleases bounds the running jobs one starvation search
	// releases (those with the most left to run first), and
	// StarvationMaxTries the starving jobs that search in one cycle: cost
	// bounds of the cycle; fewer may miss a victim set that exists. 0 means
	// 512 and 8.
	StarvationMaxReleases int `json:",omitempty"`
	StarvationMaxTries    int `json:",omitempty"`
	// PreemptSearchNodes bounds the nodes one priority or reclaim
	// preemption search compares once it has found candidates (the cheapest
	// victim set among the first this many nodes wins): a cost bound; more
	// may find a cheaper set. 0 means 32.
	PreemptSearchNodes int `json:",omitempty"`
	// TopologyScanNodes bounds the nodes topology packing scores for one
	// single-node job before it takes the best so far (it stops at once on
	// a node that fills an NVLink domain exactly): a cost bound of large
	// fleets. 0 means 64.
	TopologyScanNodes int `json:",omitempty"`
	// FairShareClamp bounds the fair-share factor that scales a job's slack
	// or divides its response ratio to [1/FairShareClamp, FairShareClamp]:
	// how much a team's past usage can speed up or slow down the aging of
	// its jobs. Higher lets fair share move jobs more, and a heavy team's
	// jobs wait longer; 1 turns the factor off. 0 means 2.
	FairShareClamp float64 `json:",omitempty"`
	// MaxPlacementsPerCycle bounds the work of one cycle; 0 = no bound.
	MaxPlacementsPerCycle int
	// MaxPreemptionSearches bounds the searches for victims (priority
	// preemption and reclaim) in one cycle; 0 = no bound. A search is one
	// queued job that does not fit looking for running jobs to stop;
	// answers from the cache of failed searches do not count. Jobs search
	// in cluster order, so the highest-ranked waiting jobs search first;
	// once the bound is reached, later jobs go on as if no victim could be
	// found (they may still reserve, backfill or preempt for starvation)
	// and search in a later cycle. Stats.PreemptionSearchesSkipped counts
	// them. PolicyConfig sets DefaultMaxPreemptionSearches.
	MaxPreemptionSearches int `json:",omitempty"`
	// ReasonDepth bounds the pending jobs whose reason is written in
	// full: those among the first ReasonDepth of the pending list, or of
	// their team's, the jobs people look at. Every other pending job gets
	// the same reason code and a shorter sentence without its own figures
	// (a quota reason leaves out the team's use and quota, a reservation
	// reason the job's estimate, a slower-model reason the slowdown and
	// the wait left), shared by all such jobs, so that the cycle does not
	// format a sentence per job of a long queue. Decisions do not depend
	// on it. 0 = every job in full. PolicyConfig sets DefaultReasonDepth.
	ReasonDepth int `json:",omitempty"`
	// ETA computes estimated starts for every pending job by a forward
	// simulation of running and queued work.
	ETA bool
	// ArrivalWindow is how far back the ETA simulation looks at arrivals
	// (Input.Arrivals) and how far ahead it expects the same stream again:
	// a job submitted d before now is expected again at now + window - d,
	// shape, class, team and estimate alike, and takes its turn in the
	// order like any queued job. 0: no expected arrivals.
	ArrivalWindow time.Duration `json:",omitempty"`
	// DefaultEstimate stands in for jobs without an estimate, a time limit
	// or a history (estimate.go), unless PriorityEstimates has their
	// class.
	DefaultEstimate   time.Duration
	PriorityEstimates map[gpufleet.Priority]time.Duration `json:",omitempty"`
	// EstimateQuantile (0-1] is the quantile of similar jobs' runs a job
	// without an estimate is planned on; EstimateMinRuns the fewest runs
	// a history key needs. Zero means DefaultEstimateQuantile and
	// DefaultEstimateMinRuns.
	EstimateQuantile float64 `json:",omitempty"`
	EstimateMinRuns  int     `json:",omitempty"`
	// DefaultGrace is the grace of a stop for a job that gives none
	// (PolicyConfig: 30s, as Kubernetes' terminationGracePeriodSeconds).
	DefaultGrace time.Duration
	// LostAfter is how long a node (Node.LastSeen) may be silent before
	// the runs on it are lost: stopped with StopNodeLost and no grace,
	// then requeued. By then the node's agent has fenced them (the
	// server's heartbeat grace + fence + margin); 0 loses them as soon as
	// the node is silent, as the simulator's failures are.
	LostAfter time.Duration `json:",omitempty"`
	// OverBudget is what the cycle does about a rack whose projected draw
	// is over its budget (Rack.OverBudgetFor): OverBudgetAlert (or empty)
	// only reports it; OverBudgetStop, once the rack has been over for
	// OverBudgetAfter, stops the most recently started preemptible job
	// there (StopRackPower), one per rack per cycle (docs/POWER.md).
	OverBudget OverBudgetPolicy `json:",omitempty"`
	// OverBudgetAfter is how long a rack must stay over its budget before
	// OverBudgetStop acts; 0 acts at once.
	OverBudgetAfter time.Duration `json:",omitempty"`
	// MaxPreemptionsPerJob and MaxPreemptionsPerDay bound how often one job
	// is stopped by preemption (priority, reclaim, starvation, LAS), in its
	// whole life and within any PreemptionWindow (24 h): a running job
	// that has reached either is no victim (Job.Preemptions,
	// Job.RecentPreemptions). Lower protects long jobs from being everyone's
	// victim, at the cost of the jobs that would have preempted them. 0
	// means the default (DefaultMaxPreemptionsPerJob, PerDay: 10 and 2);
	// negative means no bound.
	MaxPreemptionsPerJob int `json:",omitempty"`
	MaxPreemptionsPerDay int `json:",omitempty"`
	// UsageHalfLife is the decay of team usage, applied by the caller.
	UsageHalfLife time.Duration
	// Spare keeps, per GPU class (an Input.Classes name) or model (catalog
	// id), that many whole GPUs free for production jobs (N+1 failover
	// capacity): jobs of lower classes are placed, and their ETAs
	// simulated, as if they were taken.
	Spare map[string]int `json:",omitempty"`
}

// Multifactor is Slurm's multifactor job priority
// (https://slurm.schedmd.com/priority_multifactor.html): priority =
// AgeWeight x age + FairShareWeight x fair share + JobSizeWeight x size,
// each factor in [0, 1]:
//
//   - age: the time since the job became eligible (entered the queue),
//     over MaxAge, at most 1 (PriorityMaxAge);
//   - fair share: the classic formula 2^(-U/S), U the team's share of all
//     teams' decayed usage (Team.Usage, halved every UsageHalfLife:
//     PriorityDecayHalfLife), S its share of all teams' weights;
//   - size: the job's GPUs over the fleet's, or one minus that with
//     FavorSmall (PriorityFavorSmall).
type Multifactor struct {
	AgeWeight, FairShareWeight, JobSizeWeight float64
	MaxAge                                    time.Duration
	FavorSmall                                bool
}

// Stop asks the caller to stop a running job: the checkpoint signal now,
// the kill Grace later. Preemptions and drains requeue the job once it has
// stopped; a time limit or a cancel ends it (see Apply).
type Stop struct {
	Job    string            `json:"job"`
	Code   gpufleet.StopCode `json:"reason_code"`   // gpufleet.StopCodes: preempted_*, drain, node_lost, time_limit, cancelled, invalid_request
	Reason string            `json:"reason"`        // in words
	For    string            `json:"for,omitempty"` // preemptions: the job that needs the GPUs
	// Grace is the job's own, or Config.DefaultGrace: never 0 by omission.
	Grace time.Duration `json:"grace"`
	// Bound, on a preemption, says in words that this stop brings the job
	// to a preemption bound (Config.MaxPreemptionsPerJob or PerDay): it
	// will be no victim again (for good, or for the rest of the day). The
	// server records it as a job.preemption_bound event. Empty otherwise.
	Bound string `json:"bound,omitempty"`
}

// Fail ends a queued job the scheduler cannot take (reason code
// invalid_request): its request is beyond the limits or does not parse.
type Fail struct {
	Job    string `json:"job"`
	Code   string `json:"reason_code"`
	Reason string `json:"reason"`
}

// Pending explains a job that stays queued.
type Pending struct {
	Job          string `json:"job"`
	Position     int    `json:"position"`      // in the cluster, from 1
	TeamPosition int    `json:"team_position"` // within its team, from 1
	ReasonCode   string `json:"reason_code"`
	Reason       string `json:"reason"` // e.g. "needs 8 GPUs in one NVLink domain; the largest free set is 5"
	// Explanation is the reason as data: the nodes looked at, the nodes
	// each filter left out, the dimension that ran out. Never nil; shared
	// by the jobs of one reason (read only).
	Explanation *gpufleet.Explanation `json:"explanation"`
	// EstimatedStart is the median estimated start: the forward
	// simulation's start calibrated on recent waits (etarange.go). It is
	// nil when no start can be estimated (nothing in the fleet can ever
	// run the job).
	EstimatedStart *time.Time `json:"estimated_start"`
	// EstimatedStartP90 is the start the job should begin by nine times
	// in ten; ETAConfidence the share of similar recent jobs that started
	// within max(1 h, 25 %) of their median. Both are nil until
	// Input.WaitHistory holds enough samples (ETAMinSamples).
	EstimatedStartP90 *time.Time `json:"estimated_start_p90"`
	ETAConfidence     *float64   `json:"eta_confidence"`
	// Estimate is the run time the job is planned on and where it came
	// from (estimate.go).
	Estimate gpufleet.RunEstimate `json:"estimate"`
	// Simulated is the forward simulation's start, capped by the policy's
	// own bound: what a caller records in a WaitSample once the job starts.
	Simulated *time.Time `json:"simulated_start,omitempty"`
}

// Output is the scheduler's decision for one cycle: every start and every
// stop the fleet will see, and why each queued job waits. Callers apply
// it with Apply, or translate it to their own records one for one.
type Output struct {
	Starts []Start // jobs to start now, in decision order
	Stops  []Stop  // running jobs to stop, in decision order
	// PowerAlerts are the racks over their budget for
	// Config.OverBudgetAfter that the stop policy (Config.OverBudget)
	// could not act on: only production or non-preemptible jobs run
	// there. The caller reports them (an event); nothing stops.
	PowerAlerts []PowerAlert `json:",omitempty"`
	Fails       []Fail       // queued jobs that end without running
	Pending     []Pending    // every job still queued, in cluster order
	// Recheck is the earliest moment after Input.Now at which time alone,
	// with no arrival, end or fleet change, may change a decision: a
	// grace or a time limit ends, a job waiting for a faster model gives
	// up on it, a queued job starts starving or a running one becomes old
	// enough to be stopped for it. Zero when none. The server cycles often
	// anyway; the simulator, which moves from event to event, cycles then.
	Recheck time.Time
	Stats   Stats
}

// Start places one job.
type Start struct {
	Job        string      `json:"job"`
	Placement  []Placement `json:"placement"`
	Backfilled bool        `json:"backfilled,omitempty"` // started ahead of a reserved job
}

// Stats counts the work of a cycle.
type Stats struct {
	Considered int // jobs looked at
	Placed     int
	Preempted  int
	Backfilled int
	// Upgraded counts the running jobs stopped to move to a faster model
	// (Config.UpgradeGain).
	Upgraded int
	// PreemptionSearches counts the searches for victims of this cycle
	// (answers from the cache of failed searches excluded);
	// PreemptionSearchesSkipped the jobs that would have searched once
	// Config.MaxPreemptionSearches was reached.
	PreemptionSearches        int
	PreemptionSearchesSkipped int
}

// Package store keeps gpufleet's state: teams, classes, tokens, nodes, jobs,
// attempts, events, usage and the leadership lease. One Store interface, one
// implementation over database/sql with a SQLite dialect (embedded, the
// default) and a PostgreSQL dialect (highly available control plane), and a
// conformance suite (storetest) that every dialect passes.
//
// Every job and attempt transition is one transaction. A leader's writes
// are fenced by the leadership epoch (Fenced; ApplySchedule takes it): they
// fail with ErrFenced when the caller's epoch is no longer current, so a
// deposed leader can never commit a decision. Batch makes a leader's whole
// cycle one transaction.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/rollout"
)

// ErrFenced means the caller's leadership epoch is stale.
// It wraps gpufleet.ErrUnavailable: a request that meets it answers 503 and
// the client tries another server.
var ErrFenced = fmt.Errorf("%w: leadership epoch is stale", gpufleet.ErrUnavailable)

// ErrStale means a scheduling decision names a job or attempt whose state
// changed after the snapshot the decision was computed from (a job
// cancelled meanwhile, say). Nothing of the decision was written; the
// leader takes a fresh snapshot and decides again.
var ErrStale = errors.New("decision is stale")

// ErrNameInUse means a join token was offered for the name of an existing
// node, by an agent that is not that node: only the token nodes replace
// issues (JoinToken.Replaces) puts another machine in its place.
var ErrNameInUse = errors.New("node name in use")

// ErrClosed means the store was closed.
var ErrClosed = errors.New("store is closed")

// TokenRecord is a stored API token: its hash, never the secret.
type TokenRecord struct {
	ID        string
	Hash      []byte // SHA-256 of the secret
	Team      string // empty for admins
	Role      gpufleet.Role
	CreatedAt time.Time
	RevokedAt *time.Time
}

// JoinToken lets an agent register once (or until it expires).
type JoinToken struct {
	ID        string
	Hash      []byte
	Node      string // when set, only this node name may use it
	SingleUse bool
	// Replaces marks the token nodes replace issues for Node: the only
	// kind that registers a name a node already holds.
	Replaces  bool
	ExpiresAt *time.Time
	UsedAt    *time.Time
	CreatedAt time.Time
}

// NodeCredential is the per-node secret an agent uses after joining. After
// a renewal the previous secret (PrevHash) stays valid until
// PrevExpiresAt.
type NodeCredential struct {
	Node          string
	Hash          []byte
	ExpiresAt     time.Time
	PrevHash      []byte
	PrevExpiresAt time.Time
}

// JobFilter selects jobs for ListJobs. Zero values select everything.
type JobFilter struct {
	Team   string
	States []gpufleet.JobState
	// Selector keeps the jobs whose labels it matches.
	Selector gpufleet.LabelSelector
	// After is the pagination cursor (a job id) returned as next_token.
	After string
	Limit int // default 100
}

// EventFilter selects audit events.
type EventFilter struct {
	Team    string
	Object  string
	AfterID int64
	Limit   int
}

// SubmitResult is the outcome of one submission in a batch.
type SubmitResult struct {
	Job     gpufleet.Job
	Created bool // false when the request id matched an earlier job
	Err     error
}

// Start places one queued job: a new attempt on the given nodes.
type Start struct {
	JobID     string
	AttemptID string
	Nodes     []gpufleet.AttemptNode
	// Fraction is the time-slice share per GPU (1 for exclusive and MIG).
	Fraction float64
}

// Stop asks for a running attempt to be stopped (a scheduler.Stop): the
// checkpoint signal, then the kill Grace later.
type Stop struct {
	AttemptID  string
	Reason     string
	ReasonCode gpufleet.StopCode
	Grace      time.Duration
	// Lost records the attempt lost at once instead of asking its agent
	// to stop it: its node has been silent long enough that the agent
	// has fenced it (reason code node_lost). The job requeues.
	Lost bool
}

// Fail ends a queued job the leader cannot schedule (reason code
// invalid_request: a stored request beyond the limits, or one that made
// the scheduler panic).
type Fail struct {
	JobID      string
	Reason     string
	ReasonCode string
}

// Decision is one scheduling cycle's outcome, written in one transaction.
type Decision struct {
	At     time.Time
	Starts []Start
	Stops  []Stop
	Fails  []Fail
	// Queue replaces the stored queue information of every queued job.
	Queue []gpufleet.QueueEntry
	// Events are audit events the decision records besides its starts,
	// stops and fails (job.preemption_bound), at At unless they say.
	Events []gpufleet.Event
}

// AttemptUpdate is a state change of an attempt reported by an agent or
// decided by the server (lost, stopped).
type AttemptUpdate struct {
	AttemptID string
	// Node is the node that reports, for the agents' reports: a node's
	// success ends a multi-node attempt only once every node's has
	// (UpdateAttempt). Empty for the server's own updates.
	Node       string
	State      gpufleet.AttemptState
	At         time.Time
	ExitCode   *int
	Reason     string
	ReasonCode string
	// Accounting so far (totals, not increments).
	GPUSeconds          float64
	EffectiveGPUSeconds float64
	EnergyJoules        float64
	// Work is the units the attempt's work counter last showed on Node
	// (nil: none yet); a multi-node attempt's is the largest of its
	// nodes'.
	Work  *float64
	Actor string
}

// UsageRow is accounting aggregated per team, GPU model and day.
type UsageRow struct {
	Team                string    `json:"team"`
	Model               string    `json:"gpu_model"`
	Day                 time.Time `json:"day"`
	GPUSeconds          float64   `json:"gpu_seconds"`
	EffectiveGPUSeconds float64   `json:"effective_gpu_seconds"`
	EnergyJoules        float64   `json:"energy_joules"`
	// FacilityJoules is the energy at the PUE of the racks the GPUs were
	// in; nil for a day counted before it was kept.
	FacilityJoules *float64 `json:"facility_joules"`
}

// AttemptRecord is an attempt with what the store keeps beside the API's
// view of it: its job's team and why it was asked to stop (Attempt's
// StopRequested is set by a Stop decision or a cancel; the agent stops
// the attempt and reports it stopped). Agents learn their assignments
// from these.
type AttemptRecord struct {
	gpufleet.Attempt
	Team           string // the job's team
	StopReason     string
	StopReasonCode string
}

// Requeued reports whether a queued job is back in the queue because its
// last attempt was stopped (preemption, drain, cancel) or lost rather than
// failed: the scheduler puts such jobs at the front of their class. The
// store derives it from the attempts, so it needs no column of its own.
func Requeued(j gpufleet.Job) bool {
	if j.State != gpufleet.JobQueued || len(j.Attempts) == 0 {
		return false
	}
	s := j.Attempts[len(j.Attempts)-1].State
	return s == gpufleet.AttemptStopped || s == gpufleet.AttemptLost
}

// Lease is the leadership lease. URL is where its holder answers (from
// PutReplica; empty when it gave none).
type Lease struct {
	Holder    string
	Epoch     int64
	ExpiresAt time.Time
	URL       string
}

// Holder names a lease holder: REPLICA/INSTANCE, the replica stable across
// its restarts (kept in its data directory) and the instance one process
// of it. A holder names its replica so that a restarted replica takes its
// own lease back at once instead of waiting for it to expire.
func Holder(replica, instance string) string { return replica + "/" + instance }

// sameReplica reports whether holders a and b are processes of one
// replica (both of the REPLICA/INSTANCE form).
func sameReplica(a, b string) bool {
	ra, _, okA := strings.Cut(a, "/")
	rb, _, okB := strings.Cut(b, "/")
	return okA && okB && ra != "" && ra == rb
}

// Store is gpufleet's state. Methods are safe for concurrent use.
type Store interface {
	Close() error

	// TryLease acquires or renews the leadership lease for holder with ttl,
	// measured by the store's clock. It returns the lease and whether
	// holder now holds it. A new holder gets epoch+1; it may take the lease
	// once it has expired or been released, or at once when the current
	// holder is an earlier process of its own replica (Holder): that
	// process has restarted, and its writes are fenced by the new epoch.
	TryLease(ctx context.Context, holder string, ttl time.Duration) (Lease, bool, error)
	// ReleaseLease gives the lease up if holder holds it, so that another
	// replica (or holder's replica restarted) leads at once; it reports
	// whether it did. The epoch stays: the next holder's is epoch+1.
	ReleaseLease(ctx context.Context, holder string) (bool, error)
	// Lease reads the current lease.
	Lease(ctx context.Context) (Lease, error)
	// PutReplica records where holder (Holder: REPLICA/INSTANCE) answers,
	// replacing the earlier processes of its replica.
	PutReplica(ctx context.Context, holder, url string, at time.Time) error

	PutTeam(ctx context.Context, t gpufleet.Team, actor string) error
	Team(ctx context.Context, name string) (gpufleet.Team, error)
	Teams(ctx context.Context) ([]gpufleet.Team, error)
	// PutRack creates or replaces a rack, taking the nodes it lists out
	// of every other rack's list (a node is listed by one rack at most);
	// Racks lists them by name; DeleteRack removes one (ErrNotFound when
	// there is none).
	// CreateStack records a stack (a candidate; the same versions again
	// return it, other versions under its name are invalid); Stacks lists
	// them by name; ValidateStack records a GPU model's evidence;
	// RetireStack retires one (ErrNotFound when there is none).
	CreateStack(ctx context.Context, st gpufleet.Stack, actor string) (gpufleet.Stack, error)
	Stacks(ctx context.Context) ([]gpufleet.Stack, error)
	ValidateStack(ctx context.Context, name string, v gpufleet.StackValidation) (gpufleet.Stack, error)
	RetireStack(ctx context.Context, name, actor string) error
	// PutRollout writes a rollout's state (with an event when detail is
	// given); Rollouts lists them, newest first; Rollout reads one.
	PutRollout(ctx context.Context, r rollout.Rollout, actor, detail string) error
	Rollouts(ctx context.Context) ([]rollout.Rollout, error)
	Rollout(ctx context.Context, id string) (rollout.Rollout, error)
	// AddBenchResults stores benchmark figures; BenchResults lists those a
	// filter selects, oldest first. PutWorkloadBench writes a workload
	// bench; WorkloadBench reads one (ErrNotFound when there is none);
	// WorkloadBenches lists a team's (every team's for ""), newest first.
	AddBenchResults(ctx context.Context, rs []bench.Result) error
	BenchResults(ctx context.Context, f BenchFilter) ([]bench.Result, error)
	// PruneBenchResults deletes figures older than before but each GPU's
	// newest of each figure, and says how many.
	PruneBenchResults(ctx context.Context, before time.Time) (int64, error)
	PutWorkloadBench(ctx context.Context, w bench.Workload) error
	WorkloadBench(ctx context.Context, id string) (bench.Workload, error)
	WorkloadBenches(ctx context.Context, team string) ([]bench.Workload, error)
	// SetNodeVersions records a node's versions after an update, with a
	// node.versions event when they changed.
	SetNodeVersions(ctx context.Context, name string, versions map[string]string, at time.Time) error
	PutRack(ctx context.Context, r gpufleet.Rack, actor string) error
	// AssignRack lists a node in a rack unless a rack lists it already,
	// and returns the rack that lists it ("" for none): a node's rack
	// label at registration.
	AssignRack(ctx context.Context, node, rack, actor string) (string, error)
	Racks(ctx context.Context) ([]gpufleet.Rack, error)
	DeleteRack(ctx context.Context, name, actor string) error
	PutClass(ctx context.Context, c gpufleet.Class, actor string) error
	Classes(ctx context.Context) ([]gpufleet.Class, error)

	CreateToken(ctx context.Context, t TokenRecord, actor string) error
	Token(ctx context.Context, id string) (TokenRecord, error)
	Tokens(ctx context.Context) ([]TokenRecord, error)
	RevokeToken(ctx context.Context, id string, at time.Time, actor string) error
	CreateJoinToken(ctx context.Context, t JoinToken, actor string) error
	// UseJoinToken checks a join token's secret hash (in constant time),
	// marks it used by node at time at and returns it; it fails with
	// gpufleet.ErrNotFound when the token does not exist, the hash does not
	// match, or it is spent, expired, or bound to another node. When a node
	// of that name exists it fails with ErrNameInUse unless proven (the
	// agent showed the node's own credential: it is that node, restarted)
	// or the token Replaces it: no other join token, bound to the name or
	// not, takes an existing node's name.
	UseJoinToken(ctx context.Context, id string, hash []byte, node string, at time.Time, proven bool) (JoinToken, error)
	// ExpireJoinTokens expires every usable join token bound to a node
	// name (nodes replace) and returns how many.
	ExpireJoinTokens(ctx context.Context, node string, at time.Time, actor string) (int, error)
	// JoinTokens lists join tokens (hashes only) in creation order.
	JoinTokens(ctx context.Context) ([]JoinToken, error)
	// NodeHealthState and SetNodeHealthState keep the health rules'
	// memory of a node (an opaque string, "" when none).
	NodeHealthState(ctx context.Context, name string) (string, error)
	SetNodeHealthState(ctx context.Context, name, state string) error
	PutNodeCredential(ctx context.Context, c NodeCredential) error
	NodeCredential(ctx context.Context, node string) (NodeCredential, error)

	// PutNode records a node's inventory (labels, versions, GPUs) at
	// registration, keeping its state unless the node is new.
	PutNode(ctx context.Context, n gpufleet.Node) error
	Node(ctx context.Context, name string) (gpufleet.Node, error)
	Nodes(ctx context.Context) ([]gpufleet.Node, error)
	SetNodeState(ctx context.Context, name string, state gpufleet.NodeState, cause gpufleet.StateCause, reason, actor string, at time.Time) error
	SetNodeHealth(ctx context.Context, name string, health gpufleet.Health, reason string, gpus []gpufleet.NodeGPU, at time.Time) error

	// SubmitJobs stores new jobs in one transaction. A job whose (team,
	// request id) matches an earlier one returns that job, Created false.
	SubmitJobs(ctx context.Context, jobs []gpufleet.Job, actor string) ([]SubmitResult, error)
	// ImportHistory stores jobs that already ran with their attempts
	// (SQL.ImportHistory).
	ImportHistory(ctx context.Context, jobs []gpufleet.Job, actor string) error
	Job(ctx context.Context, id string) (gpufleet.Job, error)
	// ListJobs returns jobs in id order after the cursor, and the next
	// cursor (empty at the end).
	ListJobs(ctx context.Context, f JobFilter) ([]gpufleet.Job, string, error)
	// RequestCancel sets cancel_requested; a queued job turns cancelled at
	// once, a running one once its attempts stop.
	RequestCancel(ctx context.Context, id, actor string, at time.Time) (gpufleet.Job, error)
	// ActiveJobs returns every queued, scheduled or running job with its
	// attempts: the scheduler's snapshot. It leaves out the stored queue
	// entries (Job.Queue is nil): Queue reads those.
	ActiveJobs(ctx context.Context) ([]gpufleet.Job, error)
	// Queue returns the queue information the last decision stored for
	// the jobs still queued, ordered by position.
	Queue(ctx context.Context) ([]gpufleet.QueueEntry, error)
	// Attempt reads one attempt; unknown ids wrap gpufleet.ErrNotFound.
	Attempt(ctx context.Context, id string) (AttemptRecord, error)
	// Runs returns the jobs that succeeded at or after since, newest
	// first, at most limit: what the estimates of jobs without one learn
	// from (scheduler.RunSample).
	Runs(ctx context.Context, since time.Time, limit int) ([]FinishedRun, error)
	// WorkHistory returns the newest ended attempts, at most limit, of
	// team's jobs named name that reported work in unit: what they
	// measured of energy per unit of work.
	WorkHistory(ctx context.Context, team, name, unit string, limit int) ([]gpufleet.Attempt, error)
	// NodeAttempts returns the attempts that are not terminal and use
	// node (every node when node is empty), in id order: what the agent on
	// the node should be running, and which of those to stop.
	NodeAttempts(ctx context.Context, node string) ([]AttemptRecord, error)

	// ApplySchedule writes a cycle's decision in one transaction, fenced by
	// epoch (ErrFenced when it is stale).
	ApplySchedule(ctx context.Context, epoch int64, d Decision) error
	// Batch runs fn and then commits every write fn made with the context
	// it was given in one transaction, fenced by the epoch of ctx or of
	// any of those writes (Fenced; they must agree), in the order made.
	// The writes return nil as they are made and take effect only then:
	// reads in fn see the store without them, and when fn or the commit
	// fails none of them happens. The leader's cycle is one Batch.
	Batch(ctx context.Context, fn func(ctx context.Context) error) error
	// UpdateAttempt applies an attempt transition and, in the same
	// transaction, its effect on the job as scheduler.AfterRun decides it
	// (success, retry, failure, requeue, cancel).
	UpdateAttempt(ctx context.Context, u AttemptUpdate) (gpufleet.Job, error)

	AppendEvent(ctx context.Context, e gpufleet.Event) error
	// LastEventID is the newest audit event's id (0 when none).
	LastEventID(ctx context.Context) (int64, error)
	Events(ctx context.Context, f EventFilter) ([]gpufleet.Event, error)

	AddUsage(ctx context.Context, rows []UsageRow) error
	Usage(ctx context.Context, team string, from, to time.Time) ([]UsageRow, error)

	// AddRollups adds per-GPU minute aggregates (sums and counts add up,
	// maxima take the larger) in one transaction.
	AddRollups(ctx context.Context, rows []RollupRow) error
	// Rollups returns the rollups f selects, ordered by minute then GPU.
	Rollups(ctx context.Context, f RollupFilter) ([]RollupRow, error)
	// IdleAllocated sums, per team and GPU model, the seconds GPUs were
	// held at under the idle threshold in the minutes of [from, to).
	IdleAllocated(ctx context.Context, team string, from, to time.Time) ([]IdleAllocated, error)
	// PruneRollups deletes rollups older than before and says how many.
	PruneRollups(ctx context.Context, before time.Time) (int64, error)
}

// Mean is a running sum and count of one reading; N is 0 when no sample
// had it.
type Mean struct {
	Sum float64
	N   int64
}

// Add counts v when it is present.
func (m *Mean) Add(v *float64) {
	if v != nil {
		m.Sum += *v
		m.N++
	}
}

// Value is the mean, nil when no sample had the reading.
func (m Mean) Value() *float64 {
	if m.N == 0 {
		return nil
	}
	v := m.Sum / float64(m.N)
	return &v
}

// RollupRow is one GPU's samples over one minute.
type RollupRow struct {
	GPU     string
	Minute  time.Time // truncated to the minute, UTC
	Node    string
	Model   string
	Team    string // who held the GPU; "" when unallocated
	Samples int64
	// Effective is SM activity where the GPU reports it, else utilization.
	Utilization, SMActivity, DRAMActivity, TensorActivity, Effective, PowerWatts Mean
	EnergyJoules                                                                 float64
	MemoryUsedBytesMax                                                           *int64
	TemperatureCMax                                                              *float64
	// AllocatedS is the seconds of the minute the GPU was held, and
	// IdleAllocatedS those at under the idle threshold, classified per
	// heartbeat interval.
	AllocatedS, IdleAllocatedS float64
}

// RollupFilter selects rollups: by node, by GPU UUIDs (any of), by time
// range [From, To); empty fields select everything.
type RollupFilter struct {
	Node     string
	GPUs     []string
	From, To time.Time
}

// IdleAllocated is the time a team held GPUs of a model while they idled.
type IdleAllocated struct {
	Team    string
	Model   string
	Seconds float64
}

package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// ControlPlane is what the agent needs from the server.
type ControlPlane interface {
	Register(ctx context.Context, joinToken string, r api.RegisterRequest) (api.RegisterResponse, error)
	Heartbeat(ctx context.Context, credential string, r api.HeartbeatRequest) (api.HeartbeatResponse, error)
	ShipLog(ctx context.Context, credential, attempt string, offset int64, data []byte) (int64, error)
	RenewCredential(ctx context.Context, credential string) (api.RegisterResponse, error)
}

// apiPlane is the ControlPlane over the typed API client (which fails over
// between the server URLs).
type apiPlane struct{ c *api.Client }

// NewAPIControlPlane returns the ControlPlane that talks HTTP through c.
func NewAPIControlPlane(c *api.Client) ControlPlane { return apiPlane{c} }

func (p apiPlane) Register(ctx context.Context, tok string, r api.RegisterRequest) (api.RegisterResponse, error) {
	return p.c.Register(ctx, tok, r)
}

func (p apiPlane) Heartbeat(ctx context.Context, cred string, r api.HeartbeatRequest) (api.HeartbeatResponse, error) {
	return p.c.WithToken(cred).Heartbeat(ctx, r)
}

func (p apiPlane) RenewCredential(ctx context.Context, cred string) (api.RegisterResponse, error) {
	return p.c.WithToken(cred).RenewCredential(ctx)
}

func (p apiPlane) ShipLog(ctx context.Context, cred, attempt string, off int64, data []byte) (int64, error) {
	return p.c.WithToken(cred).ShipLog(ctx, attempt, off, data)
}

// faultInjector is the simulated backend's fault control.
type faultInjector interface {
	Inject(index int, f simgpu.Fault) error
	Clear(index int) error
	Faults(index int) ([]simgpu.Fault, error)
}

// Config is the agent's behaviour; internal/cli fills it from flags.
type Config struct {
	JoinToken string
	Name      string
	DataDir   string
	// Labels are added to (and override) the detected ones.
	Labels map[string]string
	// Runtime is how attempts run (the runtime label) and Isolation what
	// keeps them apart (the job-isolation label: hard or soft).
	Runtime   Runtime
	Isolation Isolation
	// Backend names the GPU backend ("sim" or "nvml"), reported as the
	// label backend.
	Backend string
	// FenceAfter overrides the server's fence timeout when positive.
	FenceAfter time.Duration
	// FenceGrace caps a fenced attempt's grace (default 10s).
	FenceGrace time.Duration
	// MetricsURL is reported to the server (the node's metrics_url).
	MetricsURL string
	// StackFile is the operator's file of user-level software versions
	// (docs/STACKS.md), read at each registration; "" or absent: none.
	// StackProbe, when set, is a shell command run at each registration
	// instead of reading the file, printing the same JSON.
	StackFile, StackProbe string
	// SimBadDrivers are driver versions a simulated node breaks on: an
	// update to one leaves its first GPU with a double-bit ECC error (XID
	// 48), so validation fails, as a bad driver would make it; an update
	// away clears it.
	SimBadDrivers []string
	// SampleInterval is how often the GPUs are read (default 1s).
	SampleInterval time.Duration
	// PollInterval is how often attempts are checked (default 200ms).
	PollInterval time.Duration
	// MaxBackoff caps the pause between failed heartbeats (default 30s).
	MaxBackoff time.Duration
	Runner     RunnerConfig
	// Bench opens the microbenchmark backend; nil turns benchmarks off
	// (bench orders are answered so, and validation checks without them).
	Bench BenchOpener
	// BenchOnJoin runs the quick set on the idle GPUs before the agent
	// registers, and sends it with the registration.
	BenchOnJoin bool
}

// credential is DATA_DIR/credential.json (mode 0600): the node credential
// and the server's heartbeat interval and fence timeout, so that an agent
// restarted while it cannot register (a spent join token, the server
// away) still fences its attempts in time.
type credential struct {
	Node        string    `json:"node"`
	Credential  string    `json:"credential"`
	IssuedAt    time.Time `json:"issued_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	HeartbeatS  float64   `json:"heartbeat_s,omitempty"`
	FenceAfterS float64   `json:"fence_after_s,omitempty"`
}

// parseCredential reads credential.json as storeCredentialLocked writes
// it: a node name, a credential that fits an Authorization header
// (printable ASCII without spaces, at most 4096 bytes), an expiry not
// before the issue, and timings a server sends (0 to a day). Anything else
// is an error wrapping gpufleet.ErrInvalid: an agent that kept such a
// credential would fail every heartbeat without registering again.
func parseCredential(data []byte) (credential, error) {
	var c credential
	if err := json.Unmarshal(data, &c); err != nil {
		return credential{}, fmt.Errorf("%w: credential.json: %v", gpufleet.ErrInvalid, err)
	}
	bad := func(why string) (credential, error) {
		return credential{}, fmt.Errorf("%w: credential.json: %s", gpufleet.ErrInvalid, why)
	}
	if err := gpufleet.ValidateNodeName("node", c.Node); err != nil {
		return credential{}, fmt.Errorf("credential.json: %w", err)
	}
	if c.Credential == "" || len(c.Credential) > 4096 ||
		strings.ContainsFunc(c.Credential, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return bad("credential: expected 1 to 4096 printable ASCII characters without spaces")
	}
	if !c.ExpiresAt.IsZero() && c.ExpiresAt.Before(c.IssuedAt) {
		return bad("expires_at is before issued_at")
	}
	if !(c.HeartbeatS >= 0 && c.HeartbeatS <= 86400) || !(c.FenceAfterS >= 0 && c.FenceAfterS <= 86400) {
		return bad("heartbeat_s and fence_after_s: expected 0 to 86400 seconds")
	}
	return c, nil
}

// Agent is one node's agent.
type Agent struct {
	cfg    Config
	be     gpu.Backend
	faults faultInjector // nil unless the backend is simulated
	cp     ControlPlane
	log    *slog.Logger
	now    func() time.Time
	runner *Runner
	rng    *rand.Rand
	caps   *powerCaps

	mu         sync.Mutex
	cred       credential
	registered bool
	devices    []gpu.Device
	versions   gpu.Versions
	inventory  []gpufleet.NodeGPU
	missing    []string // inventory GPUs discovery no longer finds
	// sentEvidence is each GPU's health evidence the server last
	// acknowledged; unchanged evidence is left out of heartbeats unless
	// the server asked for all of it (fullEvidence).
	sentEvidence map[string]api.GPUEvidence
	fullEvidence bool
	// updates are the stack update orders run, by key (nil while one
	// runs), kept in updates.json; updateAsked the keys the server last
	// ordered; simSoftware the user-level versions a simulated update set.
	updates       map[string]*api.UpdateResult
	updatesBroken bool
	updateAsked   []string
	simSoftware   map[string]string
	// validations are return-to-service checks by order id: nil while
	// running, then the result, kept until the server stops asking.
	validations map[string]*api.ValidationResult
	// benches are bench orders by id, as validations; joinBench is the
	// quick set run at start, sent with registrations until one succeeds.
	benches       map[string]*api.BenchReport
	joinBench     *api.BenchReport
	sendInventory bool
	latest        map[string]gpu.Sample
	latestAt      time.Time
	nvlinkRate    map[string][2]float64 // bytes/s sent and received, over the last two samples
	sampleOK      bool
	sampleDur     time.Duration
	window        map[string]*summary
	xidCount      map[string]map[int]float64
	lastXID       map[string]int
	lastOK        time.Time
	heartbeat     time.Duration
	fenceAfter    time.Duration
	fenced        bool
	acks          []string
	beats, fails  float64
	renewAfter    time.Time
}

// New returns an agent over backend be. The backend's optional abilities
// (simulated load and faults) are found once, here.
func New(cfg Config, be gpu.Backend, cp ControlPlane, log *slog.Logger) (*Agent, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: node name is empty", gpufleet.ErrInvalid)
	}
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: data dir is empty", gpufleet.ErrInvalid)
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	if cfg.FenceGrace <= 0 {
		cfg.FenceGrace = 10 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	cfg.Runner.DataDir = cfg.DataDir
	cfg.Runner.AliveFile = filepath.Join(cfg.DataDir, "alive")
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "attempts"), 0o711); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	log = log.With("component", "agent", "node", cfg.Name)
	a := &Agent{cfg: cfg, be: be, cp: cp, log: log, now: time.Now, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1)),
		validations: map[string]*api.ValidationResult{}, benches: map[string]*api.BenchReport{}, updates: map[string]*api.UpdateResult{}, sentEvidence: map[string]api.GPUEvidence{}, fullEvidence: true, latest: map[string]gpu.Sample{}, window: map[string]*summary{},
		xidCount: map[string]map[int]float64{}, lastXID: map[string]int{}, heartbeat: 5 * time.Second}
	if f, ok := be.(faultInjector); ok {
		a.faults = f
	}
	a.caps = newPowerCaps(be, filepath.Join(cfg.DataDir, "power-caps.json"), log)
	a.loadUpdates()
	var ld loader
	if l, ok := be.(loader); ok {
		ld = l
	}
	a.runner = NewRunner(cfg.Runner, log, func() time.Time { return a.now() }, ld)
	return a, nil
}

// Runner returns the agent's runner.
func (a *Agent) Runner() *Runner { return a.runner }

func (a *Agent) credPath() string { return filepath.Join(a.cfg.DataDir, "credential.json") }

// Run joins the control plane and works until ctx is done. Attempts keep
// running when it returns: a restarted agent re-adopts them.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.discover(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	devs := slices.Clone(a.devices)
	a.mu.Unlock()
	a.caps.start(ctx, devs)
	if err := a.runner.Load(); err != nil {
		return err
	}
	removed, err := a.runner.ReapContainers(ctx)
	if err != nil {
		a.log.Warn("removing the containers a lost agent left running", "err", err)
	}
	if len(removed) > 0 {
		a.log.Warn("removed containers no live attempt owns (left by a lost agent)", "containers", strings.Join(removed, ","))
	}
	a.mu.Lock()
	// The fence timer runs from the last word from the server, before a
	// restart too.
	a.lastOK = a.lastContact(a.now())
	if data, err := os.ReadFile(a.credPath()); err == nil {
		if a.cred, err = parseCredential(data); err != nil {
			a.log.Warn("ignoring unreadable credential file", "err", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		a.log.Warn("ignoring unreadable credential file", "err", err)
	}
	if a.cred.Node != a.cfg.Name {
		a.cred = credential{}
	}
	a.setTimingLocked(a.cred.HeartbeatS, a.cred.FenceAfterS)
	known, heartbeat, fence := a.fenceAfter > 0, a.heartbeat, a.fenceAfter
	a.mu.Unlock()
	if known {
		a.log.Info("timing from the stored credential", "heartbeat", heartbeat, "fence_after", fence)
	}
	a.runner.Poll()
	if !known {
		// Without a fence nothing guarantees that these attempts stop
		// before the server gives their jobs to another node.
		if n := a.runner.Fence("the agent does not know its fence timeout (no stored setting; it has not registered yet)", a.cfg.FenceGrace); n > 0 {
			a.log.Warn("fence timeout unknown: stopping the attempts it supervises until the server says it", "attempts", n)
		}
	}

	if a.cfg.BenchOnJoin {
		rep := a.runBench(ctx, api.BenchOrder{ID: "join-" + a.now().UTC().Format("20060102T150405Z"), Quick: true})
		a.log.Info("microbenchmarks before joining", "measurements", len(rep.Measurements), "detail", rep.Detail)
		a.mu.Lock()
		a.joinBench = &rep
		a.mu.Unlock()
	}

	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){a.sampleLoop, a.pollLoop, a.shipLoop} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(ctx) }()
	}
	a.heartbeatLoop(ctx)
	wg.Wait()
	return nil
}

// heartbeatLoop registers and heartbeats until ctx is done, backing off
// exponentially with jitter while the server is away.
func (a *Agent) heartbeatLoop(ctx context.Context) {
	failures := 0
	tried := false
	for ctx.Err() == nil {
		var err error
		switch {
		case !tried:
			// Register at every start (fresh inventory, labels, versions); a
			// spent join token is fine while the stored credential works.
			tried = true
			if err = a.register(ctx); err != nil && a.hasCredential() {
				a.log.Info("registration failed; using the stored credential", "err", err)
				a.mu.Lock()
				a.sendInventory = true
				a.mu.Unlock()
				err = nil
				continue
			}
		case !a.hasCredential():
			err = a.register(ctx)
		default:
			a.maybeRenew(ctx)
			err = a.beat(ctx)
			if errors.Is(err, api.ErrUnauthorized) {
				a.log.Warn("credential refused; registering again with the join token", "err", err)
				if rerr := a.register(ctx); rerr != nil {
					err = fmt.Errorf("%w; register: %v", err, rerr)
				}
			}
		}
		delay := a.interval()
		if err != nil {
			failures++
			delay = backoff(failures, delay, a.cfg.MaxBackoff, a.rng.Float64())
			a.mu.Lock()
			a.fails++
			a.mu.Unlock()
			lvl := slog.LevelWarn
			if failures > 3 && failures%10 != 0 {
				lvl = slog.LevelDebug
			}
			a.log.Log(ctx, lvl, "heartbeat failed", "err", err, "failures", failures, "retry_in", delay.Round(time.Millisecond))
		} else {
			failures = 0
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// backoff is the pause after n consecutive failures: base doubling per
// failure up to maxPause, times a jitter in [0.5, 1.5).
func backoff(n int, base, maxPause time.Duration, jitter float64) time.Duration {
	d := base
	for i := 1; i < n && d < maxPause; i++ {
		d *= 2
	}
	d = min(d, maxPause)
	return time.Duration(float64(d) * (0.5 + jitter))
}

func (a *Agent) interval() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.heartbeat
}

func (a *Agent) hasCredential() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cred.Credential != "" && (a.cred.ExpiresAt.IsZero() || a.now().Before(a.cred.ExpiresAt))
}

// register joins with the join token and stores the credential.
func (a *Agent) register(ctx context.Context) error {
	if a.cfg.JoinToken == "" {
		return fmt.Errorf("%w: no join token", api.ErrUnauthorized)
	}
	software := a.software()
	a.mu.Lock()
	req := api.RegisterRequest{ProtocolVersion: api.ProtocolVersion, Node: a.cfg.Name, Labels: a.labels(),
		Versions: versionMap(a.versions, software), GPUs: slices.Clone(a.inventory), MetricsURL: a.cfg.MetricsURL,
		Credential: a.cred.Credential, Bench: a.joinBench}
	a.mu.Unlock()
	req.Attempts = a.runner.Reports()
	resp, err := a.cp.Register(ctx, a.cfg.JoinToken, req)
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cred = credential{Node: resp.Node, Credential: resp.Credential, IssuedAt: now, ExpiresAt: resp.ExpiresAt}
	a.setTimingLocked(resp.HeartbeatS, resp.FenceAfterS)
	a.sendInventory, a.registered, a.lastOK, a.renewAfter = true, true, now, time.Time{}
	a.joinBench = nil
	a.storeCredentialLocked()
	a.touchAlive()
	a.log.Info("registered", "heartbeat", a.heartbeat, "fence_after", a.fenceAfter, "credential_expires", resp.ExpiresAt)
	return nil
}

// setTimingLocked takes the server's heartbeat interval and fence timeout
// (seconds; 0: not given) into the agent, the runner (for the supervisors
// of attempts it starts) and the stored credential. A positive
// --fence-after overrides the server's fence. It reports whether anything
// changed; a.mu must be held.
func (a *Agent) setTimingLocked(heartbeatS, fenceS float64) bool {
	changed := false
	if d := secondsDuration(heartbeatS); d > 0 && d != a.heartbeat {
		a.heartbeat, a.cred.HeartbeatS, changed = d, heartbeatS, true
	}
	fence := a.cfg.FenceAfter
	if fence <= 0 {
		fence = secondsDuration(fenceS)
	}
	if fence > 0 && fence != a.fenceAfter {
		a.fenceAfter, changed = fence, true
		a.runner.SetFence(fence, a.cfg.FenceGrace)
		a.writeAlive(fence)
	}
	if fenceS > 0 {
		a.cred.FenceAfterS = fenceS
	}
	return changed
}

// secondsDuration converts a setting in seconds, refusing what no server
// sends (negative, NaN, beyond a day).
func secondsDuration(s float64) time.Duration {
	if !(s > 0 && s <= 86400) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// storeCredentialLocked writes credential.json; a.mu must be held.
func (a *Agent) storeCredentialLocked() {
	if a.cred.Credential == "" {
		return
	}
	if err := writeJSONAtomic(a.credPath(), a.cred, 0o600); err != nil {
		a.log.Error("storing the node credential", "err", err)
	}
}

// maybeRenew swaps the node credential for a fresh one once two thirds of
// its life have passed, with the credential itself (no join token needed).
// When the server refuses, it registers again with the join token if it
// has one; otherwise the credential stays valid until it expires
// (docs/AGENT.md).
func (a *Agent) maybeRenew(ctx context.Context) {
	a.mu.Lock()
	c, now := a.cred, a.now()
	life := c.ExpiresAt.Sub(c.IssuedAt) // saturates; life*2 would overflow for a long life
	due := !c.ExpiresAt.IsZero() && !c.IssuedAt.IsZero() && now.After(c.IssuedAt.Add(life-life/3)) && now.After(a.renewAfter)
	if due {
		a.renewAfter = now.Add(time.Minute)
	}
	a.mu.Unlock()
	if !due {
		return
	}
	resp, err := a.cp.RenewCredential(ctx, c.Credential)
	if err == nil {
		a.mu.Lock()
		a.cred = credential{Node: resp.Node, Credential: resp.Credential, IssuedAt: now, ExpiresAt: resp.ExpiresAt,
			HeartbeatS: a.cred.HeartbeatS, FenceAfterS: a.cred.FenceAfterS}
		a.setTimingLocked(resp.HeartbeatS, resp.FenceAfterS)
		a.renewAfter = time.Time{}
		a.storeCredentialLocked()
		a.mu.Unlock()
		a.log.Info("renewed the node credential", "expires", resp.ExpiresAt)
		return
	}
	if errors.Is(err, api.ErrUnauthorized) && a.cfg.JoinToken != "" {
		err = a.register(ctx)
	}
	if err != nil {
		a.log.Warn("renewing the node credential failed; it stays valid until it expires", "expires", c.ExpiresAt, "err", err)
	}
}

// beat sends one heartbeat and applies the answer.
func (a *Agent) beat(ctx context.Context) error {
	a.mu.Lock()
	req := api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: a.cfg.Name, MetricsURL: a.cfg.MetricsURL,
		Samples: a.summarise(), FaultAcks: slices.Clone(a.acks)}
	sent := a.trimEvidence(req.Samples)
	req.MissingGPUs = slices.Clone(a.missing)
	req.Validations = finished(a.validations)
	req.Bench = finished(a.benches)
	req.Updates = a.updateResults(a.updateAsked)
	req.PowerCapFailures = a.caps.takeFailures()
	inv := a.sendInventory
	if inv {
		req.GPUs = slices.Clone(a.inventory)
	}
	cred := a.cred.Credential
	timeout := max(2*a.heartbeat, 5*time.Second)
	a.mu.Unlock()
	req.Attempts = a.runner.Reports()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := a.cp.Heartbeat(cctx, cred, req)
	if err != nil {
		a.caps.giveBack(req.PowerCapFailures)
		return err
	}
	a.runner.Delivered(req.Attempts)
	a.touchAlive()
	a.mu.Lock()
	a.beats++
	a.lastOK = a.now()
	if a.fenced {
		a.fenced = false
		a.log.Info("reconnected after fencing; reporting fenced attempts")
	}
	if inv {
		a.sendInventory = false
	}
	if a.setTimingLocked(resp.HeartbeatS, resp.FenceAfterS) {
		a.storeCredentialLocked()
		a.log.Info("timing from the server", "heartbeat", a.heartbeat, "fence_after", a.fenceAfter)
	}
	a.acks = slices.DeleteFunc(a.acks, func(id string) bool { return slices.Contains(req.FaultAcks, id) })
	maps.Copy(a.sentEvidence, sent)
	if len(sent) > 0 {
		a.fullEvidence = false
	}
	a.fullEvidence = a.fullEvidence || resp.FullEvidence
	a.mu.Unlock()
	a.apply(ctx, resp)
	return nil
}

// trimEvidence leaves out the evidence that equals what the server last
// acknowledged, unless the server wants all of it, and returns what is
// sent; a.mu must be held.
func (a *Agent) trimEvidence(samples []api.GPUSample) map[string]api.GPUEvidence {
	sent := map[string]api.GPUEvidence{}
	for i := range samples {
		e := samples[i].Evidence
		if e == nil {
			continue
		}
		if last, ok := a.sentEvidence[samples[i].UUID]; ok && !a.fullEvidence && reflect.DeepEqual(last, *e) {
			samples[i].Evidence = nil
			continue
		}
		sent[samples[i].UUID] = *e
	}
	return sent
}

// touchAlive marks the agent alive for the attempts' supervisors, in wall
// time (they compare with their own clock).
func (a *Agent) touchAlive() {
	p := a.alivePath()
	now := time.Now()
	if err := os.Chtimes(p, now, now); err != nil {
		a.writeAlive(a.fenceAfter)
	}
}

// writeAlive writes the alive file with the fence timeout the agent now
// keeps: supervisors follow the latest one, whatever their attempt was
// started with (see aliveFence). It keeps the file's time, which only a
// word from the server moves: a new file is as old as the epoch, silent.
func (a *Agent) writeAlive(fence time.Duration) {
	p := a.alivePath()
	keep := time.Unix(0, 0)
	if fi, err := os.Stat(p); err == nil {
		keep = fi.ModTime()
	}
	tmp := p + ".tmp"
	err := os.WriteFile(tmp, formatAliveFence(fence), 0o644)
	if err == nil {
		err = os.Chtimes(tmp, keep, keep)
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		a.log.Warn("writing the fence timeout for supervisors", "err", err)
	}
}

// lastContact is when the agent last heard from the server, as the alive
// file says (its time survives a restart of the agent); now when the agent
// has never heard from it.
func (a *Agent) lastContact(now time.Time) time.Time {
	if fi, err := os.Stat(a.alivePath()); err == nil && fi.ModTime().Before(now) && fi.ModTime().Unix() > 0 {
		return fi.ModTime()
	}
	return now
}

func (a *Agent) alivePath() string { return a.cfg.Runner.AliveFile }

// apply carries out a heartbeat answer.
func (a *Agent) apply(ctx context.Context, resp api.HeartbeatResponse) {
	a.mu.Lock()
	fenced := a.fenceAfter > 0
	a.mu.Unlock()
	for _, as := range resp.Start {
		switch {
		case !fenced:
			// An older server that says nothing of the fence: no attempt
			// may start that nothing would stop in time.
			a.log.Warn("not starting an attempt: the fence timeout is unknown", "attempt", as.AttemptID)
		case !a.runner.Known(as.AttemptID):
			a.runner.Start(as)
		}
	}
	for _, s := range resp.Stop {
		a.runner.Stop(s.AttemptID, s.Reason, s.ReasonCode, time.Duration(s.GraceS*float64(time.Second)))
	}
	for _, id := range resp.Unknown {
		a.runner.Stop(id, "the server does not expect this attempt on this node", ReasonUnknown, 0)
	}
	for _, f := range resp.Faults {
		if err := a.applyFault(f); err != nil {
			a.log.Warn("fault not applied", "fault", f.ID, "gpu", f.GPU, "kind", f.Kind, "xid", f.XID, "err", err)
		} else {
			a.log.Info("fault applied", "fault", f.ID, "gpu", f.GPU, "kind", f.Kind, "xid", f.XID, "clear", f.Clear)
		}
		a.mu.Lock()
		a.acks = append(a.acks, f.ID)
		a.mu.Unlock()
	}
	for _, o := range resp.Validate {
		a.startValidation(ctx, o)
	}
	for _, o := range resp.Bench {
		a.startBench(ctx, o)
	}
	var validations, benches []string
	for _, o := range resp.Validate {
		validations = append(validations, o.ID)
	}
	for _, o := range resp.Bench {
		benches = append(benches, o.ID)
	}
	a.mu.Lock()
	forget(a.validations, validations)
	forget(a.benches, benches)
	a.mu.Unlock()
	asked := make([]string, 0, len(resp.Update))
	for _, o := range resp.Update {
		asked = append(asked, o.Key)
		a.startUpdate(ctx, o)
	}
	a.mu.Lock()
	a.updateAsked = asked
	devs := slices.Clone(a.devices)
	a.mu.Unlock()
	a.caps.apply(ctx, resp.PowerCaps, devs)
}

// faultKinds maps the API's fault kinds to the simulator's.
var faultKinds = map[string]simgpu.FaultKind{
	"thermal": simgpu.FaultThermalRunaway, "fell-off-bus": simgpu.FaultFallenOffBus,
}

// applyFault injects or clears a fault on the simulated backend.
func (a *Agent) applyFault(o api.FaultOrder) error {
	if a.faults == nil {
		return fmt.Errorf("%w: backend %s takes no injected faults", gpufleet.ErrUnsupported, a.cfg.Backend)
	}
	if o.Clear {
		if err := a.faults.Clear(o.GPU); err != nil {
			return err
		}
		return a.rediscover(context.Background())
	}
	f := simgpu.Fault{Kind: simgpu.FaultKind(o.Kind)}
	if k, ok := faultKinds[o.Kind]; ok {
		f.Kind = k
	}
	if o.XID != 0 {
		f = simgpu.Fault{Kind: simgpu.FaultXID, XID: o.XID}
	}
	return a.faults.Inject(o.GPU, f)
}

// pollLoop drives the runner and the fence timer.
func (a *Agent) pollLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.PollInterval)
	defer t.Stop()
	for {
		a.runner.Poll()
		a.checkFence()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkFence stops every attempt once the agent has gone fenceAfter
// without a successful heartbeat.
func (a *Agent) checkFence() {
	a.mu.Lock()
	now, last, after := a.now(), a.lastOK, a.fenceAfter
	due := !a.fenced && fenceDue(now, last, after)
	if due {
		a.fenced = true
	}
	a.mu.Unlock()
	if !due {
		return
	}
	why := fmt.Sprintf("fenced: no successful heartbeat for %s (fence-after %s)", now.Sub(last).Round(time.Second), after)
	n := a.runner.Fence(why, a.cfg.FenceGrace)
	a.log.Warn("self-fencing: stopping attempts", "attempts", n, "since_last_heartbeat", now.Sub(last).Round(time.Millisecond), "fence_after", after)
}

// Fenced reports whether the agent has fenced itself and not reconnected.
func (a *Agent) Fenced() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fenced
}

// shipLoop ships attempts' logs to the server.
func (a *Agent) shipLoop(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		a.shipLogs(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// logChunk bounds one shipped chunk (the server takes bodies up to 1 MiB).
const logChunk = 512 << 10

func (a *Agent) shipLogs(ctx context.Context) {
	if !a.hasCredential() {
		return
	}
	a.mu.Lock()
	cred := a.cred.Credential
	a.mu.Unlock()
	for _, j := range a.runner.LogJobs() {
		if j.WorkOnly {
			a.readWork(j)
			continue
		}
		off := j.Offset
		for ctx.Err() == nil {
			data, err := readChunk(j.Path, off, logChunk)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				a.log.Warn("reading attempt log", "attempt", j.Attempt, "err", err)
				break
			}
			if len(data) == 0 {
				if j.Ended {
					a.runner.EndWork(j.Attempt)
					a.runner.Shipped(j.Attempt, off, true)
				}
				break
			}
			a.runner.ReadWork(j.Attempt, off, data)
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			size, err := a.cp.ShipLog(cctx, cred, j.Attempt, off, data)
			cancel()
			if errors.Is(err, api.ErrForbidden) || errors.Is(err, gpufleet.ErrNotFound) || errors.Is(err, gpufleet.ErrUnsupported) {
				a.log.Warn("server refuses the attempt's log; not shipping it", "attempt", j.Attempt, "err", err)
				a.runner.Shipped(j.Attempt, off, true)
				j.Offset += int64(len(data))
				a.readWork(j)
				break
			}
			if err != nil {
				break // the server is away: try again later
			}
			off = size
			a.runner.Shipped(j.Attempt, off, false)
		}
	}
}

// readWork feeds the log of an attempt whose log the server refused, from
// j.Offset, to its work counter, and ends the count once the attempt has
// ended.
func (a *Agent) readWork(j logJob) {
	off := j.Offset
	for {
		data, err := readChunk(j.Path, off, logChunk)
		if err != nil || len(data) == 0 {
			break
		}
		a.runner.ReadWork(j.Attempt, off, data)
		off += int64(len(data))
	}
	if j.Ended {
		a.runner.EndWork(j.Attempt)
	}
}

// discover reads devices and versions and builds the inventory.
func (a *Agent) discover(ctx context.Context) error {
	devs, err := a.be.Devices(ctx)
	if err != nil {
		return fmt.Errorf("discover gpus: %w", err)
	}
	v, err := a.be.Versions(ctx)
	if err != nil {
		return fmt.Errorf("read versions: %w", err)
	}
	a.mu.Lock()
	a.versions = v
	a.setDevices(devs)
	a.mu.Unlock()
	a.runner.SetDevices(devs)
	if s, err := a.be.Sample(ctx); err == nil {
		a.mu.Lock()
		for _, x := range s {
			a.latest[x.UUID] = x
		}
		a.latestAt = a.now()
		a.mu.Unlock()
	}
	return nil
}

// rediscover reads the devices again and flags the inventory for the next
// heartbeat when it changed.
func (a *Agent) rediscover(ctx context.Context) error {
	devs, err := a.be.Devices(ctx)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.setDevices(devs)
	a.mu.Unlock()
	a.runner.SetDevices(devs)
	return nil
}

// setDevices rebuilds the inventory; a GPU that disappeared (fell off the
// bus) stays in it and is reported missing, for the server's health rules.
// a.mu must be held.
func (a *Agent) setDevices(devs []gpu.Device) {
	present := map[string]bool{}
	for _, d := range devs {
		present[d.UUID] = true
	}
	var inv []gpufleet.NodeGPU
	for _, d := range devs {
		g := gpufleet.NodeGPU{Index: d.Index, UUID: d.UUID, Model: d.Model, MemoryBytes: d.MemoryBytes, NVLinkDomain: d.NVLinkDomain,
			MIGInstances: []gpufleet.MIGInstance{}}
		for _, m := range d.MIG {
			g.MIGInstances = append(g.MIGInstances, gpufleet.MIGInstance{UUID: m.UUID, Profile: m.Profile})
		}
		inv = append(inv, g)
	}
	missing := []string{}
	for _, g := range a.inventory {
		if !present[g.UUID] {
			inv = append(inv, g)
			missing = append(missing, g.UUID)
		}
	}
	if !slices.Equal(missing, a.missing) {
		for _, u := range missing {
			if !slices.Contains(a.missing, u) {
				a.log.Warn("gpu missing from discovery (fell off the bus?)", "gpu", u)
			}
		}
		a.missing = missing
	}
	slices.SortFunc(inv, func(x, y gpufleet.NodeGPU) int { return x.Index - y.Index })
	if !inventoryEqual(a.inventory, inv) {
		a.inventory = inv
		a.sendInventory = true
	}
	a.devices = devs
}

func inventoryEqual(x, y []gpufleet.NodeGPU) bool {
	return slices.EqualFunc(x, y, func(a, b gpufleet.NodeGPU) bool {
		return a.Index == b.Index && a.UUID == b.UUID && a.NVLinkDomain == b.NVLinkDomain && len(a.MIGInstances) == len(b.MIGInstances)
	})
}

// labels are the node's labels: detected ones, then the configured ones.
// a.mu must be held.
func (a *Agent) labels() map[string]string {
	l := map[string]string{"virtualization": detectVirtualization(a.cfg.Backend, a.devices), "backend": a.cfg.Backend}
	var budget float64
	for _, s := range a.latest {
		if s.PowerLimitWatts != nil {
			budget += *s.PowerLimitWatts
		}
	}
	if budget > 0 {
		l["power_budget_watts"] = strconv.FormatFloat(budget, 'f', 0, 64)
	}
	l[gpufleet.RuntimeLabel] = string(cmp.Or(a.cfg.Runtime, RuntimeProcess))
	l[gpufleet.PowerCapsLabel] = strconv.FormatBool(a.caps.can())
	l[gpufleet.JobIsolationLabel] = a.cfg.Isolation.Level()
	if m := hostMemory(); m > 0 {
		l[gpufleet.HostMemoryLabel] = strconv.FormatInt(m, 10)
	}
	maps.Copy(l, a.cfg.Labels)
	return l
}

// detectVirtualization says how the GPUs reach this machine, as a
// virtualization label (gpufleet.ParseVirtualization): what the driver
// reports first (NVML's virtualization mode: a guest's vGPU, with its type
// from the device name such as "GRID A100-4C"; passthrough; a vGPU host,
// whose GPUs are time-shared with its VMs), then passthrough when the CPU
// runs under a hypervisor, else bare-metal. Simulated GPUs are bare-metal
// unless a label says otherwise.
func detectVirtualization(backend string, devs []gpu.Device) string {
	if backend == "sim" {
		return string(gpufleet.BareMetal)
	}
	for _, d := range devs {
		n := strings.ToLower(d.Name)
		if d.Virtualization == "vgpu" || strings.Contains(n, "grid") || strings.Contains(n, "vgpu") {
			return vgpuLabel(d.Name)
		}
		if d.Virtualization == "vgpu-host" {
			return string(gpufleet.VGPU)
		}
	}
	for _, d := range devs {
		if d.Virtualization == "passthrough" {
			return string(gpufleet.Passthrough)
		}
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil && hasHypervisorFlag(string(data)) {
		return string(gpufleet.Passthrough)
	}
	return string(gpufleet.BareMetal)
}

// vgpuLabel is the virtualization label of a guest's vGPU named name: its
// type is the last word ("GRID A100-4C", "NVIDIA A100-3-20C"), when that
// reads as one.
func vgpuLabel(name string) string {
	f := strings.Fields(name)
	if len(f) > 0 {
		if v, err := gpufleet.ParseVirtualization("vgpu:" + f[len(f)-1]); err == nil && strings.Contains(f[len(f)-1], "-") {
			return v.String()
		}
	}
	return string(gpufleet.VGPU)
}

// hasHypervisorFlag reports whether /proc/cpuinfo's flags include
// "hypervisor".
func hasHypervisorFlag(cpuinfo string) bool {
	for _, line := range strings.Split(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			return slices.Contains(strings.Fields(v), "hypervisor")
		}
	}
	return false
}

// software reads the node's user-level versions: the kernel, and the
// operator's stack file. A file that cannot be read or does not parse is
// logged and left out: the node still joins, without those versions.
func (a *Agent) software() map[string]string {
	out := map[string]string{}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		out[string(gpufleet.StackKernel)] = strings.TrimSpace(string(b))
	}
	a.mu.Lock()
	for k, v := range a.simSoftware {
		switch gpufleet.StackComponent(k) {
		case gpufleet.StackDriver, gpufleet.StackCUDA, gpufleet.StackVBIOS, gpufleet.StackInfoROM, gpufleet.StackGSP:
		default:
			out[k] = v // what a simulated update installed
		}
	}
	a.mu.Unlock()
	var data []byte
	var err error
	switch {
	case a.cfg.StackProbe != "":
		data, err = probeStack(a.cfg.StackProbe)
	case a.cfg.StackFile != "":
		data, err = os.ReadFile(a.cfg.StackFile)
		if errors.Is(err, fs.ErrNotExist) {
			return out
		}
	default:
		return out
	}
	if err == nil {
		var file map[string]string
		file, err = parseStackFile(data)
		maps.Copy(out, file)
	}
	if err != nil {
		a.log.Warn("stack versions not used", "file", a.cfg.StackFile, "probe", a.cfg.StackProbe, "err", err)
	}
	return out
}

// stackProbeTimeout bounds the operator's stack probe.
const stackProbeTimeout = 10 * time.Second

// probeStack runs the operator's probe command and returns what it
// printed, at most 64 KiB.
func probeStack(command string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), stackProbeTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/bin/sh", "-c", command).Output()
	if err != nil {
		return nil, fmt.Errorf("stack probe %q: %w", command, err)
	}
	if len(out) > 64<<10 {
		return nil, fmt.Errorf("%w: stack probe %q printed more than 64 KiB", gpufleet.ErrInvalid, command)
	}
	return out, nil
}

// parseStackFile reads the operator's stack file: a JSON object of stack
// component to version, each checked. The driver and firmware come from
// NVML, not from the file.
func parseStackFile(data []byte) (map[string]string, error) {
	var raw map[string]string
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: stack file: expected a JSON object of component to version: %v", gpufleet.ErrInvalid, err)
	}
	out := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		c, err := gpufleet.ParseStackComponent(k)
		if err != nil {
			return nil, fmt.Errorf("stack file: %w", err)
		}
		switch c {
		case gpufleet.StackDriver, gpufleet.StackCUDA, gpufleet.StackVBIOS, gpufleet.StackInfoROM, gpufleet.StackGSP:
			return nil, fmt.Errorf("%w: stack file: %s is read from the GPUs (NVML), not from the file", gpufleet.ErrInvalid, c)
		}
		if _, err := gpufleet.ParseSoftwareVersion(raw[k]); err != nil {
			return nil, fmt.Errorf("stack file: %s: %w", c, err)
		}
		out[string(c)] = raw[k]
	}
	return out, nil
}

// versionMap flattens versions: driver, cuda, nvml, the firmware of the
// GPUs (one value when they agree, else the distinct values joined by
// ","), and the user-level software.
func versionMap(v gpu.Versions, software map[string]string) map[string]string {
	m := map[string]string{"agent": gpufleet.Version}
	maps.Copy(m, software)
	set := func(k, s string) {
		if s != "" {
			m[k] = s
		}
	}
	set("driver", v.Driver)
	set("cuda", v.CUDA)
	set("nvml", v.NVML)
	for k, per := range map[string]map[string]string{"vbios": v.VBIOS, "inforom": v.InfoROM, "gsp_firmware": v.GSPFirmware} {
		vals := slices.Compact(slices.Sorted(maps.Values(per)))
		set(k, strings.Join(vals, ","))
	}
	return m
}

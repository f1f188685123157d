package cli

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/agent"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/power"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/server"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/web"
)

// serverFlags are the flags of `gpufleet server` (and the server part of
// `gpufleet dev`).
type serverFlags struct {
	listen, dataDir, adminToken, db, tlsCert, tlsKey, metricsListen, config, policy, logLevel, advertise string
	tick, heartbeat, heartbeatGrace, fenceAfter, leaseTTL, rollupRetention, credentialTTL                time.Duration
	benchRetention                                                                                       time.Duration
	// Health and failover.
	spare              []string // MODEL=N
	isolation          []string // CLASS=LEVEL
	quarantineFraction float64
	throttleSustain    time.Duration
	eccCorrected       uint64        // correctable ECC errors per eccWindow that degrade a GPU
	eccWindow          time.Duration // window of eccCorrected
	benchGate          string        // TEST=FRACTION,... or one fraction
	benchSchedule      string        // every=DUR,window=...,rate=N/h,level=L
	// Energy accounting.
	pue, gridIntensity float64
	gridIntensityFile  string
	// peakMargin is Config.PowerPeakMargin.
	peakMargin float64
	// powerCaps (on|off), overBudget (alert|stop) and overBudgetAfter are
	// Config.PowerCaps, OverBudget and OverBudgetAfter.
	powerCaps, overBudget string
	overBudgetAfter       time.Duration
	// seed, when set (gpufleet dev --seed-history), fills the store before
	// the server starts.
	seed func(ctx context.Context, st store.Store) error
}

func (f *serverFlags) bind(cmd *cobra.Command) {
	fs := cmd.Flags()
	d := server.Default()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7080", "address to serve the API on (127.0.0.1:0 picks a free port)")
	fs.StringVar(&f.dataDir, "data-dir", "gpufleet-data", "directory for the SQLite store, admin-token and server.url")
	fs.StringVar(&f.adminToken, "admin-token", "", "admin token, at least 16 characters (default: generated into DATA_DIR/admin-token)")
	fs.StringVar(&f.db, "db", "", "database URL (default: SQLite at DATA_DIR/gpufleet.db; postgres://... for HA)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate file (serves HTTPS with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "TLS key file")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve /metrics without a token on this separate address")
	fs.StringVar(&f.advertise, "advertise-url", "", "the URL other replicas reach this one at, to forward requests to it when it leads (default: the listen address, with this host's name when it listens on all addresses)")
	fs.StringVar(&f.config, "config", "", "YAML file of flag values (flags beat GPUFLEET_* env, which beats the file)")
	fs.StringVar(&f.policy, "policy", d.Policy, "scheduling policy: "+strings.Join(scheduler.Policies(), ", "))
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	durationFlag(fs, &f.tick, "tick", d.Tick, "scheduling interval")
	durationFlag(fs, &f.heartbeat, "heartbeat", d.Heartbeat, "agent heartbeat interval")
	durationFlag(fs, &f.heartbeatGrace, "heartbeat-grace", d.HeartbeatGrace, "silence before a node is down")
	durationFlag(fs, &f.fenceAfter, "fence-after", d.FenceAfter, "silence after which agents stop their own attempts")
	durationFlag(fs, &f.leaseTTL, "lease-ttl", d.LeaseTTL, "leadership lease")
	durationFlag(fs, &f.rollupRetention, "rollup-retention", d.RollupRetention, "how long per-GPU one-minute rollups are kept")
	durationFlag(fs, &f.benchRetention, "bench-retention", d.BenchRetention, "how long benchmark figures are kept (each GPU's newest is always kept)")
	durationFlag(fs, &f.credentialTTL, "credential-ttl", d.CredentialTTL, "life of a node credential; agents renew it at two thirds")
	fs.StringArrayVar(&f.isolation, "default-isolation", nil, "isolation a priority class's jobs need unless they say otherwise, as CLASS=hard|soft|any (repeatable; default production=hard; docs/ISOLATION.md)")
	fs.StringArrayVar(&f.spare, "spare", nil, "keep N GPUs of a GPU class or catalog model free for production failover, as CLASS=N (repeatable)")
	fs.Float64Var(&f.quarantineFraction, "quarantine-max-fraction", d.Health.QuarantineMaxFraction,
		"circuit breaker: the most of the fleet's GPUs automatic quarantine may hold out of service (0-1)")
	durationFlag(fs, &f.throttleSustain, "throttle-sustain", d.Health.ThrottleSustain, "how long thermal or power throttling must last before it counts")
	fs.StringVar(&f.benchSchedule, "bench-schedule", "", "re-bench idle nodes on a schedule: every=DUR[,window=HH:MM-HH:MM (UTC)][,rate=N/h][,level=quick|medium|long], such as every=7d,window=02:00-06:00,rate=2/h; only ready nodes running nothing, cordoned while they measure (off by default; docs/BENCH.md#scheduled-re-bench)")
	fs.StringVar(&f.benchGate, "bench-gate", "", "fraction of a GPU model's fleet median under which a benchmark figure degrades a GPU and fails its validation: one fraction, or per test as copy=0.9,gemm=0.85 (default 0.9 each; docs/BENCH.md)")
	fs.Uint64Var(&f.eccCorrected, "ecc-corrected-growth", d.Health.ECCCorrectedGrowth,
		"correctable ECC errors per --ecc-corrected-window (volatile or aggregate count) that degrade a GPU")
	durationFlag(fs, &f.eccWindow, "ecc-corrected-window", d.Health.ECCCorrectedWindow, "window of --ecc-corrected-growth")
	fs.Float64Var(&f.peakMargin, "power-peak-margin", d.PowerPeakMargin, "charge a measured GPU a job holds its peak reading times 1 + this in its rack's draw (negative: always its power limit; docs/POWER.md)")
	fs.StringVar(&f.powerCaps, "power-caps", "off", "on: tell agents to cap each GPU a measured job holds at its charge (NVML power limit, where the node allows it) and charge a capped GPU its cap; off: no caps (docs/POWER.md)")
	fs.StringVar(&f.overBudget, "over-budget", d.OverBudget.String(), "what a rack whose projected draw stays over its budget gets: alert (projection, metrics and events only) or stop (its most recently started preemptible job, with its grace)")
	durationFlag(fs, &f.overBudgetAfter, "over-budget-after", d.OverBudgetAfter, "how long a rack's projected draw must stay over its budget before --over-budget stop acts")
	fs.Float64Var(&f.pue, "pue", d.PUE, "facility PUE for racks that set none (default: Uptime Institute 2023 global average)")
	fs.Float64Var(&f.gridIntensity, "grid-intensity", d.Intensity.Constant, "grid carbon intensity, g CO2e per kWh (default: Ember 2024 world average for 2023)")
	fs.StringVar(&f.gridIntensityFile, "grid-intensity-file", "", "hourly grid intensity, CSV with columns hour (RFC 3339) and g_co2e_per_kwh; --grid-intensity fills the hours it lacks")
}

// energy reads the PUE and grid intensity flags.
func (f *serverFlags) energy() (float64, power.Intensity, error) {
	if !(f.pue >= 1 && f.pue <= gpufleet.MaxPUE) {
		return 0, power.Intensity{}, usageErr("--pue %g: expected 1 to %g", f.pue, gpufleet.MaxPUE)
	}
	if !(f.gridIntensity >= 0 && f.gridIntensity <= power.MaxIntensity) {
		return 0, power.Intensity{}, usageErr("--grid-intensity %g: expected 0 to %g g CO2e/kWh", f.gridIntensity, power.MaxIntensity)
	}
	in := power.Intensity{Constant: f.gridIntensity}
	if f.gridIntensityFile == "" {
		return f.pue, in, nil
	}
	file, err := os.Open(f.gridIntensityFile)
	if err != nil {
		return 0, in, fmt.Errorf("--grid-intensity-file: %w", err)
	}
	defer file.Close()
	if in, err = power.ParseIntensity(file, f.gridIntensity); err != nil {
		return 0, in, fmt.Errorf("--grid-intensity-file %s: %w", f.gridIntensityFile, err)
	}
	return f.pue, in, nil
}

func newServerCmd(e *env) *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane: API, scheduler, store",
		Long: `Run the gpufleet control plane. State lives in SQLite at DATA_DIR/gpufleet.db
unless --db names PostgreSQL. On start it prints "listening on URL" and writes
URL to DATA_DIR/server.url. Every flag can also come from GPUFLEET_<FLAG> or a
--config file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnvAndConfig(cmd, f.config); err != nil {
				return err
			}
			return runServer(cmd.Context(), e, f, nil)
		},
	}
	f.bind(cmd)
	return cmd
}

// runServer runs the control plane until ctx is done. ready, when set, is
// called with the URL once the server listens.
func runServer(ctx context.Context, e *env, f serverFlags, ready func(url, adminToken string)) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return usageErr("--log-level %q: expected debug, info, warn or error", f.logLevel)
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return usageErr("--tls-cert and --tls-key go together")
	}
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	token, err := adminToken(f.dataDir, f.adminToken)
	if err != nil {
		return err
	}
	dsn := f.db
	if dsn == "" {
		dsn = filepath.Join(f.dataDir, "gpufleet.db")
	}
	var sopts []store.Option
	if hook, err := testFailpoints(log); err != nil {
		return err
	} else if hook != nil {
		sopts = append(sopts, store.WithFailpoint(hook))
	}
	st, err := store.Open(ctx, dsn, sopts...)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	if f.seed != nil {
		if err := f.seed(ctx, st); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	cat, err := e.loadCatalog()
	if err != nil {
		return err
	}
	cfg := server.Default()
	replica, err := replicaName(f.dataDir)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	cfg.ID = store.Holder(replica, fmt.Sprintf("%s-%d", host, os.Getpid()))
	cfg.LogDir = filepath.Join(f.dataDir, "logs")
	if err := os.MkdirAll(cfg.LogDir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	cfg.Policy, cfg.Tick, cfg.Heartbeat, cfg.HeartbeatGrace, cfg.FenceAfter, cfg.LeaseTTL = f.policy, f.tick, f.heartbeat, f.heartbeatGrace, f.fenceAfter, f.leaseTTL
	cfg.RollupRetention, cfg.CredentialTTL, cfg.BenchRetention = f.rollupRetention, f.credentialTTL, f.benchRetention
	cfg.Health.QuarantineMaxFraction, cfg.Health.ThrottleSustain = f.quarantineFraction, f.throttleSustain
	if f.quarantineFraction <= 0 || f.quarantineFraction > 1 {
		return usageErr("--quarantine-max-fraction %g: expected a fraction in (0, 1]", f.quarantineFraction)
	}
	if f.eccCorrected == 0 || f.eccWindow <= 0 {
		return usageErr("--ecc-corrected-growth and --ecc-corrected-window must be positive")
	}
	cfg.Health.ECCCorrectedGrowth, cfg.Health.ECCCorrectedWindow = f.eccCorrected, f.eccWindow
	if cfg.BenchGates, err = bench.ParseGates(f.benchGate); err != nil {
		return fmt.Errorf("--bench-gate: %w", err)
	}
	if f.benchSchedule != "" {
		sched, err := bench.ParseSchedule(f.benchSchedule)
		if err != nil {
			return usageErr("--bench-schedule: %v", err)
		}
		cfg.BenchSchedule = &sched
	}
	if cfg.PUE, cfg.Intensity, err = f.energy(); err != nil {
		return err
	}
	if !(f.peakMargin <= 10) {
		return usageErr("--power-peak-margin %g: expected at most 10", f.peakMargin)
	}
	cfg.PowerPeakMargin = f.peakMargin
	switch f.powerCaps {
	case "on":
		cfg.PowerCaps = true
	case "off", "":
		cfg.PowerCaps = false
	default:
		return usageErr("--power-caps %q: expected on or off", f.powerCaps)
	}
	if cfg.OverBudget, err = scheduler.ParseOverBudgetPolicy(cmp.Or(f.overBudget, scheduler.OverBudgetAlert.String())); err != nil {
		return usageErr("--over-budget: %v", err)
	}
	if f.overBudgetAfter < 0 {
		return usageErr("--over-budget-after %s: expected a duration of 0 or more", f.overBudgetAfter)
	}
	cfg.OverBudgetAfter = f.overBudgetAfter
	spare, err := parseKV(f.spare)
	if err != nil {
		return fmt.Errorf("%w: --spare %s", gpufleet.ErrInvalid, detail(err))
	}
	for model, v := range spare {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return usageErr("--spare %s=%s: expected MODEL=N with a count >= 0", model, v)
		}
		key := model // an admin-defined class, which may be created later
		if g, err := cat.Lookup(model); err == nil {
			key = g.ID
		} else {
			log.Info("--spare names no catalog model: taken as a GPU class", "class", model)
		}
		if cfg.Spare == nil {
			cfg.Spare = map[string]int{}
		}
		cfg.Spare[key] = n
	}
	iso, err := parseKV(f.isolation)
	if err != nil {
		return fmt.Errorf("%w: --default-isolation %s", gpufleet.ErrInvalid, detail(err))
	}
	for class, v := range iso {
		p, err := gpufleet.ParsePriority(class)
		if err != nil {
			return usageErr("--default-isolation %s=%s: %v", class, v, err)
		}
		level, err := gpufleet.ParseIsolation(v)
		if err != nil {
			return usageErr("--default-isolation %s=%s: %v", class, v, err)
		}
		cfg.DefaultIsolation[p] = level
	}
	srv, err := server.New(ctx, cfg, st, cat, token, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	scheme := "http"
	if f.tlsCert != "" {
		scheme = "https"
	}
	url := scheme + "://" + ln.Addr().String()
	adv, err := advertiseURL(f.advertise, scheme, ln.Addr())
	if err != nil {
		return err
	}
	if err := srv.Advertise(ctx, adv); err != nil {
		return fmt.Errorf("--advertise-url: %w", err)
	}
	ui, err := web.New(web.Options{Service: srv, Logs: srv, Catalog: cat, Logger: log})
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	opts := api.HandlerOptions{Logger: log, Ready: srv.Ready, UI: ui, ObserveRequest: srv.ObserveRequest}
	if store.Shared(dsn) {
		// Several replicas may share the database: a follower forwards
		// what it is asked to the leader (docs/HA.md).
		opts.Leader = srv.LeaderURL
	}
	if f.metricsListen == "" {
		opts.MetricsHandler = srv.MetricsHandler()
	}
	h := api.NewHandler(srv, srv, srv, srv, opts)
	hs := api.NewHTTPServer(ln.Addr().String(), h)
	errc := make(chan error, 3)
	go func() {
		if f.tlsCert != "" {
			errc <- hs.ServeTLS(ln, f.tlsCert, f.tlsKey)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	var ms *http.Server
	if f.metricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", srv.MetricsHandler())
		ms = &http.Server{Addr: f.metricsListen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { errc <- ms.ListenAndServe() }()
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		if err := srv.Run(runCtx); err != nil {
			errc <- err
		}
	}()

	if err := agent.WriteFileAtomic(filepath.Join(f.dataDir, "server.url"), []byte(url+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "listening on %s\n", url)
	if ready != nil {
		ready(url, token)
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	// The leader loop ends first and gives the lease up, so that another
	// replica, or this one restarted, leads at once; then the listeners.
	cancel()
	<-ran
	shut, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	_ = hs.Shutdown(shut)
	if ms != nil {
		_ = ms.Shutdown(shut)
	}
	return nil
}

// failpoints parses GPUFLEET_TEST_FAILPOINTS, "name=probability,...", a
// crash-test hook: at a named point inside a store transaction the server
// SIGKILLs itself with that probability, so tests can check that nothing
// acknowledged is lost and nothing half-written survives.
// testFailpoints is the store's failpoint hook for the crash and HA tests,
// read from the environment here, at the edge, and handed to the store as
// an option: GPUFLEET_TEST_FAILPOINTS kills the process at
// named failpoints with a probability (see failpoints), and
// GPUFLEET_TEST_PAUSE_AT stops it at one (see pauseAt). nil when neither
// is set.
func testFailpoints(log *slog.Logger) (func(string), error) {
	var hook func(string)
	if fp := os.Getenv("GPUFLEET_TEST_FAILPOINTS"); fp != "" {
		fail, err := failpoints(fp)
		if err != nil {
			return nil, err
		}
		log.Warn("crash-test failpoints armed", "failpoints", fp)
		hook = fail
	}
	if spec := os.Getenv("GPUFLEET_TEST_PAUSE_AT"); spec != "" {
		log.Warn("HA-test pause armed", "pause_at", spec)
		hook = pauseAt(spec, hook)
	}
	return hook, nil
}

// pauseAt wraps a failpoint hook for HA tests: spec "NAME=FILE" makes the
// process stop itself (SIGSTOP) at failpoint NAME, inside the
// transaction, the first time it passes there while FILE exists (FILE is
// removed). A test creates FILE, waits for the process to stop, lets the
// lease expire and the other replica take over, then sends SIGCONT and
// checks that the stalled transaction never commits.
func pauseAt(spec string, next func(string)) func(string) {
	name, file, _ := strings.Cut(spec, "=")
	return func(at string) {
		if at == name && file != "" {
			if err := os.Remove(file); err == nil {
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			}
		}
		if next != nil {
			next(at)
		}
	}
}

func failpoints(spec string) (func(string), error) {
	probs := map[string]float64{}
	for _, kv := range strings.Split(spec, ",") {
		name, p, ok := strings.Cut(strings.TrimSpace(kv), "=")
		v, err := strconv.ParseFloat(p, 64)
		if !ok || err != nil || v < 0 || v > 1 {
			return nil, usageErr("GPUFLEET_TEST_FAILPOINTS %q: expected name=probability,...", kv)
		}
		probs[name] = v
	}
	return func(name string) {
		if p := probs[name]; p > 0 && mrand.Float64() < p {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // wait for the signal
		}
	}, nil
}

// adminToken returns the given admin token, or the one in DIR/admin-token,
// generating and writing it (mode 0600) on first start.
// advertiseURL is the URL other replicas reach this one at: given, or the
// listen address addr, with this host's name for an unspecified IP.
func advertiseURL(given, scheme string, addr net.Addr) (string, error) {
	if given != "" {
		u, err := neturl.Parse(given)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" && u.Path != "/" || u.RawQuery != "" {
			return "", usageErr("--advertise-url %q: expected a base URL such as https://gpufleet-1.example:7070", given)
		}
		return strings.TrimRight(u.String(), "/"), nil
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port), nil
}

// replicaName is this replica's name in the leadership lease, kept in
// dir/replica-id from its first start: a restarted replica is the same
// one, and takes its own lease back at once (store.Holder). Two servers
// must not share a data directory.
func replicaName(dir string) (string, error) {
	path := filepath.Join(dir, "replica-id")
	if b, err := os.ReadFile(path); err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" || strings.ContainsAny(id, "/ \t") || !utf8.ValidString(id) {
			return "", fmt.Errorf("%w: %s: %q is not a replica id", gpufleet.ErrInvalid, path, id)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("--data-dir: %w", err)
	}
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := "r-" + hex.EncodeToString(b)
	return id, agent.WriteFileAtomic(path, []byte(id+"\n"), 0o644)
}

func adminToken(dir, given string) (string, error) {
	if given != "" {
		if len(given) < 16 {
			return "", usageErr("--admin-token: expected at least 16 characters")
		}
		return given, nil
	}
	path := filepath.Join(dir, "admin-token")
	if b, err := os.ReadFile(path); err == nil {
		if t := strings.TrimSpace(string(b)); len(t) >= 16 {
			return t, nil
		}
		return "", fmt.Errorf("%w: %s: expected a token of at least 16 characters", gpufleet.ErrInvalid, path)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	t := "gpa_" + hex.EncodeToString(b)
	return t, agent.WriteFileAtomic(path, []byte(t+"\n"), 0o600)
}

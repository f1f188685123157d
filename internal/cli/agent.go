package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/agent"
	"github.com/gpufleet/gpufleet/internal/agent/devcgroup"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/bench/cuda"
	"github.com/gpufleet/gpufleet/internal/gpu"
	"github.com/gpufleet/gpufleet/internal/gpu/nvml"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// agentFlags are the flags of `gpufleet agent`.
type agentFlags struct {
	joinToken, name, dataDir, backend, simGPUs, metricsListen, metricsURL, config, logLevel, defaultUser, cgroupRoot, stackFile, stackProbe string
	benchMode, cudaLibDir, runtime, ociRuntime, uidRange, engineSocket                                                                      string
	fenceAfter, killAfter, fenceGrace, sampleInterval                                                                                       time.Duration
	labels, runAs, simBadDrivers, cdiDirs, ulimits                                                                                          []string
}

func newAgentCmd(e *env) *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: report GPUs, run assigned attempts",
		Long: `Run gpufleet's node agent. It joins the servers given by --server with a
join token, keeps its node credential in DATA_DIR/credential.json (0600),
reports the node's GPUs, versions and labels, heartbeats samples, health and
attempt states, and runs the attempts the server assigns, each on exactly its
GPUs (CUDA_VISIBLE_DEVICES), as an unprivileged user when the agent is root.

--backend nvml reads real GPUs; --backend sim simulates the GPUs --sim-gpus
lists: MODEL:COUNT[:mig=PROFILE*N[+PROFILE*N...][@GPUS]], comma-separated,
e.g. "h100-sxm-80gb:8" or "h200-sxm-141gb:8:mig=1g.18gb*7@0-1" (MIG on GPUs
0-1; "@2" means the first two too). A restarted agent re-adopts the attempts
it left running (DATA_DIR/state.json). Every flag can also come from
GPUFLEET_<FLAG> or a --config file. docs/AGENT.md has the details.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnvAndConfig(cmd, f.config); err != nil {
				return err
			}
			return runAgent(cmd.Context(), e, f)
		},
	}
	fs := cmd.Flags()
	host, _ := os.Hostname()
	fs.StringVar(&f.joinToken, "join-token", "", "join token from `gpufleet join-tokens create` (env GPUFLEET_JOIN_TOKEN)")
	fs.StringVar(&f.name, "name", strings.ToLower(host), "node name (a DNS label)")
	fs.StringVar(&f.dataDir, "data-dir", "gpufleet-agent", "directory for the credential, state.json and attempts' files")
	fs.StringVar(&f.backend, "backend", "nvml", "GPU backend: nvml (real GPUs) or sim (simulated)")
	fs.StringVar(&f.simGPUs, "sim-gpus", "h100-sxm-80gb:8", "simulated GPUs: MODEL:COUNT[:mig=PROFILE*N[+...][@GPUS]][,...]")
	fs.StringVar(&f.metricsListen, "metrics-listen", "127.0.0.1:9400", "address of the Prometheus /metrics endpoint (no auth); empty disables it")
	fs.StringVar(&f.metricsURL, "metrics-url", "", "metrics URL reported to the server (default: http://LISTEN-ADDRESS/metrics)")
	durationFlag(fs, &f.fenceAfter, "fence-after", 0, "stop own attempts after this long without a heartbeat (default: the server's)")
	durationFlag(fs, &f.fenceGrace, "fence-grace", 10*time.Second, "longest grace a fenced attempt gets before SIGTERM")
	durationFlag(fs, &f.killAfter, "kill-after", 5*time.Second, "pause between SIGTERM and SIGKILL when stopping an attempt")
	durationFlag(fs, &f.sampleInterval, "sample-interval", time.Second, "how often GPUs are read")
	fs.StringVar(&f.stackFile, "stack-file", "/etc/gpufleet/stack.json", "the node's user-level software versions an operator maintains, a JSON object of component to version ({\"cuda_toolkit\": \"12.4.1\", \"torch\": \"2.5.1+cu124\", \"nccl\": \"2.21.5\"}); absent is fine (docs/STACKS.md)")
	fs.StringArrayVar(&f.simBadDrivers, "sim-bad-driver", nil, "with --backend sim: a driver version this node breaks on after a rollout updates it (a double-bit ECC error on its first GPU, so validation fails); repeatable")
	fs.StringVar(&f.benchMode, "bench", "quick", "microbenchmarks: quick (the quick set when the node joins, when it is validated and when the server orders it; docs/BENCH.md) or off")
	fs.StringVar(&f.cudaLibDir, "cuda-lib-dir", "", "with --backend nvml: directory holding libcuda.so.1, libcublasLt.so and libnccl.so.2 for the benchmarks (default: the loader's search path)")
	fs.StringVar(&f.stackProbe, "stack-probe", "", "a shell command printing the same JSON as --stack-file, run at each registration instead of reading the file")
	fs.StringArrayVar(&f.labels, "label", nil, "node label KEY=VALUE (rack, block, virtualization, power_budget_watts, ...); repeatable")
	fs.StringArrayVar(&f.runAs, "run-as", nil, "TEAM=USER: the user a team's attempts run as when the agent is root; repeatable")
	fs.StringVar(&f.defaultUser, "default-user", "nobody", "user for teams without --run-as when the agent is root (never root)")
	fs.StringVar(&f.runtime, "runtime", "process", "how attempts run: process (bare processes, each isolated: docs/ISOLATION.md) or podman/docker (jobs with an image run in containers with only their GPUs; others as processes)")
	fs.StringVar(&f.ociRuntime, "podman-runtime", "", "with --runtime podman: the OCI runtime podman uses (default runc when installed: crun refuses hosts with the hybrid cgroup layout)")
	fs.StringVar(&f.engineSocket, "engine-socket", "", "with --runtime podman or docker: talk to the engine's API on this unix socket (/var/run/docker.sock; podman: `podman system service`, /run/podman/podman.sock) instead of running its CLI, as on Kubernetes")
	fs.StringArrayVar(&f.cdiDirs, "cdi-spec-dir", []string{"/etc/cdi", "/var/run/cdi"}, "directories of CDI specs (nvidia-ctk cdi generate) naming the GPUs a container gets; repeatable")
	fs.StringArrayVar(&f.ulimits, "container-ulimit", nil, "a container limit NAME=SOFT:HARD (memlock=-1:-1); default: memlock, nofile and nproc at the agent's own hard limits")
	fs.StringVar(&f.uidRange, "uid-range", agent.DefaultUIDRange.String(), "uids for the attempts of teams --run-as does not map, when the agent is root: each team runs as FIRST + its uid_offset (the server's); empty: --default-user for all of them (soft isolation)")
	fs.StringVar(&f.cgroupRoot, "cgroup-root", agent.DefaultCgroupRoot, "cgroup v2 mount under which attempts get gpufleet/<attempt> cgroups (when the agent is root)")
	fs.StringVar(&f.config, "config", "", "YAML file of flag values (flags beat GPUFLEET_* env, which beats the file)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.AddCommand(newSuperviseCmd(), newAttemptInitCmd(), newAttemptAttachCmd())
	return cmd
}

// attemptCmd is one of the hidden commands the agent's own processes run
// for an attempt, given its directory (and, for init, the command after
// --). A silent one's exit code is the attempt's own, printed by nobody.
func attemptCmd(use, short string, silent bool, run func(dir string, args []string) int) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    use,
		Short:  short,
		Hidden: true,
		RunE: func(_ *cobra.Command, args []string) error {
			if dir == "" {
				return usageErr("--dir: required")
			}
			if code := run(dir, args); code != 0 {
				return &exitError{code: code, err: fmt.Errorf("%s: exit %d", strings.Fields(use)[0], code), silent: silent}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the attempt's directory (spec.json)")
	return cmd
}

// The per-attempt supervisor the agent starts; PID 1 of a process
// attempt's namespaces; a container attempt on an engine socket.
func newSuperviseCmd() *cobra.Command {
	return attemptCmd("supervise --dir DIR", "Run one attempt and record its exit (started by the agent)", false,
		func(dir string, _ []string) int { return agent.Supervise(dir) })
}

func newAttemptInitCmd() *cobra.Command {
	return attemptCmd("init --dir DIR -- COMMAND...", "Be PID 1 of an attempt's namespaces (started by the supervisor)", true,
		func(dir string, args []string) int {
			if len(args) == 0 {
				fmt.Fprintln(os.Stderr, "gpufleet agent init: a command is required after --")
				return 2
			}
			return agent.AttemptInit(dir, args)
		})
}

func newAttemptAttachCmd() *cobra.Command {
	return attemptCmd("attach --dir DIR", "Run a container attempt through the engine's API socket (started by the supervisor)", true,
		func(dir string, _ []string) int { return agent.AttemptAttach(dir) })
}

// runAgent runs the agent until ctx is done.
func runAgent(ctx context.Context, e *env, f agentFlags) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return usageErr("--log-level %q: expected debug, info, warn or error", f.logLevel)
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	servers := splitComma(e.server)
	if len(servers) == 0 {
		return usageErr("--server: required (URL[,URL...]; env GPUFLEET_SERVER)")
	}
	labels, err := parseKV(f.labels)
	if err != nil {
		return fmt.Errorf("--label: %w", err)
	}
	runAs, err := parseKV(f.runAs)
	if err != nil {
		return fmt.Errorf("--run-as: %w", err)
	}
	if f.name == "" {
		return usageErr("--name: required")
	}
	cat, err := e.loadCatalog()
	if err != nil {
		return err
	}
	be, err := openBackend(f, cat, log)
	if err != nil {
		return err
	}
	defer be.Close()
	if err := os.MkdirAll(f.dataDir, 0o711); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	dataDir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary for the supervisor: %w", err)
	}
	client, err := api.NewClient(servers, "", api.WithUserAgent("gpufleet-agent/"+gpufleet.Version), api.WithRetries(1),
		api.WithTimeout(10*time.Second), api.WithLogger(log))
	if err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	// Metrics listener first: its address is the metrics_url reported.
	var ln net.Listener
	metricsURL := f.metricsURL
	if f.metricsListen != "" {
		if ln, err = net.Listen("tcp", f.metricsListen); err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		if metricsURL == "" {
			metricsURL = "http://" + advertised(ln.Addr().String()) + "/metrics"
		}
	}
	cfg := agent.Config{JoinToken: f.joinToken, Name: f.name, DataDir: dataDir, Labels: labels, Backend: f.backend, StackFile: f.stackFile, StackProbe: f.stackProbe, SimBadDrivers: f.simBadDrivers,
		FenceAfter: f.fenceAfter, FenceGrace: f.fenceGrace, MetricsURL: metricsURL, SampleInterval: f.sampleInterval,
		Runner: agent.RunnerConfig{Supervisor: []string{exe, "agent", "supervise"}, RunAs: runAs, DefaultUser: f.defaultUser,
			KillAfter: f.killAfter, Environ: os.Environ()}}
	switch f.benchMode {
	case "quick":
		cfg.Bench, cfg.BenchOnJoin = benchOpener(f, be), true
	case "off":
	default:
		return usageErr("--bench %s: expected quick or off", gpufleet.Quote(f.benchMode))
	}
	cgroupRoot, err := filepath.Abs(f.cgroupRoot)
	if err != nil || f.cgroupRoot == "" {
		return usageErr("--cgroup-root %q: expected a directory", f.cgroupRoot)
	}
	var cgroupNote, delegation string
	if cgroupRoot == agent.DefaultCgroupRoot && os.Geteuid() == 0 {
		// Under systemd's Delegate=yes: the agent's own subtree.
		cgroupRoot, delegation = agent.DelegatedCgroupRoot(cgroupRoot)
	}
	cfg.Runner.CgroupRoot = cgroupRoot
	cfg.Runner.Cgroups, cgroupNote = agent.DetectCgroupV2(cgroupRoot)
	if delegation != "" {
		cgroupNote += "; " + delegation
	}
	if err := setUpIsolation(ctx, f, be, dataDir, exe, &cfg, log); err != nil {
		return err
	}
	a, err := agent.New(cfg, be, agent.NewAPIControlPlane(client), log)
	if err != nil {
		return err
	}
	log.Info("agent starting", "node", f.name, "servers", strings.Join(servers, ","), "backend", f.backend,
		"attempts_run_as", agent.RunAsDescription(runAs, f.defaultUser, cfg.Runner.UIDs), "cgroups", cfg.Runner.Cgroups, "cgroup", cgroupNote, "metrics_url", metricsURL)
	var ms *http.Server
	if ln != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(a.Collectors()...)
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		health := a.HealthHandler() // liveness and readiness probes
		mux.Handle("/healthz", health)
		mux.Handle("/readyz", health)
		ms = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = ms.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = ms.Shutdown(sctx)
		}()
	}
	info := map[string]any{"node": f.name, "metrics_url": metricsURL, "pid": os.Getpid(), "backend": f.backend}
	if err := writeJSONFile(filepath.Join(dataDir, "agent.json"), info); err != nil {
		return err
	}
	return a.Run(ctx)
}

// advertised turns a listen address into one others can reach: an
// unspecified host becomes this machine's name.
func advertised(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

// benchOpener opens the benchmark backend the first time the agent needs
// it: the simulated GPUs answer themselves; real ones go through the CUDA
// libraries, opened once (a failure is retried at the next bench).
func benchOpener(f agentFlags, be gpu.Backend) agent.BenchOpener {
	if b, ok := be.(bench.Backend); ok {
		return func() (bench.Backend, error) { return b, nil }
	}
	var (
		mu     sync.Mutex
		opened *cuda.Backend
	)
	return func() (bench.Backend, error) {
		mu.Lock()
		defer mu.Unlock()
		if opened != nil {
			return opened, nil
		}
		devs, err := be.Devices(context.Background())
		if err != nil {
			return nil, err
		}
		b, err := cuda.Open(f.cudaLibDir, devs)
		if err != nil {
			return nil, err
		}
		opened = b
		return b, nil
	}
}

// openBackend chooses the GPU backend once.
func openBackend(f agentFlags, cat *catalog.Catalog, log *slog.Logger) (gpu.Backend, error) {
	switch f.backend {
	case "nvml":
		b, err := nvml.New(nvml.WithLogger(log), nvml.WithCatalog(cat))
		if err != nil {
			return nil, fmt.Errorf("--backend nvml: %w (no NVIDIA driver on this machine? --backend sim --sim-gpus h100-sxm-80gb:8 simulates GPUs)", err)
		}
		return b, nil
	case "sim":
		specs, err := parseSimGPUs(f.simGPUs)
		if err != nil {
			return nil, err
		}
		return simgpu.New(specs, simgpu.WithNodeName(f.name), simgpu.WithCatalog(cat))
	}
	return nil, usageErr("--backend %q: expected nvml or sim", f.backend)
}

// parseSimGPUs reads --sim-gpus: MODEL:COUNT[:mig=LAYOUT[@GPUS]] items,
// comma-separated, at most gpufleet.MaxNodeGPUs GPUs in all (what the
// server takes from one node). LAYOUT is PROFILE*N joined by "+"
// ("1g.18gb*7", "3g.71gb*2+1g.18gb"); a "+" followed by a letter belongs
// to the profile ("1g.10gb+me*1"); GPUS is N (the first N GPUs) or 0-K
// (the first K+1).
func parseSimGPUs(s string) ([]simgpu.Spec, error) {
	var out []simgpu.Spec
	total := 0
	for _, item := range splitComma(s) {
		parts := strings.SplitN(item, ":", 3)
		if len(parts) < 2 {
			return nil, usageErr("--sim-gpus %q: expected MODEL:COUNT[:mig=PROFILE*N[@GPUS]]", item)
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 || n > gpufleet.MaxNodeGPUs-total {
			return nil, usageErr("--sim-gpus %q: count %q: expected a positive number, at most %d GPUs in all", item, parts[1], gpufleet.MaxNodeGPUs)
		}
		total += n
		spec := simgpu.Spec{Model: parts[0], Count: n}
		if len(parts) == 3 {
			mig, ok := strings.CutPrefix(parts[2], "mig=")
			if !ok || mig == "" {
				return nil, usageErr("--sim-gpus %q: expected mig=PROFILE*N after the count", item)
			}
			layout, on, hasOn := strings.Cut(mig, "@")
			if hasOn {
				k, err := migGPUs(on)
				if err != nil || k > n {
					return nil, usageErr("--sim-gpus %q: @%s: expected N or 0-K within the %d GPUs", item, on, n)
				}
				spec.MIGCount = k
			}
			var items []string
			for _, p := range splitMIGLayout(layout) {
				name, count, ok := strings.Cut(p, "*")
				if !ok {
					count = "1"
				}
				items = append(items, strings.TrimSpace(name)+" x"+strings.TrimSpace(count))
			}
			spec.MIG = strings.Join(items, "; ")
		}
		out = append(out, spec)
	}
	if len(out) == 0 {
		return nil, usageErr("--sim-gpus: expected at least one MODEL:COUNT")
	}
	return out, nil
}

// splitMIGLayout splits a --sim-gpus LAYOUT at each "+" that starts
// another PROFILE*N (a digit or "mig-" follows, spaces aside); other "+"
// are part of a profile name such as 1g.10gb+me.
func splitMIGLayout(layout string) []string {
	var out []string
	start := 0
	for i := 0; i < len(layout); i++ {
		if layout[i] != '+' {
			continue
		}
		rest := strings.TrimLeft(layout[i+1:], " ")
		if rest == "" || (rest[0] >= '0' && rest[0] <= '9') || strings.HasPrefix(strings.ToLower(rest), "mig") {
			out = append(out, layout[start:i])
			start = i + 1
		}
	}
	return append(out, layout[start:])
}

// migGPUs reads "N" or "0-K" as a count of leading GPUs, from 1 to
// gpufleet.MaxNodeGPUs.
func migGPUs(s string) (int, error) {
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a != 0 || b < 0 || b >= gpufleet.MaxNodeGPUs {
			return 0, errors.New("expected 0-K")
		}
		return b + 1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > gpufleet.MaxNodeGPUs {
		return 0, errors.New("expected a positive number")
	}
	return n, nil
}

// writeJSONFile writes v as indented JSON to path atomically (mode 0644).
func writeJSONFile(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return agent.WriteFileAtomic(path, append(data, '\n'), 0o644)
}

// setUpIsolation decides how attempts run on this node and how they are
// kept apart: the runtime and its engine, a uid per attempt, PID and
// mount namespaces, device cgroups, and the device nodes and CDI specs
// that name the GPUs (the simulator's own under DATA_DIR). What cannot be
// set up is logged, and the node reports its job isolation as soft.
func setUpIsolation(ctx context.Context, f agentFlags, be gpu.Backend, dataDir, exe string, cfg *agent.Config, log *slog.Logger) error {
	rt, err := agent.ParseRuntime(f.runtime)
	if err != nil {
		return usageErr("%v", err)
	}
	cfg.Runtime = rt
	rc := &cfg.Runner
	rc.DevRoot, rc.CDIDirs = "/dev", f.cdiDirs
	if f.backend == "sim" {
		devs, err := be.Devices(ctx)
		if err != nil {
			return err
		}
		rc.DevRoot = filepath.Join(dataDir, "dev")
		if os.Geteuid() == 0 {
			if err := agent.MakeSimDevices(rc.DevRoot, devs); err != nil {
				return fmt.Errorf("simulated device nodes: %w", err)
			}
			cdi := filepath.Join(dataDir, "cdi")
			if err := agent.WriteSimCDISpec(cdi, rc.DevRoot, devs); err != nil {
				return fmt.Errorf("simulated CDI spec: %w", err)
			}
			rc.CDIDirs = append(slices.Clone(rc.CDIDirs), cdi)
		}
	}
	if rt.Containers() {
		e, err := agent.DetectEngine(ctx, rt, f.ociRuntime, f.engineSocket)
		if err != nil {
			return err
		}
		rc.Engine, rc.Attach = &e, []string{exe, "agent", "attach"}
		rc.Ulimits = f.ulimits
		if len(rc.Ulimits) == 0 {
			rc.Ulimits = agent.DefaultUlimits()
		}
		log.Info("container engine", "runtime", rt, "path", e.Path, "socket", e.Socket, "version", e.Version, "oci_runtime", e.OCIRuntime, "ulimits", strings.Join(rc.Ulimits, " "))
	}
	var iso agent.Isolation
	root := os.Geteuid() == 0
	if f.uidRange != "" {
		r, err := agent.ParseUIDRange(f.uidRange)
		if err != nil {
			return usageErr("%v", err)
		}
		rc.UIDs = &r
	}
	runAsUsers := map[string]string{}
	shared := ""
	for team, u := range rc.RunAs {
		if other, ok := runAsUsers[u]; ok {
			shared = fmt.Sprintf("--run-as maps teams %s and %s to the same user %s", other, team, u)
		}
		runAsUsers[u] = team
	}
	switch {
	case !root:
		iso.Missing = append(iso.Missing, "users: the agent is not root, attempts run as its own user")
	case rc.UIDs == nil:
		iso.Missing = append(iso.Missing, "users: no --uid-range, every unmapped team runs as "+rc.DefaultUser)
	case shared != "":
		iso.Missing = append(iso.Missing, "users: "+shared)
	default:
		iso.Users = true
	}
	if err := agent.ProbeNamespaces(); err != nil {
		iso.Missing = append(iso.Missing, "pid and mount namespaces: "+err.Error())
	} else {
		iso.PIDNamespace, iso.PrivateTmp, rc.Isolate, rc.Init = true, true, true, []string{exe, "agent", "init"}
	}
	v2 := ""
	if rc.Cgroups {
		v2 = rc.CgroupRoot
	}
	mode, why := devcgroup.Supported(v2, agent.DevicesV1Root)
	if mode == "" {
		iso.Missing = append(iso.Missing, "devices: "+why)
	}
	iso.Devices, rc.DeviceMode = mode, mode
	cfg.Isolation = iso
	if iso.Hard() {
		log.Info("attempts isolated", "job_isolation", "hard", "users", rc.UIDs, "pid_namespace", true, "private_tmp", true, "devices", mode)
	} else {
		log.Warn("attempts not fully isolated: the node reports job isolation soft, and hard jobs stay off it (docs/ISOLATION.md)",
			"missing", strings.Join(iso.Missing, "; "))
	}
	return nil
}

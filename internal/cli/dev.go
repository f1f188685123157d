package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/agent"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/forecast"
	"github.com/gpufleet/gpufleet/internal/server"
	"github.com/gpufleet/gpufleet/internal/store"
)

// devFlags are the flags of `gpufleet dev`.
type devFlags struct {
	listen, adminToken, dataDir, config string
	runtime                             string
	keepAttempts                        bool
	keepJobs                            bool
	noContext                           bool
	seedHistory                         time.Duration
}

// devNode is one simulated node gpufleet dev runs.
type devNode struct {
	Name    string
	SimGPUs string
	Labels  []string
}

// devFleet is the simulated fleet: NVLink H100 and A100 boxes (one A100
// box a VM owning its GPUs by passthrough), PCIe L4s (one a VM on
// time-sliced vGPUs: soft isolation), and an H200 box with MIG on GPUs 0-1.
var devFleet = []devNode{
	{"dev-h100-0", "h100-sxm-80gb:8", []string{"rack=r1", "block=b1", "purchased=2024-02"}},
	{"dev-h100-1", "h100-sxm-80gb:8", []string{"rack=r1", "block=b1", "purchased=2024-02"}},
	{"dev-a100-0", "a100-sxm-80gb:8", []string{"rack=r2", "block=b1", "purchased=2021-10"}},
	{"dev-a100-1", "a100-sxm-80gb:8", []string{"rack=r2", "block=b1", "purchased=2021-10", "virtualization=passthrough"}},
	{"dev-l4-0", "l4:4", []string{"rack=r3", "block=b2", "purchased=2023-07"}},
	{"dev-l4-1", "l4:4", []string{"rack=r3", "block=b2", "purchased=2023-07"}},
	{"dev-l4-2", "l4:4", []string{"rack=r3", "block=b2", "purchased=2023-07"}},
	{"dev-l4-3", "l4:4", []string{"rack=r3", "block=b2", "purchased=2023-07", "virtualization=vgpu:L4-24C"}},
	{"dev-h200-0", "h200-sxm-141gb:8:mig=1g.18gb*7@0-1", []string{"rack=r4", "block=b2", "purchased=2025-01"}},
}

// devRacks are the dev fleet's racks, each listing the nodes whose rack
// label names it (devRackNodes; the lists decide, and dev puts them at
// every start): 17.3 kW each, a common facility provision (docs/POWER.md). The two
// H100 boxes of r1 are rated 20.4 kW, so r1 holds back work once its
// projected draw nears 17.3 kW, and keeps 1.4 kW (two H100s) for
// production; the others are rated under their budget.
var devRacks = []gpufleet.Rack{
	{Name: "r1", PowerBudgetWatts: 17300, ProductionReserveWatts: 1400, CoolingWatts: ptrTo(gpufleet.Watts(20000))},
	{Name: "r2", PowerBudgetWatts: 17300},
	{Name: "r3", PowerBudgetWatts: 17300},
	{Name: "r4", PowerBudgetWatts: 17300},
}

func ptrTo[T any](v T) *T { return &v }

// devRackNodes is the dev nodes whose rack label names rack.
func devRackNodes(rack string) []string {
	var out []string
	for _, n := range devFleet {
		if slices.Contains(n.Labels, gpufleet.RackLabel+"="+rack) {
			out = append(out, n.Name)
		}
	}
	return out
}

// devState is DIR/dev.json.
type devState struct {
	APIURL     string            `json:"api_url"`
	LoginURL   string            `json:"login_url"`
	AdminToken string            `json:"admin_token"`
	Teams      map[string]string `json:"teams"`
	Nodes      map[string]string `json:"nodes,omitempty"` // node -> metrics URL
}

func newDevCmd(e *env) *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a server and simulated GPU nodes on this machine",
		Long: `Run a complete gpufleet on one machine: the server (with short timeouts:
heartbeat 1s, grace 3s, fence 5s) and simulated nodes, each a real
` + "`gpufleet agent --backend sim`" + ` process: 2x8 H100 SXM, 2x8 A100 80GB, 4x4 L4
and 1x8 H200 with MIG (GPUs 0-1 as 7x1g.18gb), in racks r1-r4 of 17.3 kW
each (r1, the H100s, is rated 20.4 kW: it holds work back for power). It seeds
teams team-a and team-b with member tokens, prints the URLs and tokens, and writes
DIR/dev.json. Run it again on the same directory and it carries on: same
tokens, nodes and credentials, and attempts still running are re-adopted.
Ctrl-C stops it. With --seed-history 60d a new data dir starts with 60 days
of finished jobs (H100 demand growing towards capacity, A100 steady, L4
nearly idle), and the nodes carry purchased dates, so that gpufleet
forecast, procure and lifecycle have something to say.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnvAndConfig(cmd, f.config); err != nil {
				return err
			}
			return runDev(cmd.Context(), e, f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7080", "address of the API (127.0.0.1:0 picks a free port)")
	fs.StringVar(&f.adminToken, "admin-token", "", "admin token, at least 16 characters (default: kept from the last run, or generated)")
	fs.StringVar(&f.dataDir, "data-dir", "gpufleet-dev", "directory for the server, the agents and dev.json")
	fs.StringVar(&f.config, "config", "", "YAML file of flag values (flags beat GPUFLEET_* env, which beats the file)")
	fs.StringVar(&f.runtime, "runtime", "process", "how the agents run jobs: process, podman or docker (jobs with an image run in containers that see only their simulated GPUs)")
	durationFlag(fs, &f.seedHistory, "seed-history", 0, "on a new data dir, first write this much synthetic finished work (60d), so that forecast, procure and lifecycle have a history")
	fs.BoolVar(&f.noContext, "no-context", false, "do not write the dev, dev-team-a and dev-team-b contexts to the client config file")
	fs.BoolVar(&f.keepJobs, "keep-jobs", false, "on Ctrl-C, leave the running jobs' processes to fence themselves (5s after their agent stops) instead of stopping them")
	fs.BoolVar(&f.keepAttempts, "keep-attempts", false, "if the server fails, leave the agents' attempts running (they fence themselves after 5s)")
	return cmd
}

// serveFunc runs the control plane until ctx is done, calling ready once
// it listens; runServer, or a test's stand-in.
type serveFunc func(ctx context.Context, e *env, f serverFlags, ready func(url, token string)) error

// runDev runs the server in-process and the agents as children until ctx
// is done. If the server fails it stops the agents and (unless
// --keep-attempts) their attempts, and returns the server's error: dev never
// leaves orphans behind.
func runDev(ctx context.Context, e *env, f devFlags) error {
	serve := serveFunc(runServer)
	if v := os.Getenv("GPUFLEET_TEST_SERVER_FAIL_AFTER"); v != "" {
		// A test hook: the in-process server fails that long after it
		// starts, as a crashed server would.
		after, err := gpufleet.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("GPUFLEET_TEST_SERVER_FAIL_AFTER: %w", err)
		}
		serve = failingServer(after)
	}
	return runDevWith(ctx, e, f, serve)
}

// failingServer runs the server and makes it fail after d.
func failingServer(d time.Duration) serveFunc {
	return func(ctx context.Context, e *env, f serverFlags, ready func(url, token string)) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- runServer(ctx, e, f, ready) }()
		select {
		case err := <-done:
			return err
		case <-time.After(d):
			cancel()
			<-done
			return errors.New("GPUFLEET_TEST_SERVER_FAIL_AFTER: the server failed on purpose")
		}
	}
}

func runDevWith(ctx context.Context, e *env, f devFlags, serve serveFunc) error {
	if _, err := agent.ParseRuntime(f.runtime); err != nil {
		return usageErr("%v", err)
	}
	if err := os.MkdirAll(f.dataDir, 0o711); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	dir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return err
	}
	statePath := filepath.Join(dir, "dev.json")
	var prev devState
	if data, err := os.ReadFile(statePath); err == nil {
		if prev, err = parseDevState(data); err != nil {
			return fmt.Errorf("%s: %w (remove it to start afresh)", statePath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	admin := f.adminToken
	if admin == "" {
		admin = prev.AdminToken
	}
	srvLog, err := os.OpenFile(filepath.Join(dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer srvLog.Close()
	d := server.Default()
	sf := serverFlags{listen: f.listen, dataDir: filepath.Join(dir, "server"), adminToken: admin, policy: d.Policy, logLevel: "info",
		tick: 500 * time.Millisecond, heartbeat: time.Second, heartbeatGrace: 3 * time.Second, fenceAfter: 5 * time.Second, leaseTTL: 3 * time.Second, // server.MinFence: 3s + 2 x 500ms + 1s
		rollupRetention: d.RollupRetention, credentialTTL: d.CredentialTTL,
		quarantineFraction: d.Health.QuarantineMaxFraction, throttleSustain: 10 * time.Second,
		eccCorrected: d.Health.ECCCorrectedGrowth, eccWindow: d.Health.ECCCorrectedWindow,
		pue: d.PUE, gridIntensity: d.Intensity.Constant,
		powerCaps: "off", overBudget: d.OverBudget.String(), overBudgetAfter: d.OverBudgetAfter}
	if os.Geteuid() != 0 {
		// Not root, the agents cannot keep jobs apart (a uid per team,
		// namespaces, device cgroups): every node reports job-isolation soft,
		// and production jobs, which need hard isolation by default, accept
		// soft here so that the walkthrough runs on a laptop.
		sf.isolation = []string{"production=soft"}
		fmt.Fprintln(e.stderr, "gpufleet dev: not root, so jobs are not isolated from each other on the simulated nodes (job-isolation soft; production jobs accept soft here). Run it as root for the isolation of docs/ISOLATION.md#on-the-node.")
	}
	seeded := 0
	if f.seedHistory > 0 {
		days := int(f.seedHistory / (24 * time.Hour))
		if days < forecast.MinDays || days > 730 {
			return usageErr("--seed-history: %d days: expected %d to 730 days", days, forecast.MinDays)
		}
		sf.seed = func(ctx context.Context, st store.Store) (err error) {
			seeded, err = seedHistory(ctx, st, days, time.Now())
			return err
		}
	}
	srvEnv := &env{stdin: e.stdin, stdout: io.Discard, stderr: srvLog, catalog: e.catalog}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type readyMsg struct{ url, token string }
	ready := make(chan readyMsg, 1)
	srvErr := make(chan error, 1)
	go func() {
		srvErr <- serve(ctx, srvEnv, sf, func(url, tok string) { ready <- readyMsg{url, tok} })
	}()
	var rm readyMsg
	select {
	case rm = <-ready:
	case err := <-srvErr:
		return fmt.Errorf("server: %w (its log: %s)", err, srvLog.Name())
	case <-ctx.Done():
		return nil
	}
	client, err := api.NewClient([]string{rm.url}, rm.token, api.WithUserAgent("gpufleet-dev/"+gpufleet.Version))
	if err != nil {
		return err
	}
	st := devState{APIURL: rm.url, LoginURL: rm.url + "/?token=" + rm.token, AdminToken: rm.token, Teams: map[string]string{}, Nodes: map[string]string{}}
	for _, team := range []string{"team-a", "team-b"} {
		if _, err := client.PutTeam(ctx, devTeam(team)); err != nil {
			return fmt.Errorf("seed team %s: %w", team, err)
		}
		tok := prev.Teams[team]
		if tok == "" || !tokenWorks(ctx, rm.url, tok) {
			t, err := client.CreateToken(ctx, api.TokenRequest{Team: team, Role: gpufleet.RoleMember})
			if err != nil {
				return fmt.Errorf("seed token for %s: %w", team, err)
			}
			tok = t.Token
		}
		st.Teams[team] = tok
	}
	for _, r := range devRacks {
		r.Nodes = devRackNodes(r.Name)
		// Forced: dev's racks are what they are, even when a restart finds
		// running jobs that are not measured yet (charged their limit).
		if _, err := client.PutRack(ctx, api.PutRackRequest{Rack: r, Force: true}); err != nil {
			return fmt.Errorf("seed rack %s: %w", r.Name, err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	agentsDir := filepath.Join(dir, "agents")
	for _, n := range devFleet {
		// A reusable join token: the agent registers with it at each
		// start (fresh inventory); it renews its credential without it.
		jt, err := client.CreateJoinToken(ctx, api.JoinTokenRequest{Node: n.Name, TTL: gpufleet.Duration(720 * time.Hour)})
		if err != nil {
			return fmt.Errorf("join token for %s: %w", n.Name, err)
		}
		ndir := filepath.Join(agentsDir, n.Name)
		if err := os.MkdirAll(ndir, 0o711); err != nil {
			return err
		}
		_ = os.Remove(filepath.Join(ndir, "agent.json"))
		args := []string{"agent", "--server", rm.url, "--join-token", jt.Token, "--name", n.Name, "--data-dir", ndir,
			"--backend", "sim", "--sim-gpus", n.SimGPUs, "--metrics-listen", "127.0.0.1:0", "--kill-after", "2s", "--fence-grace", "2s",
			"--runtime", f.runtime}
		for _, l := range n.Labels {
			args = append(args, "--label", l)
		}
		if e.catalog != "" {
			args = append(args, "--catalog", e.catalog)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			superviseChild(ctx, exe, args, filepath.Join(agentsDir, n.Name+".log"), e.stderr)
		}()
	}
	// Wait for the agents to say where their metrics are.
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range devFleet {
		for time.Now().Before(deadline) && ctx.Err() == nil {
			var info struct {
				MetricsURL string `json:"metrics_url"`
			}
			if readJSONFile(filepath.Join(agentsDir, n.Name, "agent.json"), &info) == nil && info.MetricsURL != "" {
				st.Nodes[n.Name] = info.MetricsURL
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// And for every node to have joined (agents measure their GPUs before
	// they register), so that what dev prints can be used at once.
	if cl, err := api.NewClient([]string{st.APIURL}, st.AdminToken, api.WithRetries(1), api.WithTimeout(2*time.Second)); err == nil {
		for time.Now().Before(deadline) && ctx.Err() == nil {
			ns, err := cl.Nodes(ctx)
			if err == nil && len(ns) >= len(devFleet) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Prometheus file_sd: the agents' metrics ports are new at each start.
	sdPath := filepath.Join(dir, "prometheus-sd.json")
	if cl, err := api.NewClient([]string{st.APIURL}, st.AdminToken, api.WithRetries(1), api.WithTimeout(2*time.Second)); err == nil {
		if targets, err := cl.ScrapeTargets(ctx); err == nil {
			if err := writeJSONFile(sdPath, targets); err != nil {
				sdPath = ""
			}
		} else {
			sdPath = ""
		}
	}
	if err := writeJSONFile(statePath, st); err != nil {
		return err
	}
	_ = os.Chmod(statePath, 0o600)
	contexts := ""
	if path := clientConfigPath(); !f.noContext && path != "" {
		add := map[string]clientContext{"dev": {Server: st.APIURL, Token: st.AdminToken}}
		for t, tok := range st.Teams {
			add["dev-"+t] = clientContext{Server: st.APIURL, Token: tok}
		}
		if err := setContexts(path, add, "dev"); err != nil {
			fmt.Fprintf(e.stderr, "gpufleet dev: could not write the client contexts: %v\n", err)
		} else {
			contexts = path
		}
	}
	w := e.stdout
	fmt.Fprintf(w, "gpufleet dev is running (data in %s; Ctrl-C stops it)\n\n", dir)
	if seeded > 0 {
		fmt.Fprintf(w, "History:     %d finished jobs over %s (try gpufleet forecast, procure, lifecycle)\n", seeded, gpufleet.Duration(f.seedHistory))
	}
	fmt.Fprintf(w, "API:         %s\n", st.APIURL)
	fmt.Fprintf(w, "Login:       %s\n", st.LoginURL)
	fmt.Fprintf(w, "Admin token: %s\n", st.AdminToken)
	for _, t := range []string{"team-a", "team-b"} {
		fmt.Fprintf(w, "%s token: %s\n", t, st.Teams[t])
	}
	fmt.Fprintf(w, "\nNodes (metrics):\n")
	for _, n := range devFleet {
		fmt.Fprintf(w, "  %-11s %-36s %s\n", n.Name, n.SimGPUs, orDash(st.Nodes[n.Name]))
	}
	if contexts != "" {
		fmt.Fprintf(w, "\nContexts:    dev (admin, now current), dev-team-a, dev-team-b in %s\n", contexts)
		fmt.Fprintf(w, "\nTry:\n  gpufleet config use-context dev-team-a\n  gpufleet nodes\n  gpufleet submit --gpus 2 --sim-load compute -- sh -c 'nvidia-smi || env | grep CUDA; sleep 60'\n\n")
	} else {
		fmt.Fprintf(w, "\nTry:\n  export GPUFLEET_SERVER=%s GPUFLEET_TOKEN=%s\n  gpufleet nodes\n  gpufleet submit --gpus 2 --sim-load compute -- sh -c 'nvidia-smi || env | grep CUDA; sleep 60'\n\n",
			st.APIURL, st.Teams["team-a"])
	}
	if sdPath != "" {
		fmt.Fprintf(w, "Prometheus:  file_sd %s (or http_sd %s/api/v1/sd/agents with a monitor token: gpufleet tokens create --role monitor)\n", sdPath, st.APIURL)
	}
	fmt.Fprintf(w, "State: %s; logs: %s, %s/*.log\n", statePath, srvLog.Name(), agentsDir)
	select {
	case <-ctx.Done():
	case err := <-srvErr:
		cancel()
		wg.Wait() // every agent has exited
		if err == nil {
			err = errors.New("it stopped")
		}
		stopped := 0
		if !f.keepAttempts {
			for _, n := range devFleet {
				stopped += agent.StopSupervised(filepath.Join(agentsDir, n.Name), 5*time.Second)
			}
		}
		fmt.Fprintf(e.stderr, "gpufleet dev: the server failed; stopped %d agents and %d attempts\n", len(devFleet), stopped)
		return fmt.Errorf("server: %w (its log: %s)", err, srvLog.Name())
	}
	wg.Wait()
	if !f.keepJobs {
		// Interrupted: the agents are gone; stop their attempts now (the
		// checkpoint signal, then their grace) rather than leave them to
		// fence themselves.
		stopped := 0
		for _, n := range devFleet {
			stopped += agent.StopSupervised(filepath.Join(agentsDir, n.Name), 5*time.Second)
		}
		if stopped > 0 {
			fmt.Fprintf(e.stderr, "gpufleet dev: stopped %d running job process(es) (--keep-jobs leaves them)\n", stopped)
		}
	}
	return <-srvErr
}

// tokenWorks reports whether a stored member token is still accepted.
func tokenWorks(ctx context.Context, url, tok string) bool {
	c, err := api.NewClient([]string{url}, tok, api.WithRetries(1))
	if err != nil {
		return false
	}
	_, err = c.Teams(ctx)
	return err == nil
}

// superviseChild runs exe args as a child, restarting it if it exits,
// until ctx is done; then it sends SIGTERM and, after 5s, SIGKILL.
func superviseChild(ctx context.Context, exe string, args []string, logPath string, stderr io.Writer) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for ctx.Err() == nil {
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "gpufleet dev: %v\n", err)
			return
		}
		cmd := exec.Command(exe, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = childEnv()
		// Its own process group: Ctrl-C reaches only gpufleet dev, which
		// then stops the agents in order. Should dev itself die, the
		// kernel sends the agent SIGTERM (Pdeathsig follows the thread
		// that started the child: LockOSThread above keeps it).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		if err := cmd.Start(); err != nil {
			logf.Close()
			fmt.Fprintf(stderr, "gpufleet dev: start agent: %v\n", err)
			return
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
			logf.Close()
			if ctx.Err() != nil {
				return
			}
			fmt.Fprintf(stderr, "gpufleet dev: agent %s exited; restarting it (log: %s)\n", args[6], logPath)
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			logf.Close()
			return
		}
	}
}

// childEnv is this process's environment without GPUFLEET_* settings, so
// that the agents take only their flags.
func childEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GPUFLEET_") {
			out = append(out, kv)
		}
	}
	return out
}

// parseDevState reads DIR/dev.json as the last run wrote it. The tokens it
// keeps must be ones the server and the client can use: the admin token
// at least 16 characters, every token printable ASCII without spaces (it
// goes into an Authorization header). Anything else is an error wrapping
// gpufleet.ErrInvalid.
func parseDevState(data []byte) (devState, error) {
	var st devState
	if err := json.Unmarshal(data, &st); err != nil {
		return devState{}, fmt.Errorf("%w: %v", gpufleet.ErrInvalid, err)
	}
	if st.AdminToken != "" && len(st.AdminToken) < 16 {
		return devState{}, fmt.Errorf("%w: admin_token: expected at least 16 characters", gpufleet.ErrInvalid)
	}
	if err := checkToken("admin_token", st.AdminToken); err != nil {
		return devState{}, err
	}
	for _, team := range slices.Sorted(maps.Keys(st.Teams)) {
		if err := checkToken("teams."+gpufleet.Quote(team), st.Teams[team]); err != nil {
			return devState{}, err
		}
	}
	return st, nil
}

// checkToken checks a stored token ("" is none): at most 4096 bytes of
// printable ASCII without spaces.
func checkToken(field, tok string) error {
	if len(tok) > 4096 {
		return fmt.Errorf("%w: %s: %d bytes, at most 4096", gpufleet.ErrInvalid, field, len(tok))
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' {
			return fmt.Errorf("%w: %s: byte %d is %q: expected printable ASCII without spaces", gpufleet.ErrInvalid, field, i, tok[i])
		}
	}
	return nil
}

// readJSONFile reads a JSON file into v.
func readJSONFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// agentProc is a real `gpufleet agent --backend sim` process.
type agentProc struct {
	t          *testing.T
	name       string
	dataDir    string
	prog       string // the program to run: the gpufleet binary, or ip for an agent in a namespace
	args       []string
	cmd        *exec.Cmd
	exited     chan struct{}
	metricsURL string
	logPath    string
}

// startAgent runs an agent with simulated GPUs against p, joined with a
// reusable join token bound to its name.
func startAgent(t *testing.T, p *serverProc, admin *api.Client, name, simGPUs string, extra ...string) *agentProc {
	t.Helper()
	jt, err := admin.CreateJoinToken(t.Context(), api.JoinTokenRequest{Node: name, TTL: gpufleet.Duration(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return startAgentWithToken(t, p.url, jt.Token, name, simGPUs, extra...)
}

// startAgentWithToken runs an agent joined with the given join token.
func startAgentWithToken(t *testing.T, serverURL, token, name, simGPUs string, extra ...string) *agentProc {
	t.Helper()
	dir := t.TempDir()
	a := &agentProc{t: t, name: name, dataDir: dir, logPath: filepath.Join(dir, "agent.log"), prog: binary(t),
		args: append(agentArgs(serverURL, token, name, dir, simGPUs), extra...)}
	a.start()
	return a
}

// agentArgs are the flags of a test agent.
func agentArgs(serverURL, token, name, dir, simGPUs string) []string {
	return []string{"agent", "--server", serverURL, "--join-token", token, "--name", name, "--data-dir", dir,
		"--backend", "sim", "--sim-gpus", simGPUs, "--metrics-listen", "127.0.0.1:0", "--kill-after", "1s",
		"--sample-interval", "200ms", "--log-level", "debug"}
}

func (a *agentProc) start() {
	t := a.t
	t.Helper()
	os.Remove(filepath.Join(a.dataDir, "agent.json"))
	cmd := exec.Command(a.prog, a.args...)
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.cmd, a.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(a.exited) }()
	eventually(t, 15*time.Second, "agent "+a.name+" writes agent.json", func() error {
		select {
		case <-a.exited:
			log, _ := os.ReadFile(a.logPath)
			t.Fatalf("agent %s exited:\n%s", a.name, log)
		default:
		}
		var info struct {
			MetricsURL string `json:"metrics_url"`
		}
		data, err := os.ReadFile(filepath.Join(a.dataDir, "agent.json"))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, &info); err != nil {
			return err
		}
		a.metricsURL = info.MetricsURL
		return nil
	})
	t.Cleanup(func() { a.stop(syscall.SIGKILL) })
}

// stop signals the agent and waits for it.
func (a *agentProc) stop(sig syscall.Signal) {
	if a.cmd.Process != nil {
		a.cmd.Process.Signal(sig)
	}
	<-a.exited
}

func (a *agentProc) dumpLog(t *testing.T) {
	t.Helper()
	log, _ := os.ReadFile(a.logPath)
	t.Logf("agent %s log:\n%s", a.name, log)
}

// outDir is a directory the attempts (running as nobody when the tests run
// as root) can write to.
func outDir(t *testing.T) string {
	t.Helper()
	// Not under /tmp: an isolated attempt has a /tmp of its own.
	base := ""
	if os.Geteuid() == 0 {
		base = "/var/lib"
	}
	dir, err := os.MkdirTemp(base, "gpufleet-e2e-out-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// readEnv reads an `env` dump.
func readEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = v
		}
	}
	return out, sc.Err()
}

func waitJob(t *testing.T, c *api.Client, id string, d time.Duration, want ...gpufleet.JobState) gpufleet.Job {
	t.Helper()
	var j gpufleet.Job
	eventually(t, d, "job "+id+" reaches "+fmt.Sprint(want), func() error {
		var err error
		if j, err = c.Job(t.Context(), id); err != nil {
			return err
		}
		if slices.Contains(want, j.State) {
			return nil
		}
		return fmt.Errorf("state %s", j.State)
	})
	return j
}

func scrape(ctx context.Context, url string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestAgentsRunJobsOnTheirGPUs starts the server and real agents with
// simulated GPUs, submits one job of each kind and checks that each lands
// on suitable GPUs, sees exactly its GPUs in CUDA_VISIBLE_DEVICES, runs as
// an unprivileged user, reports its exit, shows in the metrics with its
// team and in usage.
func TestAgentsRunJobsOnTheirGPUs(t *testing.T) {
	p := startServer(t, t.TempDir(), nil)
	f := setupTeams(t, p, "team-a", "team-b")
	ctx := t.Context()
	agents := map[string]*agentProc{}
	for name, gpus := range map[string]string{
		"h100-a": "h100-sxm-80gb:8", "h100-b": "h100-sxm-80gb:8",
		"h200-m": "h200-sxm-141gb:2:mig=1g.18gb*7@1", "l4-a": "l4:2",
	} {
		agents[name] = startAgent(t, p, f.admin, name, gpus, "--label", "rack=r-"+name)
	}
	defer func() {
		if t.Failed() {
			for _, a := range agents {
				a.dumpLog(t)
			}
		}
	}()
	eventually(t, 15*time.Second, "all nodes ready", func() error {
		nodes, err := f.admin.Nodes(ctx)
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range nodes {
			if n.State == gpufleet.NodeReady {
				ready++
			}
		}
		if ready != len(agents) {
			return fmt.Errorf("%d of %d nodes ready", ready, len(agents))
		}
		return nil
	})
	nodes, err := f.admin.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gpuOf := map[string]gpufleet.NodeGPU{} // GPU or MIG UUID -> GPU
	nodeOf := map[string]string{}
	for _, n := range nodes {
		if n.MetricsURL != agents[n.Name].metricsURL {
			t.Errorf("node %s metrics_url %q, agent serves %q", n.Name, n.MetricsURL, agents[n.Name].metricsURL)
		}
		if n.Labels["rack"] != "r-"+n.Name || n.Labels["backend"] != "sim" || n.Versions["driver"] == "" {
			t.Errorf("node %s labels %v versions %v", n.Name, n.Labels, n.Versions)
		}
		for _, g := range n.GPUs {
			gpuOf[g.UUID], nodeOf[g.UUID] = g, n.Name
			for _, m := range g.MIGInstances {
				gpuOf[m.UUID], nodeOf[m.UUID] = g, n.Name
			}
		}
	}

	out := outDir(t)
	dump := func(extra string) []string {
		return []string{"sh", "-c", "env > " + out + "/$GPUFLEET_JOB_ID.$GPUFLEET_NODE_RANK.env; echo hello from $GPUFLEET_JOB_ID; " + extra}
	}
	member := f.members["team-a"]
	submit := func(name string, r api.SubmitRequest) string {
		t.Helper()
		r.Name = name
		if r.Command == nil {
			r.Command = dump("")
		}
		resp, err := member.SubmitJob(ctx, r)
		if err != nil {
			t.Fatalf("submit %s: %v", name, err)
		}
		return resp.ID
	}
	jobs := map[string]string{
		"nvlink": submit("nvlink", api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4, GPUModels: []string{"h100-sxm-80gb"},
			Interconnect: "nvlink"}, SimLoad: "compute", Command: dump("sleep 3")}),
		"mig":       submit("mig", api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, Sharing: gpufleet.Sharing{Kind: gpufleet.MIG, Profile: "1g.18gb"}}}),
		"timeslice": submit("timeslice", api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"l4"}, Sharing: gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: 0.5}}, SimLoad: "memory"}),
		// Rank 0 ends 2 s after rank 1: the attempt runs until both have.
		"gang": submit("gang", api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4, Nodes: 2, GPUModels: []string{"h100-sxm-80gb"}},
			Command: dump(`if [ "$GPUFLEET_NODE_RANK" = 0 ]; then sleep 2; fi; touch ` + out + `/$GPUFLEET_JOB_ID.$GPUFLEET_NODE_RANK.done`)}),
		"model": submit("model", api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"h200-sxm-141gb"}},
			Model: &api.ModelRequest{Name: "llama-2-7b", Precision: "bf16"}}),
		"fails": submit("fails", api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"l4"}}, Command: []string{"sh", "-c", "exit 3"}}),
	}

	// While the NVLink job runs, its GPUs carry its team in the metrics.
	nv := waitJob(t, member, jobs["nvlink"], 30*time.Second, gpufleet.JobRunning, gpufleet.JobSucceeded)
	if a := nv.Attempts[len(nv.Attempts)-1]; len(a.GPUs) > 0 {
		url := agents[a.Node].metricsURL
		eventually(t, 10*time.Second, "team label in "+a.Node+"'s metrics", func() error {
			body, err := scrape(ctx, url)
			if err != nil {
				return err
			}
			want := fmt.Sprintf(`gpufleet_gpu_allocated_ratio{gpu="%d",job="%s",model="h100-sxm-80gb",node="%s",priority="%s",team="team-a",uuid="%s"} 1`,
				gpuOf[a.GPUs[0]].Index, nv.ID, a.Node, nv.Priority, a.GPUs[0])
			if !strings.Contains(body, want) {
				return fmt.Errorf("no %s", want)
			}
			if !strings.Contains(body, `DCGM_FI_DEV_GPU_UTIL{`) || !strings.Contains(body, `gpufleet_gpu_sm_active_ratio{`) {
				return fmt.Errorf("dcgm or GPM series missing")
			}
			return nil
		})
	}

	for name, id := range jobs {
		want := gpufleet.JobSucceeded
		if name == "fails" {
			want = gpufleet.JobFailed
		}
		j := waitJob(t, member, id, 60*time.Second, gpufleet.JobSucceeded, gpufleet.JobFailed, gpufleet.JobCancelled)
		if j.State != want {
			t.Errorf("job %s: %s, want %s (%+v)", name, j.State, want, j.Attempts)
			continue
		}
		a := j.Attempts[len(j.Attempts)-1]
		if a.ExitCode == nil {
			t.Errorf("job %s: no exit code", name)
		} else if want := map[bool]int{true: 3, false: 0}[name == "fails"]; *a.ExitCode != want {
			t.Errorf("job %s: exit code %d, want %d", name, *a.ExitCode, want)
		}
		if name == "fails" {
			continue
		}
		if a.GPUSeconds <= 0 {
			t.Errorf("job %s: gpu_seconds %v", name, a.GPUSeconds)
		}
		for rank, n := range a.Nodes {
			env, err := readEnv(filepath.Join(out, fmt.Sprintf("%s.%d.env", id, rank)))
			if err != nil {
				t.Errorf("job %s rank %d: %v", name, rank, err)
				continue
			}
			if got, want := env["CUDA_VISIBLE_DEVICES"], strings.Join(n.GPUs, ","); got != want {
				t.Errorf("job %s rank %d: CUDA_VISIBLE_DEVICES %q, want its GPUs %q", name, rank, got, want)
			}
			if env["NVIDIA_VISIBLE_DEVICES"] != env["CUDA_VISIBLE_DEVICES"] || env["GPUFLEET_ATTEMPT_ID"] != a.ID ||
				env["GPUFLEET_JOB_ID"] != id || env["GPUFLEET_NNODES"] != fmt.Sprint(len(a.Nodes)) {
				t.Errorf("job %s rank %d: env %v", name, rank, env)
			}
			if os.Geteuid() == 0 && !strings.HasPrefix(env["USER"], "uid-19000") {
				t.Errorf("job %s: ran as %q, want its team's uid of the agent's range (the agent is root)", name, env["USER"])
			}
			if _, leaked := env["GPUFLEET_JOIN_TOKEN"]; leaked {
				t.Errorf("job %s sees the agent's environment", name)
			}
			for _, g := range n.GPUs {
				if nodeOf[g] != n.Name {
					t.Errorf("job %s: gpu %s is not on node %s", name, g, n.Name)
				}
			}
		}
		first := a.Nodes[0]
		switch name {
		case "nvlink":
			if len(first.GPUs) != 4 {
				t.Errorf("nvlink: %d GPUs", len(first.GPUs))
			}
			for _, g := range first.GPUs {
				if gpuOf[g].Model != "h100-sxm-80gb" || gpuOf[g].NVLinkDomain == "" || gpuOf[g].NVLinkDomain != gpuOf[first.GPUs[0]].NVLinkDomain {
					t.Errorf("nvlink: gpu %s %+v not in one NVLink domain", g, gpuOf[g])
				}
			}
		case "mig":
			if len(first.GPUs) != 1 || !strings.HasPrefix(first.GPUs[0], "MIG-") || gpuOf[first.GPUs[0]].Model != "h200-sxm-141gb" {
				t.Errorf("mig: placed on %v", first.GPUs)
			}
		case "timeslice":
			if gpuOf[first.GPUs[0]].Model != "l4" || a.Fraction != 0.5 {
				t.Errorf("timeslice: %v fraction %v", first.GPUs, a.Fraction)
			}
		case "gang":
			if len(a.Nodes) != 2 || a.Nodes[0].Name == a.Nodes[1].Name {
				t.Errorf("gang: nodes %+v", a.Nodes)
			}
			env1, _ := readEnv(filepath.Join(out, id+".1.env"))
			if env1["MASTER_ADDR"] != a.Nodes[0].Name || env1["MASTER_PORT"] == "" || env1["GPUFLEET_NODE_RANK"] != "1" {
				t.Errorf("gang rank 1 rendezvous: %v", env1)
			}
			for rank := range 2 {
				if _, err := os.Stat(filepath.Join(out, fmt.Sprintf("%s.%d.done", id, rank))); err != nil {
					t.Errorf("gang rank %d did not finish (the attempt ended with the other rank?): %v", rank, err)
				}
			}
		case "model":
			if gpuOf[first.GPUs[0]].Model != "h200-sxm-141gb" || j.Plan == nil {
				t.Errorf("model: %v plan %v", first.GPUs, j.Plan)
			}
		}
		var log strings.Builder
		if err := member.Logs(ctx, id, api.LogQuery{}, &log); err != nil || !strings.Contains(log.String(), "hello from "+id) {
			t.Errorf("job %s: logs %q %v", name, log.String(), err)
		}
	}
	eventually(t, 10*time.Second, "usage shows team-a", func() error {
		rep, err := member.Usage(ctx, api.UsageQuery{})
		if err != nil {
			return err
		}
		for _, u := range rep.Teams {
			if u.Team == "team-a" && u.GPUHours > 0 && u.EnergyJoules > 0 && u.EffectiveGPUHours > 0 {
				return nil
			}
		}
		return fmt.Errorf("usage %+v", rep.Teams)
	})
}

// TestAgentRestartReadoptsAndFences kills an agent while its attempt runs
// and starts it again: the attempt is re-adopted and finishes. Then the
// server goes away: the agent fences itself, stops the attempt, and
// reports it stopped ("fenced") once the server is back.
func TestAgentRestartReadoptsAndFences(t *testing.T) {
	// A fixed port: the agent finds the restarted server at the same URL.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := startServer(t, t.TempDir(), nil, "--listen", addr)
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	ag := startAgent(t, p, f.admin, "n1", "h100-sxm-80gb:2", "--fence-after", "2s")
	defer func() {
		if t.Failed() {
			ag.dumpLog(t)
		}
	}()
	// Submit refuses an empty fleet: wait for the node before the job.
	waitNode(t, f.admin, "n1", 20*time.Second, "ready", readyAndHealthy)
	member := f.members["team-a"]
	out := outDir(t)
	flag := filepath.Join(out, "go")
	r, err := member.SubmitJob(ctx, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1},
		Command: []string{"sh", "-c", "echo started; while [ ! -e " + flag + " ]; do sleep 0.1; done; echo done"}})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, member, r.ID, 20*time.Second, gpufleet.JobRunning)
	ag.stop(syscall.SIGKILL) // as systemd's KillMode=process would leave the attempt
	ag.start()
	os.WriteFile(flag, nil, 0o644)
	j := waitJob(t, member, r.ID, 20*time.Second, gpufleet.JobSucceeded, gpufleet.JobFailed)
	if j.State != gpufleet.JobSucceeded {
		t.Fatalf("re-adopted job: %s %+v", j.State, j.Attempts)
	}
	if !strings.Contains(string(must(os.ReadFile(ag.logPath))), "re-adopting attempt") {
		t.Error("the agent did not say it re-adopted the attempt")
	}

	// Fencing.
	r2, err := member.SubmitJob(ctx, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Grace: gpufleet.Duration(time.Second),
		Command: []string{"sh", "-c", "sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, member, r2.ID, 20*time.Second, gpufleet.JobRunning)
	attempt := j.Attempts[len(j.Attempts)-1].ID
	p.kill()
	stateFile := filepath.Join(ag.dataDir, "state.json")
	eventually(t, 15*time.Second, "the agent fences its attempt", func() error {
		data, err := os.ReadFile(stateFile)
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), `"reason_code": "fenced"`) || !strings.Contains(string(data), `"state": "stopped"`) {
			return fmt.Errorf("state.json: %s", data)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(ag.dataDir, "attempts", attempt, "status.json")); err != nil {
		t.Errorf("fenced attempt has no exit status: %v", err)
	}
	p.start()
	j = waitJob(t, f.admin, r2.ID, 30*time.Second, gpufleet.JobQueued, gpufleet.JobScheduled, gpufleet.JobRunning, gpufleet.JobFailed,
		gpufleet.JobCancelled, gpufleet.JobSucceeded)
	eventually(t, 20*time.Second, "the fenced attempt is reported", func() error {
		j, err := f.admin.Job(ctx, r2.ID)
		if err != nil {
			return err
		}
		for _, a := range j.Attempts {
			if a.ID == attempt && a.State.Terminal() {
				if a.State == gpufleet.AttemptStopped && a.ReasonCode != "fenced" {
					return fmt.Errorf("attempt %s reason_code %q", a.ID, a.ReasonCode)
				}
				return nil
			}
		}
		return fmt.Errorf("attempt %s not terminal: %+v", attempt, j.Attempts)
	})
	member.CancelJob(ctx, r2.ID)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestAgentRenewsItsCredential runs a server whose node credentials live 3s
// and an agent past several lifetimes: it renews each time with the
// credential alone (it registers once), and the node never goes down.
func TestAgentRenewsItsCredential(t *testing.T) {
	p := startServer(t, t.TempDir(), nil, "--credential-ttl", "3s")
	f := setupTeams(t, p, "team-a")
	ag := startAgent(t, p, f.admin, "n1", "l4:1")
	defer func() {
		if t.Failed() {
			ag.dumpLog(t)
		}
	}()
	eventually(t, 20*time.Second, "three renewals", func() error {
		log, _ := os.ReadFile(ag.logPath)
		if n := strings.Count(string(log), "renewed the node credential"); n < 3 {
			return fmt.Errorf("%d renewals so far", n)
		}
		return nil
	})
	log, _ := os.ReadFile(ag.logPath)
	if n := strings.Count(string(log), "msg=registered"); n != 1 {
		t.Errorf("the agent registered %d times; renewal should not need the join token", n)
	}
	n, err := f.admin.Node(t.Context(), "n1")
	if err != nil || n.State != gpufleet.NodeReady || n.HeartbeatAgeS == nil || *n.HeartbeatAgeS > 1 {
		t.Errorf("node after renewals: %+v %v", n, err)
	}
}

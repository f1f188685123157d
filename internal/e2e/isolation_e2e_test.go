package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/testimage"
)

// The tests of this file run jobs as a team would on a shared node, with
// each runtime this machine has (docs/ISOLATION.md#on-the-node): the
// process runtime needs root (a uid per attempt, namespaces, a device
// cgroup), podman needs podman and runc, and images are built here from
// a static busybox (no registry is reachable).

// runtimes lists the runtimes the tests can use here; under CI=true a
// missing one fails instead of skipping (scripts/test installs them).
func runtimes(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: isolation is set up by a root agent")
	}
	out := []string{"process"}
	_, perr := exec.LookPath("podman")
	_, rerr := exec.LookPath("runc")
	if perr == nil && rerr == nil {
		out = append(out, "podman", "podman-api")
	} else if os.Getenv("CI") == "true" {
		t.Fatalf("podman or runc missing (scripts/test installs them): %v %v", perr, rerr)
	}
	if _, err := exec.LookPath("docker"); err == nil && exec.Command("docker", "version", "--format", "{{.Server.Version}}").Run() == nil {
		out = append(out, "docker")
	}
	return out
}

// launchOn is how the tests' jobs run on runtime rt: as processes, or in
// the test image (built here, never pulled).
func launchOn(t *testing.T, rt string) gpufleet.Launch {
	t.Helper()
	if rt == "process" {
		return gpufleet.Launch{}
	}
	buildImage(t, strings.TrimSuffix(rt, "-api"))
	return gpufleet.Launch{Image: testImage, ImagePullPolicy: gpufleet.PullNever}
}

// podmanService runs `podman system service` on a socket of its own for
// the test and returns the socket's path.
func podmanService(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "podman.sock")
	cmd := exec.Command("podman", "--runtime", "runc", "system", "service", "--time=0", "unix://"+sock)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	eventually(t, 10*time.Second, "podman service listening", func() error {
		if _, err := os.Stat(sock); err != nil {
			return fmt.Errorf("%v: %s", err, out.String())
		}
		return nil
	})
	return sock
}

// containerRuntimes are the runtimes of runtimes that run images; the
// test skips when there is none (and fails under CI=true, as runtimes).
func containerRuntimes(t *testing.T) []string {
	t.Helper()
	rts := runtimes(t)[1:]
	if len(rts) == 0 {
		t.Skip("no container engine here")
	}
	return rts
}

// testImage is the busybox image the tests import (no registry here).
const testImage = testimage.Ref

func buildImage(t *testing.T, engine string) {
	t.Helper()
	if err := testimage.Import(engine); err != nil {
		t.Fatal(err)
	}
}

// isolatedFleet is a server with teams a and b and one agent of 4
// simulated L4s with the given runtime: process, podman, docker, or
// podman-api (podman's Docker-compatible API on a socket of
// `podman system service`, as the agent uses a mounted engine socket on
// Kubernetes).
func isolatedFleet(t *testing.T, runtime string) (fleet, *agentProc) {
	t.Helper()
	p := startServer(t, t.TempDir(), nil)
	f := setupTeams(t, p, "team-a", "team-b")
	args := []string{"--runtime", runtime}
	if runtime == "podman-api" {
		args = []string{"--runtime", "podman", "--engine-socket", podmanService(t)}
	}
	var a *agentProc
	if runtime != "process" {
		// Once the agent is gone (cleanups run last first), nothing is left
		// in the engine: the containers it made are removed.
		engine := strings.TrimSuffix(runtime, "-api")
		t.Cleanup(func() {
			if a == nil {
				return
			}
			out, _ := exec.Command(engine, "ps", "-aq", "--filter", "label=gpufleet.agent="+a.dataDir).Output()
			if ids := strings.Fields(string(out)); len(ids) > 0 {
				exec.Command(engine, append([]string{"rm", "-f"}, ids...)...).Run()
			}
		})
	}
	a = startAgent(t, p, f.admin, "n1", "l4:4", args...)
	t.Cleanup(func() {
		if t.Failed() {
			a.dumpLog(t)
		}
	})
	eventually(t, 20*time.Second, "node ready", func() error {
		n, err := f.admin.Node(t.Context(), "n1")
		if err != nil {
			return err
		}
		if n.State != gpufleet.NodeReady {
			return fmt.Errorf("node %s", n.State)
		}
		if n.Labels[gpufleet.JobIsolationLabel] != "hard" {
			return fmt.Errorf("job-isolation %q, want hard", n.Labels[gpufleet.JobIsolationLabel])
		}
		return nil
	})
	return f, a
}

func jobLog(t *testing.T, c *api.Client, id string) string {
	t.Helper()
	var b bytes.Buffer
	_ = c.Logs(t.Context(), id, api.LogQuery{}, &b)
	return b.String()
}

// TestCrossTeamAttackFails is the attack of issue #34, on every runtime
// the machine has: team-b's job holds a secret in its environment; team-a's
// job looks for it through /proc, kills every process it can see that is
// not its own, and opens every GPU device node of the node. Nothing of b's
// reaches a's log, b's job succeeds, and a opens only its own GPU.
func TestCrossTeamAttackFails(t *testing.T) {
	for _, rt := range runtimes(t) {
		t.Run(rt, func(t *testing.T) {
			f, agent := isolatedFleet(t, rt)
			ctx := t.Context()
			launch := launchOn(t, rt)
			victim, err := f.members["team-b"].SubmitJob(ctx, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Launch: launch,
				Env:     map[string]string{"SECRET": "s3cr3t-of-team-b"},
				Command: []string{"sh", "-c", "echo b-started; sleep 6; echo b-done"}})
			if err != nil {
				t.Fatal(err)
			}
			vj := waitJob(t, f.members["team-b"], victim.ID, 30*time.Second, gpufleet.JobRunning)
			eventually(t, 10*time.Second, "victim started", func() error {
				if !strings.Contains(jobLog(t, f.members["team-b"], victim.ID), "b-started") {
					return fmt.Errorf("not yet")
				}
				return nil
			})
			// Its supervisor's pid on the host, which the attack also tries.
			var hostPID string
			if pr, err := os.ReadFile(filepath.Join(agent.dataDir, "attempts", vj.Attempts[0].ID, "pid.json")); err == nil {
				if m := regexp.MustCompile(`"pid": (\d+)`).FindSubmatch(pr); m != nil {
					hostPID = string(m[1])
				}
			}
			devs := filepath.Join(agent.dataDir, "dev")
			attack := `for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ 2>/dev/null | grep -q SECRET && echo "LEAK from $p: $(tr '\0' '\n' < $p/environ | grep SECRET)"; done
for p in /proc/[0-9]*; do pid=${p#/proc/}; [ "$pid" = "$$" ] || [ "$pid" = 1 ] && continue; kill -9 $pid 2>/dev/null && echo "killed $pid"; done
kill -9 ` + hostPID + ` 2>/dev/null && echo "killed host pid ` + hostPID + `"
cat /proc/` + hostPID + `/environ 2>/dev/null | tr '\0' '\n' | grep SECRET && echo LEAK-by-host-pid
for d in ` + devs + `/nvidia[0-9] /dev/nvidia[0-9]; do [ -e $d ] || continue; if cat $d >/dev/null 2>/tmp/e; then echo "opened $d"; else echo "$d: $(cat /tmp/e)"; fi; done
echo attack-done`
			attacker, err := f.members["team-a"].SubmitJob(ctx, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Launch: launch,
				Command: []string{"sh", "-c", attack}})
			if err != nil {
				t.Fatal(err)
			}
			aj := waitJob(t, f.members["team-a"], attacker.ID, 30*time.Second, gpufleet.JobSucceeded, gpufleet.JobFailed)
			alog := jobLog(t, f.members["team-a"], attacker.ID)
			t.Logf("attacker's log (%s):\n%s", aj.State, alog)
			if !strings.Contains(alog, "attack-done") {
				t.Fatalf("the attack did not run to its end")
			}
			if strings.Contains(alog, "s3cr3t") || strings.Contains(alog, "LEAK") {
				t.Errorf("team-a read team-b's secret")
			}
			vj = waitJob(t, f.members["team-b"], victim.ID, 30*time.Second, gpufleet.JobSucceeded, gpufleet.JobFailed)
			if vj.State != gpufleet.JobSucceeded || !strings.Contains(jobLog(t, f.members["team-b"], victim.ID), "b-done") {
				t.Errorf("team-b's job %s (attempts %+v), want it to succeed untouched", vj.State, vj.Attempts)
			}
			// The attacker's own GPU opens (no driver: ENXIO); the others are
			// refused (process: the device cgroup) or absent (a container
			// has only its own).
			opened := regexp.MustCompile(`(?m)^\S*nvidia\d: .*No such device or address`).FindAllString(alog, -1)
			refused := regexp.MustCompile(`(?m)^\S*nvidia\d: .*Operation not permitted`).FindAllString(alog, -1)
			switch rt {
			case "process":
				if len(opened) != 1 || len(refused) != 3 {
					t.Errorf("process: %d GPU nodes reached the driver (want 1, its own), %d refused (want 3)", len(opened), len(refused))
				}
			default:
				if len(opened) != 1 || len(refused) != 0 {
					t.Errorf("%s: the container reached %d GPU nodes (want 1, its own) and saw %d others (want 0)", rt, len(opened), len(refused))
				}
			}
		})
	}
}

// TestContainerSeesOnlyItsGPUs is the container check of issue #34: a
// 2-GPU job in a local image lists only its 2 simulated GPUs (and the
// control nodes) in /dev, and runs in its own cgroup.
func TestContainerSeesOnlyItsGPUs(t *testing.T) {
	for _, rt := range containerRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			f, _ := isolatedFleet(t, rt)
			buildImage(t, strings.TrimSuffix(rt, "-api"))
			c := f.members["team-a"]
			sub, err := c.SubmitJob(t.Context(), api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 2}, Launch: gpufleet.Launch{Image: testImage},
				Command: []string{"sh", "-c", "ls /dev; cat /proc/self/cgroup; echo CUDA=$CUDA_VISIBLE_DEVICES"}})
			if err != nil {
				t.Fatal(err)
			}
			j := waitJob(t, c, sub.ID, 60*time.Second, gpufleet.JobSucceeded, gpufleet.JobFailed)
			log := jobLog(t, c, sub.ID)
			if j.State != gpufleet.JobSucceeded {
				t.Fatalf("job %s: %+v\n%s", j.State, j.Attempts, log)
			}
			gpus := regexp.MustCompile(`(?m)^nvidia\d+$`).FindAllString(log, -1)
			if len(gpus) != 2 {
				t.Errorf("/dev holds GPUs %v, want exactly its 2:\n%s", gpus, log)
			}
			if !strings.Contains(log, "nvidiactl") || !strings.Contains(log, "libpod") && rt == "podman" {
				t.Errorf("want the control node and a container cgroup:\n%s", log)
			}
			if _, cuda, _ := strings.Cut(log, "CUDA="); strings.Count(cuda, "GPU-") != 2 {
				t.Errorf("CUDA_VISIBLE_DEVICES names %d GPUs, want 2:\n%s", strings.Count(cuda, "GPU-"), log)
			}
		})
	}
}

// TestImagePullFailure: an image no registry serves fails its attempt with
// reason image_pull and a message naming the image; with no retries the
// job fails.
func TestImagePullFailure(t *testing.T) {
	for _, rt := range containerRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			f, _ := isolatedFleet(t, rt)
			c := f.members["team-a"]
			sub, err := c.SubmitJob(t.Context(), api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1},
				Launch: gpufleet.Launch{Image: "registry.invalid/nobody/nothing:1"}, Command: []string{"true"}})
			if err != nil {
				t.Fatal(err)
			}
			j := waitJob(t, c, sub.ID, 60*time.Second, gpufleet.JobFailed)
			a := j.Attempts[len(j.Attempts)-1]
			if a.ReasonCode != "image_pull" || !strings.Contains(a.Reason, "registry.invalid/nobody/nothing:1") {
				t.Errorf("attempt %s %q, want image_pull naming the image", a.ReasonCode, a.Reason)
			}
			// The pull is in the job's events, with its end and duration (a
			// pull this short ends before the agent sees it start).
			evs, err := f.admin.Events(t.Context(), api.EventQuery{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			var pulls []string
			for _, e := range evs.Events {
				if e.Kind == api.EventImagePull && e.Object == sub.ID {
					pulls = append(pulls, e.Detail)
				}
			}
			if len(pulls) == 0 || !strings.Contains(pulls[len(pulls)-1], "image pull failed after") {
				t.Errorf("image pull events %q, want its failure", pulls)
			}
		})
	}
}

// TestStopSignals: a drain stops a job that traps only SIGTERM with
// SIGTERM first, and it exits 0 within its grace; a job that asks for
// SIGUSR1 gets it first, then SIGTERM when its grace is over.
func TestStopSignals(t *testing.T) {
	for _, rt := range runtimes(t) {
		t.Run(rt, func(t *testing.T) {
			f, _ := isolatedFleet(t, rt)
			ctx := t.Context()
			launch := launchOn(t, rt)
			c := f.members["team-a"]
			termOnly := `trap 'echo got SIGTERM; exit 0' TERM; echo ready; while :; do sleep 0.2; done`
			usr1 := `trap 'echo got SIGUSR1' USR1; trap 'echo got SIGTERM; exit 0' TERM; echo ready; while :; do sleep 0.2; done`
			grace := gpufleet.Duration(10 * time.Second)
			j1, err := c.SubmitJob(ctx, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Launch: launch, Grace: grace,
				Command: []string{"sh", "-c", termOnly}})
			if err != nil {
				t.Fatal(err)
			}
			l2 := launch
			l2.StopSignal = "SIGUSR1"
			j2, err := c.SubmitJob(ctx, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Launch: l2, Grace: gpufleet.Duration(2 * time.Second),
				Command: []string{"sh", "-c", usr1}})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{j1.ID, j2.ID} {
				eventually(t, 30*time.Second, id+" ready", func() error {
					if !strings.Contains(jobLog(t, c, id), "ready") {
						return fmt.Errorf("not yet")
					}
					return nil
				})
			}
			start := time.Now()
			if _, err := f.admin.NodeAction(ctx, "n1", api.Drain); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{j1.ID, j2.ID} {
				eventually(t, 20*time.Second, id+" stopped", func() error {
					j, err := c.Job(ctx, id)
					if err != nil {
						return err
					}
					if len(j.Attempts) == 0 || !j.Attempts[0].State.Terminal() {
						return fmt.Errorf("attempt not ended")
					}
					return nil
				})
			}
			j, _ := c.Job(ctx, j1.ID)
			a := j.Attempts[0]
			log1 := jobLog(t, c, j1.ID)
			if a.ExitCode == nil || *a.ExitCode != 0 || !strings.Contains(log1, "got SIGTERM") {
				t.Errorf("SIGTERM-only job: attempt %+v, log %q: want SIGTERM logged and exit 0", a, log1)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("SIGTERM-only job stopped after %s, beyond its 10s grace", d)
			}
			log2 := jobLog(t, c, j2.ID)
			i1, i2 := strings.Index(log2, "got SIGUSR1"), strings.Index(log2, "got SIGTERM")
			if i1 < 0 || i2 < i1 {
				t.Errorf("SIGUSR1 job's log %q: want SIGUSR1 first, then SIGTERM", log2)
			}
		})
	}
}

// TestLostAgentsContainersAreRemoved: when an agent and its attempts'
// supervisors die together (an agent pod deleted on Kubernetes), the
// containers they ran go on in the engine; the next agent on the node
// finds them, owned by no live attempt, and removes them before a new
// attempt of the job can start elsewhere.
func TestLostAgentsContainersAreRemoved(t *testing.T) {
	for _, rt := range containerRuntimes(t) {
		t.Run(rt, func(t *testing.T) {
			f, agent := isolatedFleet(t, rt)
			buildImage(t, strings.TrimSuffix(rt, "-api"))
			c := f.members["team-a"]
			sub, err := c.SubmitJob(t.Context(), api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1},
				Launch: gpufleet.Launch{Image: testImage}, Command: []string{"sh", "-c", "echo up; sleep 600"}})
			if err != nil {
				t.Fatal(err)
			}
			j := waitJob(t, c, sub.ID, 30*time.Second, gpufleet.JobRunning)
			name := "gpufleet-" + j.Attempts[0].ID
			running := func() bool {
				out, _ := exec.Command("podman", "ps", "--filter", "name=^"+name+"$", "--format", "{{.Names}}").Output()
				return strings.TrimSpace(string(out)) == name
			}
			eventually(t, 20*time.Second, "container running", func() error {
				if !running() {
					return fmt.Errorf("%s not running", name)
				}
				return nil
			})
			// The agent and the supervisor die at once.
			pr, err := os.ReadFile(filepath.Join(agent.dataDir, "attempts", j.Attempts[0].ID, "pid.json"))
			if err != nil {
				t.Fatal(err)
			}
			m := regexp.MustCompile(`"supervisor_pid": (\d+)`).FindSubmatch(pr)
			if m == nil {
				t.Fatalf("pid.json %s", pr)
			}
			agent.stop(syscall.SIGKILL)
			pid, _ := strconv.Atoi(string(m[1]))
			syscall.Kill(pid, syscall.SIGKILL)
			if !running() {
				t.Fatal("the container ended with its supervisor: nothing to test")
			}
			agent.start()
			eventually(t, 20*time.Second, "the lost container removed", func() error {
				if running() {
					return fmt.Errorf("%s still running", name)
				}
				return nil
			})
		})
	}
}

// TestDevRunsContainerJobs is the walkthrough of issue #34: `gpufleet dev
// --runtime podman`, then a 2-GPU job in an image built here lists only its
// 2 simulated GPUs in /dev, and its cgroup is the container's.
func TestDevRunsContainerJobs(t *testing.T) {
	rts := runtimes(t)
	if len(rts) < 2 || rts[1] != "podman" {
		t.Skip("no podman here")
	}
	buildImage(t, "podman")
	d := startDev(t, "--runtime", "podman", "--no-context")
	c := d.client(t, d.Teams["team-a"])
	var sub api.SubmitResponse
	eventually(t, 30*time.Second, "submit to the dev fleet", func() error {
		var err error
		sub, err = c.SubmitJob(t.Context(), api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 2, GPUModels: []string{"l4"}},
			Launch: gpufleet.Launch{Image: testImage}, Command: []string{"sh", "-c", "ls /dev; cat /proc/self/cgroup"}})
		return err
	})
	j := waitJob(t, c, sub.ID, 60*time.Second, gpufleet.JobSucceeded, gpufleet.JobFailed)
	log := jobLog(t, c, sub.ID)
	if j.State != gpufleet.JobSucceeded {
		t.Fatalf("job %s: %+v\n%s", j.State, j.Attempts, log)
	}
	if gpus := regexp.MustCompile(`(?m)^nvidia\d+$`).FindAllString(log, -1); len(gpus) != 2 || !strings.Contains(log, "libpod") {
		t.Errorf("/dev holds GPUs %v, want its 2, in a libpod cgroup:\n%s", gpus, log)
	}
}

// TestCancelDuringImagePull: a job cancelled while its node pulls its
// image (from a registry that never answers) stops at once, not when the
// pull gives up.
func TestCancelDuringImagePull(t *testing.T) {
	rts := containerRuntimes(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // accept and say nothing: the pull hangs
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	for _, rt := range rts {
		t.Run(rt, func(t *testing.T) {
			f, _ := isolatedFleet(t, rt)
			c := f.members["team-a"]
			sub, err := c.SubmitJob(t.Context(), api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1},
				Launch: gpufleet.Launch{Image: ln.Addr().String() + "/silent/image:1"}, Command: []string{"true"}})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, 20*time.Second, "the pull under way", func() error {
				evs, err := f.admin.Events(t.Context(), api.EventQuery{Limit: 1000})
				if err != nil {
					return err
				}
				for _, e := range evs.Events {
					if e.Object == sub.ID && e.Kind == api.EventImagePull && strings.Contains(e.Detail, "pulling image") {
						return nil
					}
				}
				return fmt.Errorf("no pull event yet")
			})
			start := time.Now()
			if _, err := c.CancelJob(t.Context(), sub.ID); err != nil {
				t.Fatal(err)
			}
			j := waitJob(t, c, sub.ID, 20*time.Second, gpufleet.JobCancelled)
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("cancelled after %s of a hung pull", d)
			}
			if a := j.Attempts[len(j.Attempts)-1]; a.State != gpufleet.AttemptStopped {
				t.Errorf("attempt %s (%s: %s), want stopped", a.State, a.ReasonCode, a.Reason)
			}
		})
	}
}

package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/agent/devcgroup"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/testimage"
)

// podmanService serves podman's API on a socket for the benchmark.
func podmanService(b *testing.B) string {
	b.Helper()
	sock := filepath.Join(b.TempDir(), "podman.sock")
	cmd := exec.Command("podman", "--runtime", "runc", "system", "service", "--time=0", "unix://"+sock)
	if err := cmd.Start(); err != nil {
		b.Skip(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for range 200 {
		if _, err := os.Stat(sock); err == nil {
			return sock
		}
		time.Sleep(25 * time.Millisecond)
	}
	b.Fatal("podman system service did not listen")
	return ""
}

// benchRunnerOn is a runner set up as a root agent runs attempts on this
// machine: each team's uid of a range, PID and mount namespaces under the
// test binary's init, the device cgroup the host has, and for podman the
// engine with the agent's default limits, through its API on socket when
// one is given.
func benchRunnerOn(b *testing.B, runtime Runtime, socket string) *Runner {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root: the isolation a root agent sets up")
	}
	b.Setenv("GPUFLEET_TEST_SUPERVISE", "1")
	data := b.TempDir()
	uids := UIDRange{First: 1_900_000_000, Last: 1_900_000_100}
	cfg := RunnerConfig{DataDir: data, Supervisor: []string{os.Args[0]}, Environ: os.Environ(), KillAfter: time.Second, BusyTimeout: time.Minute,
		UIDs: &uids, Isolate: ProbeNamespaces() == nil, Init: []string{os.Args[0], "agent", "init"}, DevRoot: "/dev"}
	if mode, _ := devcgroup.Supported("", DevicesV1Root); mode == devcgroup.ModeV1 {
		cfg.DeviceMode = mode
	}
	if runtime == RuntimePodman {
		e, err := DetectEngine(context.Background(), RuntimePodman, "", "")
		if err != nil {
			b.Skip(err)
		}
		if socket != "" {
			e.Socket = socket
			cfg.Attach = []string{os.Args[0], "agent", "attach"}
		}
		if err := testimage.Import("podman"); err != nil {
			b.Fatal(err)
		}
		cfg.Engine, cfg.Ulimits = &e, DefaultUlimits()
		// A run cut short leaves containers by the names these reuse.
		clean := func() {
			out, _ := exec.Command(e.Path, "ps", "-aq", "--filter", "label=gpufleet.job").Output()
			if ids := strings.Fields(string(out)); len(ids) > 0 {
				_ = exec.Command(e.Path, append([]string{"--runtime", e.OCIRuntime, "rm", "-f", "-t", "0"}, ids...)...).Run()
			}
		}
		clean()
		b.Cleanup(clean)
	}
	r := NewRunner(cfg, slogDiscard(), time.Now, nil)
	r.SetDevices(testDevices)
	return r
}

// startOne starts an attempt whose command prints "started" and returns
// how long until that line is in its log.
func startOne(b *testing.B, r *Runner, id string, image string, command string, fraction float64) time.Duration {
	b.Helper()
	off := 0
	as := api.Assignment{AttemptID: id, JobID: "j-" + id, Team: "team-a", GPUs: []string{"GPU-0"}, TeamUIDOffset: &off,
		Command: []string{"sh", "-c", command}, Fraction: fraction}
	if image != "" {
		as.Launch = gpufleet.Launch{Image: image, ImagePullPolicy: gpufleet.PullNever}
	}
	start := time.Now()
	r.Start(as)
	log := filepath.Join(r.attemptDir(id), logFileName)
	for time.Since(start) < 30*time.Second {
		r.Poll()
		if data, err := os.ReadFile(log); err == nil && bytes.Contains(data, []byte("started")) {
			return time.Since(start)
		}
		time.Sleep(2 * time.Millisecond)
	}
	data, _ := os.ReadFile(log)
	b.Fatalf("attempt %s did not start in 30s: %s", id, data)
	return 0
}

// waitEnded polls until the attempt is terminal and forgets it.
func waitEnded(r *Runner, id string) {
	for range 5000 {
		r.Poll()
		r.mu.Lock()
		a := r.attempts[id]
		done := a == nil || a.State.Terminal()
		if a != nil && done {
			delete(r.attempts, id)
		}
		r.mu.Unlock()
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkAttemptStart times an attempt from the agent's Start to its
// command's first line in its log, as a root agent runs it on this
// machine: process (its team's uid, PID and mount namespaces, device
// cgroup) against podman (runc, the image on the node), one attempt at a
// time, and reports p50 and p95 over b.N starts (docs/PERFORMANCE.md:
// -benchtime 50x).
func BenchmarkAttemptStart(b *testing.B) {
	for _, name := range []string{"process-bare", "process", "podman", "podman-api"} {
		b.Run(name, func(b *testing.B) {
			rt, socket := Runtime(name), ""
			if name == "process-bare" {
				rt = RuntimeProcess // as before issue 34: one uid, no namespaces, no device cgroup
			}
			if name == "podman-api" {
				rt = RuntimePodman
				if _, err := exec.LookPath("podman"); err != nil {
					b.Skip(err)
				}
				socket = podmanService(b)
			}
			r := benchRunnerOn(b, rt, socket)
			if name == "process-bare" {
				r.cfg.UIDs, r.cfg.Isolate, r.cfg.DeviceMode = nil, false, ""
			}
			image := ""
			if rt == RuntimePodman {
				image = testimage.Ref
			}
			var ds []time.Duration
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("a-%s-%d", name, i)
				ds = append(ds, startOne(b, r, id, image, "echo started", 1))
				b.StopTimer()
				waitEnded(r, id)
				b.StartTimer()
			}
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(ds[(len(ds)*95+99)/100-1].Microseconds())/1000, "p95-ms")
		})
	}
}

// BenchmarkEightContainers runs 8 container attempts at once and reports
// what they cost the node beside the containers themselves over 5 s: the
// agent (this process: its runner) and, per attempt, the supervisor with
// the engine's attached CLI, or with `gpufleet agent attach` on the API
// (RSS and CPU). podman's conmon, one per container, and its API service
// are the engine's and not counted.
func BenchmarkEightContainers(b *testing.B) {
	for _, name := range []string{"podman", "podman-api"} {
		b.Run(name, func(b *testing.B) {
			socket := ""
			if name == "podman-api" {
				socket = podmanService(b)
			}
			eightContainers(b, benchRunnerOn(b, RuntimePodman, socket))
		})
	}
}

func eightContainers(b *testing.B, r *Runner) {
	for b.Loop() {
		var ids []string
		for i := range 8 {
			id := fmt.Sprintf("a-eight-%d", i)
			ids = append(ids, id)
			startOne(b, r, id, testimage.Ref, "echo started; sleep 60", 0.125) // time slices of one GPU
		}
		selfCPU0, _ := cpuSeconds(os.Getpid())
		trees0 := map[string]float64{}
		for _, id := range ids {
			trees0[id] = treeCPU(r, id)
		}
		t0 := time.Now()
		deadline := t0.Add(5 * time.Second)
		for time.Now().Before(deadline) {
			r.Poll() // as the agent does, a few times a second
			time.Sleep(200 * time.Millisecond)
		}
		wall := time.Since(t0).Seconds()
		selfCPU1, _ := cpuSeconds(os.Getpid())
		var treeCPUSum, treeRSS float64
		for _, id := range ids {
			treeCPUSum += treeCPU(r, id) - trees0[id]
			treeRSS += treeRSSMB(r, id)
		}
		b.ReportMetric(100*(selfCPU1-selfCPU0)/wall, "agent-cpu-%")
		b.ReportMetric(rssMB(os.Getpid()), "agent-rss-MB")
		b.ReportMetric(100*treeCPUSum/wall/8, "per-attempt-cpu-%")
		b.ReportMetric(treeRSS/8, "per-attempt-rss-MB")
		b.StopTimer()
		for _, id := range ids {
			r.Stop(id, "bench over", "cancelled", 0)
		}
		for _, id := range ids {
			waitEnded(r, id)
		}
		b.StartTimer()
	}
}

// The supervisor's process tree outside the container: itself and the
// engine CLI it runs.
func supervisorTree(r *Runner, id string) []int {
	r.mu.Lock()
	a := r.attempts[id]
	r.mu.Unlock()
	if a == nil {
		return nil
	}
	out := []int{a.Supervisor}
	if a.PGID > 0 {
		out = append(out, a.PGID)
	}
	return out
}

func treeCPU(r *Runner, id string) float64 {
	var s float64
	for _, p := range supervisorTree(r, id) {
		c, _ := cpuSeconds(p)
		s += c
	}
	return s
}

func treeRSSMB(r *Runner, id string) float64 {
	var s float64
	for _, p := range supervisorTree(r, id) {
		s += rssMB(p)
	}
	return s
}

// cpuSeconds is a process's user and system CPU time (/proc/PID/stat).
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short stat")
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	tck, _ := exec.Command("getconf", "CLK_TCK").Output()
	hz, err := strconv.ParseFloat(strings.TrimSpace(string(tck)), 64)
	if err != nil || hz <= 0 {
		hz = 100
	}
	return (u + k) / hz, nil
}

// rssMB is a process's resident set (/proc/PID/status VmRSS) in MB.
func rssMB(pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

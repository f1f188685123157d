package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// netLink is a network namespace joined to the host by a veth pair with
// private addresses: host side HostIP on HostIf, namespace side NSIP.
type netLink struct {
	NS, HostIf, NSIf string
	HostIP, NSIP     string
}

// ipCmd runs ip(8) and fails the test with its output on error.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newNetLink creates a namespace and a veth pair with unique names and a
// random /30 in 10.231.0.0/16, removed when the test ends (deleting the
// namespace deletes the pair). It needs root and iproute2: without root it
// skips (CI runs as root); without ip it fails, since scripts/test
// installs it.
func newNetLink(t *testing.T) netLink {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root; CI runs the tests as root (scripts/test)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("ip (iproute2) is missing: run scripts/test, which installs it, or apt-get install iproute2: %v", err)
	}
	suffix := fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	base := 4 * rand.IntN(64)
	net3 := fmt.Sprintf("10.231.%d.", rand.IntN(256))
	l := netLink{NS: "gfp-" + suffix, HostIf: "gfh" + suffix, NSIf: "gfn" + suffix,
		HostIP: net3 + fmt.Sprint(base+1), NSIP: net3 + fmt.Sprint(base+2)}
	ipCmd(t, "netns", "add", l.NS)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", l.NS).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", l.NS, err, out)
		}
	})
	ipCmd(t, "link", "add", l.HostIf, "type", "veth", "peer", "name", l.NSIf, "netns", l.NS)
	t.Cleanup(func() { exec.Command("ip", "link", "del", l.HostIf).Run() }) // gone with the namespace, normally
	ipCmd(t, "addr", "add", l.HostIP+"/30", "dev", l.HostIf)
	ipCmd(t, "link", "set", l.HostIf, "up")
	ipCmd(t, "netns", "exec", l.NS, "ip", "addr", "add", l.NSIP+"/30", "dev", l.NSIf)
	ipCmd(t, "netns", "exec", l.NS, "ip", "link", "set", l.NSIf, "up")
	ipCmd(t, "netns", "exec", l.NS, "ip", "link", "set", "lo", "up")
	return l
}

// startAgentInNetns runs an agent inside namespace ns (ip netns exec runs
// it in place, so the process is the agent) against serverURL; its data
// directory is on the shared filesystem.
func startAgentInNetns(t *testing.T, ns, serverURL string, admin *api.Client, name, simGPUs string) *agentProc {
	t.Helper()
	jt, err := admin.CreateJoinToken(t.Context(), api.JoinTokenRequest{Node: name, TTL: gpufleet.Duration(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return startAgentInNetnsWithToken(t, ns, serverURL, jt.Token, name, simGPUs)
}

// startAgentInNetnsWithToken is startAgentInNetns with a given join token.
func startAgentInNetnsWithToken(t *testing.T, ns, serverURL, token, name, simGPUs string) *agentProc {
	t.Helper()
	dir := t.TempDir()
	a := &agentProc{t: t, name: name, dataDir: dir, logPath: filepath.Join(dir, "agent.log"), prog: "ip",
		args: append([]string{"netns", "exec", ns, binary(t)}, append(agentArgs(serverURL, token, name, dir, simGPUs), "--fence-grace", "1s")...)}
	a.start()
	reapAttempts(t, a)
	return a
}

// TestNetworkPartitionFences runs an agent in a network namespace of its
// own, places a job on it, and cuts its link for longer than heartbeat
// grace + fence + margin. The agent, alive but cut off, fences its attempt
// (the beats stop within the fence), the server declares the attempt lost
// only after grace + fence + margin and runs the job on the node in the
// host namespace. When the link comes back the agent reconnects, reports
// the attempt fenced, and the server keeps it lost; the history checker
// verifies the run.
func TestNetworkPartitionFences(t *testing.T) {
	l := newNetLink(t)
	port := freePort(t)
	// All addresses: the namespaced agent comes in over the veth, the rest
	// over loopback.
	p := startServer(t, t.TempDir(), nil, append(faultServerArgs, "--listen", "0.0.0.0:"+port)...)
	p.url = "http://127.0.0.1:" + port
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	admin, member := f.admin, f.members["team-a"]
	beats := outDir(t)
	const fence = 2 * time.Second

	cut := startAgentInNetns(t, l.NS, "http://"+l.HostIP+":"+port, admin, "part-ns", "h100-sxm-80gb:1")
	waitNode(t, admin, cut.name, 20*time.Second, "ready", readyAndHealthy)
	r, err := member.SubmitJob(ctx, api.SubmitRequest{Name: "partition", Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"h100-sxm-80gb"}},
		Command: beatCommand(beats), SimLoad: "compute", Grace: gpufleet.Duration(time.Second), Estimate: gpufleet.Duration(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancelQuietly(member, r.ID) })
	_, a := waitRunningAttempt(t, member, r.ID, beats, 30*time.Second)
	host := startFleetAgent(t, p, admin, "part-host", "h100-sxm-80gb:1")
	defer func() {
		if t.Failed() {
			cut.dumpLog(t)
			host.dumpLog(t)
		}
	}()
	waitNode(t, admin, host.name, 20*time.Second, "ready", readyAndHealthy)

	// Partition.
	hit := time.Now()
	ipCmd(t, "link", "set", l.HostIf, "down")
	restored := false
	restore := func() {
		if !restored {
			restored = true
			ipCmd(t, "link", "set", l.HostIf, "up")
		}
	}
	defer restore()
	eventually(t, fence+5*time.Second, "the cut-off agent fences itself", func() error {
		if !agentLogHas(cut, "self-fencing") && !agentLogHas(cut, "attempt="+a.ID, "reason_code=fenced") {
			return fmt.Errorf("no self-fencing in the agent's log")
		}
		return nil
	})
	fenced := time.Since(hit)
	select {
	case <-cut.exited:
		t.Fatal("the agent exited during the partition")
	default:
	}
	eventually(t, 5*time.Second, "the fenced attempt's process stops", func() error {
		last := lastBeat(t, beats, r.ID, a.ID)
		if time.Since(last) < 3*beatEvery {
			return fmt.Errorf("attempt %s still beating (last %s)", a.ID, stamp(last))
		}
		return nil
	})
	if last := lastBeat(t, beats, r.ID, a.ID); last.Sub(hit) > fence+2500*time.Millisecond {
		t.Errorf("attempt %s beat %s after the link was cut; the fence is %s", a.ID, last.Sub(hit), fence)
	}

	j, b := waitRunningAttempt(t, member, r.ID, beats, lostAfter+20*time.Second, a.ID)
	if old := attemptByID(j, a.ID); old.State != gpufleet.AttemptLost || old.ReasonCode != "node_lost" {
		t.Errorf("attempt %s: %s (%s: %s), want lost with reason_code node_lost", a.ID, old.State, old.ReasonCode, old.Reason)
	}
	if b.Node != host.name {
		t.Errorf("the job moved to %s, want %s", b.Node, host.name)
	}
	if b.StartedAt == nil || b.StartedAt.Sub(hit) < lostAfter-time.Second {
		t.Errorf("the job was placed again %v after the cut, before grace + fence + margin (%s)", b.StartedAt, lostAfter)
	}
	bs, _ := readBeats(beats, r.ID)
	moved := bs[b.ID].First.Sub(hit)

	// Heal: the agent reconnects (after its backoff), reports the attempt
	// fenced; the server keeps it lost.
	healed := time.Now()
	restore()
	waitNode(t, admin, cut.name, 60*time.Second, "back and ready", func(n gpufleet.Node) error {
		if n.State != gpufleet.NodeReady || n.HeartbeatAgeS == nil || *n.HeartbeatAgeS > 1 {
			return fmt.Errorf("state %s (%s), heartbeat age %v", n.State, n.StateReason, n.HeartbeatAgeS)
		}
		return nil
	})
	reconnected := time.Since(healed)
	eventually(t, 10*time.Second, "the agent reports "+a.ID+" fenced", func() error {
		if !agentLogHas(cut, `msg="attempt ended"`, "attempt="+a.ID, "state=stopped", "reason_code=fenced") {
			return fmt.Errorf("no \"attempt ended ... reason_code=fenced\" for %s in the agent's log", a.ID)
		}
		return nil
	})
	time.Sleep(time.Second)
	if j, err = member.Job(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if old := attemptByID(j, a.ID); old.State != gpufleet.AttemptLost {
		t.Errorf("after the partition healed attempt %s is %s, want it to stay lost", a.ID, old.State)
	}
	if cur := attemptByID(j, b.ID); cur.State != gpufleet.AttemptRunning || len(j.Attempts) != 2 {
		t.Errorf("after the partition healed: %s, want %s still running and no other attempt", attemptStates(j), b.ID)
	}
	if last := lastBeat(t, beats, r.ID, a.ID); last.After(healed) {
		t.Errorf("attempt %s beat again at %s after the partition healed", a.ID, stamp(last))
	}
	cancelAndWait(t, member, r.ID)
	if rep := checkHistory(t, admin, beats, r.ID); len(rep.Beats[r.ID]) != 2 {
		t.Errorf("beats of %d attempts, want 2", len(rep.Beats[r.ID]))
	}
	t.Logf("partition: agent fenced after %s, job beating on %s after %s (lost after grace+fence+margin %s), reconnected %s after the link came back",
		fenced.Round(10*time.Millisecond), b.Node, moved.Round(10*time.Millisecond), lostAfter, reconnected.Round(10*time.Millisecond))
}

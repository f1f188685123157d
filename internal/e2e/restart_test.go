package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// restartServerArgs are the timeouts of the restart tests, as in the
// report that found a job running twice: heartbeat 1s, grace 3s, fence 5s.
var restartServerArgs = append([]string{"--heartbeat", "1s", "--heartbeat-grace", "3s", "--fence-after", "5s"}, faultServerArgs...)

const (
	restartFence     = 5 * time.Second
	restartLostAfter = 3*time.Second + restartFence + 10*time.Second // grace + fence + margin
)

// restartWithSpentToken joins an agent with a single-use join token, stops
// it and starts it again with the same, now spent, token: the restarted
// agent cannot register and runs on its stored credential.
func restartWithSpentToken(t *testing.T, start func(token string) *agentProc, admin *api.Client, name string) *agentProc {
	t.Helper()
	jt, err := admin.CreateJoinToken(t.Context(), api.JoinTokenRequest{Node: name})
	if err != nil {
		t.Fatal(err)
	}
	if !jt.SingleUse {
		t.Fatalf("join token for %s is not single-use", name)
	}
	a := start(jt.Token)
	waitNode(t, admin, name, 20*time.Second, "ready", readyAndHealthy)
	a.stop(syscall.SIGTERM)
	a.start()
	eventually(t, 30*time.Second, name+" runs on its stored credential", func() error { // the restart benches first: slow on a loaded machine
		if !agentLogHas(a, "registration failed; using the stored credential") {
			return fmt.Errorf("no fallback to the stored credential in the agent's log")
		}
		return nil
	})
	waitNode(t, admin, name, 20*time.Second, "ready after the restart", readyAndHealthy)
	return a
}

// placeOn runs a beating 1-GPU job on node on, with every other node
// cordoned while it is placed.
func placeOn(t *testing.T, admin, member *api.Client, beats, on string, others ...string) (string, gpufleet.Attempt) {
	t.Helper()
	ctx := t.Context()
	for _, n := range others {
		if _, err := admin.NodeAction(ctx, n, api.Cordon); err != nil {
			t.Fatal(err)
		}
	}
	r, err := member.SubmitJob(ctx, api.SubmitRequest{Name: "twice", Resources: gpufleet.Resources{GPUs: 1}, Command: beatCommand(beats),
		SimLoad: gpufleet.SimCompute, Grace: gpufleet.Duration(time.Second), Estimate: gpufleet.Duration(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancelQuietly(member, r.ID) })
	_, a := waitRunningAttempt(t, member, r.ID, beats, 30*time.Second)
	if a.Node != on {
		t.Fatalf("the job runs on %s, want %s", a.Node, on)
	}
	for _, n := range others {
		if _, err := admin.NodeAction(ctx, n, api.Uncordon); err != nil {
			t.Fatal(err)
		}
	}
	return r.ID, a
}

// checkMoved waits for the job to run again on another node and checks
// that the first attempt stopped within the fence of cut, the moment its
// node lost the server, and before the second started.
func checkMoved(t *testing.T, admin, member *api.Client, beats, job string, first gpufleet.Attempt, cut time.Time) {
	t.Helper()
	j, second := waitRunningAttempt(t, member, job, beats, restartLostAfter+20*time.Second, first.ID)
	if old := attemptByID(j, first.ID); old.State != gpufleet.AttemptLost {
		t.Errorf("attempt %s: %s (%s), want lost", first.ID, old.State, old.ReasonCode)
	}
	last := lastBeat(t, beats, job, first.ID)
	if late := last.Sub(cut); late > restartFence+2*time.Second {
		t.Errorf("attempt %s beat %s after its node lost the server; the fence is %s", first.ID, late.Round(10*time.Millisecond), restartFence)
	}
	bs, _ := readBeats(beats, job)
	if !last.Before(bs[second.ID].First) {
		t.Errorf("attempt %s beat at %s, after attempt %s began at %s: the job ran twice", first.ID, stamp(last), second.ID, stamp(bs[second.ID].First))
	}
	cancelAndWait(t, member, job)
	checkHistory(t, admin, beats, job)
}

// TestRestartedAgentFencesAfterKill is the report of a job run twice: an
// agent restarted with its spent single-use join token used to run with
// fence 0 and a 5s heartbeat, so after kill -9 its attempt ran on while
// the server started the job elsewhere. The agent now keeps the fence
// with its credential and learns it again from the server at every start.
func TestRestartedAgentFencesAfterKill(t *testing.T) {
	p := startServer(t, t.TempDir(), nil, restartServerArgs...)
	f := setupTeams(t, p, "team-a")
	admin, member := f.admin, f.members["team-a"]
	beats := outDir(t)
	n0 := restartWithSpentToken(t, func(tok string) *agentProc {
		a := startAgentWithToken(t, p.url, tok, "n0", "h100-sxm-80gb:1", "--fence-grace", "1s")
		reapAttempts(t, a)
		return a
	}, admin, "n0")
	n1 := startFleetAgent(t, p, admin, "n1", "h100-sxm-80gb:1")
	defer func() {
		if t.Failed() {
			n0.dumpLog(t)
			n1.dumpLog(t)
		}
	}()
	waitNode(t, admin, "n1", 20*time.Second, "ready", readyAndHealthy)
	job, first := placeOn(t, admin, member, beats, "n0", "n1")
	if !agentLogHas(n0, "timing from the stored credential", "fence_after=5s") {
		t.Errorf("the restarted agent did not restore its 5s fence")
	}
	cut := time.Now()
	n0.stop(syscall.SIGKILL)
	supervisorFenced(t, n0, first.ID, restartFence+5*time.Second)
	checkMoved(t, admin, member, beats, job, first, cut)
}

// TestRestartedAgentFencesInPartition is the same with a network
// partition instead of a kill: the restarted agent, alive but cut off,
// stops its attempt within the fence.
func TestRestartedAgentFencesInPartition(t *testing.T) {
	l := newNetLink(t)
	port := freePort(t)
	p := startServer(t, t.TempDir(), nil, append(restartServerArgs, "--listen", "0.0.0.0:"+port)...)
	p.url = "http://127.0.0.1:" + port
	f := setupTeams(t, p, "team-a")
	admin, member := f.admin, f.members["team-a"]
	beats := outDir(t)
	cutOff := restartWithSpentToken(t, func(tok string) *agentProc {
		return startAgentInNetnsWithToken(t, l.NS, "http://"+l.HostIP+":"+port, tok, "n0", "h100-sxm-80gb:1")
	}, admin, "n0")
	n1 := startFleetAgent(t, p, admin, "n1", "h100-sxm-80gb:1")
	defer func() {
		if t.Failed() {
			cutOff.dumpLog(t)
			n1.dumpLog(t)
		}
	}()
	waitNode(t, admin, "n1", 20*time.Second, "ready", readyAndHealthy)
	job, first := placeOn(t, admin, member, beats, "n0", "n1")
	cut := time.Now()
	ipCmd(t, "link", "set", l.HostIf, "down")
	defer ipCmd(t, "link", "set", l.HostIf, "up")
	checkMoved(t, admin, member, beats, job, first, cut)
}

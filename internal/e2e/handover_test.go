package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// devTimeouts are `gpufleet dev`'s: tick 500ms, heartbeat 1s, grace 3s,
// fence 5s, lease 3s (server.MinFence holds).
var devTimeouts = []string{"--tick", "500ms", "--heartbeat", "1s", "--heartbeat-grace", "3s", "--fence-after", "5s", "--lease-ttl", "3s"}

// stop sends sig and waits for the server to exit.
func (p *serverProc) stop(sig syscall.Signal) {
	if p.cmd.Process != nil {
		p.cmd.Process.Signal(sig)
	}
	<-p.exited
}

// TestServerRestartFencesNothing restarts a single server, with SIGTERM
// and with SIGKILL, under gpufleet dev's timeouts while a gang job and a
// single-node job run: the restarted server leads at once (its lease given
// up, or taken back by the same replica), the agents never go past their
// fence, and every job keeps its one attempt.
func TestServerRestartFencesNothing(t *testing.T) {
	port := freePort(t)
	p := startServer(t, t.TempDir(), nil, append(devTimeouts, "--listen", "127.0.0.1:"+port)...)
	f := setupTeams(t, p, "team-a")
	admin, member := f.admin, f.members["team-a"]
	beats := outDir(t)
	var agents []*agentProc
	for _, n := range []string{"n0", "n1", "n2"} {
		agents = append(agents, startFleetAgent(t, p, admin, n, "h100-sxm-80gb:2"))
	}
	defer func() {
		if t.Failed() {
			for _, a := range agents {
				a.dumpLog(t)
			}
		}
	}()
	for _, a := range agents {
		waitNode(t, admin, a.name, 20*time.Second, "ready", readyAndHealthy)
	}
	ctx := t.Context()
	var jobs []string
	for _, gpus := range []int{4, 2} { // a gang over two nodes, and one node's worth
		r, err := member.SubmitJob(ctx, api.SubmitRequest{Name: fmt.Sprintf("restart-%d", gpus), Resources: gpufleet.Resources{GPUs: gpus},
			Command: beatCommand(beats), SimLoad: gpufleet.SimCompute, Grace: gpufleet.Duration(time.Second), Estimate: gpufleet.Duration(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancelQuietly(member, r.ID) })
		jobs = append(jobs, r.ID)
	}
	first := map[string]string{}
	for _, id := range jobs {
		_, a := waitRunningAttempt(t, member, id, beats, 30*time.Second)
		first[id] = a.ID
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		p.stop(sig)
		began := time.Now()
		p.start()
		t.Logf("%s: the server listened again after %s", sig, time.Since(began).Round(time.Millisecond))
		// It leads well before its old lease (3s) would have expired.
		eventually(t, 10*time.Second, "the restarted server leads", func() error {
			ev, err := admin.Events(ctx, api.EventQuery{Limit: 1000})
			if err != nil {
				return err
			}
			for _, e := range ev.Events {
				if e.Kind == "lease.acquired" && e.At.After(began) {
					if took := e.At.Sub(began); took > 1500*time.Millisecond {
						t.Errorf("%s: the restarted server led after %s, not at once", sig, took.Round(time.Millisecond))
					}
					return nil
				}
			}
			return fmt.Errorf("no lease.acquired event since the restart")
		})
		// Past the fence, the attempts still run and beat.
		time.Sleep(5*time.Second + 2*time.Second)
		for _, id := range jobs {
			j, err := member.Job(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(j.Attempts) != 1 || j.Attempts[0].ID != first[id] || j.Attempts[0].State != gpufleet.AttemptRunning {
				t.Fatalf("after a %s restart job %s has attempts %s, want its one attempt %s running", sig, id, attemptStates(j), first[id])
			}
			b, err := readBeats(beats, id)
			if err != nil {
				t.Fatal(err)
			}
			if last := b[first[id]].Last; time.Since(last) > 2*time.Second {
				t.Fatalf("after a %s restart job %s last beat %s ago", sig, id, time.Since(last).Round(time.Millisecond))
			}
		}
		for _, a := range agents {
			if agentLogHas(a, "fenced") {
				t.Fatalf("after a %s restart agent %s fenced its attempts", sig, a.name)
			}
		}
	}
}

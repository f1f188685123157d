package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// freePort returns a loopback port that was free a moment ago, so that a
// restarted server comes back on the same address.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// crashAgent runs attempts for a short while and checks that the server
// never gives it a GPU that a running attempt already holds.
type crashAgent struct {
	*fakeAgent
	started map[string]time.Time
	holder  map[string]string // GPU -> attempt
	errs    []string
}

func (a *crashAgent) loop(ctx context.Context, runFor time.Duration) {
	for ctx.Err() == nil {
		resp, err := a.beat(ctx)
		if err == nil {
			a.mu.Lock()
			for _, s := range resp.Start {
				if _, seen := a.started[s.AttemptID]; seen {
					continue
				}
				a.started[s.AttemptID] = time.Now()
				for _, g := range s.GPUs {
					if h, busy := a.holder[g]; busy {
						a.errs = append(a.errs, fmt.Sprintf("GPU %s given to %s while %s holds it", g, s.AttemptID, h))
					}
					a.holder[g] = s.AttemptID
				}
			}
			for _, id := range resp.Unknown {
				a.runs[id] = gpufleet.AttemptStopped
			}
			for id, st := range a.runs {
				if st == gpufleet.AttemptRunning && time.Since(a.started[id]) > runFor {
					a.runs[id] = gpufleet.AttemptSucceeded
				}
				if st.Terminal() || a.runs[id].Terminal() {
					for g, h := range a.holder {
						if h == id {
							delete(a.holder, g)
						}
					}
				}
			}
			a.mu.Unlock()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServerCrashLosesNothing SIGKILLs the server at random instants, and
// inside transactions through failpoints, while 1,000 jobs are submitted
// and scheduled. Clients retry with their request ids. Afterwards every
// acknowledged job is present exactly once and no GPU was ever given to
// two attempts at once.
func TestServerCrashLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs real processes for about a minute")
	}
	const jobs = 1000
	dir := t.TempDir()
	port := freePort(t)
	env := []string{"GPUFLEET_TEST_FAILPOINTS=submit.before-commit=0.001,schedule.before-commit=0.01,attempt.before-commit=0.002"}
	// Set up on a server without failpoints (setup does not retry), then
	// restart it with them.
	p := startServer(t, dir, nil, "--listen", "127.0.0.1:"+port)
	f := setupTeams(t, p, "team-a", "team-b")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	var agents []*crashAgent
	for i := range 4 {
		a := &crashAgent{fakeAgent: registerAgent(t, p, f.admin, fmt.Sprintf("n%d", i), "h100-sxm-80gb", 8),
			started: map[string]time.Time{}, holder: map[string]string{}}
		agents = append(agents, a)
	}
	p.kill()
	p.env = env
	p.start()
	for _, a := range agents {
		go a.loop(ctx, 200*time.Millisecond)
	}

	// Keep the server alive: restart it whenever it dies, and kill it at
	// random moments while submissions are under way.
	var mu sync.Mutex
	restarts, kills := 0, 0
	stopKilling := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-p.exited:
				mu.Lock()
				restarts++
				mu.Unlock()
				p.args = []string{"--listen", "127.0.0.1:" + port}
				p.start()
			case <-time.After(time.Duration(200+rng.IntN(800)) * time.Millisecond):
				select {
				case <-stopKilling:
					return
				default:
				}
				mu.Lock()
				kills++
				mu.Unlock()
				p.kill()
			}
		}
	}()

	acked := make([]string, jobs)
	sem := make(chan struct{}, 16)
	var swg sync.WaitGroup
	for i := range jobs {
		swg.Add(1)
		sem <- struct{}{}
		go func() {
			defer swg.Done()
			defer func() { <-sem }()
			team := []string{"team-a", "team-b"}[i%2]
			req := api.SubmitRequest{RequestID: fmt.Sprintf("req-%d", i), Command: []string{"sleep", "1"},
				Resources: gpufleet.Resources{GPUs: 1 + i%4}, Estimate: gpufleet.Duration(time.Second)}
			for attempt := 0; ; attempt++ {
				resp, err := f.members[team].SubmitJob(ctx, req)
				if err == nil {
					acked[i] = resp.ID
					time.Sleep(100 * time.Millisecond) // spread submissions over several seconds of crashes
					return
				}
				var apiErr *api.Error
				if errors.As(err, &apiErr) && apiErr.Status < 500 {
					t.Errorf("submit %d rejected: %v", i, err)
					return
				}
				if attempt > 400 || ctx.Err() != nil {
					t.Errorf("submit %d never acknowledged: %v", i, err)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	began := time.Now()
	swg.Wait()
	// Keep crashing a while longer, while the queue is being scheduled.
	time.Sleep(max(0, 12*time.Second-time.Since(began)))
	close(stopKilling)
	wg.Wait()
	// Let the fleet drain the queue on a server that stays up: restart it
	// once more without failpoints.
	p.kill()
	p.env = nil
	p.start()
	eventually(t, 90*time.Second, "all jobs finished", func() error {
		list, err := f.admin.AllJobs(ctx, api.JobQuery{All: true})
		if err != nil {
			return err
		}
		open := 0
		for _, j := range list {
			if !j.State.Terminal() {
				open++
			}
		}
		if open > 0 {
			return fmt.Errorf("%d jobs not finished", open)
		}
		return nil
	})
	cancel()

	list, err := f.admin.AllJobs(t.Context(), api.JobQuery{All: true})
	if err != nil {
		t.Fatal(err)
	}
	byRequest := map[string][]gpufleet.Job{}
	for _, j := range list {
		byRequest[j.Team+"/"+j.RequestID] = append(byRequest[j.Team+"/"+j.RequestID], j)
	}
	for i, id := range acked {
		team := []string{"team-a", "team-b"}[i%2]
		got := byRequest[fmt.Sprintf("%s/req-%d", team, i)]
		switch {
		case id == "":
			// reported above
		case len(got) != 1:
			t.Errorf("request %d: %d jobs stored, want exactly 1", i, len(got))
		case got[0].ID != id:
			t.Errorf("request %d: acknowledged as %s, stored as %s", i, id, got[0].ID)
		case got[0].State != gpufleet.JobSucceeded:
			t.Errorf("job %s ended %s", id, got[0].State)
		}
	}
	if len(list) != jobs {
		t.Errorf("%d jobs stored, want %d", len(list), jobs)
	}
	for _, a := range agents {
		for _, e := range a.errs {
			t.Error(e)
		}
	}
	// The server's own record: no GPU in two overlapping attempts.
	type span struct {
		id         string
		start, end time.Time
	}
	byGPU := map[string][]span{}
	for _, j := range list {
		for _, at := range j.Attempts {
			if at.StartedAt == nil {
				continue
			}
			end := time.Now()
			if at.FinishedAt != nil {
				end = *at.FinishedAt
			}
			for _, n := range at.Nodes {
				for _, g := range n.GPUs {
					byGPU[g] = append(byGPU[g], span{at.ID, *at.StartedAt, end})
				}
			}
		}
	}
	for g, spans := range byGPU {
		for i := range spans {
			for k := i + 1; k < len(spans); k++ {
				a, b := spans[i], spans[k]
				if a.start.Before(b.end) && b.start.Before(a.end) {
					t.Errorf("GPU %s held by %s and %s at once", g, a.id, b.id)
				}
			}
		}
	}
	mu.Lock()
	t.Logf("%d jobs, %d kills from outside, %d restarts (the rest were failpoints)", jobs, kills, restarts)
	mu.Unlock()
	if restarts < 3 {
		t.Errorf("only %d restarts: the test did not exercise crashes", restarts)
	}
}

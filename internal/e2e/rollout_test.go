package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/rollout"
)

// TestRolloutSurvivesServerKill runs a rollout over three real agents
// with simulated L4s (the canary, then two waves of one) and kills the
// server (SIGKILL) once the canary is through: a new server on the same data resumes it to done, every
// node on the stack and back in service, each having run its update once
// (the agents' updates.json); a job submitted meanwhile runs. Then a stack
// the L4s cannot run halts at the canary with the other nodes untouched,
// and rollback restores the canary.
func TestRolloutSurvivesServerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes for about a minute")
	}
	dir := t.TempDir()
	port := freePort(t)
	p := startServer(t, dir, nil, "--listen", "127.0.0.1:"+port)
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	var agents []*agentProc
	for i := range 3 {
		agents = append(agents, startAgent(t, p, f.admin, fmt.Sprintf("l%d", i), "l4:1"))
	}
	eventually(t, 20*time.Second, "three ready nodes", func() error {
		ns, err := f.admin.Nodes(ctx)
		if err != nil || len(ns) != 3 {
			return fmt.Errorf("nodes %d, %v", len(ns), err)
		}
		return nil
	})
	if _, err := f.admin.CreateStack(ctx, api.CreateStackRequest{Stack: gpufleet.Stack{Name: "prod-555", Versions: map[string]string{"driver": "555.42.02", "cuda": "12.5"}}}); err != nil {
		t.Fatal(err)
	}
	bake := 3.0
	r, err := f.admin.StartRollout(ctx, api.RolloutRequest{Stack: "prod-555", GPUModel: "l4", Canary: 1, Waves: []float64{0.5, 1}, BakeS: &bake})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the canary through", func() error {
		got, err := f.admin.Rollout(ctx, r.ID)
		if err != nil || got.Nodes[0].Phase != rollout.Complete {
			return fmt.Errorf("canary %+v, %v", got.Nodes, err)
		}
		return nil
	})
	p.kill()
	p.start()
	job, err := f.members["team-a"].SubmitJob(ctx, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 1}, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the rollout done after the restart", func() error {
		got, err := f.admin.Rollout(ctx, r.ID)
		if err != nil || got.State != rollout.Done {
			return fmt.Errorf("rollout %s (%s) %+v, %v", got.State, got.Reason, got.Nodes, err)
		}
		return nil
	})
	waitJob(t, f.members["team-a"], job.ID, 30*time.Second, gpufleet.JobSucceeded)
	ns, err := f.admin.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.Versions["driver"] != "555.42.02" || n.State != gpufleet.NodeReady {
			t.Errorf("%s: %s on %s", n.Name, n.State, n.Versions["driver"])
		}
	}
	for _, a := range agents {
		data, err := os.ReadFile(filepath.Join(a.dataDir, "updates.json"))
		if err != nil || strings.Count(string(data), `"key"`) != 1 {
			t.Errorf("agent %s ran %s", a.name, data)
		}
	}
	steps := 0
	var since int64
	var err2 error
	for {
		page, err := f.admin.Events(ctx, api.EventQuery{Since: since, Limit: 500})
		if err != nil {
			err2 = err
			break
		}
		for _, e := range page.Events {
			if e.Kind == "rollout.step" && e.Object == r.ID {
				steps++
			}
		}
		if page.NextToken == "" {
			break
		}
		if since, err = strconv.ParseInt(page.NextToken, 10, 64); err != nil {
			err2 = err
			break
		}
	}
	err = err2
	if err != nil || steps < 3*5 { // each node: draining, updating, validating, baking, complete
		t.Errorf("%d rollout.step events, %v", steps, err)
	}

	if _, err := f.admin.CreateStack(ctx, api.CreateStackRequest{Stack: gpufleet.Stack{Name: "bad", Versions: map[string]string{"driver": "560.28.03", "cuda": "12.6", "cuda_toolkit": "11.7"}}, Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.StartRollout(ctx, api.RolloutRequest{Stack: "bad", GPUModel: "l4", Canary: 1, BakeS: &bake}); !errors.Is(err, gpufleet.ErrUnsatisfiable) {
		t.Fatalf("rollout start of CUDA toolkit 11.7 on Ada: %v, want refused before any drain", err)
	}
	bad, err := f.admin.StartRollout(ctx, api.RolloutRequest{Stack: "bad", GPUModel: "l4", Canary: 1, BakeS: &bake, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "halted at the canary", func() error {
		got, err := f.admin.Rollout(ctx, bad.ID)
		if err != nil || got.State != rollout.Halted || !strings.Contains(got.Reason, "node l0 failed a gate: validation: CUDA toolkit 11.7") {
			return fmt.Errorf("rollout %s (%s), %v", got.State, got.Reason, err)
		}
		return nil
	})
	ns, _ = f.admin.Nodes(ctx)
	for _, n := range ns {
		if n.Name != "l0" && (n.Versions["driver"] != "555.42.02" || n.State != gpufleet.NodeReady) {
			t.Errorf("%s touched by the halted rollout: %s on %s", n.Name, n.State, n.Versions["driver"])
		}
	}
	if _, err := f.admin.RolloutAction(ctx, bad.ID, "rollback"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "rolled back", func() error {
		got, err := f.admin.Rollout(ctx, bad.ID)
		n, nerr := f.admin.Node(ctx, "l0")
		if err != nil || nerr != nil || got.State != rollout.RolledBack || n.Versions["driver"] != "555.42.02" || n.Versions["cuda_toolkit"] != "" || n.State != gpufleet.NodeReady {
			return fmt.Errorf("rollout %s; l0 %s %v", got.State, n.State, n.Versions)
		}
		return nil
	})
}

// TestRolloutHaltsOnABadDriver: simulated agents told that a driver is bad
// (--sim-bad-driver) break on it after the update (a double-bit ECC error,
// XID 48); the canary fails its validation, the rollout halts, and the
// other node is untouched.
func TestRolloutHaltsOnABadDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	p := startServer(t, t.TempDir(), nil)
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	for i := range 2 {
		startAgent(t, p, f.admin, fmt.Sprintf("b%d", i), "l4:1", "--sim-bad-driver", "565.57.01")
	}
	eventually(t, 20*time.Second, "two nodes", func() error {
		ns, err := f.admin.Nodes(ctx)
		if err != nil || len(ns) != 2 {
			return fmt.Errorf("nodes %d, %v", len(ns), err)
		}
		return nil
	})
	if _, err := f.admin.CreateStack(ctx, api.CreateStackRequest{Stack: gpufleet.Stack{Name: "r565", Versions: map[string]string{"driver": "565.57.01", "cuda": "12.7"}}}); err != nil {
		t.Fatal(err)
	}
	bake := 3.0
	r, err := f.admin.StartRollout(ctx, api.RolloutRequest{Stack: "r565", GPUModel: "l4", Canary: 1, BakeS: &bake})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 40*time.Second, "halted at the canary", func() error {
		got, err := f.admin.Rollout(ctx, r.ID)
		if err != nil || got.State != rollout.Halted || !strings.Contains(got.Reason, "node b0 failed a gate") {
			return fmt.Errorf("rollout %s (%s) %+v, %v", got.State, got.Reason, got.Nodes, err)
		}
		return nil
	})
	n, err := f.admin.Node(ctx, "b1")
	if err != nil || n.Versions["driver"] == "565.57.01" || n.State != gpufleet.NodeReady {
		t.Errorf("b1 touched: %s on %v, %v", n.State, n.Versions["driver"], err)
	}
}

package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// TestPowerCapsOnSimulatedGPUs: a server with --power-caps on and a
// simulated agent: the node reports power-caps=true; once a running job
// is measured (the server's settle time, a minute) the agent caps its GPU
// at the charge (its memory-bound draw, 490 W, plus 10 %), which the
// agent's metrics show as the GPU's limit; when the job is cancelled the
// GPU goes back to its 700 W default. It takes over a minute: the settle
// time is at least one.
func TestPowerCapsOnSimulatedGPUs(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the server's one-minute settle time")
	}
	p := startServer(t, t.TempDir(), nil, "--power-caps", "on")
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	ag := startAgent(t, p, f.admin, "h100-a", "h100-sxm-80gb:2")
	defer func() {
		if t.Failed() {
			ag.dumpLog(t)
		}
	}()
	eventually(t, 15*time.Second, "the node reports it can cap", func() error {
		n, err := f.admin.Node(ctx, "h100-a")
		if err != nil {
			return err
		}
		if n.State != gpufleet.NodeReady || n.Labels[gpufleet.PowerCapsLabel] != "true" {
			return fmt.Errorf("node %s, labels %v", n.State, n.Labels)
		}
		return nil
	})
	member := f.members["team-a"]
	job, err := member.SubmitJob(ctx, api.SubmitRequest{Name: "capped", Resources: gpufleet.Resources{GPUs: 1}, SimLoad: "memory",
		Command: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, member, job.ID, 30*time.Second, gpufleet.JobRunning)
	uuid := j.Attempts[len(j.Attempts)-1].GPUs[0]
	limit := func() (float64, error) {
		body, err := scrape(ctx, ag.metricsURL)
		if err != nil {
			return 0, err
		}
		m := regexp.MustCompile(`gpufleet_gpu_power_limit_watts\{[^}]*uuid="` + regexp.QuoteMeta(uuid) + `"[^}]*\} ([0-9.e+]+)`).FindStringSubmatch(body)
		if m == nil {
			return 0, fmt.Errorf("no power limit of %s in the metrics", uuid)
		}
		return strconv.ParseFloat(m[1], 64)
	}
	eventually(t, 100*time.Second, "the job's GPU capped at its charge", func() error {
		w, err := limit()
		if err != nil {
			return err
		}
		if w < 500 || w > 560 {
			return fmt.Errorf("limit %v W, want about 539 (490 W + 10 %%)", w)
		}
		return nil
	})
	if _, err := member.CancelJob(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the GPU back at its default limit", func() error {
		w, err := limit()
		if err != nil {
			return err
		}
		if w != 700 {
			return fmt.Errorf("limit %v W, want 700", w)
		}
		return nil
	})
}

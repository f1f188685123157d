package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// TestJobsByCountAndByModel submits over HTTP a job by GPU count and one by
// model, sees them placed on suitable GPUs, queued with a reason and an
// estimated start when the fleet is full, and finished with accounting.
func TestJobsByCountAndByModel(t *testing.T) {
	p := startServer(t, t.TempDir(), nil)
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	a := f.members["team-a"]
	agent := registerAgent(t, p, f.admin, "n1", "h100-sxm-80gb", 8)

	byCount, err := a.SubmitJob(ctx, api.SubmitRequest{Name: "train", Command: []string{"python", "train.py"},
		Resources: gpufleet.Resources{GPUs: 4, Interconnect: "nvlink"}, Priority: "training", Estimate: gpufleet.Duration(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	byModel, err := a.SubmitJob(ctx, api.SubmitRequest{Name: "serve", Command: []string{"vllm", "serve"},
		Model: &api.ModelRequest{Name: "llama-3.1-70b", Mode: "inference", Precision: "fp8"}, Priority: "production"})
	if err != nil {
		t.Fatal(err)
	}
	if byModel.Resources.GPUs < 1 || byModel.Resources.GPUMemoryMinBytes == 0 || byModel.Plan == nil {
		t.Fatalf("job admitted by model should carry its plan and filled-in resources: %+v", byModel.Resources)
	}
	// A third job cannot fit until the first finishes: it waits with a
	// reason and an estimated start.
	waiting, err := a.SubmitJob(ctx, api.SubmitRequest{Name: "later", Command: []string{"x"}, Resources: gpufleet.Resources{GPUs: 8}, Estimate: gpufleet.Duration(30 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string][]string{}
	eventually(t, 10*time.Second, "both jobs placed", func() error {
		resp, err := agent.beat(ctx)
		if err != nil {
			return err
		}
		for _, s := range resp.Start {
			placed[s.JobID] = s.GPUs
		}
		if len(placed[byCount.ID]) != 4 || len(placed[byModel.ID]) != byModel.Resources.GPUs {
			return fmt.Errorf("placed %v", placed)
		}
		return nil
	})
	var q []gpufleet.QueueEntry
	eventually(t, 10*time.Second, "queue entry with a reason and an ETA", func() error {
		var err error
		if q, err = a.Queue(ctx); err != nil {
			return err
		}
		if len(q) != 1 || q[0].ID != waiting.ID || q[0].Reason == "" || q[0].EstimatedStart == nil || q[0].Position != 1 {
			return fmt.Errorf("queue %+v; want the 8-GPU job at position 1 with a reason and an ETA", q)
		}
		return nil
	})
	if !q[0].EstimatedStart.After(time.Now()) {
		t.Errorf("estimated start %s is not in the future", q[0].EstimatedStart)
	}
	if !strings.Contains(q[0].Reason, "8") {
		t.Errorf("reason %q should say what the job needs", q[0].Reason)
	}
	// The job finishes and shows its exit and accounting.
	for att, job := range agent.jobs {
		if job == byCount.ID {
			agent.finish(att)
		}
	}
	eventually(t, 10*time.Second, "job succeeded", func() error {
		agent.beat(ctx)
		j, err := a.Job(ctx, byCount.ID)
		if err != nil {
			return err
		}
		if j.State != gpufleet.JobSucceeded || j.FinishedAt == nil {
			return fmt.Errorf("state %s", j.State)
		}
		return nil
	})
	// An impossible model is rejected at once with the planner's words.
	_, err = a.SubmitJob(ctx, api.SubmitRequest{Command: []string{"x"}, Model: &api.ModelRequest{Name: "llama-3.1-405b", Mode: "training"}})
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Message, "does not fit") {
		t.Fatalf("405B training on one 8-GPU node: %v, want a 400 saying it does not fit", err)
	}
}

package cli

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/store"
)

// devQuotas are the dev teams' quotas in GPUs per catalog id, within the
// dev fleet (16 H100, 16 A100, 16 L4, 8 H200): team-a trains mostly on
// H100s, team-b mostly on A100s and serves on L4s; they split the H200
// box, and 4 L4s stay unassigned (anyone may borrow them). Neither team
// has a borrowing limit, so idle GPUs still go to whoever asks.
var devQuotas = map[string]map[string]int{
	"team-a": {"h100-sxm-80gb": 10, "a100-sxm-80gb": 6, "l4": 4, "h200-sxm-141gb": 4},
	"team-b": {"h100-sxm-80gb": 6, "a100-sxm-80gb": 10, "l4": 8, "h200-sxm-141gb": 4},
}

// devTeam is the request that creates or updates a dev team with its
// seeded quota (a copy: the caller may keep it).
func devTeam(name string) api.TeamRequest {
	r := api.TeamRequest{Name: name}
	if q, ok := devQuotas[name]; ok {
		r.Quota = maps.Clone(q)
	}
	return r
}

// devDemand is how busy the seeded history keeps each dev GPU model: the
// share of its GPU-hours asked for on the first seeded weekday, and the
// growth of that share over the seeded period. H100 demand grows towards
// its capacity (procurement has something to say), A100 demand holds
// steady, L4s sit nearly idle (the lifecycle table retires them), and the
// H200 box carries moderate work.
var devDemand = []struct {
	model         string
	nodes         []string
	gpus          int
	share, growth float64
	shapes        []devShape
}{
	{"h100-sxm-80gb", []string{"dev-h100-0", "dev-h100-1"}, 8, 0.2, 1.2, []devShape{
		{8, 3, 8, gpufleet.Training}, {4, 1, 4, gpufleet.Training}, {1, 0.5, 2, gpufleet.Interactive}, {2, 2, 6, gpufleet.Batch}}},
	{"a100-sxm-80gb", []string{"dev-a100-0", "dev-a100-1"}, 8, 0.25, 0, []devShape{
		{8, 2, 6, gpufleet.Training}, {2, 1, 3, gpufleet.Batch}, {1, 0.5, 2, gpufleet.Interactive}}},
	{"l4", []string{"dev-l4-0", "dev-l4-1", "dev-l4-2", "dev-l4-3"}, 4, 0.03, 0, []devShape{
		{1, 0.5, 2, gpufleet.Production}, {1, 0.25, 1, gpufleet.Interactive}}},
	{"h200-sxm-141gb", []string{"dev-h200-0"}, 8, 0.25, 0.1, []devShape{
		{4, 2, 6, gpufleet.Training}, {2, 1, 3, gpufleet.Batch}}},
}

// devShape is a kind of job of the seeded history: GPUs, a run time drawn
// between min and max hours, a class.
type devShape struct {
	gpus     int
	min, max float64
	class    gpufleet.Priority
}

// devHistory is days of synthetic finished jobs on the dev fleet, up to
// the start of end's day: each model's demand at its share of capacity,
// growing, with quieter weekends and day-to-day noise; submitted in
// working hours, started within the half hour (queues are not modelled),
// each on one of the model's nodes. Deterministic.
func devHistory(days int, end time.Time) []gpufleet.Job {
	rng := rand.New(rand.NewPCG(42, 17))
	end = end.UTC().Truncate(24 * time.Hour)
	var jobs []gpufleet.Job
	for _, m := range devDemand {
		capacity := float64(len(m.nodes)*m.gpus) * 24
		for d := range days {
			day := end.AddDate(0, 0, d-days)
			want := capacity * m.share * (1 + m.growth*float64(d)/float64(days)) * math.Exp(0.12*rng.NormFloat64())
			if wd := day.Weekday(); wd == time.Saturday || wd == time.Sunday {
				want *= 0.45
			}
			for got := 0.0; got < want; {
				s := m.shapes[rng.IntN(len(m.shapes))]
				hours := s.min + rng.Float64()*(s.max-s.min)
				submit := day.Add(time.Duration((6 + 14*rng.Float64()) * float64(time.Hour))).Truncate(time.Second)
				start := submit.Add(time.Duration(rng.Float64() * float64(30*time.Minute))).Truncate(time.Second)
				finish := start.Add(time.Duration(hours * float64(time.Hour))).Truncate(time.Second)
				node := m.nodes[rng.IntN(len(m.nodes))]
				gpuS := float64(s.gpus) * finish.Sub(start).Seconds()
				code := 0
				team := []string{"team-a", "team-b"}[rng.IntN(2)]
				est := hours * 3600
				jobs = append(jobs, gpufleet.Job{Team: team, Name: fmt.Sprintf("%s-%s", s.class, m.model), State: gpufleet.JobSucceeded, Priority: s.class,
					Resources: gpufleet.Resources{GPUs: s.gpus, GPUModels: []string{m.model}}, Command: []string{"sleep", fmt.Sprint(int(est))},
					EstimateS: &est, Retries: gpufleet.Retries{Max: 1}, SubmittedAt: submit, StartedAt: &start, FinishedAt: &finish,
					Attempts: []gpufleet.Attempt{{State: gpufleet.AttemptSucceeded, Node: node, Nodes: []gpufleet.AttemptNode{{Name: node}},
						StartedAt: &start, FinishedAt: &finish, ExitCode: &code, Fraction: 1, GPUSeconds: gpuS, EffectiveGPUSeconds: 0.7 * gpuS}}})
				got += gpuS / 3600
			}
		}
	}
	return jobs
}

// seedHistory writes devHistory into a store that holds no jobs yet.
func seedHistory(ctx context.Context, st store.Store, days int, now time.Time) (int, error) {
	have, _, err := st.ListJobs(ctx, store.JobFilter{Limit: 1})
	if err != nil || len(have) > 0 {
		return 0, err
	}
	jobs := devHistory(days, now)
	return len(jobs), st.ImportHistory(ctx, jobs, "dev")
}

package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/capacity"
	"github.com/gpufleet/gpufleet/internal/forecast"
)

var _ api.ForecastService = (*Server)(nil)

// Forecast reads the daily demand of the store's jobs (a team's, a GPU
// model's; a member sees only its own team's) over the last year, from
// the first day with any, and forecasts it.
func (s *Server) Forecast(ctx context.Context, p api.Principal, q api.ForecastQuery) (api.ForecastResponse, error) {
	if err := requireUser(p); err != nil {
		return api.ForecastResponse{}, err
	}
	team := q.Team
	if !p.IsAdmin() {
		if team != "" && team != p.Team {
			return api.ForecastResponse{}, fmt.Errorf("%w: team %s", gpufleet.ErrNotFound, gpufleet.Quote(team))
		}
		team = p.Team
	}
	model := ""
	if q.GPUModel != "" {
		g, err := s.cat.Lookup(q.GPUModel)
		if err != nil {
			return api.ForecastResponse{}, fmt.Errorf("gpu_model: %w", err)
		}
		model = g.ID
	}
	if q.HorizonDays < 1 || q.HorizonDays > api.MaxHorizonDays {
		return api.ForecastResponse{}, fmt.Errorf("%w: horizon %d days: expected 1 to %d", gpufleet.ErrInvalid, q.HorizonDays, api.MaxHorizonDays)
	}
	jobs, err := s.allJobs(ctx, team)
	if err != nil {
		return api.ForecastResponse{}, err
	}
	nodes, err := s.st.Nodes(ctx)
	if err != nil {
		return api.ForecastResponse{}, err
	}
	byNode := nodeModels(nodes)
	now := s.now()
	one := func(model string) (forecast.Series, forecast.Forecast, float64, error) {
		keep := func(j gpufleet.Job) bool { return model == "" || capacity.JobModel(j, byNode) == model }
		hist := capacity.DemandHistory(jobs, now, keep)
		fc, err := forecast.HoltWinters(hist, q.HorizonDays)
		if errors.Is(err, forecast.ErrShort) {
			err = fmt.Errorf("%w: %d days of demand in the store since the first job: a forecast needs at least %d", gpufleet.ErrInvalid, len(hist.Values), forecast.MinDays)
		}
		gpus := 0
		for _, n := range nodes {
			for _, g := range n.GPUs {
				if model == "" || g.Model == model {
					gpus++
				}
			}
		}
		return hist, fc, 24 * float64(gpus), err
	}
	hist, fc, capGPUh, err := one(model)
	if err != nil {
		return api.ForecastResponse{}, err
	}
	out := api.ForecastResponse{GPUModel: model, Team: q.Team, History: hist, Forecast: fc, CapacityGPUHoursPerDay: capGPUh}
	if model == "" {
		models := map[string]bool{}
		for _, n := range nodes {
			for _, g := range n.GPUs {
				models[g.Model] = true
			}
		}
		for _, m := range slices.Sorted(maps.Keys(models)) {
			h, f, c, err := one(m)
			mf := api.ModelForecast{GPUModel: m, History: h, Forecast: f, CapacityGPUHoursPerDay: c}
			if err != nil {
				mf.Error = err.Error()
			}
			out.Models = append(out.Models, mf)
		}
	}
	return out, nil
}

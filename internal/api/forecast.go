package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/forecast"
)

// ForecastQuery filters GET /api/v1/forecast.
type ForecastQuery struct {
	GPUModel string
	Team     string
	// HorizonDays is how many days to forecast (default 28).
	HorizonDays int
}

// ForecastResponse is the body of GET /api/v1/forecast: the daily demand
// history the store holds, the forecast, and the capacity to read it
// against (docs/CAPACITY.md).
type ForecastResponse struct {
	GPUModel string            `json:"gpu_model,omitempty"`
	Team     string            `json:"team,omitempty"`
	History  forecast.Series   `json:"history"`
	Forecast forecast.Forecast `json:"forecast"`
	// CapacityGPUHoursPerDay is the fleet's GPUs (of the model, when one is
	// named) times 24.
	CapacityGPUHoursPerDay float64 `json:"capacity_gpu_hours_per_day"`
	// Models, when no model is named, is the forecast of each GPU model of
	// the fleet against its own capacity: the series above adds every
	// model's hours together, as if GPUs were interchangeable, and is kept
	// for reference only.
	Models []ModelForecast `json:"models,omitempty"`
}

// ModelForecast is one GPU model's demand forecast against its capacity;
// Error says why there is none (too little history).
type ModelForecast struct {
	GPUModel               string            `json:"gpu_model"`
	History                forecast.Series   `json:"history"`
	Forecast               forecast.Forecast `json:"forecast"`
	CapacityGPUHoursPerDay float64           `json:"capacity_gpu_hours_per_day"`
	Error                  string            `json:"error,omitempty"`
}

// ForecastService is what GET /api/v1/forecast needs; a server without it
// answers 422.
type ForecastService interface {
	Forecast(ctx context.Context, p Principal, q ForecastQuery) (ForecastResponse, error)
}

// MaxHorizonDays bounds a forecast's horizon: two years.
const MaxHorizonDays = 730

func (h *handler) forecast(w http.ResponseWriter, r *http.Request, p Principal) error {
	fs, ok := h.svc.(ForecastService)
	if !ok {
		return fmt.Errorf("%w: this server makes no forecasts", gpufleet.ErrUnsupported)
	}
	v := r.URL.Query()
	q := ForecastQuery{GPUModel: v.Get("gpu_model"), Team: v.Get("team"), HorizonDays: 28}
	for _, f := range []struct{ name, v string }{{"gpu_model", q.GPUModel}, {"team", q.Team}} {
		if err := gpufleet.CheckText(f.name, f.v, maxIDLen, false); err != nil {
			return err
		}
	}
	if s := v.Get("horizon"); s != "" {
		var err error
		if q.HorizonDays, err = days("horizon", s, MaxHorizonDays); err != nil {
			return err
		}
	}
	out, err := fs.Forecast(r.Context(), p, q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// Forecast asks the server for a demand forecast from its own history.
func (c *Client) Forecast(ctx context.Context, q ForecastQuery) (ForecastResponse, error) {
	v := url.Values{}
	if q.GPUModel != "" {
		v.Set("gpu_model", q.GPUModel)
	}
	if q.Team != "" {
		v.Set("team", q.Team)
	}
	if q.HorizonDays > 0 {
		v.Set("horizon", strconv.Itoa(q.HorizonDays)+"d")
	}
	var out ForecastResponse
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/forecast", query: v, idempotent: true}, &out)
	return out, err
}

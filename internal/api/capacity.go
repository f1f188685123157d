package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/capacity"
	"github.com/gpufleet/gpufleet/internal/forecast"
)

// ProcureQuery is GET /api/v1/procure's parameters.
type ProcureQuery struct {
	// GPUModel limits the answer to one model; "" is every model of the
	// fleet.
	GPUModel    string
	HorizonDays int
	Target      capacity.Target
	// Quantile is the forecast quantile of demand planned for.
	Quantile float64
	// LeadTimeDays overrides the catalog's lead times by catalog id.
	LeadTimeDays map[string]int
}

// ProcureModel is one GPU model's procurement decision with the demand it
// was made from.
type ProcureModel struct {
	Recommendation capacity.Recommendation `json:"recommendation"`
	History        forecast.Series         `json:"history"`
	Forecast       forecast.Forecast       `json:"forecast"`
	// CapacityGPUHoursPerDay is the model's GPUs times 24.
	CapacityGPUHoursPerDay float64 `json:"capacity_gpu_hours_per_day"`
	// PoolJobs is how many finished jobs the replays sampled from.
	PoolJobs int `json:"pool_jobs"`
}

// ProcureResponse is the body of GET /api/v1/procure.
type ProcureResponse struct {
	At     time.Time      `json:"at"`
	Models []ProcureModel `json:"models"`
	// Skipped says, per model, why it got no decision (too little history,
	// no finished jobs to replay).
	Skipped map[string]string `json:"skipped"`
}

// LifecycleQuery is GET /api/v1/lifecycle's parameters.
type LifecycleQuery struct {
	HorizonMonths int
	// SinceDays is the period use and failures are read over.
	SinceDays         int
	Prices            map[string]float64
	EnergyUSDPerKWh   float64
	DepreciationYears float64
	RepairHours       float64
}

// CapacityService is what the procurement and lifecycle routes need; a
// server without it answers 422.
type CapacityService interface {
	Procure(ctx context.Context, p Principal, q ProcureQuery) (ProcureResponse, error)
	Lifecycle(ctx context.Context, p Principal, q LifecycleQuery) (capacity.LifecycleReport, error)
}

func (h *handler) capacity() (CapacityService, error) {
	cs, ok := h.svc.(CapacityService)
	if !ok {
		return nil, fmt.Errorf("%w: this server plans no capacity", gpufleet.ErrUnsupported)
	}
	return cs, nil
}

// days reads a whole number of days from 1 to max ("180d", or a duration
// in whole days).
func days(field, s string, max int) (int, error) {
	d, err := gpufleet.ParseDuration(s)
	n := d / (24 * time.Hour)
	if err != nil || d%(24*time.Hour) != 0 || n < 1 || n > time.Duration(max) {
		return 0, fmt.Errorf("%w: %s %s: expected whole days from 1d to %dd", gpufleet.ErrInvalid, field, gpufleet.Quote(s), max)
	}
	return int(n), nil
}

// number reads a finite number in [lo, hi].
func number(field, s string, lo, hi float64) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= lo && v <= hi) {
		return 0, fmt.Errorf("%w: %s %s: expected a number from %g to %g", gpufleet.ErrInvalid, field, gpufleet.Quote(s), lo, hi)
	}
	return v, nil
}

// pairs reads repeated MODEL=VALUE parameters, each model once.
func pairs(field string, vs []string, read func(model, value string) error) error {
	if len(vs) > maxPairs {
		return fmt.Errorf("%w: %s: at most %d", gpufleet.ErrInvalid, field, maxPairs)
	}
	seen := map[string]bool{}
	for _, kv := range vs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("%w: %s %s: expected MODEL=VALUE", gpufleet.ErrInvalid, field, gpufleet.Quote(kv))
		}
		if err := gpufleet.CheckText(field, k, maxIDLen, false); err != nil {
			return err
		}
		if seen[k] {
			return fmt.Errorf("%w: %s: %s given twice: one value per model", gpufleet.ErrInvalid, field, gpufleet.Quote(k))
		}
		seen[k] = true
		if err := read(k, v); err != nil {
			return err
		}
	}
	return nil
}

const maxPairs = 64

func (h *handler) procure(w http.ResponseWriter, r *http.Request, p Principal) error {
	cs, err := h.capacity()
	if err != nil {
		return err
	}
	v := r.URL.Query()
	q := ProcureQuery{GPUModel: v.Get("gpu_model"), HorizonDays: 180, Target: capacity.DefaultTarget, Quantile: 0.8, LeadTimeDays: map[string]int{}}
	if err := gpufleet.CheckText("gpu_model", q.GPUModel, maxIDLen, false); err != nil {
		return err
	}
	if s := v.Get("horizon"); s != "" {
		if q.HorizonDays, err = days("horizon", s, capacity.MaxHorizonDays); err != nil {
			return err
		}
		if q.HorizonDays < 7 {
			return fmt.Errorf("%w: horizon %s: at least a week (7d)", gpufleet.ErrInvalid, gpufleet.Quote(s))
		}
	}
	if s := v.Get("target"); s != "" {
		if q.Target, err = capacity.ParseTarget(s); err != nil {
			return err
		}
	}
	if s := v.Get("quantile"); s != "" {
		if q.Quantile, err = number("quantile", s, 0.5, 0.99); err != nil {
			return err
		}
	}
	err = pairs("lead_time", v["lead_time"], func(model, val string) error {
		n, err := days("lead_time", val, catalog.MaxLeadTimeDays)
		q.LeadTimeDays[model] = n
		return err
	})
	if err != nil {
		return err
	}
	out, err := cs.Procure(r.Context(), p, q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *handler) lifecycle(w http.ResponseWriter, r *http.Request, p Principal) error {
	cs, err := h.capacity()
	if err != nil {
		return err
	}
	v := r.URL.Query()
	q := LifecycleQuery{HorizonMonths: 36, SinceDays: 30, Prices: map[string]float64{}, EnergyUSDPerKWh: capacity.DefaultEnergyUSDPerKWh,
		DepreciationYears: capacity.DefaultDepreciationYears, RepairHours: capacity.DefaultRepairHours}
	if s := v.Get("horizon"); s != "" {
		n, err := days("horizon", s, 3650)
		if err != nil {
			return err
		}
		q.HorizonMonths = max(int(float64(n)/30.44+0.5), 1)
	}
	if s := v.Get("since"); s != "" {
		if q.SinceDays, err = days("since", s, 365); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name   string
		dst    *float64
		lo, hi float64
	}{{"energy_price", &q.EnergyUSDPerKWh, 0, 10}, {"depreciation_years", &q.DepreciationYears, 1, 20}, {"repair_hours", &q.RepairHours, 0, 8760}} {
		if s := v.Get(f.name); s != "" {
			if *f.dst, err = number(f.name, s, f.lo, f.hi); err != nil {
				return err
			}
		}
	}
	err = pairs("price", v["price"], func(model, val string) error {
		p, err := number("price", val, 1, 1e8)
		q.Prices[model] = p
		return err
	})
	if err != nil {
		return err
	}
	out, err := cs.Lifecycle(r.Context(), p, q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// Procure asks the server what to order.
func (c *Client) Procure(ctx context.Context, q ProcureQuery) (ProcureResponse, error) {
	v := url.Values{}
	if q.GPUModel != "" {
		v.Set("gpu_model", q.GPUModel)
	}
	if q.HorizonDays > 0 {
		v.Set("horizon", strconv.Itoa(q.HorizonDays)+"d")
	}
	if q.Target.Metric != "" {
		v.Set("target", q.Target.String())
	}
	if q.Quantile > 0 {
		v.Set("quantile", strconv.FormatFloat(q.Quantile, 'g', -1, 64))
	}
	for m, d := range q.LeadTimeDays {
		v.Add("lead_time", fmt.Sprintf("%s=%dd", m, d))
	}
	var out ProcureResponse
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/procure", query: v, idempotent: true}, &out)
	return out, err
}

// Lifecycle asks the server for the lifecycle of every GPU model.
func (c *Client) Lifecycle(ctx context.Context, q LifecycleQuery) (capacity.LifecycleReport, error) {
	v := url.Values{}
	if q.HorizonMonths > 0 {
		v.Set("horizon", fmt.Sprintf("%dd", int(float64(q.HorizonMonths)*30.44+0.5)))
	}
	if q.SinceDays > 0 {
		v.Set("since", strconv.Itoa(q.SinceDays)+"d")
	}
	for name, f := range map[string]float64{"energy_price": q.EnergyUSDPerKWh, "depreciation_years": q.DepreciationYears, "repair_hours": q.RepairHours} {
		if f > 0 {
			v.Set(name, strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	for m, p := range q.Prices {
		v.Add("price", m+"="+strconv.FormatFloat(p, 'g', -1, 64))
	}
	var out capacity.LifecycleReport
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/lifecycle", query: v, idempotent: true}, &out)
	return out, err
}

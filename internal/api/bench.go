package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/bench"
)

// BenchRequest is the body of POST /api/v1/nodes/{name}/bench: the
// microbenchmarks to run on a node's idle GPUs (docs/BENCH.md).
type BenchRequest struct {
	// GPUs are indexes; empty means every GPU.
	GPUs  []int        `json:"gpus,omitempty"`
	Tests []bench.Test `json:"tests,omitempty"`
	// Full runs the full sizes and runs instead of the quick set.
	Full bool `json:"full,omitempty"`
	// Level is quick, medium or long (docs/BENCH.md#levels); it takes
	// precedence over Full (medium and long run the full sizes).
	Level bench.Level `json:"level,omitempty"`
}

// AllReduceBenchRequest is the body of POST /api/v1/bench/allreduce: an
// all-reduce across nodes, every GPU of each a rank, as nccl-tests runs
// across hosts (docs/BENCH.md#across-nodes). Name the nodes, or a rack, or
// an NVLink domain (the nodes whose nvlink_domain it is).
type AllReduceBenchRequest struct {
	Nodes        []string `json:"nodes,omitempty"`
	Rack         string   `json:"rack,omitempty"`
	NVLinkDomain string   `json:"nvlink_domain,omitempty"`
	// Level sets the sizes and runs: quick (the default) or medium;
	// long runs as medium (there is no stress across nodes).
	Level bench.Level `json:"level,omitempty"`
}

// AllReduceBenchList is the body of GET /api/v1/bench/allreduce.
type AllReduceBenchList struct {
	Runs []bench.GroupReport `json:"runs"`
}

// BenchResultList is the body of GET /api/v1/bench/results: figures, each
// with its comparison against its model's fleet median, and the gates.
type BenchResultList struct {
	Results []bench.Result     `json:"results"`
	Gates   map[string]float64 `json:"gates"`
}

// BenchQuery filters GET /api/v1/bench/results.
type BenchQuery struct {
	Node     string
	GPUModel string
	// History lists every figure ever measured, not only each GPU's
	// newest.
	History bool
	Limit   int
}

// WorkloadBenchRequest is the body of POST /api/v1/bench/workloads: a job
// (its work counter reads the throughput the command prints, per second)
// run once on each GPU model.
type WorkloadBenchRequest struct {
	GPUModels []string            `json:"gpu_models"`
	Job       gpufleet.JobRequest `json:"job"`
}

// WorkloadBenchList is the body of GET /api/v1/bench/workloads.
type WorkloadBenchList struct {
	Workloads []bench.WorkloadReport `json:"workloads"`
}

// BenchService is what the bench routes need; a server without it
// answers 422.
type BenchService interface {
	// OrderBench asks a node's agent to run microbenchmarks on its idle
	// GPUs (admin); the results arrive with a later heartbeat.
	OrderBench(ctx context.Context, p Principal, node string, r BenchRequest) (BenchOrder, error)
	BenchResults(ctx context.Context, p Principal, q BenchQuery) (BenchResultList, error)
	StartWorkloadBench(ctx context.Context, p Principal, r WorkloadBenchRequest) (bench.WorkloadReport, error)
	WorkloadBench(ctx context.Context, p Principal, id string) (bench.WorkloadReport, error)
	WorkloadBenches(ctx context.Context, p Principal) ([]bench.WorkloadReport, error)
	// StartAllReduceBench starts an all-reduce across nodes (admin).
	StartAllReduceBench(ctx context.Context, p Principal, r AllReduceBenchRequest) (bench.GroupReport, error)
	AllReduceBench(ctx context.Context, p Principal, id string) (bench.GroupReport, error)
	AllReduceBenches(ctx context.Context, p Principal) ([]bench.GroupReport, error)
}

func (h *handler) benchService() (BenchService, error) {
	bs, ok := h.svc.(BenchService)
	if !ok {
		return nil, fmt.Errorf("%w: this server runs no benchmarks", gpufleet.ErrUnsupported)
	}
	return bs, nil
}

func (h *handler) orderBench(w http.ResponseWriter, r *http.Request, p Principal) error {
	bs, err := h.benchService()
	if err != nil {
		return err
	}
	var req BenchRequest
	if err := decodeStrict(r, &req); err != nil {
		return err
	}
	o, err := bs.OrderBench(r.Context(), p, r.PathValue("name"), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, o)
}

func (h *handler) benchResults(w http.ResponseWriter, r *http.Request, p Principal) error {
	bs, err := h.benchService()
	if err != nil {
		return err
	}
	v := r.URL.Query()
	q := BenchQuery{Node: v.Get("node"), GPUModel: v.Get("gpu_model")}
	for _, f := range []struct{ name, v string }{{"node", q.Node}, {"gpu_model", q.GPUModel}} {
		if err := gpufleet.CheckText(f.name, f.v, maxIDLen, false); err != nil {
			return err
		}
	}
	switch s := v.Get("history"); s {
	case "", "0", "false":
	case "1", "true":
		q.History = true
	default:
		return fmt.Errorf("%w: history %s: expected 1 or 0", gpufleet.ErrInvalid, gpufleet.Quote(s))
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100000 {
			return fmt.Errorf("%w: limit %s: expected 1 to 100000", gpufleet.ErrInvalid, gpufleet.Quote(s))
		}
		q.Limit = n
	}
	out, err := bs.BenchResults(r.Context(), p, q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *handler) startWorkloadBench(w http.ResponseWriter, r *http.Request, p Principal) error {
	bs, err := h.benchService()
	if err != nil {
		return err
	}
	var req WorkloadBenchRequest
	if err := decodeStrict(r, &req); err != nil {
		return err
	}
	out, err := bs.StartWorkloadBench(r.Context(), p, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, out)
}

func (h *handler) getWorkloadBench(w http.ResponseWriter, r *http.Request, p Principal) error {
	bs, err := h.benchService()
	if err != nil {
		return err
	}
	out, err := bs.WorkloadBench(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *handler) listWorkloadBenches(w http.ResponseWriter, r *http.Request, p Principal) error {
	bs, err := h.benchService()
	if err != nil {
		return err
	}
	out, err := bs.WorkloadBenches(r.Context(), p)
	if err != nil {
		return err
	}
	if out == nil {
		out = []bench.WorkloadReport{}
	}
	return writeJSON(w, http.StatusOK, WorkloadBenchList{Workloads: out})
}

func (h *handler) startAllReduceBench(w http.ResponseWriter, r *http.Request, p Principal) error {
	bs, err := h.benchService()
	if err != nil {
		return err
	}
	var req AllReduceBenchRequest
	if err := decodeStrict(r, &req); err != nil {
		return err
	}
	out, err := bs.StartAllReduceBench(r.Context(), p, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, out)
}

func (h *handler) getAllReduceBench(w http.ResponseWriter, r *http.Request, p Principal) error {
	bs, err := h.benchService()
	if err != nil {
		return err
	}
	out, err := bs.AllReduceBench(r.Context(), p, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *handler) listAllReduceBenches(w http.ResponseWriter, r *http.Request, p Principal) error {
	bs, err := h.benchService()
	if err != nil {
		return err
	}
	out, err := bs.AllReduceBenches(r.Context(), p)
	if err != nil {
		return err
	}
	if out == nil {
		out = []bench.GroupReport{}
	}
	return writeJSON(w, http.StatusOK, AllReduceBenchList{Runs: out})
}

// StartAllReduceBench starts an all-reduce across nodes (admin).
func (c *Client) StartAllReduceBench(ctx context.Context, r AllReduceBenchRequest) (bench.GroupReport, error) {
	var out bench.GroupReport
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/bench/allreduce", body: r}, &out)
	return out, err
}

// AllReduceBench reads an all-reduce across nodes.
func (c *Client) AllReduceBench(ctx context.Context, id string) (bench.GroupReport, error) {
	var out bench.GroupReport
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/bench/allreduce/" + url.PathEscape(id), idempotent: true}, &out)
	return out, err
}

// OrderBench asks a node's agent to run microbenchmarks (admin).
func (c *Client) OrderBench(ctx context.Context, node string, r BenchRequest) (BenchOrder, error) {
	var out BenchOrder
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/nodes/" + url.PathEscape(node) + "/bench", body: r}, &out)
	return out, err
}

// BenchResults lists benchmark figures with their fleet comparisons.
func (c *Client) BenchResults(ctx context.Context, q BenchQuery) (BenchResultList, error) {
	v := url.Values{}
	if q.Node != "" {
		v.Set("node", q.Node)
	}
	if q.GPUModel != "" {
		v.Set("gpu_model", q.GPUModel)
	}
	if q.History {
		v.Set("history", "1")
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out BenchResultList
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/bench/results", query: v, idempotent: true}, &out)
	return out, err
}

// StartWorkloadBench submits a workload bench: one job per GPU model.
func (c *Client) StartWorkloadBench(ctx context.Context, r WorkloadBenchRequest) (bench.WorkloadReport, error) {
	var out bench.WorkloadReport
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/bench/workloads", body: r}, &out)
	return out, err
}

// WorkloadBench reads a workload bench's report.
func (c *Client) WorkloadBench(ctx context.Context, id string) (bench.WorkloadReport, error) {
	var out bench.WorkloadReport
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/bench/workloads/" + url.PathEscape(id), idempotent: true}, &out)
	return out, err
}

// WorkloadBenches lists the workload benches the caller may see.
func (c *Client) WorkloadBenches(ctx context.Context) ([]bench.WorkloadReport, error) {
	var out WorkloadBenchList
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/bench/workloads", idempotent: true}, &out)
	return out.Workloads, err
}

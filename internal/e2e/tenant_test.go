package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// TestTenantsNeverSeeEachOther walks every route the API registers and
// checks, as a member of team-a, that team-b's job never shows and can
// never be touched. A new route without a case here fails the test.
func TestTenantsNeverSeeEachOther(t *testing.T) {
	p := startServer(t, t.TempDir(), nil)
	f := setupTeams(t, p, "team-a", "team-b")
	ctx := t.Context()
	agent := registerAgent(t, p, f.admin, "n1", "h100-sxm-80gb", 8)
	jb, err := f.members["team-b"].SubmitJob(ctx, api.SubmitRequest{Command: []string{"secret-b"}, Name: "secret-b-job",
		Resources: gpufleet.Resources{GPUs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "team-b's job placed", func() error {
		_, err := agent.beat(ctx)
		return err
	})
	wb, err := f.members["team-b"].StartWorkloadBench(ctx, api.WorkloadBenchRequest{GPUModels: []string{"h100-sxm-80gb"},
		Job: gpufleet.JobRequest{Command: []string{"secret-b"}, Resources: gpufleet.Resources{GPUs: 1}, Work: &gpufleet.WorkCounter{Metric: "x=([0-9]+)"}}})
	if err != nil {
		t.Fatal(err)
	}
	tokA := f.tokens["team-a"]
	secret := []string{jb.ID, "secret-b", "team-b", wb.ID}

	do := func(method, path, body, token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, method, p.url+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(bearer(req, token))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	noLeak := func(t *testing.T, code int, body string) {
		t.Helper()
		if code >= 500 {
			t.Fatalf("status %d: %s", code, body)
		}
		check := secret
		if code >= 400 {
			check = secret[1:2] // an error may echo the id or team the caller named
		}
		for _, s := range check {
			if strings.Contains(body, s) {
				t.Errorf("team-a's response shows %q: %.300s", s, body)
			}
		}
	}
	want := func(t *testing.T, code, wantCode int, body string) {
		t.Helper()
		if code != wantCode {
			t.Errorf("status %d, want %d: %.200s", code, wantCode, body)
		}
		noLeak(t, code, body)
	}
	id := jb.ID
	cases := map[string]func(t *testing.T){
		"GET /healthz":             func(t *testing.T) { c, b := do("GET", "/healthz", "", tokA); want(t, c, 200, b) },
		"GET /readyz":              func(t *testing.T) { c, b := do("GET", "/readyz", "", tokA); want(t, c, 200, b) },
		"GET /api/v1/openapi.json": func(t *testing.T) { c, b := do("GET", "/api/v1/openapi.json", "", ""); want(t, c, 200, b) },
		"GET /metrics":             func(t *testing.T) { c, b := do("GET", "/metrics", "", tokA); want(t, c, 403, b) },
		"POST /api/v1/jobs": func(t *testing.T) {
			c, b := do("POST", "/api/v1/jobs", `{"team":"team-b","command":["x"],"resources":{"gpus":1}}`, tokA)
			want(t, c, 404, b)
		},
		"GET /api/v1/jobs": func(t *testing.T) {
			c, b := do("GET", "/api/v1/jobs?all=1", "", tokA)
			want(t, c, 200, b)
			c, b = do("GET", "/api/v1/jobs?team=team-b", "", tokA)
			noLeak(t, c, b)
		},
		"POST /api/v1/jobs/cancel": func(t *testing.T) {
			// A selector every job matches (team-b's too), as team-a and
			// naming team-b: nothing of team-b's is picked or cancelled.
			c, b := do("POST", "/api/v1/jobs/cancel?selector=%21absent", "", tokA)
			want(t, c, 200, b)
			c, b = do("POST", "/api/v1/jobs/cancel?selector=%21absent&team=team-b", "", tokA)
			want(t, c, 200, b)
		},
		"GET /api/v1/jobs/{id}":              func(t *testing.T) { c, b := do("GET", "/api/v1/jobs/"+id, "", tokA); want(t, c, 404, b) },
		"POST /api/v1/jobs/{id}/cancel":      func(t *testing.T) { c, b := do("POST", "/api/v1/jobs/"+id+"/cancel", "", tokA); want(t, c, 404, b) },
		"GET /api/v1/jobs/{id}/logs":         func(t *testing.T) { c, b := do("GET", "/api/v1/jobs/"+id+"/logs", "", tokA); want(t, c, 404, b) },
		"GET /api/v1/jobs/{id}/rollups":      func(t *testing.T) { c, b := do("GET", "/api/v1/jobs/"+id+"/rollups", "", tokA); want(t, c, 404, b) },
		"GET /api/v1/nodes/{name}/rollups":   func(t *testing.T) { c, b := do("GET", "/api/v1/nodes/n1/rollups", "", tokA); want(t, c, 200, b) },
		"GET /api/v1/queue":                  func(t *testing.T) { c, b := do("GET", "/api/v1/queue", "", tokA); want(t, c, 200, b) },
		"GET /api/v1/nodes":                  func(t *testing.T) { c, b := do("GET", "/api/v1/nodes", "", tokA); want(t, c, 200, b) },
		"GET /api/v1/nodes/{name}":           func(t *testing.T) { c, b := do("GET", "/api/v1/nodes/n1", "", tokA); want(t, c, 200, b) },
		"POST /api/v1/nodes/{name}/cordon":   func(t *testing.T) { c, b := do("POST", "/api/v1/nodes/n1/cordon", "", tokA); want(t, c, 403, b) },
		"POST /api/v1/nodes/{name}/uncordon": func(t *testing.T) { c, b := do("POST", "/api/v1/nodes/n1/uncordon", "", tokA); want(t, c, 403, b) },
		"POST /api/v1/nodes/{name}/drain":    func(t *testing.T) { c, b := do("POST", "/api/v1/nodes/n1/drain", "", tokA); want(t, c, 403, b) },
		"POST /api/v1/nodes/{name}/repaired": func(t *testing.T) { c, b := do("POST", "/api/v1/nodes/n1/repaired", "", tokA); want(t, c, 403, b) },
		"POST /api/v1/nodes/{name}/replace":  func(t *testing.T) { c, b := do("POST", "/api/v1/nodes/n1/replace", "", tokA); want(t, c, 403, b) },
		"POST /api/v1/nodes/{name}/faults": func(t *testing.T) {
			c, b := do("POST", "/api/v1/nodes/n1/faults", `{"gpu":0,"xid":79}`, tokA)
			want(t, c, 403, b)
		},
		"DELETE /api/v1/nodes/{name}/faults": func(t *testing.T) {
			c, b := do("DELETE", "/api/v1/nodes/n1/faults?gpu=0", "", tokA)
			want(t, c, 403, b)
		},
		// Benchmark figures are fleet inventory, like nodes: members read
		// them, only admins order a bench; workload benches are a team's.
		"POST /api/v1/nodes/{name}/bench": func(t *testing.T) { c, b := do("POST", "/api/v1/nodes/n1/bench", `{}`, tokA); want(t, c, 403, b) },
		"GET /api/v1/bench/results":       func(t *testing.T) { c, b := do("GET", "/api/v1/bench/results?history=1", "", tokA); want(t, c, 200, b) },
		"POST /api/v1/bench/workloads": func(t *testing.T) {
			c, b := do("POST", "/api/v1/bench/workloads", `{"gpu_models":["h100-sxm-80gb"],"job":{"team":"team-b","command":["x"],"resources":{"gpus":1},"work":{"metric":"x=([0-9]+)"}}}`, tokA)
			want(t, c, 404, b)
		},
		// All-reduces across nodes are fleet diagnostics: admins start
		// them, members read them as they read bench results.
		"POST /api/v1/bench/allreduce": func(t *testing.T) {
			c, b := do("POST", "/api/v1/bench/allreduce", `{"nodes":["n1","n2"]}`, tokA)
			want(t, c, 403, b)
		},
		"GET /api/v1/bench/allreduce": func(t *testing.T) { c, b := do("GET", "/api/v1/bench/allreduce", "", tokA); noLeak(t, c, b) },
		"GET /api/v1/bench/allreduce/{id}": func(t *testing.T) {
			c, b := do("GET", "/api/v1/bench/allreduce/ar-1-none", "", tokA)
			want(t, c, 404, b)
		},
		"GET /api/v1/bench/workloads": func(t *testing.T) { c, b := do("GET", "/api/v1/bench/workloads", "", tokA); want(t, c, 200, b) },
		"GET /api/v1/bench/workloads/{id}": func(t *testing.T) {
			c, b := do("GET", "/api/v1/bench/workloads/"+wb.ID, "", tokA)
			want(t, c, 404, b)
		},
		"POST /api/v1/agent/logs/{id}": func(t *testing.T) {
			// A member token is no node credential; and a node may only
			// ship logs of its own attempts.
			c, b := do("POST", "/api/v1/agent/logs/whatever?offset=0", "x", tokA)
			want(t, c, 403, b)
		},
		"GET /api/v1/teams": func(t *testing.T) { c, b := do("GET", "/api/v1/teams", "", tokA); want(t, c, 200, b) },
		"POST /api/v1/teams": func(t *testing.T) {
			c, b := do("POST", "/api/v1/teams", `{"name":"team-b","weight":9}`, tokA)
			want(t, c, 403, b)
		},
		"GET /api/v1/classes": func(t *testing.T) { c, b := do("GET", "/api/v1/classes", "", tokA); want(t, c, 200, b) },
		"POST /api/v1/classes": func(t *testing.T) {
			c, b := do("POST", "/api/v1/classes", `{"name":"x","models":["l4"]}`, tokA)
			want(t, c, 403, b)
		},
		// Racks are fleet inventory, like nodes: members read them, only
		// admins change them.
		"GET /api/v1/racks": func(t *testing.T) { c, b := do("GET", "/api/v1/racks", "", tokA); want(t, c, 200, b) },
		"PUT /api/v1/racks/{name}": func(t *testing.T) {
			c, b := do("PUT", "/api/v1/racks/r9", `{"power_budget_watts":1}`, tokA)
			want(t, c, 403, b)
		},
		"DELETE /api/v1/racks/{name}": func(t *testing.T) { c, b := do("DELETE", "/api/v1/racks/r1", "", tokA); want(t, c, 403, b) },
		// Stacks are fleet inventory too: members read them and the nodes'
		// findings; only admins record, validate or retire one.
		"GET /api/v1/stacks":       func(t *testing.T) { c, b := do("GET", "/api/v1/stacks", "", tokA); want(t, c, 200, b) },
		"GET /api/v1/stacks/check": func(t *testing.T) { c, b := do("GET", "/api/v1/stacks/check", "", tokA); want(t, c, 200, b) },
		"POST /api/v1/stacks": func(t *testing.T) {
			c, b := do("POST", "/api/v1/stacks", `{"name":"s9","versions":{"driver":"550.54.15"}}`, tokA)
			want(t, c, 403, b)
		},
		"POST /api/v1/stacks/{name}/validate": func(t *testing.T) {
			c, b := do("POST", "/api/v1/stacks/s1/validate", `{"gpu_model":"h100-sxm-80gb"}`, tokA)
			want(t, c, 403, b)
		},
		"POST /api/v1/stacks/{name}/retire": func(t *testing.T) { c, b := do("POST", "/api/v1/stacks/s1/retire", "", tokA); want(t, c, 403, b) },
		// Rollouts: members follow them, only admins start or steer one.
		"GET /api/v1/rollouts":      func(t *testing.T) { c, b := do("GET", "/api/v1/rollouts", "", tokA); want(t, c, 200, b) },
		"GET /api/v1/rollouts/{id}": func(t *testing.T) { c, b := do("GET", "/api/v1/rollouts/ro-x", "", tokA); want(t, c, 404, b) },
		"POST /api/v1/rollouts": func(t *testing.T) {
			c, b := do("POST", "/api/v1/rollouts", `{"stack":"s1","gpu_model":"h100-sxm-80gb"}`, tokA)
			want(t, c, 403, b)
		},
		"POST /api/v1/rollouts/{id}/pause":    func(t *testing.T) { c, b := do("POST", "/api/v1/rollouts/ro-x/pause", "", tokA); want(t, c, 403, b) },
		"POST /api/v1/rollouts/{id}/resume":   func(t *testing.T) { c, b := do("POST", "/api/v1/rollouts/ro-x/resume", "", tokA); want(t, c, 403, b) },
		"POST /api/v1/rollouts/{id}/abort":    func(t *testing.T) { c, b := do("POST", "/api/v1/rollouts/ro-x/abort", "", tokA); want(t, c, 403, b) },
		"POST /api/v1/rollouts/{id}/rollback": func(t *testing.T) { c, b := do("POST", "/api/v1/rollouts/ro-x/rollback", "", tokA); want(t, c, 403, b) },
		"GET /api/v1/tokens":                  func(t *testing.T) { c, b := do("GET", "/api/v1/tokens", "", tokA); want(t, c, 403, b) },
		"POST /api/v1/tokens": func(t *testing.T) {
			c, b := do("POST", "/api/v1/tokens", `{"team":"team-b","role":"member"}`, tokA)
			want(t, c, 403, b)
		},
		"DELETE /api/v1/tokens/{id}": func(t *testing.T) { c, b := do("DELETE", "/api/v1/tokens/whatever", "", tokA); want(t, c, 403, b) },
		"POST /api/v1/join-tokens":   func(t *testing.T) { c, b := do("POST", "/api/v1/join-tokens", `{}`, tokA); want(t, c, 403, b) },
		"GET /api/v1/usage": func(t *testing.T) {
			c, b := do("GET", "/api/v1/usage", "", tokA)
			want(t, c, 200, b)
			c, b = do("GET", "/api/v1/usage?team=team-b", "", tokA)
			want(t, c, 404, b)
		},
		"GET /api/v1/forecast": func(t *testing.T) {
			c, b := do("GET", "/api/v1/forecast", "", tokA) // too little history: a 400 that says so
			want(t, c, 400, b)
			c, b = do("GET", "/api/v1/forecast?team=team-b", "", tokA)
			want(t, c, 404, b)
		},
		// Procurement and lifecycle read the whole fleet: admins only.
		"GET /api/v1/procure":   func(t *testing.T) { c, b := do("GET", "/api/v1/procure", "", tokA); want(t, c, 403, b) },
		"GET /api/v1/lifecycle": func(t *testing.T) { c, b := do("GET", "/api/v1/lifecycle", "", tokA); want(t, c, 403, b) },
		// The audit names every team's jobs: admins only.
		"GET /api/v1/audit": func(t *testing.T) { c, b := do("GET", "/api/v1/audit", "", tokA); want(t, c, 403, b) },
		// Scrape targets name every node: admin and monitor tokens only.
		"GET /api/v1/sd/agents": func(t *testing.T) { c, b := do("GET", "/api/v1/sd/agents", "", tokA); want(t, c, 403, b) },
		"GET /api/v1/plan": func(t *testing.T) {
			c, b := do("GET", "/api/v1/plan?model=llama-3.1-8b", "", tokA)
			want(t, c, 200, b)
			c, b = do("GET", "/api/v1/plan?model=llama-3.1-8b&team=team-b", "", tokA)
			want(t, c, 404, b)
		},
		"GET /api/v1/events": func(t *testing.T) {
			c, b := do("GET", "/api/v1/events?since=0", "", tokA)
			noLeak(t, c, b)
			sctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(sctx, "GET", p.url+"/api/v1/events?watch=1&since=0", nil)
			resp, err := http.DefaultClient.Do(bearer(req, tokA))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b2, _ := io.ReadAll(resp.Body) // until the deadline
			noLeak(t, resp.StatusCode, string(b2))
		},
		"POST /api/v1/agent/register": func(t *testing.T) {
			c, b := do("POST", "/api/v1/agent/register", `{"node":"evil"}`, tokA)
			want(t, c, 401, b)
		},
		"POST /api/v1/agent/renew": func(t *testing.T) {
			c, b := do("POST", "/api/v1/agent/renew", "", tokA)
			want(t, c, 403, b)
		},
		"POST /api/v1/agent/heartbeat": func(t *testing.T) {
			c, b := do("POST", "/api/v1/agent/heartbeat", `{"node":"n1"}`, tokA)
			want(t, c, 403, b)
		},
	}
	seen := map[string]bool{}
	for _, r := range api.Routes() {
		key := r.Method + " " + r.Pattern
		seen[key] = true
		tc, ok := cases[key]
		if !ok {
			t.Errorf("route %s has no cross-tenant case: add one here", key)
			continue
		}
		t.Run(key, tc)
	}
	for key := range cases {
		if !seen[key] {
			t.Errorf("case %s names a route the API no longer has", key)
		}
	}
	// A monitor token reads the metrics and the scrape targets and nothing
	// else: not another team's job, not the nodes, no action.
	t.Run("monitor token", func(t *testing.T) {
		mon, err := f.admin.CreateToken(ctx, api.TokenRequest{Role: gpufleet.RoleMonitor})
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/metrics", "/api/v1/sd/agents"} {
			if c, b := do("GET", path, "", mon.Token); c != 200 {
				t.Errorf("GET %s: %d %.200s", path, c, b)
			}
		}
		for _, r := range [][2]string{{"GET", "/api/v1/jobs"}, {"GET", "/api/v1/jobs/" + id}, {"GET", "/api/v1/jobs/" + id + "/logs"},
			{"POST", "/api/v1/jobs/" + id + "/cancel"}, {"POST", "/api/v1/jobs/cancel?selector=%21absent"}, {"GET", "/api/v1/nodes"}, {"POST", "/api/v1/nodes/n1/drain"}, {"GET", "/api/v1/audit"}} {
			c, b := do(r[0], r[1], "", mon.Token)
			want(t, c, 403, b)
		}
	})
	// And the job is untouched.
	got, err := f.admin.Job(ctx, id)
	if err != nil || got.CancelRequested {
		t.Errorf("team-b's job after team-a's attempts: %+v %v", got.State, err)
	}
}

package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet/internal/api"
)

// badCase is one hostile or mistaken request: what it sends and what must
// come back.
type badCase struct {
	class       string // the row of docs/RELIABILITY.md's bad input table
	method      string
	path        string
	token       string // "member", "admin", "agent", "join" or a literal
	contentType string // default application/json
	body        string
	status      int
	want        string // in the error message
}

// TestBadInputThroughTheAPI sends every class of bad input the hardening
// report found through the real HTTP handler and server: each is refused
// with a clear 4xx naming the field, the error quotes at most about 200
// bytes of the input, and nothing is stored. It prints the table of
// docs/RELIABILITY.md ("Bad input").
func TestBadInputThroughTheAPI(t *testing.T) {
	f := newFixture(t)
	member := f.teamToken("team-a")
	agentCred := f.nodeCred("n1")
	f.cycle()
	jt, err := f.srv.CreateJoinToken(t.Context(), f.admin, api.JoinTokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	h := api.NewHandler(f.srv, f.srv, f.srv, f.srv, api.HandlerOptions{})
	srv := httptest.NewServer(h)
	defer srv.Close()

	big := strings.Repeat("x", 900<<10)
	ok := `"command":["true"]`
	cases := []badCase{
		{"integer ranges", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":2147483648},` + ok + `}`, 400, "resources.gpus 2147483648: expected 1 to 524288"},
		{"integer ranges", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":4294967296},` + ok + `}`, 400, "resources.gpus 4294967296"},
		{"integer ranges", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":4294967297},` + ok + `}`, 400, "resources.gpus 4294967297"},
		{"integer ranges", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":99999999999999999999},` + ok + `}`, 400, "resources.gpus"},
		{"integer ranges", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":-1},` + ok + `}`, 400, "resources.gpus -1"},
		{"integer ranges", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1.5},` + ok + `}`, 400, "resources.gpus"},
		{"integer ranges", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":8,"nodes":70000},` + ok + `}`, 400, "resources.nodes 70000"},
		{"integer ranges", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"retries":1000,` + ok + `}`, 400, "retries 1000"},
		{"integer ranges", "POST", "/api/v1/teams", "admin", "", `{"name":"t","weight":1e300}`, 400, "weight"},
		{"integer ranges", "POST", "/api/v1/teams", "admin", "", `{"name":"t","quota":{"h100-sxm-80gb":99999999999}}`, 400, "quota h100-sxm-80gb"},
		{"integer ranges", "POST", "/api/v1/teams", "admin", "", `{"name":"t","borrowing_limit":-5}`, 400, "borrowing_limit -5"},
		{"sizes and durations", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1,"gpu_memory_min_bytes":"1EiB"},` + ok + `}`, 400, "resources.gpu_memory_min_bytes"},
		{"sizes and durations", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"time_limit":"9999d",` + ok + `}`, 400, "time_limit"},
		{"sizes and durations", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"grace":"-5s",` + ok + `}`, 400, `grace "-5s"`},
		{"sizes and durations", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"estimate":"soon",` + ok + `}`, 400, `estimate "soon"`},
		{"vocabulary", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1,"sharing":"timeslice:2"},` + ok + `}`, 400, `resources.sharing "timeslice:2"`},
		{"vocabulary", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1,"min_compute_capability":"nine"},` + ok + `}`, 400, `resources.min_compute_capability "nine"`},
		{"vocabulary", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1,"precision":"fp12"},` + ok + `}`, 400, `resources.precision "fp12"`},
		{"vocabulary", "POST", "/api/v1/jobs", "member", "", `{"priority":"urgent","resources":{"gpus":1},` + ok + `}`, 400, `priority "urgent"`},
		{"strict JSON", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"resources":{"gpus":64},` + ok + `}`, 400, `field "resources" given twice`},
		{"strict JSON", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1,"gpus":64},` + ok + `}`, 400, `field "resources.gpus" given twice`},
		{"strict JSON", "POST", "/api/v1/jobs", "member", "", `{"Resources":{"gpus":1},` + ok + `}`, 400, `field "Resources": names are case-sensitive; expected "resources"`},
		{"strict JSON", "POST", "/api/v1/jobs", "member", "", `{"resources":{"GPUs":1},` + ok + `}`, 400, `expected "resources.gpus"`},
		{"strict JSON", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"env":{"A":"1","A":"2"},` + ok + `}`, 400, `key "env.A" given twice`},
		{"strict JSON", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},` + ok + `} trailing`, 400, "unexpected data"},
		{"strict JSON", "POST", "/api/v1/jobs", "member", "text/plain", `{"resources":{"gpus":1},` + ok + `}`, 415, "expected application/json"},
		{"strict JSON", "POST", "/api/v1/jobs", "member", "-", `{"resources":{"gpus":1},` + ok + `}`, 415, "expected application/json"},
		{"strict JSON", "POST", "/api/v1/teams", "admin", "application/x-www-form-urlencoded", `name=t`, 415, "expected application/json"},
		{"strict JSON", "POST", "/api/v1/jobs", "member", "", strings.Repeat("[", 100) + strings.Repeat("]", 100), 400, "expected a JSON object"},
		{"strict JSON", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"model":{"name":"m","config":` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat("}", 40) + `},` + ok + `}`, 400, "nested more than"},
		{"planner words", "POST", "/api/v1/jobs", "member", "", `{"model":{"name":"llama-3.1-8b","kv_precision":"int3"},` + ok + `}`, 400, `model.kv_precision "int3"`},
		{"planner words", "POST", "/api/v1/jobs", "member", "", `{"model":{"name":"llama-3.1-8b","mode":"serve"},` + ok + `}`, 400, `model.mode "serve": expected inference or training`},
		{"planner words", "POST", "/api/v1/jobs", "member", "", `{"model":{"name":"llama-3.1-8b","scenario":"server"},` + ok + `}`, 400, `model.scenario "server": give the latency bound, model.tpot_target_ms`},
		{"planner words", "POST", "/api/v1/jobs", "member", "", `{"model":{"name":"llama-3.1-8b","tokens":-1},` + ok + `}`, 400, `model.tokens -1`},
		{"planner words", "GET", "/api/v1/plan?model=llama-3.1-8b&engine=ollama", "member", "", "", 400, `engine "ollama"`},
		{"planner words", "GET", "/api/v1/plan?model=llama-3.1-8b&scenario=server&tpot_target_ms=NaN", "member", "", "", 400, `tpot_target_ms NaN`},
		{"text", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"command":["sh","a\u0000b"]}`, 400, "command[1]"},
		{"containers", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"image":"Not A/Ref::x",` + ok + `}`, 400, `image "Not A/Ref::x": expected an OCI image reference`},
		{"containers", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"image":"busybox","image_pull_policy":"sometimes",` + ok + `}`, 400, `image_pull_policy "sometimes"`},
		{"containers", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"stop_signal":"SIGBOGUS",` + ok + `}`, 400, `stop_signal "SIGBOGUS"`},
		{"containers", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"stop_signal":"SIGKILL",` + ok + `}`, 400, `stop_signal "SIGKILL": cannot be caught`},
		{"containers", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"image":"busybox","mounts":[{"source":"/etc","target":"/etc"}],` + ok + `}`, 400, "mounts[0]: /etc is outside the team's allowed paths"},
		{"containers", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"image":"busybox","mounts":[{"source":"/data","target":"/proc/x"}],` + ok + `}`, 400, `mounts[0].target "/proc/x"`},
		{"containers", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"mounts":[{"source":"/data","target":"/data"}],` + ok + `}`, 400, "mounts: only a container job"},
		{"containers", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"shm_size":"16GiB",` + ok + `}`, 400, "shm_size: only a container job"},
		{"containers", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1,"runtime":"vm"},` + ok + `}`, 400, `resources.runtime "vm"`},
		{"containers", "POST", "/api/v1/teams", "admin", "", `{"name":"t","mounts":[{"path":"relative"}]}`, 400, `mounts[0]`},
		{"containers", "POST", "/api/v1/teams", "admin", "", `{"name":"t","registry_auth":{"nvcr.io":{"username":"u","password":""}}}`, 400, "registry_auth.nvcr.io.password"},
		{"text", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"env":{"A":"\u0000"},` + ok + `}`, 400, "env A"},
		{"text", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"request_id":"r\u0000",` + ok + `}`, 400, "request_id"},
		{"text", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"env":{"` + big[:900<<10-200] + `":"v"},` + ok + `}`, 400, "expected a variable name"},
		{"text", "POST", "/api/v1/jobs", "member", "", `{"name":"` + big[:900<<10-200] + `","resources":{"gpus":1},` + ok + `}`, 400, "(921400 bytes)"},
		{"text", "POST", "/api/v1/teams", "admin", "", `{"name":"` + big[:900<<10-200] + `"}`, 400, "bytes)"},
		{"text", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1,"node_selector":{"rack":"\u001b[2J"}},` + ok + `}`, 400, "control character"},
		{"unsatisfiable", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1,"gpu_models":["h1000"]},` + ok + `}`, 422, `unknown GPU "h1000" (did you mean`},
		{"unsatisfiable", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":64},` + ok + `}`, 422, "needs 64 GPUs"},
		{"unsatisfiable", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1,"gpu_memory_min_bytes":"200GiB"},` + ok + `}`, 422, "gpu_memory_min_bytes"},
		{"unsatisfiable", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1,"node_selector":{"rack":"r12"}},` + ok + `}`, 422, "node_selector rack=r12"},
		{"unsatisfiable", "PUT", "/api/v1/racks/r1", "admin", "", `{"power_budget_watts":1,"nodes":["n1"]}`, 422, `projected draw, 5.16kW, would be over its 1W budget: pass --force`},
		{"paging", "GET", "/api/v1/jobs?next_token=garbage", "member", "", ``, 400, `next_token "garbage"`},
		{"paging", "GET", "/api/v1/jobs?next_token=" + big[:10000], "member", "", ``, 400, "next_token"},
		{"paging", "GET", "/api/v1/queue?next_token=garbage", "member", "", ``, 400, "next_token"},
		{"paging", "GET", "/api/v1/jobs?state=bogus", "member", "", ``, 400, `state "bogus"`},
		{"paging", "GET", "/api/v1/jobs?limit=-1", "member", "", ``, 400, "limit"},
		{"paging", "GET", "/api/v1/nodes?next_token=" + big[:30000], "admin", "", ``, 400, "next_token"},
		{"paging", "GET", "/api/v1/teams?next_token=" + big[:30000], "admin", "", ``, 400, "next_token"},
		{"paging", "GET", "/api/v1/events?since=" + big[:30000], "admin", "", ``, 400, "since"},
		{"paging", "GET", "/api/v1/jobs?limit=" + big[:30000], "member", "", ``, 400, "limit"},
		{"paging", "GET", "/api/v1/usage?from=0000-01-01T00:00:00%2B01:00", "admin", "", ``, 400, "from"},
		{"paging", "GET", "/api/v1/usage?team=" + strings.Repeat("%00", 3000), "member", "", ``, 404, "team"},
		{"paging", "GET", "/api/v1/jobs?state=" + strings.Repeat("queued,", 40000) + "bogus", "member", "", ``, 400, `state "bogus"`},
		{"text", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"command":["echo","a` + "\xff" + `b"]}`, 400, "command[1]: invalid UTF-8"},
		{"text", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"command":["echo","\udc00"]}`, 400, "command[1]: invalid UTF-8 or a lone UTF-16 surrogate"},
		{"text", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"env":{"A` + "\xc3" + `":"1"},` + ok + `}`, 400, "a key in env: invalid UTF-8"},
		{"text", "POST", "/api/v1/stacks", "admin", "", `{"name":"s1","versions":{"driver":"550.54.15\n"}}`, 400, `versions.driver "550.54.15\n": a control character`},
		{"text", "POST", "/api/v1/stacks", "admin", "", `{"name":"s1","versions":{"driver":" 550.54.15"}}`, 400, "versions.driver \" 550.54.15\": leading or trailing space"},
		{"strict query", "GET", "/api/v1/forecast?quantile=2", "admin", "", ``, 400, `unknown query parameter "quantile" (this route takes: gpu_model, horizon, team)`},
		{"strict query", "GET", "/api/v1/plan?model=llama-3.1-8b&context=1000000000000", "member", "", ``, 400, `unknown query parameter "context"`},
		{"strict query", "GET", "/api/v1/audit?x=1", "admin", "", ``, 400, `unknown query parameter "x" (this route takes: since)`},
		{"strict query", "GET", "/api/v1/jobs/j-1?watch=1", "member", "", ``, 400, `unknown query parameter "watch" (this route takes: none)`},
		{"strict query", "GET", "/api/v1/forecast?horizon=28d&horizon=7d", "admin", "", ``, 400, `query parameter "horizon" given 2 times`},
		{"strict query", "GET", "/api/v1/jobs?limit=%zz", "member", "", ``, 400, "query string"},
		{"strict query", "GET", "/api/v1/usage?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z", "admin", "", ``, 400, "is before from"},
		{"strict query", "GET", "/api/v1/nodes/n1/rollups?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z", "member", "", ``, 400, "is before from"},
		{"strict query", "GET", "/api/v1/procure?target=allocation%3C0%25", "admin", "", ``, 400, "allocation: expected a share above 0%"},
		{"strict query", "GET", "/api/v1/procure?lead_time=a100-sxm-80gb=30d&lead_time=a100-sxm-80gb=60d", "admin", "", ``, 400, `lead_time: "a100-sxm-80gb" given twice`},
		{"strict query", "GET", "/api/v1/lifecycle?price=h100-sxm-80gb=30000&price=h100-sxm-80gb=1", "admin", "", ``, 400, `price: "h100-sxm-80gb" given twice`},
		{"labels", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"labels":{"bad key":"x"},` + ok + `}`, 400, `labels "bad key": expected a label key`},
		{"labels", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"labels":{"team":"a b"},` + ok + `}`, 400, `labels.team "a b": expected a label value`},
		{"labels", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"labels":{"team":"` + strings.Repeat("v", 64) + `"},` + ok + `}`, 400, "labels.team"},
		{"labels", "POST", "/api/v1/jobs", "member", "", `{"resources":{"gpus":1},"labels":{"team":1},` + ok + `}`, 400, "labels.team"},
		{"labels", "GET", "/api/v1/jobs?selector=team%3Da%20b", "member", "", ``, 400, `selector "team=a b": value "a b"`},
		{"labels", "GET", "/api/v1/jobs?selector=team+in+(a", "member", "", ``, 400, `selector "team in (a": a '(' without its ')'`},
		{"labels", "GET", "/api/v1/jobs?selector=a&selector=b", "member", "", ``, 400, `query parameter "selector" given 2 times`},
		{"labels", "GET", "/api/v1/jobs?selector=" + big[:30000], "member", "", ``, 400, "selector: 30000 bytes, at most 4096"},
		{"labels", "POST", "/api/v1/jobs/cancel", "member", "", ``, 400, "selector: required (an empty selector would cancel every job"},
		{"labels", "POST", "/api/v1/jobs/cancel?selector=%20", "member", "", ``, 400, "selector: required"},
		{"labels", "POST", "/api/v1/jobs/cancel?selector=team%3Dx&state=succeeded", "member", "", ``, 400, `state "succeeded": expected queued, scheduled or running`},
		{"agent protocol", "POST", "/api/v1/agent/heartbeat", "agent", "", `{"protocol_version":999,"node":"n1"}`, 400, "protocol_version 999: this server speaks 1 to 3"},
		{"agent protocol", "POST", "/api/v1/agent/heartbeat", "agent", "", `{"node":"n1"}`, 400, "protocol_version 0"},
		{"agent protocol", "POST", "/api/v1/agent/heartbeat", "agent", "", `{"protocol_version":2,"node":"n1","samples":[{"uuid":"GPU-x","utilization":7}]}`, 400, "samples[0].utilization 7"},
		{"agent protocol", "POST", "/api/v1/agent/heartbeat", "agent", "", `{"protocol_version":2,"node":"n1","attempts":[{"attempt_id":"a\u0000","state":"running"}]}`, 400, "attempts[0].attempt_id"},
		{"agent protocol", "POST", "/api/v1/agent/register", "join", "", `{"protocol_version":2,"node":"N1!"}`, 400, `node "N1!"`},
		{"agent protocol", "POST", "/api/v1/agent/register", "join", "", `{"protocol_version":2,"node":"n9","gpus":[{"index":0,"uuid":""}]}`, 400, "gpus[0].uuid: required"},
		{"agent protocol", "POST", "/api/v1/agent/register", "join", "", `{"protocol_version":2,"node":"n1"}`, 403, "does not take over an existing node"},
	}
	tokens := map[string]string{"member": member, "admin": testAdmin, "agent": agentCred, "join": jt.Token}
	before := f.jobCount()
	counts := map[string]int{}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%02d %s", i, tc.class), func(t *testing.T) {
			counts[tc.class]++
			status, raw, eb := callAPI(t, srv, tc.method, tc.path, tokens[tc.token], tc.contentType, tc.body)
			if status != tc.status || !strings.Contains(eb.Error, tc.want) {
				t.Fatalf("%s %s: %d %.300s, want %d naming %q", tc.method, tc.path[:min(len(tc.path), 80)], status, raw, tc.status, tc.want)
			}
			if len(raw) > 1200 {
				t.Errorf("error body of %d bytes: it quotes too much of the input", len(raw))
			}
		})
	}
	if n := f.jobCount(); n != before {
		t.Errorf("refused requests stored %d jobs", n-before)
	}
	classes := make([]string, 0, len(counts))
	for c := range counts {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for _, c := range classes {
		t.Logf("bad input %-20s %2d cases refused", c, counts[c])
	}
}

// teamToken creates a team and returns a member token's secret.
func (f *fixture) teamToken(name string) string {
	f.t.Helper()
	f.team(name, nil)
	tok, err := f.srv.CreateToken(f.t.Context(), f.admin, api.TokenRequest{Team: name, Role: "member"})
	if err != nil {
		f.t.Fatal(err)
	}
	return tok.Token
}

// jobCount is how many jobs the store holds.
func (f *fixture) jobCount() int {
	f.t.Helper()
	list, err := f.srv.Jobs(f.t.Context(), f.admin, api.JobQuery{All: true, Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	return len(list.Jobs)
}

// callAPI sends one request to the real handler behind srv and returns
// its status, body and error body (zero unless it is one). contentType ""
// sends application/json, "-" none.
func callAPI(t *testing.T, srv *httptest.Server, method, path, token, contentType, body string) (int, []byte, api.ErrorBody) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	switch contentType {
	case "":
		req.Header.Set("Content-Type", "application/json")
	case "-":
	default:
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var eb api.ErrorBody
	_ = json.Unmarshal(raw, &eb)
	return resp.StatusCode, raw, eb
}

package api

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/audit"
	"github.com/gpufleet/gpufleet/internal/bench"
	"github.com/gpufleet/gpufleet/internal/capacity"
	"github.com/gpufleet/gpufleet/internal/forecast"
	"github.com/gpufleet/gpufleet/internal/rollout"
	"github.com/gpufleet/gpufleet/internal/stack"
)

type openapiDoc struct {
	OpenAPI string                                     `json:"openapi"`
	Paths   map[string]map[string]openapiOperation     `json:"paths"`
	Comps   struct{ Schemas map[string]openapiSchema } `json:"components"`
}

type openapiOperation struct {
	OperationID string `json:"operationId"`
	Auth        string `json:"x-gpufleet-auth"`
	Summary     string `json:"summary"`
}

type openapiSchema struct {
	Properties map[string]json.RawMessage `json:"properties"`
}

func loadOpenAPI(t *testing.T) openapiDoc {
	t.Helper()
	var doc openapiDoc
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	return doc
}

// TestEveryRouteIsDocumented fails when a route is added without docs, or
// docs describe a route the server does not have.
func TestEveryRouteIsDocumented(t *testing.T) {
	doc := loadOpenAPI(t)
	served := map[string]Route{}
	for _, rt := range Routes() {
		key := strings.ToLower(rt.Method) + " " + rt.Pattern
		if _, dup := served[key]; dup {
			t.Errorf("route %s declared twice", key)
		}
		served[key] = rt
	}
	documented := map[string]openapiOperation{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			documented[method+" "+path] = op
		}
	}
	for key, rt := range served {
		op, ok := documented[key]
		if !ok {
			t.Errorf("route %s is not in openapi.json", key)
			continue
		}
		if op.Auth != string(rt.Auth) {
			t.Errorf("%s: openapi x-gpufleet-auth %q, route table %q", key, op.Auth, rt.Auth)
		}
		if op.Summary != rt.Summary {
			t.Errorf("%s: openapi summary %q, route table %q", key, op.Summary, rt.Summary)
		}
	}
	for key := range documented {
		if _, ok := served[key]; !ok {
			t.Errorf("openapi.json documents %s, which no route serves", key)
		}
	}
}

// TestMuxServesExactlyTheRouteTable checks the handler registered every
// route of Routes() and that each one answers (not the mux's 404/405).
func TestMuxServesExactlyTheRouteTable(t *testing.T) {
	svc := newMemService()
	h := NewHandler(svc, svc, svc, svc, HandlerOptions{}).(*handler)
	if diff := cmp.Diff(Routes(), h.registered); diff != "" {
		t.Errorf("registered routes differ from Routes() (-want +got):\n%s", diff)
	}
	for _, rt := range Routes() {
		path := strings.NewReplacer("{id}", "x", "{name}", "n1").Replace(rt.Pattern)
		req := httptest.NewRequest(rt.Method, path, strings.NewReader("{}"))
		_, pattern := h.mux.Handler(req)
		if pattern != rt.Method+" "+rt.Pattern {
			t.Errorf("%s %s routed to %q", rt.Method, path, pattern)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rt.Auth != AuthNone && rec.Code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d, want 401", rt.Method, path, rec.Code)
		}
		// A monitor token opens the monitor routes and no other.
		if rt.Auth == AuthNone || rt.Auth == AuthJoin {
			continue
		}
		req = httptest.NewRequest(rt.Method, path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+monitor)
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if forbidden := rec.Code == http.StatusForbidden; forbidden != (rt.Auth != AuthMonitor) {
			t.Errorf("%s %s (%s) with a monitor token: %d", rt.Method, path, rt.Auth, rec.Code)
		}
	}
}

// TestOpenAPISchemasMatchTypes keeps the hand-written schemas' property
// lists equal to the Go types' JSON fields.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	doc := loadOpenAPI(t)
	types := map[string]any{
		"Job": gpufleet.Job{}, "Resources": gpufleet.Resources{}, "Retries": gpufleet.Retries{}, "Attempt": gpufleet.Attempt{}, "Mechanism": gpufleet.Mechanism{},
		"AttemptNode": gpufleet.AttemptNode{}, "QueueEntry": gpufleet.QueueEntry{}, "RunEstimate": gpufleet.RunEstimate{}, "Node": gpufleet.Node{}, "NodeGPU": gpufleet.NodeGPU{},
		"MIGInstance": gpufleet.MIGInstance{}, "Team": gpufleet.Team{}, "Class": gpufleet.Class{}, "Token": gpufleet.Token{},
		"Event": gpufleet.Event{}, "SubmitRequest": SubmitRequest{}, "ModelRequest": ModelRequest{}, "SubmitResponse": SubmitResponse{},
		"JobList": JobList{}, "QueueList": QueueList{}, "NodeList": NodeList{}, "TeamList": TeamList{}, "ClassList": ClassList{}, "Rack": gpufleet.Rack{}, "PutRackRequest": PutRackRequest{}, "CreateStackRequest": CreateStackRequest{}, "RackList": RackList{}, "WorkCounter": gpufleet.WorkCounter{},
		"TokenList": TokenList{}, "EventList": EventList{}, "TeamRequest": TeamRequest{}, "TokenRequest": TokenRequest{},
		"JoinTokenRequest": JoinTokenRequest{}, "JoinTokenResponse": JoinTokenResponse{}, "UsageReport": UsageReport{}, "PlanResponse": PlanResponse{},
		"TeamUsage": TeamUsage{}, "EnergyRow": EnergyRow{}, "RegisterRequest": RegisterRequest{}, "RegisterResponse": RegisterResponse{},
		"HeartbeatRequest": HeartbeatRequest{}, "HeartbeatResponse": HeartbeatResponse{}, "GPUSample": GPUSample{},
		"AttemptReport": AttemptReport{}, "Assignment": Assignment{}, "StopOrder": StopOrder{}, "Error": ErrorBody{},
		"FaultRequest": FaultRequest{}, "FaultOrder": FaultOrder{}, "PowerCap": PowerCap{}, "PowerCapFailure": PowerCapFailure{}, "LogChunkResponse": LogChunkResponse{},
		"GPULive": gpufleet.GPULive{}, "GPURollup": GPURollup{}, "RollupList": RollupList{}, "ModelUsage": ModelUsage{},
		"GPUEvidence": GPUEvidence{}, "ValidationOrder": ValidationOrder{}, "ValidationResult": ValidationResult{},
		"Stack": gpufleet.Stack{}, "StackList": StackList{}, "StackValidation": gpufleet.StackValidation{}, "StackValidateRequest": StackValidateRequest{},
		"StackFinding": stack.Finding{}, "NodeStack": NodeStack{}, "NodeStackList": NodeStackList{},
		"RolloutRequest": RolloutRequest{}, "Rollout": rollout.Rollout{}, "RolloutNode": rollout.Node{}, "RolloutList": RolloutList{},
		"UpdateOrder": UpdateOrder{}, "UpdateResult": UpdateResult{},
		"BenchMeasurement": bench.Measurement{}, "BenchOrder": BenchOrder{}, "BenchReport": BenchReport{}, "BenchRequest": BenchRequest{},
		"BenchComparison": bench.Comparison{}, "BenchResult": bench.Result{}, "BenchResultList": BenchResultList{},
		"WorkloadBenchRequest": WorkloadBenchRequest{}, "WorkloadJob": bench.WorkloadJob{}, "WorkloadRow": bench.WorkloadRow{},
		"WorkloadBenchReport": bench.WorkloadReport{}, "WorkloadBenchList": WorkloadBenchList{},
		"BenchGroupRun": bench.GroupRun{}, "BenchGroupReport": bench.GroupReport{}, "AllReduceBenchRequest": AllReduceBenchRequest{}, "AllReduceBenchList": AllReduceBenchList{},
		"ForecastSeries": forecast.Series{}, "ForecastParams": forecast.Params{}, "Forecast": forecast.Forecast{}, "ForecastResponse": ForecastResponse{}, "ModelForecast": ModelForecast{},
		"CapacityTarget": capacity.Target{}, "ModelFleet": capacity.ModelFleet{}, "NodeSize": capacity.NodeSize{}, "Rate": capacity.Rate{}, "CapacityReplay": capacity.Replay{}, "ProcureRecommendation": capacity.Recommendation{},
		"ProcureModel": ProcureModel{}, "ProcureResponse": ProcureResponse{}, "LifecycleCandidate": capacity.Candidate{}, "ModelLifecycle": capacity.ModelLifecycle{},
		"LifecycleReport": capacity.LifecycleReport{},
		"AuditReport":     audit.Report{}, "AuditFinding": audit.Finding{}, "AuditSubject": audit.Subject{}, "AuditCheckResult": audit.CheckResult{},
		"AuditBlind": audit.Blind{}, "AuditTeamTotal": audit.TeamTotal{}, "SDTarget": SDTarget{},
		"Explanation": gpufleet.Explanation{}, "FilterCount": gpufleet.FilterCount{}, "RackShortfall": gpufleet.RackShortfall{},
		"QuotaShortfall": gpufleet.QuotaShortfall{}, "StackMismatch": gpufleet.StackMismatch{}, "Blocker": gpufleet.Blocker{},
		"ReservationHold": gpufleet.ReservationHold{}, "Preemption": gpufleet.Preemption{}, "SlowerWait": gpufleet.SlowerWait{},
		"IsolationShortfall": gpufleet.IsolationShortfall{}, "MechanismShortfall": gpufleet.MechanismShortfall{}, "ModelTerms": gpufleet.ModelTerms{},
	}
	for name, v := range types {
		s, ok := doc.Comps.Schemas[name]
		if !ok {
			t.Errorf("schema %s missing", name)
			continue
		}
		want := slices.Sorted(maps.Keys(jsonFields(reflect.TypeOf(v)).exact))
		got := slices.Sorted(maps.Keys(s.Properties))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("schema %s properties (-Go type +openapi.json):\n%s", name, diff)
		}
	}
	for name := range doc.Comps.Schemas {
		if _, ok := types[name]; !ok {
			t.Errorf("schema %s has no Go type in this test", name)
		}
	}
}

func TestOpenAPIServed(t *testing.T) {
	srv, _ := newTestServer(t, HandlerOptions{})
	r := call(t, srv, "GET", "/api/v1/openapi.json", "", "")
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" || !json.Valid([]byte(r.body)) {
		t.Errorf("openapi: %d %v", r.status, r.header)
	}
}

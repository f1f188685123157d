package server

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/scheduler/schedtest"
)

// FuzzSubmitToSchedule follows request bytes the whole way a submission
// goes: the API's strict decoder, the one validation, the job the server
// stores, the check at submit and one scheduling cycle with the job among
// running and queued work, and among the arrivals the ETA expects again.
// Nothing may panic; a request that passes
// validation makes a stored job that passes it too; the cycle places it at
// most once, never against the check's verdict, and accounts for it.
func FuzzSubmitToSchedule(f *testing.F) {
	for _, s := range []string{
		`{"resources":{"gpus":8,"nodes":1,"gpu_models":["h100-sxm-80gb"]},"command":["torchrun","train.py"]}`,
		`{"resources":{"gpus":16,"nodes":2,"interconnect":"nvlink"},"command":["x"],"priority":"training","preemptible":true,"grace":"30s"}`,
		`{"resources":{"gpus":1,"sharing":"mig:1g.10gb"},"command":["x"],"time_limit":"4h"}`,
		`{"resources":{"gpus":3,"sharing":"timeslice:0.25","prefer":"cheapest"},"command":["x"],"estimate":3600}`,
		`{"resources":{"gpus":1,"gpu_memory_min_bytes":"40GiB","min_compute_capability":"9.0","precision":"fp8"},"command":["x"]}`,
		`{"resources":{"gpus":2147483648},"command":["x"]}`, `{"resources":{"gpus":4294967297},"command":["x"]}`,
		`{"resources":{"gpus":1,"node_selector":{"rack":"r12"}},"command":["x"]}`,
		`{"resources":{"gpus":1,"prefer":"efficient","joules_per_unit":{"l4":0.9,"h100-sxm-80gb":1e-300}},"command":["x"],"work":{"metric":"tokens=(\\d+)","unit":"tokens"}}`,
		`{"resources":{"gpus":2,"prefer":"efficient","joules_per_unit":{"":1,"x":-1}},"command":["x"],"work":{"metric":"("}}`,
		`{"resources":{"gpus":524288,"nodes":65536},"command":["x"],"priority":"production"}`,
		`{"resources":{"gpus":1},"resources":{"gpus":2},"command":["x"]}`, `{"Resources":{"gpus":1}}`,
		`{"resources":{"gpus":8,"stack":"prod-550","requires":{"cuda":">=12.4","torch":"2.5"}},"command":["x"]}`,
		`{"resources":{"gpus":1,"requires":{"driver":">=550,<560,!=555.42.02","nccl":"2.21"}},"command":["x"]}`,
		`{"resources":{"gpus":1,"requires":{"pytorch":"2.5","cuda":">>12"}},"command":["x"]}`,
		`{"resources":{"gpus":1,"stack":"NOT A NAME","requires":{"cuda":""}},"command":["x"]}`,
		`{"resources":{"gpus":1,"isolation":"hard","overhead":"<= 5%"},"command":["x"],"priority":"production"}`,
		`{"resources":{"gpus":2,"isolation":"soft","sharing":"timeslice:0.5","overhead":0.1},"command":["x"]}`,
		`{"resources":{"gpus":1,"isolation":"none","overhead":1e308},"command":["x"]}`,
		`{"resources":{"gpus":1,"sharing":"timeslice:0.5"},"command":["x"],"priority":"production"}`,
		`{"resources":{"gpus":1,"isolation":"hard","overhead":"0.001"},"command":["x"]}`,
	} {
		f.Add([]byte(s))
	}
	srv := &Server{cfg: Default()}
	now := schedtest.T0.Add(time.Hour)
	cfg, _ := scheduler.PolicyConfig("gpufleet")
	fleet := scheduler.Input{Now: now, Models: schedtest.Models(), Config: cfg, Classes: map[string][]string{"fast": {"h100-sxm-80gb"}},
		Nodes: []scheduler.Node{
			schedtest.MakeNode("h1", "h100-sxm-80gb", 8).Label("rack", "r1").Stack(gpufleet.StackVersions{gpufleet.StackDriver: "550.54.15", gpufleet.StackCUDA: "12.4", gpufleet.StackTorch: "2.5.1+cu124"}).Obj(),
			schedtest.MakeNode("h2", "h100-sxm-80gb", 8).Label("rack", "r1").Stack(gpufleet.StackVersions{gpufleet.StackDriver: "535.104.05", gpufleet.StackCUDA: "12.2"}).Obj(),
			schedtest.MakeNode("a1", "a100-sxm-80gb", 8).MIG(2, "1g.10gb", 7).Obj(),
			schedtest.MakeNode("l1", "l4", 4).Domains(0).Obj(),
			schedtest.MakeNode("v1", "l4", 2).Domains(0).Label("virtualization", "vgpu:L4-24C").Obj(),
			schedtest.MakeNode("p1", "a100-sxm-80gb", 2).Label("virtualization", "passthrough").Obj(),
		},
		Stacks: map[string]gpufleet.StackVersions{"prod-550": {gpufleet.StackDriver: "550.54.15", gpufleet.StackCUDA: "12.4"}},
		Teams: []scheduler.Team{{Name: "team-a", Weight: 1, BorrowingLimit: -1, Quota: map[string]int{"h100-sxm-80gb": 8}},
			{Name: "team-b", Weight: 2, BorrowingLimit: 0, Quota: map[string]int{"l4": 2}}},
	}
	others := []scheduler.Job{
		schedtest.MakeJob("j-0run", "team-b", 4).Priority(gpufleet.Batch).Preemptible(time.Second).
			Running(30*time.Minute, scheduler.Placement{Node: "h1", GPUs: []string{"h1-g0", "h1-g1", "h1-g2", "h1-g3"}, Fraction: 1}).Obj(),
		schedtest.MakeJob("j-1wait", "team-b", 8).Priority(gpufleet.Training).Obj(),
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := api.DecodeSubmitRequest(bytes.NewReader(body))
		if err == nil {
			err = req.Validate()
		}
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("refused with %v, which does not wrap ErrInvalid", err)
			}
			if len(err.Error()) > 2*gpufleet.QuoteLimit+400 {
				t.Fatalf("a %d-byte error", len(err.Error()))
			}
			return
		}
		if req.Model != nil && req.Resources.GPUs == 0 {
			return // the planner sizes it: admission is the planner's fuzz target
		}
		team := "team-a"
		if len(body)%2 == 1 {
			team = "team-b"
		}
		j, err := srv.jobFromRequest(team, req, now)
		if err != nil {
			if !errors.Is(err, gpufleet.ErrInvalid) {
				t.Fatalf("refused with %v, which does not wrap ErrInvalid", err)
			}
			return
		}
		j.ID = "j-fuzz"
		if err := j.Validate(); err != nil {
			t.Fatalf("a valid request stored as an invalid job: %v", err)
		}
		sj, ok := toSchedJob(j)
		if !ok {
			t.Fatal("a queued job did not reach the scheduler")
		}
		code, _ := scheduler.Feasible(fleet, sj)
		in := fleet
		in.Jobs = append(append([]scheduler.Job{}, others...), sj)
		// The leader passes the jobs it saw arrive, this one among them, and
		// the ETA expects each again (Input.Arrivals); the copies are never
		// shown, which the counts below check.
		early := sj
		early.Submitted = now.Add(-20 * time.Hour)
		in.Arrivals = []scheduler.Job{early, sj}
		out := scheduler.Schedule(in)
		started, pending := 0, 0
		for _, s := range out.Starts {
			if s.Job == "j-fuzz" {
				started++
			}
		}
		for _, p := range out.Pending {
			if p.Job == "j-fuzz" {
				pending++
			}
		}
		if started+pending != 1 {
			t.Fatalf("the job started %d times and is pending %d times", started, pending)
		}
		if started == 1 && code != "" {
			t.Fatalf("the job started although the check at submit said %s", code)
		}
	})
}

// FuzzAgentBodies sends arbitrary bytes as a heartbeat and a registration
// to the real handler and server: the agent protocol is lenient (unknown
// fields are ignored) but validated, so no body may get a 5xx or stop the
// server, and a bad one is a 4xx that names what is wrong.
func FuzzAgentBodies(f *testing.F) {
	for _, s := range []string{
		`{"protocol_version":2,"node":"n1"}`,
		`{"protocol_version":2,"node":"n1","samples":[{"uuid":"GPU-n1-a","utilization":0.5,"power_watts":300,"evidence":{"pcie_gen":5,"nvlink_links_up":18}}]}`,
		`{"protocol_version":2,"node":"n1","attempts":[{"attempt_id":"a-x","job_id":"j-x","state":"running","gpu_seconds":5}]}`,
		`{"protocol_version":2,"node":"n1","gpus":[{"index":0,"uuid":"GPU-n1-a","model":"h100-sxm-80gb","memory_bytes":85899345920}]}`,
		`{"protocol_version":2,"node":"n1","validations":[{"id":"v","passed":true}],"fault_acks":["f"],"missing_gpus":["GPU-n1-b"]}`,
		`{"protocol_version":999}`, `{"protocol_version":2,"samples":[{"uuid":"x","utilization":1e308}]}`, `[]`, `null`, `{`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	fx := newFixtureB(f)
	cred := fx.nodeCred("n1")
	fx.cycle()
	h := api.NewHandler(fx.srv, fx.srv, fx.srv, fx.srv, api.HandlerOptions{})
	f.Fuzz(func(t *testing.T, body []byte, register bool) {
		if !fx.srv.Leader() {
			fx.cycle() // the lease runs on the wall clock; keep leading
		}
		path, tok := "/api/v1/agent/heartbeat", cred
		if register {
			jt, err := fx.srv.CreateJoinToken(t.Context(), fx.admin, api.JoinTokenRequest{})
			if err != nil {
				t.Fatal(err)
			}
			path, tok = "/api/v1/agent/register", jt.Token
		}
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && rec.Body.Len() > 4096 {
			t.Fatalf("a %d-byte error", rec.Body.Len())
		}
		if err := fx.srv.Cycle(t.Context()); err != nil {
			t.Fatalf("the leader cycle after the body: %v", err)
		}
	})
}

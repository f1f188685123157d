package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/scheduler"
	"github.com/gpufleet/gpufleet/internal/store"
)

// TestIsolationPlacement: production jobs need hard isolation unless they
// say otherwise; a hard job waits (isolation) while only a time-sliced
// vGPU node has room, and its attempt says what it got once a bare-metal
// GPU frees; a soft one takes the vGPU.
func TestIsolationPlacement(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	a := f.team("a", nil)
	f.registerLabelled("v1", "a100-sxm-80gb", 2, map[string]string{"virtualization": "vgpu:A100-80C"})
	b1, err := f.srv.Authenticate(ctx, f.registerLabelled("b1", "a100-sxm-80gb", 1, map[string]string{"virtualization": "bare-metal"}))
	if err != nil {
		t.Fatal(err)
	}

	_, err = f.srv.SubmitJob(ctx, a, api.SubmitRequest{Command: []string{"serve"}, Priority: gpufleet.Production,
		Resources: gpufleet.Resources{GPUs: 1, Sharing: gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: 0.5}}})
	if !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "resources.isolation") || !strings.Contains(err.Error(), "production jobs need isolation hard") {
		t.Fatalf("a production time-slice job: %v, want a refusal naming resources.isolation and the class default", err)
	}
	busy := f.submit(a, api.SubmitRequest{Name: "busy", Resources: gpufleet.Resources{GPUs: 1, NodeSelector: map[string]string{"virtualization": "bare-metal"}}})
	f.cycle()
	prod := f.submit(a, api.SubmitRequest{Name: "prod", Priority: gpufleet.Production, Resources: gpufleet.Resources{GPUs: 1}})
	if prod.Resources.Isolation != gpufleet.IsolationHard {
		t.Fatalf("production job stored with isolation %q, want the class default hard", prod.Resources.Isolation)
	}
	soft := f.submit(a, api.SubmitRequest{Name: "soft", Resources: gpufleet.Resources{GPUs: 1, Isolation: gpufleet.IsolationSoft,
		Sharing: gpufleet.Sharing{Kind: gpufleet.TimeSlice, Fraction: 0.5}}})
	f.cycle()
	q, err := f.srv.Queue(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	var pending *gpufleet.QueueEntry
	for i := range q {
		if q[i].ID == prod.ID {
			pending = &q[i]
		}
	}
	if pending == nil || pending.Name != "prod" || pending.GPUs != 1 || pending.ReasonCode != scheduler.ReasonIsolation || !strings.Contains(pending.Reason, "vgpu:A100-80C/exclusive gives soft") {
		t.Fatalf("production job pending as %+v, want reason isolation naming the vGPU", pending)
	}
	if j := f.job(soft.ID); j.State != gpufleet.JobScheduled && j.State != gpufleet.JobRunning {
		t.Fatalf("soft job %s, want placed on the vGPU node", j.State)
	} else if m := j.Attempts[0].Mechanism; m == nil || m.Name != "vgpu:A100-80C/timeslice" || m.Isolation() != gpufleet.IsolationSoft {
		t.Errorf("soft job's mechanism %+v", m)
	}
	zero := 0
	done := api.AttemptReport{AttemptID: f.job(busy.ID).Attempts[0].ID, JobID: busy.ID, State: gpufleet.AttemptSucceeded, ExitCode: &zero}
	if _, err := f.srv.Heartbeat(ctx, b1, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: "b1", Attempts: []api.AttemptReport{done}}); err != nil {
		t.Fatal(err)
	}
	f.cycle()
	j := f.job(prod.ID)
	if len(j.Attempts) == 0 || j.Attempts[0].Node != "b1" {
		t.Fatalf("production job after b1 freed: %+v", j.Attempts)
	}
	if m := j.Attempts[0].Mechanism; m == nil || m.Isolation() != gpufleet.IsolationHard || m.Name != "bare-metal/exclusive" {
		t.Errorf("production job's mechanism %+v, want bare-metal/exclusive, hard", m)
	}
}

// TestVirtualizationLabelIsValidated: a node cannot register a
// virtualization the scheduler would not read.
func TestVirtualizationLabelIsValidated(t *testing.T) {
	f := newFixture(t)
	jt, err := f.srv.CreateJoinToken(t.Context(), f.admin, api.JoinTokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.srv.Register(t.Context(), jt.Token, api.RegisterRequest{ProtocolVersion: 1, Node: "x",
		Labels: map[string]string{"virtualization": "kvm"}})
	if !errors.Is(err, gpufleet.ErrInvalid) || !strings.Contains(err.Error(), "virtualization") {
		t.Errorf("virtualization=kvm registered: %v", err)
	}
}

// TestFaultsAreEvents: an injected fault and its clearing are in the event
// log, read beside the health findings they cause.
func TestFaultsAreEvents(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	f.registerLabelled("s1", "h100-sxm-80gb", 2, map[string]string{"backend": "sim"})
	gpu := 1
	if _, err := f.srv.InjectFault(ctx, f.admin, "s1", api.FaultRequest{GPU: &gpu, XID: 79}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.ClearFaults(ctx, f.admin, "s1", 1); err != nil {
		t.Fatal(err)
	}
	evs, err := f.st.Events(ctx, store.EventFilter{Object: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		if strings.HasPrefix(e.Kind, "node.fault") {
			kinds = append(kinds, e.Kind+": "+e.Detail)
		}
	}
	if len(kinds) != 2 || !strings.Contains(kinds[0], "node.fault_injected: injected XID 79 into gpu 1") || !strings.HasPrefix(kinds[1], "node.fault_cleared") {
		t.Errorf("fault events %q", kinds)
	}
}

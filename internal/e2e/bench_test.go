package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/bench"
)

// TestBenchFlagsAndGatesADegradedCard runs real agents on simulated GPUs:
// each measures its GPUs before joining, a card whose memory is injected
// slow is flagged degraded after a bench run on its cordoned node, the
// return-to-service check fails on the benchmark while it stays slow and
// passes once it is fixed.
func TestBenchFlagsAndGatesADegradedCard(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	p := startServer(t, t.TempDir(), nil)
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	for i := range 3 {
		startAgent(t, p, f.admin, fmt.Sprintf("b%d", i), "h100-sxm-80gb:2")
	}
	eventually(t, 30*time.Second, "join figures of six GPUs", func() error {
		list, err := f.admin.BenchResults(ctx, api.BenchQuery{GPUModel: "h100-sxm-80gb"})
		if err != nil {
			return err
		}
		gpus := map[string]bool{}
		for _, r := range list.Results {
			if r.Trigger == bench.TriggerJoin && r.Name == "copy" {
				gpus[r.UUID] = true
			}
		}
		if len(gpus) != 6 {
			return fmt.Errorf("join copy figures of %d GPUs", len(gpus))
		}
		return nil
	})
	gpu := 1
	if _, err := f.admin.InjectFault(ctx, "b2", api.FaultRequest{GPU: &gpu, Kind: "slow-memory"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.NodeAction(ctx, "b2", api.Cordon); err != nil {
		t.Fatal(err)
	}
	// The CLI orders the bench through the server and waits for it.
	out, err := exec.Command(binary(t), "bench", "run", "b2", "--tests", "copy", "--timeout", "30s", "--server", p.url, "--token", adminToken).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "DEGRADED") {
		t.Fatalf("gpufleet bench run: %v\n%s", err, out)
	}
	eventually(t, 20*time.Second, "b2 gpu 1 degraded", func() error {
		n, err := f.admin.Node(ctx, "b2")
		if err != nil || n.GPUs[1].Health != gpufleet.Degraded || !strings.Contains(n.GPUs[1].Reason, "copy at 0.6") {
			return fmt.Errorf("b2 %+v, %v", n.GPUs, err)
		}
		return nil
	})

	repair := func() {
		t.Helper()
		if _, err := f.admin.NodeAction(ctx, "b2", api.Drain); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "b2 in repair", func() error {
			if n, err := f.admin.Node(ctx, "b2"); err != nil || n.State != gpufleet.NodeRepairing {
				return fmt.Errorf("b2 %s, %v", n.State, err)
			}
			return nil
		})
		if _, err := f.admin.NodeAction(ctx, "b2", api.Repaired); err != nil {
			t.Fatal(err)
		}
	}
	repair()
	eventually(t, 30*time.Second, "validation fails on the benchmark", func() error {
		n, err := f.admin.Node(ctx, "b2")
		if err != nil || n.State != gpufleet.NodeRepairing || !strings.Contains(n.StateReason, "benchmark under the gate: GPU 1: copy") {
			return fmt.Errorf("b2 %s (%s), %v", n.State, n.StateReason, err)
		}
		return nil
	})
	if _, err := f.admin.ClearFaults(ctx, "b2", 1); err != nil {
		t.Fatal(err)
	}
	repair()
	eventually(t, 30*time.Second, "validation passes", func() error {
		n, err := f.admin.Node(ctx, "b2")
		if err != nil || n.State != gpufleet.NodeReady || n.Health != gpufleet.Healthy {
			return fmt.Errorf("b2 %s %s (%s), %v", n.State, n.Health, n.HealthReason, err)
		}
		return nil
	})
}

// TestWorkloadBenchAcrossThreeModels runs the dev stand-in workload on
// H100, A100 and L4 agents through the scheduler with the CLI and reads
// the stored report.
func TestWorkloadBenchAcrossThreeModels(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	p := startServer(t, t.TempDir(), nil)
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	for _, m := range []string{"h100-sxm-80gb", "a100-sxm-80gb", "l4"} {
		startAgent(t, p, f.admin, "w-"+strings.Split(m, "-")[0], m+":1")
	}
	eventually(t, 20*time.Second, "three nodes", func() error {
		ns, err := f.admin.Nodes(ctx)
		if err != nil || len(ns) != 3 {
			return fmt.Errorf("nodes %d, %v", len(ns), err)
		}
		return nil
	})
	script, err := filepath.Abs("../../examples/bench/sim-decode.sh")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary(t), "bench", "workload", "--gpu-models", "a100-sxm-80gb,h100-sxm-80gb,l4", "--metric", `decode throughput: ([0-9.]+) tokens/s`,
		"--unit", "tokens", "--model", "llama-3.1-8b", "--env", "SECONDS_TO_RUN=3", "--sim-load", "memory", "-o", "json",
		"--server", p.url, "--token", f.tokens["team-a"], "--", script).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("gpufleet bench workload: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"done": true`) {
		t.Fatalf("report not done:\n%s", out)
	}
	list, err := f.members["team-a"].WorkloadBenches(ctx)
	if err != nil || len(list) != 1 || len(list[0].Rows) != 3 {
		t.Fatalf("stored workload benches: %+v, %v", list, err)
	}
	for _, r := range list[0].Rows {
		if r.State != "succeeded" || r.Throughput == nil || r.USDPerMillion == nil || r.JoulesPerUnit == nil || r.Predicted == nil {
			t.Errorf("%s row: %+v", r.GPUModel, r)
		}
	}
	// Memory-bound decode: H100 ahead of A100 ahead of L4, as their bandwidths.
	tp := map[string]float64{}
	for _, r := range list[0].Rows {
		if r.Throughput != nil {
			tp[r.GPUModel] = *r.Throughput
		}
	}
	if !(tp["h100-sxm-80gb"] > tp["a100-sxm-80gb"] && tp["a100-sxm-80gb"] > tp["l4"]) {
		t.Errorf("throughputs %v", tp)
	}
}

// TestBenchLevels runs the medium and long levels through the CLI on real
// agents with simulated GPUs: medium's memory patterns are judged against
// the fleet median of the same figure; long's stress fails a power-braked
// card by its throttle reasons and degrades it; once the fault is cleared,
// marking the cordoned node repaired re-runs the stress in its validation
// and returns it to service, healthy.
func TestBenchLevels(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	p := startServer(t, t.TempDir(), nil)
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	for i := range 3 {
		startAgent(t, p, f.admin, fmt.Sprintf("v%d", i), "h100-sxm-80gb:2")
	}
	eventually(t, 30*time.Second, "three nodes ready", func() error {
		ns, err := f.admin.Nodes(ctx)
		if err != nil || len(ns) != 3 {
			return fmt.Errorf("nodes %d, %v", len(ns), err)
		}
		for _, n := range ns {
			if n.State != gpufleet.NodeReady {
				return fmt.Errorf("%s %s", n.Name, n.State)
			}
		}
		return nil
	})
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(binary(t), append(args, "--server", p.url, "--token", adminToken)...).CombinedOutput()
		return string(out), err
	}
	for _, n := range []string{"v0", "v1"} {
		if _, err := f.admin.NodeAction(ctx, n, api.Cordon); err != nil {
			t.Fatal(err)
		}
		if out, err := cli("bench", "run", n, "--level", "medium", "--timeout", "30s"); err != nil || !strings.Contains(out, "memory") {
			t.Fatalf("bench run %s --level medium: %v\n%s", n, err, out)
		}
	}
	gpu := 0
	if _, err := f.admin.InjectFault(ctx, "v2", api.FaultRequest{GPU: &gpu, Kind: "power-brake"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.NodeAction(ctx, "v2", api.Cordon); err != nil {
		t.Fatal(err)
	}
	out, err := cli("bench", "run", "v2", "--level", "long", "--timeout", "30s")
	if err != nil || !strings.Contains(out, "stress-bf16") || !strings.Contains(out, "FAILED: throttled (hw_power_brake, hw_slowdown)") {
		t.Fatalf("bench run v2 --level long: %v\n%s", err, out)
	}
	// The memory figures of v2 are judged against v0's and v1's.
	list, err := f.admin.BenchResults(ctx, api.BenchQuery{Node: "v2"})
	if err != nil {
		t.Fatal(err)
	}
	judged := 0
	for _, r := range list.Results {
		if r.Name == "memory" && r.Fleet != nil && r.Fleet.Fraction != nil && r.Fleet.Peers >= 4 {
			judged++
		}
	}
	if judged != 2 {
		t.Errorf("%d of v2's memory figures judged against the fleet median, want 2: %+v", judged, list.Results)
	}
	// The brake also halves its products; the health reason names the
	// first of its figures and counts the others (the stress among them).
	eventually(t, 20*time.Second, "v2 gpu 0 degraded by its figures", func() error {
		n, err := f.admin.Node(ctx, "v2")
		if err != nil || n.GPUs[0].Health != gpufleet.Degraded || !strings.Contains(n.GPUs[0].Reason, "more figures") {
			return fmt.Errorf("v2 %+v, %v", n.GPUs, err)
		}
		return nil
	})
	if _, err := f.admin.ClearFaults(ctx, "v2", 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "v2 marked repaired", func() error {
		_, err := f.admin.NodeAction(ctx, "v2", api.Repaired)
		return err
	})
	eventually(t, 30*time.Second, "v2 back in service, healthy", func() error {
		n, err := f.admin.Node(ctx, "v2")
		if err != nil || n.State != gpufleet.NodeReady || n.Health != gpufleet.Healthy || n.GPUs[0].Health != gpufleet.Healthy {
			return fmt.Errorf("v2 %s %s (%s), gpu 0 %s, %v", n.State, n.Health, n.HealthReason, n.GPUs[0].Health, err)
		}
		return nil
	})
}

// TestAllReduceAcrossNodes runs the all-reduce across nodes through the
// CLI on real agents with simulated GPUs: pairs of nodes and a rack, the
// fleet-median judgement against the runs of the same shape, a node with
// three of its four network rails down turning its run's members
// degraded, and a passing run clearing them once the rails are back.
func TestAllReduceAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	p := startServer(t, t.TempDir(), nil)
	f := setupTeams(t, p, "team-a")
	ctx := t.Context()
	names := []string{"x0", "x1", "x2", "x3", "x4", "x5"}
	for _, n := range names {
		startAgent(t, p, f.admin, n, "h100-sxm-80gb:4")
	}
	eventually(t, 30*time.Second, "six ready nodes", func() error {
		ns, err := f.admin.Nodes(ctx)
		ready := 0
		for _, n := range ns {
			if n.State == gpufleet.NodeReady {
				ready++
			}
		}
		if err != nil || ready != 6 {
			return fmt.Errorf("%d ready, %v", ready, err)
		}
		return nil
	})
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(binary(t), append(args, "--server", p.url, "--token", adminToken)...).CombinedOutput()
		return string(out), err
	}
	// Refused before any node is touched: a ready node, one node.
	if out, err := cli("bench", "allreduce", "x0", "x1"); err == nil || !strings.Contains(out, "x0 is ready") || !strings.Contains(out, "cordon them first") {
		t.Fatalf("all-reduce on ready nodes: %v\n%s", err, out)
	}
	if out, err := cli("bench", "allreduce", "x0"); err == nil || !strings.Contains(out, "needs 2 to") {
		t.Fatalf("all-reduce on one node: %v\n%s", err, out)
	}
	for _, n := range names {
		if _, err := f.admin.NodeAction(ctx, n, api.Cordon); err != nil {
			t.Fatal(err)
		}
	}
	for gpu := range 3 {
		if _, err := f.admin.InjectFault(ctx, "x5", api.FaultRequest{GPU: &gpu, Kind: "nic-down"}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) bench.GroupReport {
		t.Helper()
		out, err := cli(append([]string{"bench", "allreduce", "-o", "json", "--timeout", "60s"}, args...)...)
		if err != nil {
			t.Fatalf("gpufleet bench allreduce %v: %v\n%s", args, err, out)
		}
		var rep bench.GroupReport
		if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &rep); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if rep.State != bench.GroupDone || rep.Figure == nil || rep.Fleet == nil {
			t.Fatalf("run %v: %+v", args, rep)
		}
		return rep
	}
	first := run("x0", "x1")
	if first.Figure.Name != "allreduce-2x4" || first.Fabric != bench.FabricNetwork || first.Fleet.Fraction != nil {
		t.Errorf("first run: %s over %s, fraction %v: want allreduce-2x4 over the network, no baseline yet", first.Figure.Name, first.Fabric, first.Fleet.Fraction)
	}
	run("x2", "x3")
	slow := run("x4", "x5")
	if slow.Fleet.Peers != 2 || !slow.Fleet.Degraded || *slow.Fleet.Fraction > 0.3 {
		t.Errorf("slow run against the fleet: %+v", slow.Fleet)
	}
	// Every member of the slow run is degraded with the run's evidence;
	// the others are not.
	eventually(t, 20*time.Second, "x4 and x5 degraded by the run", func() error {
		for _, n := range names {
			nd, err := f.admin.Node(ctx, n)
			if err != nil {
				return err
			}
			want := gpufleet.Healthy
			if n == "x4" || n == "x5" {
				want = gpufleet.Degraded
				if !strings.Contains(nd.HealthReason, "allreduce-2x4 at 0.") {
					return fmt.Errorf("%s: %s (%s)", n, nd.Health, nd.HealthReason)
				}
			}
			if nd.Health != want {
				return fmt.Errorf("%s: %s (%s), want %s", n, nd.Health, nd.HealthReason, want)
			}
		}
		return nil
	})
	// The table a person reads.
	if out, err := cli("bench", "allreduce", "x4", "x5"); err != nil || !strings.Contains(out, "DEGRADED") || !strings.Contains(out, "2x4") {
		t.Errorf("table: %v\n%s", err, out)
	}
	// A rack's nodes, in one run of another shape: judged on its own.
	if _, err := f.admin.PutRack(ctx, api.PutRackRequest{Rack: gpufleet.Rack{Name: "rx", PowerBudgetWatts: 100000, Nodes: []string{"x3", "x1", "x0", "x2"}}}); err != nil {
		t.Fatal(err)
	}
	rack := run("--rack", "rx")
	if !slices.Equal(rack.Nodes, []string{"x0", "x1", "x2", "x3"}) || rack.Figure.Name != "allreduce-4x4" || rack.Figure.GPUs != 16 || rack.Fleet.Peers != 0 {
		t.Errorf("rack run: nodes %v, %s over %d GPUs, %d peers", rack.Nodes, rack.Figure.Name, rack.Figure.GPUs, rack.Fleet.Peers)
	}
	// The rails back: a passing run clears both members.
	for gpu := range 3 {
		if _, err := f.admin.ClearFaults(ctx, "x5", gpu); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 20*time.Second, "x5's rails back", func() error {
		rep := run("x4", "x5")
		if rep.Fleet.Degraded {
			return fmt.Errorf("still %.2f of the median", *rep.Fleet.Fraction)
		}
		return nil
	})
	eventually(t, 20*time.Second, "x4 and x5 healthy again", func() error {
		for _, n := range []string{"x4", "x5"} {
			if nd, err := f.admin.Node(ctx, n); err != nil || nd.Health != gpufleet.Healthy {
				return fmt.Errorf("%s: %s (%s), %v", n, nd.Health, nd.HealthReason, err)
			}
		}
		return nil
	})
	// The figures are in each member's history, listed like any other.
	list, err := f.admin.BenchResults(ctx, api.BenchQuery{Node: "x5"})
	if err != nil || !slices.ContainsFunc(list.Results, func(r bench.Result) bool { return r.Name == "allreduce-2x4" && r.Nodes == 2 }) {
		t.Errorf("x5's figures lack the run: %v", err)
	}
}

package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// waitUpdate waits for an update's result.
func waitUpdate(t *testing.T, a *Agent, key string) api.UpdateResult {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		a.mu.Lock()
		r := a.updates[key]
		a.mu.Unlock()
		if r != nil && r.Versions != nil {
			return *r
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("update %s did not finish", key)
	return api.UpdateResult{}
}

// TestUpdateOrders: a simulated node takes an order's versions (the
// driver and CUDA on its GPUs, the rest as its software) and reports
// them; an order is run once, also by an agent started again on the same
// data directory; a real node runs the operator's command with the
// target versions in its environment.
func TestUpdateOrders(t *testing.T) {
	be, err := simgpu.New([]simgpu.Spec{{Model: "l4", Count: 1}}, simgpu.WithNodeName("n1"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := New(Config{Name: "n1", DataDir: dir, Backend: "sim"}, be, &fakePlane{}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := a.discover(ctx); err != nil {
		t.Fatal(err)
	}
	order := api.UpdateOrder{Key: "ro-1/n1/1", Versions: map[string]string{"driver": "555.42.02", "cuda": "12.5", "torch": "2.6.0+cu124"}}
	a.apply(ctx, api.HeartbeatResponse{Update: []api.UpdateOrder{order}})
	res := waitUpdate(t, a, order.Key)
	if !res.OK || res.Versions["driver"] != "555.42.02" || res.Versions["cuda"] != "12.5" || res.Versions["torch"] != "2.6.0+cu124" || res.Versions["gsp_firmware"] != "555.42.02" {
		t.Fatalf("result %+v", res)
	}
	a.mu.Lock()
	sent := a.updateResults(a.updateAsked)
	a.mu.Unlock()
	if len(sent) != 1 || sent[0].Key != order.Key {
		t.Errorf("results sent %+v, want the order's while the server asks", sent)
	}
	// The same order again, and to an agent started again: not run twice.
	be.SetVersions("550.54.15", "12.4")
	a.apply(ctx, api.HeartbeatResponse{Update: []api.UpdateOrder{order}})
	b, err := New(Config{Name: "n1", DataDir: dir, Backend: "sim"}, be, &fakePlane{}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	b.apply(ctx, api.HeartbeatResponse{Update: []api.UpdateOrder{order}})
	time.Sleep(50 * time.Millisecond)
	if v, _ := be.Versions(ctx); v.Driver != "550.54.15" {
		t.Errorf("the order ran again: driver %s", v.Driver)
	}

	// A node that is not simulated runs the operator's command.
	out := filepath.Join(t.TempDir(), "ran")
	c, err := New(Config{Name: "n2", DataDir: t.TempDir(), Backend: "nvml"}, be, &fakePlane{}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	cmd := api.UpdateOrder{Key: "ro-2/n2/1", Command: "echo $GPUFLEET_STACK_DRIVER > " + out, Versions: map[string]string{"driver": "560.28.03"}}
	c.apply(ctx, api.HeartbeatResponse{Update: []api.UpdateOrder{cmd}})
	if res := waitUpdate(t, c, cmd.Key); !res.OK {
		t.Fatalf("command update %+v", res)
	}
	if b, err := os.ReadFile(out); err != nil || strings.TrimSpace(string(b)) != "560.28.03" {
		t.Errorf("the command saw %q, %v", b, err)
	}
	bad := api.UpdateOrder{Key: "ro-2/n2/2", Command: "exit 7", Versions: map[string]string{"driver": "560.28.03"}}
	c.apply(ctx, api.HeartbeatResponse{Update: []api.UpdateOrder{bad}})
	if res := waitUpdate(t, c, bad.Key); res.OK || !strings.Contains(res.Detail, "update command failed") {
		t.Errorf("a failing command: %+v", res)
	}
}

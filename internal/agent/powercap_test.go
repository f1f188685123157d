package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// TestPowerCapsApplyAndRestore: on simulated GPUs the agent sets each cap
// the server asks for within the GPU's constraints, puts a GPU back at its
// default when its cap is withdrawn, and after a restart puts back the
// GPUs a previous run left capped. A backend that refuses caps is
// reported as unable, and nothing is set.
func TestPowerCapsApplyAndRestore(t *testing.T) {
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	be, err := simgpu.New([]simgpu.Spec{{Model: "h100-sxm-80gb", Count: 3}}, simgpu.WithNodeName("n1"))
	if err != nil {
		t.Fatal(err)
	}
	devs, err := be.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	limit := func(i int) float64 {
		l, err := be.PowerLimits(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		return l.CurrentWatts
	}
	path := filepath.Join(t.TempDir(), "power-caps.json")
	c := newPowerCaps(be, path, log)
	c.start(ctx, devs)
	if !c.can() {
		t.Fatal("simulated GPUs: cannot cap")
	}
	c.apply(ctx, []api.PowerCap{{GPU: devs[0].UUID, Watts: 450}, {GPU: devs[1].UUID, Watts: 50}, {GPU: "GPU-elsewhere", Watts: 300}}, devs)
	if diff := cmp.Diff(map[string]float64{devs[0].UUID: 450, devs[1].UUID: 175}, c.inForce()); diff != "" {
		t.Errorf("caps in force (-want +got); 50 W is raised to the 175 W minimum:\n%s", diff)
	}
	if limit(0) != 450 || limit(1) != 175 || limit(2) != 700 {
		t.Errorf("limits %v %v %v W, want 450 175 700", limit(0), limit(1), limit(2))
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("power-caps.json: %v", err)
	}
	// The job on GPU 1 left: its cap is withdrawn.
	c.apply(ctx, []api.PowerCap{{GPU: devs[0].UUID, Watts: 450}}, devs)
	if limit(1) != 700 || limit(0) != 450 {
		t.Errorf("after GPU 1's cap was withdrawn: limits %v %v W, want 450 700", limit(0), limit(1))
	}
	// A restarted agent puts back what the last run capped.
	again := newPowerCaps(be, path, log)
	again.start(ctx, devs)
	if limit(0) != 700 || len(again.inForce()) != 0 {
		t.Errorf("after a restart: GPU 0 at %v W, caps %v: want its default and none", limit(0), again.inForce())
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("power-caps.json after a restart with nothing capped: %v", err)
	}
	// Caps off on the server (an empty list): nothing stays capped.
	again.apply(ctx, []api.PowerCap{{GPU: devs[2].UUID, Watts: 300}}, devs)
	again.apply(ctx, nil, devs)
	if limit(2) != 700 || len(again.takeFailures()) != 0 {
		t.Errorf("caps withdrawn: GPU 2 at %v W", limit(2))
	}

	refusing, err := simgpu.New([]simgpu.Spec{{Model: "h100-sxm-80gb", Count: 1}}, simgpu.WithoutPowerCaps())
	if err != nil {
		t.Fatal(err)
	}
	rdevs, _ := refusing.Devices(ctx)
	r := newPowerCaps(refusing, filepath.Join(t.TempDir(), "power-caps.json"), log)
	r.start(ctx, rdevs)
	r.apply(ctx, []api.PowerCap{{GPU: rdevs[0].UUID, Watts: 400}}, rdevs)
	if r.can() || len(r.inForce()) != 0 || len(r.takeFailures()) != 0 {
		t.Errorf("refusing backend: can %v, caps %v", r.can(), r.inForce())
	}
}

// failingCapper is simulated GPUs whose SetPowerLimit fails after the
// probe, as a driver that refuses a value.
type failingCapper struct {
	*simgpu.Backend
	calls int
}

func (f *failingCapper) SetPowerLimit(ctx context.Context, i int, w float64) error {
	f.calls++
	if f.calls > 1 {
		return errors.New("driver refused")
	}
	return f.Backend.SetPowerLimit(ctx, i, w)
}

var _ gpu.PowerCapper = (*failingCapper)(nil)

// TestPowerCapFailureIsReportedOnce: a cap the backend refuses is logged
// and reported in the next heartbeat, once, and not tried again while the
// server asks the same.
func TestPowerCapFailureIsReportedOnce(t *testing.T) {
	ctx := t.Context()
	sb, err := simgpu.New([]simgpu.Spec{{Model: "h100-sxm-80gb", Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	be := &failingCapper{Backend: sb}
	devs, _ := be.Devices(ctx)
	c := newPowerCaps(be, filepath.Join(t.TempDir(), "power-caps.json"), slog.New(slog.NewTextHandler(t.Output(), nil)))
	c.start(ctx, devs)
	caps := []api.PowerCap{{GPU: devs[0].UUID, Watts: 400}}
	c.apply(ctx, caps, devs)
	c.apply(ctx, caps, devs)
	f := c.takeFailures()
	if len(f) != 1 || f[0].GPU != devs[0].UUID || f[0].Watts != 400 || be.calls != 2 {
		t.Errorf("failures %+v after %d calls: want one, tried once", f, be.calls)
	}
	if len(c.takeFailures()) != 0 {
		t.Error("failures reported twice")
	}
}

// TestAgentCapsThroughHeartbeats: the agent reports power-caps=true in
// its registration's labels on simulated GPUs, sets the caps a heartbeat
// answer gives, and puts the GPU back at its default when the next answer
// leaves the cap out; its samples then show the limit.
func TestAgentCapsThroughHeartbeats(t *testing.T) {
	be, err := simgpu.New([]simgpu.Spec{{Model: "h100-sxm-80gb", Count: 2}}, simgpu.WithNodeName("n1"))
	if err != nil {
		t.Fatal(err)
	}
	cp := &fakePlane{}
	a, err := New(Config{Name: "n1", DataDir: t.TempDir(), Backend: "sim", JoinToken: "j"}, be, cp, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := a.discover(ctx); err != nil {
		t.Fatal(err)
	}
	a.caps.start(ctx, a.devices)
	if l := a.labels(); l["power-caps"] != "true" {
		t.Errorf("labels %v: want power-caps=true", l)
	}
	if err := a.register(ctx); err != nil {
		t.Fatal(err)
	}
	uuid := a.devices[1].UUID
	cp.resp = api.HeartbeatResponse{PowerCaps: []api.PowerCap{{GPU: uuid, Watts: 420}}}
	if err := a.beat(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := be.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if *s[1].PowerLimitWatts != 420 || *s[0].PowerLimitWatts != 700 {
		t.Errorf("limits after the cap: %v and %v W, want 700 and 420", *s[0].PowerLimitWatts, *s[1].PowerLimitWatts)
	}
	if err := a.beat(ctx); err != nil { // the fake answers nothing now: the cap is withdrawn
		t.Fatal(err)
	}
	if s, _ := be.Sample(ctx); *s[1].PowerLimitWatts != 700 {
		t.Errorf("limit after the cap was withdrawn: %v W, want the default 700", *s[1].PowerLimitWatts)
	}
}

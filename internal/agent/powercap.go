package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

// powerCaps sets the power limits the server asks for
// (api.HeartbeatResponse.PowerCaps) on a backend that can
// (gpu.PowerCapper), and puts a GPU back to its default limit when its cap
// is withdrawn. What it capped is kept in DATA_DIR/power-caps.json, so
// that an agent restarted after a crash puts those GPUs back at start: the
// server gives the caps again to the jobs still measured there. A failure
// to set is logged and reported to the server once (a node event), never
// fatal.
type powerCaps struct {
	be   gpu.PowerCapper // nil: the backend cannot cap
	path string
	log  *slog.Logger

	mu sync.Mutex
	// able is whether caps can be set here (the start's probe).
	able bool
	// set is the caps in force, by GPU UUID; limits each GPU's limits,
	// read once; failed the caps that failed, not tried again while the
	// server asks the same.
	set      map[string]cappedGPU
	limits   map[string]gpu.PowerLimits
	failed   map[string]float64
	failures []api.PowerCapFailure
}

// cappedGPU is a cap in force: the GPU's index and the limit set.
type cappedGPU struct {
	Index int     `json:"index"`
	Watts float64 `json:"watts"`
}

func newPowerCaps(be gpu.Backend, path string, log *slog.Logger) *powerCaps {
	c := &powerCaps{path: path, log: log, set: map[string]cappedGPU{}, limits: map[string]gpu.PowerLimits{}, failed: map[string]float64{}}
	if pc, ok := be.(gpu.PowerCapper); ok {
		c.be = pc
	}
	return c
}

// start puts back the GPUs a previous run capped (power-caps.json) and
// finds whether caps can be set here: the first GPU's limits are read and
// its limit set to the one in force (no change), which needs what a cap
// needs (root with NVML, a board that allows it).
func (c *powerCaps) start(ctx context.Context, devs []gpu.Device) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.be == nil {
		return
	}
	if data, err := os.ReadFile(c.path); err == nil {
		var left map[string]cappedGPU
		if err := json.Unmarshal(data, &left); err != nil {
			c.log.Warn("ignoring an unreadable power-caps file", "path", c.path, "err", err)
		}
		for _, uuid := range slices.Sorted(maps.Keys(left)) {
			c.set[uuid] = left[uuid]
		}
		for _, uuid := range slices.Sorted(maps.Keys(c.set)) {
			if err := c.restoreLocked(ctx, uuid); err != nil {
				c.log.Warn("putting back the default power limit a previous run changed", "gpu", uuid, "err", err)
			}
		}
		c.saveLocked()
	}
	if len(devs) == 0 {
		return
	}
	d := devs[0]
	l, err := c.be.PowerLimits(ctx, d.Index)
	if err == nil {
		cur := l.CurrentWatts
		if cur == 0 {
			cur = l.DefaultWatts
		}
		err = c.be.SetPowerLimit(ctx, d.Index, l.Clamp(cur))
	}
	switch {
	case err == nil:
		c.able = true
	case errors.Is(err, gpu.ErrNoPowerCaps):
		c.log.Info("gpu power limits cannot be set here: the server holds budgets without caps", "err", err)
	default:
		c.log.Warn("probing gpu power limits", "err", err)
	}
}

// can reports whether caps can be set here (the label power-caps).
func (c *powerCaps) can() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.able
}

// apply makes the caps in force those the server asks for: each GPU of
// caps at its watts within its constraints, every other GPU capped before
// back at its default limit. devs maps UUIDs to indexes.
func (c *powerCaps) apply(ctx context.Context, caps []api.PowerCap, devs []gpu.Device) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.able {
		return
	}
	index := make(map[string]int, len(devs))
	for _, d := range devs {
		index[d.UUID] = d.Index
	}
	want := map[string]float64{}
	for _, pc := range caps {
		if _, ok := index[pc.GPU]; ok && pc.Watts > 0 {
			want[pc.GPU] = pc.Watts
		}
	}
	changed := false
	for _, uuid := range slices.Sorted(maps.Keys(c.set)) {
		if _, ok := want[uuid]; ok {
			continue
		}
		if err := c.restoreLocked(ctx, uuid); err != nil {
			c.failLocked(uuid, 0, "putting back the default limit: "+err.Error())
		}
		changed = true
	}
	for uuid := range c.failed {
		if want[uuid] != c.failed[uuid] {
			delete(c.failed, uuid) // asked otherwise now: try again
		}
	}
	for _, uuid := range slices.Sorted(maps.Keys(want)) {
		i := index[uuid]
		if _, failed := c.failed[uuid]; failed {
			continue
		}
		l, err := c.limitsLocked(ctx, uuid, i)
		if err != nil {
			c.failLocked(uuid, want[uuid], err.Error())
			continue
		}
		w := l.Clamp(want[uuid])
		if cur, ok := c.set[uuid]; ok && cur.Watts == w {
			continue
		}
		if err := c.be.SetPowerLimit(ctx, i, w); err != nil {
			c.failLocked(uuid, want[uuid], err.Error())
			continue
		}
		c.log.Info("gpu power limit set", "gpu", uuid, "index", i, "watts", w, "asked_watts", want[uuid])
		c.set[uuid] = cappedGPU{Index: i, Watts: w}
		changed = true
	}
	if changed {
		c.saveLocked()
	}
}

// limitsLocked is a GPU's power limits, read once.
func (c *powerCaps) limitsLocked(ctx context.Context, uuid string, index int) (gpu.PowerLimits, error) {
	if l, ok := c.limits[uuid]; ok {
		return l, nil
	}
	l, err := c.be.PowerLimits(ctx, index)
	if err != nil {
		return gpu.PowerLimits{}, err
	}
	c.limits[uuid] = l
	return l, nil
}

// restoreLocked puts a capped GPU back at its default limit and forgets
// it (it is forgotten on failure too: the server hears of it).
func (c *powerCaps) restoreLocked(ctx context.Context, uuid string) error {
	cg := c.set[uuid]
	delete(c.set, uuid)
	l, err := c.limitsLocked(ctx, uuid, cg.Index)
	if err != nil {
		return err
	}
	if err := c.be.SetPowerLimit(ctx, cg.Index, l.DefaultWatts); err != nil {
		return err
	}
	c.log.Info("gpu power limit back at its default", "gpu", uuid, "index", cg.Index, "watts", l.DefaultWatts)
	return nil
}

// failLocked logs a cap not set and keeps it for the next heartbeat.
func (c *powerCaps) failLocked(uuid string, watts float64, detail string) {
	c.log.Warn("gpu power limit not set", "gpu", uuid, "watts", watts, "err", detail)
	if watts > 0 {
		c.failed[uuid] = watts
	}
	if len(c.failures) < maxCapFailures {
		c.failures = append(c.failures, api.PowerCapFailure{GPU: uuid, Watts: watts, Detail: truncate(detail, 512)})
	}
}

// maxCapFailures bounds the failures kept for one heartbeat.
const maxCapFailures = 64

// takeFailures returns the failures not yet reported and forgets them;
// giveBack keeps them for the next heartbeat when this one failed.
func (c *powerCaps) takeFailures() []api.PowerCapFailure {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.failures
	c.failures = nil
	return f
}

func (c *powerCaps) giveBack(f []api.PowerCapFailure) {
	if len(f) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(f, c.failures...)
	if len(c.failures) > maxCapFailures {
		c.failures = c.failures[:maxCapFailures]
	}
}

// inForce is the caps set now, by GPU UUID, in watts.
func (c *powerCaps) inForce() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]float64, len(c.set))
	for u, cg := range c.set {
		out[u] = cg.Watts
	}
	return out
}

// saveLocked writes the caps in force to power-caps.json (removed when
// none).
func (c *powerCaps) saveLocked() {
	if len(c.set) == 0 {
		if err := os.Remove(c.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.log.Warn("removing the power-caps file", "path", c.path, "err", err)
		}
		return
	}
	if err := writeJSONAtomic(c.path, c.set, 0o644); err != nil {
		c.log.Warn("writing the power-caps file", "path", c.path, "err", err)
	}
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu/simgpu"
)

// updateTimeout bounds an operator's update command.
const updateTimeout = 30 * time.Minute

// versionSetter is a backend whose versions an update can set (simulated
// GPUs).
type versionSetter interface{ SetVersions(driver, cuda string) }

// updatesPath is DATA_DIR/updates.json: the update orders run and their
// results, so that a restarted agent never runs one twice.
func (a *Agent) updatesPath() string { return filepath.Join(a.cfg.DataDir, "updates.json") }

// loadUpdates reads updates.json; an unreadable file is logged and
// treated as empty only when absent (a corrupt one stops updates, so that
// none runs twice).
func (a *Agent) loadUpdates() {
	data, err := os.ReadFile(a.updatesPath())
	if err != nil {
		return
	}
	m := map[string]*api.UpdateResult{}
	if err := json.Unmarshal(data, &m); err != nil {
		a.log.Error("updates.json unreadable: no stack update will run until it is fixed or removed", "err", err)
		a.updatesBroken = true
		return
	}
	a.updates = m
}

// startUpdate runs an update order once per key, in the background; its
// result goes out with the next heartbeats while the server orders it.
func (a *Agent) startUpdate(ctx context.Context, o api.UpdateOrder) {
	a.mu.Lock()
	if _, ok := a.updates[o.Key]; ok || a.updatesBroken {
		a.mu.Unlock()
		return
	}
	a.updates[o.Key] = nil // running
	// Recorded before it runs: an agent that dies mid-update reports it
	// failed rather than running it again.
	a.updates[o.Key] = &api.UpdateResult{Key: o.Key, Detail: "interrupted: the agent stopped while it ran"}
	err := writeJSONAtomic(a.updatesPath(), a.updates, 0o600)
	a.updates[o.Key] = nil
	a.mu.Unlock()
	if err != nil {
		a.log.Error("not updating: cannot record the update order", "order", o.Key, "err", err)
		return
	}
	a.log.Info("updating the node's stack", "order", o.Key, "versions", o.Versions)
	go func() {
		res := a.runUpdate(ctx, o)
		a.mu.Lock()
		a.updates[o.Key] = &res
		if err := writeJSONAtomic(a.updatesPath(), a.updates, 0o600); err != nil {
			a.log.Error("recording the update result", "order", o.Key, "err", err)
		}
		a.mu.Unlock()
		a.log.Info("update done", "order", o.Key, "ok", res.OK, "detail", res.Detail)
	}()
}

// runUpdate carries an order out: simulated GPUs take the driver and CUDA
// versions; otherwise the operator's command runs (sh -c) with the target
// versions in GPUFLEET_STACK_<COMPONENT>. The node's versions are read
// again afterwards, whatever happened.
func (a *Agent) runUpdate(ctx context.Context, o api.UpdateOrder) api.UpdateResult {
	res := api.UpdateResult{Key: o.Key, OK: true, Detail: "updated"}
	if vs, ok := a.be.(versionSetter); ok && a.cfg.Backend == "sim" {
		driver := o.Versions[string(gpufleet.StackDriver)]
		vs.SetVersions(driver, o.Versions[string(gpufleet.StackCUDA)])
		a.mu.Lock()
		a.simSoftware = maps.Clone(o.Versions)
		a.mu.Unlock()
		if a.faults != nil && driver != "" {
			if slices.Contains(a.cfg.SimBadDrivers, driver) {
				if err := a.faults.Inject(0, simgpu.Fault{Kind: simgpu.FaultECCDoubleBit}); err != nil {
					res.Detail = "updated; the bad driver's fault was not injected: " + err.Error()
				}
			} else if err := a.faults.Clear(0); err != nil {
				a.log.Debug("no simulated fault to clear after the update", "err", err)
			}
		}
	} else if o.Command == "" {
		res.OK, res.Detail = false, "no update command: the rollout names none and the GPUs are not simulated"
	} else {
		cctx, cancel := context.WithTimeout(ctx, updateTimeout)
		defer cancel()
		cmd := exec.CommandContext(cctx, "/bin/sh", "-c", o.Command)
		cmd.Env = slices.Clone(a.cfg.Runner.Environ)
		for _, k := range slices.Sorted(maps.Keys(o.Versions)) {
			cmd.Env = append(cmd.Env, "GPUFLEET_STACK_"+strings.ToUpper(k)+"="+o.Versions[k])
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			res.OK, res.Detail = false, fmt.Sprintf("update command failed: %v: %s", err, tail(out, 400))
		} else if len(out) > 0 {
			res.Detail = "updated: " + tail(out, 400)
		}
	}
	if err := a.discover(ctx); err != nil {
		res.OK, res.Detail = false, res.Detail+"; reading the versions again failed: "+err.Error()
	}
	a.mu.Lock()
	v := a.versions
	a.mu.Unlock()
	res.Versions = versionMap(v, a.software())
	return res
}

// updateResults are the finished updates the server still orders; a.mu
// must be held.
func (a *Agent) updateResults(asked []string) []api.UpdateResult {
	var out []api.UpdateResult
	for _, k := range slices.Sorted(maps.Keys(a.updates)) {
		if r := a.updates[k]; r != nil && r.Versions != nil && slices.Contains(asked, k) {
			out = append(out, *r)
		}
	}
	return out
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

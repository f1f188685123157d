package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Check is one readiness check's outcome: its name (as /readyz?verbose
// lists it), whether it passed, and a line saying why it failed (or what
// it saw when it passed).
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// Readiness checks' names, in the order Ready returns them.
const (
	CheckRegistered = "registered"
	CheckHeartbeat  = "heartbeat"
	CheckGPUBackend = "gpu-backend"
	CheckEngine     = "container-engine"
)

const (
	// minStaleAfter is the least age at which the last heartbeat answer,
	// or the last GPU sample, counts as stale: three intervals, at least
	// this.
	minStaleAfter = 15 * time.Second
	// engineCheckEvery is how often the container engine is asked for its
	// version at most, and engineCheckTimeout how long it may take.
	engineCheckEvery   = 30 * time.Second
	engineCheckTimeout = 5 * time.Second
)

// Ready checks whether the agent can do its work at now: it is registered
// with the server (a registration or a heartbeat answered since it
// started), the server answered a heartbeat within max(3 heartbeat
// intervals, 15s), the GPU backend answered its last sample (within
// max(3 sample intervals, 15s)), and, when attempts run in containers, the
// container engine answered `ENGINE version`. The engine check runs in the
// background at most every 30s; Ready reports its latest result and
// never waits for it.
func (a *Agent) Ready(now time.Time) []Check {
	a.mu.Lock()
	registered := a.registered || a.beats > 0
	lastOK, heartbeat := a.lastOK, a.heartbeat
	sampleOK, latestAt := a.sampleOK, a.latestAt
	a.mu.Unlock()

	checks := []Check{{Name: CheckRegistered, OK: registered, Detail: "registered"}}
	if !registered {
		checks[0].Detail = "not registered"
	}

	hb := Check{Name: CheckHeartbeat}
	limit := max(3*heartbeat, minStaleAfter)
	switch age := now.Sub(lastOK); {
	case lastOK.IsZero():
		hb.Detail = "no heartbeat answered yet"
	case age > limit:
		hb.Detail = fmt.Sprintf("no heartbeat answered for %s", age.Round(time.Second))
	default:
		hb.OK, hb.Detail = true, fmt.Sprintf("heartbeat answered %s ago", max(age, 0).Round(time.Second))
	}
	checks = append(checks, hb)

	g := Check{Name: CheckGPUBackend}
	limit = max(3*a.cfg.SampleInterval, minStaleAfter)
	switch age := now.Sub(latestAt); {
	case !sampleOK:
		// The sampler keeps no error, only that the last read failed (or
		// that it has read none yet: discovery's read does not count); it
		// logs the error.
		g.Detail = "gpu backend: the last sample failed or none was taken yet (the agent's log says why)"
		if !latestAt.IsZero() {
			g.Detail += fmt.Sprintf("; the last good one is %s old", max(age, 0).Round(time.Second))
		}
	case age > limit:
		g.Detail = fmt.Sprintf("gpu backend: no sample answered for %s", age.Round(time.Second))
	default:
		g.OK, g.Detail = true, "gpu backend: answered"
	}
	checks = append(checks, g)

	if e := a.cfg.Runner.Engine; e != nil {
		checks = append(checks, probeFor(a).check(now, *e))
	}
	return checks
}

// engineProbes keeps each agent's engine probe. It is here rather than
// in Agent so that the health checks stay in this file; an agent lives as
// long as its process, so entries are not removed.
var engineProbes sync.Map // *Agent → *engineProbe

func probeFor(a *Agent) *engineProbe {
	p, _ := engineProbes.LoadOrStore(a, &engineProbe{})
	return p.(*engineProbe)
}

// engineProbe runs `ENGINE version` in the background, at most every
// engineCheckEvery, and keeps the latest result.
type engineProbe struct {
	mu      sync.Mutex
	running bool
	started time.Time // of the latest run, by Ready's clock; zero: never
	done    bool      // a run finished
	err     error     // its outcome
	wg      sync.WaitGroup
	// run runs the engine (nil: runEngineVersion), for at most timeout
	// (0: engineCheckTimeout).
	run     func(ctx context.Context, e Engine) error
	timeout time.Duration
}

// check starts a run when none runs and the latest is due, and returns
// the latest finished run's outcome.
func (p *engineProbe) check(now time.Time, e Engine) Check {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running && (p.started.IsZero() || now.Sub(p.started) >= engineCheckEvery || now.Before(p.started)) {
		p.running, p.started = true, now
		run, timeout := p.run, cmp.Or(p.timeout, engineCheckTimeout)
		if run == nil {
			run = runEngineVersion
		}
		p.wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			err := run(ctx, e)
			if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				err = fmt.Errorf("%s version: no answer in %s", e.Path, timeout)
			}
			p.mu.Lock()
			p.running, p.done, p.err = false, true, err
			p.mu.Unlock()
		})
	}
	c := Check{Name: CheckEngine, OK: p.done && p.err == nil}
	switch {
	case !p.done:
		c.Detail = fmt.Sprintf("container engine %s: not checked yet", e.Runtime)
	case p.err != nil:
		c.Detail = fmt.Sprintf("container engine %s: %v", e.Runtime, p.err)
	default:
		c.Detail = fmt.Sprintf("container engine %s: answered", e.Runtime)
	}
	return c
}

// wait waits for the run in progress, if any (tests).
func (p *engineProbe) wait() { p.wg.Wait() }

// runEngineVersion runs `ENGINE version` with the engine's global options
// (podman's --runtime, as attempts run it).
func runEngineVersion(ctx context.Context, e Engine) error {
	if e.Socket != "" {
		_, err := newEngineAPI(e.Socket).Version(ctx)
		return err
	}
	cmd := exec.CommandContext(ctx, e.Path, append(e.global(), "version")...)
	cmd.WaitDelay = time.Second // a child that keeps the output open does not hold the probe
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	// One line, bounded: the 503 body gives each failing check a line.
	msg := strings.Join(strings.Fields(string(out)), " ")
	if len(msg) > 300 {
		msg = clip(msg, 300) + "..."
	}
	if msg == "" {
		return fmt.Errorf("%s version: %w", e.Path, err)
	}
	return fmt.Errorf("%s version: %w: %s", e.Path, err, msg)
}

// HealthHandler serves the agent's health endpoints: GET /healthz answers
// 200 "ok" while the process is up; GET /readyz answers 200 "ok" when
// every check of Ready passes, else 503 with each failing check's detail
// on its own line. ?verbose lists every check, as Kubernetes' /readyz
// does ("[+]name ok", "[-]name failed: detail"). The clock is the
// agent's.
func (a *Agent) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var checks []Check
		switch r.URL.Path {
		case "/healthz":
			checks = []Check{{Name: "ping", OK: true, Detail: "ok"}}
		case "/readyz":
			checks = a.Ready(a.now())
		default:
			http.NotFound(w, r)
			return
		}
		writeChecks(w, strings.TrimPrefix(r.URL.Path, "/"), checks, r.URL.Query().Has("verbose"))
	})
}

// writeChecks writes the answer of a health endpoint named name.
func writeChecks(w http.ResponseWriter, name string, checks []Check, verbose bool) {
	var b strings.Builder
	ok := true
	for _, c := range checks {
		ok = ok && c.OK
	}
	switch {
	case verbose:
		for _, c := range checks {
			if c.OK {
				fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
			} else {
				fmt.Fprintf(&b, "[-]%s failed: %s\n", c.Name, c.Detail)
			}
		}
		if ok {
			fmt.Fprintf(&b, "%s check passed\n", name)
		} else {
			fmt.Fprintf(&b, "%s check failed\n", name)
		}
	case ok:
		b.WriteString("ok")
	default:
		for _, c := range checks {
			if !c.OK {
				b.WriteString(c.Detail + "\n")
			}
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if ok {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write([]byte(b.String()))
}

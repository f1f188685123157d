// Command gpufleet-load measures a running gpufleet server: submissions per
// second and heartbeats per second (many simulated nodes at 1 Hz), with the
// API's latency percentiles. It talks only to the server it is given; run
// it against a loopback server.
//
//	gpufleet-load --server http://127.0.0.1:7080 --token ADMIN [--nodes 10000] [--duration 20s]
//	gpufleet-load --server http://leader:7080,http://follower:7080 ...   (replicas: submissions alternate)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/gpu"
)

type result struct {
	Phase       string  `json:"phase"`
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	DurationS   float64 `json:"duration_s"`
	RatePerS    float64 `json:"rate_per_s"`
	P50MS       float64 `json:"p50_ms"`
	P99MS       float64 `json:"p99_ms"`
	MaxMS       float64 `json:"max_ms"`
	Concurrency int     `json:"concurrency"`
}

func main() {
	server := flag.String("server", os.Getenv("GPUFLEET_SERVER"), "server URL, or several separated by commas")
	token := flag.String("token", os.Getenv("GPUFLEET_TOKEN"), "admin token")
	nodes := flag.Int("nodes", 10000, "simulated nodes heartbeating at --interval")
	interval := flag.Duration("interval", time.Second, "heartbeat interval per node")
	duration := flag.Duration("duration", 20*time.Second, "length of each phase")
	submitters := flag.Int("submitters", 64, "concurrent submitting clients")
	output := flag.String("o", "table", "table or json")
	flag.Parse()
	if *server == "" || *token == "" {
		fmt.Fprintln(os.Stderr, "gpufleet-load: --server and --token (an admin token) are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := run(ctx, *server, *token, *nodes, *submitters, *interval, *duration)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpufleet-load:", err)
		os.Exit(1)
	}
	if *output == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(res)
		return
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tREQUESTS\tERRORS\tRATE/S\tP50 MS\tP99 MS\tMAX MS\tCONCURRENCY")
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.1f\t%.1f\t%.1f\t%d\n", r.Phase, r.Requests, r.Errors, r.RatePerS, r.P50MS, r.P99MS, r.MaxMS, r.Concurrency)
	}
	tw.Flush()
}

func httpClient(conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = conns, conns, conns
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func run(ctx context.Context, server, token string, nodes, submitters int, interval, duration time.Duration) ([]result, error) {
	hc := httpClient(512)
	// Several servers (replicas on one PostgreSQL): nodes register and
	// heartbeat with the first (list the leader first) and fail over;
	// submissions go to each in turn.
	servers := strings.Split(server, ",")
	admin, err := api.NewClient(servers, token, api.WithHTTPClient(hc), api.WithRetries(0))
	if err != nil {
		return nil, err
	}
	team := fmt.Sprintf("load-%d", time.Now().Unix())
	if _, err := admin.PutTeam(ctx, api.TeamRequest{Name: team}); err != nil {
		return nil, fmt.Errorf("create team: %w", err)
	}
	tok, err := admin.CreateToken(ctx, api.TokenRequest{Team: team, Role: gpufleet.RoleMember})
	if err != nil {
		return nil, err
	}
	var members []*api.Client
	for i := range servers {
		rotated := append(append([]string(nil), servers[i:]...), servers[:i]...)
		c, err := api.NewClient(rotated, tok.Token, api.WithHTTPClient(hc), api.WithRetries(0))
		if err != nil {
			return nil, err
		}
		members = append(members, c)
	}

	var out []result
	// Register the nodes, then heartbeat each at the interval.
	fmt.Fprintf(os.Stderr, "registering %d nodes...\n", nodes)
	jt, err := admin.CreateJoinToken(ctx, api.JoinTokenRequest{TTL: gpufleet.Duration(time.Hour)})
	if err != nil {
		return nil, err
	}
	creds := make([]*api.Client, nodes)
	prefix := fmt.Sprintf("load%d-", time.Now().Unix()%100000)
	var reg result
	{
		var next atomic.Int64
		var wg sync.WaitGroup
		var lat latencies
		var errs atomic.Int64
		start := time.Now()
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= nodes || ctx.Err() != nil {
						return
					}
					name := fmt.Sprintf("%s%d", prefix, i)
					var gpus []gpufleet.NodeGPU
					for g := range 8 {
						gpus = append(gpus, gpufleet.NodeGPU{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "h100-sxm-80gb",
							MemoryBytes: 80 << 30, NVLinkDomain: name, State: gpufleet.NodeReady, Health: gpufleet.Healthy})
					}
					t0 := time.Now()
					resp, err := admin.Register(ctx, jt.Token, api.RegisterRequest{ProtocolVersion: api.ProtocolVersion, Node: name, GPUs: gpus})
					lat.add(time.Since(t0))
					if err != nil {
						errs.Add(1)
						continue
					}
					creds[i] = admin.WithToken(resp.Credential)
				}
			}()
		}
		wg.Wait()
		reg = lat.result("register", int64(nodes), errs.Load(), time.Since(start), 32)
	}
	out = append(out, reg)
	fmt.Fprintf(os.Stderr, "heartbeating %d nodes every %s for %s...\n", nodes, interval, duration)
	out = append(out, heartbeats(ctx, creds, prefix, interval, duration))
	// Then submissions, while the leader schedules them onto those nodes.
	fmt.Fprintf(os.Stderr, "submitting for %s with %d clients...\n", duration, submitters)
	var seq atomic.Int64
	r := measure(ctx, "submit", submitters, duration, func(ctx context.Context) error {
		n := seq.Add(1)
		_, err := members[int(n)%len(members)].SubmitJob(ctx, api.SubmitRequest{RequestID: fmt.Sprintf("load-%d", n), Command: []string{"true"},
			Resources: gpufleet.Resources{GPUs: 1}, Priority: gpufleet.Batch, Estimate: gpufleet.Duration(10 * time.Minute)})
		return err
	})
	out = append(out, r)

	return out, nil
}

// heartbeats runs every node's heartbeat on its own schedule, spread over
// the interval, through a pool of workers.
func heartbeats(ctx context.Context, creds []*api.Client, prefix string, interval, duration time.Duration) result {
	workers := 256
	jobs := make(chan int, len(creds))
	sentEvidence := make([]atomic.Bool, len(creds)) // the server holds the node's evidence
	var lat latencies
	var errs, done atomic.Int64
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				c := creds[i]
				if c == nil {
					continue
				}
				t0 := time.Now()
				name := fmt.Sprintf("%s%d", prefix, i)
				resp, err := c.Heartbeat(ctx, api.HeartbeatRequest{ProtocolVersion: api.ProtocolVersion, Node: name, Samples: samples(name, t0, !sentEvidence[i].Load())})
				if err == nil {
					sentEvidence[i].Store(!resp.FullEvidence)
				}
				if ctx.Err() != nil {
					return
				}
				lat.add(time.Since(t0))
				done.Add(1)
				if err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	sent := 0
	dropped := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			// Every node beats once per interval: send what is due by now.
			due := int(time.Since(start).Seconds() / interval.Seconds() * float64(len(creds)))
			for ; sent < due; sent++ {
				select {
				case jobs <- sent % len(creds):
				default:
					dropped++ // the server (or this generator) is behind: a missed beat
				}
			}
		}
	}
	if dropped > 0 {
		fmt.Fprintf(os.Stderr, "heartbeat: %d beats could not be sent on time\n", dropped)
	}
	close(jobs)
	wg.Wait()
	return lat.result("heartbeat", done.Load(), errs.Load(), time.Since(start), workers)
}

// measure runs fn from n goroutines for d and returns the rate and latencies.
func measure(ctx context.Context, phase string, n int, d time.Duration, fn func(context.Context) error) result {
	if fn == nil {
		return result{Phase: phase}
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var lat latencies
	var count, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				err := fn(ctx)
				if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
					return
				}
				lat.add(time.Since(t0))
				count.Add(1)
				if err != nil {
					errs.Add(1)
					if errs.Load() < 5 {
						fmt.Fprintln(os.Stderr, phase+":", strings.TrimSpace(err.Error()))
					}
				}
			}
		}()
	}
	wg.Wait()
	return lat.result(phase, count.Load(), errs.Load(), time.Since(start), n)
}

type latencies struct {
	mu sync.Mutex
	v  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.v = append(l.v, d)
	l.mu.Unlock()
}

func (l *latencies) result(phase string, n, errs int64, elapsed time.Duration, conc int) result {
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.Sort(l.v)
	pct := func(p float64) float64 {
		if len(l.v) == 0 {
			return 0
		}
		return float64(l.v[min(len(l.v)-1, int(p*float64(len(l.v))))]) / 1e6
	}
	return result{Phase: phase, Requests: n, Errors: errs, DurationS: elapsed.Seconds(), RatePerS: float64(n) / elapsed.Seconds(),
		P50MS: pct(0.5), P99MS: pct(0.99), MaxMS: pct(1), Concurrency: conc}
}

// samples is one heartbeat's worth of telemetry for an 8-GPU H100 node, as
// an agent sends it: readings per GPU, the energy counter growing with
// time, and the health rules' evidence when withEvidence (an agent sends
// it while it changes, and when the server asks).
func samples(node string, now time.Time, withEvidence bool) []api.GPUSample {
	f := func(v float64) *float64 { return &v }
	u := func(v uint64) *uint64 { return &v }
	n := func(v int) *int { return &v }
	out := make([]api.GPUSample, 8)
	secs := float64(now.UnixNano()) / 1e9
	for g := range out {
		mem := int64(40 << 30)
		out[g] = api.GPUSample{UUID: fmt.Sprintf("GPU-%s-%d", node, g), Utilization: f(0.9), SMActivity: f(0.7), DRAMActivity: f(0.4),
			TensorActivity: f(0.3), MemoryUsedBytes: &mem, PowerWatts: f(550), EnergyJoulesTotal: f(550 * secs), TemperatureC: f(61),
			Evidence: &api.GPUEvidence{ClockEventsAll: u(0), Counters: gpu.Counters{ECCCorrectedVolatile: u(0), ECCUncorrectedVolatile: u(0),
				ECCCorrectedAggregate: u(0), ECCUncorrectedAggregate: u(0), RemappedRowsCorrectable: u(0), RemappedRowsUncorrectable: u(0),
				PCIeGen: n(5), PCIeWidth: n(16), PCIeMaxGen: n(5), PCIeMaxWidth: n(16),
				PCIeReplayCount: u(0), NVLinkLinksUp: n(18), NVLinkLinksTotal: n(18), NVLinkErrors: u(0)}}}
		if !withEvidence {
			out[g].Evidence = nil
		}
	}
	return out
}

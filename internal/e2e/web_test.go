package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// chromiumPath is Debian's chromium, which scripts/test installs.
const chromiumPath = "/usr/bin/chromium"

// devProc is a `gpufleet dev` process and what its dev.json says.
type devProc struct {
	APIURL     string            `json:"api_url"`
	LoginURL   string            `json:"login_url"`
	AdminToken string            `json:"admin_token"`
	Teams      map[string]string `json:"teams"`
}

// startDev runs `gpufleet dev` on a free port, with args added, and waits
// for its dev.json (written once every node has joined).
func startDev(t *testing.T, args ...string) devProc {
	t.Helper()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "dev.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), append([]string{"dev", "--listen", "127.0.0.1:0", "--data-dir", dir}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		// SIGTERM lets dev stop its agents (their own process groups).
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	var d devProc
	eventually(t, 60*time.Second, "gpufleet dev writes dev.json", func() error {
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			srv, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("gpufleet dev exited:\n%s\nserver log:\n%s", log, srv)
		default:
		}
		data, err := os.ReadFile(filepath.Join(dir, "dev.json"))
		if err != nil {
			return err
		}
		return json.Unmarshal(data, &d)
	})
	if want := d.APIURL + "/?token=" + d.AdminToken; d.LoginURL != want {
		t.Errorf("dev.json login_url %q, want %q", d.LoginURL, want)
	}
	return d
}

func (d devProc) client(t *testing.T, token string) *api.Client {
	t.Helper()
	c, err := api.NewClient([]string{d.APIURL}, token, api.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// browser starts headless chromium and returns a context for its first
// tab, at a laptop's 1366x768.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("GPUFLEET_SKIP_BROWSER") == "1" {
			t.Skip("GPUFLEET_SKIP_BROWSER=1 and no chromium")
		}
		t.Fatalf("%s is missing: run scripts/test (it installs Debian's chromium with apt-get), or set GPUFLEET_SKIP_BROWSER=1 to skip the browser tests", chromiumPath)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1366, 768),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no deadline
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// tab opens a tab with its own cookie jar (a new browser context) at
// 1366x768.
func tab(t *testing.T, browserCtx context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1366, 768)); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// do runs browser actions with a deadline, failing the test on error.
func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(c, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func run[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// shot writes a full-page PNG of the tab to dir/name.png, and to
// $GPUFLEET_SCREENSHOTS when that is set (outDir is removed after the
// test).
func shot(t *testing.T, ctx context.Context, dir, name string) []byte {
	t.Helper()
	png := run(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if keep := os.Getenv("GPUFLEET_SCREENSHOTS"); keep != "" {
		os.MkdirAll(keep, 0o755)
		os.WriteFile(filepath.Join(keep, name+".png"), png, 0o644)
	}
	return png
}

// capture records the body of every response a tab receives.
type capture struct {
	mu     sync.Mutex
	urls   map[network.RequestID]string
	bodies map[string][]string // URL -> bodies
	failed map[string]error
	wg     sync.WaitGroup
}

func captureResponses(ctx context.Context) *capture {
	c := &capture{urls: map[network.RequestID]string{}, bodies: map[string][]string{}, failed: map[string]error{}}
	responses := chromedp.Events(ctx, network.ResponseReceived)
	finished := chromedp.Events(ctx, network.LoadingFinished)
	go func() {
		for ev, err := range responses {
			if err != nil {
				return
			}
			c.mu.Lock()
			c.urls[ev.RequestID] = ev.Response.URL
			c.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range finished {
			if err != nil {
				return
			}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				res, err := chromedp.Call(ctx, network.GetResponseBody, network.GetResponseBodyParams{RequestID: ev.RequestID})
				c.mu.Lock()
				defer c.mu.Unlock()
				u := c.urls[ev.RequestID]
				if u == "" {
					u = "request " + string(ev.RequestID)
				}
				if err != nil {
					c.failed[u] = err
					return
				}
				c.bodies[u] = append(c.bodies[u], string(res.Body))
			}()
		}
	}()
	return c
}

// TestWebDashboard drives the dashboard of a real `gpufleet dev` (server
// and nine simulated nodes as processes) in headless chromium.
func TestWebDashboard(t *testing.T) {
	bctx := browser(t)
	d := startDev(t)
	shots := outDir(t)
	admin := d.client(t, d.AdminToken)
	teamA, teamB := d.client(t, d.Teams["team-a"]), d.client(t, d.Teams["team-b"])
	ctx := t.Context()

	// Every GPU of the dev fleet reports before the fleet is drawn.
	var nodes []gpufleet.Node
	eventually(t, 30*time.Second, "56 GPUs with live readings", func() error {
		var err error
		if nodes, err = admin.Nodes(ctx); err != nil {
			return err
		}
		n, live := 0, 0
		for _, node := range nodes {
			for _, g := range node.GPUs {
				n++
				if g.Live != nil {
					live++
				}
			}
		}
		if n != 56 || live != n {
			return fmt.Errorf("%d nodes, %d GPUs, %d with live readings", len(nodes), n, live)
		}
		return nil
	})
	var uuids []string
	for _, n := range nodes {
		for _, g := range n.GPUs {
			uuids = append(uuids, g.UUID)
		}
	}
	slices.Sort(uuids)

	// Some work to look at: busy, idle-but-allocated and memory-bound jobs
	// of both teams, a job that cannot be placed, and one to cancel.
	submit := func(c *api.Client, r api.SubmitRequest) gpufleet.Job {
		t.Helper()
		resp, err := c.SubmitJob(ctx, r)
		if err != nil {
			t.Fatalf("submit %s: %v", r.Name, err)
		}
		return resp.Job
	}
	sleep := []string{"sh", "-c", "echo started; sleep 300"}
	busy := submit(teamA, api.SubmitRequest{Name: "a-train", Resources: gpufleet.Resources{GPUs: 8, GPUModels: []string{"h100-sxm-80gb"}}, SimLoad: "compute", Command: sleep, Estimate: gpufleet.Duration(2 * time.Hour)})
	submit(teamA, api.SubmitRequest{Name: "a-finetune", Resources: gpufleet.Resources{GPUs: 4, GPUModels: []string{"a100-sxm-80gb"}}, SimLoad: "memory", Command: sleep})
	secret := submit(teamB, api.SubmitRequest{Name: "b-secret-idle", Resources: gpufleet.Resources{GPUs: 2, GPUModels: []string{"l4"}}, SimLoad: "idle", Command: sleep})
	// No B200 in this fleet: queued anyway, they wait as unplaceable.
	secretQueued := submit(teamB, api.SubmitRequest{Name: "b-secret-waiting", Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"b200-hgx"}}, Command: sleep, AllowUnsatisfiable: true})
	// A workload bench of team-b's: the bench page must never show it to team-a.
	wbB, err := teamB.StartWorkloadBench(ctx, api.WorkloadBenchRequest{GPUModels: []string{"b200-hgx"}, Job: gpufleet.JobRequest{Name: "b-secret-bench",
		Command: sleep, Resources: gpufleet.Resources{GPUs: 1}, Work: &gpufleet.WorkCounter{Metric: `tok/s=([0-9.]+)`}, AllowUnsatisfiable: true}})
	if err != nil {
		t.Fatal(err)
	}
	stuck := submit(teamA, api.SubmitRequest{Name: "a-needs-b200", Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"b200-hgx"}}, Command: sleep, AllowUnsatisfiable: true})
	victim := submit(teamA, api.SubmitRequest{Name: "a-to-cancel", Resources: gpufleet.Resources{GPUs: 1, GPUModels: []string{"l4"}}, Command: sleep})
	waitJob(t, admin, busy.ID, 20*time.Second, gpufleet.JobRunning)
	waitJob(t, admin, victim.ID, 20*time.Second, gpufleet.JobRunning)
	waitJob(t, admin, secret.ID, 20*time.Second, gpufleet.JobRunning)

	t.Run("AdminLoginFleetNodesTeamsPlanner", func(t *testing.T) {
		tc := tab(t, bctx)
		do(t, tc, "open the login link", chromedp.Navigate(d.LoginURL), chromedp.WaitVisible(chromedp.CSS(`[data-gpu-uuid]`)))
		loc := run(t, tc, "location", chromedp.Location())
		if strings.Contains(loc, "token") || loc != d.APIURL+"/" {
			t.Errorf("after the login link the URL is %q, want %q (no token)", loc, d.APIURL+"/")
		}
		cookies, err := chromedp.Call(tc, network.GetCookies, network.GetCookiesParams{URLs: []string{d.APIURL}})
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, c := range cookies.Cookies {
			if c.Name == "gpufleet_session" {
				found = true
				if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
					t.Errorf("session cookie HttpOnly=%v SameSite=%q, want HttpOnly and Strict", c.HTTPOnly, c.SameSite)
				}
				if strings.Contains(c.Value, d.AdminToken) {
					t.Error("the session cookie carries the token")
				}
			}
		}
		if !found {
			t.Error("no gpufleet_session cookie after the login link")
		}

		// One cell per GPU of the fleet, the same GPUs the API lists.
		cells := run(t, tc, "GPU cells", chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll('[data-gpu-uuid]')).map(e => e.dataset.gpuUuid).sort()`))
		if !slices.Equal(cells, uuids) {
			t.Errorf("fleet grid has %d cells, the API %d GPUs; they differ:\n grid %v\n api  %v", len(cells), len(uuids), cells, uuids)
		}
		// The busy job's GPUs show as allocated, and the live region
		// refreshes in place (no reload).
		do(t, tc, "live refresh", chromedp.Evaluate[chromedp.Void](`window.__marker = 1`),
			chromedp.Poll[chromedp.Void](`document.getElementById('updated').textContent.includes('updated')`, chromedp.WithPollingTimeout(10*time.Second)))
		if still := run(t, tc, "no reload", chromedp.Evaluate[int](`window.__marker || 0`)); still != 1 {
			t.Error("the page reloaded instead of refreshing its live region")
		}
		alloc := run(t, tc, "allocated total", chromedp.Text(chromedp.CSS("#t-alloc")))
		if !strings.Contains(alloc, "/ 56 GPUs") {
			t.Errorf("allocated total %q, want N / 56 GPUs", alloc)
		}
		// Wait a moment for the simulated loads to show in the colours.
		do(t, tc, "busy GPUs coloured", chromedp.Poll[chromedp.Void](`document.querySelectorAll('li.gpu.u4, li.gpu.u3').length >= 8`,
			chromedp.WithPollingTimeout(15*time.Second)))
		png := shot(t, tc, shots, "fleet")
		if os.Getenv("GPUFLEET_UPDATE_README_IMAGES") == "1" {
			if err := os.WriteFile(filepath.Join("..", "..", "docs", "img", "dashboard-fleet.png"), png, 0o644); err != nil {
				t.Errorf("copy the fleet screenshot for the README: %v", err)
			}
		}
		// The model filter narrows the grid in place.
		do(t, tc, "filter by model", chromedp.SetValue(chromedp.ID("f-model"), "l4"),
			chromedp.Evaluate[chromedp.Void](`document.getElementById('f-model').dispatchEvent(new Event('change'))`),
			chromedp.Poll[chromedp.Void](`document.querySelectorAll('[data-gpu-uuid]').length === 16`, chromedp.WithPollingTimeout(10*time.Second)))

		do(t, tc, "nodes page", chromedp.Navigate(d.APIURL+"/nodes"), chromedp.WaitVisible(chromedp.CSS(`tr[data-node="dev-h200-0"]`)))
		if n := run(t, tc, "node rows", chromedp.Evaluate[int](`document.querySelectorAll('#nodes tbody tr').length`)); n != 9 {
			t.Errorf("nodes table has %d rows, want 9", n)
		}
		if txt := run(t, tc, "cordon button", chromedp.Evaluate[string](`document.querySelector('a[aria-label="Cordon node dev-l4-3"]').textContent`)); txt != "Cordon" {
			t.Errorf("cordon button %q", txt)
		}
		shot(t, tc, shots, "nodes")
		do(t, tc, "node page", chromedp.Navigate(d.APIURL+"/nodes/dev-h100-0"), chromedp.WaitVisible(chromedp.CSS("#gpus")))
		shot(t, tc, shots, "node")
		do(t, tc, "teams page", chromedp.Navigate(d.APIURL+"/teams"), chromedp.WaitVisible(chromedp.CSS("svg.barchart")))
		// dev seeds quotas: the page shows each team's, as GET /teams has
		// them, "—" on classes without one, and their sum as the total.
		apiTeams, err := admin.Teams(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, team := range apiTeams {
			if team.Name != "team-a" && team.Name != "team-b" {
				continue
			}
			if len(team.Quota) == 0 {
				t.Errorf("GET /teams: %s has no quota; gpufleet dev seeds one", team.Name)
			}
			cells := run(t, tc, "quota cells of "+team.Name, chromedp.Evaluate[map[string]string](fmt.Sprintf(
				`Object.fromEntries(Array.from(document.querySelectorAll('table[data-team=%q] tr')).filter(r => r.querySelector('td.quota'))
				  .map(r => [r.querySelector('th').firstChild.textContent.trim(), r.querySelector('td.quota').textContent.trim()]))`, team.Name)))
			sum := 0
			for class, q := range team.Quota {
				sum += q
				if got := cells[class]; got != strconv.Itoa(q) {
					t.Errorf("teams page: %s quota on %s %q, API %d (page rows %v)", team.Name, class, got, q, cells)
				}
			}
			for class, got := range cells {
				if _, ok := team.Quota[class]; !ok && class != "Total" && got != "—" {
					t.Errorf("teams page: %s has no quota on %s but the page shows %q", team.Name, class, got)
				}
			}
			if cells["Total"] != strconv.Itoa(sum) {
				t.Errorf("teams page: %s total quota %q, want %d", team.Name, cells["Total"], sum)
			}
		}
		// Idle never reads above the GPU-hours it is part of.
		over := run(t, tc, "idle above GPU-hours", chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll('td.idleh')).filter(c => parseFloat(c.textContent) > parseFloat(c.parentElement.querySelector('td.gpuh').textContent)).map(c => c.parentElement.textContent)`))
		if len(over) > 0 {
			t.Errorf("teams page rows with idle above GPU-hours: %q", over)
		}
		png = shot(t, tc, shots, "teams")
		if os.Getenv("GPUFLEET_UPDATE_README_IMAGES") == "1" {
			if err := os.WriteFile(filepath.Join("..", "..", "docs", "img", "dashboard-teams.png"), png, 0o644); err != nil {
				t.Errorf("copy the teams screenshot for docs/DASHBOARD.md: %v", err)
			}
		}
		// The 8-GPU job's charts: one mean line with its range as a band;
		// each GPU on its own chart on demand.
		do(t, tc, "job charts", chromedp.Navigate(d.APIURL+"/jobs/"+busy.ID), chromedp.WaitVisible(chromedp.CSS("#charts-h")),
			chromedp.Poll[chromedp.Void](`document.querySelectorAll('g.band').length === 2`, chromedp.WithPollingTimeout(20*time.Second)))
		if n := run(t, tc, "mean lines", chromedp.Evaluate[int](`document.querySelectorAll('.charts g.series').length`)); n != 2 {
			t.Errorf("job charts draw %d series, want 2 (one mean line per chart)", n)
		}
		png = shot(t, tc, shots, "job-band")
		if os.Getenv("GPUFLEET_UPDATE_README_IMAGES") == "1" {
			if err := os.WriteFile(filepath.Join("..", "..", "docs", "img", "dashboard-job.png"), png, 0o644); err != nil {
				t.Errorf("copy the job screenshot for docs/DASHBOARD.md: %v", err)
			}
		}
		do(t, tc, "per GPU", chromedp.Click(chromedp.ID("view-per-gpu")), chromedp.WaitVisible(chromedp.ID("util-per-gpu")))
		if n := run(t, tc, "small multiples", chromedp.Evaluate[int](`document.querySelectorAll('#util-per-gpu figure.chart').length`)); n != busy.Resources.GPUs {
			t.Errorf("%d utilization small multiples, want %d", n, busy.Resources.GPUs)
		}
		shot(t, tc, shots, "job-per-gpu")

		do(t, tc, "planner", chromedp.Navigate(d.APIURL+"/planner"), chromedp.WaitVisible(chromedp.ID("p-model")),
			chromedp.SetValue(chromedp.ID("p-model"), "llama-3.1-70b"),
			chromedp.SetValue(chromedp.ID("p-gpu"), "h100-sxm-80gb,a100-sxm-80gb,l4,h200-sxm-141gb"),
			chromedp.Click(chromedp.ID("plan")),
			chromedp.WaitVisible(chromedp.CSS("#results svg.barchart")))
		rows := run(t, tc, "candidates", chromedp.Evaluate[int](`document.querySelectorAll('#candidates tbody tr').length`))
		bars := run(t, tc, "memory bars", chromedp.Evaluate[int](`document.querySelectorAll('#results svg.barchart g.bar').length`))
		if rows != 4 || bars != 4 {
			t.Errorf("planner shows %d candidates and %d memory bars, want 4 and 4", rows, bars)
		}
		shot(t, tc, shots, "planner")
	})

	t.Run("QueueShowsReasonAndETA", func(t *testing.T) {
		tc := tab(t, bctx)
		var entry gpufleet.QueueEntry
		eventually(t, 10*time.Second, "the stuck job has a reason", func() error {
			q, err := admin.Queue(ctx)
			if err != nil {
				return err
			}
			for _, e := range q {
				if e.ID == stuck.ID && e.ReasonCode != "pending" && e.Reason != "" {
					entry = e
					return nil
				}
			}
			return fmt.Errorf("queue %+v", q)
		})
		row := fmt.Sprintf(`tr[data-job-id=%q]`, stuck.ID)
		do(t, tc, "queue", chromedp.Navigate(d.LoginURL), chromedp.Navigate(d.APIURL+"/queue"), chromedp.WaitVisible(chromedp.CSS(row)))
		reason := run(t, tc, "reason", chromedp.Text(chromedp.CSS(row+" td.reason")))
		eta := run(t, tc, "eta", chromedp.Text(chromedp.CSS(row+" td.eta")))
		if !strings.Contains(reason, entry.Reason) {
			t.Errorf("queue row reason %q, want the API's %q", reason, entry.Reason)
		}
		switch {
		case entry.EstimatedStart == nil && entry.ReasonCode == "unplaceable" && eta != "never, as submitted":
			t.Errorf("ETA %q for an unplaceable job, want %q", eta, "never, as submitted")
		case entry.EstimatedStart == nil && entry.ReasonCode != "unplaceable" && eta != "no estimate yet":
			t.Errorf("ETA %q for a job without an estimate, want %q", eta, "no estimate yet")
		case entry.EstimatedStart != nil && !strings.HasPrefix(eta, "in ") && eta != "any moment":
			t.Errorf("ETA %q for estimated start %v", eta, entry.EstimatedStart)
		}
		running := run(t, tc, "running row", chromedp.Text(chromedp.CSS(fmt.Sprintf(`#running tr[data-job-id=%q]`, busy.ID))))
		if !strings.Contains(running, "left") {
			t.Errorf("running row %q lacks the time left against its estimate", running)
		}
		shot(t, tc, shots, "queue")
	})

	t.Run("CancelFromJobPage", func(t *testing.T) {
		tc := tab(t, bctx)
		u, _ := url.Parse(d.APIURL)
		u.Path, u.RawQuery = "/jobs/"+victim.ID, "token="+url.QueryEscape(d.Teams["team-a"])
		do(t, tc, "job page", chromedp.Navigate(u.String()), chromedp.WaitVisible(chromedp.ID("cancel")))
		do(t, tc, "log tail", chromedp.Poll[chromedp.Void](`document.getElementById('log').textContent.includes('started')`,
			chromedp.WithPollingTimeout(15*time.Second)))
		shot(t, tc, shots, "job")
		// A POST without the CSRF token is refused, even with the cookie.
		status := run(t, tc, "POST without CSRF", chromedp.Evaluate[int](
			fmt.Sprintf(`fetch('/jobs/%s/cancel', {method: 'POST', credentials: 'same-origin'}).then(r => r.status)`, victim.ID), chromedp.EvalAwaitPromise))
		if status != 403 {
			t.Errorf("POST without CSRF: %d, want 403", status)
		}
		do(t, tc, "click cancel", chromedp.Click(chromedp.ID("cancel")), chromedp.WaitVisible(chromedp.ID("confirm")))
		shot(t, tc, shots, "cancel-confirm")
		do(t, tc, "confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.CSS(".flash")))
		waitJob(t, admin, victim.ID, 20*time.Second, gpufleet.JobCancelled)
		do(t, tc, "page shows cancelled", chromedp.Poll[chromedp.Void](`document.getElementById('job-state').textContent === 'cancelled'`,
			chromedp.WithPollingTimeout(10*time.Second)))
	})

	t.Run("TenantSeesOnlyOwnJobs", func(t *testing.T) {
		tc := tab(t, bctx)
		captured := captureResponses(tc)
		secrets := []string{secret.ID, secretQueued.ID, secret.Name, secretQueued.Name, wbB.ID, "b-secret-bench"}
		do(t, tc, "login page", chromedp.Navigate(d.APIURL+"/login"), chromedp.WaitVisible(chromedp.ID("token")))
		shot(t, tc, shots, "login")
		do(t, tc, "log in as team-a", chromedp.SendKeys(chromedp.ID("token"), d.Teams["team-a"]),
			chromedp.Submit(chromedp.ID("token")),
			chromedp.WaitVisible(chromedp.CSS(`[data-gpu-uuid]`)))
		pages := []struct{ path, ready, shot string }{
			{"/", `[data-gpu-uuid]`, ""},
			{"/queue", fmt.Sprintf(`tr[data-job-id=%q]`, stuck.ID), "queue-team-a"},
			{"/jobs", fmt.Sprintf(`tr[data-job-id=%q]`, busy.ID), "jobs-team-a"},
			{"/jobs/" + busy.ID, "#job-state", ""},
			{"/teams", "svg.barchart", "teams-team-a"},
			{"/nodes", "#nodes", ""},
			{"/stacks", "#stacks", ""},
			{"/bench", "p.empty", ""},                         // team-a has no workload bench; team-b's never shows
			{"/jobs/" + secret.ID, ".errorpage", "not-found"}, // another team's job: 404
		}
		for _, p := range pages {
			do(t, tc, p.path, chromedp.Navigate(d.APIURL+p.path), chromedp.WaitVisible(chromedp.CSS(p.ready)))
			if p.path != "/jobs/"+secret.ID {
				// Wait for one live refresh, so the fragments are fetched too.
				do(t, tc, p.path+" refresh", chromedp.Poll[chromedp.Void](`document.getElementById('updated').textContent.includes('updated')`,
					chromedp.WithPollingTimeout(10*time.Second)))
			}
			// Nothing runs off the right edge at 1366 px: a wide table
			// scrolls in its own box (the job page's attempts table did not).
			if over := run(t, tc, "overflow of "+p.path, chromedp.Evaluate[int](
				`document.documentElement.scrollWidth - document.documentElement.clientWidth`)); over > 1 {
				t.Errorf("%s is %d px wider than the window", p.path, over)
			}
			html := run(t, tc, "DOM of "+p.path, chromedp.OuterHTML(chromedp.CSS("html")))
			for _, s := range secrets {
				if strings.Contains(html, s) {
					t.Errorf("%s shows team-b's %q to team-a", p.path, s)
				}
			}
			if p.path == "/jobs" && !strings.Contains(html, busy.ID) {
				t.Errorf("team-a's jobs page lacks its own job %s", busy.ID)
			}
			if p.shot != "" {
				shot(t, tc, shots, p.shot)
			}
		}
		// Every response the pages fetched, documents and fragments alike.
		do(t, tc, "settle", chromedp.Navigate("about:blank"))
		captured.wg.Wait()
		captured.mu.Lock()
		defer captured.mu.Unlock()
		fragments := 0
		for u, bodies := range captured.bodies {
			if strings.Contains(u, "/ui/") {
				fragments += len(bodies)
			}
			for _, b := range bodies {
				for _, s := range secrets {
					if strings.Contains(b, s) {
						t.Errorf("response of %s carries team-b's %q", u, s)
					}
				}
			}
		}
		for u, err := range captured.failed {
			// Chromium may drop a body before it is read (seen for the
			// favicon on a loaded machine); the embedded files under
			// /static/ are the same for every viewer and hold no job.
			if strings.HasPrefix(u, d.APIURL) && !strings.HasPrefix(u, d.APIURL+"/static/") && !errors.Is(err, context.Canceled) {
				t.Errorf("could not read the response body of %s: %v", u, err)
			}
		}
		if len(captured.bodies) < len(pages) || fragments < len(pages)-1 {
			t.Errorf("captured %d responses with %d fragment bodies; want every page and its fragments", len(captured.bodies), fragments)
		}
		t.Logf("checked %d response URLs (%d fragment bodies) for team-b's jobs", len(captured.bodies), fragments)
	})
}

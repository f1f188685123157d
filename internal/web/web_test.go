package web

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
)

const (
	adminTok = "admin-token-0123456789"
	aTok     = "member-a-0123456789"
	bTok     = "member-b-0123456789"
	nodeTok  = "node-credential-01234"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type fixture struct {
	svc *fakeService
	ui  *UI
	srv *httptest.Server
	clk *clock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clk := &clock{t: time.Now()}
	svc := newFakeService(clk.now())
	ui, err := New(Options{Service: svc, Logs: svc, Now: clk.now, SessionTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ui)
	t.Cleanup(srv.Close)
	return &fixture{svc: svc, ui: ui, srv: srv, clk: clk}
}

// client returns a cookie-keeping client that does not follow redirects.
func (f *fixture) client(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// login exchanges a ?token= link and returns the client and the session's
// CSRF token (read from a page).
func (f *fixture) login(t *testing.T, token string) (*http.Client, string) {
	t.Helper()
	c := f.client(t)
	resp := get(t, c, f.srv.URL+"/?token="+url.QueryEscape(token))
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login link: status %d, want 303", resp.StatusCode)
	}
	body := readBody(t, get(t, c, f.srv.URL+"/planner"))
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field on the planner page:\n%s", body)
	}
	return c, m[1]
}

func get(t *testing.T, c *http.Client, u string) *http.Response {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func postForm(t *testing.T, c *http.Client, u string, form url.Values, header http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestTokenLinkSetsStrictHttpOnlyCookieAndDropsToken(t *testing.T) {
	f := newFixture(t)
	c := f.client(t)
	resp := get(t, c, f.srv.URL+"/queue?x=1&token="+aTok)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("status %d, want 303", resp.StatusCode)
	}
	if loc := resp.Header.Get("Location"); loc != "/queue?x=1" {
		t.Errorf("Location %q, want /queue?x=1 (the same URL without the token)", loc)
	}
	var sess *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == SessionCookie {
			sess = ck
		}
	}
	if sess == nil {
		t.Fatal("no session cookie")
	}
	if !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Path != "/" {
		t.Errorf("cookie HttpOnly=%v SameSite=%v Path=%q, want HttpOnly, Strict, /", sess.HttpOnly, sess.SameSite, sess.Path)
	}
	if strings.Contains(sess.Value, aTok) || len(sess.Value) < 40 {
		t.Errorf("cookie value %q: want a random session id, not the token", sess.Value)
	}
	raw := resp.Header.Get("Set-Cookie")
	if !strings.Contains(raw, "HttpOnly") || !strings.Contains(raw, "SameSite=Strict") {
		t.Errorf("Set-Cookie %q lacks HttpOnly or SameSite=Strict", raw)
	}
	// The session now works.
	if resp := get(t, c, f.srv.URL+"/queue"); resp.StatusCode != http.StatusOK {
		t.Errorf("queue after login: %d", resp.StatusCode)
	}
}

func TestBadTokensDoNotLogIn(t *testing.T) {
	f := newFixture(t)
	for _, tok := range []string{"wrong-token-0123456789", nodeTok} {
		c := f.client(t)
		resp := get(t, c, f.srv.URL+"/?token="+tok)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: status %d, want 401", tok, resp.StatusCode)
		}
		for _, ck := range resp.Cookies() {
			if ck.Name == SessionCookie && ck.MaxAge >= 0 {
				t.Errorf("token %q: got a session cookie", tok)
			}
		}
	}
}

func TestAnonymousPagesRedirectFragmentsAre401(t *testing.T) {
	f := newFixture(t)
	c := f.client(t)
	for _, p := range []string{"/", "/queue", "/jobs/j-a1", "/teams", "/nodes", "/stacks", "/planner"} {
		resp := get(t, c, f.srv.URL+p)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?next="+url.QueryEscape(p) {
			t.Errorf("GET %s: %d -> %q, want 303 to /login?next=", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	for _, p := range []string{"/ui/fleet", "/ui/queue", "/ui/jobs", "/ui/jobs/j-a1", "/ui/jobs/j-a1/log", "/ui/teams", "/ui/nodes", "/ui/nodes/n1", "/ui/stacks"} {
		if resp := get(t, c, f.srv.URL+p); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s: %d, want 401", p, resp.StatusCode)
		}
	}
	if len(f.svc.principals()) != 0 {
		t.Errorf("anonymous requests reached the service: %v", f.svc.principals())
	}
}

func TestCSRF(t *testing.T) {
	f := newFixture(t)
	c, csrf := f.login(t, aTok)
	u := f.srv.URL + "/jobs/j-a1/cancel"
	// A token one character off (not "x"+rest: the real one may start with x).
	wrong := "x" + csrf[1:]
	if csrf[0] == 'x' {
		wrong = "y" + csrf[1:]
	}
	cases := []struct {
		name   string
		form   url.Values
		header http.Header
		want   int
	}{
		{"missing", url.Values{}, nil, http.StatusForbidden},
		{"wrong", url.Values{"csrf": {wrong}}, nil, http.StatusForbidden},
		{"wrong header", nil, http.Header{CSRFHeader: {"nope"}}, http.StatusForbidden},
		{"cross-site", url.Values{"csrf": {csrf}}, http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
		{"form field", url.Values{"csrf": {csrf}}, nil, http.StatusSeeOther},
		{"header", nil, http.Header{CSRFHeader: {csrf}}, http.StatusSeeOther},
	}
	for _, tc := range cases {
		resp := postForm(t, c, u, tc.form, tc.header)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	if got := len(f.svc.actions); got != 2 {
		t.Errorf("service saw %d cancels (%v), want 2", got, f.svc.actions)
	}
	// Another session's CSRF token does not work here.
	_, other := f.login(t, aTok)
	if resp := postForm(t, c, u, url.Values{"csrf": {other}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("another session's token: %d, want 403", resp.StatusCode)
	}
	// No session at all.
	if resp := postForm(t, f.client(t), u, url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("no session: %d, want 403", resp.StatusCode)
	}
	if resp := postForm(t, c, f.srv.URL+"/logout", nil, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout without CSRF: %d, want 403", resp.StatusCode)
	}
	if resp := postForm(t, c, f.srv.URL+"/logout", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("logout: %d, want 303", resp.StatusCode)
	}
	if resp := get(t, c, f.srv.URL+"/queue"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("queue after logout: %d, want 303 to login", resp.StatusCode)
	}
}

func TestLoginForm(t *testing.T) {
	f := newFixture(t)
	c := f.client(t)
	body := readBody(t, get(t, c, f.srv.URL+"/login?next=/teams"))
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil || !strings.Contains(body, `<label for="token">`) {
		t.Fatalf("login page lacks its CSRF field or labelled token input:\n%s", body)
	}
	// Without the login cookie (another browser), the form is refused.
	if resp := postForm(t, f.client(t), f.srv.URL+"/login", url.Values{"csrf": {m[1]}, "token": {aTok}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("login without its cookie: %d, want 403", resp.StatusCode)
	}
	if resp := postForm(t, c, f.srv.URL+"/login", url.Values{"csrf": {m[1]}, "token": {"bad-token-0123456789"}}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("bad token: %d, want 401", resp.StatusCode)
	}
	body = readBody(t, get(t, c, f.srv.URL+"/login?next=//evil.example/x"))
	m = regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if strings.Contains(body, "evil.example") {
		t.Error("login page kept an off-site next URL")
	}
	resp := postForm(t, c, f.srv.URL+"/login", url.Values{"csrf": {m[1]}, "token": {aTok}, "next": {"//evil.example/x"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Errorf("login: %d -> %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp := get(t, c, f.srv.URL+"/teams"); resp.StatusCode != http.StatusOK {
		t.Errorf("teams after login: %d", resp.StatusCode)
	}
}

func TestRevokedTokenAndExpiryEndTheSession(t *testing.T) {
	f := newFixture(t)
	c, _ := f.login(t, bTok)
	f.svc.revoke(bTok)
	if resp := get(t, c, f.srv.URL+"/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after revocation: %d, want 303 to login", resp.StatusCode)
	}
	c, _ = f.login(t, aTok)
	f.clk.add(2 * time.Hour)
	if resp := get(t, c, f.srv.URL+"/ui/queue"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("after expiry: %d, want 401", resp.StatusCode)
	}
}

// TestMemberSeesOnlyOwnTeam walks every page and fragment as team-a's
// member: no byte of team-b's job shows, and the service is only ever
// called with the member's own principal.
func TestMemberSeesOnlyOwnTeam(t *testing.T) {
	f := newFixture(t)
	c, _ := f.login(t, aTok)
	pages := []string{"/", "/?team=team-b", "/queue", "/jobs", "/jobs?all=0", "/jobs/j-a1", "/jobs/j-a2", "/teams", "/teams?period=7d",
		"/nodes", "/nodes/n1", "/nodes/n2", "/stacks", "/ui/stacks", "/ui/fleet", "/ui/queue", "/ui/jobs", "/ui/jobs/j-a2", "/ui/jobs/j-a2/log", "/ui/teams",
		"/ui/nodes", "/ui/nodes/n1", "/ui/nodes/n1/charts", "/ui/jobs/j-a2/charts", "/jobs/j-b1", "/ui/jobs/j-b1/charts", "/ui/jobs/j-b1", "/ui/jobs/j-b1/log", "/jobs/j-b1/cancel", "/capacity", "/audit"}
	for _, p := range pages {
		resp := get(t, c, f.srv.URL+p)
		body := readBody(t, resp)
		for _, secret := range []string{"j-b1", "secret-b", "team-b"} {
			if strings.Contains(body, secret) {
				t.Errorf("GET %s (%d) shows %q", p, resp.StatusCode, secret)
			}
		}
		if strings.Contains(p, "j-b1") && resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
	// A member's capacity page is its team's forecast, never the fleet's
	// procurement or lifecycle.
	capBody := readBody(t, get(t, c, f.srv.URL+"/capacity"))
	if !strings.Contains(capBody, "Your team&#39;s GPU demand") || strings.Contains(capBody, "Procurement") || strings.Contains(capBody, `id="lifecycle"`) {
		t.Errorf("member capacity page:\n%s", capBody)
	}
	body := readBody(t, get(t, c, f.srv.URL+"/queue"))
	for _, want := range []string{"j-a1", "no node has 16 free GPUs in one NVLink domain", "in 25m", "alpha-serve", "about 50m",
		// the reason as data: the counts per filter and what ran out
		"2 nodes evaluated", `data-filter="capacity">capacity 1</span>`, `data-filter="topology">topology 1</span>`,
		`out of <span class="exhausted">nvlink_domain (needs 16, most 8)</span>`} {
		if !strings.Contains(body, want) {
			t.Errorf("queue page lacks %q", want)
		}
	}
	if job := readBody(t, get(t, c, f.srv.URL+"/jobs/j-a1")); !strings.Contains(job, `data-filter="topology">topology 1</span>`) {
		t.Errorf("job page lacks the explanation's counts")
	}
	for _, p := range f.svc.principals() {
		if p.TokenID != "tok-a" || p.IsAdmin() {
			t.Fatalf("the service was called as %+v, want only team-a's member", p)
		}
	}
	// A member cannot act on another team's job either.
	_, csrf := f.login(t, aTok)
	c2, csrf2 := f.login(t, aTok)
	_ = csrf
	if resp := postForm(t, c2, f.srv.URL+"/jobs/j-b1/cancel", url.Values{"csrf": {csrf2}}, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("cancel of team-b's job: %d, want 404", resp.StatusCode)
	}
}

func TestAdminPagesRender(t *testing.T) {
	f := newFixture(t)
	c, csrf := f.login(t, adminTok)
	want := map[string][]string{
		"/": {`data-gpu-uuid="GPU-0"`, `data-gpu-uuid="GPU-L4"`, "allocated but idle", "NVLink domain n1-nvl", "PCIe", ">MIG<", "h-unhealthy", "2 / 5 GPUs",
			"Rack power", "9.8kW", "98% near budget", "1 of 4 (sw_power_cap on 1)", "Rack draw against budget", ">budget<"},
		"/ui/fleet?model=l4": {`data-gpu-uuid="GPU-L4"`},
		"/queue":             {"j-b1", "secret-b", "no estimate yet", `data-live="/ui/queue"`},
		"/jobs":              {"alpha-train", "secret-b"},
		"/jobs/j-a2":         {"Effective utilization, mean and range of 2 GPUs", "<polyline", "Memory used, mean and range of 2 GPUs", "Cancel job", "att-1", "First running", "Placed"},
		"/ui/jobs/j-a2/log":  {"hello from j-a2", "<script>alert(1)</script>"},
		"/jobs/j-a2/cancel":  {`name="csrf"`, "Cancel job j-a2 (alpha-serve)?"},
		"/teams": {"team-a", "team-b", "$5.50", "10.0 kWh", "big", "<svg",
			"Energy and carbon", "PUE 1.50", "400 g CO2e/kWh", "Facility energy per day by team", "Tue 1 Dec", "15.0 kWh", "6.00 kg", "500 W"},
		"/nodes":               {"550.54", "12.4", "96.00", "79", "Cordon", "Uncordon"},
		"/nodes/n1":            {"Power per GPU", "XID 79", "rack", `data-live="/ui/nodes/n1/charts"`},
		"/ui/nodes/n1":         {"XID 79"},
		"/ui/nodes/n1/charts":  {"Power per GPU", "<polyline"},
		"/ui/jobs/j-a2/charts": {"Memory used, mean and range of 2 GPUs", "<polyline"},
		"/nodes/n1/drain":      {"Drain node n1?", `name="csrf"`},
		"/planner":             {"llama-3.1-8b", `<label for="p-config">`},
		"/capacity": {`data-model="h100-sxm-80gb"`, `data-plot="h100-sxm-80gb"`, `<img class="plot" src="data:image/svg&#43;xml;base64,`, "order by",
			"1 (8 GPUs)", "70%", "replayed: 1 more node meets it", "l4: no finished jobs on it to replay", `id="lifecycle"`, "retire", "3.4 y"},
		"/audit": {`data-severity="high"`, `data-check="idle-allocated"`, `<a href="/jobs/j-b1">job j-b1 (secret-b)</a>`, `<a href="/nodes/n1">gpu n1 gpu 3</a>`,
			"$2.43", "0.9", "2 high", "1 medium", "no benchmark figures recorded", "Mistake 15", `href="/audit" aria-current="page"`},
		"/bench": {`data-allreduce="ar-2-slow"`, "42.6 GB/s", "169 GB/s (2 runs)", "0.25", "under the 0.90 gate: every member degraded",
			`<span class="badge bad">failed</span>`, "no answer from n3", "2 x 4 GPUs", "No workload bench yet"},
		"/audit?since=400d": {"since &#34;400d&#34;: expected whole days from 1d to 365d"},
		"/stacks": {`data-rollout="ro-1"`, "bad-117", "halted", "node n1 failed a gate", "canary", `data-stack="prod-550"`, "driver 550.54.15, cuda 12.4",
			"h100-sxm-80gb", "only through minor version compatibility", "NVIDIA CUDA Compatibility", `data-live="/ui/stacks"`,
			// badges by state, not all red; a rolled-back rollout keeps why it halted
			`<span class="badge bad">halted</span>`, `<span class="badge bad">failed</span>`, `<span class="badge ok">pending</span>`,
			`<span class="badge ok">validated</span>`, `<span class="badge warn">rolled_back</span>`, `<span class="badge ok">complete</span>`,
			"every updated node rolled back", "halted first: node n3 failed a gate: health unhealthy during the bake: XID 48", "drain timeout:1h"},
	}
	for p, needles := range want {
		resp := get(t, c, f.srv.URL+p)
		body := readBody(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d\n%s", p, resp.StatusCode, body)
			continue
		}
		for _, n := range needles {
			if !strings.Contains(body, n) {
				t.Errorf("GET %s lacks %q", p, n)
			}
		}
	}
	// The log tail is plain text, so the browser never parses it as HTML.
	if ct := get(t, c, f.srv.URL+"/ui/jobs/j-a2/log").Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("log content type %q", ct)
	}
	resp := postForm(t, c, f.srv.URL+"/nodes/n1/drain", url.Values{"csrf": {csrf}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/nodes/n1?done=drain" {
		t.Errorf("drain: %d -> %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if len(f.svc.actions) != 1 || f.svc.actions[0] != "drain n1" {
		t.Errorf("actions %v, want [drain n1]", f.svc.actions)
	}
	if resp := get(t, c, f.srv.URL+"/nodes/n1/explode"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown action: %d", resp.StatusCode)
	}
	if resp := get(t, c, f.srv.URL+"/no/such/page"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown page: %d", resp.StatusCode)
	}
	for _, h := range []string{"Content-Security-Policy", "X-Frame-Options", "Referrer-Policy"} {
		if get(t, c, f.srv.URL+"/").Header.Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}
}

func TestMemberCannotActOnNodes(t *testing.T) {
	f := newFixture(t)
	c, csrf := f.login(t, aTok)
	body := readBody(t, get(t, c, f.srv.URL+"/nodes"))
	if strings.Contains(body, "/nodes/n1/cordon") {
		t.Error("a member sees node actions")
	}
	if resp := get(t, c, f.srv.URL+"/nodes/n1/cordon"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("confirm page for a member: %d, want 403", resp.StatusCode)
	}
	if resp := postForm(t, c, f.srv.URL+"/nodes/n1/cordon", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cordon by a member: %d, want 403", resp.StatusCode)
	}
}

func TestPlanner(t *testing.T) {
	f := newFixture(t)
	c, csrf := f.login(t, aTok)
	form := url.Values{"csrf": {csrf}, "model": {"llama-3.1-8b"}, "mode": {"inference"}, "precision": {"bf16"}, "kv_precision": {"bf16"},
		"gpu": {"h100-sxm-80gb, l4"}, "input_tokens": {"1024"}, "output_tokens": {"256"}}
	resp := postForm(t, c, f.srv.URL+"/planner", form, nil)
	body := readBody(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("planner: %d\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{"Recommendation:", `id="candidates"`, "Memory per GPU", "weights", "KV cache", "capacity", "h100-sxm-80gb ×"} {
		if !strings.Contains(body, want) {
			t.Errorf("planner result lacks %q", want)
		}
	}
	form.Set("config", `{"model_type": "llama", "hidden_size": "x"}`)
	resp = postForm(t, c, f.srv.URL+"/planner", form, nil)
	body = readBody(t, resp)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `role="alert"`) {
		t.Errorf("bad config: %d, want 400 with an alert", resp.StatusCode)
	}
	form.Set("config", "")
	form.Set("mode", "training")
	form.Set("gpus", "64")
	resp = postForm(t, c, f.srv.URL+"/planner", form, nil)
	if body := readBody(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(body, "MFU") {
		t.Errorf("training plan: %d", resp.StatusCode)
	}

	// A plan has an address; without candidate GPUs it compares the
	// fleet's models (the fake fleet: H100 and L4), not the catalog.
	resp = get(t, c, f.srv.URL+"/planner?model=llama-3.1-8b&engine=sglang&headroom=15")
	body = readBody(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("planner by URL: %d\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{"Compared: the GPU models of this fleet (h100-sxm-80gb, l4)", `id="share" href="/planner?`, "engine=sglang&amp;", "headroom=15&amp;", "model=llama-3.1-8b&amp;", "Recommendation:"} {
		if !strings.Contains(body, want) {
			t.Errorf("planner by URL lacks %q", want)
		}
	}
	for _, not := range []string{">mi325x<", ">tpu-v5e<", ">rtx-4090<"} {
		if strings.Contains(body, not) {
			t.Errorf("planner by URL offers %s, which the fleet does not have", not)
		}
	}
	if resp := get(t, c, f.srv.URL+"/planner?model=llama-3.1-8b&headroom=95"); !strings.Contains(readBody(t, resp), "memory headroom") {
		t.Error("a headroom of 95% is not refused by name")
	}
}

func TestSafeTarget(t *testing.T) {
	for in, want := range map[string]string{
		"/": "/", "/jobs/x?y=1": "/jobs/x?y=1", "/jobs/": "/jobs/", "/a/../b": "/b", "/a//b": "/a/b",
		"//evil.example/x": "/", // a host: not a local path
		"///evil.example":  "/evil.example",
		"/\\evil.example":  "/", "/\\/evil.example": "/", "/a\\b": "/",
		"/\t/evil.example": "/", "/%09/evil.example": "/", "/\f/evil.example": "/", "/%0c/evil.example": "/",
		"/%0a/evil": "/", "/a\nb": "/", "/x?next=%0d": "/", "/\x7f": "/", "/%7f": "/",
		"http://evil.example": "/", "https:/evil": "/", "evil.example": "/", "": "/", "javascript:alert(1)": "/",
		"/%2f%2fevil.example": "/evil.example", "/%5cevil": "/",
	} {
		if got := safeTarget(in); got != want {
			t.Errorf("safeTarget(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSessionStoreEvicts(t *testing.T) {
	now := time.Now()
	s := newSessionStore(time.Hour, func() time.Time { return now })
	first, _ := s.create("t")
	for range maxSessions {
		s.create("t")
	}
	if len(s.m) > maxSessions {
		t.Errorf("%d sessions, want at most %d", len(s.m), maxSessions)
	}
	if s.get(first) != nil {
		t.Error("the oldest session survived eviction")
	}
}

var _ api.Service = (*fakeService)(nil)

// TestLoginRedirectsStayLocal: the cases of the open-redirect report. A
// login link or ?next= never sends the browser off the server.
func TestLoginRedirectsStayLocal(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ path, want string }{
		{"//evil.example/x?token=" + aTok, "/"},
		{"///evil.example?token=" + aTok, "/evil.example"},
		{"/%5Cevil.example?token=" + aTok, "/"},
		{"/%09/evil.example?token=" + aTok, "/"},
		{"/queue?token=" + aTok + "&x=1", "/queue?x=1"},
	} {
		resp := get(t, f.client(t), f.srv.URL+tc.path)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != tc.want {
			t.Errorf("GET %s: %d -> %q, want 303 to %q", tc.path, resp.StatusCode, resp.Header.Get("Location"), tc.want)
		}
	}
	c, _ := f.login(t, aTok)
	for _, next := range []string{"/%09/evil.example", "/%0C/evil.example", "//evil.example", "/%5C/evil.example", "https://evil.example", "/\x7f/evil"} {
		resp := get(t, c, f.srv.URL+"/login?next="+url.QueryEscape(next))
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/" {
			t.Errorf("/login?next=%q: %d -> %q, want 303 to /", next, resp.StatusCode, loc)
		}
	}
}

// TestLoginLinkAsksBeforeSwitching: a link for another token, opened in a
// browser with a session, names both identities and switches only when
// told to; the same token just goes through.
func TestLoginLinkAsksBeforeSwitching(t *testing.T) {
	f := newFixture(t)
	c, _ := f.login(t, aTok)
	if resp := get(t, c, f.srv.URL+"/queue?token="+aTok); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/queue" {
		t.Fatalf("same token again: %d -> %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp := get(t, c, f.srv.URL+"/queue?token="+bTok)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/login/switch?") || strings.Contains(loc, bTok) {
		t.Fatalf("another team's link: %d -> %q, want 303 to the switch page, without the token", resp.StatusCode, loc)
	}
	body := readBody(t, get(t, c, f.srv.URL+"/teams"))
	if !strings.Contains(body, "team-a") || strings.Contains(body, "team-b member") {
		t.Fatalf("the session changed before the switch was confirmed")
	}
	page := readBody(t, get(t, c, f.srv.URL+loc))
	if !strings.Contains(page, "team-a member (token tok-a)") || !strings.Contains(page, "team-b member (token tok-b)") {
		t.Fatalf("switch page does not name both identities:\n%s", page)
	}
	m := regexp.MustCompile(`name="csrf" id="switch-csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("switch page has no CSRF field")
	}
	if resp := postForm(t, f.client(t), f.srv.URL+"/login/switch", url.Values{"csrf": {m[1]}, "next": {"/queue"}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("switch from another browser: %d, want 403", resp.StatusCode)
	}
	resp = postForm(t, c, f.srv.URL+"/login/switch", url.Values{"csrf": {m[1]}, "next": {"/queue"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/queue" {
		t.Fatalf("confirm: %d -> %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if body := readBody(t, get(t, c, f.srv.URL+"/teams")); !strings.Contains(body, "team-b") {
		t.Error("after the switch the session is not team-b's")
	}
	if resp := postForm(t, c, f.srv.URL+"/login/switch", url.Values{"csrf": {m[1]}, "next": {"/"}}, nil); resp.StatusCode < 400 {
		t.Errorf("a second confirm of the same link: %d, want it refused (the link is used)", resp.StatusCode)
	}
}

// TestJobChartsBandAndPerGPU: a 16-GPU job's charts are one mean line and
// one min-max band each by default; its 16 GPUs get small multiples only
// on ?per_gpu=1, in GPU order, no colour repeated.
func TestJobChartsBandAndPerGPU(t *testing.T) {
	f := newFixture(t)
	c, _ := f.login(t, aTok)
	body := readBody(t, get(t, c, f.srv.URL+"/jobs/j-a3"))
	charts := body[strings.Index(body, `id="charts-h"`):]
	if n := strings.Count(charts, `<g class="series">`); n != 2 {
		t.Errorf("default view: %d series groups, want 2 (one mean line per chart)", n)
	}
	if n := strings.Count(charts, `<g class="band">`); n != 2 {
		t.Errorf("default view: %d bands, want 2", n)
	}
	for _, want := range []string{"Effective utilization, mean and range of 16 GPUs", "mean of 16 GPUs", "lowest to highest GPU",
		`href="/jobs/j-a3?per_gpu=1#charts-h"`, "Show each GPU (16)", `data-live="/ui/jobs/j-a3/charts"`} {
		if !strings.Contains(body, want) {
			t.Errorf("default view lacks %q", want)
		}
	}
	if strings.Contains(charts, `class="multiples"`) {
		t.Error("the default view draws the small multiples")
	}
	// The mean line sits at the API's mean: bigJobUtil averages 0.60,
	// y = 170 - 0.6*160 = 74.
	if !regexp.MustCompile(`<polyline fill="none" stroke="#0072b2"[^>]*points="[0-9.]+,74.0 `).MatchString(charts) {
		t.Error("the mean line is not at 60%")
	}

	per := readBody(t, get(t, c, f.srv.URL+"/jobs/j-a3?per_gpu=1"))
	util := per[strings.Index(per, `id="util-per-gpu"`):strings.Index(per, `id="memory-per-gpu"`)]
	if n := strings.Count(util, `<figure class="chart">`); n != 16 {
		t.Errorf("per-GPU view: %d utilization charts, want 16", n)
	}
	caps := regexp.MustCompile(`<figcaption>([^<]+)</figcaption>`).FindAllStringSubmatch(util, -1)
	var names []string
	for _, m := range caps {
		names = append(names, m[1])
	}
	if len(names) != 16 || names[0] != "n3 GPU-n3-0" || names[7] != "n3 GPU-n3-7" || names[8] != "n4 GPU-n4-0" {
		t.Errorf("small multiples in order %v, want n3's GPUs 0-7 then n4's", names)
	}
	strokes := regexp.MustCompile(`<polyline fill="none" stroke="(#[0-9a-f]{6})"`).FindAllStringSubmatch(util, -1)
	seen := map[string]bool{}
	for _, m := range strokes {
		if seen[m[1]] {
			t.Errorf("colour %s repeats across the small multiples", m[1])
		}
		seen[m[1]] = true
	}
	if len(seen) != 16 {
		t.Errorf("%d colours for 16 GPUs", len(seen))
	}
	if !strings.Contains(per, `data-live="/ui/jobs/j-a3/charts?per_gpu=1"`) || !strings.Contains(per, "Show the mean and range") {
		t.Error("the per-GPU view does not keep itself on refresh or offer the way back")
	}
	frag := readBody(t, get(t, c, f.srv.URL+"/ui/jobs/j-a3/charts?per_gpu=1"))
	if n := strings.Count(frag, `<figure class="chart">`); n != 32 {
		t.Errorf("per-GPU fragment: %d charts, want 32", n)
	}
}

// TestShortJobChartsMarkers: a job that ran 40 seconds has one rollup
// minute: its charts mark the readings and draw no line.
func TestShortJobChartsMarkers(t *testing.T) {
	f := newFixture(t)
	c, _ := f.login(t, aTok)
	rs, err := f.svc.Rollups(t.Context(), api.Principal{Role: "admin"}, api.RollupQuery{JobID: "j-a4"})
	if err != nil || len(rs) >= 3 {
		t.Fatalf("the short job has %d rollups (%v), want fewer than 3", len(rs), err)
	}
	frag := readBody(t, get(t, c, f.srv.URL+"/ui/jobs/j-a4/charts"))
	if strings.Contains(frag, "<polyline") {
		t.Error("a short job's chart draws a line")
	}
	if n := strings.Count(frag, `<circle class="dot"`); n != 2*len(rs) {
		t.Errorf("%d markers, want one per rollup per chart (%d)", n, 2*len(rs))
	}
	// The job's "First running" and its attempt's "Placed" are labelled
	// apart: the attempt was placed 2 s before it ran.
	page := readBody(t, get(t, c, f.srv.URL+"/jobs/j-a4"))
	j, _ := f.svc.Job(t.Context(), api.Principal{Role: "admin"}, "j-a4")
	if !strings.Contains(page, "<dt>First running</dt><dd>"+fmtClock(*j.StartedAt)+"</dd>") ||
		!strings.Contains(page, `<td class="time">`+fmtClock(*j.Attempts[0].StartedAt)+"</td>") {
		t.Errorf("job page does not show the job's first running time and the attempt's placement")
	}
}

// TestTeamsPageUnitsAndQuotas: in every team table idle GPU-hours never
// read above GPU-hours, each hours and energy column has one unit and one
// number of decimals, and quotas read "—" where there is none, totals
// included.
func TestTeamsPageUnitsAndQuotas(t *testing.T) {
	f := newFixture(t)
	c, _ := f.login(t, adminTok)
	body := readBody(t, get(t, c, f.srv.URL+"/teams"))
	cell := func(row, class string) string {
		m := regexp.MustCompile(`<td class="num ` + class + `">([^<]*)</td>`).FindStringSubmatch(row)
		if m == nil {
			t.Fatalf("no %s cell in %s", class, row)
		}
		return m[1]
	}
	rep, _ := f.svc.Usage(t.Context(), api.Principal{Role: "admin"}, api.UsageQuery{})
	for _, team := range []string{"team-a", "team-b", "team-c"} {
		i := strings.Index(body, `data-team="`+team+`"`)
		if i < 0 {
			t.Fatalf("no table for %s", team)
		}
		table := body[i : i+strings.Index(body[i:], "</table>")]
		rows := regexp.MustCompile(`(?s)<tr><th scope="row">.*?</tr>`).FindAllString(table, -1)
		units := map[string]map[string]bool{}
		var quotas []string
		for _, row := range rows {
			gpuh, idle := cell(row, "gpuh"), cell(row, "idleh")
			g, _ := strconv.ParseFloat(gpuh, 64)
			d, _ := strconv.ParseFloat(idle, 64)
			if d > g {
				t.Errorf("%s: idle %s above GPU-hours %s in %s", team, idle, gpuh, row)
			}
			for _, class := range []string{"gpuh", "effh", "idleh", "energy"} {
				v := cell(row, class)
				num, unit, _ := strings.Cut(v, " ")
				dec := 0
				if _, frac, ok := strings.Cut(num, "."); ok {
					dec = len(frac)
				}
				if units[class] == nil {
					units[class] = map[string]bool{}
				}
				units[class][fmt.Sprintf("%s/%d", unit, dec)] = true
			}
			quotas = append(quotas, cell(row, "quota"))
		}
		for class, u := range units {
			if len(u) != 1 {
				t.Errorf("%s: column %s mixes units or decimals: %v", team, class, u)
			}
		}
		want := map[string][]string{"team-a": {"—", "8", "8"}, "team-b": {"4", "4"}, "team-c": {"—", "—"}}[team]
		if strings.Join(quotas, " ") != strings.Join(want, " ") {
			t.Errorf("%s: quota cells %v, want %v (rows, then the total)", team, quotas, want)
		}
		for _, u := range rep.Teams {
			if u.Team == team && u.Models != nil {
				if got := cell(rows[len(rows)-1], "gpuh"); got != hoursColumn(u.GPUHours).Format(u.GPUHours) {
					t.Errorf("%s: total GPU-hours %s, API %g", team, got, u.GPUHours)
				}
			}
		}
	}
	// The bar chart's ticks step 1, 2 or 5 times a power of ten, all with
	// the same decimals.
	ticks := regexp.MustCompile(`text-anchor="(?:middle|end)">([0-9.]+) h</text>`).FindAllStringSubmatch(body, -1)
	var labels []string
	for _, m := range ticks {
		labels = append(labels, m[1])
	}
	if strings.Join(labels, " ") != "0 5 10 15" {
		t.Errorf("GPU-hours ticks %v, want 0 5 10 15", labels)
	}
}

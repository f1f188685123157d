package web

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/catalog"
	"github.com/gpufleet/gpufleet/internal/api"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Options configures New.
type Options struct {
	// Service is the control plane; every call carries the logged-in
	// principal. Required.
	Service api.Service
	// Logs serves job log tails; nil leaves the job page without one.
	Logs api.LogService
	// Catalog backs the planner; nil uses catalog.Default().
	Catalog *catalog.Catalog
	// Logger receives request failures; nil discards them.
	Logger *slog.Logger
	// SessionTTL is how long a login lasts. Default 12h.
	SessionTTL time.Duration
	// SecureCookies marks the cookies Secure even on plain-HTTP requests
	// (behind a TLS-terminating proxy). Requests over TLS always get it.
	SecureCookies bool
	// PollInterval is how often pages refresh their live region. Default 3s.
	PollInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// UI serves the dashboard. It implements http.Handler.
type UI struct {
	svc      api.Service
	logs     api.LogService
	cat      *catalog.Catalog
	log      *slog.Logger
	now      func() time.Time
	poll     time.Duration
	secure   bool
	sessions *sessionStore
	pending  *sessionStore // login links waiting for a switch to be confirmed
	origin   *http.CrossOriginProtection
	pages    map[string]*template.Template
	mux      *http.ServeMux

	energyMu sync.Mutex
	energy   map[string]energyEntry // principal token id -> cached energy today
	// rackCharts caches the fleet page's rack chart per principal.
	rackCharts map[string]rackChartEntry
}

// New returns the dashboard over opts.Service.
func New(opts Options) (*UI, error) {
	if opts.Service == nil {
		return nil, errors.New("web: Options.Service is required")
	}
	if opts.Catalog == nil {
		opts.Catalog = catalog.Default()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = 12 * time.Hour
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 3 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	u := &UI{
		svc: opts.Service, logs: opts.Logs, cat: opts.Catalog,
		log: opts.Logger.With("component", "web"), now: opts.Now, poll: opts.PollInterval,
		secure: opts.SecureCookies, sessions: newSessionStore(opts.SessionTTL, opts.Now), pending: newSessionStore(pendingTTL, opts.Now),
		origin: http.NewCrossOriginProtection(), energy: map[string]energyEntry{}, rackCharts: map[string]rackChartEntry{},
	}
	var err error
	if u.pages, err = parseTemplates(); err != nil {
		return nil, err
	}
	u.routes()
	return u, nil
}

// routes registers every path. Pages redirect an anonymous browser to
// /login; fragments under /ui/ answer 401; unsafe requests need the CSRF
// token.
func (u *UI) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", staticHandler(static)))
	m.HandleFunc("GET /login", u.loginPage)
	m.HandleFunc("POST /login", u.loginSubmit)
	m.HandleFunc("GET /login/switch", u.switchPage)
	m.HandleFunc("POST /login/switch", u.switchSubmit)
	m.Handle("POST /logout", u.unsafe(u.logout))

	m.Handle("GET /{$}", u.page(u.fleetPage))
	m.Handle("GET /ui/fleet", u.fragment(u.fleetPage))
	m.Handle("GET /queue", u.page(u.queuePage))
	m.Handle("GET /ui/queue", u.fragment(u.queuePage))
	m.Handle("GET /jobs", u.page(u.jobsPage))
	m.Handle("GET /ui/jobs", u.fragment(u.jobsPage))
	m.Handle("GET /jobs/{id}", u.page(u.jobPage))
	m.Handle("GET /ui/jobs/{id}", u.fragment(u.jobFragment))
	m.Handle("GET /ui/jobs/{id}/charts", u.fragment(u.jobChartsFragment))
	m.Handle("GET /ui/jobs/{id}/log", u.fragment(u.jobLog))
	m.Handle("GET /jobs/{id}/cancel", u.page(u.cancelConfirm))
	m.Handle("POST /jobs/{id}/cancel", u.unsafe(u.cancelJob))
	m.Handle("GET /teams", u.page(u.teamsPage))
	m.Handle("GET /ui/teams", u.fragment(u.teamsPage))
	m.Handle("GET /nodes", u.page(u.nodesPage))
	m.Handle("GET /ui/nodes", u.fragment(u.nodesPage))
	m.Handle("GET /nodes/{name}", u.page(u.nodePage))
	m.Handle("GET /ui/nodes/{name}", u.fragment(u.nodeFragment))
	m.Handle("GET /ui/nodes/{name}/charts", u.fragment(u.nodeChartsFragment))
	m.Handle("GET /nodes/{name}/{action}", u.page(u.nodeActionConfirm))
	m.Handle("POST /nodes/{name}/{action}", u.unsafe(u.nodeAction))
	m.Handle("GET /stacks", u.page(u.stacksPage))
	m.Handle("GET /ui/stacks", u.fragment(u.stacksPage))
	m.Handle("GET /bench", u.page(u.benchPage))
	m.Handle("GET /ui/bench", u.fragment(u.benchPage))
	m.Handle("GET /capacity", u.page(u.capacityPage))
	m.Handle("GET /audit", u.page(u.auditPage))
	m.Handle("GET /planner", u.page(u.plannerPage))
	m.Handle("POST /planner", u.unsafe(u.plannerRun))
	m.HandleFunc("/", u.notFound)
	u.mux = m
}

// ServeHTTP sets the security headers, exchanges a ?token= login link for
// a session, and routes.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Query().Has("token") {
		u.tokenLogin(w, r)
		return
	}
	u.mux.ServeHTTP(w, r)
}

// staticHandler serves the embedded assets; they change only with the
// binary, so browsers revalidate them cheaply.
func staticHandler(fsys fs.FS) http.Handler {
	fsrv := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		fsrv.ServeHTTP(w, r)
	})
}

// viewer is who is looking, as the templates need it.
type viewer struct {
	P    api.Principal
	CSRF string
}

// Admin reports whether the viewer is fleet-wide.
func (v *viewer) Admin() bool { return v != nil && v.P.IsAdmin() }

// Who names the viewer for the header.
func (v *viewer) Who() string {
	switch {
	case v == nil:
		return ""
	case v.P.IsAdmin():
		return "admin"
	}
	return v.P.Team + " member"
}

// pageData is what every template gets.
type pageData struct {
	Title string
	Nav   string
	V     *viewer
	// Live is the fragment URL the page polls; empty for static pages.
	Live   string
	PollMS int64
	Flash  string
	Data   any
}

// view is what a page handler returns: the template set to render and its
// data.
type view struct {
	page  string // template set name
	title string
	nav   string
	live  string // fragment URL, when the page has a live region
	data  any
	// status overrides 200 (a form with errors).
	status int
	// tmpl is the template a fragment request renders; default "live".
	tmpl string
}

// viewFunc builds a view for the logged-in viewer.
type viewFunc func(r *http.Request, v *viewer) (view, error)

// page serves a full HTML page; an anonymous browser goes to /login.
func (u *UI) page(fn viewFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := u.viewer(r)
		if err != nil {
			u.authFailed(w, r, err, true)
			return
		}
		vw, err := fn(r, v)
		if err != nil {
			u.fail(w, r, v, err)
			return
		}
		d := pageData{Title: vw.title, Nav: vw.nav, V: v, Live: vw.live, PollMS: u.poll.Milliseconds(), Flash: flash(r), Data: vw.data}
		u.render(w, r, vw.page, "layout", vw.status, d)
	})
}

// fragment serves a page's live region alone; anonymous requests get 401.
func (u *UI) fragment(fn viewFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := u.viewer(r)
		if err != nil {
			u.authFailed(w, r, err, false)
			return
		}
		vw, err := fn(r, v)
		if err != nil {
			status, msg := errorStatus(err)
			if status >= 500 {
				u.log.LogAttrs(r.Context(), slog.LevelError, "fragment failed",
					slog.String("path", r.URL.Path), slog.Any("err", err))
			}
			http.Error(w, msg, status)
			return
		}
		if vw.page == "" { // plain text (log tail)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			_, _ = fmt.Fprint(w, vw.data)
			return
		}
		d := pageData{V: v, Live: vw.live, Data: vw.data}
		name := vw.tmpl
		if name == "" {
			name = "live"
		}
		u.render(w, r, vw.page, name, vw.status, d)
	})
}

// actionFunc handles an unsafe request whose CSRF token checked out; it
// returns where to send the browser (303).
type actionFunc func(w http.ResponseWriter, r *http.Request, v *viewer) (string, error)

// unsafe guards a POST: a live session, a same-origin request and the
// session's CSRF token; anything missing or wrong is 403.
func (u *UI) unsafe(fn actionFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := u.origin.Check(r); err != nil {
			u.forbidden(w, r, "cross-origin request refused")
			return
		}
		s := u.sessionOf(r)
		if s == nil || !csrfOK(r, s.csrf) {
			u.forbidden(w, r, "missing or invalid CSRF token; reload the page and try again")
			return
		}
		v, err := u.viewer(r)
		if err != nil {
			u.authFailed(w, r, err, true)
			return
		}
		to, err := fn(w, r, v)
		if err != nil {
			u.fail(w, r, v, err)
			return
		}
		if to != "" {
			http.Redirect(w, r, to, http.StatusSeeOther)
		}
	})
}

// chartPollMS is how often chart regions refresh: the rollups behind them
// are per minute.
const chartPollMS = 15000

// maxFormBytes caps form bodies (a pasted config.json is the largest).
const maxFormBytes = 1 << 20

// render executes one template of a page set into a buffer first, so a
// failure is a clean 500 and not half a page.
func (u *UI) render(w http.ResponseWriter, r *http.Request, page, name string, status int, d pageData) {
	t := u.pages[page]
	var buf bytes.Buffer
	if t == nil {
		u.log.LogAttrs(r.Context(), slog.LevelError, "no template", slog.String("page", page))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	if err := t.ExecuteTemplate(&buf, name, d); err != nil {
		u.log.LogAttrs(r.Context(), slog.LevelError, "render failed",
			slog.String("page", page), slog.String("template", name), slog.Any("err", err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorData is the error page's data.
type errorData struct {
	Status  int
	Heading string
	Message string
}

// fail renders err as an error page. The message never echoes the
// service's error text for 404s, so a page cannot confirm that another
// team's job exists.
func (u *UI) fail(w http.ResponseWriter, r *http.Request, v *viewer, err error) {
	if errors.Is(err, api.ErrUnauthorized) {
		u.authFailed(w, r, err, true)
		return
	}
	status, msg := errorStatus(err)
	if status >= 500 {
		u.log.LogAttrs(r.Context(), slog.LevelError, "page failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("err", err))
	}
	u.render(w, r, "error", "layout", status, pageData{Title: http.StatusText(status), V: v,
		Data: errorData{Status: status, Heading: http.StatusText(status), Message: msg}})
}

// errorStatus maps a service error to a status and a message safe to show.
func errorStatus(err error) (int, string) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, "The request is too large."
	case errors.Is(err, api.ErrUnauthorized):
		return http.StatusUnauthorized, "Log in again."
	case errors.Is(err, gpufleet.ErrNotFound):
		return http.StatusNotFound, "There is nothing here, or you may not see it."
	case errors.Is(err, api.ErrForbidden):
		return http.StatusForbidden, "Your token may not do this; an admin token can."
	case errors.Is(err, gpufleet.ErrInvalid), errors.Is(err, gpufleet.ErrUnsupported):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, api.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "The server cannot answer right now; try again shortly."
	}
	return http.StatusInternalServerError, "Internal error; the server log has the details."
}

func (u *UI) forbidden(w http.ResponseWriter, r *http.Request, msg string) {
	u.log.LogAttrs(r.Context(), slog.LevelWarn, "unsafe request refused",
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("why", msg))
	u.render(w, r, "error", "layout", http.StatusForbidden, pageData{Title: "Forbidden",
		Data: errorData{Status: http.StatusForbidden, Heading: "Forbidden", Message: msg}})
}

func (u *UI) notFound(w http.ResponseWriter, r *http.Request) {
	v, _ := u.viewer(r)
	u.render(w, r, "error", "layout", http.StatusNotFound, pageData{Title: "Not found", V: v,
		Data: errorData{Status: http.StatusNotFound, Heading: "Not found", Message: "There is no page " + r.URL.Path + "."}})
}

// flash is the notice a redirect after an action carries (?done=...).
func flash(r *http.Request) string {
	switch r.URL.Query().Get("done") {
	case "cancel":
		return "Cancellation requested. The job turns cancelled once its attempts have stopped."
	case "cordon":
		return "Node cordoned: no new work is placed on it."
	case "uncordon":
		return "Node returned to ready."
	case "drain":
		return "Node draining: its attempts are stopping and their jobs requeue."
	}
	return ""
}

// safeTarget is where a login may send the browser: the local path of
// raw, cleaned, with its query; "/" for anything else. A target with a
// control character anywhere (raw or decoded: "/%09/evil" is "/\t/evil",
// which browsers read as "//evil"), a backslash, a scheme or a host, or
// one that still begins with "//" after cleaning, is refused.
func safeTarget(raw string) string {
	const home = "/"
	if raw == "" || !strings.HasPrefix(raw, "/") || strings.ContainsFunc(raw, unsafeRune) {
		return home
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		strings.ContainsFunc(u.Path, unsafeRune) || strings.ContainsFunc(u.RawQuery, unsafeRune) {
		return home
	}
	if q, err := url.QueryUnescape(u.RawQuery); err != nil || strings.ContainsFunc(q, unsafeRune) {
		return home
	}
	p := path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") && p != "/" {
		p += "/"
	}
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		return home
	}
	out := (&url.URL{Path: p, RawQuery: u.Query().Encode()}).RequestURI()
	if strings.HasPrefix(out, "//") {
		return home
	}
	return out
}

// unsafeRune is a rune no redirect target may hold: a control character
// (tab, form feed and the others browsers strip) or a backslash, which
// browsers read as a slash.
func unsafeRune(r rune) bool { return unicode.IsControl(r) || r == '\\' || r == 0x7f }

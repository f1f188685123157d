package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
)

// Cookie names.
const (
	// SessionCookie holds the random session id (never the token).
	SessionCookie = "gpufleet_session"
	// loginCookie holds the login form's double-submit CSRF value.
	loginCookie = "gpufleet_login"
	// switchCookie holds the id of a login link's token while the browser
	// is asked whether to switch sessions (never the token).
	switchCookie = "gpufleet_switch"
	// CSRFHeader carries the session's CSRF token on script requests; forms
	// send it as the field "csrf".
	CSRFHeader = "X-CSRF-Token"
)

// maxSessions bounds the in-memory session table; the oldest go first.
const maxSessions = 10000

// session is one login: the token it was opened with (re-validated on
// every request) and its CSRF token.
type session struct {
	token   string
	csrf    string
	expires time.Time
	seq     uint64 // creation order, for eviction
}

// sessionStore maps session ids to sessions, in memory. Ids are kept as
// SHA-256 digests, so the table holds nothing a cookie could be rebuilt
// from.
type sessionStore struct {
	mu  sync.Mutex
	m   map[[32]byte]*session
	seq uint64
	ttl time.Duration
	now func() time.Time
}

func newSessionStore(ttl time.Duration, now func() time.Time) *sessionStore {
	return &sessionStore{m: map[[32]byte]*session{}, ttl: ttl, now: now}
}

// randomID returns 32 random bytes, base64url-encoded.
func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create opens a session for token and returns its id.
func (s *sessionStore) create(token string) (string, *session) {
	id := randomID()
	now := s.now()
	ss := &session{token: token, csrf: randomID(), expires: now.Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSessions {
		s.evictLocked(now)
	}
	s.seq++
	ss.seq = s.seq
	s.m[sha256.Sum256([]byte(id))] = ss
	return id, ss
}

// evictLocked drops expired sessions, and the oldest when none has
// expired.
func (s *sessionStore) evictLocked(now time.Time) {
	var oldest [32]byte
	oldestSeq := uint64(0)
	for k, v := range s.m {
		if !now.Before(v.expires) {
			delete(s.m, k)
			continue
		}
		if oldestSeq == 0 || v.seq < oldestSeq {
			oldest, oldestSeq = k, v.seq
		}
	}
	if len(s.m) >= maxSessions {
		delete(s.m, oldest)
	}
}

// get returns the live session with this id, or nil.
func (s *sessionStore) get(id string) *session {
	if id == "" {
		return nil
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[k]
	if ss == nil {
		return nil
	}
	if !s.now().Before(ss.expires) {
		delete(s.m, k)
		return nil
	}
	return ss
}

func (s *sessionStore) delete(id string) {
	s.mu.Lock()
	delete(s.m, sha256.Sum256([]byte(id)))
	s.mu.Unlock()
}

// errNoSession means the request has no live session.
var errNoSession = errors.New("no session")

// sessionOf returns the request's live session, or nil.
func (u *UI) sessionOf(r *http.Request) *session {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return nil
	}
	return u.sessions.get(c.Value)
}

// viewer resolves the request's session to a principal, re-validating the
// token so that a revoked token ends its sessions at once.
func (u *UI) viewer(r *http.Request) (*viewer, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return nil, errNoSession
	}
	s := u.sessions.get(c.Value)
	if s == nil {
		return nil, errNoSession
	}
	p, err := u.authenticate(r, s.token)
	if err != nil {
		if errors.Is(err, api.ErrUnauthorized) {
			u.sessions.delete(c.Value)
		}
		return nil, err
	}
	return &viewer{P: p, CSRF: s.csrf}, nil
}

// authenticate checks a user token: node credentials, monitor tokens and
// role-less tokens cannot log in.
func (u *UI) authenticate(r *http.Request, token string) (api.Principal, error) {
	p, err := u.svc.Authenticate(r.Context(), token)
	if err != nil {
		if errors.Is(err, api.ErrUnavailable) {
			return api.Principal{}, fmt.Errorf("authenticate: %w", err)
		}
		return api.Principal{}, fmt.Errorf("%w: invalid, expired or revoked token", api.ErrUnauthorized)
	}
	if p.Node != "" || p.Role == "" {
		return api.Principal{}, fmt.Errorf("%w: not a user token", api.ErrUnauthorized)
	}
	if p.IsMonitor() {
		return api.Principal{}, fmt.Errorf("%w: a monitor token reads only /metrics and service discovery", api.ErrUnauthorized)
	}
	return p, nil
}

// authFailed answers a request without a usable session: pages redirect
// to /login, fragments get 401, an unavailable store 503.
func (u *UI) authFailed(w http.ResponseWriter, r *http.Request, err error, page bool) {
	if !errors.Is(err, errNoSession) && !errors.Is(err, api.ErrUnauthorized) {
		u.log.LogAttrs(r.Context(), slog.LevelWarn, "session check failed", slog.String("path", r.URL.Path), slog.Any("err", err))
		http.Error(w, "The server cannot check your session right now; try again shortly.", http.StatusServiceUnavailable)
		return
	}
	u.clearCookie(w, r, SessionCookie, "/")
	if !page {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "not logged in", http.StatusUnauthorized)
		return
	}
	http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
}

// startSession opens a session for a validated token and sets its cookie.
func (u *UI) startSession(w http.ResponseWriter, r *http.Request, token string) {
	id, _ := u.sessions.create(token)
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: u.secureReq(r), MaxAge: int(u.sessions.ttl.Seconds()),
	})
}

func (u *UI) secureReq(r *http.Request) bool { return u.secure || r.TLS != nil }

func (u *UI) clearCookie(w http.ResponseWriter, r *http.Request, name, path string) {
	if _, err := r.Cookie(name); err != nil {
		return
	}
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: path, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: u.secureReq(r), MaxAge: -1})
}

// tokenLogin exchanges a login link's ?token= for a session and redirects
// (303) to the same URL without it, as Jupyter does, so the token leaves
// the address bar and the history at once. The target is a cleaned local
// path (safeTarget). When the browser already has a session for another
// token, it asks first (/login/switch), naming both identities: a link
// must not silently replace one team's session with another's.
func (u *UI) tokenLogin(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	token := q.Get("token")
	q.Del("token")
	rest := *r.URL
	rest.RawQuery = q.Encode()
	target := safeTarget(rest.RequestURI())
	p, err := u.authenticate(r, token)
	if err != nil {
		if !errors.Is(err, api.ErrUnauthorized) {
			u.authFailed(w, r, err, true)
			return
		}
		u.log.LogAttrs(r.Context(), slog.LevelInfo, "login link refused", slog.String("path", r.URL.Path))
		u.renderLogin(w, r, target, "That login link's token is invalid, expired or revoked.", http.StatusUnauthorized)
		return
	}
	if cur, err := u.viewer(r); err == nil && cur.P.TokenID != p.TokenID {
		id, _ := u.pending.create(token)
		http.SetCookie(w, &http.Cookie{Name: switchCookie, Value: id, Path: "/login/switch", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: u.secureReq(r), MaxAge: int(pendingTTL.Seconds())})
		http.Redirect(w, r, "/login/switch?next="+url.QueryEscape(target), http.StatusSeeOther)
		return
	}
	u.startSession(w, r, token)
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// pendingTTL is how long a login link waits for the browser to confirm a
// switch of sessions.
const pendingTTL = 5 * time.Minute

// switchData is the switch confirmation's data.
type switchData struct {
	Current, New string
	Next, CSRF   string
}

// identity names a principal for a person: "admin (token tk-1)",
// "team-a member (token tk-2)".
func identity(p api.Principal) string {
	who := "admin"
	if !p.IsAdmin() {
		who = p.Team + " member"
	}
	return who + " (token " + p.TokenID + ")"
}

// pendingLogin is the login link's token waiting for confirmation, or "".
func (u *UI) pendingLogin(r *http.Request) string {
	c, err := r.Cookie(switchCookie)
	if err != nil {
		return ""
	}
	if ss := u.pending.get(c.Value); ss != nil {
		return ss.token
	}
	return ""
}

// switchPage asks whether to replace the current session with the login
// link's.
func (u *UI) switchPage(w http.ResponseWriter, r *http.Request) {
	next := safeTarget(r.URL.Query().Get("next"))
	token := u.pendingLogin(r)
	if token == "" {
		http.Redirect(w, r, next, http.StatusSeeOther) // nothing waits: stay
		return
	}
	p, err := u.authenticate(r, token)
	if err != nil {
		u.authFailed(w, r, err, true)
		return
	}
	cur, err := u.viewer(r)
	if err != nil {
		u.finishSwitch(w, r, token, next) // no session any more: nothing to replace
		return
	}
	u.render(w, r, "switch", "layout", http.StatusOK, pageData{Title: "Switch login", Nav: "login", V: cur,
		Data: switchData{Current: identity(cur.P), New: identity(p), Next: next, CSRF: u.loginCSRF(w, r)}})
}

// switchSubmit replaces the session with the login link's, once asked.
func (u *UI) switchSubmit(w http.ResponseWriter, r *http.Request) {
	next, ok := u.loginForm(w, r, "open the login link again")
	if !ok {
		return
	}
	token := u.pendingLogin(r)
	if token == "" {
		u.renderLogin(w, r, next, "That login link has expired; open it again.", http.StatusUnauthorized)
		return
	}
	if _, err := u.authenticate(r, token); err != nil {
		u.authFailed(w, r, err, true)
		return
	}
	if old, err := r.Cookie(SessionCookie); err == nil {
		u.sessions.delete(old.Value)
	}
	u.clearCookie(w, r, loginCookie, "/login")
	u.finishSwitch(w, r, token, next)
}

// finishSwitch opens the session for token and forgets the pending link.
func (u *UI) finishSwitch(w http.ResponseWriter, r *http.Request, token, next string) {
	if c, err := r.Cookie(switchCookie); err == nil {
		u.pending.delete(c.Value)
	}
	u.clearCookie(w, r, switchCookie, "/login/switch")
	u.startSession(w, r, token)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// loginData is the login page's data.
type loginData struct {
	Next  string
	CSRF  string
	Error string
}

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeTarget(r.URL.Query().Get("next"))
	if _, err := u.viewer(r); err == nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	u.renderLogin(w, r, next, "", http.StatusOK)
}

// renderLogin shows the token form with a fresh CSRF value (loginCSRF).
func (u *UI) renderLogin(w http.ResponseWriter, r *http.Request, next, msg string, status int) {
	u.render(w, r, "login", "layout", status, pageData{Title: "Log in", Nav: "login",
		Data: loginData{Next: next, CSRF: u.loginCSRF(w, r), Error: msg}})
}

// loginCSRF sets a fresh double-submit CSRF value for the /login forms:
// the same random value in an HttpOnly cookie and, returned, in the form.
func (u *UI) loginCSRF(w http.ResponseWriter, r *http.Request) string {
	csrf := randomID()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: csrf, Path: "/login", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: u.secureReq(r), MaxAge: 3600})
	return csrf
}

// loginForm checks a posted /login form (size, origin, CSRF) and returns
// its local redirect target; false when it refused the request, with
// retry saying what the user should do.
func (u *UI) loginForm(w http.ResponseWriter, r *http.Request, retry string) (next string, ok bool) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := u.origin.Check(r); err != nil {
		u.forbidden(w, r, "cross-origin request refused")
		return "", false
	}
	c, err := r.Cookie(loginCookie)
	if err != nil || !csrfOK(r, c.Value) {
		u.forbidden(w, r, "missing or invalid CSRF token; "+retry)
		return "", false
	}
	return safeTarget(r.PostFormValue("next")), true
}

func (u *UI) loginSubmit(w http.ResponseWriter, r *http.Request) {
	next, ok := u.loginForm(w, r, "reload the login page and try again")
	if !ok {
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if _, err := u.authenticate(r, token); err != nil {
		if !errors.Is(err, api.ErrUnauthorized) {
			u.authFailed(w, r, err, true)
			return
		}
		u.renderLogin(w, r, next, "That token is invalid, expired or revoked.", http.StatusUnauthorized)
		return
	}
	u.clearCookie(w, r, loginCookie, "/login")
	u.startSession(w, r, token)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (u *UI) logout(w http.ResponseWriter, r *http.Request, _ *viewer) (string, error) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		u.sessions.delete(c.Value)
	}
	u.clearCookie(w, r, SessionCookie, "/")
	return "/login", nil
}

// csrfOK compares the request's CSRF token (header, else form field) with
// want in constant time.
func csrfOK(r *http.Request, want string) bool {
	got := r.Header.Get(CSRFHeader)
	if got == "" {
		got = r.PostFormValue("csrf")
	}
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

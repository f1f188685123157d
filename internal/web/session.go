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

// authenticate checks a user token: node credentials and role-less tokens
// cannot log in.
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
// the address bar and the history at once.
func (u *UI) tokenLogin(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	token := q.Get("token")
	q.Del("token")
	rest := *r.URL
	rest.RawQuery = q.Encode()
	target := rest.RequestURI()
	if _, err := u.authenticate(r, token); err != nil {
		if !errors.Is(err, api.ErrUnauthorized) {
			u.authFailed(w, r, err, true)
			return
		}
		u.log.LogAttrs(r.Context(), slog.LevelInfo, "login link refused", slog.String("path", r.URL.Path))
		u.renderLogin(w, r, target, "That login link's token is invalid, expired or revoked.", http.StatusUnauthorized)
		return
	}
	u.startSession(w, r, token)
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// loginData is the login page's data.
type loginData struct {
	Next  string
	CSRF  string
	Error string
}

func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	next := r.URL.Query().Get("next")
	if !localPath(next) {
		next = "/"
	}
	if _, err := u.viewer(r); err == nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	u.renderLogin(w, r, next, "", http.StatusOK)
}

// renderLogin shows the token form with a fresh double-submit CSRF value:
// the same random value in an HttpOnly cookie and in the form.
func (u *UI) renderLogin(w http.ResponseWriter, r *http.Request, next, msg string, status int) {
	csrf := randomID()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: csrf, Path: "/login", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: u.secureReq(r), MaxAge: 3600})
	u.render(w, r, "login", "layout", status, pageData{Title: "Log in", Nav: "login",
		Data: loginData{Next: next, CSRF: csrf, Error: msg}})
}

func (u *UI) loginSubmit(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := u.origin.Check(r); err != nil {
		u.forbidden(w, r, "cross-origin request refused")
		return
	}
	c, err := r.Cookie(loginCookie)
	if err != nil || !csrfOK(r, c.Value) {
		u.forbidden(w, r, "missing or invalid CSRF token; reload the login page and try again")
		return
	}
	next := r.PostFormValue("next")
	if !localPath(next) {
		next = "/"
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

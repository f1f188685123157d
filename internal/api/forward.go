package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
)

// LeaderHeader, on a response, is the base URL of the replica that leads:
// the one whose answer it is. A client given several servers goes to it
// first from then on.
const LeaderHeader = "X-Gpufleet-Leader"

// forwardedHeader marks a request a follower forwarded: it is never
// forwarded again (the receiver answers it, or says it does not lead).
const forwardedHeader = "X-Gpufleet-Forwarded"

// LeaderFunc says where the leader answers: url its base URL, self true
// when it is this replica. An error wrapping ErrUnavailable means nobody
// leads now (a request then gets 503, and a client tries another server).
type LeaderFunc func(ctx context.Context) (url string, self bool, err error)

// answeredLocally are the paths a replica answers itself, leader or not:
// its own liveness, readiness and metrics, and the API document.
func answeredLocally(path string) bool {
	switch path {
	case "/healthz", "/readyz", "/metrics", "/openapi.json", "/api/v1/openapi.json":
		return true
	}
	return false
}

// forwarder sends a follower's requests to the leader.
type forwarder struct {
	leader LeaderFunc
	mu     sync.Mutex
	proxy  map[string]*httputil.ReverseProxy
}

// serve answers r when this replica does not lead: forwarded to the
// leader, or 503. It reports false when this replica leads and must
// answer r itself.
func (f *forwarder) serve(w http.ResponseWriter, r *http.Request) bool {
	if answeredLocally(r.URL.Path) {
		return false
	}
	leader, self, err := f.leader(r.Context())
	if err == nil && self {
		if leader != "" {
			w.Header().Set(LeaderHeader, leader)
		}
		return false
	}
	switch {
	case err != nil:
		if !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		writeErrorBody(w, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
	case r.Header.Get(forwardedHeader) != "":
		writeErrorBody(w, http.StatusServiceUnavailable, CodeUnavailable,
			"this replica does not lead, and the request was forwarded to it already: try again")
	default:
		p, err := f.proxyTo(leader)
		if err != nil {
			writeErrorBody(w, http.StatusServiceUnavailable, CodeUnavailable, err.Error())
			return true
		}
		r.Header.Set(forwardedHeader, "1")
		p.ServeHTTP(w, r)
	}
	return true
}

// proxyTo is the reverse proxy to base, made once per leader URL.
func (f *forwarder) proxyTo(base string) (*httputil.ReverseProxy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.proxy[base]; ok {
		return p, nil
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: the leader's url %q is not an http(s) base URL", ErrUnavailable, base)
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.SetXForwarded()
		},
		// Streams (watch=1, follow=1) go out as the leader writes them.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeErrorBody(w, http.StatusServiceUnavailable, CodeUnavailable,
				fmt.Sprintf("this replica does not lead, and the leader at %s did not answer: %v", base, err))
		},
	}
	if f.proxy == nil {
		f.proxy = map[string]*httputil.ReverseProxy{}
	}
	f.proxy[base] = p
	return p, nil
}

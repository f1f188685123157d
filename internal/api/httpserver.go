package api

import (
	"net/http"
	"time"
)

// NewHTTPServer returns an http.Server for h with the timeouts an API
// facing people and agents needs: headers within 5s, bodies within 30s,
// responses within 60s except streams (events, followed logs), which lift
// the deadline per write through http.ResponseController, idle keep-alive
// connections closed after 120s, headers capped at 64 KiB.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

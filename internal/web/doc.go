// Package web is gpufleet's dashboard: server-rendered HTML pages over the
// api.Service, embedded in the binary with no asset build step.
//
// Every page is rendered by html/template from a view model built in Go;
// charts are SVG drawn from the server's per-GPU rollups by Go code. Pages
// refresh their live region by polling a small HTML fragment under /ui/
// (see static/app.js), so they work, minus live updates, without
// JavaScript.
//
// Login exchanges an API token for a random session id held in an HttpOnly,
// SameSite=Strict cookie; the token stays server-side and is re-validated
// with Service.Authenticate on every request. Every unsafe request (POST)
// carries the session's CSRF token, compared in constant time. The
// dashboard calls the service only with the logged-in principal, so a
// member sees exactly what the API would show that member.
package web

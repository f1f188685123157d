// Package api is gpufleet's HTTP API: the handler over the control plane's
// services, the route table, error mapping, and a typed client.
//
// The control plane implements Service, AgentService, LogService and
// WatchService (internal/server); NewHandler serves them under /api/v1 with
// bearer-token authentication, strict decoding of user bodies (an unknown
// field is a 400 naming it), lenient decoding of the agent protocol, body
// caps (413), pagination (limit, next_token) and server-sent events.
// errorStatus is the one place that maps errors to statuses:
//
//	gpufleet.ErrNotFound     404 not_found
//	gpufleet.ErrInvalid      400 invalid
//	gpufleet.ErrUnsupported  422 unsupported
//	ErrUnauthorized          401 unauthorized
//	ErrForbidden             403 forbidden
//	ErrUnavailable           503 unavailable (clients try another server);
//	                         the store's ErrFenced wraps it
//	*http.MaxBytesError      413 too_large
//	anything else            500 internal (logged; the message stays generic)
//
// Routes lists every route with the credential it takes; openapi.json (served
// at /api/v1/openapi.json) documents exactly those, which a test enforces.
// Client mirrors the routes, fails over between server URLs and retries
// idempotent requests; its errors unwrap to the same sentinels, so callers
// test them with errors.Is on either side of the wire.
package api

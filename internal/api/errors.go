package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gpufleet/gpufleet"
)

// Errors the API adds to the root sentinels. Wrap them with context
// (fmt.Errorf("%w: admin only", api.ErrForbidden)); errorStatus maps each to
// one HTTP status.
var (
	// ErrUnauthorized means the request carries no credential, or one that
	// is unknown, revoked or expired (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden means the credential is valid but may not do this: a
	// member on an admin endpoint, a node credential on a user endpoint
	// (403).
	ErrForbidden = errors.New("forbidden")
	// ErrUnavailable is gpufleet.ErrUnavailable: this replica cannot serve
	// the request now (not the leader, a stale epoch, shutting down); the
	// client should try another server (503).
	ErrUnavailable = gpufleet.ErrUnavailable
)

// Error codes in the JSON error body {"error": "...", "code": "..."}.
const (
	CodeNotFound         = "not_found"
	CodeInvalid          = "invalid"
	CodeUnsupported      = "unsupported"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeUnavailable      = "unavailable"
	CodeTooLarge         = "too_large"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeMediaType        = "unsupported_media_type"
	CodeUnsatisfiable    = "unsatisfiable"
	CodeInternal         = "internal"
)

// ErrorBody is the JSON body of every error response. A submission no
// node can ever run (422 unsatisfiable) carries its reason as data:
// reason_code and explanation (docs/JOBS.md#why-a-job-waits).
type ErrorBody struct {
	Error       string                `json:"error"`
	Code        string                `json:"code"`
	ReasonCode  string                `json:"reason_code,omitempty"`
	Explanation *gpufleet.Explanation `json:"explanation,omitempty"`
}

// errorStatus maps an error to its HTTP status and code. It is the one place
// that decides how a failure looks to a client.
func errorStatus(err error) (int, string) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, CodeTooLarge
	case errors.Is(err, ErrMediaType):
		return http.StatusUnsupportedMediaType, CodeMediaType
	case errors.Is(err, gpufleet.ErrUnsatisfiable):
		return http.StatusUnprocessableEntity, CodeUnsatisfiable
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, CodeUnauthorized
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden, CodeForbidden
	case errors.Is(err, gpufleet.ErrNotFound):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, gpufleet.ErrInvalid):
		return http.StatusBadRequest, CodeInvalid
	case errors.Is(err, gpufleet.ErrUnsupported):
		return http.StatusUnprocessableEntity, CodeUnsupported
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, CodeUnavailable
	}
	return http.StatusInternalServerError, CodeInternal
}

// codeSentinel is the inverse of errorStatus, for the client.
func codeSentinel(code string, status int) error {
	switch code {
	case CodeNotFound:
		return gpufleet.ErrNotFound
	case CodeInvalid, CodeTooLarge, CodeMediaType:
		return gpufleet.ErrInvalid
	case CodeUnsatisfiable:
		return gpufleet.ErrUnsatisfiable
	case CodeUnsupported:
		return gpufleet.ErrUnsupported
	case CodeUnauthorized:
		return ErrUnauthorized
	case CodeForbidden:
		return ErrForbidden
	case CodeUnavailable:
		return ErrUnavailable
	}
	switch status {
	case http.StatusNotFound:
		return gpufleet.ErrNotFound
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return gpufleet.ErrInvalid
	case http.StatusUnprocessableEntity:
		return gpufleet.ErrUnsupported
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return ErrUnavailable
	}
	return nil
}

// Error is a non-2xx answer as the client sees it. It unwraps to the
// sentinel matching its code, so errors.Is(err, gpufleet.ErrNotFound) works
// on the client side as on the server side.
type Error struct {
	Status  int    // HTTP status
	Code    string // not_found, invalid, ...
	Message string // the server's message
	// Explanation is the reason as data of a refused submission, when the
	// server sent one.
	Explanation *gpufleet.Explanation
}

func (e *Error) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
}

// Unwrap returns the sentinel for the error's code (nil when none fits).
func (e *Error) Unwrap() error { return codeSentinel(e.Code, e.Status) }

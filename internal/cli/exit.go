package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// Exit codes: what a script reads from gpufleet's status. They are a
// contract (docs/CLI.md#exit-codes and `gpufleet --help`): codes are added,
// never renumbered.
const (
	ExitOK            = 0 // it did what was asked
	ExitError         = 1 // anything below does not cover; a check that failed (audit --fail-on, repaired --wait, rollout status of a halted rollout, wait's timeout)
	ExitUsage         = 2 // the command line is wrong: unknown command or flag, missing or extra argument, a flag value or option combination refused before any request
	ExitInvalid       = 3 // the request's input is refused (400, or the client's check of the same rules): a field out of range, a bad value in a job file
	ExitUnsatisfiable = 4 // the request is valid but can never be met (422): no node could ever run the job, the server does not offer the feature
	ExitAuth          = 5 // no, a wrong or an expired token (401), or the token may not do this (403)
	ExitNotFound      = 6 // the job, node, rack, stack or rollout named does not exist (404)
	ExitUnreachable   = 7 // no server answered, or none could serve now (503: no leader, not ready)
)

// exitCodes is the table gpufleet's help prints.
var exitCodes = []struct {
	code int
	name string
	what string
}{
	{ExitOK, "ok", "it did what was asked"},
	{ExitError, "error", "any other failure, or a check that failed (audit --fail-on, repaired --wait, rollout status, wait's timeout)"},
	{ExitUsage, "usage", "the command line is wrong: unknown command or flag, a missing or extra argument, a flag value refused before any request"},
	{ExitInvalid, "invalid", "the request's input is refused: HTTP 400, or the same rules checked before sending (a job file's bad value)"},
	{ExitUnsatisfiable, "unsatisfiable", "valid, but the fleet can never meet it, or the server does not offer it (HTTP 422)"},
	{ExitAuth, "auth", "the token is missing, wrong or expired (401), or may not do this (403)"},
	{ExitNotFound, "not-found", "what the command names does not exist (HTTP 404)"},
	{ExitUnreachable, "unreachable", "no server answered, or none could serve now (HTTP 503: no leader, not ready)"},
}

// usageError is a command line gpufleet refuses before sending anything.
// It is also gpufleet.ErrInvalid.
type usageError struct{ err error }

func (e *usageError) Error() string   { return e.err.Error() }
func (e *usageError) Unwrap() []error { return []error{e.err, gpufleet.ErrInvalid} }

// exitCode is the status Main returns for err.
func exitCode(err error) int {
	var (
		ee     *exitError
		ue     *usageError
		apiErr *api.Error
		urlErr *url.Error
		netErr net.Error
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		return ExitUsage
	case errors.Is(err, api.ErrUnauthorized), errors.Is(err, api.ErrForbidden):
		return ExitAuth
	case errors.Is(err, gpufleet.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, gpufleet.ErrUnsatisfiable), errors.Is(err, gpufleet.ErrUnsupported):
		return ExitUnsatisfiable
	case errors.Is(err, gpufleet.ErrInvalid):
		return ExitInvalid // from the server, or the client's own check of the same rules
	case errors.Is(err, gpufleet.ErrUnavailable):
		return ExitUnreachable
	case errors.As(err, &apiErr):
		return ExitError // a 5xx other than 503
	case errors.As(err, &urlErr), errors.As(err, &netErr), errors.Is(err, context.DeadlineExceeded):
		return ExitUnreachable
	}
	return ExitError
}

// asUsage marks err, from cobra's own parsing of flags and arguments, as
// a usage error.
func asUsage(err error) error {
	var ue *usageError
	switch {
	case err == nil, errors.As(err, &ue):
		return err
	}
	return &usageError{err}
}

// exitCodeHelp is the exit-code table for the root command's help.
func exitCodeHelp() string {
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, c := range exitCodes {
		fmt.Fprintf(&b, "  %d  %-13s %s\n", c.code, c.name, c.what)
	}
	return strings.TrimRight(b.String(), "\n")
}

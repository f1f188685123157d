package cli

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/rollout"
)

func TestExitCode(t *testing.T) {
	apiErr := func(status int, code string) error {
		return fmt.Errorf("GET /api/v1/x: %w", &api.Error{Status: status, Code: code, Message: "m"})
	}
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"plain", errors.New("boom"), ExitError},
		{"usage", usageErr("--gpus: expected a number"), ExitUsage},
		{"cobra's own", asUsage(errors.New(`unknown flag: --x`)), ExitUsage},
		{"local check of a request", fmt.Errorf("job.yaml: %w", gpufleet.ErrInvalid), ExitInvalid},
		{"400", apiErr(400, api.CodeInvalid), ExitInvalid},
		{"413", apiErr(413, api.CodeTooLarge), ExitInvalid},
		{"422 unsatisfiable", apiErr(422, api.CodeUnsatisfiable), ExitUnsatisfiable},
		{"422 unsupported", apiErr(422, api.CodeUnsupported), ExitUnsatisfiable},
		{"401", apiErr(401, api.CodeUnauthorized), ExitAuth},
		{"403", apiErr(403, api.CodeForbidden), ExitAuth},
		{"404", apiErr(404, api.CodeNotFound), ExitNotFound},
		{"503", apiErr(503, api.CodeUnavailable), ExitUnreachable},
		{"500", apiErr(500, api.CodeInternal), ExitError},
		{"connection refused", &url.Error{Op: "Get", URL: "http://127.0.0.1:1", Err: errors.New("connection refused")}, ExitUnreachable},
		{"a check that failed", &exitError{code: ExitError, err: errors.New("rollout r-1 halted")}, ExitError},
		{"a job's own status", &exitError{code: 42, err: errors.New("exit 42"), silent: true}, 42},
	}
	for _, tc := range tests {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("%s: exitCode(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestRolloutStatusFailsUnlessItsStackIsInPlace(t *testing.T) {
	for state, want := range map[rollout.State]int{rollout.Running: ExitOK, rollout.Paused: ExitOK, rollout.Done: ExitOK,
		rollout.RollingBack: ExitOK, rollout.Halted: ExitError, rollout.Aborted: ExitError, rollout.RolledBack: ExitError} {
		err := rolloutOutcome(rollout.Rollout{ID: "r-1", State: state, Reason: "n1: validation failed"})
		if got := exitCode(err); got != want {
			t.Errorf("%s: exit %d, want %d (%v)", state, got, want, err)
		}
		if err != nil && !strings.Contains(err.Error(), "rollout r-1 "+string(state)+": n1: validation failed") {
			t.Errorf("%s: %v does not say why", state, err)
		}
	}
}

// TestExitCodesAgainstTheServer runs the real command line against a real
// server and checks the status a script reads for each kind of failure.
func TestExitCodesAgainstTheServer(t *testing.T) {
	hsURL, tokens := realServer(t, "team-a")
	member := []string{"--server", hsURL, "--token", tokens["team-a"]}
	tests := []struct {
		name    string
		args    []string
		want    int
		wantErr string
	}{
		{"ok", append([]string{"jobs"}, member...), ExitOK, ""},
		{"unknown command", []string{"jbos"}, ExitUsage, "unknown command"},
		{"unknown flag", append([]string{"jobs", "--bogus"}, member...), ExitUsage, "unknown flag: --bogus"},
		{"missing argument", append([]string{"job"}, member...), ExitUsage, "accepts 1 arg(s)"},
		{"bad output", append([]string{"jobs", "-o", "xml"}, member...), ExitUsage, "-o/--output"},
		{"not found", append([]string{"job", "j-nope"}, member...), ExitNotFound, "j-nope"},
		{"wrong token", []string{"jobs", "--server", hsURL, "--token", "gpt_wrong"}, ExitAuth, "token"},
		{"admin only", append([]string{"tokens"}, member...), ExitAuth, "admin"},
		{"unsatisfiable", append(append([]string{"submit", "--gpus", "4"}, member...), "--", "true"), ExitUnsatisfiable, ""},
		{"invalid", append([]string{"usage", "--from", "2026-02-01T00:00:00Z", "--to", "2026-01-01T00:00:00Z"}, member...), ExitInvalid, "before"},
		{"unreachable", []string{"jobs", "--server", "http://127.0.0.1:1", "--token", tokens["team-a"]}, ExitUnreachable, "connection refused"},
	}
	for _, tc := range tests {
		_, errOut, code := run(t, tc.args...)
		if code != tc.want || !strings.Contains(errOut, tc.wantErr) {
			t.Errorf("%s: gpufleet %s: exit %d, want %d naming %q; stderr %s", tc.name, strings.Join(tc.args[:min(len(tc.args), 4)], " "), code, tc.want, tc.wantErr, errOut)
		}
	}
}

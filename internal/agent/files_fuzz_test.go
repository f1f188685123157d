package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
)

// The agent's own files survive a restart; a torn, stale or tampered one
// must be refused with ErrInvalid, never read as garbage (a pgid of 1
// would make the runner signal every process it may).

// checkRefused fails unless err wraps ErrInvalid with a message of
// reasonable length.
func checkRefused(t *testing.T, what string, data []byte, err error) {
	t.Helper()
	if !errors.Is(err, gpufleet.ErrInvalid) || len(err.Error()) > 2*gpufleet.QuoteLimit+300 {
		t.Fatalf("%s %.200q: error %.300q (%d bytes): not ErrInvalid or too long", what, data, err, len(err.Error()))
	}
}

// jsonIndent is how the agent writes its files (writeJSONAtomic).
func jsonIndent(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatalf("encoding %+v: %v", v, err)
	}
	return append(data, '\n')
}

func FuzzStateFile(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	code := 0
	good := stateFile{Attempts: []*attempt{
		{State: gpufleet.AttemptRunning, Launched: true, Supervisor: 4242, PGID: 4243, QueuedAt: now, StartedAt: &now,
			Holds: []hold{{Attempt: "a-1", GPU: "GPU-1", Share: 1}}, Stop: &stopRequest{Reason: "drain", Code: "drained", At: now, Grace: time.Minute, Stage: 1}},
		{State: gpufleet.AttemptSucceeded, Launched: true, QueuedAt: now, FinishedAt: &now, ExitCode: &code, LogDone: true},
	}}
	good.Attempts[0].As.AttemptID, good.Attempts[0].As.JobID, good.Attempts[0].As.GPUs = "a-1", "j-1", []string{"GPU-1"}
	good.Attempts[1].As.AttemptID = "a-2"
	f.Add(jsonIndent(f, good))
	for _, s := range []string{
		`{"attempts":[]}`, `{}`, `null`, `[]`, ``, `{"attempts":null}`, `{"attempts":[null]}`, `{"attempts":{}}`,
		`{"attempts":[{"assignment":{"attempt_id":"../x"},"state":"running"}]}`,
		`{"attempts":[{"assignment":{"attempt_id":"a-1"},"state":"exploded"}]}`,
		`{"attempts":[{"assignment":{"attempt_id":"a-1"},"state":"running","launched":true,"supervisor_pid":1,"pgid":1}]}`,
		`{"attempts":[{"assignment":{"attempt_id":"a-1"},"state":"running","launched":true,"supervisor_pid":-5,"pgid":-1}]}`,
		`{"attempts":[{"assignment":{"attempt_id":"a-1"},"state":"running","launched":true,"supervisor_pid":99999999,"pgid":4194305}]}`,
		`{"attempts":[{"assignment":{"attempt_id":"a-1"},"state":"running","stop":{"stage":7}}]}`,
		`{"attempts":[{"assignment":{"attempt_id":"a-1"},"state":"starting"},{"assignment":{"attempt_id":"a-1"},"state":"failed"}]}`,
		`{"attempts":[{"assignment":{"attempt_id":"a-1","gpus":"x"},"state":"starting"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, dropped, err := parseStateFile(data)
		if err != nil {
			checkRefused(t, "state.json", data, err)
			return
		}
		for _, why := range dropped {
			if len(why) > gpufleet.QuoteLimit+200 {
				t.Fatalf("state.json %.200q: dropped attempt described in %d bytes", data, len(why))
			}
		}
		for _, a := range st.Attempts {
			switch {
			case a == nil:
				t.Fatalf("state.json %.200q: a null attempt kept", data)
			case validAttemptID(a.As.AttemptID) != nil:
				t.Fatalf("state.json %.200q: attempt id %q kept", data, a.As.AttemptID)
			case !slices.Contains(attemptStates, a.State):
				t.Fatalf("state.json %.200q: state %q kept", data, a.State)
			case (a.Supervisor != 0 && !validPID(a.Supervisor)) || (a.PGID != 0 && !validPID(a.PGID)):
				t.Fatalf("state.json %.200q: supervisor %d, pgid %d kept", data, a.Supervisor, a.PGID)
			case a.Stop != nil && (a.Stop.Stage < stageNone || a.Stop.Stage > stageKill):
				t.Fatalf("state.json %.200q: stop stage %d kept", data, a.Stop.Stage)
			}
		}
		// What save writes of it reads back whole and the same.
		out := jsonIndent(t, st)
		again, dropped, err := parseStateFile(out)
		if err != nil || len(dropped) > 0 || len(again.Attempts) != len(st.Attempts) {
			t.Fatalf("state.json %s reads back as %d attempts, dropped %q, %v", out, len(again.Attempts), dropped, err)
		}
		if out2 := jsonIndent(t, again); !bytes.Equal(out, out2) {
			t.Fatalf("state.json changes when read back:\n%s\n%s", out, out2)
		}
	})
}

func FuzzPIDRecord(f *testing.F) {
	started := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Add(jsonIndent(f, pidRecord{SupervisorPID: 4242, PID: 4243, PGID: 4243, StartedAt: started}))
	for _, s := range []string{
		`{"supervisor_pid":100,"pid":101,"pgid":101}`, `{"supervisor_pid":100,"pid":101,"pgid":1}`, `{"supervisor_pid":100,"pid":1,"pgid":1}`,
		`{"supervisor_pid":100,"pid":101,"pgid":0}`, `{"supervisor_pid":100,"pid":-101,"pgid":-101}`, `{"supervisor_pid":0,"pid":101,"pgid":101}`,
		`{"supervisor_pid":100,"pid":101,"pgid":102}`, `{"supervisor_pid":100,"pid":4194305,"pgid":4194305}`,
		`{"supervisor_pid":100,"pid":101,"pgid":101,"started_at":"nope"}`, `{"supervisor_pid":1e3,"pid":101,"pgid":101}`,
		`{"supervisor_pid":100,"pid":101,"pgid":101`, `{}`, `null`, ``, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pr, err := parsePIDRecord(data)
		if err != nil {
			checkRefused(t, "pid.json", data, err)
			return
		}
		if !validPID(pr.SupervisorPID) || !validPID(pr.PID) || pr.PGID != pr.PID {
			t.Fatalf("pid.json %.200q: %+v accepted", data, pr)
		}
		again, err := parsePIDRecord(jsonIndent(t, pr))
		if diff := cmp.Diff(pr, again); err != nil || diff != "" {
			t.Fatalf("pid.json %+v reads back differently (%v): %s", pr, err, diff)
		}
	})
}

func FuzzExitRecord(f *testing.F) {
	finished := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, ex := range []exitRecord{
		{ExitCode: 0, FinishedAt: finished}, {ExitCode: 137, Signal: "SIGKILL", FinishedAt: finished},
		{ExitCode: 127, Error: "start x: no such file", FinishedAt: finished}, {ExitCode: 143, Signal: "terminated", Fenced: "no word from the agent for 5s (fence 5s)"},
	} {
		f.Add(jsonIndent(f, ex))
	}
	for _, s := range []string{
		`{"exit_code":-1}`, `{"exit_code":256}`, `{"exit_code":9223372036854775807}`, `{"exit_code":1.5}`, `{"exit_code":"0"}`,
		`{"finished_at":"2026-11-30T12:00:00+25:00"}`, `{}`, `null`, ``, `{"exit_code":0} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ex, err := parseExitRecord(data)
		if err != nil {
			checkRefused(t, "status.json", data, err)
			return
		}
		if ex.ExitCode < 0 || ex.ExitCode > 255 {
			t.Fatalf("status.json %.200q: exit code %d accepted", data, ex.ExitCode)
		}
		again, err := parseExitRecord(jsonIndent(t, ex))
		if diff := cmp.Diff(ex, again); err != nil || diff != "" {
			t.Fatalf("status.json %+v reads back differently (%v): %s", ex, err, diff)
		}
	})
}

func FuzzCredential(f *testing.F) {
	issued := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Add(jsonIndent(f, credential{Node: "n1", Credential: "gpn_0123456789abcdef", IssuedAt: issued, ExpiresAt: issued.Add(720 * time.Hour), HeartbeatS: 1, FenceAfterS: 5}))
	f.Add(jsonIndent(f, credential{Node: "n1", Credential: "cred"})) // an older agent's: no timing, no times
	for _, s := range []string{
		`{"node":"n1","credential":"tok\nX-Evil: 1"}`, `{"node":"n1","credential":"to k"}`, `{"node":"n1","credential":""}`,
		`{"node":"N_1","credential":"tok"}`, `{"node":"","credential":"tok"}`, `{"node":"n1","credential":"t\u00e9k"}`,
		`{"node":"n1","credential":"tok","issued_at":"2026-11-30T12:00:00Z","expires_at":"2026-11-29T12:00:00Z"}`,
		`{"node":"n1","credential":"tok","heartbeat_s":-1}`, `{"node":"n1","credential":"tok","fence_after_s":1e300}`,
		`{"node":"n1","credential":"tok","heartbeat_s":"1"}`, `{"node":"n1","credential":"tok"`, `{}`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseCredential(data)
		if err != nil {
			checkRefused(t, "credential.json", data, err)
			return
		}
		if gpufleet.ValidateNodeName("node", c.Node) != nil || c.Credential == "" ||
			strings.ContainsFunc(c.Credential, func(r rune) bool { return r <= ' ' || r > '~' }) {
			t.Fatalf("credential.json %.200q: node %q, credential %q accepted", data, c.Node, c.Credential)
		}
		if secondsDuration(c.HeartbeatS) == 0 && c.HeartbeatS != 0 || secondsDuration(c.FenceAfterS) == 0 && c.FenceAfterS != 0 {
			t.Fatalf("credential.json %.200q: timings %g, %g accepted that the agent ignores", data, c.HeartbeatS, c.FenceAfterS)
		}
		again, err := parseCredential(jsonIndent(t, c))
		if diff := cmp.Diff(c, again); err != nil || diff != "" {
			t.Fatalf("credential.json %+v reads back differently (%v): %s", c, err, diff)
		}
	})
}

func FuzzAliveFence(f *testing.F) {
	for _, s := range []string{"5000000000\n", "0\n", "", "\n", " 7 ", "+5", "-1", "abc", "1e9", "5s",
		"9223372036854775807", "9223372036854775808", "0x10", "\x00", "1\n2\n"} {
		f.Add([]byte(s), int64(0))
	}
	f.Add([]byte(nil), int64(5*time.Second))
	f.Fuzz(func(t *testing.T, data []byte, fence int64) {
		d, err := parseAliveFence(data)
		if err != nil {
			checkRefused(t, "alive file", data, err)
		} else if d < 0 {
			t.Fatalf("alive file %.200q: fence %d accepted", data, d)
		}
		// What writeAlive writes reads back as that fence.
		if fence >= 0 {
			if got, err := parseAliveFence(formatAliveFence(time.Duration(fence))); err != nil || got != time.Duration(fence) {
				t.Fatalf("fence %d written as %q reads back as %d, %v", fence, formatAliveFence(time.Duration(fence)), got, err)
			}
		}
	})
}

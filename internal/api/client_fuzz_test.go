package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
)

// printable reports whether s is what cleanMessage lets through: valid
// UTF-8 without control characters but newline and tab.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
		return r != '\n' && r != '\t' && unicode.IsControl(r)
	})
}

// FuzzReadError: whatever a server (or a proxy) answers with a non-2xx
// status, the client's *Error has that status, a sentinel where the
// status or code has one, and a message a terminal can print, no longer
// than the server's own; and what writeErrorBody sends reads back as it
// was sent.
func FuzzReadError(f *testing.F) {
	for _, s := range []struct {
		status    uint16
		body      string
		code, msg string
	}{
		{400, `{"error":"invalid: limit \"x\": expected a non-negative integer","code":"invalid"}`, CodeInvalid, `invalid: limit "x"`},
		{404, `{"error":"not found: job j-1","code":"not_found"}`, CodeNotFound, "not found: job j-1"},
		{503, `{"error":"not the leader","code":"unavailable"}`, CodeUnavailable, "line one\nline two"},
		{502, "<html><body>Bad Gateway</body></html>", "", ""},
		{500, "", CodeInternal, "internal error"},
		{401, `{"error":"\u001b[2J\u001b[31mpwned","code":"unauthorized"}`, CodeUnauthorized, "tab\there"},
		{403, `{"error":"` + strings.Repeat("x", 70000) + `"}`, CodeForbidden, strings.Repeat("é", 1500)},
		{400, `{"error":"` + strings.Repeat("y", 10000) + `","code":"invalid"}`, CodeInvalid, strings.Repeat("z", 2049)},
		{422, `{"code":"` + strings.Repeat("c", 200) + `"}`, strings.Repeat("c", 65), "x"},
		{413, "{\"error\":\"\xff\xfe\"}", CodeTooLarge, "\xff"},
		{418, `{"error":"","code":""}`, "", ""},
		{301, "Moved", "weird", "\x1b]0;title\x07"},
	} {
		f.Add(s.status, []byte(s.body), s.code, s.msg)
	}
	f.Fuzz(func(t *testing.T, status16 uint16, body []byte, code, msg string) {
		status := 300 + int(status16)%300
		resp := &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body))}
		var e *Error
		if !errors.As(readError(resp), &e) {
			t.Fatalf("readError did not return an *Error")
		}
		if e.Status != status {
			t.Fatalf("status %d read as %d", status, e.Status)
		}
		if text := e.Error(); len(text) > maxErrorMessage+len("...") || !printable(text) || len(e.Code) > maxCodeLen || !printable(e.Code) {
			t.Fatalf("body %.200q: error %.300q (%d bytes), code %.100q: too long or not printable", body, text, len(text), e.Code)
		}
		if got, want := errors.Unwrap(e), codeSentinel(e.Code, status); got != want {
			t.Fatalf("status %d code %q unwraps to %v, want %v", status, e.Code, got, want)
		}
		switch status {
		case 400, 401, 403, 404, 413, 415, 422, 502, 503, 504:
			if errors.Unwrap(e) == nil {
				t.Fatalf("status %d code %q: no sentinel", status, e.Code)
			}
		}
		// The server's own error bodies read back as sent.
		rec := httptest.NewRecorder()
		writeErrorBody(rec, status, code, msg)
		e = nil
		if !errors.As(readError(rec.Result()), &e) {
			t.Fatalf("readError did not return an *Error")
		}
		if code == "" && msg == "" || !printable(code) || len(code) > maxCodeLen || !printable(msg) {
			return
		}
		want := msg
		if len(msg) > maxErrorMessage {
			want = strings.ToValidUTF8(msg[:maxErrorMessage], "") + "..."
		}
		if e.Code != code || e.Message != want {
			t.Fatalf("sent code %q message %.200q, read code %q message %.200q", code, want, e.Code, e.Message)
		}
	})
}

// streamTransport answers every request with a 200 event stream of body.
type streamTransport struct{ body []byte }

func (s streamTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(s.body)), Request: r}, nil
}

// watchBody runs one watchOnce over body and returns the events it
// delivered, what it said and the resulting since.
func watchBody(t *testing.T, body []byte, since int64, stopAt int) (got []gpufleet.Event, delivered bool, after int64, err error) {
	t.Helper()
	c, err := NewClient([]string{"http://fuzz.invalid"}, "tok", WithHTTPClient(&http.Client{Transport: streamTransport{body}}), WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	delivered, err = c.watchOnce(context.Background(), &since, func(ev gpufleet.Event) error {
		got = append(got, ev)
		if len(got) == stopAt {
			return errStopWatch
		}
		return nil
	})
	return got, delivered, since, err
}

var errStopWatch = errors.New("stop watching")

// FuzzWatchStream: any bytes as an event stream end the watch with an
// error (the stream ended, or an event did not decode), never a panic;
// the events it delivered are counted and since moves to the largest id.
func FuzzWatchStream(f *testing.F) {
	ev := gpufleet.Event{ID: 7, At: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Actor: "scheduler", Kind: "job.started", Object: "j-1", Detail: "on n1"}
	for _, s := range []string{
		string(sseFrame(ev)), ": connected\n\n" + string(sseFrame(ev)) + ": keepalive\n\n", "data: {\"id\":3}\n\ndata: {\"id\":2}\n\n",
		"data: {\"id\":1,\ndata: \"kind\":\"x\"}\n\n", "data:{\"id\":5}\n\n", "data: {\"id\":\"x\"}\n\n", "data: not json\n\n", "data: {}\r\n\r\n",
		"id: 9\nevent: x\n\n", "data: {\"id\":-1}\n\n", "data: {\"id\":9223372036854775807}\n\n", "data: {\"id\":1e30}\n\n",
		"data: " + strings.Repeat("x", 70000) + "\n\n", "data: {\"id\":4}", "", "\n\n\n", "data:\n\n", ":" + strings.Repeat("k", 4<<20) + "\n",
	} {
		f.Add([]byte(s), int64(0), uint8(0))
	}
	f.Add([]byte(sseFrame(ev)), int64(10), uint8(1))
	f.Fuzz(func(t *testing.T, body []byte, since int64, stopAt uint8) {
		since = max(since, 0)
		got, delivered, after, err := watchBody(t, body, since, int(stopAt))
		if err == nil {
			t.Fatalf("stream %.200q: watchOnce ended without an error", body)
		}
		var fnErr *watchFnError
		stopped := errors.As(err, &fnErr) && fnErr.err == errStopWatch
		if stopped != (stopAt > 0 && len(got) == int(stopAt)) {
			t.Fatalf("stream %.200q: %v after %d events (stop at %d)", body, err, len(got), stopAt)
		}
		if stopped {
			got = got[:len(got)-1] // refused: not delivered, since stays before it
		}
		want := since
		for _, e := range got {
			want = max(want, e.ID)
		}
		if delivered != (len(got) > 0) || after != want {
			t.Fatalf("stream %.200q: %d events, delivered %v, since %d -> %d, want %d", body, len(got), delivered, since, after, want)
		}
	})
}

// FuzzWatchFrames: the events the server frames (sseFrame, with
// keepalives between them) are the events the client delivers, in order.
func FuzzWatchFrames(f *testing.F) {
	f.Add(int64(1), uint8(3), "job.started", "scheduler", "j-01jdq9x2m8abcdef", "on n1", true)
	f.Add(int64(9223372036854775800), uint8(2), "a\nb\rc", "agent:n1", "", "line\nbreak \u2028 </script>", false)
	f.Add(int64(-5), uint8(1), "", "", "\xff", "data: {\"id\":99}\n\n", true)
	f.Fuzz(func(t *testing.T, id int64, n uint8, kind, actor, object, detail string, keepalive bool) {
		var stream bytes.Buffer
		stream.WriteString(": connected\n\n")
		var want []gpufleet.Event
		at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		for i := range int(n%5) + 1 {
			ev := gpufleet.Event{ID: id + int64(i), At: at.Add(time.Duration(i) * time.Second), Actor: actor, Kind: kind, Object: object, Detail: detail}
			stream.Write(sseFrame(ev))
			if keepalive {
				stream.WriteString(": keepalive\n\n")
			}
			// The client sees the event as JSON carries it.
			data, _ := json.Marshal(ev)
			var sent gpufleet.Event
			if err := json.Unmarshal(data, &sent); err != nil {
				t.Fatal(err)
			}
			want = append(want, sent)
		}
		got, _, _, err := watchBody(t, stream.Bytes(), 0, 0)
		if err == nil || !strings.Contains(err.Error(), "stream ended") {
			t.Fatalf("stream %.300q: %v, want the stream to end", stream.Bytes(), err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("stream %.300q delivered (-sent +got):\n%s", stream.Bytes(), diff)
		}
	})
}

package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// streamConn prepares a long-lived response: it lifts the server's read
// deadline (a read timeout in the background would cancel the request) and
// write deadline, and bounds each write by StreamWriteTimeout instead: a
// stream may stay quiet for as long as it likes (a followed log of a job
// that prints nothing for a minute), but a client that stops reading
// cannot hold a write.
type streamConn struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (h *handler) newStream(w http.ResponseWriter) *streamConn {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{}) // not supported by every writer (tests)
	_ = rc.SetWriteDeadline(time.Time{})
	return &streamConn{w: w, rc: rc, timeout: h.opts.StreamWriteTimeout}
}

// Write writes and flushes b within the per-write deadline, then lifts
// it: a deadline left behind would end the stream once it had been quiet
// that long (its last chunk written after the deadline, the client reads
// an unexpected EOF).
func (s *streamConn) Write(b []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	defer s.rc.SetWriteDeadline(time.Time{})
	n, err := s.w.Write(b)
	if err != nil {
		return n, err
	}
	return n, s.flush()
}

func (s *streamConn) flush() error {
	if err := s.rc.Flush(); err != nil && err != http.ErrNotSupported {
		return err
	}
	return nil
}

func (h *handler) jobLogs(w http.ResponseWriter, r *http.Request, p Principal) error {
	if h.logs == nil {
		return fmt.Errorf("%w: this server does not serve logs", gpufleet.ErrUnsupported)
	}
	var q LogQuery
	var err error
	if q.Follow, err = boolParam(r, "follow"); err != nil {
		return err
	}
	if q.Previous, err = boolParam(r, "previous"); err != nil {
		return err
	}
	q.Attempt = r.URL.Query().Get("attempt")
	if s := r.URL.Query().Get("tail"); s != "" {
		if q.Tail, err = strconv.Atoi(s); err != nil {
			return fmt.Errorf("%w: tail %s: expected a number of lines", gpufleet.ErrInvalid, gpufleet.Quote(s))
		}
	}
	if s := r.URL.Query().Get("since"); s != "" {
		if q.Since, err = gpufleet.ParseDuration(s); err != nil {
			return fmt.Errorf("since: %w", err)
		}
	}
	if s := r.URL.Query().Get("since_time"); s != "" {
		if q.SinceTime, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return fmt.Errorf("%w: since_time %s: expected an RFC 3339 time like 2026-12-04T10:00:00Z", gpufleet.ErrInvalid, gpufleet.Quote(s))
		}
	}
	if err := q.Validate(); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if q.Follow {
		w.Header().Set("X-Accel-Buffering", "no")
	}
	// An error before the first byte still becomes a JSON error; after it,
	// the stream just ends. Even without follow a log can be long, so the
	// stream's per-write deadline applies.
	return h.logs.Logs(r.Context(), p, r.PathValue("id"), q, h.newStream(w))
}

// events lists stored events, or with ?watch=1 streams them as server-sent
// events: "id:", "event:" and "data:" lines per event, a comment line every
// KeepAlive while idle. ?since= (or the Last-Event-ID header on a
// reconnect) resumes after that id.
func (h *handler) events(w http.ResponseWriter, r *http.Request, p Principal) error {
	if h.watch == nil {
		return fmt.Errorf("%w: this server does not serve events", gpufleet.ErrUnsupported)
	}
	watch, err := boolParam(r, "watch")
	if err != nil {
		return err
	}
	var since int64
	if s := r.URL.Query().Get("since"); s != "" {
		if since, err = strconv.ParseInt(s, 10, 64); err != nil || since < 0 {
			return fmt.Errorf("%w: since %s: expected an event id", gpufleet.ErrInvalid, gpufleet.Quote(s))
		}
	}
	if !watch {
		lister, ok := h.watch.(EventLister)
		if !ok {
			return fmt.Errorf("%w: this server only streams events: use ?watch=1", gpufleet.ErrUnsupported)
		}
		limit, token, err := pageParams(r)
		if err != nil {
			return err
		}
		if token != "" {
			if since, err = strconv.ParseInt(token, 10, 64); err != nil || since < 0 {
				return fmt.Errorf("%w: next_token %s: not a token this server issued", gpufleet.ErrInvalid, gpufleet.Quote(token))
			}
		}
		list, err := lister.Events(r.Context(), p, EventQuery{Since: since, Limit: limit})
		if err != nil {
			return err
		}
		if list.Events == nil {
			list.Events = []gpufleet.Event{}
		}
		return writeJSON(w, http.StatusOK, list)
	}
	if s := r.Header.Get("Last-Event-ID"); s != "" {
		if id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil && id > since {
			since = id
		}
	}
	ch, err := h.watch.Watch(r.Context(), p, since)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := h.newStream(w)
	if _, err := s.Write([]byte(": connected\n\n")); err != nil {
		return err
	}
	tick := time.NewTicker(h.opts.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-tick.C:
			if _, err := s.Write([]byte(": keepalive\n\n")); err != nil {
				return err
			}
		case ev, ok := <-ch:
			if !ok {
				return nil
			}
			if _, err := s.Write(sseFrame(ev)); err != nil {
				return err
			}
			tick.Reset(h.opts.KeepAlive)
		}
	}
}

// sseFrame encodes one event as a server-sent event.
func sseFrame(ev gpufleet.Event) []byte {
	data, _ := json.Marshal(ev) // an Event always encodes
	kind := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, ev.Kind)
	if kind == "" {
		kind = "message"
	}
	return fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", ev.ID, kind, data)
}

// watchSnapshots streams a list as server-sent events: an "event: snapshot"
// with the whole list as JSON at once, then again whenever it changes,
// read every WatchInterval, with keepalive comments while idle. Any replica
// serves it: the list comes from the store.
func (h *handler) watchSnapshots(w http.ResponseWriter, r *http.Request, fetch func() (any, error)) error {
	first, err := fetch()
	if err != nil {
		return err // still a JSON error: nothing written yet
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := h.newStream(w)
	var last []byte
	send := func(v any) error {
		data, err := json.Marshal(v)
		if err != nil || bytes.Equal(data, last) {
			return err
		}
		last = data
		_, err = s.Write(fmt.Appendf(nil, "event: snapshot\ndata: %s\n\n", data))
		return err
	}
	if err := send(first); err != nil {
		return err
	}
	poll := time.NewTicker(h.opts.WatchInterval)
	defer poll.Stop()
	idle := time.Now()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-poll.C:
			v, err := fetch()
			if err != nil {
				return nil // the stream ends; the client reconnects
			}
			before := last
			if err := send(v); err != nil {
				return err
			}
			if !bytes.Equal(before, last) {
				idle = time.Now()
			} else if time.Since(idle) >= h.opts.KeepAlive {
				if _, err := s.Write([]byte(": keepalive\n\n")); err != nil {
					return err
				}
				idle = time.Now()
			}
		}
	}
}

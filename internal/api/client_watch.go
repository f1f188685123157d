package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Watch streams events after since (0: from now) to fn until ctx is done or
// fn returns an error (which Watch returns). When the stream breaks it
// reconnects, on any server, resuming after the last event it delivered;
// an error answer other than 503 ends the watch.
func (c *Client) Watch(ctx context.Context, since int64, fn func(gpufleet.Event) error) error {
	pause := c.backoff
	for {
		delivered, err := c.watchOnce(ctx, &since, fn)
		if ctx.Err() != nil {
			return nil
		}
		var fnErr *watchFnError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable {
			return err
		}
		if delivered {
			pause = c.backoff
		}
		c.log.LogAttrs(ctx, slog.LevelDebug, "event stream broke, reconnecting", slog.Int64("since", since), slog.Any("err", err))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		pause = min(pause*2, c.maxBackoff)
	}
}

type watchFnError struct{ err error }

func (e *watchFnError) Error() string { return e.err.Error() }

// watchOnce reads one event stream; it reports whether any event arrived.
func (c *Client) watchOnce(ctx context.Context, since *int64, fn func(gpufleet.Event) error) (bool, error) {
	v := url.Values{"watch": {"1"}}
	if *since > 0 {
		v.Set("since", strconv.FormatInt(*since, 10))
	}
	resp, cancel, err := c.send(ctx, request{method: http.MethodGet, path: "/api/v1/events", query: v, idempotent: true, stream: true})
	if err != nil {
		return false, err
	}
	defer cancel()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return false, fmt.Errorf("watch events: server answered %q, not an event stream", ct)
	}
	delivered := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() == 0 {
				continue
			}
			var ev gpufleet.Event
			if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
				return delivered, fmt.Errorf("watch events: decode event: %w", err)
			}
			data.Reset()
			if err := fn(ev); err != nil {
				return delivered, &watchFnError{err}
			}
			delivered = true
			if ev.ID > *since {
				*since = ev.ID
			}
		case strings.HasPrefix(line, ":"): // comment: keepalive
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return delivered, fmt.Errorf("watch events: %w", err)
	}
	return delivered, fmt.Errorf("watch events: stream ended")
}

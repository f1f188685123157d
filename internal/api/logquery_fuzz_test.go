package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gpufleet/gpufleet"
)

// FuzzLogQuery sends random query strings to a job's log route (attempt,
// previous, tail, since, since_time, follow): every answer is 200 or a 4xx
// JSON error, never a 5xx or a panic, and what reaches the service passes
// LogQuery.Validate.
func FuzzLogQuery(f *testing.F) {
	for _, s := range []string{"", "tail=5", "since=10m", "since=1d&tail=3", "since_time=2026-12-04T10:00:00Z",
		"since=5m&since_time=2026-12-04T10:00:00Z", "since=-1s", "since=1e300", "since_time=0000-01-01T00:00:00Z",
		"previous=1&attempt=a-1", "tail=99999999999", "follow=1&since=1s", "since=NaN", "since_time=9999-12-31T23:59:59.999999999+14:00"} {
		f.Add(s)
	}
	svc := newMemService()
	svc.jobs["j-1"] = gpufleet.Job{ID: "j-1", Team: "team-a"}
	svc.logs["j-1"] = "a\nb\n"
	h := NewHandler(svc, svc, svc, svc, HandlerOptions{})
	f.Fuzz(func(t *testing.T, query string) {
		svc.mu.Lock()
		svc.lastLogs = LogQuery{}
		svc.mu.Unlock()
		req := httptest.NewRequest("GET", "/api/v1/jobs/j-1/logs", nil)
		req.URL.RawQuery = query
		req.Header.Set("Authorization", "Bearer "+adminTok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code >= 500:
			t.Fatalf("%q: %d %s", query, rec.Code, rec.Body.String())
		case rec.Code >= 400:
			var e struct{ Error, Code string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("%q: %d with a body that is not a JSON error: %s", query, rec.Code, rec.Body.String())
			}
		case rec.Code == http.StatusOK:
			svc.mu.Lock()
			q := svc.lastLogs
			svc.mu.Unlock()
			if err := q.Validate(); err != nil {
				t.Fatalf("%q reached the service as %+v, which is invalid: %v", query, q, err)
			}
		}
	})
}

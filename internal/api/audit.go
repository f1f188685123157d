package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/audit"
)

// AuditQuery is GET /api/v1/audit's parameters: the period, in days.
type AuditQuery struct {
	SinceDays int
}

// AuditService is what the audit route needs; a server without it
// answers 422.
type AuditService interface {
	Audit(ctx context.Context, p Principal, q AuditQuery) (audit.Report, error)
}

// MaxAuditDays is the longest period an audit reads.
const MaxAuditDays = 365

func (h *handler) audit(w http.ResponseWriter, r *http.Request, p Principal) error {
	as, ok := h.svc.(AuditService)
	if !ok {
		return fmt.Errorf("%w: this server audits nothing", gpufleet.ErrUnsupported)
	}
	q := AuditQuery{SinceDays: 30}
	if s := r.URL.Query().Get("since"); s != "" {
		var err error
		if q.SinceDays, err = days("since", s, MaxAuditDays); err != nil {
			return err
		}
	}
	out, err := as.Audit(r.Context(), p, q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// Audit runs an audit of the fleet over the last q.SinceDays (admin).
func (c *Client) Audit(ctx context.Context, q AuditQuery) (audit.Report, error) {
	v := url.Values{}
	if q.SinceDays > 0 {
		v.Set("since", strconv.Itoa(q.SinceDays)+"d")
	}
	var out audit.Report
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/audit", query: v, idempotent: true}, &out)
	return out, err
}

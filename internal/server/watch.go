package server

import (
	"context"
	"strconv"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/store"
)

// Watch streams audit events visible to p, after event id since (0: only
// new ones), until ctx is done. It reads the store, so any replica serves
// it.
func (s *Server) Watch(ctx context.Context, p api.Principal, since int64) (<-chan gpufleet.Event, error) {
	if err := requireUser(p); err != nil {
		return nil, err
	}
	f := store.EventFilter{AfterID: since, Limit: 500}
	if !p.IsAdmin() {
		f.Team = p.Team
	}
	if since == 0 {
		// Start from the newest event.
		last, err := s.st.LastEventID(ctx)
		if err != nil {
			return nil, err
		}
		f.AfterID = last
	}
	ch := make(chan gpufleet.Event, 64)
	go func() {
		defer close(ch)
		t := time.NewTicker(s.cfg.WatchInterval)
		defer t.Stop()
		for {
			evs, err := s.st.Events(ctx, f)
			if err != nil {
				return
			}
			for _, e := range evs {
				select {
				case ch <- e:
				case <-ctx.Done():
					return
				}
				f.AfterID = e.ID
			}
			if len(evs) == f.Limit {
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return ch, nil
}

// Events lists stored audit events visible to p after q.Since, oldest
// first, a page at a time (members see their team's).
func (s *Server) Events(ctx context.Context, p api.Principal, q api.EventQuery) (api.EventList, error) {
	if err := requireUser(p); err != nil {
		return api.EventList{}, err
	}
	limit := q.Limit
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	f := store.EventFilter{AfterID: q.Since, Limit: limit}
	if !p.IsAdmin() {
		f.Team = p.Team
	}
	evs, err := s.st.Events(ctx, f)
	if err != nil {
		return api.EventList{}, err
	}
	out := api.EventList{Events: evs}
	if len(evs) == limit {
		out.NextToken = strconv.FormatInt(evs[len(evs)-1].ID, 10)
	}
	return out, nil
}

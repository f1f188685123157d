package server

import (
	"context"
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
		for {
			evs, err := s.st.Events(ctx, f)
			if err != nil {
				return nil, err
			}
			if len(evs) == 0 {
				break
			}
			f.AfterID = evs[len(evs)-1].ID
		}
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

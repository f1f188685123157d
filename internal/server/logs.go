package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

var _ api.LogService = (*Server)(nil)

// logPath is where an attempt's log is kept on the server.
func (s *Server) logPath(attempt string) string {
	return filepath.Join(s.cfg.LogDir, filepath.Base(attempt)+".log")
}

// Logs writes the log of a job's latest attempt; with follow it keeps
// writing while the attempt runs. Another team's job is not found.
func (s *Server) Logs(ctx context.Context, p api.Principal, jobID string, follow bool, w io.Writer) error {
	j, err := s.Job(ctx, p, jobID)
	if err != nil {
		return err
	}
	if len(j.Attempts) == 0 || s.cfg.LogDir == "" {
		return nil
	}
	attempt := j.Attempts[len(j.Attempts)-1].ID
	var off int64
	for {
		n, err := copyFrom(s.logPath(attempt), off, w)
		off += n
		if err != nil {
			return err
		}
		if !follow {
			return nil
		}
		cur, err := s.st.Job(ctx, jobID)
		if err != nil {
			return err
		}
		if a := cur.Attempts[len(cur.Attempts)-1]; a.ID != attempt || a.State.Terminal() {
			_, err := copyFrom(s.logPath(attempt), off, w)
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.cfg.WatchInterval):
		}
	}
}

// copyFrom copies a file from offset, treating a missing file as empty.
func copyFrom(path string, off int64, w io.Writer) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: log: %v", gpufleet.ErrNotFound, err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	n, err := io.Copy(w, f)
	if f, ok := w.(interface{ Flush() }); ok {
		f.Flush()
	}
	return n, err
}

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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
func (s *Server) Logs(ctx context.Context, p api.Principal, jobID string, q api.LogQuery, w io.Writer) error {
	if err := q.Validate(); err != nil {
		return err
	}
	j, err := s.Job(ctx, p, jobID)
	if err != nil {
		return err
	}
	if len(j.Attempts) == 0 || s.cfg.LogDir == "" {
		return nil
	}
	attempt := j.Attempts[len(j.Attempts)-1].ID
	switch {
	case q.Attempt != "":
		i := slices.IndexFunc(j.Attempts, func(a gpufleet.Attempt) bool { return a.ID == q.Attempt })
		if i < 0 {
			return fmt.Errorf("%w: job %s has no attempt %s", gpufleet.ErrNotFound, gpufleet.Quote(jobID), gpufleet.Quote(q.Attempt))
		}
		attempt = q.Attempt
	case q.Previous:
		if len(j.Attempts) < 2 {
			return fmt.Errorf("%w: job %s has no previous attempt (it has run once)", gpufleet.ErrNotFound, gpufleet.Quote(jobID))
		}
		attempt = j.Attempts[len(j.Attempts)-2].ID
	}
	var off int64
	if q.Tail > 0 {
		if off, err = tailOffset(s.logPath(attempt), q.Tail); err != nil {
			return err
		}
	}
	for {
		n, err := copyFrom(s.logPath(attempt), off, w)
		off += n
		if err != nil {
			return err
		}
		if !q.Follow {
			return nil
		}
		cur, err := s.st.Job(ctx, jobID)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(cur.Attempts, func(a gpufleet.Attempt) bool { return a.ID == attempt })
		if i < 0 || cur.Attempts[i].State.Terminal() || cur.Attempts[len(cur.Attempts)-1].ID != attempt {
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

// tailOffset is the offset of the start of the last n lines of a file (0
// for a shorter or missing file), read backwards in blocks.
func tailOffset(path string, n int) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: log: %v", gpufleet.ErrNotFound, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := st.Size()
	if end == 0 {
		return 0, nil
	}
	// A final newline ends the last line; it does not start another.
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, end-1); err != nil {
		return 0, err
	}
	pos := end
	if last[0] == '\n' {
		pos--
	}
	buf := make([]byte, 64<<10)
	for pos > 0 {
		size := min(int64(len(buf)), pos)
		chunk := buf[:size]
		if _, err := f.ReadAt(chunk, pos-size); err != nil {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] == '\n' {
				if n--; n == 0 {
					return pos - size + int64(i) + 1, nil
				}
			}
		}
		pos -= size
	}
	return 0, nil
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

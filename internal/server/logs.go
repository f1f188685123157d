package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
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
	cutoff := q.SinceTime
	if q.Since > 0 {
		cutoff = s.now().Add(-q.Since)
	}
	if !cutoff.IsZero() {
		since, err := sinceOffset(s.logPath(attempt), cutoff)
		if err != nil {
			return err
		}
		off = max(off, since)
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

// A log's times sit beside it (LOG.times): one 16-byte record per chunk
// received, its offset in the log and when it arrived (Unix nanoseconds),
// little-endian, in arrival order.
const logTimeRecord = 16

// appendLogTime records that the bytes of path from off on arrived at t.
func appendLogTime(path string, off int64, t time.Time) error {
	f, err := os.OpenFile(path+".times", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	var rec [logTimeRecord]byte
	binary.LittleEndian.PutUint64(rec[:8], uint64(off))
	binary.LittleEndian.PutUint64(rec[8:], uint64(t.UnixNano()))
	_, err = f.Write(rec[:])
	return errors.Join(err, f.Close())
}

// sinceOffset is where the lines of path that arrived at or after cutoff
// begin: the start of the line holding the first chunk that arrived then
// (a chunk may begin mid-line; the whole line is kept), the log's end
// when none did, and 0 for a log without times (kept whole).
func sinceOffset(path string, cutoff time.Time) (int64, error) {
	f, size, err := openLog(path + ".times")
	if f == nil || err != nil {
		return 0, err
	}
	defer f.Close()
	// A binary search reading one record a step: a week of a chunk a second
	// is 604,800 records, of which it reads 20.
	var rec [logTimeRecord]byte
	var readErr error
	at := func(i int) (int64, int64) {
		if _, err := f.ReadAt(rec[:], int64(i)*logTimeRecord); err != nil && readErr == nil {
			readErr = err
		}
		return int64(binary.LittleEndian.Uint64(rec[:8])), int64(binary.LittleEndian.Uint64(rec[8:]))
	}
	n := int(size / logTimeRecord)
	i := sort.Search(n, func(i int) bool { _, t := at(i); return t >= cutoff.UnixNano() })
	if readErr != nil {
		return 0, fmt.Errorf("%w: log times: %v", gpufleet.ErrNotFound, readErr)
	}
	if i == n {
		st, err := os.Stat(path)
		if err != nil {
			return 0, nil
		}
		return st.Size(), nil
	}
	off, _ := at(i)
	return lineStart(path, off)
}

// lineStart is the start of the line holding off: just past the newline
// before it, looked for in at most 64 KiB (a longer line starts at off).
func lineStart(path string, off int64) (int64, error) {
	if off == 0 {
		return 0, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return off, nil
	}
	defer f.Close()
	from := max(0, off-64<<10)
	buf := make([]byte, off-from)
	if _, err := f.ReadAt(buf, from); err != nil && !errors.Is(err, io.EOF) {
		return off, nil
	}
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		return from + int64(i) + 1, nil
	}
	if from == 0 {
		return 0, nil
	}
	return off, nil
}

// tailOffset is the offset of the start of the last n lines of a file (0
// for a shorter or missing file), read backwards in blocks.
func tailOffset(path string, n int) (int64, error) {
	f, end, err := openLog(path)
	if f == nil || err != nil {
		return 0, err
	}
	defer f.Close()
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

// openLog opens a log (or its times) with its size; a missing file is no
// file and no error, as a log not yet shipped is empty.
func openLog(path string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%w: log: %v", gpufleet.ErrNotFound, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("log: %w", err)
	}
	return f, st.Size(), nil
}

// copyFrom copies a file from offset, treating a missing file as empty.
func copyFrom(path string, off int64, w io.Writer) (int64, error) {
	f, _, err := openLog(path)
	if f == nil || err != nil {
		return 0, err
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
